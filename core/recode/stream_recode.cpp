#include "daskcaps/recode/stream_recode.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/serialized.h"
#include "daskcaps/wire/window_codec.h"

namespace daskcaps {

namespace {

// The sample maybe_compress() takes (core/wire/codec.cpp): sample_count
// slices of min(sample_size, size) bytes, evenly spread over the frame, the
// last one ending at its end. Taken from the decoded windows as they pass.
class Sample {
 public:
  Sample(std::uint64_t size, const MaybeCompressRules& rules) {
    len_ = std::min<std::uint64_t>(rules.sample_size, size);
    if (len_ == 0 || rules.sample_count == 0) return;
    const std::uint64_t max_start = size - len_;
    for (std::uint32_t i = 0; i < rules.sample_count; ++i)
      starts_.push_back(rules.sample_count == 1 ? 0 : max_start * i / (rules.sample_count - 1));
    bytes_.resize_uninitialised(static_cast<std::size_t>(len_ * starts_.size()));
  }
  bool empty() const { return starts_.empty(); }
  ByteSpan bytes() const { return bytes_; }
  const std::vector<std::uint64_t>& starts() const { return starts_; }
  std::uint64_t slice_bytes() const { return len_; }

  /// The decoded bytes [at, at + w.size()).
  void take(std::uint64_t at, ByteSpan w) {
    for (std::size_t i = 0; i < starts_.size(); ++i) {
      const std::uint64_t from = std::max(at, starts_[i]);
      const std::uint64_t to = std::min(at + w.size(), starts_[i] + len_);
      if (from >= to) continue;
      std::memcpy(bytes_.data() + i * len_ + (from - starts_[i]), w.data() + (from - at),
                  static_cast<std::size_t>(to - from));
    }
  }

