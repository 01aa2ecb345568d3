// The frames made of pieces of core/recode/detail/inline_frame.h.
#include "core/recode/detail/inline_frame.h"

#include <sys/mman.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "core/recode/detail/frame_sample.h"
#include "core/wire/internal/serialized.h"

namespace daskcaps::detail {

namespace {

// Bytes [from, from + length) of `j` decoded, to `fn`.
Status run_joined(const Message& in, const Joined& j, std::uint64_t from, std::uint64_t length,
                  const TranscodeOptions& opt, const WindowFn& fn) {
  const std::uint64_t end = from + length;
  std::uint64_t pos = 0;  // where frame i starts in j
  for (std::size_t i = 0; i < j.frames.size() && pos < end; pos += j.sizes[i], ++i) {
    const std::uint64_t d = j.sizes[i];
    if (pos + d <= from) continue;
    auto input = in.raw.frame_input(j.frames[i]);
    const std::uint64_t lo = std::max(from, pos) - pos, hi = std::min(end, pos + d) - pos;
    if (!j.entries[i].compresses()) {
      for (std::uint64_t at = lo; at < hi;) {
        auto piece = input->read(at, static_cast<std::size_t>(std::min<std::uint64_t>(hi - at, std::uint64_t{256} << 10)));
        if (!piece) return std::move(piece).error();
        if (piece->empty()) return make_error(Errc::io, "frame input ended early");
        if (Status s = fn(*piece); !s) return s;
        at += piece->size();
      }
      continue;
    }
    auto codec = codec_of(j.entries[i]);
    if (!codec) return std::move(codec).error();
    // Decoded from its start; the windows before `lo` are skipped, and the
    // decoding stops once past `hi` unless `hi` is the frame's end: the
    // window that ends the frame reads it to its last byte, so that what
    // follows the declared size is refused here as decompress() refuses it.
    std::uint64_t at = 0;
    bool done = false;
    auto r = decode_in_windows(*codec, *input, opt.limits.max_decompressed_bytes, [&](ByteSpan w) -> Status {
      const std::uint64_t wlo = std::max(at, lo), whi = std::min(at + w.size(), hi);
      if (wlo < whi) {
        if (Status s = fn(w.subspan(static_cast<std::size_t>(wlo - at), static_cast<std::size_t>(whi - wlo))); !s)
          return s;
      }
      at += w.size();
      if (at >= hi && hi < d) {
        done = true;
        return make_error(Errc::internal, "enough");
      }
      return ok_status();
    });
    if (!r && !done) return std::move(r).error().add_context(j.labels[i]);
    if (r && *r != d)
      return make_error(Errc::codec_failed, "frame decoded to " + std::to_string(*r) + " bytes, not " + std::to_string(d))
          .add_context(j.labels[i]);
  }
  return ok_status();
}

// The decoded size of one wire frame, without decoding it when its header
// says; nullopt when it cannot be known here (the object is then recoded
// whole, which reports what is wrong). A frame that declares 0 bytes is
// decoded all the same: run_joined() never reads a frame of no bytes, so
// this is the one place a block claiming to be empty is checked, as
// decompress() checks it on the whole path.
std::optional<std::uint64_t> decoded_size(const Message& in, std::size_t index, const CompressionValue& entry,
                                          const TranscodeOptions& opt) {
  auto input = in.raw.frame_input(index);
  if (!entry.compresses()) return input->size();
  auto codec = codec_of(entry);
  if (!codec) return std::nullopt;
  std::optional<std::uint64_t> d = declared_of(*codec, *input);
  if (!d || *d == 0) {
    auto m = measure_frame(*codec, *input, opt.limits.max_decompressed_bytes);
    if (!m) return std::nullopt;
    d = *m;
  }
  if (*d > opt.limits.max_decompressed_bytes) return std::nullopt;
  return d;
}

// Room that is never read: what a gap-left buffer hands the pickle engine
// (pickle::RecodeOptions::gap_bytes reads only its size).
Bytes unread_room(std::uint64_t size) {
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  std::shared_ptr<const void> owner(p, [size](const void* q) { ::munmap(const_cast<void*>(q), static_cast<std::size_t>(size)); });
  return Bytes(std::move(owner), ByteSpan(static_cast<const std::uint8_t*>(p), static_cast<std::size_t>(size)));
}

}  // namespace

// What compress_one() (transcode_message's resplit) gives for a raw frame of
// `size` bytes that `run` produces: raw for codec none, else Dask's
// maybe_compress rule, judged as recode_one() judges a compressed input
// (the sample kept as the windows pass, the whole at its end, written again
// raw when either fails). The same bytes as maybe_compress() on the whole.
Result<CompressionValue> recode_decoded(const DecodedRun& run, std::uint64_t size, Codec target,
                                        const TranscodeOptions& opt, FrameSink& out) {
  auto write_raw = [&]() -> Result<CompressionValue> {
    out.expect(size, FrameSink::Expect::raw);
    if (Status s = run([&](ByteSpan w) { return out.put(w); }); !s) return std::move(s).error();
    return CompressionValue::nil();
  };
  if (target == Codec::none || size < opt.rules.min_size || size > opt.rules.max_size) return write_raw();
  out.expect(size, FrameSink::Expect::compressed);
  Sample sample(size, opt.rules);
  FrameEncoder::Options eo;
  eo.compress = opt.compress;
  if (target == Codec::lz4) eo.abandon_literal_run = kLz4MaxLiteralRun;
  auto enc = FrameEncoder::start(target, size, eo);
  std::uint64_t at = 0;
  if (!enc) {
    // As maybe_compress(): a sample that keeps the frame raw comes first.
    if (Status s = run([&](ByteSpan w) {
          sample.take(at, w);
          at += w.size();
          return ok_status();
        });
        !s)
      return std::move(s).error();
    auto ok = sample_compresses(target, sample, opt);
    if (!ok) return std::move(ok).error();
    if (!*ok) return write_raw();
    return std::move(enc).error();
  }
  if (Status s = run([&](ByteSpan w) {
        sample.take(at, w);
        at += w.size();
        return (*enc)->feed(w, out);
      });
      !s)
    return std::move(s).error();
  if (Status s = (*enc)->finish(out); !s) return std::move(s).error();
  auto ok = sample_compresses(target, sample, opt);
  if (!ok) return std::move(ok).error();
  bool keep = *ok;
  if (keep && static_cast<double>((*enc)->written()) > opt.rules.ratio * static_cast<double>(size)) keep = false;
  if (keep && (*enc)->abandoned()) keep = false;
  if (keep) return CompressionValue::named(std::string(codec_name(target)));
  if (Status s = out.restart(); !s) return std::move(s).error();
  return write_raw();
}

// Bytes [from, from + length) of the plan's new frame, to `fn`.
Status run_inlined(const Message& in, const InlinePlan& p, std::uint64_t from, std::uint64_t length,
                   const TranscodeOptions& opt, const WindowFn& fn) {
  const std::uint64_t end = from + length;
  std::uint64_t pos = 0;     // in the new frame
  std::size_t taken = 0;     // of the pickle
  auto pickle_part = [&](std::size_t upto) -> Status {
    const std::uint64_t n = upto - taken;
    const std::uint64_t lo = std::max(from, pos), hi = std::min(end, pos + n);
    if (lo < hi) {
      if (Status s = fn(p.pickle.span().subspan(static_cast<std::size_t>(taken + (lo - pos)),
                                                static_cast<std::size_t>(hi - lo)));
          !s)
        return s;
    }
    pos += n;
    taken = upto;
    return ok_status();
  };
  for (const pickle::BufferGap& g : p.gaps) {
    if (Status s = pickle_part(g.at); !s) return s;
    const Joined& b = p.buffers[g.buffer];
    const std::uint64_t lo = std::max(from, pos), hi = std::min(end, pos + b.size);
    if (lo < hi) {
      if (Status s = run_joined(in, b, lo - pos, hi - lo, opt, fn); !s) return s;
    }
    pos += b.size;
  }
  return pickle_part(p.pickle.size());
}

// The plan for an object that inlines() its buffers, when they are large
// enough to stream (TranscodeOptions::stream_frame_bytes in all) and every
// frame's decoded size is known; nullopt otherwise (recoded whole). Recodes
// the object's pickle and sub-header (ObjectTranscoder::recode_inlining).
Result<std::optional<InlinePlan>> plan_inline(const Message& in, SubObject& obj, ObjectTranscoder& objects,
                                              const TranscodeOptions& opt) {
  auto codecs = frame_compression(obj);
  if (!codecs) return std::optional<InlinePlan>();
  auto layout = split_layout(obj);
  if (!layout) return std::optional<InlinePlan>();
  std::vector<Joined> joined;
  auto join = [&](std::uint64_t off, std::uint64_t count) -> bool {
    Joined j;
    for (std::uint64_t k = off; k < off + count; ++k) {
      const std::size_t index = obj.header_frame + 1 + static_cast<std::size_t>(k);
      auto d = decoded_size(in, index, (*codecs)[k], opt);
      if (!d) return false;
      j.frames.push_back(index);
      j.entries.push_back((*codecs)[k]);
      j.sizes.push_back(*d);
      j.labels.push_back(obj.frame_label(static_cast<std::size_t>(k)));
      j.size += *d;
    }
    joined.push_back(std::move(j));
    return true;
  };
  if (*layout) {
    for (std::size_t i = 0; i < (*layout)->counts.size(); ++i)
      if (!join((*layout)->offsets[i], (*layout)->counts[i])) return std::optional<InlinePlan>();
  } else {
    for (std::size_t k = 0; k < obj.frames.size(); ++k)
      if (!join(k, 1)) return std::optional<InlinePlan>();
  }
  if (joined.size() < 2) return std::optional<InlinePlan>();
  const std::uint64_t gap = std::max<std::uint64_t>(opt.stream_frame_bytes, pickle::kMinGapBytes);
  std::uint64_t large = 0;
  for (std::size_t k = 1; k < joined.size(); ++k)
    if (joined[k].size >= gap) large += joined[k].size;
  if (large < gap) return std::optional<InlinePlan>();

  // The pickle and the small buffers in memory, decoded; the large ones
  // as room of their size.
  std::vector<Bytes> merged;
  for (std::size_t k = 0; k < joined.size(); ++k) {
    const Joined& j = joined[k];
    if (k > 0 && j.size >= gap) {
      merged.push_back(unread_room(j.size));
      continue;
    }
    Buffer b;
    b.reserve(static_cast<std::size_t>(j.size));
    if (Status s = run_joined(in, j, 0, j.size, opt, [&](ByteSpan w) {
          b.append(w.data(), w.size());
          return ok_status();
        });
        !s)
      return std::move(s).error();
    merged.emplace_back(std::move(b));
  }
  InlinePlan p;
  if (Status st = objects.recode_inlining(obj, merged, static_cast<std::size_t>(gap), p.gaps); !st)
    return std::move(st).error();
  p.pickle = std::move(merged[0]);
  p.size = p.pickle.size();
  for (const pickle::BufferGap& g : p.gaps) {
    if (g.buffer + 1 >= joined.size() || g.at > p.pickle.size())
      return make_error(Errc::internal, "the pickle engine left an unknown gap");
    p.size += joined[g.buffer + 1].size;
  }
  p.buffers.assign(std::make_move_iterator(joined.begin() + 1), std::make_move_iterator(joined.end()));
  // resplit()'s codec: the one asked for, or the object's own.
  auto after = frame_compression(obj);
  if (!after) return std::move(after).error();
  p.codec = Codec::none;
  if (opt.codec) {
    p.codec = *opt.codec;
  } else {
    for (const CompressionValue& c : *after)
      if (c.compresses()) {
        auto k = codec_of(c);
        if (!k) return std::move(k).error();
        p.codec = *k;
        break;
      }
  }
  const std::uint64_t shard = std::max<std::uint64_t>(opt.shard_bytes, 1);
  for (std::uint64_t at = 0; at < p.size || (at == 0 && p.size == 0); at += shard) {
    p.shards.push_back(std::min(shard, p.size - at));
    if (p.size == 0) break;
  }
  p.header = obj.header;
  return std::optional<InlinePlan>(std::move(p));
}

}  // namespace daskcaps::detail
