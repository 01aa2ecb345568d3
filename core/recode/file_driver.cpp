// transcode_stream() (daskcaps/recode/engine.h): the driver of `transcode`,
// reading messages in on one thread, recoding them on an engine of its own
// and writing them out in order, and its in-place policy: which large
// messages it recodes on its own thread in a window of memory
// (core/recode/internal/stream_recode.h) instead.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daskcaps/recode/engine.h"
#include "core/recode/detail/object_transcoder.h"
#include "core/recode/internal/stream_recode.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "core/wire/internal/serialized.h"

namespace daskcaps {

namespace {

// At most how many bytes the frames of `raw` (all in memory) decode to,
// read from their bytes alone: a zstd frame declares its content size (none
// declared: no bound); any other codec Dask uses expands a frame at most
// 1,032 times (deflate's limit; lz4's is 255, snappy's lower). It spares
// parsing a message on the reading thread that cannot reach the in-place
// size: a message parsed there is also freed on a worker, and the two
// threads' allocators then contend.
std::optional<std::uint64_t> decoded_bound(const RawMessage& raw) {
  constexpr std::uint64_t kMaxRatio = 1032;
  std::uint64_t bound = 0;
  for (const WireFrame& f : raw.frames) {
    const ByteSpan b = f.bytes().span();
    std::uint32_t magic = 0;
    if (b.size() >= 4) std::memcpy(&magic, b.data(), 4);
    const bool zstd = magic == 0xFD2FB528u;
    const bool skippable = (magic & 0xFFFFFFF0u) == 0x184D2A50u;  // zstd's skippable frames
    if (skippable) return std::nullopt;
    std::uint64_t most = f.size() * kMaxRatio;
    if (zstd) {
      auto declared = declared_size(Codec::zstd, b);
      if (!declared) return std::nullopt;
      most = std::max(most, *declared);
    }
    bound += most;
  }
  return bound;
}

// Whether the driver recodes `in` in place (see transcode_stream): parses
// it (into `parsed`) when it may be; leaves `in` as it was otherwise.
bool goes_in_place(RecodeEngine::Input& in, const TranscodeOptions& options, std::uint64_t in_place_bytes,
                   std::optional<Message>& parsed) {
  if (in_place_bytes == 0 || options.is_identity()) return false;
  // A message of one frame holds no object; a small one cannot decode to
  // in_place_bytes (zstd makes at most 128 KiB per 4 bytes).
  RawMessage& raw = in.raw;
  if (raw.frames.size() < 2) return false;
  if (raw.wire_size == 0) {
    raw.wire_size = prelude_size(raw.frames.size());
    for (const WireFrame& f : raw.frames) raw.wire_size += f.size();
  }
  const bool stored = raw.any_stored();
  if (!stored && raw.wire_size < in_place_bytes / 32768) return false;
  if (!stored) {
    const auto bound = decoded_bound(raw);
    if (bound && *bound < in_place_bytes) return false;
  }
  const std::vector<std::uint64_t> offsets = raw.frame_offsets();
  auto m = parse_message(raw, options.limits, offsets);
  if (!m) return false;  // the engine reports it, in its place
  bool big = stored;
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
        const WireFrame& frame = m->raw.frames[index];
        if (*codec == Codec::none) size = frame.size();
        else if (!frame.is_stored()) size = declared_size(*codec, frame.bytes());
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
  // The engine takes it, parsed; `raw` keeps its offset and wire size.
  in.parsed = std::move(*m);
  raw.frames.clear();
  raw.storage.reset();
  raw.store.reset();
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
    largest = std::max(largest, in.raw.wire_size);
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
