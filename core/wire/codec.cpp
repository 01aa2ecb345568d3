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

#include "daskcaps/base/byte_reader.h"
#include "core/wire/detail/codec_bounds.h"
#include "core/wire/detail/codec_contexts.h"
#include "daskcaps/wire/frame_encoder.h"

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
using detail::thread_zstd_dctx;
using detail::ZstdCompressContext;
using detail::ZstdDecompressContext;

// What a frame can hold (lz4 255:1, snappy 64:3, zstd 128 KiB per 4 bytes)
// is core/wire/detail/codec_bounds.h, shared with the streaming decoder;
// the per-thread zstd contexts are core/wire/detail/codec_contexts.h.

// Grows a full output buffer (all of it written): to double its size, or to
// the whole cap when doubling would stop short of it by less than half the
// present size. The bytes move once at most (a mapping grows in place).
void grow_output(Buffer& out, std::uint64_t cap) {
  const std::uint64_t doubled = std::max<std::uint64_t>(2 * std::uint64_t{out.size()}, 64);
  out.resize_uninitialised(static_cast<std::size_t>(doubled + out.size() / 2 >= cap ? cap : doubled));
}

// Compressors write straight into the buffer they return, sized to the
// codec's bound (Buffer does not zero-fill it). When the output fills less
// than half of it, it is copied into an exact-size buffer, so that the
// slack does not stay allocated next to the frame until it is written.
template <typename F>
Result<Buffer> compress_into_bound(std::size_t bound, F&& compress_into) {
  Buffer out = Buffer::uninitialised(bound);
  Result<std::size_t> written = compress_into(out.data(), bound);
  if (!written) return std::move(written).error();
  if (*written < bound / 2) return Buffer(out.data(), *written);
  out.resize_uninitialised(*written);
  return out;
}

// A frame larger than kLz4ChunkBytes is written by FrameEncoder, in chunks
// (core/wire/frame_encoder.h), so that the streaming recoder writes the
// same bytes; `longest_run` gets its longest literal run.
Result<Buffer> lz4_compress(ByteSpan in, std::uint64_t* longest_run = nullptr) {
  if (in.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE))
    return make_error(Errc::unsupported, "lz4 cannot compress " + std::to_string(in.size()) +
                                             " bytes in one block");
  if (in.size() > kLz4ChunkBytes) {
    auto enc = FrameEncoder::start(Codec::lz4, in.size());
    if (!enc) return std::move(enc).error();
    Buffer out;
    // Each chunk's block may end with 16 bytes more than the whole's bound.
    const std::size_t chunks = in.size() / kLz4ChunkBytes + 1;
    out.reserve(4 + static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(in.size()))) + 16 * chunks);
    BufferSink sink(out);
    if (Status s = (*enc)->feed(in, sink); !s) return std::move(s).error();
    if (Status s = (*enc)->finish(sink); !s) return std::move(s).error();
    if (longest_run != nullptr) *longest_run = (*enc)->longest_literal_run();
    if (out.size() < out.capacity() / 2) return Buffer(out.begin(), out.end());
    return out;
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
  return compress_into_bound(4 + static_cast<std::size_t>(bound), into);
}

Result<Buffer> lz4_decompress(ByteSpan in, std::uint64_t max_output) {
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
  Buffer out = Buffer::uninitialised(*size);
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(block.data()),
                                      reinterpret_cast<char*>(out.data()),
                                      static_cast<int>(block.size()), static_cast<int>(*size));
  if (got < 0) return make_error(Errc::codec_failed, "lz4 block is corrupt");
  if (static_cast<std::uint32_t>(got) != *size)
    return make_error(Errc::codec_failed, "lz4 block decoded to " + std::to_string(got) +
                                              " bytes, its prefix says " + std::to_string(*size));
  return out;
}

// libzstd's streaming compressor with the frame's size pledged, fed the
// whole input at once (ZSTD_e_continue, then ZSTD_e_end): the bytes
// FrameEncoder writes from the same input in any pieces
// (core/wire/frame_encoder.h). (ZSTD_compress2 or ZSTD_compressCCtx on the
// whole input take a one-pass path that writes other bytes.) Frames of
// kZstdParallelBytes and more are compressed by `workers` workers of their
// own context, when asked for.
Result<Buffer> zstd_compress(ByteSpan in, int level, int workers) {
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
  auto out = compress_into_bound(ZSTD_compressBound(in.size()), into);
  ctx.trim();
  return out;
}

