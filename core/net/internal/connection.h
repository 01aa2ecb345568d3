// Buffered non-blocking connections on the event loop (core/net/loop.h):
// outgoing (resolve, connect, TLS handshake, all without blocking) and
// accepted (plain or TLS server side), and the listener that accepts them.
//
// Life of a Connection
//
//   connect():  resolving -> connecting -> handshaking -> open -> closed
//   accepted():                            handshaking -> open -> closed
//
//   - resolving: resolve_async (core/net/internal/resolve.h); numeric hosts skip DNS.
//   - connecting: a non-blocking connect to each resolved address in turn;
//     the error of the last one is reported (refused, unreachable, ...).
//   - handshaking: the TLS handshake (a plain stream passes at once).
//   - open: Handler::on_open, then reads and writes.
//   - closed: Handler::on_closed(why), exactly once, unless the owner
//     called close() or destroyed the Connection first.
//   The factories never fail and never call the handler: every outcome,
//   a refused connect included, arrives later through the handler.
//
// Reading: the handler supplies the buffer. While the connection is open,
// not paused and the peer has not finished, each readable event asks
// read_buffer() for where the next bytes go, reads into it and hands the
// bytes to on_read(); it stops when the socket has nothing more, after
// max_read_per_wakeup bytes (other connections' turn; it goes on at the
// next iteration) or when the handler pauses. An empty read_buffer() pauses
// reading as pause_reading() does. No bytes are kept inside a Connection
// between reads: a message assembler can read every message straight into
// its own buffer, and an idle connection holds no read buffer at all.
//
// Writing: send() appends to an output queue of shared buffers (Bytes:
// frames of a message already in memory are queued without a copy). The
// queue is written after the current batch of callbacks, so several sends
// in one callback go out in one writev (plain TCP) or in records of up to
// 16 KiB (TLS). send() never writes half of what it was given and never
// refuses for size: the byte bound is for the caller's back-pressure.
// output_full() is true once queued_bytes() >= max_output_bytes; when the
// queue then drains to half the bound, on_drained() is called. A proxy
// pauses reading from one side while the other side's output_full() and
// resumes in on_drained().
//
// Ending:
//   finish()              flush, then half-close (TLS close_notify, FIN);
//                         reading goes on until the peer finishes too,
//                         then on_closed(ok).
//   close_when_flushed()  flush, half-close, close; then on_closed(ok).
//   close()               now, queued bytes dropped, no callback
//                         (polite for TLS when the handshake was done).
// A peer that finishes its side calls on_read_eof(); the default finishes
// ours (so a plain request/response peer closes cleanly).
//
// Errors are values, given once to on_closed(): Errc::refused, network
// (reset, broken pipe, unreachable), tls (handshake, verification), and
// timeout for the handshake_timeout (resolve + connect + TLS) and the
// idle_timeout (no byte read or written for that long). A failed write
// first asks on_write_error(); by default the connection then closes
// with that error. A handler that returns true keeps reading what the peer
// sent before it went away (a survey reports that rather than the
// broken pipe); the write error is then what on_closed gets once reading
// ends too.
//
// Callbacks run on the loop thread. A handler may call anything from
// inside any callback, including destroying this Connection (the owner
// usually does so in on_closed).
//
// Memory: nothing is allocated up front per connection beyond this object
// and its registration on the loop; the output queue holds only what is
// unsent, and reading uses the handler's buffer. An idle TLS connection
// also keeps OpenSSL's session and the peer's certificate chain. What an
// idle connection costs is measured with 1,000 of them by
// tests/core/net/connection_test.cpp (heap per connection),
// tests/core/net/net_test.cpp (heap of `serve` per client) and
// tests/e2e/test_serve_tls.py (RSS of `serve` per client); the figures
// are in bench/RESULTS.md, "Figures that were in code comments".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "core/net/internal/resolve.h"
#include "daskcaps/net/link_figures.h"
#include "daskcaps/net/loop.h"
#include "core/net/internal/socket.h"

namespace daskcaps::net {

class TlsClientContext;
class TlsServerContext;

struct ConnectionOptions {
  /// The output queue's bound for back-pressure (output_full()).
  std::size_t max_output_bytes = std::size_t{4} << 20;
  /// Resolve + connect + TLS handshake must finish within this (0: no limit).
  std::chrono::milliseconds handshake_timeout{0};
  /// Closed with Errc::timeout after this long without a byte read or
  /// written, once open (0: never).
  std::chrono::milliseconds idle_timeout{0};
  /// Bytes read per readable event before other fds get their turn.
  std::size_t max_read_per_wakeup = std::size_t{256} << 10;
};

class Connection {
 public:
  enum class Stage : std::uint8_t { resolving, connecting, handshaking, open, closed };

  class Handler {
   public:
    virtual ~Handler() = default;
    /// Connected and, for TLS, the handshake done.
    virtual void on_open(Connection&) {}
    /// Where the next bytes go; empty: pause reading.
    virtual std::span<std::uint8_t> read_buffer(Connection&) = 0;
    /// `data` is the front of the last read_buffer(), filled.
    virtual void on_read(Connection&, ByteSpan data) = 0;
    /// The peer finished sending (FIN or close_notify). Default: finish().
    virtual void on_read_eof(Connection& c) { c.finish(); }
    /// The output queue drained to half its bound after output_full().
    virtual void on_drained(Connection&) {}
    /// A write failed (the queue is dropped, nothing more is written).
    /// False (default): close with `error`; true: keep reading.
    virtual bool on_write_error(Connection&, const Error&) { return false; }
    /// The end: ok for a clean close, else the error. The last callback.
    virtual void on_closed(Connection&, const Status& why) = 0;
  };

