#include "core/wire/detail/zstd_frame_stream.h"

// ZSTD_getFrameHeader, ZSTD_frameHeader: in libzstd's static section,
// exported by the shared library too.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <algorithm>
#include <string>

#include "core/wire/detail/codec_bounds.h"
#include "core/wire/detail/output_window.h"

namespace daskcaps::detail {

namespace {

// The largest zstd window decoded in pieces: libzstd's default for its
// streaming decoder (ZSTD_WINDOWLOG_LIMIT_DEFAULT), which decompress() uses
// too before it falls back to one pass into the whole declared size.
constexpr int kZstdWindowLogMax = 27;

// Follows the frame's block headers as the bytes go by, for the one check
// the one-pass decoder makes and the streaming one skips (a compressed
// block of 0 bytes).
class BlockWalker {
 public:
  BlockWalker(std::size_t header_size, bool checksum, bool skippable, std::uint64_t skippable_size)
      : left_(header_size),
        checksum_(checksum),
        skippable_(skippable),
        skippable_size_(skippable_size) {}

  /// The frame's next bytes, the first at frame offset `at`.
  Status walk(ByteSpan in, std::uint64_t at) {
    std::size_t i = 0;
    while (i < in.size() && stage_ != Stage::end) {
      if (stage_ == Stage::block_header) {
        if (have_ == 0) header_at_ = at + i;
        header_[have_++] = in[i++];
        if (have_ < 3) continue;
        have_ = 0;
        const std::uint32_t h =
            header_[0] | (std::uint32_t{header_[1]} << 8) | (std::uint32_t{header_[2]} << 16);
        const unsigned type = (h >> 1) & 3;
        const std::uint32_t size = h >> 3;
        if (type == 2 && size == 0)
          return make_error(Errc::codec_failed, "zstd compressed block of 0 bytes", header_at_);
        last_ = (h & 1) != 0;
        left_ = type == 1 ? 1 : size;  // an RLE block is one byte
        stage_ = Stage::skip;
        if (left_ == 0) next();
        continue;
      }
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left_, in.size() - i));
      i += n;
      left_ -= n;
      if (left_ == 0) next();
    }
    return ok_status();
  }

 private:
  enum class Stage : std::uint8_t { frame_header, skip, block_header, checksum, end };
  // What follows the bytes skipped.
  void next() {
    switch (stage_) {
      case Stage::frame_header:
        if (skippable_) {
          left_ = skippable_size_;
          stage_ = Stage::checksum;  // the content, then the end
          if (left_ == 0) stage_ = Stage::end;
          return;
        }
        stage_ = Stage::block_header;
        return;
      case Stage::skip:
        if (!last_) {
          stage_ = Stage::block_header;
          return;
        }
        left_ = checksum_ ? 4 : 0;
        stage_ = left_ > 0 ? Stage::checksum : Stage::end;
        return;
      case Stage::checksum:
      case Stage::block_header:
      case Stage::end:
        stage_ = Stage::end;
        return;
    }
  }

  Stage stage_ = Stage::frame_header;
  std::uint64_t left_;  // bytes to skip in this stage
  std::uint8_t header_[3] = {};
  std::uint64_t header_at_ = 0;  // frame offset of the block header
  std::uint8_t have_ = 0;
  bool last_ = false;
  bool checksum_;
  bool skippable_;
  std::uint64_t skippable_size_;
};

// The decoder: ZSTD_decompressStream into the output windows, the frame's
// end and the bytes after it as libzstd reports them.
class ZstdFrameDecoder final : public FrameStreamDecoder {
 public:
  ZstdFrameDecoder(ByteSpan head, std::uint64_t frame_bytes, std::uint64_t size,
                   const ZSTD_frameHeader& header, std::size_t piece_bytes, ZSTD_DCtx* dctx)
      : FrameStreamDecoder(frame_bytes, size, head.first(header_size(header))),
        header_size_(header_size(header)),
        walker_(header_size_, header.checksumFlag != 0, header.frameType == ZSTD_skippableFrame,
                header.frameContentSize),
        window_(size, piece_bytes, 0),
        dctx_(dctx) {}
  ~ZstdFrameDecoder() override { ZSTD_freeDCtx(dctx_); }
  ZstdFrameDecoder(const ZstdFrameDecoder&) = delete;
  ZstdFrameDecoder& operator=(const ZstdFrameDecoder&) = delete;

  Status feed(ByteSpan in, std::vector<Bytes>& out) override {
    const std::uint64_t before = fed();
    if (Status s = begin_feed(in); !s) return s;
    Status s = walker_.walk(in, before);
    if (s) s = decode(in, before, out);
    window_.hand_out(out);
    add_produced(window_.handed_out() - produced());
    if (!s) return fail(std::move(s).error());
    return s;
  }

  Status finish(std::vector<Bytes>& out) override {
    if (Status s = begin_finish(); !s) return s;
    window_.hand_out(out);
    add_produced(window_.handed_out() - produced());
    if (fed() < frame_bytes())
      return fail(make_error(Errc::codec_failed,
                             "zstd frame is truncated: " + std::to_string(fed()) + " of " +
                                 std::to_string(frame_bytes()) + " bytes",
                             fed()));
    if (!complete_) return fail(make_error(Errc::codec_failed, "zstd frame is truncated", fed()));
    if (window_.written() != output_size())
      return fail(make_error(Errc::codec_failed,
                             "zstd frame decoded to " + std::to_string(window_.written()) +
                                 " bytes, its header says " + std::to_string(output_size())));
    return ok_status();
  }

