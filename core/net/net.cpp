#include "core/net/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace daskcaps::net {

namespace {

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer.
  return std::string(strerror_r(err, buf, sizeof buf));
}

/// The error for a failed connect or socket call, by errno.
Error connect_error(int err, std::string_view peer) {
  const std::string p(peer);
  switch (err) {
    case ECONNREFUSED:
      return make_error(Errc::refused, "connection refused by " + p + " (nothing listens there)");
    case ETIMEDOUT:
      return make_error(Errc::timeout, "connecting to " + p + " timed out in the kernel");
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
      return make_error(Errc::network, "cannot reach " + p + ": " + errno_text(err));
    default:
      return make_error(Errc::network, "cannot connect to " + p + ": " + errno_text(err));
  }
}

bool is_numeric_host(const std::string& host, sockaddr_storage& out, std::uint16_t port) {
  std::memset(&out, 0, sizeof out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return true;
  }
  return false;
}

std::string sockaddr_text(const sockaddr_storage& addr) {
  const std::string ip = ip_string(addr);
  std::uint16_t port = 0;
  if (addr.ss_family == AF_INET) port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  if (addr.ss_family == AF_INET6) port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return (addr.ss_family == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

std::string local_or_peer_ip(int fd, bool peer) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return "";
  return ip_string(addr);
}

// ---- plain TCP ----------------------------------------------------------

class PlainStream final : public Stream {
 public:
  explicit PlainStream(Socket s) : socket_(std::move(s)) {}
  int fd() const override { return socket_.fd(); }
  IoStep handshake() override { return IoStep::done(); }
  IoStep read(std::span<std::uint8_t> out) override {
    for (;;) {
      const ssize_t n = ::recv(socket_.fd(), out.data(), out.size(), 0);
      if (n > 0) return IoStep::done(static_cast<std::size_t>(n));
      if (n == 0) return IoStep::eof();
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStep::want_read();
      if (errno == ECONNRESET) return IoStep::failed(make_error(Errc::network, std::string(kConnectionReset)));
      return IoStep::failed(make_error(Errc::network, "read failed: " + errno_text(errno)));
    }
  }
  IoStep write(ByteSpan data) override {
    for (;;) {
      const ssize_t n = ::send(socket_.fd(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n >= 0) return IoStep::done(static_cast<std::size_t>(n));
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStep::want_write();
      if (errno == EPIPE || errno == ECONNRESET)
        return IoStep::failed(make_error(Errc::network, "the peer closed the connection while we wrote"));
      return IoStep::failed(make_error(Errc::network, "write failed: " + errno_text(errno)));
    }
  }
  void shutdown() override { ::shutdown(socket_.fd(), SHUT_WR); }
  std::string peer_ip() const override { return local_or_peer_ip(socket_.fd(), true); }
  std::string local_ip() const override { return local_or_peer_ip(socket_.fd(), false); }

 private:
  Socket socket_;
};

// ---- TLS ----------------------------------------------------------------

std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    std::string text = reason ? reason : ("error 0x" + [&] {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%lx", e);
      return std::string(buf);
    }());
    if (out.find(text) == std::string::npos) out += (out.empty() ? "" : "; ") + text;
  }
  return out;
}

/// Blocks SIGPIPE around an OpenSSL write (which uses write(2), not
/// send(MSG_NOSIGNAL)), and swallows one raised by that write.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

class TlsStream final : public Stream {
 public:
  TlsStream(Socket s, SSL* ssl, bool ca_given, bool cert_given)
      : socket_(std::move(s)), ssl_(ssl), ca_given_(ca_given), cert_given_(cert_given) {}
  ~TlsStream() override { SSL_free(ssl_); }
  int fd() const override { return socket_.fd(); }

