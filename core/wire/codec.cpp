#include "daskcaps/wire/codec.h"

#include <memory>

#include <lz4.h>
#include <snappy-stubs-public.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/base/internal/byte_reader.h"
#include "core/wire/detail/codec_bounds.h"
#include "core/wire/detail/codec_contexts.h"
#include "core/wire/internal/frame_encoder.h"

namespace daskcaps {

std::string_view codec_name(Codec c) {
  switch (c) {
    case Codec::none: return "none";
    case Codec::lz4: return "lz4";
    case Codec::zstd: return "zstd";
    case Codec::snappy: return "snappy";
    case Codec::zlib: return "zlib";
  }
  return "none";
}

std::optional<Codec> codec_from_name(std::string_view name) {
  if (name.empty() || name == "none" || name == "false" || name == "null") return Codec::none;
  for (Codec c : kAllCodecs) {
    if (codec_name(c) == name) return c;
  }
  return std::nullopt;
}

std::string codec_library_version(Codec c) {
  switch (c) {
    case Codec::none: return "";
    case Codec::lz4: return LZ4_versionString();
    case Codec::zstd: return ZSTD_versionString();
    case Codec::snappy:
      return std::to_string(SNAPPY_MAJOR) + "." + std::to_string(SNAPPY_MINOR) + "." +
             std::to_string(SNAPPY_PATCHLEVEL);
    case Codec::zlib: return zlibVersion();
  }
  return "";
}

namespace {

using detail::impossible_size;
using detail::most_output;
using detail::too_large;

using detail::decodes_too_large;
using detail::thread_zstd_cctx;
using detail::ZstdCompressContext;

// What a frame can hold (lz4 255:1, snappy 64:3, zstd 128 KiB per 4 bytes)
// is core/wire/detail/codec_bounds.h, shared with the streaming decoder;
// the per-thread zstd contexts are core/wire/detail/codec_contexts.h.

// The room compress() and decompress() write into: a Buffer, not zero-filled.
// Growing it keeps the bytes written so far (moved once at most). With `compact`
// (compressors, whose room is the codec's bound), an output that fills less
// than half of it is copied into an exact-size buffer, so that the slack
// does not stay allocated next to the frame until it is written; otherwise
// the buffer keeps its room.
class BufferRoom final : public OutputRoom {
 public:
  explicit BufferRoom(bool compact) : compact_(compact) {}
  std::uint8_t* room(std::size_t size, std::size_t kept) override {
    if (kept == 0) {
      out_ = Buffer();  // the old room goes first
      out_ = Buffer::uninitialised(size);
      return out_.data();
    }
    // The bytes move once at most (a mapping grows in place).
    out_.resize_uninitialised(size);
    return out_.data();
  }
  void finish(std::size_t size) override {
    if (compact_ && size < out_.size() / 2) {
      out_ = Buffer(out_.data(), size);
      return;
    }
    out_.resize_uninitialised(size);
  }
  Buffer take() { return std::move(out_); }

 private:
  Buffer out_;
  bool compact_;
};

Error no_room(std::uint64_t size) {
  return make_error(Errc::limit_exceeded, "cannot allocate " + std::to_string(size) + " bytes for the output");
}

// The next room of an output that filled `size` bytes of room: double it,
// or the whole cap when doubling would stop short of it by less than half
// the present size (each step holds the old and the new room at once).
std::size_t grown_room(std::size_t size, std::uint64_t cap) {
  const std::uint64_t doubled = std::max<std::uint64_t>(2 * std::uint64_t{size}, 64);
  return static_cast<std::size_t>(doubled + size / 2 >= cap ? cap : doubled);
}

// Compressors write straight into the room of the codec's bound.
template <typename F>
Status compress_into_bound(OutputRoom& room, std::size_t bound, F&& compress_into) {
  std::uint8_t* out = room.room(bound, 0);
  if (out == nullptr && bound != 0) return no_room(bound);
  Result<std::size_t> written = compress_into(out, bound);
  if (!written) return std::move(written).error();
  room.finish(*written);
  return {};
}

// Writes into room the encoder hands it, within the size it asked for.
class RoomSink final : public ByteSink {
 public:
  RoomSink(std::uint8_t* out, std::size_t cap) : out_(out), cap_(cap) {}
  Status put(ByteSpan bytes) override {
    if (bytes.size() > cap_ - used_) return make_error(Errc::internal, "lz4: output past its bound");
    if (!bytes.empty()) std::memcpy(out_ + used_, bytes.data(), bytes.size());
    used_ += bytes.size();
    return ok_status();
  }
  std::size_t used() const { return used_; }

