#include "daskcaps/formats/capture_queue.h"

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "formats/internal/pcapng_writer.h"

namespace daskcaps::formats {

namespace {

enum class Kind : std::uint8_t { open, write, skip, close };

struct Item {
  Kind kind = Kind::write;
  CaptureQueue::FlowId flow = 0;
  bool from_client = false;
  std::string client, server;  // open
  std::vector<Bytes> pieces;   // write
  std::uint64_t bytes = 0;     // write and skip
  double ts = 0;
};

// The writer wakes for a batch, not for every piece: when bytes first
// wait, it lets them gather for up to kGatherDelay or until kWakeBytes are
// queued, then writes everything queued (a wake-up per piece cost the loop's
// host thousands of context switches per large message).
constexpr std::size_t kWakeBytes = std::size_t{4} << 20;
constexpr std::chrono::milliseconds kGatherDelay{20};

}  // namespace

struct CaptureQueue::State {
  std::size_t max_bytes = 0;
  std::function<void()> before_item;
  std::unique_ptr<PcapngWriter> writer;  // used by the thread only, until it has stopped
  std::vector<std::optional<PcapngWriter::FlowId>> ids;  // the thread's: queue flow -> writer flow

  std::mutex mu;
  std::condition_variable wake, idle;
  std::deque<Item> queue;
  std::size_t queued_bytes = 0;
  FlowId next_flow = 0;
  std::vector<std::array<bool, 2>> dropping;  // per flow and direction: until the next message start
  Dropped dropped;
  bool notice = false;
  bool writing = false, stop = false, flush = false, failed = false;
  std::optional<Error> error;
  std::thread thread;  // runs run(); joined by finish() or ~CaptureQueue
};

Result<std::unique_ptr<CaptureQueue>> CaptureQueue::create(const std::string& path, const Options& options) {
  auto w = PcapngWriter::create(path);
  if (!w) return std::move(w).error();
  auto s = std::make_shared<State>();
  s->max_bytes = options.max_queued_bytes;
  s->before_item = options.before_item;
  s->writer = std::move(*w);
  std::unique_ptr<CaptureQueue> q(new CaptureQueue(s));
  return q;
}

CaptureQueue::CaptureQueue(std::shared_ptr<State> state) : state_(std::move(state)) {
  state_->thread = std::thread(run, state_);
}

CaptureQueue::~CaptureQueue() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
    state_->queue.clear();
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

CaptureQueue::FlowId CaptureQueue::open_flow(std::string client, std::string server, double ts) {
  State& s = *state_;
  FlowId id;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    id = s.next_flow++;
    s.dropping.push_back({false, false});
    Item it;
    it.kind = Kind::open;
    it.flow = id;
    it.client = std::move(client);
    it.server = std::move(server);
    it.ts = ts;
    wake = s.queue.empty();
    s.queue.push_back(std::move(it));
  }
  if (wake) s.wake.notify_one();
  return id;
}

bool CaptureQueue::write(FlowId flow, bool from_client, std::span<const Bytes> pieces, bool message_start, double ts) {
  State& s = *state_;
  std::uint64_t bytes = 0;
  for (const Bytes& b : pieces) bytes += b.size();
  if (bytes == 0) return true;
  bool taken, wake;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const std::size_t before = s.queued_bytes;
    wake = s.queue.empty();
    if (flow >= s.dropping.size()) return false;
    bool& dropping = s.dropping[flow][from_client ? 0 : 1];
    // A piece larger than the bound is taken when nothing waits: the bytes
    // are in memory anyway (the caller holds them), the queue only keeps
    // them a little longer.
    const bool room = s.queued_bytes == 0 || s.queued_bytes + bytes <= s.max_bytes;
    taken = !s.failed && !s.stop && room && (!dropping || message_start);
    if (taken) {
      dropping = false;
      Item it;
      it.kind = Kind::write;
      it.flow = flow;
      it.from_client = from_client;
      it.pieces.assign(pieces.begin(), pieces.end());
      it.bytes = bytes;
      it.ts = ts;
      s.queued_bytes += bytes;
      s.queue.push_back(std::move(it));
      wake = wake || (before < kWakeBytes && s.queued_bytes >= kWakeBytes);
    } else {
      if (!dropping) s.notice = true;
      dropping = true;
      s.dropped.bytes += bytes;
      s.dropped.pieces += pieces.size();
      // The gap, as one skip per run (runs of drops on a direction merge).
      Item* last = s.queue.empty() ? nullptr : &s.queue.back();
      if (last != nullptr && last->kind == Kind::skip && last->flow == flow && last->from_client == from_client) {
        last->bytes += bytes;
      } else {
        Item it;
        it.kind = Kind::skip;
        it.flow = flow;
        it.from_client = from_client;
        it.bytes = bytes;
        s.queue.push_back(std::move(it));
      }
    }
  }
  if (wake) s.wake.notify_one();
  return taken;
}

