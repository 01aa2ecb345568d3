#include "core/net/internal/socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "core/net/internal/resolve.h"
#include "core/net/detail/sys.h"
#include "daskcaps/net/tls.h"

namespace daskcaps::net {

namespace {

using detail::errno_text;

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
    const std::array<ByteSpan, 1> one{data};
    return writev(one);
  }
  IoStep writev(std::span<const ByteSpan> data) override {
    constexpr std::size_t kMaxIov = 64;
    std::array<iovec, kMaxIov> iov;
    std::size_t n_iov = 0;
    for (const ByteSpan& b : data) {
      if (n_iov == kMaxIov) break;
      if (b.empty()) continue;
      iov[n_iov++] = {const_cast<std::uint8_t*>(b.data()), b.size()};
    }
    if (n_iov == 0) return IoStep::done(0);
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n_iov;
    for (;;) {
      const ssize_t n = ::sendmsg(socket_.fd(), &msg, MSG_NOSIGNAL);
      if (n >= 0) return IoStep::done(static_cast<std::size_t>(n));
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStep::want_write();
      if (errno == EPIPE || errno == ECONNRESET)
        return IoStep::failed(make_error(Errc::network, "the peer closed the connection while we wrote"));
      return IoStep::failed(make_error(Errc::network, "write failed: " + errno_text(errno)));
    }
  }
  void shutdown() override { ::shutdown(socket_.fd(), SHUT_WR); }
  std::string peer_ip() const override { return detail::endpoint_ip(socket_.fd(), true); }
  std::string local_ip() const override { return detail::endpoint_ip(socket_.fd(), false); }

 private:
  Socket socket_;
};

}  // namespace

bool is_connection_reset(const Error& e) { return e.code == Errc::network && e.what == kConnectionReset; }

IoStep Stream::writev(std::span<const ByteSpan> data) {
  for (const ByteSpan& b : data)
    if (!b.empty()) return write(b);
  return IoStep::done(0);
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
  Socket s(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return make_error(Errc::network, "cannot create a socket: " + errno_text(errno));
  const int one = 1;
  setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  for (;;) {
    if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr), sockaddr_length(addr)) == 0) return s;
    if (errno == EINTR) continue;
    if (errno == EINPROGRESS) return s;
    return detail::connect_error(errno, sockaddr_text(addr));
  }
}

Status finish_connect(const Socket& socket, std::string_view peer) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) return detail::connect_error(err, peer);
  return ok_status();
}

std::unique_ptr<Stream> make_plain_stream(Socket socket) {
  return std::make_unique<PlainStream>(std::move(socket));
}

Result<Socket> listen_tcp(const Address& address, int backlog) {
  auto addrs = resolve(address, Clock::now() + std::chrono::seconds(10));
  if (!addrs) return std::move(addrs).error();
  const sockaddr_storage& sa = addrs->front();
  Socket s(::socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) return make_error(Errc::network, "cannot create a socket: " + errno_text(errno));
  const int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&sa), sockaddr_length(sa)) != 0)
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
  a.port = port_of(sa);
  return a;
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
  if (address.scheme == Scheme::tls && !tls) return make_error(Errc::usage, "a tls:// address needs TLS settings");
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
        if (auto w = wait_for(*stream, step, deadline, "in the TLS handshake with " + peer); !w) return w.error();
      }
    } else {
      stream = make_plain_stream(std::move(*s));
    }
    return std::make_unique<StreamTransport>(std::move(stream), peer);
  }
  return last;
}

bool same_host(const Socket& connected) {
  const std::string local = detail::endpoint_ip(connected.fd(), false);
  return !local.empty() && local == detail::endpoint_ip(connected.fd(), true);
}

}  // namespace daskcaps::net