  IoStep handshake() override {
    ERR_clear_error();
    const int rc = SSL_do_handshake(ssl_);
    if (rc == 1) return IoStep::done();
    return failure(rc, "TLS handshake");
  }
  IoStep read(std::span<std::uint8_t> out) override {
    ERR_clear_error();
    std::size_t n = 0;
    const int rc = SSL_read_ex(ssl_, out.data(), out.size(), &n);
    if (rc == 1) return IoStep::done(n);
    return failure(rc, "TLS read");
  }
  IoStep write(ByteSpan data) override {
    ERR_clear_error();
    std::size_t n = 0;
    int rc;
    {
      SigpipeGuard guard;
      rc = SSL_write_ex(ssl_, data.data(), data.size(), &n);
    }
    if (rc == 1) return IoStep::done(n);
    return failure(rc, "TLS write");
  }
  void shutdown() override {
    ERR_clear_error();
    SigpipeGuard guard;
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
  std::string peer_ip() const override { return local_or_peer_ip(socket_.fd(), true); }
  std::string local_ip() const override { return local_or_peer_ip(socket_.fd(), false); }

 private:
  IoStep failure(int rc, std::string_view stage) {
    const int saved_errno = errno;
    const int err = SSL_get_error(ssl_, rc);
    switch (err) {
      case SSL_ERROR_WANT_READ: return IoStep::want_read();
      case SSL_ERROR_WANT_WRITE: return IoStep::want_write();
      case SSL_ERROR_ZERO_RETURN: return IoStep::eof();
      default: break;
    }
    const long verify = SSL_get_verify_result(ssl_);
    std::string reasons = openssl_errors();
    if (verify != X509_V_OK && stage == "TLS handshake") {
      std::string what = "certificate verification failed: " +
                         std::string(X509_verify_cert_error_string(verify));
      what += ca_given_ ? " (is --tls-ca-file the CA that signed the peer's certificate?)"
                        : " (give the cluster's CA with --tls-ca-file)";
      return IoStep::failed(make_error(Errc::tls, what));
    }
    if (err == SSL_ERROR_SYSCALL && reasons.empty()) {
      if (rc == 0 || saved_errno == 0) {
        if (stage == "TLS handshake")
          return IoStep::failed(make_error(
              Errc::tls, "the peer closed the connection during the TLS handshake (is it a tls:// endpoint?)"));
        return IoStep::eof();
      }
      if (saved_errno == ECONNRESET) {
        if (stage == "TLS handshake")
          return IoStep::failed(make_error(Errc::tls, "the peer reset the connection during the TLS handshake"));
        return IoStep::failed(make_error(Errc::network, std::string(kConnectionReset)));
      }
      return IoStep::failed(make_error(Errc::network, std::string(stage) + " failed: " + errno_text(saved_errno)));
    }
    if (reasons.find("unexpected eof") != std::string::npos && stage != "TLS handshake")
      return IoStep::eof();
    std::string what = std::string(stage) + " failed: " + (reasons.empty() ? "unknown error" : reasons);
    if (reasons.find("wrong version number") != std::string::npos ||
        reasons.find("packet length too long") != std::string::npos ||
        reasons.find("record layer failure") != std::string::npos)
      what += " (is the peer a plain tcp:// endpoint?)";
    else if (reasons.find("certificate required") != std::string::npos ||
             (reasons.find("handshake failure") != std::string::npos && !cert_given_))
      what += cert_given_ ? " (the peer did not accept our certificate)"
                          : " (the peer wants a client certificate: give --tls-cert and --tls-key)";
    else if (reasons.find("unknown ca") != std::string::npos ||
             reasons.find("bad certificate") != std::string::npos)
      what += " (the peer did not accept our certificate)";
    return IoStep::failed(make_error(Errc::tls, what));
  }

  Socket socket_;
  SSL* ssl_;
  bool ca_given_;
  bool cert_given_;
};

}  // namespace

bool is_connection_reset(const Error& e) { return e.code == Errc::network && e.what == kConnectionReset; }

