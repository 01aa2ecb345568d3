#include "core/net/survey.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>

namespace daskcaps::survey {

namespace {

using net::Clock;
using net::Deadline;
using net::IoStep;

struct Conn {
  std::size_t index = 0;
  enum class State : std::uint8_t { connecting, tls, talking } state = State::connecting;
  std::vector<sockaddr_storage> addrs;
  std::size_t next_addr = 0;
  net::Socket socket;                    // while connecting
  std::unique_ptr<net::Stream> stream;   // after connect
  std::optional<rpc::ClientSession> session;
  Deadline deadline{};
  Clock::time_point up{};
  Clock::time_point identity_at{};
  short events = POLLOUT;
  bool finished = false;
};

std::size_t fd_budget() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 4096;
  // Leave room for the files the rest of the process holds.
  return rl.rlim_cur > 128 ? static_cast<std::size_t>(rl.rlim_cur - 64) : 16;
}

class Runner {
 public:
  Runner(std::span<const net::Address> addresses, const SurveyOptions& options)
      : addrs_(addresses), options_(options), results_(addresses.size(), pending()) {
    total_deadline_ = Clock::now() + options.total_timeout;
    timeout_text_ = rpc::duration_text(std::min(options.per_endpoint_timeout, options.total_timeout));
  }

  std::vector<Result<rpc::QueryResult>> run() {
    const std::size_t limit = std::max<std::size_t>(1, std::min(options_.max_in_flight, fd_budget()));
    std::size_t next = 0;
    std::vector<pollfd> fds;
    while (next < addrs_.size() || !active_.empty()) {
      while (active_.size() < limit && next < addrs_.size()) launch(next++);
      if (active_.empty()) continue;

      fds.clear();
      Deadline soonest = Deadline::max();
      for (auto& c : active_) {
        fds.push_back({c->state == Conn::State::connecting ? c->socket.fd() : c->stream->fd(),
                       c->events, 0});
        soonest = std::min(soonest, c->deadline);
      }
      const int rc = ::poll(fds.data(), fds.size(), net::millis_until(soonest));
      if (rc < 0 && errno != EINTR) {
        const Error e = make_error(Errc::network, "poll failed");
        for (auto& c : active_) finish(*c, e);
      }
      const auto now = Clock::now();
      for (std::size_t i = 0; i < active_.size(); ++i) {
        Conn& c = *active_[i];
        if (rc > 0 && fds[i].revents != 0) step(c);
        if (!c.finished && now >= c.deadline) expire(c);
      }
      std::erase_if(active_, [](const std::unique_ptr<Conn>& c) { return c->finished; });
    }
    return std::move(results_);
  }

 private:
  static Result<rpc::QueryResult> pending() { return make_error(Errc::internal, "not surveyed"); }

  void launch(std::size_t index) {
    const net::Address& a = addrs_[index];
    const auto now = Clock::now();
    if (now >= total_deadline_) {
      results_[index] = make_error(Errc::timeout, "the survey's total deadline passed before " +
                                                      a.to_string() + " was contacted");
      return;
    }
    if (a.scheme == net::Scheme::tls && !options_.tls) {
      results_[index] = make_error(Errc::usage, "a tls:// address needs TLS settings");
      return;
    }
    auto c = std::make_unique<Conn>();
    c->index = index;
    c->deadline = std::min(now + options_.per_endpoint_timeout, total_deadline_);
    auto it = resolved_.find(a.host);
    if (it == resolved_.end()) {
      net::Address host_only = a;
      host_only.port = 0;
      it = resolved_.emplace(a.host, net::resolve(host_only, c->deadline)).first;
    }
    if (!it->second) {
      results_[index] = it->second.error();
      return;
    }
    c->addrs = *it->second;
    for (auto& sa : c->addrs) set_port(sa, a.port);
    if (!connect_next(*c)) return;
    active_.push_back(std::move(c));
  }

