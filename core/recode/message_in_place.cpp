// transcode_message_in_place() and in_place_applies()
// (daskcaps/recode/stream_recode.h, "One message, in place"): a message
// recoded straight into its place in the output, object by object, frame by
// frame, with the frames of the pickles that inline their buffers made of
// pieces. One frame at a time is core/recode/stream_recode.cpp.
#include "daskcaps/recode/stream_recode.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <new>
#include <optional>
#include <vector>

#include "core/recode/detail/frame_sample.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/serialized.h"
#include "daskcaps/wire/window_codec.h"
#include "daskcaps/pickle/pickle.h"

namespace daskcaps {

using detail::declared_of;
using detail::Sample;
using detail::sample_compresses;

// ---- a message in place ------------------------------------------------------

namespace {

// One frame written at a place of the message.
class PlacedSink final : public FrameSink {
 public:
  PlacedSink(MessageSink& out, std::uint64_t at) : out_(out), at_(at) {}
  Status put(ByteSpan bytes) override {
    if (Status s = out_.write_at(at_ + written_, bytes); !s) return s;
    written_ += bytes.size();
    return ok_status();
  }
  Status restart() override {
    written_ = 0;
    return ok_status();
  }
  std::uint64_t written() const { return written_; }

 private:
  MessageSink& out_;
  std::uint64_t at_;
  std::uint64_t written_ = 0;
};

// A frame passed as it is.
Result<std::uint64_t> copy_frame(const Message& message, std::size_t index, MessageSink& out, std::uint64_t at) {
  if (!frame_stored(message, index)) {
    const Bytes& f = message.original_frames[index];
    if (Status s = out.write_at(at, f.span()); !s) return std::move(s).error();
    return f.size();
  }
  auto in = frame_input(message, index);
  std::uint64_t done = 0;
  while (done < in->size()) {
    auto p = in->read(done, std::size_t{256} << 10);
    if (!p) return std::move(p).error();
    if (p->empty()) return make_error(Errc::io, "frame input ended early");
    if (Status s = out.write_at(at + done, *p); !s) return std::move(s).error();
    done += p->size();
  }
  return done;
}

// ---- a frame made of pieces, for the pickles that inline their buffers ----

// Runs the decoded bytes of a frame through `fn`, in order, in windows.
using DecodedRun = std::function<Status(const WindowFn& fn)>;

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

// One original frame of an object (the shards the split keys join), its
// wire frames decoded in turn.
struct Joined {
  std::vector<std::size_t> frames;        // absolute frame indices
  std::vector<CompressionValue> entries;  // their compression entries
  std::vector<std::uint64_t> sizes;       // their decoded sizes
  std::uint64_t size = 0;
};

// Bytes [from, from + length) of `j` decoded, to `fn`.
Status run_joined(const Message& in, const Joined& j, std::uint64_t from, std::uint64_t length,
                  const TranscodeOptions& opt, const WindowFn& fn) {
  const std::uint64_t end = from + length;
  std::uint64_t pos = 0;  // where frame i starts in j
  for (std::size_t i = 0; i < j.frames.size() && pos < end; pos += j.sizes[i], ++i) {
    const std::uint64_t d = j.sizes[i];
    if (pos + d <= from) continue;
    auto input = frame_input(in, j.frames[i]);
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
    // decoding stops once past `hi`.
    std::uint64_t at = 0;
    bool done = false;
    auto r = decode_in_windows(*codec, *input, opt.limits.max_decompressed_bytes, [&](ByteSpan w) -> Status {
      const std::uint64_t wlo = std::max(at, lo), whi = std::min(at + w.size(), hi);
      if (wlo < whi) {
        if (Status s = fn(w.subspan(static_cast<std::size_t>(wlo - at), static_cast<std::size_t>(whi - wlo))); !s)
          return s;
      }
      at += w.size();
      if (at >= hi) {
        done = true;
        return make_error(Errc::internal, "enough");
      }
      return ok_status();
    });
    if (!r && !done) return std::move(r).error();
    if (r && *r != d) return make_error(Errc::codec_failed, "frame decoded to " + std::to_string(*r) + " bytes, not " + std::to_string(d));
  }
  return ok_status();
}

// An object whose pickle inlines its large buffers, streamed: the new
// pickle with gaps, and the buffers that fill them.
struct InlinePlan {
  Bytes pickle;
  std::vector<pickle::BufferGap> gaps;
  std::vector<Joined> buffers;  // buffer k: the object's original frame k + 1
  Codec codec = Codec::none;
  std::uint64_t size = 0;  // the new frame's size
  std::vector<std::uint64_t> shards;  // its shards' sizes
  msgpack::Value header;   // the sub-header before its split keys and compression list
};

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

// The decoded size of one wire frame, without decoding it when its header
// says; nullopt when it cannot be known here (the object is then recoded
// whole, which reports what is wrong).
std::optional<std::uint64_t> decoded_size(const Message& in, std::size_t index, const CompressionValue& entry,
                                          const TranscodeOptions& opt) {
  auto input = frame_input(in, index);
  if (!entry.compresses()) return input->size();
  auto codec = codec_of(entry);
  if (!codec) return std::nullopt;
  std::optional<std::uint64_t> d = declared_of(*codec, *input);
  if (!d) {
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

}  // namespace

bool in_place_applies(const Message& message, const TranscodeOptions&) {
  if (message.is_handshake()) return false;
  // Frames no object claims are written after the objects' frames: only
  // where they already are there (Dask sends none; a loose frame before an
  // object would move).
  if (!message.loose_frames.empty() && !message.objects.empty()) {
    const SubObject& last = message.objects.back();
    if (message.loose_frames.front() < last.header_frame + 1 + last.frames.size()) return false;
  }
  return true;
}

Result<std::uint64_t> transcode_message_in_place(const Message& in, const TranscodeOptions& options,
                                                 TranscodeReport& report, MessageSink& out) {
  if (!in_place_applies(in, options))
    return make_error(Errc::usage, "a handshake, or a message with frames no object claims before its last, "
                                   "is recoded whole");
  const std::size_t n = in.original_frames.size();
  std::vector<std::uint64_t> in_sizes(n);
  for (std::size_t i = 0; i < n; ++i) {
    in_sizes[i] = frame_wire_size(in, i);
    report.bytes_in += in_sizes[i];
  }

  // Each object, as transcode_message's ObjectRecoder would recode it:
  // whole (its frames read into memory) when its data pickles change;
  // otherwise its sub-header now, and its frames later, one at a time, as
  // recompress() decides for each. For those, the entries each sub-header
  // would have if every recoded frame compresses.
  ObjectTranscoder objects(in, options, report);
  Message m = in;
  auto root_changed = objects.recode_root(m.root);
  if (!root_changed) return std::move(root_changed).error();
  std::vector<bool> whole(m.objects.size(), false);
  std::vector<std::optional<InlinePlan>> inlined(m.objects.size());
  std::vector<msgpack::Value> headers(m.objects.size());  // header_only objects' sub-headers before their codecs
  std::vector<std::vector<CompressionValue>> entries(m.objects.size());
  std::vector<std::vector<bool>> recode(m.objects.size());
  bool changes = false;
  for (std::size_t o = 0; o < m.objects.size(); ++o) {
    SubObject& obj = m.objects[o];
    if (objects.inlines(obj)) {
      auto plan = plan_inline(in, obj, objects, options);
      if (!plan) return std::move(plan).error().add_context(obj.path);
      if (*plan) {
        // The shards' entries as they would be if every one compresses.
        const InlinePlan& p = **plan;
        std::vector<CompressionValue> guess;
        for (std::uint64_t k : p.shards)
          guess.push_back(p.codec == Codec::none || k < options.rules.min_size || k > options.rules.max_size
                              ? CompressionValue::nil()
                              : CompressionValue::named(std::string(codec_name(p.codec))));
        obj.frames.assign(p.shards.size(), Bytes());
        const std::uint64_t one[] = {p.shards.size()};
        set_resplit_keys(obj, one, guess);
        inlined[o] = std::move(*plan);
        changes = true;
        continue;
      }
    }
    if (!objects.header_only(obj)) {
      whole[o] = true;
      for (std::size_t i = 0; i < obj.frames.size(); ++i) {
        auto f = load_frame(in, obj.header_frame + 1 + i);
        if (!f) return std::move(f).error().add_context(obj.path);
        obj.frames[i] = std::move(*f);
      }
      if (Status st = objects.recode(obj); !st) return std::move(st).error().add_context(obj.path);
      continue;
    }
    if (Status st = objects.recode_header(obj); !st) return std::move(st).error().add_context(obj.path);
    headers[o] = obj.header;
    auto codecs = frame_compression(obj);
    if (!codecs) return std::move(codecs).error().add_context(obj.path);
    entries[o] = *codecs;
    recode[o].assign(obj.frames.size(), false);
    if (!options.codec) continue;
    const Codec target = *options.codec;
    for (std::size_t i = 0; i < obj.frames.size(); ++i) {
      auto action = frame_recode_for((*codecs)[i], target, options);
      if (!action) return std::move(action).error().add_context(obj.frame_label(i)).add_context(obj.path);
      if (*action == FrameRecode::keep) continue;
      recode[o][i] = changes = true;
      std::optional<std::uint64_t> size;
      if (target != Codec::none) {
        auto codec = codec_of((*codecs)[i]);
        auto input = frame_input(in, obj.header_frame + 1 + i);
        size = !codec ? std::nullopt
               : *codec == Codec::none ? std::optional<std::uint64_t>(input->size())
                                       : declared_of(*codec, *input);
      }
      const bool raw = target == Codec::none ||
                       (size && (*size < options.rules.min_size || *size > options.rules.max_size));
      (*codecs)[i] = raw ? CompressionValue::nil() : CompressionValue::named(std::string(codec_name(target)));
    }
    set_frame_compression(obj, *codecs);
  }
  changes |= *root_changed || objects.changed();

  // Nothing recoded: the message as it came (transcode_message returns its
  // frames untouched), with a prelude of its lengths.
  if (!changes) {
    std::uint64_t at = 0;
    const Buffer prelude = encode_prelude(in_sizes);
    if (Status s = out.write_at(0, prelude); !s) return std::move(s).error();
    at = prelude.size();
    for (std::size_t i = 0; i < n; ++i) {
      auto k = copy_frame(in, i, out, at);
      if (!k) return std::move(k).error();
      at += *k;
    }
    report.bytes_out += at - prelude.size();
    return at;
  }

  auto provisional = assemble_message(m, /*root_unchanged=*/!*root_changed);
  if (!provisional) return std::move(provisional).error();
  const std::size_t n_out = provisional->size();
  std::vector<std::uint64_t> out_sizes(n_out, 0);
  std::uint64_t at = prelude_size(n_out);
  const Bytes& root = (*provisional)[0];
  if (Status s = out.write_at(at, root.span()); !s) return std::move(s).error();
  out_sizes[0] = root.size();
  at += root.size();

  std::size_t j = 1;  // output frame index
  for (std::size_t o = 0; o < m.objects.size(); ++o) {
    SubObject& obj = m.objects[o];
    if (whole[o]) {
      // Recoded already, in memory: its sub-header and frames as they are.
      for (std::size_t i = 0; i <= obj.frames.size(); ++i) {
        const Bytes& f = (*provisional)[j + i];
        if (Status s = out.write_at(at, f.span()); !s) return std::move(s).error();
        out_sizes[j + i] = f.size();
        at += f.size();
      }
      j += 1 + obj.frames.size();
      continue;
    }
    if (inlined[o]) {
      // The new pickle with its buffers, shard by shard.
      const InlinePlan& p = *inlined[o];
      const std::uint64_t header_at = at;
      const std::uint64_t room = (*provisional)[j].size();
      std::uint64_t data_at = header_at + room;
      std::vector<CompressionValue> final_entries;
      std::uint64_t from = 0;
      for (std::size_t k = 0; k < p.shards.size(); ++k) {
        PlacedSink sink(out, data_at);
        const std::uint64_t length = p.shards[k];
        auto run = [&](const WindowFn& fn) { return run_inlined(in, p, from, length, options, fn); };
        auto entry = recode_decoded(run, length, p.codec, options, sink);
        if (!entry) return std::move(entry).error().add_context(obj.path);
        if (entry->compresses()) ++report.frames_recompressed;
        final_entries.push_back(std::move(*entry));
        out_sizes[j + 1 + k] = sink.written();
        data_at += sink.written();
        from += length;
      }
      obj.header = p.header;
      const std::uint64_t one[] = {p.shards.size()};
      set_resplit_keys(obj, one, final_entries);
      const Bytes header = encode_sub_header(obj);
      if (header.size() > room) return make_error(Errc::internal, "a sub-header outgrew its room");
      if (header.size() != room) {
        if (Status s = out.move(header_at + room, header_at + header.size(), data_at - (header_at + room)); !s)
          return std::move(s).error();
        data_at = data_at - room + header.size();
      }
      if (Status s = out.write_at(header_at, header.span()); !s) return std::move(s).error();
      out_sizes[j] = header.size();
      j += 1 + obj.frames.size();
      at = data_at;
      continue;
    }
    const std::uint64_t header_at = at;
    const std::uint64_t room = (*provisional)[j].size();
    std::uint64_t data_at = header_at + room;
    std::vector<CompressionValue> final_entries = entries[o];
    bool any = false;  // a frame whose bytes changed (raw that stays raw is none)
    for (std::size_t i = 0; i < obj.frames.size(); ++i) {
      const std::size_t index = obj.header_frame + 1 + i;
      std::uint64_t size = 0;
      if (!recode[o][i]) {
        auto k = copy_frame(in, index, out, data_at);
        if (!k) return std::move(k).error().add_context(obj.path);
        size = *k;
      } else {
        auto input = frame_input(in, index);
        PlacedSink sink(out, data_at);
        auto entry = recode_frame(*input, entries[o][i], *options.codec, options, sink, report);
        if (!entry) return std::move(entry).error().add_context(obj.frame_label(i)).add_context(obj.path);
        any |= entries[o][i].compresses() || entry->compresses();
        final_entries[i] = std::move(*entry);
        size = sink.written();
      }
      out_sizes[j + 1 + i] = size;
      data_at += size;
    }
    // As transcode_message's recompress(): a sub-header none of whose frames
    // changed keeps its "compression" list, or its lack of one.
    if (any)
      set_frame_compression(obj, final_entries);
    else
      obj.header = std::move(headers[o]);
    const Bytes header = encode_sub_header(obj);
    if (header.size() != room) {
      // A frame written raw after all: the sub-header is shorter than the
      // room left for it, and the object's frames move back.
      if (Status s = out.move(header_at + room, header_at + header.size(), data_at - (header_at + room)); !s)
        return std::move(s).error();
      data_at = data_at - room + header.size();
    }
    if (Status s = out.write_at(header_at, header.span()); !s) return std::move(s).error();
    out_sizes[j] = header.size();
    j += 1 + obj.frames.size();
    at = data_at;
  }
  for (std::size_t i : in.loose_frames) {
    auto k = copy_frame(in, i, out, at);
    if (!k) return std::move(k).error();
    out_sizes[j++] = *k;
    at += *k;
  }
  if (Status s = out.write_at(0, encode_prelude(out_sizes)); !s) return std::move(s).error();
  for (std::uint64_t k : out_sizes) report.bytes_out += k;
  return at;
}

}  // namespace daskcaps