int millis_until(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  if (left.count() > 1'000'000'000) return 1'000'000'000;
  // Round up so a wait never returns just before the deadline and spins.
  return static_cast<int>(left.count()) + 1;
}

std::string Address::host_port() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Address::to_string() const {
  return std::string(scheme == Scheme::tls ? "tls://" : "tcp://") + host_port();
}

Result<Address> parse_address(std::string_view text) {
  Address a;
  std::string_view rest = text;
  if (const auto sep = rest.find("://"); sep != std::string_view::npos) {
    const std::string_view scheme = rest.substr(0, sep);
    if (scheme == "tcp")
      a.scheme = Scheme::tcp;
    else if (scheme == "tls")
      a.scheme = Scheme::tls;
    else
      return make_error(Errc::usage, "unsupported address scheme \"" + std::string(scheme) +
                                         "://\" in \"" + std::string(text) +
                                         "\" (dask-caps speaks tcp:// and tls://)");
    rest = rest.substr(sep + 3);
  }
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos)
      return make_error(Errc::usage, "unterminated \"[\" in address \"" + std::string(text) + "\"");
    a.host = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
    if (rest.empty() || rest.front() != ':')
      return make_error(Errc::usage, "missing port number in address \"" + std::string(text) + "\"");
    port_text = rest.substr(1);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos)
      return make_error(Errc::usage, "missing port number in address \"" + std::string(text) + "\"");
    a.host = std::string(rest.substr(0, colon));
    if (a.host.find(':') != std::string::npos)
      return make_error(Errc::usage, "IPv6 address without brackets in \"" + std::string(text) +
                                         "\" (write tcp://[::1]:8786)");
    port_text = rest.substr(colon + 1);
  }
  if (a.host.empty())
    return make_error(Errc::usage, "missing host in address \"" + std::string(text) + "\"");
  if (const auto slash = port_text.find('/'); slash != std::string_view::npos && slash + 1 == port_text.size())
    port_text = port_text.substr(0, slash);
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || p != port_text.data() + port_text.size() || port > 65535)
    return make_error(Errc::usage, "bad port \"" + std::string(port_text) + "\" in address \"" +
                                       std::string(text) + "\"");
  a.port = static_cast<std::uint16_t>(port);
  return a;
}

std::string ip_string(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(addr).sin_addr, buf, sizeof buf);
  else if (addr.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr, buf, sizeof buf);
  return buf;
}

Result<std::vector<sockaddr_storage>> resolve(const Address& address, Deadline deadline) {
  sockaddr_storage numeric;
  if (is_numeric_host(address.host, numeric, address.port)) return std::vector<sockaddr_storage>{numeric};

  // getaddrinfo cannot be cancelled or bounded: run it on a helper thread
  // that owns its inputs, and stop waiting at the deadline.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int rc = 0;
    std::vector<sockaddr_storage> out;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, host = address.host, port = std::to_string(address.port)] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    std::vector<sockaddr_storage> out;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      sockaddr_storage s{};
      std::memcpy(&s, ai->ai_addr, std::min<std::size_t>(ai->ai_addrlen, sizeof s));
      out.push_back(s);
    }
    if (res) freeaddrinfo(res);
    std::lock_guard lock(shared->mu);
    shared->rc = rc;
    shared->out = std::move(out);
    shared->done = true;
    shared->cv.notify_all();
  }).detach();
  std::unique_lock lock(shared->mu);
  if (!shared->cv.wait_until(lock, deadline, [&] { return shared->done; }))
    return make_error(Errc::timeout, "resolving host \"" + address.host + "\" timed out");
  if (shared->rc != 0)
    return make_error(Errc::network, "cannot resolve host \"" + address.host + "\": " +
                                         gai_strerror(shared->rc));
  if (shared->out.empty())
    return make_error(Errc::network, "cannot resolve host \"" + address.host + "\": no addresses");
  return std::move(shared->out);
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<Socket> start_connect(const sockaddr_storage& addr) {
  const std::string peer = sockaddr_text(addr);
  Socket s(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return make_error(Errc::network, "cannot create a socket: " + errno_text(errno));
  const int one = 1;
  setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  for (;;) {
    if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) return s;
    if (errno == EINTR) continue;
    if (errno == EINPROGRESS) return s;
    return connect_error(errno, peer);
  }
}

Status finish_connect(const Socket& socket, std::string_view peer) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) return connect_error(err, peer);
  return ok_status();
}

std::unique_ptr<Stream> make_plain_stream(Socket socket) {
  return std::make_unique<PlainStream>(std::move(socket));
}

