// The engine's per-message dispatch (daskcaps/recode/engine.h):
// needs_recode(), recode_message() and what a worker does to one message,
// and RecodeEngine's members, which forward to its pool
// (core/recode/detail/ordered_pool.h: the threads, the byte bound, the order
// of deliveries). transcode_stream(), the file driver, is in
// core/recode/file_driver.cpp.
#include "daskcaps/recode/engine.h"

#include <cstring>
#include <string_view>
#include <utility>

#include "core/recode/detail/ordered_pool.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"
#include "core/recode/internal/field_pickles.h"

namespace daskcaps {

namespace {

bool contains(ByteSpan hay, std::string_view needle) {
  if (needle.empty() || hay.size() < needle.size()) return false;
  return ::memmem(hay.data(), hay.size(), needle.data(), needle.size()) != nullptr;
}

}  // namespace

bool needs_recode(const RawMessage& message, const TranscodeOptions& options) {
  if (options.is_identity()) return false;
  // Every sub-object owns a sub-header frame; one frame means none.
  if (message.frames.size() != 1) return true;
  const ByteSpan f0 = message.frames[0].bytes().span();
  // A placeholder there would point at a frame the message lacks: let the
  // parser say so. A handshake is rewritten to advertise the target.
  // With a pickle protocol, an error dict may hold its exception as a bin
  // in frame 0 (core/recode/internal/error_pickles.h: the scheduler's KilledWorker).
  // With a pickle protocol too, a plain field may hold a pickle by its op
  // (core/recode/internal/field_pickles.h: a result's type in key-in-memory).
  return contains(f0, "__Serialized__") || contains(f0, "__Pickled__") || contains(f0, "pickle-protocol") ||
         contains(f0, "compression") ||
         (options.pickle_protocol && (contains(f0, "exception") || may_hold_field_pickles(f0)));
}

Result<std::vector<Bytes>> recode_message(RawMessage message, const TranscodeOptions& options,
                                          TranscodeReport& report, bool& passed_through) {
  passed_through = false;
  if (!message.any_stored() && !needs_recode(message, options)) {
    // Forwarded as it is, but frame 0 is still read under the limits: a
    // message the full path would refuse is refused here too.
    if (!message.frames.empty()) {
      const std::uint64_t at = message.offset + prelude_size(message.frames.size());
      if (auto v = msgpack::decode_all(message.frames[0].bytes().span(), options.limits, at); !v)
        return std::move(v).error().add_context("frame 0");
    }
    for (const WireFrame& f : message.frames) report.bytes_in += f.size();
    report.bytes_out = report.bytes_in;
    passed_through = true;
    return message.memory_frames();
  }
  const std::vector<std::uint64_t> offsets = message.frame_offsets();
  auto parsed = parse_message(std::move(message), options.limits, offsets);
  if (!parsed) return std::move(parsed).error();
  // Stored frames are parsed from frame 0 and the sub-headers, then read in.
  if (Status st = load_stored_frames(*parsed); !st) return std::move(st).error();
  return transcode_message(std::move(*parsed), options, report);
}

namespace {

// What the pool does to one message (OrderedPool::RunFn): a message parsed
// by the file driver is recoded as it is, with its stored frames read in;
// any other goes through recode_message().
void recode_input(const TranscodeOptions& topt, RecodeEngine::Input& input, RecodeEngine::Output& out) {
  if (input.parsed) {
    Message parsed = std::move(*input.parsed);
    if (Status st = load_stored_frames(parsed); !st) {
      out.frames = std::move(st).error();
      return;
    }
    out.frames = transcode_message(std::move(parsed), topt, out.report);
    return;
  }
  out.frames = recode_message(std::move(input.raw), topt, out.report, out.passed_through);
}

}  // namespace

RecodeEngine::RecodeEngine(const EngineOptions& options)
    : pool_(std::make_unique<detail::OrderedPool>(options, &recode_input)) {}

RecodeEngine::~RecodeEngine() = default;

RecodeEngine::StreamId RecodeEngine::open_stream(const StreamOptions& options, Deliver deliver) {
  StreamOptions o = options;
  // Large frames use every core of the pool (codec.cpp applies it only
  // above its own size threshold).
  if (o.transcode.compress.zstd_workers == 0) o.transcode.compress.zstd_workers = static_cast<int>(threads());
  return pool_->open_stream(std::move(o), std::move(deliver));
}

RecodeEngine::Submitted RecodeEngine::try_submit(StreamId stream, Input& input) {
  return pool_->enqueue(stream, input, false);
}

bool RecodeEngine::submit(StreamId stream, Input input) {
  return pool_->enqueue(stream, input, true) == Submitted::accepted;
}

void RecodeEngine::flush(StreamId stream) { pool_->flush(stream); }

void RecodeEngine::cancel(StreamId stream) { pool_->cancel(stream); }

void RecodeEngine::finish(StreamId stream) { pool_->finish(stream); }

void RecodeEngine::drain(StreamId stream) { pool_->drain(stream); }

int RecodeEngine::event_fd() const { return pool_->event_fd(); }

std::size_t RecodeEngine::poll(const Deliver& fn, std::size_t max) { return pool_->poll(fn, max); }

void RecodeEngine::wait_for_room(StreamId stream, std::uint64_t bytes) { pool_->wait_for_room(stream, bytes); }

std::uint64_t RecodeEngine::inflight_bytes() const { return pool_->inflight_bytes(); }

unsigned RecodeEngine::threads() const { return pool_->threads(); }

}  // namespace daskcaps