// Room for the first step of a zstd decode: the declared size when the
// input is at least 1/32 of it, else 32 times the input (at least 1 MiB).
// The buffer then doubles as output appears, so a frame whose header claims
// far more than its blocks make costs what they make, not what it claims.
constexpr std::uint64_t kZstdTrustRatio = 32;
constexpr std::uint64_t kZstdFirstRoom = std::uint64_t{1} << 20;

Result<Buffer> zstd_decompress(ByteSpan in, std::uint64_t max_output) {
  if (in.size() < 4) return make_error(Errc::codec_failed, "zstd frame shorter than its magic");
  const unsigned long long declared = ZSTD_getFrameContentSize(in.data(), in.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR)
    return make_error(Errc::codec_failed, "not a zstd frame (bad magic or header)");
  const bool known = declared != ZSTD_CONTENTSIZE_UNKNOWN;
  if (known && declared > max_output) return too_large(declared, max_output, "zstd");
  if (known && declared > most_output(Codec::zstd, in.size()))
    return impossible_size(declared, in.size(), Codec::zstd);
  // Without a content size (not what Dask writes, but a valid frame) the
  // output is bounded by the limit alone. One byte of room past the most
  // allowed tells a frame that makes more from one that makes exactly that.
  const std::uint64_t most = known ? declared : max_output;
  const std::uint64_t cap = most + 1;

  ZstdDecompressContext& ctx = thread_zstd_dctx();
  ZSTD_DCtx* dctx = ctx.get();
  if (dctx == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");
  ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
  struct Trim {
    ZstdDecompressContext& ctx;
    ~Trim() { ctx.trim(); }
  } trim{ctx};

  Buffer out = Buffer::uninitialised(static_cast<std::size_t>(
      std::min(cap, std::max(kZstdFirstRoom, std::uint64_t{in.size()} * kZstdTrustRatio))));
  std::size_t pos = 0;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  bool whole_room = out.size() == cap;
  for (;;) {
    if (pos == out.size()) {
      if (out.size() >= cap) break;  // one byte more than allowed came out
      grow_output(out, cap);
    }
    ZSTD_outBuffer output{out.data(), out.size(), pos};
    const std::size_t in_before = input.pos;
    const std::size_t ret = ZSTD_decompressStream(dctx, &output, &input);
    const bool progressed = input.pos != in_before || output.pos != pos;
    pos = output.pos;
    if (ZSTD_isError(ret)) {
      // A frame whose window is larger than the streaming decoder takes
      // (2^27 bytes) still decodes in one pass into room for all of it,
      // which it has declared and the checks above allowed.
      if (ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge && known && !whole_room &&
          pos == 0) {
        ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
        input.pos = 0;
        out = Buffer();  // nothing written yet: no copy, and the old room goes first
        out.resize_uninitialised(static_cast<std::size_t>(cap));
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
  if (pos > most) {
    if (known)
      return make_error(Errc::codec_failed, "zstd frame decoded to more than the " + std::to_string(declared) +
                                                " bytes its header says");
    return decodes_too_large(max_output, "zstd");
  }
  if (known && pos != declared)
    return make_error(Errc::codec_failed, "zstd frame decoded to " + std::to_string(pos) +
                                              " bytes, its header says " + std::to_string(declared));
  out.resize_uninitialised(pos);
  return out;
}

Result<Buffer> snappy_compress(ByteSpan in) {
  auto into = [&](std::uint8_t* out, std::size_t) -> Result<std::size_t> {
    std::size_t written = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(in.data()), in.size(), reinterpret_cast<char*>(out),
                        &written);
    return written;
  };
  return compress_into_bound(snappy::MaxCompressedLength(in.size()), into);
}

Result<Buffer> snappy_decompress(ByteSpan in, std::uint64_t max_output) {
  std::size_t size = 0;
  if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(in.data()), in.size(), &size))
    return make_error(Errc::codec_failed, "snappy length header is corrupt");
  if (size > max_output) return too_large(size, max_output, "snappy");
  // What follows the varint (1 to 5 bytes) are the elements.
  std::uint64_t header = 0;
  while (header < in.size() && (in[header] & 0x80) != 0) ++header;
  const std::uint64_t elements = in.size() - std::min<std::uint64_t>(in.size(), header + 1);
  if (size > most_output(Codec::snappy, elements)) return impossible_size(size, elements, Codec::snappy);
  Buffer out = Buffer::uninitialised(size);
  if (!snappy::RawUncompress(reinterpret_cast<const char*>(in.data()), in.size(),
                             reinterpret_cast<char*>(out.data())))
    return make_error(Errc::codec_failed, "snappy block is corrupt");
  return out;
}

Result<Buffer> zlib_compress(ByteSpan in, int level) {
  auto into = [&](std::uint8_t* out, std::size_t cap) -> Result<std::size_t> {
    uLongf written = static_cast<uLongf>(cap);
    const int rc = compress2(out, &written, in.data(), static_cast<uLong>(in.size()), level);
    if (rc != Z_OK) return make_error(Errc::codec_failed, "zlib compression failed (" + std::to_string(rc) + ")");
    return static_cast<std::size_t>(written);
  };
  return compress_into_bound(compressBound(static_cast<uLong>(in.size())), into);
}

// zlib declares no size: the output buffer starts at four times the input
// and doubles as output appears, never past one byte over the limit.
Result<Buffer> zlib_decompress(ByteSpan in, std::uint64_t max_output) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return make_error(Errc::codec_failed, "zlib: cannot initialise");
  struct End {
    z_stream& zs;
    ~End() { inflateEnd(&zs); }
  } end{zs};
  const std::uint64_t cap = max_output + 1;
  Buffer out = Buffer::uninitialised(static_cast<std::size_t>(std::min<std::uint64_t>(cap, std::uint64_t{in.size()} * 4 + 64)));
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
    if (pos == out.size()) {
      if (out.size() >= cap) return decodes_too_large(max_output, "zlib");
      grow_output(out, cap);
    }
    const std::size_t room = std::min<std::size_t>(out.size() - pos, 1u << 30);
    zs.next_out = out.data() + pos;
    zs.avail_out = static_cast<uInt>(room);
    rc = inflate(&zs, Z_NO_FLUSH);
    pos += room - zs.avail_out;
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
  out.resize_uninitialised(pos);
  return out;
}

}  // namespace

