// StreamOutputs: where recoded messages are written as raw streams
// (formats/internal/raw_stream.h), each output file atomically (core/base/atomic_file.h).
//
// Two layouts:
//   single   every message goes to one file, `path` (a raw input, or one
//            connection and direction of a capture);
//   split    `path` is a directory (created if missing) that gets one file
//            per connection and direction of a capture, named
//            conn<N>-<client>-to-<sender's peer>.stream after the sender,
//            e.g. conn0-127.0.0.1_53012-to-127.0.0.1_8786.stream.
//
// A message is routed when it is read (route(): it names its file while
// the capture's connection list is at hand) and written later, in order per
// file (write()), possibly from another thread. Writes are buffered: small
// messages cost no system call each; large frames go to the file directly.
// Nothing appears under its final name before commit(); a run that fails
// (or abort()) leaves no output file behind.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daskcaps/base/atomic_file.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/formats/message_source.h"

namespace daskcaps {
class MessageSink;  // core/wire/internal/message_sink.h
}  // namespace daskcaps

namespace daskcaps::formats {

/// One output file, for reports.
struct OutputFile {
  std::string path;
  std::optional<std::size_t> connection;  // split layout
  std::optional<Direction> direction;
  std::size_t messages = 0;
  std::uint64_t bytes = 0;
};

/// Told of every temporary file, for its removal when a signal ends the
/// run: `before` runs just before one is created, `after` just after, with
/// its path ("" when it could not be created), on the same thread. A caller
/// that blocks its signals in `before` and unblocks them in `after` never
/// meets a moment in which a temporary file exists that it does not know.
struct TempHooks {
  std::function<void()> before;
  std::function<void(const std::string&)> after;
};

class StreamOutputs {
 public:
  using Slot = std::size_t;

  /// Single layout when `split` is false (the file is created at once, so
  /// it exists even when no message reaches it), else split under the
  /// directory `path`. `hooks` are told of every temporary file created.
  static Result<std::unique_ptr<StreamOutputs>> create(const std::string& path, bool split, TempHooks hooks = {});
  ~StreamOutputs();

  /// The file `message` goes to, creating it on first use; `connections`
  /// names a capture's connections. Call on the reading thread.
  Result<Slot> route(const SourceMessage& message, const std::vector<ConnectionInfo>& connections);
  /// Appends one message (prelude with the full L, then its frames) to a
  /// slot's file. Calls for one slot must come in order, one at a time.
  Status write(Slot slot, std::span<const Bytes> frames);
  /// Appends one message written in place: `body` writes it through a
  /// MessageSink (core/wire/internal/message_sink.h) at offsets from its first byte
  /// and returns its size, which is where the next message goes (bytes
  /// written past it are cut). Contiguous writes are gathered, as write()
  /// gathers small ones. In order with write() for the same slot.
  Status write_in_place(Slot slot, const std::function<Result<std::uint64_t>(MessageSink&)>& body);
  /// Flushes and renames every file into place.
  Status commit();
  /// Removes every temporary file.
  void abort();

  std::vector<OutputFile> files() const;

 private:
  struct File;
  StreamOutputs(std::string path, bool split, TempHooks hooks);
  Result<Slot> open_file(std::string path, std::optional<std::size_t> connection,
                         std::optional<Direction> direction);

  std::string path_;
  bool split_;
  TempHooks hooks_;
  struct Files;                   // the open files, behind their lock
  std::unique_ptr<Files> files_;  // (the reading and the writing threads share them)
  std::map<std::pair<std::size_t, int>, Slot> keys_;  // (connection, direction) -> slot
};

}  // namespace daskcaps::formats
