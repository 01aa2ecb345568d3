// The Dask conversation of core/net/rpc.h, without I/O: the handshake
// exchange, `identity`, `versions`, a polite close (docs/protocol.md §2, §7).
//
// ClientSession is sans-I/O: it owns the bytes to send and consumes the bytes
// received, so the blocking driver (run_session over a net::Transport, or a
// scripted one in tests) and the concurrent survey (core/net/rpc.h) share it.
// Everything we send is ready at once, because every Dask release serves
// pipelined requests in order (docs/protocol.md §2.1, §7.2):
//
//   1. our handshake  {"compression": …, "python": […], "pickle-protocol": N,
//                      + extra keys, e.g. "capabilities"}  (Dask ignores extras)
//   2. {"op": "identity", "reply": true}            (2022.12 takes no argument)
//   3. {"op": "versions", "reply": true, "packages": ["zstandard", "python-snappy"]}
//   4. {"op": "close", "reply": false}              (the rpc object's goodbye)
//
// and it reads, in order: the peer's handshake (2022.12 listeners write it
// before reading ours; newer ones write it at once too), the identity reply,
// the versions reply. A reply is a value, nil (the peer has no handler for
// the op: docs/protocol.md §7.2) or an uncaught-error map whose exception_text we keep
// (docs/protocol.md §7.5).
//
// Messages are cut with core/wire/internal/frame_decoder.h decode_frames under the caller's
// Limits, so a declared length of 2^60 is an error before any allocation,
// and memory grows only with bytes actually received.
//
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/wire/internal/frame_decoder.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/net/rpc.h"
#include "core/net/internal/socket.h"
#include "core/wire/internal/assembler.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps::rpc {

/// Classifies a decoded reply (docs/protocol.md §7.2, §7.5).
Reply parse_reply(const msgpack::Value& frame0);

/// "2 s", "0.5 s", "150 ms" for messages.
std::string duration_text(std::chrono::milliseconds d);

/// A whole message with one msgpack frame (prelude with the full L).
Buffer encode_msgpack_message(const msgpack::Value& frame0);
/// A request {"op": op, "reply": reply, args...} as one message.
Buffer encode_request(std::string_view op, bool reply, msgpack::Map args = {});

/// Whole messages out of a byte stream fed in arbitrary chunks: the message
/// assembler (core/wire/internal/assembler.h), with its errors as protocol errors.
/// Sockets may read straight into buffer() and commit(); push() copies.
class MessageReader {
 public:
  explicit MessageReader(const Limits& limits) : assembler_(limits) {}
  void push(ByteSpan data) { assembler_.push(data); }
  std::span<std::uint8_t> buffer() { return assembler_.buffer(); }
  void commit(std::size_t n) { assembler_.commit(n); }
  /// The frames of the next complete message (slices of the buffer it was
  /// read into), nullopt when more bytes are needed, or an error
  /// (Errc::protocol, with the stream offset) for bytes that are not a Dask
  /// message. After an error the reader stays failed.
  Result<std::optional<std::vector<Bytes>>> next();
  /// Bytes held of a message not yet complete.
  std::uint64_t buffered() const { return assembler_.buffered(); }
  /// Total size of the message in progress once its length table is in,
  /// else 0.
  std::uint64_t expected() const { return assembler_.expected(); }
  /// Stream offset of the next unconsumed byte.
  std::uint64_t offset() const { return assembler_.offset(); }
  /// Gives the read buffer back while no message is in progress.
  void release_idle() { assembler_.release_idle(); }

 private:
  MessageAssembler assembler_;
};

class ClientSession {
 public:
  enum class Stage : std::uint8_t { handshake, identity, versions, done };

  explicit ClientSession(const SessionOptions& options);

  /// Bytes still to send; wrote(n) consumes them.
  ByteSpan pending_output() const { return ByteSpan(out_).subspan(out_pos_); }
  void wrote(std::size_t n) { out_pos_ += n; }

  /// Consumes received bytes, parsing every message they complete.
  Status received(ByteSpan data);
  /// The peer closed its side (or reset the connection): fine when done,
  /// an error that says at which point otherwise.
  Status received_eof(bool reset = false);

  Stage stage() const { return stage_; }
  bool done() const { return stage_ == Stage::done; }
  /// "the peer's handshake", "the reply to identity", ... for messages.
  std::string waiting_for() const;
  /// Bytes received so far, and of the message in progress.
  std::uint64_t bytes_received() const { return reader_.offset() + reader_.buffered(); }

  const Exchange& exchange() const { return exchange_; }
  Exchange take_exchange() { return std::move(exchange_); }

 private:
  Status on_message(std::vector<Bytes> frames);
  void advance();

  SessionOptions options_;
  Buffer out_;
  std::size_t out_pos_ = 0;
  MessageReader reader_;
  Stage stage_ = Stage::handshake;
  Exchange exchange_;
};

/// Drives a session over a connected transport until it is done, the peer
/// fails, or the deadline passes. `timeout_text` ("2 s") goes into timeout
/// messages. `identity_at` receives the time the identity reply arrived.
Status run_session(net::Transport& transport, ClientSession& session, net::Deadline deadline,
                   std::string_view timeout_text, net::Clock::time_point* identity_at = nullptr);

/// The error for a deadline that passed while `session` waited.
Error timeout_error(const ClientSession& session, std::string_view peer, std::string_view timeout_text);

}  // namespace daskcaps::rpc
