// OrderedPool (core/recode/detail/ordered_pool.h): the workers of a
// RecodeEngine, its byte bound, its batches and its deliveries in order.
#include "core/recode/detail/ordered_pool.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "daskcaps/wire/frames.h"

namespace daskcaps::detail {

OrderedPool::OrderedPool(const EngineOptions& options, RunFn run) : options_(options), run_(run) {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  unsigned n = options_.threads ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(n);
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
}

OrderedPool::~OrderedPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    jobs_.clear();
    for (auto& [id, s] : streams_) s->cancelled = true;
  }
  work_cv_.notify_all();
  room_cv_.notify_all();
  for (auto& t : workers_) t.join();
  if (event_fd_ >= 0) ::close(event_fd_);
}

OrderedPool::StreamId OrderedPool::open_stream(StreamOptions options, Deliver deliver) {
  auto s = std::make_shared<Stream>();
  s->options = std::move(options);
  s->deliver = std::move(deliver);
  std::lock_guard<std::mutex> lock(mu_);
  s->id = next_id_++;
  streams_[s->id] = s;
  return s->id;
}

void OrderedPool::wait_for_room(StreamId id, std::uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  auto room = [&] { return stopping_ || inflight_ == 0 || inflight_ + bytes <= options_.max_inflight_bytes; };
  if (room()) return;
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  std::shared_ptr<Stream> s = it->second;
  dispatch_locked(lock, s);  // what an open batch holds must go out, or its room never comes back
  room_cv_.wait(lock, [&] { return room() || s->cancelled; });
}

std::uint64_t OrderedPool::inflight_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inflight_;
}

OrderedPool::Submitted OrderedPool::enqueue(StreamId id, Input& input, bool wait) {
  RawMessage& raw = input.raw;
  if (raw.wire_size == 0) {
    raw.wire_size = prelude_size(raw.frames.size());
    for (const WireFrame& f : raw.frames) raw.wire_size += f.size();
  }
  const std::uint64_t size = raw.wire_size;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second->cancelled) return Submitted::closed;
  std::shared_ptr<Stream> s = it->second;
  auto no_room = [&] { return inflight_ > 0 && inflight_ + size > options_.max_inflight_bytes; };
  if (no_room()) {
    // What is held back in an open batch must go out, or the room it
    // takes would never come back.
    dispatch_locked(lock, s);
    if (!wait) return Submitted::full;
    room_cv_.wait(lock, [&] { return stopping_ || s->cancelled || !no_room(); });
    if (stopping_ || s->cancelled) return Submitted::closed;
  }
  inflight_ += size;
  const std::uint64_t seq = s->next_seq++;
  s->sizes.push_back(size);

  if (size <= s->options.inline_bytes) {
    // On this thread: a small message costs no hand-off.
    ++s->dispatched;
    lock.unlock();
    std::vector<Output> out;
    out.push_back(run_one(*s, seq, input));
    complete(s, std::move(out));
    return Submitted::accepted;
  }
  if (size <= options_.batch_bytes && options_.batch_messages > 1) {
    if (s->batch.empty()) s->batch_first = seq;
    s->batch.push_back(std::move(input));
    s->batch_bytes += size;
    // Out at once when nothing else of the stream is in flight (no wait
    // for company), or when full; otherwise when the work ahead completes.
    if (s->dispatched == 0 || s->batch.size() >= options_.batch_messages ||
        s->batch_bytes >= options_.batch_bytes * options_.batch_messages)
      dispatch_locked(lock, s);
    return Submitted::accepted;
  }
  dispatch_locked(lock, s);  // keep the queue in stream order
  Job job;
  job.stream = s;
  job.first_seq = seq;
  job.inputs.push_back(std::move(input));
  ++s->dispatched;
  jobs_.push_back(std::move(job));
  lock.unlock();
  work_cv_.notify_one();
  return Submitted::accepted;
}

void OrderedPool::dispatch_locked(std::unique_lock<std::mutex>&, const std::shared_ptr<Stream>& s) {
  if (s->batch.empty()) return;
  Job job;
  job.stream = s;
  job.first_seq = s->batch_first;
  job.inputs = std::move(s->batch);
  s->batch.clear();
  s->batch_bytes = 0;
  s->dispatched += job.inputs.size();
  jobs_.push_back(std::move(job));
  work_cv_.notify_one();
}

void OrderedPool::flush(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  auto s = it->second;
  dispatch_locked(lock, s);
}

void OrderedPool::worker_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::vector<Output> outputs;
    outputs.reserve(job.inputs.size());
    for (std::size_t i = 0; i < job.inputs.size(); ++i) {
      if (job.stream->cancelled) break;
      outputs.push_back(run_one(*job.stream, job.first_seq + i, job.inputs[i]));
    }
    // Messages skipped because of a cancel count as complete too.
    while (outputs.size() < job.inputs.size()) {
      Output o;
      o.seq = job.first_seq + outputs.size();
      o.frames = make_error(Errc::internal, "stream cancelled");
      outputs.push_back(std::move(o));
    }
    job.inputs.clear();
    complete(job.stream, std::move(outputs));
  }
}

