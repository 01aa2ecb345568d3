// CaptureQueue: a pcapng capture (formats/internal/pcapng_writer.h) written by a
// thread of its own, so that writing it never stalls the caller (the
// bridge's event loop, which forwards a large message piece by piece as it
// arrives). Like core/base/line_log.h, for bytes.
//
// The caller hands over what it forwards as it forwards it: Bytes (shared,
// not copied; their memory must not change afterwards) with the time. They
// wait in a queue of at most max_queued_bytes. What does not fit is
// dropped, never waited for:
//   * its flow's sequence numbers still move past it (PcapngWriter::skip),
//     so the capture shows a gap there, as a capture that lost packets does
//     (readers see missing segments; `inspect` resynchronises);
//   * that direction then drops everything up to the next message start, so
//     what is written of it is whole messages;
//   * dropped() counts the bytes and pieces, and take_notice() returns one
//     line for each run of drops (for a log), the first when it starts.
// An error of the file (a full disk) stops the writing: later bytes are
// dropped the same way, and finish() returns that error.
//
// Flow ids are given at once (open_flow() never blocks or fails); a flow
// whose endpoints do not parse is an error of the file, as above.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps::formats {

class CaptureQueue {
 public:
  struct Options {
    std::size_t max_queued_bytes = std::size_t{256} << 20;
    /// Runs on the writing thread before each queued item (tests hold the
    /// thread with it to fill the queue).
    std::function<void()> before_item;
  };
  /// Creates the file (atomically: it appears at finish()) and starts the
  /// writing thread. Errors: those of PcapngWriter::create().
  static Result<std::unique_ptr<CaptureQueue>> create(const std::string& path, const Options& options);
  /// Without finish(): stops the thread; the file does not appear.
  ~CaptureQueue();
  CaptureQueue(const CaptureQueue&) = delete;
  CaptureQueue& operator=(const CaptureQueue&) = delete;

  using FlowId = std::size_t;
  /// A new connection ("ip:port" each end), its handshake at `ts`.
  FlowId open_flow(std::string client, std::string server, double ts);
  /// Bytes sent on a flow, in order, the pieces one stream;
  /// `message_start`: the first piece begins a Dask message. Returns false
  /// when they were dropped.
  bool write(FlowId flow, bool from_client, std::span<const Bytes> pieces, bool message_start, double ts);
  /// FIN from both ends.
  void close_flow(FlowId flow, double ts);
  /// Waits until everything queued is written, closes every flow and
  /// commits the file. The first error of the file, if there was one.
  Status finish(double ts);

  struct Dropped {
    std::uint64_t bytes = 0;
    std::uint64_t pieces = 0;
  };
  Dropped dropped() const;
  /// One line when bytes began to be dropped since the last call.
  std::optional<std::string> take_notice();

 private:
  struct State;
  explicit CaptureQueue(std::shared_ptr<State> state);
  static void run(std::shared_ptr<State> s);
  std::shared_ptr<State> state_;  // with the writing thread
};

}  // namespace daskcaps::formats
