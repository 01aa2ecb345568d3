#include "core/net/net_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <unordered_map>

#include "core/wire/handshake.h"
#include "core/wire/frames.h"

namespace daskcaps::server {

namespace {

using msgpack::Value;

Buffer framed(const Value& v) { return rpc::encode_msgpack_message(v); }

Value dask_caps_entry(const Capabilities& c) {
  Value m = Value::map();
  m.set("version", Value::str(DASKCAPS_VERSION));
  m.set("capabilities", capabilities_to_msgpack(c));
  return m;
}

}  // namespace

void prepare_replies(std::vector<Endpoint>& all, double started) {
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i].handshake_message = framed(all[i].profile.handshake.to_msgpack());
    all[i].identity_message = framed(identity_of(i, all, started));
  }
}

msgpack::Value identity_of(std::size_t index, const std::vector<Endpoint>& all, double started) {
  const Endpoint& me = all[index];
  Value id = Value::map();
  const bool is_worker = me.profile.type == "Worker" || me.profile.type == "Nanny";
  id.set("type", Value::str(me.profile.type));
  id.set("id", Value::str(me.profile.type + "-dask-caps-" + std::to_string(::getpid()) + "-" +
                          std::to_string(index)));
  if (is_worker) {
    Value scheduler = Value::nil();
    for (const auto& e : all)
      if (e.profile.type == "Scheduler") {
        scheduler = Value::str(e.address.to_string());
        break;
      }
    id.set("scheduler", std::move(scheduler));
    id.set("nthreads", Value::integer(1));
    id.set("memory_limit", Value::integer(0));
  } else {
    id.set("address", Value::str(me.address.to_string()));
    id.set("services", Value::map());
    id.set("started", Value::float64(started));
    Value workers = Value::map();
    if (me.profile.type == "Scheduler") {
      for (std::size_t i = 0; i < all.size(); ++i) {
        const Endpoint& w = all[i];
        if (w.profile.type != "Worker" && w.profile.type != "Nanny") continue;
        Value entry = Value::map();
        entry.set("type", Value::str("Worker"));
        entry.set("id", Value::str("Worker-dask-caps-" + std::to_string(::getpid()) + "-" + std::to_string(i)));
        entry.set("host", Value::str(w.address.host));
        entry.set("resources", Value::map());
        entry.set("local_directory", Value::str(""));
        entry.set("name", Value::str(w.address.to_string()));
        entry.set("nthreads", Value::integer(1));
        entry.set("memory_limit", Value::integer(0));
        entry.set("last_seen", Value::float64(started));
        entry.set("services", Value::map());
        Value metrics = Value::map();
        if (w.profile.capabilities.gpu) metrics.set("gpu", Value::map());
        entry.set("metrics", std::move(metrics));
        entry.set("status", Value::str("running"));
        entry.set("nanny", Value::nil());
        workers.as_map().emplace_back(Value::str(w.address.to_string()), std::move(entry));
      }
    }
    id.set("workers", std::move(workers));
  }
  id.set("dask-caps", dask_caps_entry(me.profile.capabilities));
  return id;
}

ServerSession::ServerSession(const Endpoint& endpoint, const Limits& limits)
    : endpoint_(endpoint), limits_(limits), reader_(limits) {
  send(endpoint_.handshake_message);
}

void ServerSession::wrote(std::size_t n) {
  out_pos_ += n;
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  }
}

void ServerSession::send(const Buffer& message) { out_.insert(out_.end(), message.begin(), message.end()); }

Status ServerSession::received(ByteSpan data) {
  if (closing_) return ok_status();  // after close: ignore the rest
  reader_.push(data);
  for (;;) {
    auto msg = reader_.next();
    if (!msg) return std::move(msg).error();
    if (!*msg) return ok_status();
    if (auto st = on_message(std::move(**msg)); !st) return st;
    if (closing_) return ok_status();
  }
}

