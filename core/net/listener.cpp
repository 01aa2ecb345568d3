// Listener (daskcaps/net/connection.h): a listening socket on the event
// loop that accepts connections in bounded batches and pauses on a lack of
// descriptors or memory. The connections themselves are connection.cpp.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <utility>

#include "core/net/internal/connection.h"

namespace daskcaps::net {

Result<std::unique_ptr<Listener>> Listener::start(Loop& loop, const Address& address, AcceptCallback on_accept,
                                                   int backlog) {
  auto s = listen_tcp(address, backlog);
  if (!s) return std::move(s).error();
  auto bound = bound_address(*s, address.scheme);
  if (!bound) return std::move(bound).error();
  std::unique_ptr<Listener> l(new Listener(loop));
  l->socket_ = std::move(*s);
  l->address_ = std::move(*bound);
  l->on_accept_ = std::move(on_accept);
  l->token_ = std::make_shared<Listener*>(l.get());
  Listener* self = l.get();
  if (auto st = loop.add(l->socket_.fd(), Loop::kReadable, [self, t = l->token_](std::uint32_t) {
        if (*t) self->on_ready();
      });
      !st)
    return st.error();
  return l;
}

Listener::~Listener() {
  if (token_) *token_ = nullptr;
  loop_.cancel_timer(pause_timer_);
  loop_.remove(socket_.fd());
}

void Listener::on_ready() {
  const auto t = token_;
  // A bounded batch per wakeup, so that a flood of connects does not
  // starve the connections already accepted.
  for (int i = 0; i < 256; ++i) {
    const int fd = ::accept4(socket_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        loop_.set_interest(socket_.fd(), 0);
        pause_timer_ = loop_.add_timer(std::chrono::milliseconds(100), [this, t] {
          if (!*t) return;
          pause_timer_ = Timer{};
          loop_.set_interest(socket_.fd(), Loop::kReadable);
        });
      }
      return;  // EAGAIN: all taken
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    on_accept_(Socket(fd));
    if (!*t) return;
  }
}

}  // namespace daskcaps::net
