#include "daskcaps/net/loop.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "core/net/internal/socket.h"
#include "support/net_support.h"

using namespace daskcaps;
using net::Clock;
using net::Loop;

namespace {

using testsupport::make_loop;

/// Runs the loop until `done` or `rounds` iterations (each waits at most 1 s).
template <typename Pred>
void run_until(Loop& loop, Pred done, int rounds = 1000) {
  testsupport::run_until(loop, done, rounds, std::chrono::seconds(1));
}

struct Pipe {
  net::Socket r, w;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0);
    r = net::Socket(fds[0]);
    w = net::Socket(fds[1]);
  }
  void put(char c = 'x') const { REQUIRE(::write(w.fd(), &c, 1) == 1); }
};

}  // namespace

TEST_CASE("loop: timers run by time, then by creation, and a cancelled one never") {
  auto loop = make_loop();
  std::string order;
  const auto now = Clock::now();
  loop->add_timer(now + std::chrono::milliseconds(30), [&] { order += 'c'; });
  loop->add_timer(now + std::chrono::milliseconds(10), [&] { order += 'a'; });
  loop->add_timer(now + std::chrono::milliseconds(10), [&] { order += 'b'; });
  net::Timer cancelled = loop->add_timer(now + std::chrono::milliseconds(20), [&] { order += 'X'; });
  CHECK(loop->timers() == 4);
  loop->cancel_timer(cancelled);
  CHECK(!cancelled);
  loop->cancel_timer(cancelled);  // twice is harmless
  run_until(*loop, [&] { return order.size() == 3; });
  CHECK(order == "abc");
  CHECK(loop->timers() == 0);
}

TEST_CASE("loop: a timer may cancel another due in the same pass, and re-arming for now waits a pass") {
  auto loop = make_loop();
  std::vector<std::string> seen;
  const auto at = Clock::now();
  net::Timer second;
  int passes = 0;
  loop->add_timer(at, [&] {
    seen.push_back("first");
    loop->cancel_timer(second);
    // Due at once, but added by a timer: it must not run in this pass.
    loop->add_timer(Clock::now() - std::chrono::seconds(1), [&] { seen.push_back("re-armed@" + std::to_string(passes)); });
  });
  second = loop->add_timer(at, [&] { seen.push_back("second"); });
  for (; passes < 5 && seen.size() < 2; ++passes) REQUIRE(loop->run_once(std::chrono::milliseconds(50)).ok());
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == "first");
  CHECK(seen[1].starts_with("re-armed@"));
  CHECK(seen[1] != "re-armed@0");
}

TEST_CASE("loop: posts from other threads run on the loop thread, in order per thread") {
  auto loop = make_loop();
  const auto loop_thread = std::this_thread::get_id();
  constexpr int kThreads = 4, kPosts = 500;
  std::vector<std::vector<int>> got(kThreads);
  std::atomic<int> wrong_thread{0};
  int total = 0;
  std::vector<std::thread> threads;
  const Loop::Remote remote = loop->remote();
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPosts; ++i)
        REQUIRE(remote.post([&, t, i] {
          if (std::this_thread::get_id() != loop_thread) ++wrong_thread;
          got[static_cast<std::size_t>(t)].push_back(i);
          ++total;
        }));
    });
  run_until(*loop, [&] { return total == kThreads * kPosts; }, 100000);
  for (auto& th : threads) th.join();
  CHECK(total == kThreads * kPosts);
  CHECK(wrong_thread == 0);
  for (const auto& g : got) {
    REQUIRE(g.size() == kPosts);
    for (int i = 0; i < kPosts; ++i) CHECK(g[static_cast<std::size_t>(i)] == i);
  }
}

TEST_CASE("loop: a Remote outlives its loop: posting then answers false") {
  Loop::Remote remote;
  CHECK(!remote.post([] {}));  // empty
  {
    auto loop = make_loop();
    remote = loop->remote();
    bool ran = false;
    CHECK(remote.post([&] { ran = true; }));
    run_until(*loop, [&] { return ran; });
    CHECK(ran);
    CHECK(remote.post([] {}));  // dropped with the loop
  }
  CHECK(!remote.post([] {}));
  remote.request_stop();  // a no-op, not a crash
}

