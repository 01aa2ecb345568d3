// MessageSource: one way to open an input and read its Dask messages,
// whatever the file is.
//
//   auto src = MessageSource::open("dump.pcap", limits, {});
//   if (!src) return src.error();            // io, bad_magic, bad header
//   while (true) {
//     auto m = (*src)->next();                // Result<optional<SourceMessage>>
//     if (!m) return m.error();              // bad input: the offset says where
//     if (!*m) break;                        // end of input
//     use(**m);                              // raw (offset, frames), index, connection, ...
//   }
//   (*src)->format();  (*src)->connections();  (*src)->warnings();
//
// The file is sniffed once, from its first bytes:
//   pcap    libpcap magic (either byte order, micro- or nanosecond)
//   pcapng  a section header block
//   raw     the bytes one side of a Dask comm wrote (formats/internal/raw_stream.h):
//           the first 16 bytes must be a plausible message prelude
// anything else is Errc::bad_magic at offset 0, naming what was expected.
// An empty file is a raw stream with no messages. Standard input ("-") is
// read as a raw stream.
//
// Every source yields the same message type. For a capture, messages come in
// capture order across connections (formats/internal/capture.h) with their connection
// and direction; a raw stream has neither.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/raw_message.h"
#include "daskcaps/formats/capture_options.h"

namespace daskcaps::formats {

enum class InputFormat : std::uint8_t { raw, pcap, pcapng };

/// "raw", "pcap", "pcapng".
std::string_view to_string(InputFormat format);

/// One message of any input: the message (its offset, wire size and frames
/// are in its own stream: a raw file, or a capture direction's bytes) and
/// where the input had it.
struct SourceMessage {
  RawMessage raw;
  std::size_t index = 0;        // position in the input, from 0
  std::uint64_t skipped_before = 0;  // capture: bytes in no message right before it
  // Captures only.
  std::optional<std::size_t> connection;
  std::optional<Direction> direction;
  std::optional<double> timestamp;  // capture time of the packet that completed it
  /// The first message of its stream (a raw file's first; a capture
  /// direction's first, captured from its SYN): the Dask handshake (docs/protocol.md §2).
  bool at_stream_start = false;
};

struct SourceOptions {
  /// For captures: ports, the connection and direction wanted, windows.
  CaptureOptions capture;
  /// Raw stream files: a message of at least this many bytes is read from
  /// its frame 0 and sub-headers only, its other frames left in the file
  /// (formats/internal/raw_stream.h); 0: every message is read whole.
  std::uint64_t store_bytes = 0;
};

class MessageSource {
 public:
  /// Opens and sniffs `path` ("-": standard input, a raw stream).
  static Result<std::unique_ptr<MessageSource>> open(const std::string& path, const Limits& limits,
                                                     const SourceOptions& options = {});
  virtual ~MessageSource() = default;

  /// The next message, nullopt at the end, or an error with its offset.
  /// After an error every call returns an error.
  virtual Result<std::optional<SourceMessage>> next() = 0;

  virtual InputFormat format() const = 0;
  bool is_capture() const { return format() != InputFormat::raw; }
  /// The connections seen (captures; all of them once next() gave nullopt);
  /// empty for a raw stream.
  virtual const std::vector<ConnectionInfo>& connections() const;
  /// Recoverable problems met so far (captures: formats/internal/capture.h lists
  /// them), each with its kind; empty for a raw stream.
  virtual std::vector<Diagnostic> warnings() const { return {}; }
};

}  // namespace daskcaps::formats
