// Frame codecs exactly as Dask's Python bindings write and read them
// (docs/protocol.md §4.1), and Dask's maybe_compress decision (docs/protocol.md §4.2).
//
//   name      bytes on the wire
//   "lz4"     u32 little-endian uncompressed size, then one raw LZ4 block
//             (lz4.block.compress defaults: no frame header, no checksum)
//   "zstd"    one zstd frame with the content size in its header (Python's
//             ZstdDecompressor().decompress needs it), no checksum, no dict
//   "snappy"  one raw snappy block: varint uncompressed length, elements
//   "zlib"    a zlib stream (RFC 1950, default level 6 when writing); any
//             valid zlib stream is accepted when reading
//   nil/false the frame is raw
//
// Decompression is bounded by the caller's limit (Limits::max_decompressed_bytes)
// and by what the input can make, so that memory follows the data, not what
// a frame claims:
//   - a frame declaring more than the limit is Errc::limit_exceeded, and one
//     declaring more than its codec can make from its size (lz4 255:1,
//     snappy 64:3, zstd 128 KiB per 4 bytes) is Errc::codec_failed, both
//     before anything is allocated;
//   - lz4 and snappy then decode into a buffer of the declared size, which
//     is not zero-filled (pages are touched only as output is written);
//   - zstd and zlib decode in steps into a buffer that starts small (zstd:
//     the declared size when the input is at least 1/32 of it) and doubles
//     as output actually appears, up to the declared size or the limit;
//     zlib output past the limit is Errc::limit_exceeded;
//   - a frame that decodes to a size other than the one it declares is
//     Errc::codec_failed.
// A thread keeps at most 16 MiB of codec state (zstd contexts) between frames.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

enum class Codec : std::uint8_t { none, lz4, zstd, snappy, zlib };

/// Every codec this build can read and write, in Dask's "auto" preference
/// order first (lz4, snappy) then the explicit-only ones (zstd, zlib).
inline constexpr Codec kAllCodecs[] = {Codec::lz4, Codec::snappy, Codec::zstd, Codec::zlib};

/// The name used in Dask headers and handshakes ("lz4", ...); "none" for none.
std::string_view codec_name(Codec c);
/// Parses a codec name as Dask writes it; "none", "" and "false" give none.
/// nullopt for a name this build does not know (e.g. "blosc", "brotli").
std::optional<Codec> codec_from_name(std::string_view name);
/// Version string of the library behind a codec, e.g. "1.9.4".
std::string codec_library_version(Codec c);

struct CompressOptions {
  int zstd_level = 3;  // distributed.comm.zstd.level
  int zlib_level = -1; // Python's zlib.compress default (6)
  /// zstd worker threads for frames of 1 MiB and more (0 or 1: none). The
  /// output is one ordinary zstd frame with its content size, which every
  /// decoder reads; only its block boundaries differ.
  int zstd_workers = 0;
};

/// The one check of CompressOptions, for every caller (the command line,
/// the Python module, the bridge): zstd levels 1 to 22, zlib levels -1 to
/// 9, zstd workers not negative. Errc::usage naming the value.
Status validate(const CompressOptions& options);

/// Compresses a whole buffer in the codec's Dask format. Fails only for
/// inputs the format cannot hold (e.g. lz4 above 2^31 - 1 bytes). The bytes
/// are those FrameEncoder writes from the same input in pieces
/// (core/wire/internal/frame_encoder.h): lz4 frames up to 4 MiB and snappy and zlib
/// frames are what python-lz4, python-snappy and zlib write; larger lz4
/// frames are joined from 4 MiB chunks, and zstd frames come from libzstd's
/// streaming compressor (valid frames that every decoder reads, a few bytes
/// away from what a one-pass compressor writes).
Result<Buffer> compress(Codec c, ByteSpan input, const CompressOptions& options = {});

/// Decompresses one frame; the output may not exceed max_output bytes.
/// Errors carry no offset; callers add the frame's position.
Result<Buffer> decompress(Codec c, ByteSpan input, std::uint64_t max_output);

/// Memory a codec writes its output into, for a caller that owns where the
/// output lives (the Python module writes it straight into the bytes object
/// it returns, so that the output is made once). The codec asks for room
/// before it writes: room(n, 0) first; when the output outgrows it (zstd
/// and zlib, which may not know their size), room(larger, kept), which must
/// keep the first `kept` bytes written so far; then finish(size): the
/// output is the first `size` bytes of the last room. room() may return
/// nullptr when it cannot have that much: the codec then fails with
/// Errc::limit_exceeded ("cannot allocate N bytes for the output"); for a
/// size of 0, nullptr is as good a room as any other. On any
/// error finish() is not called and the room's bytes mean nothing.
/// compress() and decompress() above write into a Buffer this way.
class OutputRoom {
 public:
  virtual ~OutputRoom() = default;
  virtual std::uint8_t* room(std::size_t size, std::size_t kept) = 0;
  virtual void finish(std::size_t size) = 0;
};

/// compress() and decompress() into a room of the caller's: the same rules,
/// the same output bytes and the same errors.
Status compress_into(Codec c, ByteSpan input, OutputRoom& out, const CompressOptions& options = {});
Status decompress_into(Codec c, ByteSpan input, std::uint64_t max_output, OutputRoom& out);

/// The uncompressed size a frame declares in its own header (lz4 prefix,
/// zstd frame content size, snappy varint), or nullopt when the format does
/// not say (zlib) or the header is unreadable.
std::optional<std::uint64_t> declared_size(Codec c, ByteSpan input);

/// Dask's rule for whether a frame is worth compressing (docs/protocol.md §4.2);
/// a release's own: DaskRelease::maybe_compress_rules (core/wire/dask_release.h).
struct MaybeCompressRules {
  std::uint64_t min_size = 10'000;          // smaller frames stay raw
  std::uint64_t max_size = 1ull << 31;      // larger frames stay raw
  std::uint64_t sample_size = 10'000;       // bytes per sample
  std::uint32_t sample_count = 5;           // samples taken
  double ratio = 0.9;                       // 2022.12: 0.9; 2023.5+: 0.7
};

/// The sample maybe_compress compresses to judge a frame: sample_count
/// slices of sample_size bytes (or the whole frame when smaller), evenly
/// spread and joined (Dask's byte_sample takes them at random). Empty when
/// sample_size or sample_count is 0.
Buffer frame_sample(ByteSpan input, const MaybeCompressRules& rules);

struct MaybeCompressed {
  bool compressed = false;  // false: send the input raw
  Buffer data;              // the compressed bytes when compressed
};

/// Applies Dask's maybe_compress: frames outside [min_size, max_size] stay
/// raw; a sample of sample_count slices of sample_size bytes is compressed
/// and the frame stays raw unless it shrinks to at most ratio of its size;
/// then the whole frame is compressed and kept only if it, too, is at most
/// ratio of the input. Dask picks the sample offsets at random; we take them
/// evenly spread, so the same input always gives the same output. One rule
/// of our own: an lz4 frame with a literal run (bytes no match covers) of
/// more than kLz4MaxLiteralRun stays raw (core/wire/internal/frame_encoder.h says
/// why).
Result<MaybeCompressed> maybe_compress(Codec c, ByteSpan input, const MaybeCompressRules& rules = {},
                                       const CompressOptions& options = {});

}  // namespace daskcaps
