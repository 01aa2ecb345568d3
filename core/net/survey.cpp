#include "daskcaps/net/rpc.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "core/net/internal/resolve.h"
#include "core/net/internal/connection.h"
#include "daskcaps/net/loop.h"
#include "core/net/internal/rpc_session.h"

namespace daskcaps::survey {

namespace {

using net::Clock;
using net::Deadline;

std::size_t fd_budget() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 4096;
  // Leave room for the files the rest of the process holds.
  return rl.rlim_cur > 128 ? static_cast<std::size_t>(rl.rlim_cur - 64) : 16;
}

class Runner;

/// One endpoint being queried: (name lookup) -> connection -> session.
struct Query final : net::Connection::Handler {
  Runner& runner;
  std::size_t index;
  std::unique_ptr<net::Connection> conn;  // null while its host name resolves
  std::optional<rpc::ClientSession> session;
  net::Timer deadline;
  Clock::time_point up{};
  Clock::time_point identity_at{};
  std::string peer_ip, local_ip;  // taken at open: the stream is gone once closed

  Query(Runner& r, std::size_t i) : runner(r), index(i) {}
  void on_open(net::Connection& c) override;
  std::span<std::uint8_t> read_buffer(net::Connection&) override;
  void on_read(net::Connection& c, ByteSpan data) override;
  void on_read_eof(net::Connection& c) override;
  // A peer that closed early: what it sent before says more than the
  // failed write, so read on and let the session report.
  bool on_write_error(net::Connection&, const Error&) override { return true; }
  void on_closed(net::Connection& c, const Status& why) override;
};

class Runner {
 public:
  Runner(std::span<const net::Address> addresses, const SurveyOptions& options, net::Loop& loop)
      : addrs_(addresses), options_(options), loop_(loop), results_(addresses.size(), pending()) {
    total_deadline_ = Clock::now() + options.total_timeout;
    timeout_text_ = rpc::duration_text(std::min(options.per_endpoint_timeout, options.total_timeout));
    limit_ = std::max<std::size_t>(1, std::min(options_.max_in_flight, fd_budget()));
  }

  std::vector<Result<rpc::QueryResult>> run() {
    fill();
    if (!active_.empty()) {
      if (auto st = loop_.run(); !st)
        for (auto& [q, owned] : active_) results_[q->index] = st.error();
    }
    active_.clear();
    return std::move(results_);
  }

  std::span<std::uint8_t> scratch() { return scratch_; }
  const SurveyOptions& options() const { return options_; }
  const net::Address& address(std::size_t i) const { return addrs_[i]; }

  /// Records the outcome of `q` and lets the next endpoint in.
  void finish(Query& q, Result<rpc::QueryResult> r) {
    const auto it = active_.find(&q);
    if (it == active_.end()) return;  // already finished
    results_[q.index] = std::move(r);
    loop_.cancel_timer(q.deadline);
    if (q.conn) q.conn->close();
    retired_.push_back(std::move(it->second));  // destroyed after this callback
    active_.erase(it);
    loop_.defer([this] {
      retired_.clear();
      fill();
    });
  }

  void complete(Query& q) {
    rpc::QueryResult r;
    r.peer_ip = q.peer_ip;
    r.local_ip = q.local_ip;
    const auto at = q.identity_at == Clock::time_point{} ? Clock::now() : q.identity_at;
    r.rtt_ms = std::chrono::duration<double, std::milli>(at - q.up).count();
    r.exchange = q.session->take_exchange();
    finish(q, std::move(r));
  }

 private:
  static Result<rpc::QueryResult> pending() { return make_error(Errc::internal, "not surveyed"); }

  void fill() {
    while (active_.size() < limit_ && next_ < addrs_.size()) launch(next_++);
    if (active_.empty() && next_ == addrs_.size()) loop_.quit();
  }

  void launch(std::size_t index) {
    const net::Address& a = addrs_[index];
    const auto now = Clock::now();
    if (now >= total_deadline_) {
      results_[index] = make_error(Errc::timeout, "the survey's total deadline passed before " + a.to_string() +
                                                      " was contacted");
      return;
    }
    if (a.scheme == net::Scheme::tls && !options_.tls) {
      results_[index] = make_error(Errc::usage, "a tls:// address needs TLS settings");
      return;
    }
    auto owned = std::make_unique<Query>(*this, index);
    Query& q = *owned;
    active_.emplace(&q, std::move(owned));
    q.deadline = loop_.add_timer(std::min(now + options_.per_endpoint_timeout, total_deadline_), [this, &q] {
      q.deadline = net::Timer{};
      expire(q);
    });
    if (net::numeric_address(a.host, a.port)) {
      connect(q, {});
      return;
    }
    // Host names are resolved once per name, without blocking the loop.
    auto it = names_.find(a.host);
    if (it == names_.end()) {
      it = names_.emplace(a.host, Name{}).first;
      net::Address host_only = a;
      host_only.port = 0;
      it->second.request = net::resolve_async(loop_, host_only, [this, host = a.host](auto r) {
        resolved(host, std::move(r));
      });
    }
    Name& name = it->second;
    if (name.result) {
      with_addresses(q, *name.result);
      return;
    }
    name.waiting.push_back(index);
  }