Result<Buffer> compress(Codec c, ByteSpan input, const CompressOptions& options) {
  switch (c) {
    case Codec::none: return Buffer(input);
    case Codec::lz4: return lz4_compress(input);
    case Codec::zstd: return zstd_compress(input, options.zstd_level, options.zstd_workers);
    case Codec::snappy: return snappy_compress(input);
    case Codec::zlib: return zlib_compress(input, options.zlib_level);
  }
  return make_error(Errc::internal, "unknown codec");
}

Result<Buffer> decompress(Codec c, ByteSpan input, std::uint64_t max_output) {
  switch (c) {
    case Codec::none:
      if (input.size() > max_output) return too_large(input.size(), max_output, "raw");
      return Buffer(input);
    case Codec::lz4: return lz4_decompress(input, max_output);
    case Codec::zstd: return zstd_decompress(input, max_output);
    case Codec::snappy: return snappy_decompress(input, max_output);
    case Codec::zlib: return zlib_decompress(input, max_output);
  }
  return make_error(Errc::internal, "unknown codec");
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

MaybeCompressRules maybe_compress_rules_for(std::string_view dask_release) {
  MaybeCompressRules rules;
  if (dask_release == "newest") rules.ratio = 0.7;
  return rules;
}

Result<MaybeCompressed> maybe_compress(Codec c, ByteSpan input, const MaybeCompressRules& rules,
                                       const CompressOptions& options) {
  MaybeCompressed out;
  if (c == Codec::none) return out;
  if (input.size() < rules.min_size || input.size() > rules.max_size) return out;

  // Sample: sample_count slices of sample_size bytes, evenly spread.
  const std::uint64_t size = std::min<std::uint64_t>(rules.sample_size, input.size());
  if (size > 0 && rules.sample_count > 0) {
    Buffer sample;
    sample.reserve(static_cast<std::size_t>(size * rules.sample_count));
    const std::uint64_t max_start = input.size() - size;
    for (std::uint32_t i = 0; i < rules.sample_count; ++i) {
      const std::uint64_t start =
          rules.sample_count == 1 ? 0 : max_start * i / (rules.sample_count - 1);
      sample.append(input.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(size)));
    }
    auto small = compress(c, sample, options);
    if (!small) return std::move(small).error();
    if (static_cast<double>(small->size()) > rules.ratio * static_cast<double>(sample.size()))
      return out;
  }
  std::uint64_t longest_run = 0;
  auto full = c == Codec::lz4 ? lz4_compress(input, &longest_run) : compress(c, input, options);
  if (!full) return std::move(full).error();
  if (static_cast<double>(full->size()) > rules.ratio * static_cast<double>(input.size())) return out;
  // A literal run the streaming encoder would have to hold whole stays raw
  // (core/wire/frame_encoder.h), here too, so that both write the same.
  if (longest_run > kLz4MaxLiteralRun) return out;
  out.compressed = true;
  out.data = std::move(*full);
  return out;
}

}  // namespace daskcaps
