#include "daskcaps/base/line_log.h"

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace daskcaps {

struct LineLog::State {
  int fd = -1;
  std::size_t max_bytes = 0;
  std::mutex mu;
  std::condition_variable wake, idle;
  std::deque<std::string> queue;
  std::size_t queued_bytes = 0;
  std::uint64_t dropped = 0, unreported = 0;
  bool writing = false, stop = false, failed = false;
  std::thread thread;  // runs run(); joined (or detached) by ~LineLog
};

LineLog::LineLog(int fd, std::size_t max_bytes) : state_(std::make_shared<State>()) {
  state_->fd = fd;
  state_->max_bytes = max_bytes;
  state_->thread = std::thread(run, state_);
}

LineLog::~LineLog() {
  const bool written = flush_for(std::chrono::seconds(5));
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->wake.notify_all();
  if (written)
    state_->thread.join();
  else
    state_->thread.detach();  // blocked on a reader that is gone: the process's exit ends it
}

void LineLog::write(std::string line) {
  line.push_back('\n');
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.failed || s.stop || s.queued_bytes + line.size() > s.max_bytes) {
      ++s.dropped;
      ++s.unreported;
      return;
    }
    if (s.unreported > 0) {
      std::string note = "(";
      note += std::to_string(s.unreported);
      note += " log lines dropped: the output was not read)\n";
      line = note + line;
      s.unreported = 0;
    }
    s.queued_bytes += line.size();
    s.queue.push_back(std::move(line));
  }
  s.wake.notify_one();
}

bool LineLog::flush_for(std::chrono::milliseconds limit) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  return s.idle.wait_for(lock, limit, [&] { return s.failed || (s.queue.empty() && !s.writing); });
}

std::uint64_t LineLog::dropped() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->dropped;
}

void LineLog::run(std::shared_ptr<State> state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    s.wake.wait(lock, [&] { return s.stop || !s.queue.empty(); });
    if (s.queue.empty()) return;  // stopped, everything written
    std::string line = std::move(s.queue.front());
    s.queue.pop_front();
    s.writing = true;
    lock.unlock();
    std::size_t at = 0;
    bool ok = true;
    while (at < line.size()) {
      const ssize_t n = ::write(s.fd, line.data() + at, line.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = false;
        break;
      }
      at += static_cast<std::size_t>(n);
    }
    lock.lock();
    s.writing = false;
    s.queued_bytes -= line.size();
    if (!ok) {
      s.failed = true;
      s.dropped += s.queue.size();
      s.queue.clear();
      s.queued_bytes = 0;
    }
    if (s.queue.empty()) s.idle.notify_all();
  }
}

}  // namespace daskcaps