struct TlsClientContext::Impl {
  SSL_CTX* ctx = nullptr;
  bool ca_given = false;
  bool cert_given = false;
  ~Impl() {
    if (ctx) SSL_CTX_free(ctx);
  }
};

TlsClientContext::~TlsClientContext() = default;

Result<std::shared_ptr<TlsClientContext>> TlsClientContext::create(const TlsOptions& options) {
  std::shared_ptr<TlsClientContext> out(new TlsClientContext());
  out->impl_ = std::make_unique<Impl>();
  Impl& impl = *out->impl_;
  ERR_clear_error();
  impl.ctx = SSL_CTX_new(TLS_client_method());
  if (!impl.ctx) return make_error(Errc::tls, "cannot create a TLS context: " + openssl_errors());
  SSL_CTX_set_min_proto_version(impl.ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(impl.ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  SSL_CTX_set_options(impl.ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
  SSL_CTX_set_verify(impl.ctx, SSL_VERIFY_PEER, nullptr);
  if (!options.ca_file.empty()) {
    impl.ca_given = true;
    if (SSL_CTX_load_verify_locations(impl.ctx, options.ca_file.c_str(), nullptr) != 1)
      return make_error(Errc::tls, "cannot load the CA file \"" + options.ca_file + "\": " + openssl_errors());
  } else if (SSL_CTX_set_default_verify_paths(impl.ctx) != 1) {
    return make_error(Errc::tls, "cannot load the system CA store: " + openssl_errors());
  }
  if (!options.cert_file.empty()) {
    impl.cert_given = true;
    if (SSL_CTX_use_certificate_chain_file(impl.ctx, options.cert_file.c_str()) != 1)
      return make_error(Errc::tls, "cannot load the certificate \"" + options.cert_file + "\": " +
                                       openssl_errors());
    const std::string& key = options.key_file.empty() ? options.cert_file : options.key_file;
    if (SSL_CTX_use_PrivateKey_file(impl.ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
      return make_error(Errc::tls, "cannot load the private key \"" + key + "\": " + openssl_errors());
    if (SSL_CTX_check_private_key(impl.ctx) != 1)
      return make_error(Errc::tls, "the key \"" + key + "\" does not match the certificate \"" +
                                       options.cert_file + "\"");
  } else if (!options.key_file.empty()) {
    return make_error(Errc::usage, "--tls-key needs --tls-cert");
  }
  return out;
}

Result<std::unique_ptr<Stream>> TlsClientContext::wrap(Socket socket, const std::string& server_name) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(impl_->ctx);
  if (!ssl) return make_error(Errc::tls, "cannot create a TLS session: " + openssl_errors());
  if (SSL_set_fd(ssl, socket.fd()) != 1) {
    SSL_free(ssl);
    return make_error(Errc::tls, "cannot attach TLS to the socket: " + openssl_errors());
  }
  SSL_set_connect_state(ssl);
  sockaddr_storage numeric;
  if (!server_name.empty() && !is_numeric_host(server_name, numeric, 0))
    SSL_set_tlsext_host_name(ssl, server_name.c_str());
  return std::unique_ptr<Stream>(
      std::make_unique<TlsStream>(std::move(socket), ssl, impl_->ca_given, impl_->cert_given));
}

Status wait_for(const Stream& stream, const IoStep& step, Deadline deadline, std::string_view stage) {
  pollfd p{};
  p.fd = stream.fd();
  p.events = step.kind == IoStep::Kind::want_write ? POLLOUT : POLLIN;
  for (;;) {
    const int ms = millis_until(deadline);
    if (ms == 0) return make_error(Errc::timeout, "timed out " + std::string(stage));
    const int rc = ::poll(&p, 1, ms);
    if (rc > 0) return ok_status();
    if (rc < 0 && errno != EINTR) return make_error(Errc::network, "poll failed: " + errno_text(errno));
  }
}

Result<std::size_t> StreamTransport::read_some(std::span<std::uint8_t> out, Deadline deadline) {
  if (!stream_) return make_error(Errc::network, "read on a closed connection");
  for (;;) {
    IoStep step = stream_->read(out);
    switch (step.kind) {
      case IoStep::Kind::done: return step.bytes;
      case IoStep::Kind::eof: return std::size_t{0};
      case IoStep::Kind::error: return std::move(step.error);
      default:
        if (auto w = wait_for(*stream_, step, deadline, "waiting for " + peer_); !w) return w.error();
    }
  }
}

Status StreamTransport::write_all(ByteSpan data, Deadline deadline) {
  if (!stream_) return make_error(Errc::network, "write on a closed connection");
  while (!data.empty()) {
    IoStep step = stream_->write(data);
    switch (step.kind) {
      case IoStep::Kind::done: data = data.subspan(step.bytes); break;
      case IoStep::Kind::eof:
        return make_error(Errc::network, "the peer closed the connection while we wrote");
      case IoStep::Kind::error: return std::move(step.error);
      default:
        if (auto w = wait_for(*stream_, step, deadline, "writing to " + peer_); !w) return w.error();
    }
  }
  return ok_status();
}

void StreamTransport::close() {
  if (!stream_) return;
  stream_->shutdown();
  stream_.reset();
}

Result<std::unique_ptr<StreamTransport>> connect(const Address& address, Deadline deadline,
                                                 const TlsClientContext* tls) {
  if (address.scheme == Scheme::tls && !tls)
    return make_error(Errc::usage, "a tls:// address needs TLS settings");
  auto addrs = resolve(address, deadline);
  if (!addrs) return std::move(addrs).error();
  Error last = make_error(Errc::network, "no address to connect to");
  for (const auto& sa : *addrs) {
    const std::string peer = sockaddr_text(sa);
    auto s = start_connect(sa);
    if (!s) {
      last = std::move(s).error();
      continue;
    }
    pollfd p{s->fd(), POLLOUT, 0};
    int rc;
    do {
      const int ms = millis_until(deadline);
      if (ms == 0) return make_error(Errc::timeout, "connecting to " + peer + " timed out");
      rc = ::poll(&p, 1, ms);
    } while (rc == 0 || (rc < 0 && errno == EINTR));
    if (rc < 0) return make_error(Errc::network, "poll failed: " + errno_text(errno));
    if (auto st = finish_connect(*s, peer); !st) {
      last = st.error();
      continue;
    }
    std::unique_ptr<Stream> stream;
    if (address.scheme == Scheme::tls) {
      auto wrapped = tls->wrap(std::move(*s), address.host);
      if (!wrapped) return std::move(wrapped).error();
      stream = std::move(*wrapped);
      for (;;) {
        IoStep step = stream->handshake();
        if (step.kind == IoStep::Kind::done) break;
        if (step.kind == IoStep::Kind::error) return std::move(step.error);
        if (step.kind == IoStep::Kind::eof)
          return make_error(Errc::tls, "the peer closed the connection during the TLS handshake");
        if (auto w = wait_for(*stream, step, deadline, "in the TLS handshake with " + peer); !w)
          return w.error();
      }
    } else {
      stream = make_plain_stream(std::move(*s));
    }
    return std::make_unique<StreamTransport>(std::move(stream), peer);
  }
  return last;
}

Result<Socket> listen_tcp(const Address& address, int backlog) {
  Deadline soon = Clock::now() + std::chrono::seconds(10);
  auto addrs = resolve(address, soon);
  if (!addrs) return std::move(addrs).error();
  const sockaddr_storage& sa = addrs->front();
  Socket s(::socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return make_error(Errc::network, "cannot create a socket: " + errno_text(errno));
  const int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const socklen_t len = sa.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&sa), len) != 0)
    return make_error(Errc::network, "cannot listen on " + address.host_port() + ": " + errno_text(errno));
  if (::listen(s.fd(), backlog) != 0)
    return make_error(Errc::network, "cannot listen on " + address.host_port() + ": " + errno_text(errno));
  return s;
}

Result<Address> bound_address(const Socket& socket, Scheme scheme) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return make_error(Errc::network, "getsockname failed: " + errno_text(errno));
  Address a;
  a.scheme = scheme;
  a.host = ip_string(sa);
  a.port = sa.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(sa).sin6_port)
                                    : ntohs(reinterpret_cast<sockaddr_in&>(sa).sin_port);
  return a;
}

}  // namespace daskcaps::net
