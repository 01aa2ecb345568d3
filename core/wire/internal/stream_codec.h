// Decoding one compressed Dask frame while its bytes are still arriving
// (cut-through): the bridge forwards a large lz4 or zstd frame decompressed
// without first holding all of it, compressed or not.
//
// The frame formats are those of core/wire/codec.h:
//   "lz4"   u32 little-endian uncompressed size, then one raw LZ4 block
//   "zstd"  one zstd frame with its content size in its header
// snappy and zlib frames are not decoded in pieces (supports() is false):
// decompress() reads them whole.
//
// Use: start() reads the frame's first header_bytes() bytes and applies the
// checks of decompress() to the size the frame declares; feed() then takes
// the frame's bytes in order from its byte 0 (the head given to start()
// included), in pieces of any size, and appends the output decoded so far;
// finish() says whether the frame was whole and exactly as declared.
//
//   auto d = FrameStreamDecoder::start(Codec::lz4, head, frame_bytes, limit);
//   if (!d) return d.error();
//   std::vector<Bytes> out;
//   for (ByteSpan piece : pieces) {           // all frame_bytes of them
//     if (auto s = (*d)->feed(piece, out); !s) return s.error();
//     forward(out);                           // and out.clear()
//   }
//   if (auto s = (*d)->finish(out); !s) return s.error();
//
// Output pieces are immutable Bytes that share the decoder's output window:
// each stays valid after later feed() calls and after the decoder is gone.
// A failed frame may have handed out pieces already: they are the frame's
// first bytes as far as it decoded, and the caller decides what that means
// (the bridge closes the connection).
//
// Memory. The decoder fills windows of Options::piece_bytes (never more
// than the frame has left to make) and hands each window's new bytes out
// as it goes. It keeps:
//   lz4   one window plus the last 64 KiB of output before it (LZ4 matches
//         reach back at most 65535 bytes; each new window starts with a copy
//         of them);
//   zstd  one window, and libzstd's context with the frame's window (at
//         most 2^27 bytes, and never more than the declared size) plus two
//         blocks of 128 KiB.
// What one feed() makes is handed out in that call: at most 255 times the
// piece for lz4, and for zstd up to what the frame declares (a zstd block of
// a few bytes can make 128 KiB); callers that bound their memory feed
// bounded pieces and drop the output before the next one.
//
// Errors: start() gives the Errc and message that decompress() gives for
// the same frame (Errc::limit_exceeded over max_output, Errc::codec_failed
// for a size the codec cannot make from the frame's bytes or an unreadable
// header), and Errc::unsupported for a valid frame that only decompress()
// reads: a zstd frame without a content size, one whose window is larger
// than 2^27 bytes, a legacy (v0.x) zstd frame. feed() and finish() fail with
// Errc::codec_failed for corrupt data, with the offset in the frame (from
// its byte 0) where it is known, and Errc::internal for a caller's mistake
// (more than frame_bytes fed, bytes other than the head given to start(),
// a call after finish()). An error is sticky: every later call returns it.
//
// Which frames decode. A frame that decompress() decodes, with the same
// max_output, decodes here to the same bytes, whatever the pieces, and one
// that decompress() refuses is refused here, except for these (all frames
// that no Dask or python-lz4/zstandard writes, refused here on purpose):
//   - an lz4 match offset of 0, which the format calls invalid and liblz4
//     1.9.4 decodes as zeros: here Errc::codec_failed, "... offset 0 ...";
//   - zstd bytes after the end of the first frame: decompress() decodes
//     what follows as more frames (skippable and empty frames add nothing),
//     here they are Errc::codec_failed;
//   - a zstd block larger than the frame's Block_Maximum_Size (its window,
//     at most 128 KiB), compressed or decoded: libzstd 1.5.4's one-pass
//     decoder, which decompress() uses when it has room for the whole
//     output, does not check it; its streaming decoder, which this one
//     uses, does (as decompress() does for frames it decodes in steps).
// For zstd the other way round, a compressed block of 0 bytes, which
// libzstd's streaming decoder reads as an empty block, is refused here as
// its one-pass decoder refuses it. For lz4 this decoder follows liblz4
// 1.9.4's LZ4_decompress_safe to the byte: besides the format's rules (the
// last 5 output bytes are literals, the last match starts at least 12 bytes
// before the end) it refuses what liblz4 refuses, such as a literal run
// that ends within 12 bytes of the output's end or 8 of the block's without
// ending the block, and accepts what liblz4 accepts, such as a short match
// that liblz4's shortcut copies into the last 5 bytes
// (core/wire/detail/lz4_block_stream.h; tests/fuzz/fuzz_stream_codec.cpp
// checks the whole rule against decompress()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/codec.h"