Status ServerSession::on_message(std::vector<Bytes> frames) {
  auto root = msgpack::decode_all(frames.front(), limits_);
  if (!root) {
    Error e = std::move(root).error();
    e.code = Errc::protocol;
    e.what = "frame 0 is not msgpack: " + e.what;
    return e;
  }
  if (!client_handshake_) {
    if (!root->is_map() || root->find("op"))
      return make_error(Errc::protocol, "the client's first message is not a handshake");
    auto hs = handshake_from_msgpack(*root);
    if (!hs) return std::move(hs).error();
    if (!hs->missing_keys().empty())
      return make_error(Errc::protocol, "the client's handshake lacks \"" + hs->missing_keys().front() + "\"");
    client_handshake_ = std::move(*hs);
    return ok_status();
  }
  if (!root->is_map()) return make_error(Errc::protocol, "a request that is not a map");
  const Value* op = root->find("op");
  if (!op || !op->is_str()) return make_error(Errc::protocol, "a request without \"op\"");
  ++requests_;
  bool reply = true;
  if (const Value* r = root->find("reply"); r && r->is_bool()) reply = r->as_bool();
  bool close_after = false;
  if (const Value* c = root->find("close"); c && c->is_bool()) close_after = c->as_bool();

  const std::string& name = op->as_str();
  if (name == "identity") {
    if (reply) send(endpoint_.identity_message);
  } else if (name == "versions") {
    if (reply) {
      Value v = endpoint_.profile.versions.is_map() ? endpoint_.profile.versions : Value::map();
      if (const Value* pkgs = root->find("packages"); pkgs && pkgs->is_array()) {
        if (!v.find("packages")) v.set("packages", Value::map());
        Value& known = *v.find("packages");
        for (const auto& p : pkgs->as_array())
          if (p.is_str() && known.is_map() && !known.find(p.as_str())) known.set(p.as_str(), Value::nil());
      }
      send(framed(v));
    }
  } else if (name == "echo") {
    if (reply) {
      const Value* data = root->find("data");
      const Value payload = data ? *data : Value::nil();
      // Placeholders in `data` hold absolute frame indices: keep the frames.
      const Buffer head = msgpack::encode(payload);
      std::vector<ByteSpan> out_frames{ByteSpan(head)};
      for (std::size_t i = 1; i < frames.size(); ++i) out_frames.push_back(frames[i].span());
      send(encode_message(out_frames));
    }
  } else if (name == "close") {
    if (reply) send(framed(Value::str("OK")));
    close_after = true;
  } else if (reply) {
    send(framed(Value::nil()));  // no handler: Dask replies None
  }
  if (close_after) closing_ = true;
  return ok_status();
}

// ---- the event loop ----------------------------------------------------

struct Server::Impl {
  struct Listener {
    net::Socket socket;
    std::size_t endpoint;
  };
  struct Client {
    net::Socket socket;
    ServerSession session;
    net::Clock::time_point last_active;
    std::uint32_t events = 0;
    Client(net::Socket s, const Endpoint& e, const Limits& l)
        : socket(std::move(s)), session(e, l), last_active(net::Clock::now()) {}
  };

  ServerOptions options;
  std::vector<Endpoint> endpoints;
  std::vector<Listener> listeners;
  std::unordered_map<int, std::size_t> listener_by_fd;
  std::unordered_map<int, std::unique_ptr<Client>> clients;
  net::Socket epoll;
  net::Socket stop_fd;
  ServerStats stats;

  ~Impl() {
    clients.clear();
    listeners.clear();
  }

  void set_events(Client& c) {
    std::uint32_t want = 0;
    if (!c.session.closing() && c.session.pending_output().size() < options.max_output_backlog) want |= EPOLLIN;
    if (!c.session.pending_output().empty()) want |= EPOLLOUT;
    if (want == c.events) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.fd = c.socket.fd();
    epoll_ctl(epoll.fd(), EPOLL_CTL_MOD, c.socket.fd(), &ev);
    c.events = want;
  }

  void drop(int fd, bool counted) {
    auto it = clients.find(fd);
    if (it == clients.end()) return;
    if (counted) ++stats.dropped;
    stats.requests += it->second->session.requests();
    epoll_ctl(epoll.fd(), EPOLL_CTL_DEL, fd, nullptr);
    clients.erase(it);
  }

