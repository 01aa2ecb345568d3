#include "core/wire/codec.h"

#include <memory>

#include <lz4.h>
#include <snappy-stubs-public.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <limits>

#include "core/base/byte_reader.h"
#include "core/base/page_buffer.h"

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

Error too_large(std::uint64_t size, std::uint64_t limit, std::string_view codec) {
  return make_error(Errc::limit_exceeded,
                    std::string(codec) + " frame declares " + std::to_string(size) +
                        " bytes, more than the limit of " + std::to_string(limit) +
                        " (--max-decompressed-bytes)");
}

// Compressors write into scratch memory as large as the codec's bound and
// return an exact-size copy: the bound (about the input's size) is then
// neither zeroed for every frame nor kept alive next to every output frame
// until it is written. Bounds up to kKeptScratchBytes use a per-thread
// buffer that stays; larger ones (a large frame) get pages of their own,
// which cost memory only as the compressor writes them and are given back
// at once, so no thread keeps a large message's worth of scratch.
constexpr std::size_t kKeptScratchBytes = std::size_t{1} << 20;

template <typename F>
Result<Buffer> compress_via_scratch(std::size_t bound, F&& compress_into) {
  if (bound > kKeptScratchBytes) {
    auto pages = PageBuffer::reserve(bound);
    if (!pages) return std::move(pages).error();
    Result<std::size_t> written = compress_into((*pages)->data(), bound);
    if (!written) return std::move(written).error();
    return Buffer((*pages)->data(), (*pages)->data() + *written);
  }
  thread_local Buffer scratch;
  if (scratch.size() < bound) {
    scratch = Buffer();  // drop the old one before the new one is allocated
    scratch.resize(bound);
  }
  Result<std::size_t> written = compress_into(scratch.data(), bound);
  if (!written) return std::move(written).error();
  return Buffer(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(*written));
}

// One zstd compression context per thread, reused: ZSTD_compress would make
// and free one (several MiB of tables at level 3) for every frame. The
// output is the same.
ZSTD_CCtx* thread_zstd_context() {
  struct Holder {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ~Holder() { ZSTD_freeCCtx(cctx); }
  };
  thread_local Holder holder;
  return holder.cctx;
}

Result<Buffer> lz4_compress(ByteSpan in) {
  if (in.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE))
    return make_error(Errc::unsupported, "lz4 cannot compress " + std::to_string(in.size()) +
                                             " bytes in one block");
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
  return compress_via_scratch(4 + static_cast<std::size_t>(bound), into);
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
  Buffer out(*size);
  ByteSpan block = r.rest();
  if (block.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    return make_error(Errc::codec_failed, "lz4 block too large");
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(block.data()),
                                      reinterpret_cast<char*>(out.data()),
                                      static_cast<int>(block.size()), static_cast<int>(*size));
  if (got < 0) return make_error(Errc::codec_failed, "lz4 block is corrupt");
  if (static_cast<std::uint32_t>(got) != *size)
    return make_error(Errc::codec_failed, "lz4 block decoded to " + std::to_string(got) +
                                              " bytes, its prefix says " + std::to_string(*size));
  return out;
}

// Frames at least this large are compressed by several zstd workers when
// the caller asks for them (CompressOptions::zstd_workers): one large frame
// then uses every core. Below it, the hand-off costs more than it gains.
constexpr std::size_t kZstdParallelBytes = std::size_t{1} << 20;
// zstd's smallest job (ZSTDMT_JOBSIZE_MIN).
constexpr std::size_t kZstdMinJobBytes = std::size_t{512} << 10;

Result<Buffer> zstd_compress(ByteSpan in, int level, int workers) {
  const bool parallel = workers > 1 && in.size() >= kZstdParallelBytes;
  // A parallel compression gets a context of its own, freed afterwards: its
  // worker pool and job buffers would otherwise stay with every thread that
  // ever compressed a large frame.
  std::unique_ptr<ZSTD_CCtx, std::size_t (*)(ZSTD_CCtx*)> own(parallel ? ZSTD_createCCtx() : nullptr,
                                                              ZSTD_freeCCtx);
  ZSTD_CCtx* cctx = parallel ? own.get() : thread_zstd_context();
  if (cctx == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");
  if (parallel) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    // Fails on a libzstd built without threads: then it compresses alone.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, workers);
    // zstd's default job is 4 windows (8 MiB at level 3): a frame of the
    // size Dask sends would be one job on one thread. Small jobs keep every
    // worker busy and the buffers small.
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_jobSize, static_cast<int>(kZstdMinJobBytes));
  }
  auto into = [&](std::uint8_t* out, std::size_t cap) -> Result<std::size_t> {
    const std::size_t written = parallel ? ZSTD_compress2(cctx, out, cap, in.data(), in.size())
                                         : ZSTD_compressCCtx(cctx, out, cap, in.data(), in.size(), level);
    if (ZSTD_isError(written))
      return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(written));
    return written;
  };
  return compress_via_scratch(ZSTD_compressBound(in.size()), into);
}

