#include "daskcaps/net/loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

#include "core/net/detail/sys.h"
#include "core/net/internal/clock.h"

namespace daskcaps::net {

struct Loop::Remote::Mailbox {
  int fd = -1;  // the eventfd; closed with the last reference
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<Callback> queue;  // guarded by mu
  bool open = true;             // guarded by mu; false once the loop is gone

  ~Mailbox() {
    if (fd >= 0) ::close(fd);
  }
  void wake() const {
    const std::uint64_t one = 1;
    // EAGAIN (the counter is full) still leaves the eventfd readable.
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
  }
};

static_assert(std::atomic<bool>::is_always_lock_free, "request_stop must be async-signal-safe");

bool Loop::Remote::post(Callback fn) const {
  if (!mailbox_) return false;
  bool first = false;
  {
    std::lock_guard lock(mailbox_->mu);
    if (!mailbox_->open) return false;
    first = mailbox_->queue.empty();
    mailbox_->queue.push_back(std::move(fn));
  }
  if (first) mailbox_->wake();
  return true;
}

void Loop::Remote::request_stop() const {
  if (!mailbox_) return;
  mailbox_->stop.store(true);
  mailbox_->wake();
}

Result<std::unique_ptr<Loop>> Loop::create() {
  std::unique_ptr<Loop> loop(new Loop());
  loop->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (loop->epoll_fd_ < 0) return make_error(Errc::network, "epoll_create1 failed: " + detail::errno_text(errno));
  loop->mailbox_ = std::make_shared<Remote::Mailbox>();
  loop->mailbox_->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (loop->mailbox_->fd < 0) return make_error(Errc::network, "eventfd failed: " + detail::errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the mailbox
  if (epoll_ctl(loop->epoll_fd_, EPOLL_CTL_ADD, loop->mailbox_->fd, &ev) != 0)
    return make_error(Errc::network, "epoll_ctl failed: " + detail::errno_text(errno));
  return loop;
}

Loop::~Loop() {
  if (mailbox_) {
    std::vector<Callback> dropped;
    {
      std::lock_guard lock(mailbox_->mu);
      mailbox_->open = false;
      dropped.swap(mailbox_->queue);
    }
  }
  // Callbacks may own objects that call back into the loop as they die
  // (remove, cancel_timer): destroy them one at a time while the loop's
  // containers stay consistent.
  while (!regs_.empty()) {
    auto it = regs_.begin();
    std::unique_ptr<Reg> reg = std::move(it->second);
    regs_.erase(it);
  }
  while (!graveyard_.empty()) {
    auto dead = std::move(graveyard_);
    graveyard_.clear();
  }
  while (!timers_.empty()) {
    auto node = timers_.extract(timers_.begin());
  }
  while (!deferred_.empty()) {
    auto batch = std::move(deferred_);
    deferred_.clear();
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

namespace {
std::uint32_t epoll_bits(std::uint32_t interest) {
  std::uint32_t e = 0;
  if (interest & Loop::kReadable) e |= EPOLLIN | EPOLLRDHUP;
  if (interest & Loop::kWritable) e |= EPOLLOUT;
  return e;
}
}  // namespace

Status Loop::add(int fd, std::uint32_t interest, IoCallback on_ready) {
  if (regs_.count(fd)) return make_error(Errc::internal, "fd " + std::to_string(fd) + " is already on the loop");
  auto reg = std::make_unique<Reg>();
  reg->fd = fd;
  reg->interest = interest;
  reg->on_ready = std::move(on_ready);
  epoll_event ev{};
  ev.events = epoll_bits(interest);
  ev.data.ptr = reg.get();
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    return make_error(Errc::network, "cannot watch fd " + std::to_string(fd) + ": " + detail::errno_text(errno));
  regs_.emplace(fd, std::move(reg));
  return ok_status();
}

void Loop::set_interest(int fd, std::uint32_t interest) {
  auto it = regs_.find(fd);
  if (it == regs_.end() || it->second->interest == interest) return;
  Reg& reg = *it->second;
  epoll_event ev{};
  ev.events = epoll_bits(interest);
  ev.data.ptr = &reg;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) == 0) reg.interest = interest;
}

void Loop::remove(int fd) {
  auto it = regs_.find(fd);
  if (it == regs_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  it->second->dead = true;
  graveyard_.push_back(std::move(it->second));
  regs_.erase(it);
}

Timer Loop::add_timer(Clock::time_point at, Callback fn) {
  Timer t{at, next_timer_id_++};
  timers_.emplace(std::make_pair(t.at, t.id), std::move(fn));
  return t;
}

void Loop::cancel_timer(Timer& timer) {
  if (!timer) return;
  auto it = timers_.find({timer.at, timer.id});
  if (it != timers_.end()) {
    // Destroy the callback after erasing: it may own things that cancel
    // other timers as they die.
    Callback fn = std::move(it->second);
    timers_.erase(it);
  }
  timer = Timer{};
}

void Loop::defer(Callback fn) { deferred_.push_back(std::move(fn)); }

void Loop::request_stop() {
  mailbox_->stop.store(true);
  mailbox_->wake();
}

int Loop::wait_timeout_ms(Clock::duration max_wait) const {
  if (!deferred_.empty()) return 0;
  Clock::time_point until = Clock::time_point::max();
  const auto now = Clock::now();
  if (max_wait != Clock::duration::max()) until = now + max_wait;
  if (!timers_.empty()) until = std::min(until, timers_.begin()->first.first);
  if (until == Clock::time_point::max()) return -1;
  return millis_until(until, now);
}

void Loop::run_timers() {
  if (timers_.empty()) return;
  const auto now = Clock::now();
  const std::uint64_t limit = next_timer_id_;  // timers added from here on wait for the next pass
  auto it = timers_.begin();
  while (it != timers_.end() && it->first.first <= now) {
    if (it->first.second >= limit) {
      ++it;
      continue;
    }
    auto node = timers_.extract(it);
    node.mapped()();
    it = timers_.begin();
  }
}

void Loop::run_mailbox() {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(mailbox_->fd, &count, sizeof count);
  std::vector<Callback> posted;
  {
    std::lock_guard lock(mailbox_->mu);
    posted.swap(mailbox_->queue);
  }
  for (auto& fn : posted) fn();
  if (mailbox_->stop.exchange(false)) {
    if (stop_handler_)
      stop_handler_();
    else
      quit();
  }
}

void Loop::run_deferred() {
  // Deferred calls may defer more; a bound keeps a call that always
  // re-defers itself from starving the fds (it runs again next iteration).
  for (int round = 0; round < 64 && !deferred_.empty(); ++round) {
    std::vector<Callback> batch;
    batch.swap(deferred_);
    for (auto& fn : batch) fn();
  }
}

Status Loop::iterate(int timeout_ms) {
  std::array<epoll_event, 256> events;
  const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
  if (n < 0 && errno != EINTR) return make_error(Errc::network, "epoll_wait failed: " + detail::errno_text(errno));
  bool mail = false;
  for (int i = 0; i < n; ++i) {
    const epoll_event& ev = events[static_cast<std::size_t>(i)];
    auto* reg = static_cast<Reg*>(ev.data.ptr);
    if (!reg) {
      mail = true;
      continue;
    }
    if (reg->dead) continue;
    std::uint32_t ready = 0;
    if (ev.events & (EPOLLIN | EPOLLRDHUP)) ready |= kReadable;
    if (ev.events & EPOLLOUT) ready |= kWritable;
    if (ev.events & (EPOLLHUP | EPOLLERR)) ready |= kHangup;
    reg->on_ready(ready);
  }
  run_timers();
  if (mail) run_mailbox();
  run_deferred();
  auto dead = std::move(graveyard_);
  graveyard_.clear();
  dead.clear();
  return ok_status();
}

Status Loop::run() {
  quit_ = false;
  while (!quit_) {
    if (auto st = iterate(wait_timeout_ms(Clock::duration::max())); !st) return st;
  }
  return ok_status();
}

Result<bool> Loop::run_once(Clock::duration max_wait) {
  if (auto st = iterate(wait_timeout_ms(max_wait)); !st) return st.error();
  const bool quit = quit_;
  quit_ = false;
  return !quit;
}

}  // namespace daskcaps::net
