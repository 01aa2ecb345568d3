#include "core/wire/internal/stream_codec.h"

// ZSTD_FRAMEHEADERSIZE_MAX: in libzstd's static section.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/wire/detail/codec_bounds.h"
#include "core/wire/detail/lz4_block_stream.h"
#include "core/wire/detail/zstd_frame_stream.h"

namespace daskcaps {

namespace {

constexpr std::uint64_t kLz4PrefixBytes = 4;
constexpr std::uint64_t kZstdHeaderMax = ZSTD_FRAMEHEADERSIZE_MAX;  // 18

// An lz4 frame: the prefix, read by start(), then the block, decoded by
// detail::Lz4BlockStream.
class Lz4FrameDecoder final : public FrameStreamDecoder {
 public:
  Lz4FrameDecoder(ByteSpan head, std::uint64_t frame_bytes, std::uint32_t size,
                  std::size_t piece_bytes)
      : FrameStreamDecoder(frame_bytes, size, head.first(kLz4PrefixBytes)),
        block_(frame_bytes - kLz4PrefixBytes, size, piece_bytes) {}

  Status feed(ByteSpan in, std::vector<Bytes>& out) override {
    const std::uint64_t before = fed();
    if (Status s = begin_feed(in); !s) return s;
    // The prefix was read by start() (begin_feed compares it).
    const std::size_t skip = static_cast<std::size_t>(
        std::min<std::uint64_t>(in.size(), kLz4PrefixBytes - std::min(before, kLz4PrefixBytes)));
    Status s = block_.feed(in.subspan(skip), out);
    return done(std::move(s));
  }

  Status finish(std::vector<Bytes>& out) override {
    if (Status s = begin_finish(); !s) return s;
    if (fed() < frame_bytes()) {
      (void)block_.finish(out);  // what is decoded goes out; the error is the truncation
      add_produced(block_.handed_out() - produced());
      return fail(make_error(Errc::codec_failed,
                             "lz4 frame is truncated: " + std::to_string(fed()) + " of " +
                                 std::to_string(frame_bytes()) + " bytes",
                             fed()));
    }
    return done(block_.finish(out));
  }

 private:
  Status done(Status s) {
    add_produced(block_.handed_out() - produced());
    if (s) return s;
    Error e = std::move(s).error();
    if (e.has_offset()) e.offset += kLz4PrefixBytes;  // block offsets to frame offsets
    return fail(std::move(e));
  }

  detail::Lz4BlockStream block_;
};

Result<std::unique_ptr<FrameStreamDecoder>> start_lz4(ByteSpan head, std::uint64_t frame_bytes,
                                                      std::uint64_t max_output,
                                                      std::size_t piece_bytes) {
  // The checks and words of lz4_decompress() in codec.cpp, in its order.
  if (frame_bytes < kLz4PrefixBytes)
    return make_error(Errc::codec_failed, "lz4 frame shorter than its 4-byte size prefix");
  std::uint32_t size = 0;
  for (std::size_t i = 0; i < kLz4PrefixBytes; ++i)
    size |= static_cast<std::uint32_t>(head[i]) << (8 * i);
  if (size > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max()))
    return make_error(Errc::codec_failed,
                      "lz4 size prefix " + std::to_string(size) + " is negative as int32");
  if (size > max_output) return detail::too_large(size, max_output, "lz4");
  const std::uint64_t block = frame_bytes - kLz4PrefixBytes;
  if (size > detail::most_output(Codec::lz4, block))
    return detail::impossible_size(size, block, Codec::lz4);
  if (block > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    return make_error(Errc::codec_failed, "lz4 block too large");
  return std::unique_ptr<FrameStreamDecoder>(
      new Lz4FrameDecoder(head, frame_bytes, size, piece_bytes));
}

}  // namespace

bool FrameStreamDecoder::supports(Codec c) { return c == Codec::lz4 || c == Codec::zstd; }

std::uint64_t FrameStreamDecoder::header_bytes(Codec c, std::uint64_t frame_bytes) {
  switch (c) {
    case Codec::lz4:
      return std::min(kLz4PrefixBytes, frame_bytes);
    case Codec::zstd:
      return std::min(kZstdHeaderMax, frame_bytes);
    case Codec::none:
    case Codec::snappy:
    case Codec::zlib:
      break;
  }
  return 0;
}

Result<std::unique_ptr<FrameStreamDecoder>> FrameStreamDecoder::start(Codec c, ByteSpan head,
                                                                      std::uint64_t frame_bytes,
                                                                      std::uint64_t max_output,
                                                                      const Options& options) {
  if (!supports(c))
    return make_error(Errc::unsupported, std::string(codec_name(c)) +
                                             " frames cannot be decoded in pieces, only whole");
  if (head.size() < header_bytes(c, frame_bytes) || head.size() > frame_bytes)
    return make_error(Errc::internal, std::string(codec_name(c)) + " stream decoder given " +
                                          std::to_string(head.size()) + " bytes of a " +
                                          std::to_string(frame_bytes) +
                                          "-byte frame's head, needs " +
                                          std::to_string(header_bytes(c, frame_bytes)));
  if (options.piece_bytes == 0)
    return make_error(Errc::internal, "stream decoder with output pieces of 0 bytes");
  if (c == Codec::lz4) return start_lz4(head, frame_bytes, max_output, options.piece_bytes);
  return detail::start_zstd_stream(head, frame_bytes, max_output, options.piece_bytes);
}

FrameStreamDecoder::FrameStreamDecoder(std::uint64_t frame_bytes, std::uint64_t output_size,
                                       ByteSpan head)
    : frame_bytes_(frame_bytes), output_size_(output_size), head_(head.begin(), head.end()) {}

FrameStreamDecoder::~FrameStreamDecoder() = default;

Error FrameStreamDecoder::fail(Error e) {
  error_ = std::make_unique<Error>(e);
  return e;
}

Status FrameStreamDecoder::begin_feed(ByteSpan in) {
  if (error_) return *error_;
  if (finished_) return make_error(Errc::internal, "stream decoder fed after finish()");
  if (in.size() > frame_bytes_ - fed_)
    return fail(make_error(Errc::internal, "stream decoder fed " +
                                               std::to_string(fed_ + in.size()) + " bytes of a " +
                                               std::to_string(frame_bytes_) + "-byte frame"));
  if (fed_ < head_.size() && !in.empty()) {
    const std::size_t n =
        std::min<std::size_t>(in.size(), static_cast<std::size_t>(head_.size() - fed_));
    if (std::memcmp(in.data(), head_.data() + fed_, n) != 0)
      return fail(make_error(
          Errc::internal, "stream decoder fed a frame whose head differs from the one start() read",
          fed_));
  }
  fed_ += in.size();
  return ok_status();
}

Status FrameStreamDecoder::begin_finish() {
  if (error_) return *error_;
  if (finished_) return make_error(Errc::internal, "stream decoder finished twice");
  finished_ = true;
  return ok_status();
}

}  // namespace daskcaps