 private:
  std::uint8_t* out_;
  std::size_t cap_;
  std::size_t used_ = 0;
};

// A frame larger than kLz4ChunkBytes is written by FrameEncoder, in chunks
// (core/wire/internal/frame_encoder.h), so that the streaming recoder writes the
// same bytes; `longest_run` gets its longest literal run.
Status lz4_compress(ByteSpan in, OutputRoom& room, std::uint64_t* longest_run = nullptr) {
  if (in.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE))
    return make_error(Errc::unsupported, "lz4 cannot compress " + std::to_string(in.size()) +
                                             " bytes in one block");
  if (in.size() > kLz4ChunkBytes) {
    auto enc = FrameEncoder::start(Codec::lz4, in.size());
    if (!enc) return std::move(enc).error();
    // Each chunk's block may end with 16 bytes more than the whole's bound.
    const std::size_t chunks = in.size() / kLz4ChunkBytes + 1;
    const std::size_t cap = 4 + static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(in.size()))) + 16 * chunks;
    std::uint8_t* out = room.room(cap, 0);
    if (out == nullptr) return no_room(cap);
    RoomSink sink(out, cap);
    if (Status s = (*enc)->feed(in, sink); !s) return std::move(s).error();
    if (Status s = (*enc)->finish(sink); !s) return std::move(s).error();
    if (longest_run != nullptr) *longest_run = (*enc)->longest_literal_run();
    room.finish(sink.used());
    return {};
  }
  const int bound = LZ4_compressBound(static_cast<int>(in.size()));
  auto into = [&](std::uint8_t* out, std::size_t) -> Result<std::size_t> {
    const std::uint32_t n = static_cast<std::uint32_t>(in.size());
    for (int i = 0; i < 4; ++i) out[i] = static_cast<std::uint8_t>(n >> (8 * i));
    const int written = LZ4_compress_default(reinterpret_cast<const char*>(in.data()),
                                             reinterpret_cast<char*>(out + 4), static_cast<int>(in.size()),
                                             bound);
    if (written <= 0 && !in.empty()) return make_error(Errc::codec_failed, "lz4 compression failed");
    return 4 + static_cast<std::size_t>(std::max(written, 0));
  };
  return compress_into_bound(room, 4 + static_cast<std::size_t>(bound), into);
}

Status lz4_decompress(ByteSpan in, std::uint64_t max_output, OutputRoom& room) {
  ByteReader r(in);
  auto size = r.u32_le();
  if (!size) return make_error(Errc::codec_failed, "lz4 frame shorter than its 4-byte size prefix");
  // python-lz4 reads the prefix as a signed 32-bit value and rejects negatives.
  if (*size > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max()))
    return make_error(Errc::codec_failed,
                      "lz4 size prefix " + std::to_string(*size) + " is negative as int32");
  if (*size > max_output) return too_large(*size, max_output, "lz4");
  ByteSpan block = r.rest();
  if (*size > most_output(Codec::lz4, block.size())) return impossible_size(*size, block.size(), Codec::lz4);
  if (block.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    return make_error(Errc::codec_failed, "lz4 block too large");
  std::uint8_t* out = room.room(*size, 0);
  if (out == nullptr && *size != 0) return no_room(*size);
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(block.data()), reinterpret_cast<char*>(out),
                                      static_cast<int>(block.size()), static_cast<int>(*size));
  if (got < 0) return make_error(Errc::codec_failed, "lz4 block is corrupt");
  if (static_cast<std::uint32_t>(got) != *size)
    return make_error(Errc::codec_failed, "lz4 block decoded to " + std::to_string(got) +
                                              " bytes, its prefix says " + std::to_string(*size));
  room.finish(*size);
  return {};
}

