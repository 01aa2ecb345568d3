#include "daskcaps/bridge/bridge.h"

#include "core/bridge/detail/session.h"

namespace daskcaps::bridge {

Bridge::Bridge(net::Loop& loop, const BridgeOptions& options, BridgeObserver& observer)
    : loop_(loop), options_(options), observer_(observer) {}

Bridge::~Bridge() {
  if (engine_) loop_.remove(engine_->event_fd());
  loop_.cancel_timer(grace_timer_);
  sessions_.clear();
  finished_.clear();
}

Result<std::unique_ptr<Bridge>> Bridge::start(net::Loop& loop, const BridgeOptions& options,
                                              BridgeObserver& observer) {
  if (options.listen.scheme == net::Scheme::tls && !options.listen_tls)
    return make_error(Errc::usage, "a tls:// listener needs --listen-cert and --listen-key");
  if (options.upstream.scheme == net::Scheme::tls && !options.upstream_tls)
    return make_error(Errc::usage, "a tls:// upstream needs a TLS client context");
  std::unique_ptr<Bridge> b(new Bridge(loop, options, observer));
  b->engine_ = std::make_unique<RecodeEngine>(options.engine);
  Bridge* self = b.get();
  if (auto st = loop.add(b->engine_->event_fd(), net::Loop::kReadable, [self](std::uint32_t) { self->drain_engine(); });
      !st)
    return std::move(st).error();
  auto listener = net::Listener::start(loop, options.listen, [self](net::Socket s) { self->on_accept(std::move(s)); });
  if (!listener) return std::move(listener).error();
  b->listener_ = std::move(*listener);
  return b;
}

const net::Address& Bridge::address() const { return listener_ ? listener_->address() : options_.listen; }

void Bridge::on_accept(net::Socket socket) {
  if (shutting_down_) return;  // dropped: the socket closes
  const std::uint64_t id = next_session_++;
  ++stats_.connections;
  ++stats_.open;
  sessions_.emplace(id, std::make_unique<Session>(*this, id, std::move(socket)));
}

void Bridge::drain_engine() {
  if (draining_) return;  // a delivery led here again: the outer loop goes on
  draining_ = true;
  for (;;) {
    const std::size_t n = engine_->poll([this](RecodeEngine::Output&& out) {
      auto it = by_stream_.find(out.stream);
      if (it != by_stream_.end()) it->second->on_output(std::move(out));
    });
    // Deliveries freed room in the engine: what waited for it goes now.
    std::vector<std::uint64_t> waiters;
    waiters.swap(engine_waiters_);
    for (std::uint64_t id : waiters) {
      auto it = sessions_.find(id);
      if (it != sessions_.end() && it->second->retry_pending()) engine_waiters_.push_back(id);
    }
    if (n == 0) break;
  }
  draining_ = false;
}

void Bridge::session_done(std::uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  --stats_.open;
  observer_.on_session_end(id);
  // Destroyed once the callback that ended it has returned.
  finished_.push_back(std::move(it->second));
  sessions_.erase(it);
  loop_.defer([this] { finished_.clear(); maybe_quit(); });
}

void Bridge::shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  listener_.reset();
  std::vector<Session*> all;
  for (auto& [id, s] : sessions_) all.push_back(s.get());
  for (Session* s : all) s->begin_shutdown();
  grace_timer_ = loop_.add_timer(options_.shutdown_grace, [this] {
    grace_timer_ = {};
    observer_.on_log("shutdown: " + std::to_string(sessions_.size()) +
                     " session(s) did not finish within the grace period; closing them");
    sessions_.clear();
    loop_.quit();
  });
  maybe_quit();
}

void Bridge::maybe_quit() {
  if (!shutting_down_ || !sessions_.empty()) return;
  loop_.cancel_timer(grace_timer_);
  loop_.quit();
}

}  // namespace daskcaps::bridge
