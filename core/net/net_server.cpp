#include "daskcaps/net/net_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <unordered_map>

#include "core/net/internal/connection.h"
#include "core/net/internal/server_session.h"
#include "daskcaps/net/loop.h"

namespace daskcaps::server {

struct Server::Impl {
  struct Client final : net::Connection::Handler {
    Impl& server;
    ServerSession session;
    std::unique_ptr<net::Connection> conn;

    Client(Impl& s, const Endpoint& e, bool same_host) : server(s), session(e, s.options.limits, same_host) {}

    /// Moves what the session has to say into the connection's queue.
    void pass_output() {
      const ByteSpan out = session.pending_output();
      if (!out.empty()) {
        conn->send_copy(out);
        session.wrote(out.size());
      }
      if (session.closing()) conn->close_when_flushed();
    }
    void on_open(net::Connection&) override {}
    std::span<std::uint8_t> read_buffer(net::Connection&) override { return server.scratch; }
    void on_read(net::Connection& c, ByteSpan data) override {
      const std::uint64_t before = session.requests();
      auto st = session.received(data);
      server.requests += session.requests() - before;
      if (!st) {
        ++server.dropped;
        server.drop(*this);
        return;
      }
      pass_output();
      if (c.output_full()) c.pause_reading();
    }
    void on_drained(net::Connection& c) override { c.resume_reading(); }
    void on_closed(net::Connection&, const Status& why) override {
      // Idle, or a TLS handshake that failed or never came: dropped by us.
      if (!why && (why.error().code == Errc::timeout || why.error().code == Errc::tls)) ++server.dropped;
      server.drop(*this);
    }
  };

  ServerOptions options;
  std::unique_ptr<net::Loop> loop;
  std::vector<Endpoint> endpoints;
  std::vector<std::unique_ptr<net::Listener>> listeners;
  std::unordered_map<Client*, std::unique_ptr<Client>> clients;
  std::array<std::uint8_t, 64 * 1024> scratch{};  // every read lands here, then the session copies
  // Counted on the loop thread, read by stats() from any thread.
  std::atomic<std::uint64_t> accepted{0}, rejected{0}, dropped{0}, requests{0};

  ~Impl() {
    clients.clear();
    listeners.clear();
  }

  void drop(Client& c) {
    clients.erase(&c);  // destroys the connection (closing it when still open)
  }

  void accept(std::size_t endpoint, net::Socket socket) {
    ++accepted;
    if (clients.size() >= options.max_clients) {
      ++rejected;
      return;  // closed by the Socket destructor
    }
    // A profile of 2023.5+ sends None to a client on its own host.
    const bool same_host = endpoints[endpoint].profile.none_to_same_host && net::same_host(socket);
    auto c = std::make_unique<Client>(*this, endpoints[endpoint], same_host);
    net::ConnectionOptions o;
    o.max_output_bytes = options.max_output_backlog;
    o.idle_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.idle_timeout);
    o.handshake_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.handshake_timeout);
    const bool tls = endpoints[endpoint].address.scheme == net::Scheme::tls;
    c->conn = net::Connection::accepted(*loop, std::move(socket), *c, o, tls ? options.tls.get() : nullptr);
    c->pass_output();  // our handshake goes out first (2022.12 clients read before they write)
    Client* key = c.get();
    clients.emplace(key, std::move(c));
  }
};

Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::start(std::vector<ListenerSpec> specs, const ServerOptions& options) {
  std::unique_ptr<Server> server(new Server());
  server->impl_ = std::make_unique<Impl>();
  Impl& impl = *server->impl_;
  impl.options = options;
  // Never accept more clients than file descriptors allow: a listener that
  // stays readable while accept() fails with EMFILE would stall the loop.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const std::size_t reserved = specs.size() + 64;
    const std::size_t budget = rl.rlim_cur > reserved ? static_cast<std::size_t>(rl.rlim_cur) - reserved : 1;
    impl.options.max_clients = std::min(impl.options.max_clients, budget);
  }
  auto loop = net::Loop::create();
  if (!loop) return std::move(loop).error();
  impl.loop = std::move(*loop);

  for (auto& spec : specs) {
    if (spec.address.scheme == net::Scheme::tls && !impl.options.tls)
      return make_error(Errc::usage, "a tls:// listener needs a certificate and its key (" +
                                         spec.address.to_string() + ")");
    const std::size_t index = impl.endpoints.size();
    auto l = net::Listener::start(*impl.loop, spec.address, [&impl, index](net::Socket s) {
      impl.accept(index, std::move(s));
    });
    if (!l) return std::move(l).error();
    Endpoint e;
    e.address = (*l)->address();
    e.profile = std::move(spec.profile);
    impl.endpoints.push_back(std::move(e));
    impl.listeners.push_back(std::move(*l));
  }
  const double started =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  prepare_replies(impl.endpoints, started);
  return server;
}

std::vector<net::Address> Server::addresses() const {
  std::vector<net::Address> out;
  for (const auto& e : impl_->endpoints) out.push_back(e.address);
  return out;
}

ServerStats Server::stats() const {
  ServerStats s;
  s.accepted = impl_->accepted.load();
  s.rejected = impl_->rejected.load();
  s.dropped = impl_->dropped.load();
  s.requests = impl_->requests.load();
  return s;
}

void Server::request_stop() { impl_->loop->request_stop(); }

Status Server::run() { return impl_->loop->run(); }

}  // namespace daskcaps::server