namespace daskcaps {

class FrameStreamDecoder {
 public:
  struct Options {
    /// Size of the output windows handed out (the largest output piece); at
    /// least 1. Well above 64 KiB, an lz4 window's copy of the last 64 KiB
    /// costs little.
    std::size_t piece_bytes = std::size_t{1} << 20;
  };

  /// lz4 and zstd; false for the others.
  static bool supports(Codec c);

  /// Bytes of the frame's start that start() needs: lz4 4 (the size
  /// prefix), zstd 18 (the largest frame header, ZSTD_FRAMEHEADERSIZE_MAX),
  /// both capped at frame_bytes; 0 for a codec that supports() refuses.
  static std::uint64_t header_bytes(Codec c, std::uint64_t frame_bytes);

  /// Checks the size a frame of frame_bytes bytes declares in `head` (its
  /// first bytes, at least header_bytes() of them) as decompress() does,
  /// and returns a decoder for it. Fails with decompress()'s error for the
  /// same frame (see the top of this file): more than max_output is
  /// Errc::limit_exceeded; more than the codec can make from frame_bytes
  /// (lz4 255:1, zstd 128 KiB per 4 bytes), an lz4 prefix negative as int32,
  /// a frame shorter than its header or not zstd is Errc::codec_failed. A
  /// zstd frame without a content size, with a window over 2^27 bytes or in
  /// a legacy format is Errc::unsupported, as are codecs other than lz4 and
  /// zstd. A head shorter than header_bytes() or longer than frame_bytes,
  /// or a piece_bytes of 0, is Errc::internal.
  static Result<std::unique_ptr<FrameStreamDecoder>> start(Codec c, ByteSpan head,
                                                           std::uint64_t frame_bytes,
                                                           std::uint64_t max_output,
                                                           const Options& options);
  /// start() with the default Options. (An overload, not `= {}`: GCC 12
  /// cannot take the default member initializers of a nested struct in a
  /// default argument of its own class.)
  static Result<std::unique_ptr<FrameStreamDecoder>> start(Codec c, ByteSpan head,
                                                           std::uint64_t frame_bytes,
                                                           std::uint64_t max_output) {
    return start(c, head, frame_bytes, max_output, Options());
  }

  virtual ~FrameStreamDecoder();

  /// The decoded size the frame declares.
  std::uint64_t output_size() const { return output_size_; }
  /// Output bytes handed out so far.
  std::uint64_t produced() const { return produced_; }

  /// The next compressed bytes of the frame, in order from its first byte
  /// (the head given to start() is fed again here: feed() sees the whole
  /// frame, byte 0 first); an empty piece is allowed. Appends the output
  /// they complete to `out`: non-empty Bytes, in order. Fails with
  /// Errc::codec_failed for output beyond output_size(), a corrupt block,
  /// an lz4 match offset of 0 or one reaching before the frame's first
  /// output byte; with Errc::internal when the bytes fed in all would
  /// exceed frame_bytes or differ from the head given to start().
  virtual Status feed(ByteSpan in, std::vector<Bytes>& out) = 0;

  /// After the frame's last byte was fed: appends what is left and fails
  /// with Errc::codec_failed unless all frame_bytes were fed, exactly
  /// output_size() bytes came out and the input ended where a block ends
  /// (lz4: after the literal run that ends the block; zstd: the frame
  /// complete, no bytes after it). Only a call after finish() is
  /// Errc::internal.
  virtual Status finish(std::vector<Bytes>& out) = 0;

 protected:
  FrameStreamDecoder(std::uint64_t frame_bytes, std::uint64_t output_size, ByteSpan head);

  /// The checks every feed() starts with: the decoder has not failed or
  /// finished, `in` fits in what is left of the frame and its bytes among
  /// the head's are the head's. Then counts `in` as fed.
  Status begin_feed(ByteSpan in);
  /// The check finish() starts with; marks the decoder finished.
  Status begin_finish();
  /// Records an error (every later call returns it) and returns it.
  Error fail(Error e);
  /// Counts output handed out.
  void add_produced(std::uint64_t n) { produced_ += n; }

  std::uint64_t frame_bytes() const { return frame_bytes_; }
  /// Bytes fed so far, this call's included once begin_feed() passed.
  std::uint64_t fed() const { return fed_; }

 private:
  std::uint64_t frame_bytes_;
  std::uint64_t output_size_;
  std::uint64_t produced_ = 0;
  std::uint64_t fed_ = 0;
  std::vector<std::uint8_t> head_;  // the head start() read, to compare with what is fed
  std::unique_ptr<Error> error_;    // sticky
  bool finished_ = false;
};

}  // namespace daskcaps
