#include "daskcaps/recode/engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/wire/serialized.h"
#include "daskcaps/recode/field_pickles.h"
#include "daskcaps/recode/stream_recode.h"

namespace daskcaps {

namespace {

bool contains(ByteSpan hay, std::string_view needle) {
  if (needle.empty() || hay.size() < needle.size()) return false;
  return ::memmem(hay.data(), hay.size(), needle.data(), needle.size()) != nullptr;
}

}  // namespace

bool needs_recode(std::span<const Bytes> frames, const TranscodeOptions& options) {
  if (options.is_identity()) return false;
  // Every sub-object owns a sub-header frame; one frame means none.
  if (frames.size() != 1) return true;
  const ByteSpan f0 = frames[0].span();
  // A placeholder there would point at a frame the message lacks: let the
  // parser say so. A handshake is rewritten to advertise the target.
  // With a pickle protocol, an error dict may hold its exception as a bin
  // in frame 0 (core/recode/error_pickles.h: the scheduler's KilledWorker).
  // With a pickle protocol too, a plain field may hold a pickle by its op
  // (core/recode/field_pickles.h: a result's type in key-in-memory).
  return contains(f0, "__Serialized__") || contains(f0, "__Pickled__") || contains(f0, "pickle-protocol") ||
         contains(f0, "compression") ||
         (options.pickle_protocol && (contains(f0, "exception") || may_hold_field_pickles(f0)));
}

struct RecodeEngine::Stream {
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

RecodeEngine::RecodeEngine(const EngineOptions& options) : options_(options) {
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  unsigned n = options_.threads ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(n);
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
}

RecodeEngine::~RecodeEngine() {
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

RecodeEngine::StreamId RecodeEngine::open_stream(const StreamOptions& options, Deliver deliver) {
  auto s = std::make_shared<Stream>();
  s->options = options;
  // Large frames use every core of the pool (codec.cpp applies it only
  // above its own size threshold).
  if (s->options.transcode.compress.zstd_workers == 0)
    s->options.transcode.compress.zstd_workers = static_cast<int>(workers_.size());
  s->deliver = std::move(deliver);
  std::lock_guard<std::mutex> lock(mu_);
  s->id = next_id_++;
  streams_[s->id] = s;
  return s->id;
}

void RecodeEngine::wait_for_room(StreamId id, std::uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  auto room = [&] { return stopping_ || inflight_ == 0 || inflight_ + bytes <= options_.max_inflight_bytes; };
  if (room()) return;
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  std::shared_ptr<Stream> s = it->second;
  dispatch_locked(lock, s);  // what an open batch holds must go out, or its room never comes back
  room_cv_.wait(lock, [&] { return room() || s->cancelled; });
}

std::uint64_t RecodeEngine::inflight_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inflight_;
}

RecodeEngine::Submitted RecodeEngine::try_submit(StreamId stream, Input& input) {
  return enqueue(stream, input, false);
}

bool RecodeEngine::submit(StreamId stream, Input input) {
  return enqueue(stream, input, true) == Submitted::accepted;
}

RecodeEngine::Submitted RecodeEngine::enqueue(StreamId id, Input& input, bool wait) {
  if (input.wire_size == 0) {
    input.wire_size = prelude_size(input.frames.size());
    for (const Bytes& f : input.frames) input.wire_size += f.size();
  }
  const std::uint64_t size = input.wire_size;
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

void RecodeEngine::dispatch_locked(std::unique_lock<std::mutex>&, const std::shared_ptr<Stream>& s) {
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

void RecodeEngine::flush(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  auto s = it->second;
  dispatch_locked(lock, s);
}

void RecodeEngine::worker_loop() {
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

Result<std::vector<Bytes>> recode_message(std::vector<Bytes> frames, const TranscodeOptions& options,
                                          TranscodeReport& report, bool& passed_through, std::uint64_t offset,
                                          std::shared_ptr<PageBuffer> storage) {
  passed_through = false;
  if (!needs_recode(frames, options)) {
    // Forwarded as it is, but frame 0 is still read under the limits: a
    // message the full path would refuse is refused here too.
    if (!frames.empty()) {
      const std::uint64_t at = offset + prelude_size(frames.size());
      if (auto v = msgpack::decode_all(frames[0].span(), options.limits, at); !v)
        return std::move(v).error().add_context("frame 0");
    }
    for (const Bytes& f : frames) report.bytes_in += f.size();
    report.bytes_out = report.bytes_in;
    passed_through = true;
    return frames;
  }
  auto offsets = frame_offsets_for(offset, frames);
  auto parsed = parse_message(std::move(frames), options.limits, offsets);
  if (!parsed) return std::move(parsed).error();
  parsed->storage = std::move(storage);
  return transcode_message(std::move(*parsed), options, report);
}

RecodeEngine::Output RecodeEngine::run_one(const Stream& s, std::uint64_t seq, Input& input) const {
  Output out;
  out.stream = s.id;
  out.tag = input.tag;
  out.index = input.index;
  out.seq = seq;
  out.wire_size = input.wire_size;
  const TranscodeOptions& topt = s.options.transcode;
  if (input.parsed) {
    Message parsed = std::move(*input.parsed);
    if (Status st = load_stored_frames(parsed); !st) {
      out.frames = std::move(st).error();
      return out;
    }
    if (!parsed.storage) parsed.storage = std::move(input.storage);
    out.frames = transcode_message(std::move(parsed), topt, out.report);
    return out;
  }
  if (input.store) {
    // Frames left in their file: read in now, and parsed with them.
    auto offsets = frame_offsets_for(input.offset, std::span<const std::uint64_t>(input.frame_sizes));
    auto parsed = parse_message(std::move(input.frames), topt.limits, offsets);
    if (!parsed) {
      out.frames = std::move(parsed).error();
      return out;
    }
    parsed->store = std::move(input.store);
    parsed->frame_sizes = std::move(input.frame_sizes);
    if (Status st = load_stored_frames(*parsed); !st) {
      out.frames = std::move(st).error();
      return out;
    }
    out.frames = transcode_message(std::move(*parsed), topt, out.report);
    return out;
  }
  out.frames = recode_message(std::move(input.frames), topt, out.report, out.passed_through, input.offset,
                              std::move(input.storage));
  return out;
}

void RecodeEngine::complete(const std::shared_ptr<Stream>& s, std::vector<Output> outputs) {
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

void RecodeEngine::release_locked(std::uint64_t bytes) {
  inflight_ -= std::min(inflight_, bytes);
  room_cv_.notify_all();
}

void RecodeEngine::deliver_ready(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Stream>& s) {
  if (s->delivering) return;  // the thread delivering now picks these up too
  s->delivering = true;
  for (;;) {
    std::vector<Output> ready;
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

std::size_t RecodeEngine::poll(const Deliver& fn, std::size_t max) {
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

void RecodeEngine::cancel(StreamId id) {
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

bool RecodeEngine::drain_locked(std::unique_lock<std::mutex>& lock, StreamId id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return false;
  std::shared_ptr<Stream> s = it->second;
  dispatch_locked(lock, s);
  done_cv_.wait(lock, [&] { return s->cancelled || (s->next_out == s->next_seq && !s->delivering); });
  return true;
}

void RecodeEngine::drain(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  drain_locked(lock, id);
}

void RecodeEngine::finish(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (drain_locked(lock, id)) streams_.erase(id);
}

namespace {

// Whether the driver recodes `in` in place (see transcode_stream): parses
// it (into `parsed`) when it may be; leaves `in` as it was otherwise.
bool goes_in_place(RecodeEngine::Input& in, const TranscodeOptions& options, std::uint64_t in_place_bytes,
                   std::optional<Message>& parsed) {
  if (in_place_bytes == 0 || options.is_identity()) return false;
  // A message of one frame holds no object; a small one cannot decode to
  // in_place_bytes (zstd makes at most 128 KiB per 4 bytes).
  if (in.frames.size() < 2) return false;
  std::vector<std::uint64_t> sizes = in.frame_sizes;
  if (!in.store) {
    sizes.clear();
    for (const Bytes& f : in.frames) sizes.push_back(f.size());
  }
  if (in.wire_size == 0) {
    in.wire_size = prelude_size(sizes.size());
    for (std::uint64_t k : sizes) in.wire_size += k;
  }
  if (!in.store && in.wire_size < in_place_bytes / 32768) return false;
  auto offsets = frame_offsets_for(in.offset, std::span<const std::uint64_t>(sizes));
  auto m = parse_message(in.frames, options.limits, offsets);
  if (!m) return false;  // the engine reports it, in its place
  m->store = in.store;
  m->frame_sizes = in.store ? in.frame_sizes : std::vector<std::uint64_t>{};
  bool big = in.store != nullptr;
  if (in_place_applies(*m, options)) {
    std::uint64_t decoded = 0;
    for (const SubObject& obj : m->objects) {
      auto codecs = frame_compression(obj);
      if (!codecs) break;  // the engine reports it
      for (std::size_t i = 0; i < obj.frames.size() && !big; ++i) {
        // What the whole path would decode: a frame whose codec changes,
        // and, with a pickle protocol, any compressed frame (the frames of
        // a data pickle are decoded to recode it).
        const bool decoded_for_pickle = options.pickle_protocol && (*codecs)[i].compresses();
        if (!decoded_for_pickle) {
          if (!options.codec) continue;
          auto action = frame_recode_for((*codecs)[i], *options.codec, options);
          if (!action || *action == FrameRecode::keep) continue;
        }
        auto codec = codec_of((*codecs)[i]);
        if (!codec) continue;
        const std::size_t index = obj.header_frame + 1 + i;
        std::optional<std::uint64_t> size;
        if (*codec == Codec::none) size = frame_wire_size(*m, index);
        else if (!frame_stored(*m, index)) size = declared_size(*codec, m->original_frames[index]);
        else size = std::nullopt;  // stored: big already
        decoded += size.value_or(in_place_bytes);
        big = decoded >= in_place_bytes;
      }
    }
    if (big) {
      parsed = std::move(*m);
      return true;
    }
  }
  // The engine takes it, parsed.
  m->storage = in.storage;
  in.parsed = std::move(*m);
  in.frames.clear();
  return false;
}

}  // namespace

Result<TranscodeReport> transcode_stream(const InputFn& next, const OutputFn& write,
                                         const TranscodeOptions& options, const EngineOptions& engine_options,
                                         const InPlaceFn& in_place) {
  RecodeEngine engine(engine_options);
  std::mutex mu;
  std::optional<Error> failed;
  TranscodeReport total;
  RecodeEngine::StreamOptions so;
  so.transcode = options;
  // Deliveries of one stream never overlap: `failed` and `total` are only
  // written here, and read under `mu` by the reading thread.
  const auto stream = engine.open_stream(so, [&](RecodeEngine::Output&& out) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (failed) return;
    }
    Status st;
    if (!out.frames)
      st = std::move(out.frames).error().add_context("message " + std::to_string(out.index));
    else
      st = write(out.tag, *out.frames);
    std::lock_guard<std::mutex> lock(mu);
    if (!st)
      failed = std::move(st).error();
    else
      total += out.report;
  });
  auto has_failed = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return failed.has_value();
  };
  // The options the engine's stream recodes with (zstd on its workers), for
  // the messages recoded here to come out the same.
  TranscodeOptions here = options;
  if (here.compress.zstd_workers == 0) here.compress.zstd_workers = static_cast<int>(engine.threads());
  std::uint64_t largest = 0;  // wire size of the largest message so far
  for (std::uint64_t index = 0;; ++index) {
    if (has_failed()) break;
    // Room first, then the message: not one held while submit() waits.
    engine.wait_for_room(stream, largest);
    if (has_failed()) break;
    auto m = next();
    if (!m) {
      engine.cancel(stream);
      return std::move(m).error();
    }
    if (!*m) break;
    RecodeEngine::Input& in = **m;
    in.index = index;
    largest = std::max(largest, in.wire_size);
    std::optional<Message> parsed;
    if (in_place && goes_in_place(in, here, engine_options.in_place_bytes, parsed)) {
      // Everything before it is written first.
      engine.drain(stream);
      if (has_failed()) break;
      TranscodeReport report;
      Status st = in_place(in.tag, [&](MessageSink& sink) {
        return transcode_message_in_place(*parsed, here, report, sink);
      });
      std::lock_guard<std::mutex> lock(mu);
      if (!st) {
        failed = std::move(st).error().add_context("message " + std::to_string(index));
        break;
      }
      total += report;
      continue;
    }
    if (!engine.submit(stream, std::move(in))) break;
  }
  if (has_failed())
    engine.cancel(stream);
  else
    engine.finish(stream);
  std::lock_guard<std::mutex> lock(mu);
  if (failed) return *failed;
  return total;
}

}  // namespace daskcaps