 private:
  std::uint64_t len_ = 0;
  std::vector<std::uint64_t> starts_;
  Buffer bytes_;
};

// maybe_compress()'s first test: does the sample shrink to `ratio`?
Result<bool> sample_compresses(Codec target, const Sample& sample, const TranscodeOptions& opt) {
  if (sample.empty()) return true;
  auto small = compress(target, sample.bytes(), opt.compress);
  if (!small) return std::move(small).error();
  return !(static_cast<double>(small->size()) > opt.rules.ratio * static_cast<double>(sample.bytes().size()));
}

// The size a compressed frame declares in its header, read through the input.
std::optional<std::uint64_t> declared_of(Codec c, FrameInput& input) {
  std::uint8_t head[18];
  std::size_t have = 0;
  while (have < sizeof head && have < input.size()) {
    auto p = input.read(have, sizeof head - have);
    if (!p || p->empty()) return std::nullopt;
    std::memcpy(head + have, p->data(), p->size());
    have += p->size();
  }
  return declared_size(c, ByteSpan(head, have));
}

// The whole input in memory (a snappy frame whose copies reach further
// than a decoder in pieces keeps: decoded whole, as transcode_message does).
Result<Buffer> read_all(FrameInput& input) {
  Buffer all;
  all.reserve(static_cast<std::size_t>(input.size()));
  for (std::uint64_t at = 0; at < input.size();) {
    auto p = input.read(at, std::size_t{1} << 20);
    if (!p) return std::move(p).error();
    if (p->empty()) return make_error(Errc::io, "frame input ended early");
    all.append(p->data(), p->size());
    at += p->size();
  }
  return all;
}

Result<CompressionValue> recode_whole(FrameInput& input, const CompressionValue& entry, Codec target,
                                      const TranscodeOptions& opt, FrameSink& out) {
  if (Status s = out.restart(); !s) return std::move(s).error();
  auto all = read_all(input);
  if (!all) return std::move(all).error();
  auto raw = decompress_frame(entry, Bytes(std::move(*all)), opt.limits);
  if (!raw) return std::move(raw).error();
  if (target == Codec::none) {
    if (Status s = out.put(*raw); !s) return std::move(s).error();
    return CompressionValue::nil();
  }
  auto mc = maybe_compress(target, *raw, opt.rules, opt.compress);
  if (!mc) return std::move(mc).error();
  if (Status s = out.put(mc->compressed ? ByteSpan(mc->data) : raw->span()); !s) return std::move(s).error();
  return mc->compressed ? CompressionValue::named(std::string(codec_name(target))) : CompressionValue::nil();
}

bool decoded_only_whole(const Error& e, Codec c) { return c == Codec::snappy && e.code == Errc::unsupported; }

Result<CompressionValue> recode_one(FrameInput& input, const CompressionValue& entry, Codec target,
                                    const TranscodeOptions& opt, FrameSink& out) {
  auto codec = codec_of(entry);
  if (!codec) return std::move(codec).error();
  const std::uint64_t limit = opt.limits.max_decompressed_bytes;

  // The frame written raw: decoded (or copied) window by window.
  auto write_raw = [&]() -> Result<CompressionValue> {
    if (*codec == Codec::none) out.expect(input.size(), FrameSink::Expect::raw);
    else if (auto d = declared_of(*codec, input); d && *d <= limit) out.expect(*d, FrameSink::Expect::raw);
    auto r = decode_in_windows(*codec, input, limit, [&](ByteSpan w) { return out.put(w); });
    if (!r && decoded_only_whole(r.error(), *codec)) return recode_whole(input, entry, Codec::none, opt, out);
    if (!r) return std::move(r).error();
    return CompressionValue::nil();
  };
  if (target == Codec::none) {
    if (out.held() != nullptr) input.read_once();
    return write_raw();
  }

  // Its decoded size: declared, or measured by a first pass. (A frame that
  // does not decode as it declares fails below, as decompress() fails.)
  std::optional<std::uint64_t> size =
      *codec == Codec::none ? std::optional<std::uint64_t>(input.size()) : declared_of(*codec, input);
  if (!size) {
    auto m = decode_in_windows(*codec, input, limit, WindowFn());
    if (!m && decoded_only_whole(m.error(), *codec)) return recode_whole(input, entry, target, opt, out);
    if (!m) return std::move(m).error();
    size = *m;
  }
  if (*size > limit && *codec != Codec::none) return write_raw();  // fails with decompress()'s error
  if (*size < opt.rules.min_size || *size > opt.rules.max_size) return write_raw();
  out.expect(*size, FrameSink::Expect::compressed);

  Sample sample(*size, opt.rules);
  if (*codec == Codec::none) {
    // A raw frame is sampled where it lies, before anything is written.
    for (std::size_t i = 0; i < sample.starts().size(); ++i) {
      std::uint64_t at = sample.starts()[i];
      const std::uint64_t end = at + sample.slice_bytes();
      while (at < end) {
        auto p = input.read(at, static_cast<std::size_t>(end - at));
        if (!p) return std::move(p).error();
        if (p->empty()) return make_error(Errc::io, "frame input ended early");
        sample.take(at, *p);
        at += p->size();
      }
    }
    auto ok = sample_compresses(target, sample, opt);
    if (!ok) return std::move(ok).error();
    if (!*ok) return write_raw();
  }

  FrameEncoder::Options eo;
  eo.compress = opt.compress;
  if (target == Codec::lz4) eo.abandon_literal_run = kLz4MaxLiteralRun;
  auto enc = FrameEncoder::start(target, *size, eo);
  if (!enc) {
    // A frame the target cannot hold (lz4 past 2^31 - 1 bytes): an error,
    // unless its sample already keeps it raw, as in maybe_compress().
    if (*codec != Codec::none) {
      std::uint64_t at = 0;
      auto m = decode_in_windows(*codec, input, limit, [&](ByteSpan w) {
        sample.take(at, w);
        at += w.size();
        return ok_status();
      });
      if (!m && decoded_only_whole(m.error(), *codec)) return recode_whole(input, entry, target, opt, out);
      if (!m) return std::move(m).error();
      auto ok = sample_compresses(target, sample, opt);
      if (!ok) return std::move(ok).error();
      if (!*ok) return write_raw();
    }
    return std::move(enc).error();
  }

  // With the output in memory the input is read once: a frame written raw
  // after all is decoded from the output (not an lz4 one that may give up
  // on a long literal run, whose output is then not whole).
  const bool once = *codec != Codec::none && out.held() != nullptr &&
                    !(target == Codec::lz4 && *size > kLz4MaxLiteralRun);
  if (once) input.read_once();
  std::uint64_t at = 0;
  const bool sampling = *codec != Codec::none;
  auto decoded = decode_in_windows(*codec, input, limit, [&](ByteSpan w) {
    if (sampling) sample.take(at, w);
    at += w.size();
    return (*enc)->feed(w, out);
  });
  if (!decoded && decoded_only_whole(decoded.error(), *codec)) return recode_whole(input, entry, target, opt, out);
  if (!decoded) return std::move(decoded).error();
  if (Status s = (*enc)->finish(out); !s) return std::move(s).error();

  bool keep = true;
  if (sampling) {
    auto ok = sample_compresses(target, sample, opt);
    if (!ok) return std::move(ok).error();
    keep = *ok;
  }
  if (keep && static_cast<double>((*enc)->written()) > opt.rules.ratio * static_cast<double>(*size)) keep = false;
  if (keep && (*enc)->abandoned()) keep = false;
  if (keep) return CompressionValue::named(std::string(codec_name(target)));
  if (once) {
    const Buffer packed = *out.held();
    if (Status s = out.restart(); !s) return std::move(s).error();
    SpanFrameInput own(packed);
    auto r = decode_in_windows(target, own, limit, [&](ByteSpan w) { return out.put(w); });
    if (!r) return std::move(r).error();
    return CompressionValue::nil();
  }
  if (Status s = out.restart(); !s) return std::move(s).error();
  return write_raw();
}

}  // namespace

Result<CompressionValue> recode_frame(FrameInput& input, const CompressionValue& entry, Codec target,
                                      const TranscodeOptions& opt, FrameSink& out, TranscodeReport& report) {
  auto e = recode_one(input, entry, target, opt, out);
  // Counted as transcode_message() counts: a frame that changed (raw frames
  // that stay raw do not).
  if (e && (entry.compresses() || e->compresses())) ++report.frames_recompressed;
  return e;
}

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

}  // namespace