// libzstd's streaming compressor with the frame's size pledged, fed the
// whole input at once (ZSTD_e_continue, then ZSTD_e_end): the bytes
// FrameEncoder writes from the same input in any pieces
// (core/wire/internal/frame_encoder.h). (ZSTD_compress2 or ZSTD_compressCCtx on the
// whole input take a one-pass path that writes other bytes.) Frames of
// kZstdParallelBytes and more are compressed by `workers` workers of their
// own context, when asked for.
Status zstd_compress(ByteSpan in, int level, int workers, OutputRoom& room) {
  ZstdCompressContext& ctx = thread_zstd_cctx();
  const bool parallel = detail::zstd_parallel(in.size(), workers);
  std::unique_ptr<ZSTD_CCtx, std::size_t (*)(ZSTD_CCtx*)> own(parallel ? ZSTD_createCCtx() : nullptr,
                                                              ZSTD_freeCCtx);
  ZSTD_CCtx* cctx = parallel ? own.get() : ctx.get();
  if (cctx == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");
  detail::zstd_prepare(cctx, level, in.size(), workers);
  auto into = [&](std::uint8_t* out, std::size_t cap) -> Result<std::size_t> {
    ZSTD_outBuffer output{out, cap, 0};
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    while (input.pos < input.size) {
      const std::size_t r = ZSTD_compressStream2(cctx, &output, &input, ZSTD_e_continue);
      if (ZSTD_isError(r)) return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(r));
    }
    for (;;) {
      const std::size_t r = ZSTD_compressStream2(cctx, &output, &input, ZSTD_e_end);
      if (ZSTD_isError(r)) return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(r));
      if (r == 0) return output.pos;
      if (output.pos == output.size) return make_error(Errc::codec_failed, "zstd: output past its bound");
    }
  };
  auto st = compress_into_bound(room, ZSTD_compressBound(in.size()), into);
  ctx.trim();
  return st;
}

// Room for the first step of a zstd decode: the declared size when the
// input is at least 1/32 of it, else 32 times the input (at least 1 MiB).
// The buffer then doubles as output appears, so a frame whose header claims
// far more than its blocks make costs what they make, not what it claims.
constexpr std::uint64_t kZstdTrustRatio = 32;
constexpr std::uint64_t kZstdFirstRoom = std::uint64_t{1} << 20;

Status zstd_decompress(ByteSpan in, std::uint64_t max_output, OutputRoom& room) {
  detail::ZstdOutputBound bound;
  if (Status s = detail::zstd_output_bound(in, in.size(), max_output, bound); !s) return s;
  const std::uint64_t cap = bound.cap();
  detail::ZstdFrameDecoder decoder;
  ZSTD_DCtx* dctx = decoder.get();
  if (dctx == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");

  std::size_t size = static_cast<std::size_t>(
      std::min(cap, std::max(kZstdFirstRoom, std::uint64_t{in.size()} * kZstdTrustRatio)));
  std::uint8_t* out = room.room(size, 0);
  if (out == nullptr && size != 0) return no_room(size);
  std::size_t pos = 0;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  bool whole_room = size == cap;
  for (;;) {
    if (pos == size) {
      if (size >= cap) break;  // one byte more than allowed came out
      size = grown_room(size, cap);
      out = room.room(size, pos);
      if (out == nullptr && size != 0) return no_room(size);
    }
    ZSTD_outBuffer output{out, size, pos};
    const std::size_t in_before = input.pos;
    const std::size_t ret = ZSTD_decompressStream(dctx, &output, &input);
    const bool progressed = input.pos != in_before || output.pos != pos;
    pos = output.pos;
    if (ZSTD_isError(ret)) {
      // A frame whose window is larger than the streaming decoder takes
      // (2^27 bytes) still decodes in one pass into room for all of it,
      // which it has declared and the checks above allowed.
      if (ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge && bound.declared && !whole_room &&
          pos == 0) {
        ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
        input.pos = 0;
        size = static_cast<std::size_t>(cap);
        out = room.room(size, 0);  // nothing written yet: no copy, and the old room goes first
        if (out == nullptr && size != 0) return no_room(size);
        whole_room = true;
        continue;
      }
      return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(ret));
    }
    if (ret == 0 && input.pos == input.size) break;
    if (input.pos == input.size && output.pos < output.size)
      return make_error(Errc::codec_failed, "zstd frame is truncated");
    if (!progressed) return make_error(Errc::codec_failed, "zstd frame makes no progress");
  }
  if (Status s = bound.check_decoded(pos); !s) return s;
  room.finish(pos);
  return {};
}

Status snappy_compress(ByteSpan in, OutputRoom& room) {
  auto into = [&](std::uint8_t* out, std::size_t) -> Result<std::size_t> {
    std::size_t written = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(in.data()), in.size(), reinterpret_cast<char*>(out),
                        &written);
    return written;
  };
  return compress_into_bound(room, snappy::MaxCompressedLength(in.size()), into);
}

