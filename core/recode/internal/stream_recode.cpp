// recode_frame() (daskcaps/recode/stream_recode.h, "One frame"): one wire
// frame recoded window by window, judged by Dask's maybe_compress rule as it
// passes. A whole message in place is core/recode/message_in_place.cpp.
#include "core/recode/internal/stream_recode.h"

#include <optional>
#include <string>
#include <utility>

#include "core/recode/detail/frame_sample.h"
#include "daskcaps/wire/codec.h"
#include "core/wire/internal/serialized.h"
#include "core/wire/internal/window_codec.h"

namespace daskcaps {

using detail::declared_of;
using detail::Sample;
using detail::sample_compresses;

namespace {

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

}  // namespace daskcaps
