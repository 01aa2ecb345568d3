#include "core/wire/internal/window_codec.h"

#include <snappy-sinksource.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/wire/detail/codec_bounds.h"
#include "core/wire/detail/codec_contexts.h"
#include "core/wire/detail/lz4_block_stream.h"
#include "core/wire/detail/snappy_stream.h"

namespace daskcaps {

namespace {

using detail::impossible_size;
using detail::most_output;
using detail::too_large;

// The input in order, a piece at a time.
class Pieces {
 public:
  Pieces(FrameInput& in, std::uint64_t from, std::size_t piece) : in_(in), at_(from), piece_(piece) {}
  bool done() const { return at_ >= in_.size(); }
  std::uint64_t at() const { return at_; }
  /// The next piece (never empty before the end).
  Result<ByteSpan> next() {
    auto p = in_.read(at_, piece_);
    if (!p) return std::move(p).error();
    if (p->empty() && !done())
      return make_error(Errc::io, "frame input ended " + std::to_string(in_.size() - at_) + " bytes early");
    at_ += p->size();
    return *p;
  }

 private:
  FrameInput& in_;
  std::uint64_t at_;
  std::size_t piece_;
};

// The frame's first bytes (at most `n`, fewer when the frame is shorter),
// for the checks of its header.
struct Head {
  std::uint8_t bytes[32];
  std::size_t size = 0;
  ByteSpan span() const { return {bytes, size}; }
};
Result<Head> read_head(FrameInput& in, std::size_t n) {
  Head h;
  n = static_cast<std::size_t>(std::min<std::uint64_t>({n, sizeof h.bytes, in.size()}));
  while (h.size < n) {
    auto p = in.read(h.size, n - h.size);
    if (!p) return std::move(p).error();
    if (p->empty()) return make_error(Errc::io, "frame input ended early");
    std::memcpy(h.bytes + h.size, p->data(), p->size());
    h.size += p->size();
  }
  return h;
}

Status deliver(const WindowFn& fn, ByteSpan window) {
  if (!fn || window.empty()) return ok_status();
  return fn(window);
}

Result<std::uint64_t> raw_windows(FrameInput& in, std::uint64_t max_output, const WindowFn& fn,
                                  const WindowOptions& o) {
  if (in.size() > max_output) return too_large(in.size(), max_output, "raw");
  Pieces pieces(in, 0, o.window_bytes);
  while (!pieces.done()) {
    auto p = pieces.next();
    if (!p) return std::move(p).error();
    if (Status s = deliver(fn, *p); !s) return std::move(s).error();
  }
  return in.size();
}

// ---- lz4 -------------------------------------------------------------------

constexpr std::uint64_t kLz4Prefix = 4;

// decompress() says only what liblz4 says: a block is corrupt, or decodes
// to fewer bytes than its prefix.
Error lz4_error(Error e) {
  if (e.code != Errc::codec_failed) return e;
  if (e.what.rfind("lz4 block decoded to ", 0) == 0) return make_error(Errc::codec_failed, std::move(e.what));
  return make_error(Errc::codec_failed, "lz4 block is corrupt");
}

Result<std::uint64_t> lz4_windows(FrameInput& in, std::uint64_t max_output, const WindowFn& fn,
                                  const WindowOptions& o) {
  // The checks and words of lz4_decompress() in codec.cpp, in its order.
  if (in.size() < kLz4Prefix)
    return make_error(Errc::codec_failed, "lz4 frame shorter than its 4-byte size prefix");
  std::uint32_t size = 0;
  {
    auto head = read_head(in, kLz4Prefix);
    if (!head) return std::move(head).error();
    for (std::size_t i = 0; i < kLz4Prefix; ++i) size |= std::uint32_t{head->bytes[i]} << (8 * i);
  }
  if (size > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max()))
    return make_error(Errc::codec_failed, "lz4 size prefix " + std::to_string(size) + " is negative as int32");
  if (size > max_output) return too_large(size, max_output, "lz4");
  const std::uint64_t block = in.size() - kLz4Prefix;
  if (size > most_output(Codec::lz4, block)) return impossible_size(size, block, Codec::lz4);
  if (block > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    return make_error(Errc::codec_failed, "lz4 block too large");

  detail::Lz4BlockStream decoder(block, size, o.window_bytes);
  std::vector<Bytes> out;
  std::optional<Error> fn_error;  // the callback's, returned as it is
  auto hand_out = [&]() -> Status {
    for (const Bytes& b : out) {
      if (fn_error) break;
      if (Status s = deliver(fn, b.span()); !s) fn_error = std::move(s).error();
    }
    out.clear();
    if (fn_error) return *fn_error;
    return ok_status();
  };
  // Each window goes as soon as it is full (one match can make the whole
  // output), the rest of a piece's output when feed() returns.
  decoder.set_drain([&](std::vector<Bytes>&) { return hand_out(); });
  Pieces pieces(in, kLz4Prefix, o.input_bytes);
  while (!pieces.done()) {
    auto p = pieces.next();
    if (!p) return std::move(p).error();
    Status s = decoder.feed(*p, out);
    if (Status h = hand_out(); !h) return std::move(h).error();
    if (!s) return fn_error ? *fn_error : lz4_error(std::move(s).error());
  }
  Status s = decoder.finish(out);
  if (Status h = hand_out(); !h) return std::move(h).error();
  if (!s) return fn_error ? *fn_error : lz4_error(std::move(s).error());
  return size;
}

// ---- zstd ------------------------------------------------------------------

constexpr std::uint64_t kZstdHeaderMax = 18;  // ZSTD_FRAMEHEADERSIZE_MAX

// A frame whose window is larger than the streaming decoder takes: decoded
// whole, as decompress() decodes it, then handed out.
Result<std::uint64_t> zstd_whole(FrameInput& in, std::uint64_t max_output, const WindowFn& fn,
                                 const WindowOptions& o) {
  Buffer all;
  all.reserve(static_cast<std::size_t>(in.size()));
  Pieces pieces(in, 0, o.input_bytes);
  while (!pieces.done()) {
    auto p = pieces.next();
    if (!p) return std::move(p).error();
    all.append(p->data(), p->size());
  }
  auto out = decompress(Codec::zstd, all, max_output);
  if (!out) return std::move(out).error();
  Buffer().swap(all);
  for (std::size_t at = 0; at < out->size(); at += o.window_bytes) {
    const std::size_t n = std::min(o.window_bytes, out->size() - at);
    if (Status s = deliver(fn, ByteSpan(out->data() + at, n)); !s) return std::move(s).error();
  }
  return out->size();
}

// The loop of zstd_decompress() in codec.cpp, with a window that is handed
// out when full instead of a buffer that grows.
Result<std::uint64_t> zstd_windows(FrameInput& in, std::uint64_t max_output, const WindowFn& fn,
                                   const WindowOptions& o) {
  detail::ZstdOutputBound bound;
  {
    if (in.size() < 4) return make_error(Errc::codec_failed, "zstd frame shorter than its magic");
    auto head = read_head(in, kZstdHeaderMax);
    if (!head) return std::move(head).error();
    Status s = detail::zstd_output_bound(ByteSpan(head->bytes, head->size), in.size(), max_output, bound);
    if (!s) return std::move(s).error();
  }
  const std::uint64_t most = bound.most, cap = bound.cap();
  detail::ZstdFrameDecoder decoder;
  ZSTD_DCtx* dctx = decoder.get();
  if (dctx == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");

  Buffer window = Buffer::uninitialised(static_cast<std::size_t>(std::min<std::uint64_t>(cap, o.window_bytes)));
  Pieces pieces(in, 0, o.input_bytes);
  ZSTD_inBuffer input{nullptr, 0, 0};
  std::uint64_t done = 0;
  for (;;) {
    if (done >= cap) break;  // one byte more than allowed came out
    if (input.pos == input.size && !pieces.done()) {
      auto p = pieces.next();
      if (!p) return std::move(p).error();
      input = {p->data(), p->size(), 0};
    }
    const std::size_t room = static_cast<std::size_t>(std::min<std::uint64_t>(window.size(), cap - done));
    ZSTD_outBuffer output{window.data(), room, 0};
    const std::size_t in_before = input.pos;
    const std::size_t ret = ZSTD_decompressStream(dctx, &output, &input);
    if (ZSTD_isError(ret)) {
      if (ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge && bound.declared && done == 0)
        return zstd_whole(in, max_output, fn, o);
      return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(ret));
    }
    const bool progressed = input.pos != in_before || output.pos != 0;
    // Past the most allowed is an error below: those bytes are not handed out.
    const std::uint64_t good = std::min<std::uint64_t>(output.pos, most - std::min(most, done));
    if (Status s = deliver(fn, ByteSpan(window.data(), static_cast<std::size_t>(good))); !s)
      return std::move(s).error();
    done += output.pos;
    const bool all_in = input.pos == input.size && pieces.done();
    if (ret == 0 && all_in) break;
    if (all_in && output.pos < output.size) return make_error(Errc::codec_failed, "zstd frame is truncated");
    if (!progressed) return make_error(Errc::codec_failed, "zstd frame makes no progress");
  }
  if (Status s = bound.check_decoded(done); !s) return std::move(s).error();
  return done;
}

// ---- zlib ------------------------------------------------------------------

// The loop of zlib_decompress() in codec.cpp, with a window.
Result<std::uint64_t> zlib_windows(FrameInput& in, std::uint64_t max_output, const WindowFn& fn,
                                   const WindowOptions& o) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return make_error(Errc::codec_failed, "zlib: cannot initialise");
  struct End {
    z_stream& zs;
    ~End() { inflateEnd(&zs); }
  } end{zs};
  const std::uint64_t cap = max_output + 1;
  Buffer window = Buffer::uninitialised(static_cast<std::size_t>(std::min<std::uint64_t>(cap, o.window_bytes)));
  Pieces pieces(in, 0, std::min<std::size_t>(o.input_bytes, std::size_t{1} << 30));
  std::uint64_t done = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (zs.avail_in == 0 && !pieces.done()) {
      auto p = pieces.next();
      if (!p) return std::move(p).error();
      zs.next_in = const_cast<Bytef*>(p->data());
      zs.avail_in = static_cast<uInt>(p->size());
    }
    if (done >= cap) return detail::decodes_too_large(max_output, "zlib");
    const std::size_t room = static_cast<std::size_t>(std::min<std::uint64_t>(window.size(), cap - done));
    zs.next_out = window.data();
    zs.avail_out = static_cast<uInt>(room);
    rc = inflate(&zs, Z_NO_FLUSH);
    const std::size_t made = room - zs.avail_out;
    const std::uint64_t good = std::min<std::uint64_t>(made, max_output - std::min(max_output, done));
    if (Status s = deliver(fn, ByteSpan(window.data(), static_cast<std::size_t>(good))); !s)
      return std::move(s).error();
    done += made;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && pieces.done())
      return make_error(Errc::codec_failed, "zlib stream is truncated");
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return make_error(Errc::codec_failed,
                        "zlib stream is corrupt: " + std::string(zs.msg ? zs.msg : "error " + std::to_string(rc)));
  }
  if (done > max_output) return detail::decodes_too_large(max_output, "zlib");
  if (!pieces.done() || zs.avail_in != 0) return make_error(Errc::codec_failed, "zlib stream has trailing bytes");
  return done;
}