bool in_place_applies(const Message& message, const TranscodeOptions& options) {
  if (!options.codec || options.pickle_protocol || options.layout_cpu || options.inline_buffers) return false;
  if (message.is_handshake()) return false;
  for (const SubObject& obj : message.objects)
    if (obj.kind == Placeholder::pickled) return false;
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
    return make_error(Errc::usage, "a message whose pickles, layouts or handshake change is recoded whole");
  const Codec target = *options.codec;
  const std::size_t n = in.original_frames.size();
  std::vector<std::uint64_t> in_sizes(n);
  for (std::size_t i = 0; i < n; ++i) {
    in_sizes[i] = frame_wire_size(in, i);
    report.bytes_in += in_sizes[i];
  }

  // What happens to each frame, object by object, as transcode_message's
  // recompress() decides it; the entries each sub-header would have if
  // every recoded frame compresses.
  Message m = in;
  std::vector<std::vector<CompressionValue>> entries(m.objects.size());
  std::vector<std::vector<bool>> recode(m.objects.size());
  bool changes = false;
  for (std::size_t o = 0; o < m.objects.size(); ++o) {
    SubObject& obj = m.objects[o];
    auto codecs = frame_compression(obj);
    if (!codecs) return std::move(codecs).error().add_context(obj.path);
    entries[o] = *codecs;
    recode[o].assign(obj.frames.size(), false);
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

  auto provisional = assemble_message(m, /*root_unchanged=*/true);
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
        auto entry = recode_frame(*input, entries[o][i], target, options, sink, report);
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
      obj.header = in.objects[o].header;
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