Status snappy_decompress(ByteSpan in, std::uint64_t max_output, OutputRoom& room) {
  std::size_t size = 0;
  if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(in.data()), in.size(), &size))
    return make_error(Errc::codec_failed, "snappy length header is corrupt");
  if (size > max_output) return too_large(size, max_output, "snappy");
  // What follows the varint (1 to 5 bytes) are the elements.
  std::uint64_t header = 0;
  while (header < in.size() && (in[header] & 0x80) != 0) ++header;
  const std::uint64_t elements = in.size() - std::min<std::uint64_t>(in.size(), header + 1);
  if (size > most_output(Codec::snappy, elements)) return impossible_size(size, elements, Codec::snappy);
  std::uint8_t* out = room.room(size, 0);
  if (out == nullptr && size != 0) return no_room(size);
  if (!snappy::RawUncompress(reinterpret_cast<const char*>(in.data()), in.size(), reinterpret_cast<char*>(out)))
    return make_error(Errc::codec_failed, "snappy block is corrupt");
  room.finish(size);
  return {};
}

Status zlib_compress(ByteSpan in, int level, OutputRoom& room) {
  auto into = [&](std::uint8_t* out, std::size_t cap) -> Result<std::size_t> {
    uLongf written = static_cast<uLongf>(cap);
    const int rc = compress2(out, &written, in.data(), static_cast<uLong>(in.size()), level);
    if (rc != Z_OK) return make_error(Errc::codec_failed, "zlib compression failed (" + std::to_string(rc) + ")");
    return static_cast<std::size_t>(written);
  };
  return compress_into_bound(room, compressBound(static_cast<uLong>(in.size())), into);
}

// zlib declares no size: the output buffer starts at four times the input
// and doubles as output appears, never past one byte over the limit.
Status zlib_decompress(ByteSpan in, std::uint64_t max_output, OutputRoom& room) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return make_error(Errc::codec_failed, "zlib: cannot initialise");
  struct End {
    z_stream& zs;
    ~End() { inflateEnd(&zs); }
  } end{zs};
  const std::uint64_t cap = max_output + 1;
  std::size_t size = static_cast<std::size_t>(std::min<std::uint64_t>(cap, std::uint64_t{in.size()} * 4 + 64));
  std::uint8_t* out = room.room(size, 0);
  if (out == nullptr && size != 0) return no_room(size);
  std::size_t pos = 0;
  std::size_t fed = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (zs.avail_in == 0 && fed < in.size()) {
      const std::size_t step = std::min<std::size_t>(in.size() - fed, 1u << 30);
      zs.next_in = const_cast<Bytef*>(in.data() + fed);
      zs.avail_in = static_cast<uInt>(step);
      fed += step;
    }
    if (pos == size) {
      if (size >= cap) return decodes_too_large(max_output, "zlib");
      size = grown_room(size, cap);
      out = room.room(size, pos);
      if (out == nullptr && size != 0) return no_room(size);
    }
    const std::size_t step = std::min<std::size_t>(size - pos, 1u << 30);
    zs.next_out = out + pos;
    zs.avail_out = static_cast<uInt>(step);
    rc = inflate(&zs, Z_NO_FLUSH);
    pos += step - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && fed == in.size())
      return make_error(Errc::codec_failed, "zlib stream is truncated");
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return make_error(Errc::codec_failed,
                        "zlib stream is corrupt: " + std::string(zs.msg ? zs.msg : "error " + std::to_string(rc)));
  }
  // The buffer holds one byte past the limit to notice an overflow; a
  // stream that ends on that byte is over the limit too.
  if (pos > max_output) return decodes_too_large(max_output, "zlib");
  if (fed < in.size() || zs.avail_in != 0)
    return make_error(Errc::codec_failed, "zlib stream has trailing bytes");
  room.finish(pos);
  return {};
}

// Raw frames: the input as it is, bounded like any other output.
Status copy_into(ByteSpan input, OutputRoom& room) {
  std::uint8_t* out = room.room(input.size(), 0);
  if (out == nullptr && input.size() != 0) return no_room(input.size());
  if (!input.empty()) std::memcpy(out, input.data(), input.size());
  room.finish(input.size());
  return {};
}

}  // namespace

Status compress_into(Codec c, ByteSpan input, OutputRoom& out, const CompressOptions& options) {
  switch (c) {
    case Codec::none: return copy_into(input, out);
    case Codec::lz4: return lz4_compress(input, out);
    case Codec::zstd: return zstd_compress(input, options.zstd_level, options.zstd_workers, out);
    case Codec::snappy: return snappy_compress(input, out);
    case Codec::zlib: return zlib_compress(input, options.zlib_level, out);
  }
  return make_error(Errc::internal, "unknown codec");
}