// ---- snappy ----------------------------------------------------------------

// A FrameInput as snappy's Source. A read error ends the source early (so
// that snappy sees a truncated block) and is kept for the caller.
class InputSource final : public snappy::Source {
 public:
  InputSource(FrameInput& in, std::size_t piece) : in_(in), piece_(piece) {}
  size_t Available() const override { return failed_ ? 0 : static_cast<size_t>(in_.size() - at_); }
  const char* Peek(size_t* len) override {
    if (view_.empty() && Available() > 0) {
      auto p = in_.read(at_, piece_);
      if (!p || p->empty()) {
        error_ = p ? make_error(Errc::io, "frame input ended early") : std::move(p).error();
        failed_ = true;
      } else {
        view_ = *p;
      }
    }
    *len = failed_ ? 0 : view_.size();
    return reinterpret_cast<const char*>(view_.data());
  }
  void Skip(size_t n) override {
    at_ += n;
    view_ = n < view_.size() ? view_.subspan(n) : ByteSpan{};
  }
  bool failed() const { return failed_; }
  Error error() const { return error_; }

 private:
  FrameInput& in_;
  std::size_t piece_;
  std::uint64_t at_ = 0;
  ByteSpan view_;
  bool failed_ = false;
  Error error_;
};

struct SnappyHead {
  std::uint64_t size = 0;      // declared
  std::uint64_t varint = 0;    // bytes of the varint
};

