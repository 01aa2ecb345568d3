// fuzz_stream_codec: the decoder of one lz4 or zstd frame in pieces
// (core/wire/internal/stream_codec.h) against decompress() (core/wire/codec.h), the
// whole-frame decoder it must agree with.
//
// Input: byte 0: bit 0 picks the codec (lz4, zstd); bits 1-2 the size of
// the output windows (1 MiB, 64 KiB, 4099 and 1021 bytes: lz4 windows below
// its 64 KiB of history); bits 3-7 seed the sizes of the pieces fed
// (fuzzsupport::Chunker: bits 3-4 pick the largest, 1, 7, 64 or 4096
// bytes). The rest is one frame.
//
// Properties, with a 1 MiB max_output for both:
//  1. start() fails exactly when decompress() fails before decoding, with
//     the same Errc and message; or with Errc::unsupported, for zstd frames
//     only decompress() reads (no content size, a window over 2^27, legacy);
//  2. otherwise the frame decodes in pieces exactly when decompress()
//     decodes it, to the same bytes; the pieces are non-empty and
//     produced() counts them, up to output_size(). The exceptions the
//     header names, each checked on its own terms: an lz4 match offset of
//     0 (liblz4 writes zeros, the decoder refuses it), zstd bytes after the
//     first frame, and zstd frames that libzstd's own streaming decoder
//     refuses (its one-pass decoder, which decompress() uses, does not check
//     Block_Maximum_Size). Where the decoder fails and decompress() does
//     not, what it handed out is the start of decompress()'s output.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "daskcaps/wire/codec.h"
#include "core/wire/internal/stream_codec.h"
#include "fuzz_common.h"

using namespace daskcaps;

namespace {

constexpr std::uint64_t kMaxOut = std::uint64_t{1} << 20;
constexpr std::size_t kWindows[4] = {std::size_t{1} << 20, std::size_t{64} << 10, 4099, 1021};

// Bytes follow the first frame (findFrameCompressedSize reads its block
// headers): decompress() decodes them as further frames, the decoder
// refuses them.
bool zstd_bytes_after_frame(ByteSpan frame) {
  const std::size_t n = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  return !ZSTD_isError(n) && n < frame.size();
}

// libzstd's streaming decoder on the whole frame: the header alone first
// (given all of it with room for all of the output, ZSTD_decompressStream
// would take its one-pass path), then the rest at once.
bool zstd_streaming_decodes(ByteSpan frame, std::uint64_t declared) {
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  FUZZ_CHECK(dctx != nullptr);
  ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, 27);
  Buffer out = Buffer::uninitialised(static_cast<std::size_t>(declared) + 1);
  ZSTD_frameHeader header{};
  FUZZ_CHECK(ZSTD_getFrameHeader(&header, frame.data(), frame.size()) == 0);
  const std::size_t hsize =
      header.frameType == ZSTD_frame ? header.headerSize : ZSTD_SKIPPABLEHEADERSIZE;
  ZSTD_outBuffer output{out.data(), out.size(), 0};
  ZSTD_inBuffer input{frame.data(), hsize, 0};
  bool ok = !ZSTD_isError(ZSTD_decompressStream(dctx, &output, &input));
  input.size = frame.size();
  while (ok) {
    const std::size_t before = input.pos + output.pos;
    const std::size_t ret = ZSTD_decompressStream(dctx, &output, &input);
    if (ZSTD_isError(ret))
      ok = false;
    else if (ret == 0)
      break;
    else if (input.pos + output.pos == before)
      ok = false;  // truncated
  }
  ZSTD_freeDCtx(dctx);
  return ok && output.pos == declared;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzzsupport::Control ctl(data, size, 1);
  const Codec c = (ctl.byte(0) & 1) ? Codec::zstd : Codec::lz4;
  FrameStreamDecoder::Options options;
  options.piece_bytes = kWindows[(ctl.byte(0) >> 1) & 3];
  fuzzsupport::Chunker chunks(static_cast<std::uint8_t>(ctl.byte(0) >> 3));
  const ByteSpan frame = ctl.rest();

  auto whole = decompress(c, frame, kMaxOut);
  const std::uint64_t head = FrameStreamDecoder::header_bytes(c, frame.size());
  auto d = FrameStreamDecoder::start(c, frame.first(static_cast<std::size_t>(head)), frame.size(),
                                     kMaxOut, options);
  // 1.
  if (!d) {
    (void)d.error().message();
    if (d.error().code == Errc::unsupported) {
      FUZZ_CHECK(c == Codec::zstd);
      return 0;
    }
    FUZZ_CHECK(!whole.ok());
    FUZZ_CHECK(d.error().code == whole.error().code);
    FUZZ_CHECK(d.error().what == whole.error().what);
    return 0;
  }
  FrameStreamDecoder& dec = **d;
  FUZZ_CHECK(dec.output_size() <= kMaxOut);

  // 2.
  Buffer got;
  std::vector<Bytes> out;
  auto take = [&] {
    for (const Bytes& b : out) {
      FUZZ_CHECK(!b.empty());
      FUZZ_CHECK(b.size() <= options.piece_bytes);
      got.append(b);
    }
    out.clear();
    FUZZ_CHECK(dec.produced() == got.size());
    FUZZ_CHECK(got.size() <= dec.output_size());
  };
  Status status;
  for (std::size_t at = 0; at < frame.size() && status.ok();) {
    const std::size_t n = std::min(chunks.next(), frame.size() - at);
    status = dec.feed(frame.subspan(at, n), out);
    take();
    at += n;
  }
  if (status.ok()) {
    status = dec.finish(out);
    take();
  }
  if (status.ok()) {
    FUZZ_CHECK(got.size() == dec.output_size());
    FUZZ_CHECK(whole.ok());
    FUZZ_CHECK(got == *whole);
    return 0;
  }
  (void)status.error().message();
  FUZZ_CHECK(status.error().code == Errc::codec_failed);
  if (!whole.ok()) return 0;
  // Refused here, decoded whole: one of the named differences.
  FUZZ_CHECK(got.size() <= whole->size() && std::equal(got.begin(), got.end(), whole->begin()));
  if (c == Codec::lz4) {
    FUZZ_CHECK(status.error().what.find("offset 0 is invalid") != std::string::npos);
  } else {
    FUZZ_CHECK(zstd_bytes_after_frame(frame) || !zstd_streaming_decodes(frame, dec.output_size()));
  }
  return 0;
}