Result<Buffer> zstd_decompress(ByteSpan in, std::uint64_t max_output) {
  if (in.size() < 4) return make_error(Errc::codec_failed, "zstd frame shorter than its magic");
  const unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_ERROR)
    return make_error(Errc::codec_failed, "not a zstd frame (bad magic or header)");
  if (size != ZSTD_CONTENTSIZE_UNKNOWN) {
    if (size > max_output) return too_large(size, max_output, "zstd");
    Buffer out(static_cast<std::size_t>(size));
    const std::size_t got = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(got))
      return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(got));
    if (got != size)
      return make_error(Errc::codec_failed, "zstd frame decoded to " + std::to_string(got) +
                                                " bytes, its header says " + std::to_string(size));
    return out;
  }
  // No content size (not what Dask writes, but a valid frame): stream it out
  // under the limit.
  ZSTD_DStream* ds = ZSTD_createDStream();
  if (ds == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");
  Buffer out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  std::size_t ret = 1;
  while (ret != 0) {
    const std::size_t chunk = ZSTD_DStreamOutSize();
    if (out.size() > max_output) {
      ZSTD_freeDStream(ds);
      return too_large(out.size(), max_output, "zstd");
    }
    const std::size_t old = out.size();
    out.resize(old + chunk);
    ZSTD_outBuffer output{out.data() + old, chunk, 0};
    ret = ZSTD_decompressStream(ds, &output, &input);
    out.resize(old + output.pos);
    if (ZSTD_isError(ret)) {
      ZSTD_freeDStream(ds);
      return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(ret));
    }
    if (out.size() > max_output) {
      ZSTD_freeDStream(ds);
      return too_large(out.size(), max_output, "zstd");
    }
    if (ret != 0 && input.pos == input.size && output.pos < chunk) {
      ZSTD_freeDStream(ds);
      return make_error(Errc::codec_failed, "zstd frame is truncated");
    }
  }
  ZSTD_freeDStream(ds);
  return out;
}

Result<Buffer> snappy_compress(ByteSpan in) {
  auto into = [&](std::uint8_t* out, std::size_t) -> Result<std::size_t> {
    std::size_t written = 0;
    snappy::RawCompress(reinterpret_cast<const char*>(in.data()), in.size(), reinterpret_cast<char*>(out),
                        &written);
    return written;
  };
  return compress_via_scratch(snappy::MaxCompressedLength(in.size()), into);
}

Result<Buffer> snappy_decompress(ByteSpan in, std::uint64_t max_output) {
  std::size_t size = 0;
  if (!snappy::GetUncompressedLength(reinterpret_cast<const char*>(in.data()), in.size(), &size))
    return make_error(Errc::codec_failed, "snappy length header is corrupt");
  if (size > max_output) return too_large(size, max_output, "snappy");
  Buffer out(size);
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
  return compress_via_scratch(compressBound(static_cast<uLong>(in.size())), into);
}

Result<Buffer> zlib_decompress(ByteSpan in, std::uint64_t max_output) {
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return make_error(Errc::codec_failed, "zlib: cannot initialise");
  Buffer out;
  std::size_t fed = 0;
  int rc = Z_OK;
  const std::size_t chunk = std::size_t{1} << 16;
  // Guess from the input size, grow as needed, never past the limit.
  out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(in.size() * 4 + 64, max_output)));
  while (rc != Z_STREAM_END) {
    if (zs.avail_in == 0 && fed < in.size()) {
      const std::size_t step = std::min<std::size_t>(in.size() - fed, 1u << 30);
      zs.next_in = const_cast<Bytef*>(in.data() + fed);
      zs.avail_in = static_cast<uInt>(step);
      fed += step;
    }
    const std::size_t old = out.size();
    if (old >= max_output + 1) {
      inflateEnd(&zs);
      return too_large(old, max_output, "zlib");
    }
    const std::size_t grow = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, max_output + 1 - old));
    out.resize(old + grow);
    zs.next_out = out.data() + old;
    zs.avail_out = static_cast<uInt>(grow);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(old + (grow - zs.avail_out));
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && fed == in.size()) {
      inflateEnd(&zs);
      return make_error(Errc::codec_failed, "zlib stream is truncated");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string why = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      return make_error(Errc::codec_failed, "zlib stream is corrupt: " + why);
    }
    if (out.size() > max_output) {
      inflateEnd(&zs);
      return too_large(out.size(), max_output, "zlib");
    }
  }
  inflateEnd(&zs);
  // The loop leaves room for one byte past the limit to notice an overflow;
  // a stream that ends on that byte is over the limit too.
  if (out.size() > max_output) return too_large(out.size(), max_output, "zlib");
  if (fed < in.size() || zs.avail_in != 0)
    return make_error(Errc::codec_failed, "zlib stream has trailing bytes");
  return out;
}

}  // namespace

Result<Buffer> compress(Codec c, ByteSpan input, const CompressOptions& options) {
  switch (c) {
    case Codec::none: return Buffer(input.begin(), input.end());
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
      return Buffer(input.begin(), input.end());
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
      sample.insert(sample.end(), input.begin() + static_cast<std::ptrdiff_t>(start),
                    input.begin() + static_cast<std::ptrdiff_t>(start + size));
    }
    auto small = compress(c, sample, options);
    if (!small) return std::move(small).error();
    if (static_cast<double>(small->size()) > rules.ratio * static_cast<double>(sample.size()))
      return out;
  }
  auto full = compress(c, input, options);
  if (!full) return std::move(full).error();
  if (static_cast<double>(full->size()) > rules.ratio * static_cast<double>(input.size())) return out;
  out.compressed = true;
  out.data = std::move(*full);
  return out;
}

}  // namespace daskcaps