  /// Writes what it can; false when the client is gone.
  bool flush(Client& c) {
    while (!c.session.pending_output().empty()) {
      const ByteSpan out = c.session.pending_output();
      const ssize_t n = ::send(c.socket.fd(), out.data(), out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.session.wrote(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      return false;
    }
    return true;
  }

  void accept_from(const Listener& l) {
    for (;;) {
      const int fd = ::accept4(l.socket.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or EMFILE: try again on the next event
      }
      net::Socket s(fd);
      ++stats.accepted;
      if (clients.size() >= options.max_clients) {
        ++stats.rejected;
        continue;  // closed by the Socket destructor
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Client>(std::move(s), endpoints[l.endpoint], options.limits);
      if (!flush(*c)) continue;  // the handshake goes out at once
      epoll_event ev{};
      ev.events = EPOLLIN | (c->session.pending_output().empty() ? 0u : EPOLLOUT);
      ev.data.fd = fd;
      c->events = ev.events;
      if (epoll_ctl(epoll.fd(), EPOLL_CTL_ADD, fd, &ev) != 0) continue;
      clients.emplace(fd, std::move(c));
    }
  }

  void serve_client(int fd, std::uint32_t events) {
    auto it = clients.find(fd);
    if (it == clients.end()) return;
    Client& c = *it->second;
    c.last_active = net::Clock::now();
    if (events & EPOLLIN) {
      std::array<std::uint8_t, 64 * 1024> buf;
      // Read a bounded amount per wakeup so one busy client cannot starve
      // the others.
      for (int rounds = 0; rounds < 16; ++rounds) {
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
        if (n > 0) {
          if (!c.session.received(ByteSpan(buf.data(), static_cast<std::size_t>(n)))) {
            drop(fd, true);
            return;
          }
          if (c.session.closing() ||
              c.session.pending_output().size() >= options.max_output_backlog)
            break;
          continue;
        }
        if (n == 0) {
          flush(c);  // best effort: the client may have half-closed
          drop(fd, false);
          return;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        drop(fd, false);
        return;
      }
    } else if (events & (EPOLLHUP | EPOLLERR)) {
      drop(fd, false);
      return;
    }
    if (!flush(c)) {
      drop(fd, false);
      return;
    }
    if (c.session.closing() && c.session.pending_output().empty()) {
      drop(fd, false);
      return;
    }
    set_events(c);
  }

  void sweep_idle() {
    if (options.idle_timeout.count() <= 0) return;
    const auto now = net::Clock::now();
    std::vector<int> idle;
    for (const auto& [fd, c] : clients)
      if (now - c->last_active > options.idle_timeout) idle.push_back(fd);
    for (int fd : idle) drop(fd, true);
  }
};

Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::start(std::vector<ListenerSpec> specs, const ServerOptions& options) {
  std::unique_ptr<Server> server(new Server());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.options = options;
  // Never accept more clients than file descriptors allow: a listener that
  // stays readable while accept() fails with EMFILE would spin the loop.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const std::size_t reserved = specs.size() + 64;
    const std::size_t budget = rl.rlim_cur > reserved ? static_cast<std::size_t>(rl.rlim_cur) - reserved : 1;
    impl.options.max_clients = std::min(impl.options.max_clients, budget);
  }
  impl.epoll = net::Socket(epoll_create1(EPOLL_CLOEXEC));
  if (!impl.epoll.valid()) return make_error(Errc::network, "epoll_create1 failed");
  impl.stop_fd = net::Socket(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl.stop_fd.valid()) return make_error(Errc::network, "eventfd failed");

  for (auto& spec : specs) {
    if (spec.address.scheme != net::Scheme::tcp)
      return make_error(Errc::usage, "serve listens on tcp:// only, not " + spec.address.to_string());
    auto s = net::listen_tcp(spec.address);
    if (!s) return std::move(s).error();
    auto bound = net::bound_address(*s, net::Scheme::tcp);
    if (!bound) return std::move(bound).error();
    Endpoint e;
    e.address = *bound;
    e.profile = std::move(spec.profile);
    impl.endpoints.push_back(std::move(e));
    impl.listeners.push_back({std::move(*s), impl.endpoints.size() - 1});
  }
  const double started =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  prepare_replies(impl.endpoints, started);
  for (auto& l : impl.listeners) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = l.socket.fd();
    if (epoll_ctl(impl.epoll.fd(), EPOLL_CTL_ADD, l.socket.fd(), &ev) != 0)
      return make_error(Errc::network, "epoll_ctl failed");
    impl.listener_by_fd.emplace(l.socket.fd(), l.endpoint);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = impl.stop_fd.fd();
  epoll_ctl(impl.epoll.fd(), EPOLL_CTL_ADD, impl.stop_fd.fd(), &ev);
  return server;
}

std::vector<net::Address> Server::addresses() const {
  std::vector<net::Address> out;
  for (const auto& e : impl_->endpoints) out.push_back(e.address);
  return out;
}

ServerStats Server::stats() const {
  ServerStats s = impl_->stats;
  for (const auto& [fd, c] : impl_->clients) s.requests += c->session.requests();
  return s;
}

void Server::request_stop() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->stop_fd.fd(), &one, sizeof one);
}

Status Server::run() {
  Impl& impl = *impl_;
  std::array<epoll_event, 256> events;
  auto last_sweep = net::Clock::now();
  for (;;) {
    const int n = epoll_wait(impl.epoll.fd(), events.data(), static_cast<int>(events.size()), 1000);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::network, "epoll_wait failed");
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == impl.stop_fd.fd()) return ok_status();
      if (auto l = impl.listener_by_fd.find(fd); l != impl.listener_by_fd.end()) {
        impl.accept_from(impl.listeners[l->second]);
        continue;
      }
      impl.serve_client(fd, events[static_cast<std::size_t>(i)].events);
    }
    if (net::Clock::now() - last_sweep > std::chrono::seconds(1)) {
      impl.sweep_idle();
      last_sweep = net::Clock::now();
    }
  }
}

}  // namespace daskcaps::server