 private:
  Status decode(ByteSpan in, std::uint64_t at, std::vector<Bytes>& out) {
    std::size_t pos = 0;
    while (pos < in.size()) {
      if (complete_)
        return make_error(Errc::codec_failed,
                          "zstd frame ends at byte " + std::to_string(at + pos) + " of " +
                              std::to_string(frame_bytes()) + ": bytes after it",
                          at + pos);
      // The header alone first (see above).
      std::size_t take = in.size() - pos;
      if (at + pos < header_size_)
        take = std::min<std::size_t>(take, static_cast<std::size_t>(header_size_ - (at + pos)));
      ZSTD_inBuffer input{in.data() + pos, take, 0};
      while (input.pos < input.size || !drained_) {
        const std::size_t in_before = input.pos;
        const std::uint64_t out_before = window_.written();
        if (Status s = step(input, at + pos, out); !s) return s;
        if (complete_) break;
        // (A call after a full window may find nothing left: not a stall.)
        if (input.pos == in_before && input.pos < input.size && window_.written() == out_before &&
            drained_)
          return make_error(Errc::codec_failed, "zstd frame makes no progress",
                            at + pos + input.pos);
      }
      pos += input.pos;
    }
    return ok_status();
  }

  // One ZSTD_decompressStream call into the window; drained_ tells whether
  // libzstd may still hold output for a full window.
  Status step(ZSTD_inBuffer& input, std::uint64_t at, std::vector<Bytes>& out) {
    std::uint8_t spare[1];
    ZSTD_outBuffer output;
    const bool at_end = window_.written() == output_size();
    if (at_end) {
      // All declared bytes are out: one more is an error.
      output = {spare, sizeof spare, 0};
    } else {
      if (window_.room() == 0 && !window_.next(out))
        return make_error(Errc::internal, "zstd: no output window");
      output = {window_.cursor(), window_.room(), 0};
    }
    const std::size_t ret = ZSTD_decompressStream(dctx_, &output, &input);
    if (ZSTD_isError(ret))
      return make_error(Errc::codec_failed, std::string("zstd: ") + ZSTD_getErrorName(ret));
    if (at_end && output.pos > 0)
      return make_error(Errc::codec_failed,
                        "zstd frame decodes to more than the " + std::to_string(output_size()) +
                            " bytes its header says",
                        at + input.pos);
    if (!at_end) window_.advance(output.pos);
    // With room left over, libzstd has given out all it could.
    drained_ = output.pos < output.size;
    if (ret == 0) complete_ = drained_ = true;
    return ok_status();
  }

  static std::size_t header_size(const ZSTD_frameHeader& h) {
    return h.frameType == ZSTD_frame ? h.headerSize : ZSTD_SKIPPABLEHEADERSIZE;
  }

  std::size_t header_size_;
  BlockWalker walker_;
  OutputWindow window_;
  ZSTD_DCtx* dctx_;
  bool complete_ = false;  // the frame's end was decoded
  bool drained_ = true;
};

}  // namespace

Result<std::unique_ptr<FrameStreamDecoder>> start_zstd_stream(ByteSpan head,
                                                              std::uint64_t frame_bytes,
                                                              std::uint64_t max_output,
                                                              std::size_t piece_bytes) {
  // The checks and words of zstd_decompress() in codec.cpp, in its order.
  if (frame_bytes < 4) return make_error(Errc::codec_failed, "zstd frame shorter than its magic");
  const unsigned long long declared = ZSTD_getFrameContentSize(head.data(), head.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR)
    return make_error(Errc::codec_failed, "not a zstd frame (bad magic or header)");
  const bool known = declared != ZSTD_CONTENTSIZE_UNKNOWN;
  if (known && declared > max_output) return too_large(declared, max_output, "zstd");
  if (known && declared > most_output(Codec::zstd, frame_bytes))
    return impossible_size(declared, frame_bytes, Codec::zstd);
  // Valid frames that only decompress() reads.
  if (!known)
    return make_error(
        Errc::unsupported,
        "zstd frame declares no content size: it cannot be decoded in pieces, only whole");
  ZSTD_frameHeader header{};
  if (ZSTD_getFrameHeader(&header, head.data(), head.size()) != 0)
    return make_error(
        Errc::unsupported,
        "legacy zstd frame (format v0.x): it cannot be decoded in pieces, only whole");
  if (header.frameType == ZSTD_frame && header.windowSize > (std::uint64_t{1} << kZstdWindowLogMax))
    return make_error(Errc::unsupported,
                      "zstd frame window of " + std::to_string(header.windowSize) +
                          " bytes, more than the " + std::to_string(1u << kZstdWindowLogMax) +
                          " of a decoder in pieces: it can be decoded only whole");
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (dctx == nullptr) return make_error(Errc::codec_failed, "zstd: out of memory");
  ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, kZstdWindowLogMax);
  return std::unique_ptr<FrameStreamDecoder>(
      new ZstdFrameDecoder(head, frame_bytes, declared, header, piece_bytes, dctx));
}

}  // namespace daskcaps::detail
