// Network transport for Dask comms: addresses, TCP and TLS byte streams,
// and a blocking Transport with deadlines on top of them.
//
// Addresses (spec §1.1): "tcp://host:port", "tls://host:port" or
// "host:port" (tcp); IPv6 hosts in brackets ("tcp://[::1]:8786"); host
// names are resolved with getaddrinfo on a helper thread so a slow resolver
// is bounded by the caller's deadline too. The port is required, as in
// Dask's client.
//
// Sockets are non-blocking; waiting is done with poll() against a deadline,
// so every call returns by its deadline: nothing here can hang. A Stream is
// one non-blocking connection (plain or TLS) that answers "done", "would
// block on read/write", "end of stream" or an error at each step; the
// concurrent survey (core/net/survey.h) and the server (core/server.h) drive
// many of them from one poll loop, while Transport wraps one of them for
// code that reads and writes in order (core/net/rpc.h). Tests replace Transport
// with scripted chunks (style §5.7).
//
// TLS (spec §1.6) uses OpenSSL with the inputs of Dask's TLS settings: a CA
// file, a certificate and its key. TLS 1.2 is the minimum, as Dask's
// distributed.comm.tls.min-version. The peer's certificate chain is always
// verified, against the CA file or, without one, the system store. Like
// Dask (ssl.create_default_context with check_hostname = False) the host
// name is NOT matched against the certificate: Dask clusters commonly use
// one certificate for every worker, whose addresses are IPs chosen at start.
// SNI carries the host name when the address has one.
//
// Errors (all map to exit code 4):
//   Errc::network  name resolution failed, host/network unreachable, reset
//   Errc::refused  connection refused (nothing listens there)
//   Errc::timeout  a deadline passed (the message says at which stage)
//   Errc::tls      TLS setup, handshake or certificate verification failed
//   Errc::protocol the peer's bytes are not Dask's (core/net/rpc.h)
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sys/socket.h>

#include "core/base/bytes.h"
#include "core/base/result.h"

namespace daskcaps::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

/// Milliseconds left until `deadline` (0 when passed), for poll().
int millis_until(Deadline deadline);

/// The `what` of the Errc::network error a read gives when the peer resets
/// the connection (TCP RST, e.g. it closed with our bytes unread). Callers
/// that track a conversation treat it like end of stream.
inline constexpr std::string_view kConnectionReset = "connection reset by the peer";
bool is_connection_reset(const Error& e);

enum class Scheme : std::uint8_t { tcp, tls };

struct Address {
  Scheme scheme = Scheme::tcp;
  std::string host;  // "127.0.0.1", "::1" (no brackets), "node1"
  std::uint16_t port = 0;

  /// "tcp://127.0.0.1:8786", "tls://[::1]:8786".
  std::string to_string() const;
  /// "127.0.0.1:8786", "[::1]:8786".
  std::string host_port() const;
  bool operator==(const Address&) const = default;
};

/// Parses an address as Dask writes it. Errc::usage for an unknown scheme
/// ("ws://" and others are not supported), a missing or bad port, or an
/// empty host.
Result<Address> parse_address(std::string_view text);

/// "127.0.0.1" / "::1" for a socket address.
std::string ip_string(const sockaddr_storage& addr);

/// Resolves host:port to socket addresses (numeric hosts without DNS).
/// Errors: Errc::network ("cannot resolve host ..."), Errc::timeout.
Result<std::vector<sockaddr_storage>> resolve(const Address& address, Deadline deadline);

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
/// writable when the connect finishes; then call finish_connect.
Result<Socket> start_connect(const sockaddr_storage& addr);
/// Reads the outcome of a connect started above (SO_ERROR).
Status finish_connect(const Socket& socket, std::string_view peer);

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
  /// Sends a TLS close_notify where possible; never blocks.
  virtual void shutdown() = 0;
  /// Address of the peer and of our end, as IP strings.
  virtual std::string peer_ip() const = 0;
  virtual std::string local_ip() const = 0;
};

/// A plain TCP stream over a connected socket.
std::unique_ptr<Stream> make_plain_stream(Socket socket);

struct TlsOptions {
  std::string ca_file;    // --tls-ca-file; empty: the system's CA store
  std::string cert_file;  // --tls-cert (PEM, may hold the key too)
  std::string key_file;   // --tls-key; empty: the key is in cert_file
};

/// An OpenSSL client context, shared by every connection of a check.
class TlsClientContext {
 public:
  /// Loads the CA, certificate and key. Errc::tls when a file cannot be
  /// read or the key does not match the certificate.
  static Result<std::shared_ptr<TlsClientContext>> create(const TlsOptions& options);
  ~TlsClientContext();
  TlsClientContext(const TlsClientContext&) = delete;
  TlsClientContext& operator=(const TlsClientContext&) = delete;
  /// A TLS stream over a connected socket; `server_name` goes into SNI when
  /// it is a host name. Hints in error messages mention `ca_given`.
  Result<std::unique_ptr<Stream>> wrap(Socket socket, const std::string& server_name) const;

 private:
  TlsClientContext() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

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
/// TLS handshake for tls:// addresses (`tls` must then be given).
Result<std::unique_ptr<StreamTransport>> connect(const Address& address, Deadline deadline,
                                                 const TlsClientContext* tls);

/// A listening TCP socket bound to host:port (port 0: the kernel picks).
/// Errors: Errc::network with the reason (address in use, ...).
Result<Socket> listen_tcp(const Address& address, int backlog = 1024);
/// The address a listening socket is bound to, with its real port.
Result<Address> bound_address(const Socket& socket, Scheme scheme);

}  // namespace daskcaps::net