  static void set_port(sockaddr_storage& sa, std::uint16_t port) {
    if (sa.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(sa).sin_port = htons(port);
    if (sa.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(sa).sin6_port = htons(port);
  }

  /// Starts a connect to the next resolved address; false when none is left
  /// (the result is then recorded).
  bool connect_next(Conn& c) {
    Error last = make_error(Errc::network, "no address to connect to");
    while (c.next_addr < c.addrs.size()) {
      auto s = net::start_connect(c.addrs[c.next_addr++]);
      if (s) {
        c.socket = std::move(*s);
        c.state = Conn::State::connecting;
        c.events = POLLOUT;
        return true;
      }
      last = std::move(s).error();
    }
    finish(c, std::move(last));
    return false;
  }

  void finish(Conn& c, Result<rpc::QueryResult> r) {
    if (c.finished) return;
    if (c.stream) c.stream->shutdown();
    c.stream.reset();
    c.socket.reset();
    results_[c.index] = std::move(r);
    c.finished = true;
  }

  void expire(Conn& c) {
    const net::Address& a = addrs_[c.index];
    switch (c.state) {
      case Conn::State::connecting:
        finish(c, make_error(Errc::timeout, "connecting to " + a.host_port() + " timed out (within " +
                                                timeout_text_ + ")"));
        return;
      case Conn::State::tls:
        finish(c, make_error(Errc::timeout, "the TLS handshake with " + a.host_port() +
                                                " timed out (within " + timeout_text_ + ")"));
        return;
      case Conn::State::talking:
        finish(c, rpc::timeout_error(*c.session, a.host_port(), timeout_text_));
        return;
    }
  }

  void start_talking(Conn& c) {
    c.state = Conn::State::talking;
    c.up = Clock::now();
    c.session.emplace(options_.session);
    talk(c);
  }

  void step(Conn& c) {
    const net::Address& a = addrs_[c.index];
    switch (c.state) {
      case Conn::State::connecting: {
        if (auto st = net::finish_connect(c.socket, a.host_port()); !st) {
          c.socket.reset();
          if (c.next_addr < c.addrs.size()) {
            connect_next(c);
            return;
          }
          finish(c, st.error());
          return;
        }
        if (a.scheme == net::Scheme::tls) {
          auto wrapped = options_.tls->wrap(std::move(c.socket), a.host);
          if (!wrapped) {
            finish(c, std::move(wrapped).error());
            return;
          }
          c.stream = std::move(*wrapped);
          c.state = Conn::State::tls;
          handshake(c);
          return;
        }
        c.stream = net::make_plain_stream(std::move(c.socket));
        start_talking(c);
        return;
      }
      case Conn::State::tls: handshake(c); return;
      case Conn::State::talking: talk(c); return;
    }
  }

  void handshake(Conn& c) {
    IoStep s = c.stream->handshake();
    switch (s.kind) {
      case IoStep::Kind::done: start_talking(c); return;
      case IoStep::Kind::want_read: c.events = POLLIN; return;
      case IoStep::Kind::want_write: c.events = POLLOUT; return;
      case IoStep::Kind::eof:
        finish(c, make_error(Errc::tls, "the peer closed the connection during the TLS handshake"));
        return;
      case IoStep::Kind::error: finish(c, std::move(s.error)); return;
    }
  }

  void talk(Conn& c) {
    rpc::ClientSession& session = *c.session;
    bool want_write = false;
    while (!session.pending_output().empty()) {
      IoStep s = c.stream->write(session.pending_output());
      if (s.kind == IoStep::Kind::done) {
        session.wrote(s.bytes);
        continue;
      }
      if (s.kind == IoStep::Kind::want_write || s.kind == IoStep::Kind::want_read) {
        want_write = s.kind == IoStep::Kind::want_write;
        break;
      }
      // A peer that closed early: what it sent before says more than the
      // failed write, so read on and let the session report.
      session.wrote(session.pending_output().size());
      break;
    }
    std::array<std::uint8_t, 64 * 1024> buf;
    for (;;) {
      IoStep s = c.stream->read(buf);
      if (s.kind == IoStep::Kind::done) {
        const auto before = session.stage();
        if (auto st = session.received(ByteSpan(buf.data(), s.bytes)); !st) {
          finish(c, st.error());
          return;
        }
        if (before <= rpc::ClientSession::Stage::identity &&
            session.stage() > rpc::ClientSession::Stage::identity)
          c.identity_at = Clock::now();
        if (session.done()) {
          complete(c);
          return;
        }
        continue;
      }
      if (s.kind == IoStep::Kind::eof) {
        if (auto st = session.received_eof(); !st) {
          finish(c, st.error());
          return;
        }
        complete(c);
        return;
      }
      if (s.kind == IoStep::Kind::error) {
        if (net::is_connection_reset(s.error)) {
          if (auto st = session.received_eof(true); !st) {
            finish(c, st.error());
            return;
          }
          complete(c);
          return;
        }
        finish(c, std::move(s.error));
        return;
      }
      c.events = static_cast<short>(POLLIN | (want_write || s.kind == IoStep::Kind::want_write ? POLLOUT : 0));
      return;
    }
  }

  void complete(Conn& c) {
    rpc::QueryResult r;
    r.peer_ip = c.stream->peer_ip();
    r.local_ip = c.stream->local_ip();
    const auto at = c.identity_at == Clock::time_point{} ? Clock::now() : c.identity_at;
    r.rtt_ms = std::chrono::duration<double, std::milli>(at - c.up).count();
    r.exchange = c.session->take_exchange();
    finish(c, std::move(r));
  }

  std::span<const net::Address> addrs_;
  const SurveyOptions& options_;
  std::vector<Result<rpc::QueryResult>> results_;
  std::vector<std::unique_ptr<Conn>> active_;
  std::map<std::string, Result<std::vector<sockaddr_storage>>> resolved_;
  Deadline total_deadline_{};
  std::string timeout_text_;
};

}  // namespace

std::vector<Result<rpc::QueryResult>> survey(std::span<const net::Address> addresses,
                                             const SurveyOptions& options) {
  Runner runner(addresses, options);
  return runner.run();
}

}  // namespace daskcaps::survey