namespace {
Loop* g_signal_loop = nullptr;
extern "C" void stop_on_signal(int) { g_signal_loop->request_stop(); }
}  // namespace

TEST_CASE("loop: run() returns after a stop request from a signal handler") {
  auto loop = make_loop();
  g_signal_loop = loop.get();
  struct sigaction sa {};
  struct sigaction old {};
  sa.sa_handler = stop_on_signal;
  sigemptyset(&sa.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &sa, &old) == 0);
  // The signal comes from another thread, most likely while run() waits
  // with nothing to do (if it comes earlier, the eventfd is already set).
  const pthread_t me = pthread_self();
  std::thread sender([me] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pthread_kill(me, SIGUSR1);
  });
  auto st = loop->run();
  sender.join();
  sigaction(SIGUSR1, &old, nullptr);
  g_signal_loop = nullptr;
  CHECK(st.ok());
}

TEST_CASE("loop: a stop handler decides when run() returns") {
  auto loop = make_loop();
  int stops = 0;
  loop->set_stop_handler([&] {
    // A graceful stop: finish something first, then quit.
    if (++stops == 1) loop->add_timer(std::chrono::milliseconds(5), [&] { loop->quit(); });
  });
  std::thread other([remote = loop->remote()] { remote.request_stop(); });
  auto st = loop->run();
  other.join();
  CHECK(st.ok());
  CHECK(stops == 1);
}

TEST_CASE("loop: an fd removed by an earlier callback of the same batch gets no event") {
  auto loop = make_loop();
  Pipe a, b;
  int a_calls = 0, b_calls = 0;
  auto on_a = [&](std::uint32_t ready) {
    CHECK((ready & Loop::kReadable) != 0);
    ++a_calls;
    loop->remove(b.r.fd());
    loop->remove(a.r.fd());  // its own registration, from inside its callback
  };
  auto on_b = [&](std::uint32_t) {
    ++b_calls;
    loop->remove(a.r.fd());
    loop->remove(b.r.fd());
  };
  REQUIRE(loop->add(a.r.fd(), Loop::kReadable, on_a).ok());
  REQUIRE(loop->add(b.r.fd(), Loop::kReadable, on_b).ok());
  CHECK(!loop->add(a.r.fd(), Loop::kReadable, on_a).ok());  // once only
  a.put();
  b.put();
  REQUIRE(loop->run_once(std::chrono::seconds(1)).ok());
  // Whichever ran first removed the other: exactly one callback.
  CHECK(a_calls + b_calls == 1);
  CHECK(loop->watched() == 0);
}

TEST_CASE("loop: level-triggered interest can be switched off and on") {
  auto loop = make_loop();
  Pipe p;
  int calls = 0;
  REQUIRE(loop->add(p.r.fd(), Loop::kReadable, [&](std::uint32_t) { ++calls; }).ok());
  p.put();
  REQUIRE(loop->run_once(std::chrono::seconds(1)).ok());
  REQUIRE(loop->run_once(std::chrono::seconds(1)).ok());
  CHECK(calls == 2);  // unread bytes: reported again
  loop->set_interest(p.r.fd(), 0);
  REQUIRE(loop->run_once(std::chrono::milliseconds(20)).ok());
  CHECK(calls == 2);
  loop->set_interest(p.r.fd(), Loop::kReadable);
  REQUIRE(loop->run_once(std::chrono::seconds(1)).ok());
  CHECK(calls == 3);
  loop->remove(p.r.fd());
}

TEST_CASE("loop: deferred calls run before the loop waits again, also those they defer") {
  auto loop = make_loop();
  std::string order;
  loop->defer([&] {
    order += '1';
    loop->defer([&] { order += '2'; });
  });
  // With deferred work pending the wait does not block for the timeout.
  REQUIRE(loop->run_once(std::chrono::hours(1)).ok());
  CHECK(order == "12");
}
