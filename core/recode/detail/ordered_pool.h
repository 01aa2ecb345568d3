// OrderedPool: the workers behind RecodeEngine, and all its threads, locks
// and queues (daskcaps/recode/engine.h states the contract they keep;
// core/recode/engine.cpp forwards its members here). Streams whose messages
// come back in the order they were submitted, whatever order the workers
// finish them in; the wire bytes in flight bounded across all streams; small
// messages run on the submitting thread or collected into batches; delivery
// by each stream's callback or through a queue drained with poll(), signalled
// on an eventfd; cancel, drain and finish per stream. What is done to one
// message is not its concern: the RunFn it is made with
// (core/recode/engine.cpp: the per-message dispatch).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "daskcaps/recode/engine.h"
#include "daskcaps/recode/transcode.h"

// Hidden, declarations included: the standard library's helpers that
// engine.cpp instantiates for it (make_unique, unique_ptr's parts) would
// otherwise leave libdaskcaps.so, their demangled names starting with a
// daskcaps:: return type (tests/cli/test_install.py refuses them).
#pragma GCC visibility push(hidden)

namespace daskcaps::detail {

class OrderedPool {
 public:
  using StreamId = RecodeEngine::StreamId;
  using Input = RecodeEngine::Input;
  using Output = RecodeEngine::Output;
  using Deliver = RecodeEngine::Deliver;
  using StreamOptions = RecodeEngine::StreamOptions;
  using Submitted = RecodeEngine::Submitted;
  /// Recodes one message with its stream's options: sets `out`'s frames,
  /// report and passed_through (the pool sets the rest). Called on the
  /// workers and on submitting threads, any number at once.
  using RunFn = void (*)(const TranscodeOptions& options, Input& input, Output& out);

  OrderedPool(const EngineOptions& options, RunFn run);
  /// Stops the workers: queued work is dropped, running work finishes.
  ~OrderedPool();
  OrderedPool(const OrderedPool&) = delete;
  OrderedPool& operator=(const OrderedPool&) = delete;

  // RecodeEngine's members of the same names.
  StreamId open_stream(StreamOptions options, Deliver deliver);
  /// try_submit() (`wait` false) and submit() (`wait` true).
  Submitted enqueue(StreamId id, Input& input, bool wait);
  void flush(StreamId id);
  void cancel(StreamId id);
  void finish(StreamId id);
  void drain(StreamId id);
  int event_fd() const { return event_fd_; }
  std::size_t poll(const Deliver& fn, std::size_t max);
  void wait_for_room(StreamId id, std::uint64_t bytes);
  std::uint64_t inflight_bytes() const;
  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }

 private:
  struct Stream {
  StreamId id = 0;
  StreamOptions options;
  Deliver deliver;
  std::uint64_t next_seq = 0;  // seq the next submitted message gets
  std::uint64_t next_out = 0;  // seq of the next output to deliver
  std::deque<std::optional<Output>> done;  // done[i]: output of seq next_out + i, once finished
  std::deque<std::uint64_t> sizes;         // wire size of seq next_out + i (released at delivery)
  std::vector<Input> batch;                // open batch, seqs batch_first ...
  std::uint64_t batch_first = 0;
  std::uint64_t batch_bytes = 0;
  std::uint64_t dispatched = 0;  // messages given to workers (or inline) and not complete
  std::atomic<bool> cancelled{false};  // read by workers between messages without the lock
  bool delivering = false;
  };
  struct Job {
    std::shared_ptr<Stream> stream;
    std::uint64_t first_seq = 0;
    std::vector<Input> inputs;  // consecutive messages of the stream
  };

  void worker_loop();
  Output run_one(const Stream& stream, std::uint64_t seq, Input& input) const;
  void dispatch_locked(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Stream>& s);
  void complete(const std::shared_ptr<Stream>& s, std::vector<Output> outputs);
  void deliver_ready(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Stream>& s);
  void release_locked(std::uint64_t bytes);
  /// drain() with the lock held; false when there is no such stream.
  bool drain_locked(std::unique_lock<std::mutex>& lock, StreamId id);

  EngineOptions options_;
  RunFn run_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // workers wait for jobs
  std::condition_variable room_cv_;   // submit() waits for byte room
  std::condition_variable done_cv_;   // finish()/cancel() wait for deliveries
  std::deque<Job> jobs_;
  std::unordered_map<StreamId, std::shared_ptr<Stream>> streams_;
  std::deque<Output> polled_;         // in order per stream, for poll()
  StreamId next_id_ = 1;
  std::uint64_t inflight_ = 0;
  bool stopping_ = false;
  int event_fd_ = -1;
  bool event_armed_ = false;          // the eventfd holds a count not yet read
  std::vector<std::thread> workers_;
};

}  // namespace daskcaps::detail

#pragma GCC visibility pop
