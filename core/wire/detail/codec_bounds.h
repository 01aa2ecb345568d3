// What a compressed frame can hold, and the errors for a declared size that
// breaks it: shared by the whole-frame codecs (core/wire/codec.cpp) and the
// streaming decoder (core/wire/internal/stream_codec.cpp), so that both refuse the
// same frames with the same words.
//
// Each format bounds how much output its input can make. A declared size
// above that bound is a lie, refused before anything is allocated, so a
// frame can never make us allocate more than a fixed multiple of its own
// size:
//   lz4     255 bytes per input byte. A sequence is a token, its literals
//           (one output byte for each input byte), a 2-byte offset and a
//           match of 4 + 15 bytes from the token, plus 255 for each extra
//           length byte and up to 254 for the last one: a sequence with k
//           extra length bytes makes at most 273 + 255k bytes from at least
//           k + 4, less than 255 per input byte, as do literals.
//   snappy  64 per 3 bytes after the varint length: the densest element is
//           a copy with a 2-byte offset, 3 bytes for at most 64 output bytes
//           (a 1-byte-offset copy is 2 bytes for at most 11; a literal one
//           byte for one).
//   zstd    128 KiB per 4 bytes: a block that makes output has a 3-byte
//           header and at least one byte of content (an RLE block: one byte
//           repeated), and makes at most 128 KiB (RFC 8878 §3.1.1.2.3;
//           libzstd's one-shot decoder also takes RLE blocks of up to 2 MiB,
//           which no encoder writes and its streaming decoder refuses).
//   zlib    unbounded here (its output is bounded by the caller's limit).
#pragma once

#include <cstdint>
#include <string_view>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/codec.h"

namespace daskcaps::detail {

/// The most output `input` bytes of codec `c` can make (the input itself
/// for none; the largest uint64 for zlib).
std::uint64_t most_output(Codec c, std::uint64_t input);

/// Errc::limit_exceeded: a frame declaring `size` bytes, more than `limit`
/// (--max-decompressed-bytes).
Error too_large(std::uint64_t size, std::uint64_t limit, std::string_view codec);

/// Errc::codec_failed: a frame declaring `size` bytes, more than `input`
/// bytes of codec `c` can make (most_output).
Error impossible_size(std::uint64_t size, std::uint64_t input, Codec c);

/// What a zstd decoder may make of one frame (zstd_output_bound). Shared by
/// codec.cpp's whole-frame decoder and window_codec.cpp's windows.
struct ZstdOutputBound {
  std::uint64_t most = 0;  ///< the size the frame declares, or the limit where it declares none
  bool declared = false;   ///< whether it declares its size (a frame need not; Dask's do)
  /// Room to decode into: one byte past the most tells a frame that makes
  /// more from one that makes exactly that.
  std::uint64_t cap() const { return most + 1; }
  /// The decoder made `n` bytes of the frame, all of it: more than the
  /// most, or other than the declared size, is an error.
  Status check_decoded(std::uint64_t n) const;
};

/// The bound of a zstd frame of `frame_size` bytes that starts with `head`
/// (its frame header, or all of it), under the limit `max_output`, into
/// `out`. Refused: a frame shorter than the magic or with a bad header, and
/// a declared size above `max_output` (too_large) or above what
/// `frame_size` bytes can make (impossible_size). (A Status and an out
/// parameter, not a Result: a Result of a detail type would instantiate a
/// std::variant of it that the shared library exports.)
Status zstd_output_bound(ByteSpan head, std::uint64_t frame_size, std::uint64_t max_output, ZstdOutputBound& out);

}  // namespace daskcaps::detail
