#include "core/net/internal/resolve.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "daskcaps/net/loop.h"

namespace daskcaps::net {

std::string ip_string(const sockaddr_storage& addr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (addr.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(addr).sin_addr, buf, sizeof buf);
  else if (addr.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr, buf, sizeof buf);
  return buf;
}

std::uint16_t port_of(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return 0;
}

void set_port(sockaddr_storage& addr, std::uint16_t port) {
  if (addr.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(addr).sin_port = htons(port);
  if (addr.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6&>(addr).sin6_port = htons(port);
}

socklen_t sockaddr_length(const sockaddr_storage& addr) {
  return addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string sockaddr_text(const sockaddr_storage& addr) {
  const std::string ip = ip_string(addr);
  return (addr.ss_family == AF_INET6 ? "[" + ip + "]" : ip) + ":" + std::to_string(port_of(addr));
}

std::optional<sockaddr_storage> numeric_address(const std::string& host, std::uint16_t port) {
  sockaddr_storage out;
  std::memset(&out, 0, sizeof out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return out;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return out;
  }
  return std::nullopt;
}

namespace {

/// One getaddrinfo call; blocks for as long as the resolver takes.
Result<std::vector<sockaddr_storage>> lookup(const std::string& host, std::uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return make_error(Errc::network, "cannot resolve host \"" + host + "\": " + gai_strerror(rc));
  std::vector<sockaddr_storage> out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, ai->ai_addr, std::min<std::size_t>(ai->ai_addrlen, sizeof s));
    out.push_back(s);
  }
  freeaddrinfo(res);
  if (out.empty()) return make_error(Errc::network, "cannot resolve host \"" + host + "\": no addresses");
  return out;
}

}  // namespace

Result<std::vector<sockaddr_storage>> resolve(const Address& address, Deadline deadline) {
  if (auto numeric = numeric_address(address.host, address.port)) return std::vector<sockaddr_storage>{*numeric};

  // getaddrinfo cannot be cancelled or bounded: run it on a helper thread
  // that owns its inputs, and stop waiting at the deadline.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<std::vector<sockaddr_storage>>> result;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, host = address.host, port = address.port] {
    auto r = lookup(host, port);
    std::lock_guard lock(shared->mu);
    shared->result.emplace(std::move(r));
    shared->cv.notify_all();
  }).detach();
  std::unique_lock lock(shared->mu);
  if (!shared->cv.wait_until(lock, deadline, [&] { return shared->result.has_value(); }))
    return make_error(Errc::timeout, "resolving host \"" + address.host + "\" timed out");
  return std::move(*shared->result);
}

// ---- resolve_async --------------------------------------------------------

struct ResolveRequest::State {
  // Touched on the loop thread only; resolver threads only hold references.
  ResolveCallback done;
  bool pending = true;

  void deliver(Result<std::vector<sockaddr_storage>> r) {
    if (!pending) return;
    pending = false;
    ResolveCallback fn = std::move(done);
    done = nullptr;
    fn(std::move(r));
  }
};

namespace {

struct Job {
  std::string host;
  std::uint16_t port = 0;
  Loop::Remote loop;
  std::shared_ptr<ResolveRequest::State> state;
};

/// The process's resolver threads. Never destroyed (a thread stuck in
/// getaddrinfo may outlive main), reachable through a global pointer.
struct Pool {
  std::mutex mu;
  std::deque<Job> jobs;
  std::size_t threads = 0;

  void submit(Job job) {
    std::lock_guard lock(mu);
    jobs.push_back(std::move(job));
    if (threads >= kResolverThreads) return;  // a running thread takes it when free
    ++threads;
    std::thread([this] { work(); }).detach();
  }

  void work() {
    for (;;) {
      Job job;
      {
        std::lock_guard lock(mu);
        if (jobs.empty()) {
          --threads;
          return;
        }
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      auto r = lookup(job.host, job.port);
      // A loop that is gone drops the answer (and the state) here.
      job.loop.post([state = std::move(job.state), r = std::move(r)]() mutable { state->deliver(std::move(r)); });
    }
  }
};

Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

}  // namespace

ResolveRequest& ResolveRequest::operator=(ResolveRequest&& o) noexcept {
  if (this != &o) {
    cancel();
    state_ = std::move(o.state_);
  }
  return *this;
}

void ResolveRequest::cancel() {
  if (!state_) return;
  state_->pending = false;
  state_->done = nullptr;
  state_.reset();
}

bool ResolveRequest::pending() const { return state_ && state_->pending; }

ResolveRequest resolve_async(Loop& loop, const Address& address, ResolveCallback done) {
  ResolveRequest req;
  req.state_ = std::make_shared<ResolveRequest::State>();
  req.state_->done = std::move(done);
  if (auto numeric = numeric_address(address.host, address.port)) {
    loop.defer([state = req.state_, addr = *numeric] { state->deliver(std::vector<sockaddr_storage>{addr}); });
    return req;
  }
  pool().submit(Job{address.host, address.port, loop.remote(), req.state_});
  return req;
}

}  // namespace daskcaps::net
