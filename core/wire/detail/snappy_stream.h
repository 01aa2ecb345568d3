// A decoder of one raw snappy block whose bytes arrive in pieces, for
// decode_in_windows() (core/wire/internal/window_codec.h); snappy decodes a block
// only into one flat buffer, or into a sink that keeps every byte until the
// end.
//
// The block (snappy's format_description.txt) is the decoded size as a
// varint (read by the caller), then elements, each a tag byte whose low
// two bits say what it is:
//   00 literal  length - 1 in the tag's high 6 bits, or, for 60-63, in the
//               1-4 little-endian bytes after the tag; then the bytes
//   01 copy     length 4-11 (bits 2-4, plus 4), offset of 11 bits: bits
//               5-7 of the tag, then one byte
//   10 copy     length 1-64 (bits 2-7, plus 1), 2-byte little-endian offset
//   11 copy     length 1-64, 4-byte little-endian offset
// A copy repeats `length` bytes starting `offset` back in the output
// (overlapping itself when the offset is shorter).
//
// The decoder keeps the last 64 KiB of output before each window: snappy's
// compressor works on 64 KiB of input at a time, so its copies never reach
// further. A block whose copy does is Errc::unsupported (a caller decodes
// it whole). The caller checks the block with snappy first
// (snappy::IsValidCompressed): given a block snappy accepts, this decoder
// makes snappy's bytes; given another, it fails with Errc::codec_failed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "core/wire/internal/window_codec.h"

namespace daskcaps::detail {

class SnappyBlockStream {
 public:
  /// A block (after its varint) that decodes to `output_bytes`, handed to
  /// `fn` in windows of at most `window_bytes`.
  SnappyBlockStream(std::uint64_t output_bytes, std::size_t window_bytes, const WindowFn& fn);

  /// The block's next bytes.
  Status feed(ByteSpan in);
  /// After the last byte: the rest of the output; fails unless the block
  /// ended after a whole element, having made exactly output_bytes.
  Status finish();

 private:
  Status emit();
  Status literal(const std::uint8_t* p, std::size_t n);
  Status element(const std::uint8_t* header, std::size_t n);
  Status copy(std::uint64_t offset, std::uint64_t length);

  static constexpr std::size_t kHistory = std::size_t{64} << 10;

  std::uint64_t total_;
  std::size_t window_;
  const WindowFn& fn_;
  Buffer buf_;            // kHistory bytes of past, then the window
  std::size_t pos_ = 0;   // next output byte in buf_
  std::size_t from_ = 0;  // first byte of buf_ not handed out
  std::size_t limit_ = 0; // end of the window in buf_: from_ + window_
  std::uint64_t made_ = 0;
  std::uint8_t tag_[5];   // a tag and its length or offset bytes
  std::size_t tag_have_ = 0, tag_need_ = 0;
  std::uint64_t literal_left_ = 0;
};

}  // namespace daskcaps::detail
