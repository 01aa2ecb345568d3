// The event loop of the network layer: one epoll instance, one thread,
// shared by `serve` (core/net/net_server.h), the `--workers` survey
// (core/net/rpc.h) and `bridge`.
//
// Contract
//   - Everything but Loop::Remote and request_stop() is called on the loop's
//     thread: the thread that calls run() (or run_once()). Callbacks run
//     there too, one at a time, so loop-side code needs no locks.
//   - Readiness is level-triggered: a callback that leaves bytes unread is
//     called again on the next iteration. Ask for kWritable only while a
//     write would block, or the loop spins.
//   - No callback is ever called from inside the call that registers it
//     (add, add_timer, defer, post all take effect later).
//   - A callback may remove its own or any other registration, cancel any
//     timer and destroy the objects that own them: an fd removed during a
//     batch of events gets no further events of that batch, even when the
//     fd number is reused at once.
//   - One iteration: wait (epoll_wait, until the next timer or a wakeup),
//     dispatch the fd events, then the timers that are due, then the
//     cross-thread posts and stop requests, then the deferred calls (which
//     may defer more; they all run before the next wait).
//
// Timers are one-shot, ordered by (time, creation): two timers for the same
// instant run in the order they were added. A timer added by a timer
// callback for a time already passed runs on the next iteration, never in
// the same pass. For per-connection idle timeouts, arm one timer and on
// expiry re-arm it for what is left since the last activity, rather than
// re-arming on every read.
//
// Wakeups: Remote::post(fn) may be called from any thread; fn runs on the
// loop thread, in the order posted. It goes through one eventfd (written
// only when the queue was empty) and a mutex-protected queue, so a burst of
// posts costs one wakeup. A Remote outlives its Loop safely: posting to a
// destroyed loop answers false and drops fn (on the posting thread).
//
// Stopping: request_stop() is async-signal-safe (an atomic store and a
// write(2) to the same eventfd), so a SIGINT/SIGTERM handler may call it.
// On the loop thread the request runs the stop handler (set_stop_handler),
// or, without one, quit(): run() returns after the current iteration. A
// stop handler can start a graceful shutdown (finish connections) and call
// quit() when it is done.
//
// Errors: create() fails with Errc::network when epoll or the eventfd
// cannot be made; add() with Errc::network when epoll_ctl refuses the fd
// (e.g. a regular file, or a duplicate registration); run() only when
// epoll_wait itself fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daskcaps/base/result.h"

namespace daskcaps::net {

/// A one-shot timer of a Loop; false when unset. Plain data: copying it
/// does not copy the timer.
struct Timer {
  std::chrono::steady_clock::time_point at{};
  std::uint64_t id = 0;
  explicit operator bool() const { return id != 0; }
};

class Loop {
 public:
  /// Timers run on the steady clock, as every deadline of the network
  /// layer (core/net/internal/clock.h): a step of the wall clock never
  /// fires or delays one.
  using Clock = std::chrono::steady_clock;

  /// Interest and readiness bits.
  static constexpr std::uint32_t kReadable = 1;
  static constexpr std::uint32_t kWritable = 2;
  /// Only in readiness: the peer hung up or the fd has an error (epoll's
  /// EPOLLHUP/EPOLLERR). Reported whatever the interest; reading or writing
  /// then tells what happened.
  static constexpr std::uint32_t kHangup = 4;

  using IoCallback = std::function<void(std::uint32_t ready)>;
  using Callback = std::function<void()>;

  /// A handle that other threads (and signal handlers, for request_stop)
  /// use to reach the loop. Cheap to copy.
  class Remote {
   public:
    Remote() = default;
    /// Runs fn on the loop thread soon. False (fn dropped here) when the
    /// loop is gone or this Remote is empty.
    bool post(Callback fn) const;
    /// As Loop::request_stop(); a no-op when the loop is gone.
    void request_stop() const;

   private:
    friend class Loop;
    struct Mailbox;
    explicit Remote(std::shared_ptr<Mailbox> m) : mailbox_(std::move(m)) {}
    std::shared_ptr<Mailbox> mailbox_;
  };

  static Result<std::unique_ptr<Loop>> create();
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  /// Watches `fd` (not owned; remove it before closing it) for `interest`
  /// (kReadable | kWritable, or 0 to keep it registered but quiet).
  Status add(int fd, std::uint32_t interest, IoCallback on_ready);
  /// Changes the interest of a registered fd; a no-op when unchanged.
  void set_interest(int fd, std::uint32_t interest);
  /// Stops watching `fd`; its callback is destroyed after the current batch.
  /// A no-op for an fd that is not registered.
  void remove(int fd);
  bool watching(int fd) const { return regs_.count(fd) != 0; }

  /// A one-shot timer at `at` (or `after` from now).
  Timer add_timer(Clock::time_point at, Callback fn);
  Timer add_timer(Clock::duration after, Callback fn) { return add_timer(Clock::now() + after, std::move(fn)); }
  /// Cancels a timer that has not run yet and resets `timer`; a no-op for
  /// an unset or already run timer.
  void cancel_timer(Timer& timer);
  std::size_t timers() const { return timers_.size(); }

  /// Runs fn on this thread after the current batch of callbacks, before
  /// the loop waits again.
  void defer(Callback fn);
  /// Loop-thread shorthand for remote().post(fn).
  bool post(Callback fn) const { return remote().post(std::move(fn)); }
  Remote remote() const { return Remote(mailbox_); }

  /// Asks the loop to stop; async-signal-safe, any thread.
  void request_stop();
  /// What a stop request does on the loop thread (default: quit()).
  void set_stop_handler(Callback fn) { stop_handler_ = std::move(fn); }
  /// Makes run() return after the current iteration.
  void quit() { quit_ = true; }

  /// Iterates until quit(). Errors: Errc::network when epoll_wait fails.
  Status run();
  /// One iteration that waits at most `max_wait` (for tests and for callers
  /// that drive the loop themselves). False once quit() was called.
  Result<bool> run_once(Clock::duration max_wait);

  /// Registered fds (for tests and stats).
  std::size_t watched() const { return regs_.size(); }

 private:
  struct Reg {
    int fd = -1;
    std::uint32_t interest = 0;
    bool dead = false;
    IoCallback on_ready;
  };

  Loop() = default;
  Status iterate(int timeout_ms);
  int wait_timeout_ms(Clock::duration max_wait) const;
  void run_timers();
  void run_mailbox();
  void run_deferred();

  int epoll_fd_ = -1;
  std::shared_ptr<Remote::Mailbox> mailbox_;
  std::unordered_map<int, std::unique_ptr<Reg>> regs_;
  std::vector<std::unique_ptr<Reg>> graveyard_;
  std::map<std::pair<Clock::time_point, std::uint64_t>, Callback> timers_;
  std::uint64_t next_timer_id_ = 1;
  std::vector<Callback> deferred_;
  Callback stop_handler_;
  bool quit_ = false;
};

}  // namespace daskcaps::net
