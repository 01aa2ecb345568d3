// Sockets and byte streams: owned fds, non-blocking connect and listen, one
// non-blocking Stream interface over plain TCP and TLS (core/net/tls.h), and
// a blocking, deadline-bounded Transport on top of one Stream.
//
// Every socket here is non-blocking (SOCK_NONBLOCK | SOCK_CLOEXEC) with
// TCP_NODELAY; nothing ever raises SIGPIPE (send(MSG_NOSIGNAL), and TLS
// writes go through the same call).
//
// A Stream answers each step with an IoStep:
//   done(n)      n bytes moved (handshake: finished)
//   want_read    retry once the fd is readable (TLS may want this on write)
//   want_write   retry once the fd is writable (TLS may want this on read)
//   eof          the peer finished its side (FIN, or a TLS close_notify)
//   error        Errc::network (reset, broken pipe, ...) or Errc::tls
// The event loop's connections (core/net/internal/connection.h) drive Streams from
// epoll; Transport waits on one with poll() for code that reads and writes
// in order (core/net/rpc.h query_endpoint). Tests replace Transport with
// scripted chunks (docs/design.md §9.3).
//
// Errors:
//   Errc::network  name resolution failed, host/network unreachable, reset
//   Errc::refused  connection refused (nothing listens there)
//   Errc::timeout  a deadline passed (the message says at which stage)
//   Errc::tls      TLS setup, handshake or certificate verification failed
//   Errc::protocol the peer's bytes are not Dask's (core/net/rpc.h)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <sys/socket.h>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/net/address.h"
#include "core/net/internal/clock.h"

namespace daskcaps::net {

class TlsClientContext;

/// The `what` of the Errc::network error a read gives when the peer resets
/// the connection (TCP RST, e.g. it closed with our bytes unread). Callers
/// that track a conversation treat it like end of stream.
inline constexpr std::string_view kConnectionReset = "connection reset by the peer";
bool is_connection_reset(const Error& e);

/// An owned file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.release()) {}
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { reset(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

/// Starts a non-blocking connect (TCP_NODELAY set). The socket becomes
/// writable when the connect finishes; then call finish_connect. Errors
/// found at once (e.g. an unreachable network) come back here.
Result<Socket> start_connect(const sockaddr_storage& addr);
/// Reads the outcome of a connect started above (SO_ERROR): Errc::refused,
/// Errc::timeout (the kernel's), Errc::network.
Status finish_connect(const Socket& socket, std::string_view peer);

/// A listening TCP socket bound to host:port (port 0: the kernel picks),
/// non-blocking, SO_REUSEADDR. Errors: Errc::network with the reason
/// (address in use, cannot resolve, ...).
Result<Socket> listen_tcp(const Address& address, int backlog = 1024);
/// The address a listening socket is bound to, with its real port.
Result<Address> bound_address(const Socket& socket, Scheme scheme);

/// True when a connected socket's local and peer IPs are equal: what Dask
/// 2023.5 and later take for "the peer is on this host" (Comm.same_host).
/// False when either cannot be read.
bool same_host(const Socket& connected);

/// The outcome of one non-blocking step.
struct IoStep {
  enum class Kind : std::uint8_t { done, want_read, want_write, eof, error };
  Kind kind = Kind::done;
  std::size_t bytes = 0;  // bytes moved (done)
  Error error;            // error

  static IoStep done(std::size_t n = 0) { return {Kind::done, n, {}}; }
  static IoStep want_read() { return {Kind::want_read, 0, {}}; }
  static IoStep want_write() { return {Kind::want_write, 0, {}}; }
  static IoStep eof() { return {Kind::eof, 0, {}}; }
  static IoStep failed(Error e) { return {Kind::error, 0, std::move(e)}; }
};

/// One connected, non-blocking byte stream.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual int fd() const = 0;
  /// Advances the TLS handshake; a plain stream is done at once.
  virtual IoStep handshake() = 0;
  virtual IoStep read(std::span<std::uint8_t> out) = 0;
  virtual IoStep write(ByteSpan data) = 0;
  /// Writes from several buffers in order (done(n): n bytes of them, taken
  /// from the front). Plain TCP uses one sendmsg; TLS packs small buffers
  /// into records of up to 16 KiB.
  virtual IoStep writev(std::span<const ByteSpan> data);
  /// True when bytes already decrypted wait inside the stream (TLS), so a
  /// read would succeed though the fd is not readable.
  virtual bool has_buffered_input() const { return false; }
  /// Sends a TLS close_notify where possible and shuts down our sending
  /// side (FIN); never blocks, best effort. Reading stays possible.
  virtual void shutdown() = 0;
  /// Address of the peer and of our end, as IP strings.
  virtual std::string peer_ip() const = 0;
  virtual std::string local_ip() const = 0;
};

/// A plain TCP stream over a connected socket.
std::unique_ptr<Stream> make_plain_stream(Socket socket);

/// Blocking, deadline-bounded reads and writes on one connection.
class Transport {
 public:
  virtual ~Transport() = default;
  /// Reads at least one byte (at most out.size()) before the deadline;
  /// 0 means the peer closed the connection. Errc::timeout when the
  /// deadline passes first.
  virtual Result<std::size_t> read_some(std::span<std::uint8_t> out, Deadline deadline) = 0;
  /// Writes every byte before the deadline.
  virtual Status write_all(ByteSpan data, Deadline deadline) = 0;
  /// Closes the connection (politely for TLS); idempotent.
  virtual void close() = 0;
  /// "127.0.0.1:8786", for messages.
  virtual std::string peer() const = 0;
};

/// A Transport over a connected Stream.
class StreamTransport final : public Transport {
 public:
  StreamTransport(std::unique_ptr<Stream> stream, std::string peer)
      : stream_(std::move(stream)), peer_(std::move(peer)) {}
  ~StreamTransport() override { close(); }
  Result<std::size_t> read_some(std::span<std::uint8_t> out, Deadline deadline) override;
  Status write_all(ByteSpan data, Deadline deadline) override;
  void close() override;
  std::string peer() const override { return peer_; }
  const Stream* stream() const { return stream_.get(); }

 private:
  std::unique_ptr<Stream> stream_;
  std::string peer_;
};

/// Waits until `stream` can make progress for `step` (want_read or
/// want_write) or the deadline passes (Errc::timeout with `stage`).
Status wait_for(const Stream& stream, const IoStep& step, Deadline deadline, std::string_view stage);

/// Resolves, connects (each resolved address in turn), and completes the
/// TLS handshake for tls:// addresses (`tls` must then be given), all
/// before `deadline`. Blocking: for one-off queries, never on a loop.
Result<std::unique_ptr<StreamTransport>> connect(const Address& address, Deadline deadline,
                                                 const TlsClientContext* tls);

}  // namespace daskcaps::net
