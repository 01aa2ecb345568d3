// FrameEncoder: one frame written from input given in pieces, for the
// streaming recoder (core/recode/internal/stream_recode.h), whose memory must follow
// a window, not the frame. The frame formats are those of core/wire/codec.h.
//
// FrameEncoder writes one frame of a size known in advance (the
// zstd header carries it, as Python's decoder needs; lz4 and snappy begin
// with it) from input given in pieces of any size, to a ByteSink. What it
// writes is byte for byte what compress() returns for the whole input
// (compress() is written with the same encoders):
//   lz4     a frame of up to kLz4ChunkBytes is one LZ4_compress_default
//           block, as python-lz4 writes it; a larger one is compressed a
//           chunk of kLz4ChunkBytes at a time, each chunk seeing the 64 KiB
//           before it (LZ4_compress_fast_continue), and the chunks' blocks
//           joined into the one block of the format (the last literals of a
//           chunk and the first of the next become one run). A literal run
//           cannot be written before its length is known: the encoder holds
//           the run in progress, and longest_literal_run() says how long
//           the longest was (maybe_compress() keeps a frame raw when a run
//           passes kLz4MaxLiteralRun, so that a frame that never ends its
//           literals costs no more than that);
//   zstd    libzstd's streaming compressor with the content size pledged,
//           on ZSTD_c_nbWorkers workers for frames of kZstdParallelBytes
//           and more when CompressOptions::zstd_workers asks for them (the
//           output does not depend on how the input is cut);
//   snappy  the varint size, then each 64 KiB of input compressed alone,
//           which is what snappy's own compressor does;
//   zlib    deflate in steps (the output does not depend on the steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/codec.h"

namespace daskcaps {

/// Where an encoder's output goes.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status put(ByteSpan bytes) = 0;
};

/// lz4 frames up to this size are one LZ4_compress_default block; larger
/// ones are compressed in chunks of it (see above).
inline constexpr std::size_t kLz4ChunkBytes = std::size_t{4} << 20;
/// The longest lz4 literal run maybe_compress() accepts in a frame it
/// compresses (see above).
inline constexpr std::uint64_t kLz4MaxLiteralRun = std::uint64_t{8} << 20;
/// zstd frames of at least this size use CompressOptions::zstd_workers.
/// Smaller ones are compressed by one thread: the engine recodes two such
/// messages at once (core/recode/engine.h), and libzstd's workers on frames
/// of a few MiB mostly wait on each other and hold job buffers of their own
/// (bench/RESULTS.md, "Figures that were in code comments", has the peak
/// RSS of both thresholds). Larger frames go through
/// `transcode` one message at a time, in place, where the workers are the
/// only parallelism.
inline constexpr std::uint64_t kZstdParallelBytes = std::uint64_t{16} << 20;

class FrameEncoder {
 public:
  struct Options {
    CompressOptions compress;
    /// lz4: once the literal run in progress passes this many bytes, stop
    /// (abandoned() becomes true, nothing more is written or held): for a
    /// caller that keeps such a frame raw anyway (maybe_compress, above).
    std::uint64_t abandon_literal_run = std::numeric_limits<std::uint64_t>::max();
  };

  /// An encoder for one frame of exactly `size` input bytes. Errors: what
  /// compress() refuses (lz4 past 2^31 - 1 bytes: Errc::unsupported), and
  /// Errc::usage for Codec::none.
  static Result<std::unique_ptr<FrameEncoder>> start(Codec c, std::uint64_t size, const Options& options);
  static Result<std::unique_ptr<FrameEncoder>> start(Codec c, std::uint64_t size) {
    return start(c, size, Options());
  }
  virtual ~FrameEncoder() = default;

  /// The next input bytes; output may be written to `out` now or held for
  /// a later call. Errc::internal past `size` bytes in all.
  virtual Status feed(ByteSpan in, ByteSink& out) = 0;
  /// After exactly `size` bytes: writes the rest of the frame.
  /// Errc::internal when fewer were fed, or after finish().
  virtual Status finish(ByteSink& out) = 0;
  /// Bytes written to the sink so far.
  std::uint64_t written() const { return written_; }
  /// The longest lz4 literal run so far, the one in progress included; 0
  /// for the other codecs.
  virtual std::uint64_t longest_literal_run() const { return 0; }
  /// lz4: the encoder gave up (Options::abandon_literal_run).
  virtual bool abandoned() const { return false; }

 protected:
  Status put(ByteSink& out, ByteSpan bytes) {
    written_ += bytes.size();
    return bytes.empty() ? ok_status() : out.put(bytes);
  }

 private:
  std::uint64_t written_ = 0;
};

/// A sink that appends to a Buffer.
class BufferSink final : public ByteSink {
 public:
  explicit BufferSink(Buffer& buffer) : buffer_(buffer) {}
  Status put(ByteSpan bytes) override {
    buffer_.append(bytes.data(), bytes.size());
    return ok_status();
  }

 private:
  Buffer& buffer_;
};

}  // namespace daskcaps