OrderedPool::Output OrderedPool::run_one(const Stream& s, std::uint64_t seq, Input& input) const {
  Output out;
  out.stream = s.id;
  out.tag = input.tag;
  out.index = input.index;
  out.seq = seq;
  out.wire_size = input.raw.wire_size;
  run_(s.options.transcode, input, out);
  return out;
}

void OrderedPool::complete(const std::shared_ptr<Stream>& s, std::vector<Output> outputs) {
  std::unique_lock<std::mutex> lock(mu_);
  s->dispatched -= outputs.size();
  if (s->cancelled) {
    done_cv_.notify_all();
    return;
  }
  for (Output& o : outputs) {
    const std::uint64_t at = o.seq - s->next_out;
    if (s->done.size() <= at) s->done.resize(at + 1);
    s->done[at] = std::move(o);
  }
  // The work ahead is done: a batch waiting for it goes now.
  if (s->dispatched == 0) dispatch_locked(lock, s);
  deliver_ready(lock, s);
}

void OrderedPool::release_locked(std::uint64_t bytes) {
  inflight_ -= std::min(inflight_, bytes);
  room_cv_.notify_all();
}

void OrderedPool::deliver_ready(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Stream>& s) {
  if (s->delivering) return;  // the thread delivering now picks these up too
  s->delivering = true;
  for (;;) {
    std::vector<Output> ready;
    ready.reserve(s->done.size());
    std::uint64_t bytes = 0;
    while (!s->done.empty() && s->done.front()) {
      ready.push_back(std::move(*s->done.front()));
      s->done.pop_front();
      bytes += s->sizes.front();
      s->sizes.pop_front();
      ++s->next_out;
    }
    if (ready.empty()) break;
    if (!s->deliver) {
      // Their bytes are released when poll() hands them out.
      for (Output& o : ready) polled_.push_back(std::move(o));
      if (!event_armed_) {
        const std::uint64_t one = 1;
        if (::write(event_fd_, &one, sizeof one) == sizeof one) event_armed_ = true;
      }
      continue;
    }
    lock.unlock();
    for (Output& o : ready) s->deliver(std::move(o));
    lock.lock();
    release_locked(bytes);
    if (s->cancelled) break;
  }
  s->delivering = false;
  done_cv_.notify_all();
}

std::size_t OrderedPool::poll(const Deliver& fn, std::size_t max) {
  std::vector<Output> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!polled_.empty() && out.size() < max) {
      out.push_back(std::move(polled_.front()));
      polled_.pop_front();
    }
    if (polled_.empty() && event_armed_) {
      std::uint64_t count = 0;
      if (::read(event_fd_, &count, sizeof count) == sizeof count || errno == EAGAIN) event_armed_ = false;
    }
  }
  for (Output& o : out) {
    const std::uint64_t bytes = o.wire_size;
    fn(std::move(o));
    std::lock_guard<std::mutex> lock(mu_);
    release_locked(bytes);
  }
  return out.size();
}

void OrderedPool::cancel(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  std::shared_ptr<Stream> s = it->second;
  s->cancelled = true;
  // Queued jobs of the stream go; running ones finish and are dropped.
  for (auto j = jobs_.begin(); j != jobs_.end();) {
    if (j->stream == s) {
      s->dispatched -= j->inputs.size();
      j = jobs_.erase(j);
    } else {
      ++j;
    }
  }
  std::uint64_t bytes = 0;
  for (std::uint64_t b : s->sizes) bytes += b;
  s->sizes.clear();
  s->done.clear();
  s->batch.clear();
  // Outputs already queued for poll() go too.
  for (auto o = polled_.begin(); o != polled_.end();) {
    if (o->stream == id) {
      bytes += o->wire_size;
      o = polled_.erase(o);
    } else {
      ++o;
    }
  }
  release_locked(bytes);
  done_cv_.wait(lock, [&] { return s->dispatched == 0 && !s->delivering; });
  streams_.erase(id);
}

bool OrderedPool::drain_locked(std::unique_lock<std::mutex>& lock, StreamId id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return false;
  std::shared_ptr<Stream> s = it->second;
  dispatch_locked(lock, s);
  done_cv_.wait(lock, [&] { return s->cancelled || (s->next_out == s->next_seq && !s->delivering); });
  return true;
}

void OrderedPool::drain(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  drain_locked(lock, id);
}

void OrderedPool::finish(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (drain_locked(lock, id)) streams_.erase(id);
}

}  // namespace daskcaps::detail