  /// An outgoing connection to `address` (tcp:// or tls://; tls:// needs
  /// `tls`, else on_closed gets Errc::usage). `resolved`, when not empty,
  /// replaces the name lookup (the survey resolves each name once).
  /// `tls` must outlive the connection.
  static std::unique_ptr<Connection> connect(Loop& loop, const Address& address, Handler& handler,
                                             const ConnectionOptions& options = {},
                                             const TlsClientContext* tls = nullptr,
                                             std::vector<sockaddr_storage> resolved = {});
  /// A connection over an accepted socket (Listener), the server side of
  /// TLS when `tls` is given (it must outlive the connection).
  static std::unique_ptr<Connection> accepted(Loop& loop, Socket socket, Handler& handler,
                                              const ConnectionOptions& options = {},
                                              const TlsServerContext* tls = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Queues bytes to send (before open they wait for it). False, and
  /// nothing queued, once the connection is closed, finishing or its write
  /// side failed.
  bool send(Bytes data);
  bool send(Buffer data) { return send(Bytes(std::move(data))); }
  bool send_copy(ByteSpan data) { return send(Bytes::copy_of(data)); }
  std::size_t queued_bytes() const { return queued_; }
  bool output_full() const { return queued_ >= options_.max_output_bytes; }

  void pause_reading();
  void resume_reading();
  bool reading_paused() const { return paused_; }

  void finish();
  void close_when_flushed();
  void close();

  Stage stage() const { return stage_; }
  bool is_open() const { return stage_ == Stage::open; }
  /// "127.0.0.1:8786": the address dialled (as given), or the accepted peer.
  const std::string& peer() const { return peer_; }
  std::string peer_ip() const;
  std::string local_ip() const;
  /// TCP_INFO of its socket (core/net/link_figures.h, TLS too: the socket
  /// under it); nullopt before it is connected, after it closed, or where
  /// the socket gives none.
  std::optional<LinkFigures> link_figures() const;
  std::uint64_t bytes_read() const { return bytes_read_; }
  std::uint64_t bytes_written() const { return bytes_written_; }
  /// Hands the callbacks to another handler (a proxy pairing two sides).
  void set_handler(Handler& handler) { handler_ = &handler; }

 private:
  Connection(Loop& loop, Handler& handler, const ConnectionOptions& options);
  using Token = std::shared_ptr<Connection*>;

  void on_ready(std::uint32_t ready);
  void on_resolved(Result<std::vector<sockaddr_storage>> r);
  void try_next_address();
  void on_connect_ready();
  void start_stream(std::unique_ptr<Stream> stream);
  void do_handshake();
  void become_open();
  void do_read();
  void flush();
  void write_failed(Error e);
  void after_write();
  void schedule_flush();
  void schedule_read();
  void update_interest();
  bool register_fd(std::uint32_t interest);
  void unregister_fd();
  void arm_idle_timer(Clock::time_point at);
  void on_idle_timer();
  void on_handshake_timeout();
  void fail(Error e);
  void close_quietly();
  int fd() const;

  Loop& loop_;
  Handler* handler_;
  ConnectionOptions options_;
  Token token_;
  Stage stage_ = Stage::resolving;
  std::string peer_;
  std::string host_;  // for TLS SNI and messages
  bool want_tls_ = false;
  const TlsClientContext* client_tls_ = nullptr;
  ResolveRequest resolve_;
  std::vector<sockaddr_storage> addrs_;
  std::size_t next_addr_ = 0;
  Error last_error_;
  Socket connecting_;
  std::unique_ptr<Stream> stream_;
  int reg_fd_ = -1;  // the fd on the loop, -1 when none (or parked)
  std::uint32_t handshake_wants_ = 0;

  std::vector<Bytes> out_;
  std::size_t out_head_ = 0;    // first unsent entry
  std::size_t out_offset_ = 0;  // bytes of out_[out_head_] already sent
  std::size_t queued_ = 0;

  bool paused_ = false;
  bool read_eof_ = false;
  bool write_blocked_ = false;      // a write wanted the fd writable
  bool write_wants_read_ = false;   // TLS: a write wanted the fd readable
  bool read_wants_write_ = false;   // TLS: a read wanted the fd writable
  bool finishing_ = false;
  bool close_after_flush_ = false;
  bool write_shut_ = false;
  bool write_dead_ = false;
  bool was_full_ = false;
  bool flush_scheduled_ = false;
  bool read_scheduled_ = false;
  Error write_error_;

  Timer handshake_timer_;
  Timer idle_timer_;
  Clock::time_point last_active_{};
  std::uint64_t bytes_read_ = 0;
  std::uint64_t bytes_written_ = 0;
};

/// A listening socket on the loop. Each accepted socket (non-blocking,
/// TCP_NODELAY) goes to the callback, which adopts it (usually with
/// Connection::accepted) or drops it (closing it). When the process runs
/// out of file descriptors the listener pauses for 100 ms instead of
/// spinning on a readable listen queue.
class Listener {
 public:
  using AcceptCallback = std::function<void(Socket)>;
  /// Binds and listens on `address` (its scheme is kept in address(), TLS
  /// is the caller's). Errors: Errc::network (in use, cannot resolve, ...).
  static Result<std::unique_ptr<Listener>> start(Loop& loop, const Address& address, AcceptCallback on_accept,
                                                 int backlog = 1024);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  /// The bound address, with the real port.
  const Address& address() const { return address_; }

 private:
  Listener(Loop& loop) : loop_(loop) {}
  void on_ready();

  Loop& loop_;
  Socket socket_;
  Address address_;
  AcceptCallback on_accept_;
  Timer pause_timer_;
  std::shared_ptr<Listener*> token_;
};

}  // namespace daskcaps::net