  void resolved(const std::string& host, Result<std::vector<sockaddr_storage>> r) {
    Name& name = names_[host];
    name.result.emplace(std::move(r));
    const auto waiting = std::move(name.waiting);
    for (std::size_t index : waiting)
      for (auto& [q, owned] : active_)
        if (q->index == index && !q->conn) {
          with_addresses(*q, *name.result);
          break;
        }
  }

  void with_addresses(Query& q, const Result<std::vector<sockaddr_storage>>& addrs) {
    if (!addrs) {
      finish(q, addrs.error());
      return;
    }
    connect(q, *addrs);
  }

  void connect(Query& q, std::vector<sockaddr_storage> resolved) {
    net::ConnectionOptions o;
    o.max_output_bytes = std::size_t{1} << 20;
    q.conn = net::Connection::connect(loop_, addrs_[q.index], q, o, options_.tls, std::move(resolved));
  }

  void expire(Query& q) {
    const net::Address& a = addrs_[q.index];
    if (!q.conn) {
      finish(q, make_error(Errc::timeout, "resolving host \"" + a.host + "\" timed out (within " + timeout_text_ + ")"));
      return;
    }
    switch (q.conn->stage()) {
      case net::Connection::Stage::resolving:
      case net::Connection::Stage::connecting:
        finish(q, make_error(Errc::timeout, "connecting to " + a.host_port() + " timed out (within " +
                                                timeout_text_ + ")"));
        return;
      case net::Connection::Stage::handshaking:
        finish(q, make_error(Errc::timeout, "the TLS handshake with " + a.host_port() + " timed out (within " +
                                                timeout_text_ + ")"));
        return;
      default:
        finish(q, rpc::timeout_error(*q.session, a.host_port(), timeout_text_));
        return;
    }
  }

  struct Name {
    net::ResolveRequest request;
    std::optional<Result<std::vector<sockaddr_storage>>> result;
    std::vector<std::size_t> waiting;
  };

  std::span<const net::Address> addrs_;
  const SurveyOptions& options_;
  net::Loop& loop_;
  std::vector<Result<rpc::QueryResult>> results_;
  std::map<Query*, std::unique_ptr<Query>> active_;
  std::vector<std::unique_ptr<Query>> retired_;
  std::map<std::string, Name> names_;
  std::size_t next_ = 0;
  std::size_t limit_ = 1;
  Deadline total_deadline_{};
  std::string timeout_text_;
  std::array<std::uint8_t, 64 * 1024> scratch_{};
};

void Query::on_open(net::Connection& c) {
  up = Clock::now();
  peer_ip = c.peer_ip();
  local_ip = c.local_ip();
  session.emplace(runner.options().session);
  // Everything at once: requests are small and Dask serves them in order.
  c.send_copy(session->pending_output());
  session->wrote(session->pending_output().size());
}

std::span<std::uint8_t> Query::read_buffer(net::Connection&) { return runner.scratch(); }

void Query::on_read(net::Connection&, ByteSpan data) {
  const auto before = session->stage();
  if (auto st = session->received(data); !st) {
    runner.finish(*this, st.error());
    return;
  }
  if (before <= rpc::ClientSession::Stage::identity && session->stage() > rpc::ClientSession::Stage::identity)
    identity_at = Clock::now();
  if (session->done()) runner.complete(*this);
}

void Query::on_read_eof(net::Connection&) {
  if (auto st = session->received_eof(); !st) {
    runner.finish(*this, st.error());
    return;
  }
  runner.complete(*this);
}

void Query::on_closed(net::Connection&, const Status& why) {
  if (session && !why && net::is_connection_reset(why.error())) {
    if (auto st = session->received_eof(true); !st) {
      runner.finish(*this, st.error());
      return;
    }
    runner.complete(*this);
    return;
  }
  if (!why) {
    runner.finish(*this, why.error());
    return;
  }
  // A clean close without our doing: the session says whether that was early.
  if (session) {
    if (auto st = session->received_eof(); !st) {
      runner.finish(*this, st.error());
      return;
    }
    runner.complete(*this);
    return;
  }
  runner.finish(*this, make_error(Errc::network, "the connection closed before it was open"));
}

}  // namespace

std::vector<Result<rpc::QueryResult>> survey(std::span<const net::Address> addresses,
                                             const SurveyOptions& options) {
  auto loop = net::Loop::create();
  if (!loop) return std::vector<Result<rpc::QueryResult>>(addresses.size(), loop.error());
  Runner runner(addresses, options, **loop);
  return runner.run();
}

}  // namespace daskcaps::survey