void CaptureQueue::close_flow(FlowId flow, double ts) {
  State& s = *state_;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Item it;
    it.kind = Kind::close;
    it.flow = flow;
    it.ts = ts;
    wake = s.queue.empty();
    s.queue.push_back(std::move(it));
  }
  if (wake) s.wake.notify_one();
}

Status CaptureQueue::finish(double ts) {
  State& s = *state_;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.flush = true;
    s.wake.notify_all();
    s.idle.wait(lock, [&] { return s.queue.empty() && !s.writing; });
    s.stop = true;
  }
  s.wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
  // The thread is gone: the writer is ours now.
  if (s.failed) return *s.error;
  if (auto st = s.writer->commit(ts); !st) return st;
  return {};
}

CaptureQueue::Dropped CaptureQueue::dropped() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->dropped;
}

std::optional<std::string> CaptureQueue::take_notice() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.notice) return std::nullopt;
  s.notice = false;
  if (s.failed) return "capture: " + s.error->message() + ": the capture stopped (" + std::to_string(s.dropped.bytes) +
                       " bytes not written)";
  return "capture: the capture file falls behind: bytes that do not fit in its queue (" +
         std::to_string(s.max_bytes) + " bytes) are dropped, up to the next message (" + std::to_string(s.dropped.bytes) +
         " bytes in " + std::to_string(s.dropped.pieces) + " pieces so far; they show as gaps in the capture)";
}

void CaptureQueue::run(std::shared_ptr<State> state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    if (s.queue.empty()) {
      s.idle.notify_all();
      s.wake.wait(lock, [&] { return s.stop || !s.queue.empty(); });
      if (s.queue.empty()) return;  // stopped, everything written
      // A batch gathers (see kWakeBytes).
      s.wake.wait_for(lock, kGatherDelay,
                      [&] { return s.stop || s.flush || s.queued_bytes >= kWakeBytes; });
    }
    Item it = std::move(s.queue.front());
    s.queue.pop_front();
    s.writing = true;
    const bool failed = s.failed;
    lock.unlock();
    if (s.before_item) s.before_item();
    Status st;
    if (!failed) {
      PcapngWriter& w = *s.writer;
      if (it.flow >= s.ids.size()) s.ids.resize(it.flow + 1);
      const std::optional<PcapngWriter::FlowId> id = s.ids[it.flow];
      switch (it.kind) {
        case Kind::open: {
          auto r = w.open_flow(it.client, it.server, it.ts);
          if (r)
            s.ids[it.flow] = *r;
          else
            st = std::move(r).error();
          break;
        }
        case Kind::write: {
          if (!id) break;
          std::vector<ByteSpan> spans(it.pieces.begin(), it.pieces.end());
          st = w.write(*id, it.from_client, spans, it.ts);
          break;
        }
        case Kind::skip:
          if (id) w.skip(*id, it.from_client, it.bytes);
          break;
        case Kind::close:
          if (id) st = w.close_flow(*id, it.ts);
          break;
      }
    }
    it.pieces.clear();  // the bytes go back to their owners before the lock
    lock.lock();
    s.writing = false;
    if (it.kind == Kind::write) s.queued_bytes -= it.bytes;
    if (!st && !s.failed) {
      s.failed = true;
      s.error = st.error();
      s.notice = true;
    }
  }
}

}  // namespace daskcaps::formats