Status decompress_into(Codec c, ByteSpan input, std::uint64_t max_output, OutputRoom& out) {
  switch (c) {
    case Codec::none:
      if (input.size() > max_output) return too_large(input.size(), max_output, "raw");
      return copy_into(input, out);
    case Codec::lz4: return lz4_decompress(input, max_output, out);
    case Codec::zstd: return zstd_decompress(input, max_output, out);
    case Codec::snappy: return snappy_decompress(input, max_output, out);
    case Codec::zlib: return zlib_decompress(input, max_output, out);
  }
  return make_error(Errc::internal, "unknown codec");
}

Result<Buffer> compress(Codec c, ByteSpan input, const CompressOptions& options) {
  BufferRoom out(/*compact=*/true);
  if (auto st = compress_into(c, input, out, options); !st) return std::move(st).error();
  return out.take();
}

Result<Buffer> decompress(Codec c, ByteSpan input, std::uint64_t max_output) {
  BufferRoom out(/*compact=*/false);
  if (auto st = decompress_into(c, input, max_output, out); !st) return std::move(st).error();
  return out.take();
}

std::optional<std::uint64_t> declared_size(Codec c, ByteSpan input) {
  switch (c) {
    case Codec::none: return input.size();
    case Codec::lz4: {
      ByteReader r(input);
      auto n = r.u32_le();
      if (!n) return std::nullopt;
      return *n;
    }
    case Codec::zstd: {
      const unsigned long long n = ZSTD_getFrameContentSize(input.data(), input.size());
      if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN) return std::nullopt;
      return n;
    }
    case Codec::snappy: {
      std::size_t n = 0;
      if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(input.data()), input.size(), &n))
        return std::nullopt;
      return n;
    }
    case Codec::zlib: return std::nullopt;
  }
  return std::nullopt;
}

Status validate(const CompressOptions& options) {
  if (options.zstd_level < 1 || options.zstd_level > 22)
    return make_error(Errc::usage, "zstd level " + std::to_string(options.zstd_level) + ": zstd levels are 1 to 22");
  if (options.zlib_level < -1 || options.zlib_level > 9)
    return make_error(Errc::usage, "zlib level " + std::to_string(options.zlib_level) + ": zlib levels are -1 to 9");
  if (options.zstd_workers < 0) return make_error(Errc::usage, "zstd threads must not be negative");
  return {};
}

Buffer frame_sample(ByteSpan input, const MaybeCompressRules& rules) {
  Buffer sample;
  // Slices of sample_size bytes, evenly spread.
  const std::uint64_t size = std::min<std::uint64_t>(rules.sample_size, input.size());
  if (size == 0 || rules.sample_count == 0) return sample;
  sample.reserve(static_cast<std::size_t>(size * rules.sample_count));
  const std::uint64_t max_start = input.size() - size;
  for (std::uint32_t i = 0; i < rules.sample_count; ++i) {
    const std::uint64_t start = rules.sample_count == 1 ? 0 : max_start * i / (rules.sample_count - 1);
    sample.append(input.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(size)));
  }
  return sample;
}

Result<MaybeCompressed> maybe_compress(Codec c, ByteSpan input, const MaybeCompressRules& rules,
                                       const CompressOptions& options) {
  MaybeCompressed out;
  if (c == Codec::none) return out;
  if (input.size() < rules.min_size || input.size() > rules.max_size) return out;

  if (const Buffer sample = frame_sample(input, rules); !sample.empty()) {
    auto small = compress(c, sample, options);
    if (!small) return std::move(small).error();
    if (static_cast<double>(small->size()) > rules.ratio * static_cast<double>(sample.size()))
      return out;
  }
  std::uint64_t longest_run = 0;
  BufferRoom room(/*compact=*/true);
  if (Status st = c == Codec::lz4 ? lz4_compress(input, room, &longest_run) : compress_into(c, input, room, options);
      !st)
    return std::move(st).error();
  std::optional<Buffer> full(room.take());
  if (static_cast<double>(full->size()) > rules.ratio * static_cast<double>(input.size())) return out;
  // A literal run the streaming encoder would have to hold whole stays raw
  // (core/wire/internal/frame_encoder.h), here too, so that both write the same.
  if (longest_run > kLz4MaxLiteralRun) return out;
  out.compressed = true;
  out.data = std::move(*full);
  return out;
}

}  // namespace daskcaps