// The checks and words of snappy_decompress() in codec.cpp, in its order.
Result<SnappyHead> snappy_head(FrameInput& in, std::uint64_t max_output) {
  auto head = read_head(in, 5);
  if (!head) return std::move(head).error();
  std::size_t size = 0;
  if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(head->bytes), head->size, &size))
    return make_error(Errc::codec_failed, "snappy length header is corrupt");
  if (size > max_output) return too_large(size, max_output, "snappy");
  std::uint64_t header = 0;
  while (header < head->size && (head->bytes[header] & 0x80) != 0) ++header;
  const std::uint64_t elements = in.size() - std::min<std::uint64_t>(in.size(), header + 1);
  if (size > most_output(Codec::snappy, elements)) return impossible_size(size, elements, Codec::snappy);
  return SnappyHead{size, header + 1};
}

Status snappy_valid(FrameInput& in, const WindowOptions& o) {
  InputSource source(in, o.input_bytes);
  const bool ok = snappy::IsValidCompressed(&source);
  if (source.failed()) return source.error();
  if (!ok) return make_error(Errc::codec_failed, "snappy block is corrupt");
  return ok_status();
}

Result<std::uint64_t> snappy_windows(FrameInput& in, std::uint64_t max_output, const WindowFn& fn,
                                     const WindowOptions& o) {
  auto head = snappy_head(in, max_output);
  if (!head) return std::move(head).error();
  if (Status s = snappy_valid(in, o); !s) return std::move(s).error();
  detail::SnappyBlockStream decoder(head->size, o.window_bytes, fn);
  Pieces pieces(in, head->varint, o.input_bytes);
  while (!pieces.done()) {
    auto p = pieces.next();
    if (!p) return std::move(p).error();
    if (Status s = decoder.feed(*p); !s) return std::move(s).error();
  }
  if (Status s = decoder.finish(); !s) return std::move(s).error();
  return head->size;
}

}  // namespace

Result<std::uint64_t> decode_in_windows(Codec c, FrameInput& input, std::uint64_t max_output, const WindowFn& fn,
                                        const WindowOptions& options) {
  if (options.window_bytes == 0 || options.input_bytes == 0)
    return make_error(Errc::internal, "decode_in_windows with windows or pieces of 0 bytes");
  switch (c) {
    case Codec::none: return raw_windows(input, max_output, fn, options);
    case Codec::lz4: return lz4_windows(input, max_output, fn, options);
    case Codec::zstd: return zstd_windows(input, max_output, fn, options);
    case Codec::snappy: return snappy_windows(input, max_output, fn, options);
    case Codec::zlib: return zlib_windows(input, max_output, fn, options);
  }
  return make_error(Errc::internal, "unknown codec");
}

Result<std::uint64_t> measure_frame(Codec c, FrameInput& input, std::uint64_t max_output) {
  const WindowOptions options;
  switch (c) {
    case Codec::none:
      if (input.size() > max_output) return too_large(input.size(), max_output, "raw");
      return input.size();
    case Codec::snappy: {
      auto head = snappy_head(input, max_output);
      if (!head) return std::move(head).error();
      if (Status s = snappy_valid(input, options); !s) return std::move(s).error();
      return head->size;
    }
    case Codec::lz4:
    case Codec::zstd:
    case Codec::zlib:
      return decode_in_windows(c, input, max_output, WindowFn(), options);
  }
  return make_error(Errc::internal, "unknown codec");
}

}  // namespace daskcaps
