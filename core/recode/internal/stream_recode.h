// Recoding frame by frame, window by window, where only codecs change: the
// streaming half of `transcode` (core/recode/transcode.h is the whole
// message; core/recode/internal/cut_through.h the bridge's case of the same idea).
//
// One frame. recode_frame() turns one wire frame, read through a
// FrameInput (in memory, or in a file: core/wire/internal/frame_store.h), into the
// frame transcode_message() writes for it, to a FrameSink, without ever
// holding the frame decoded: it is decoded in windows
// (core/wire/internal/window_codec.h) that go straight to an encoder
// (core/wire/internal/frame_encoder.h). Dask's maybe_compress rule (core/wire/codec.h)
// decides on the whole frame, which is only known at its end:
//   - a frame outside [min_size, max_size] (its decoded size is known from
//     its header, or, for zlib and zstd frames that declare none, from a
//     first pass that only measures it) is written raw;
//   - a raw input frame is sampled where it lies, before anything is
//     written; one whose sample does not compress is copied as it is;
//   - any other frame is compressed as it is decoded while the sample
//     (the same evenly spread slices as maybe_compress takes) is kept on
//     the way; at its end the sample and the whole are judged, and a frame
//     that fails either (or an lz4 frame whose literal run passed
//     kLz4MaxLiteralRun) is written again, raw: the sink forgets what it
//     had (FrameSink::restart) and the input is decoded a second time.
// What comes out is byte for byte what decompress() and maybe_compress()
// give for the whole frame (tests/core/recode/stream_recode_test.cpp), and
// the errors are decompress()'s (core/wire/internal/window_codec.h names the few
// frames no Dask writes on which libzstd's or liblz4's paths differ).
//
// One message, in place. transcode_message_in_place() writes the message
// transcode_message() would return to a MessageSink that takes writes at
// any offset (the output file), with any codec, pickle protocol and layout
// options. Each object is recoded by transcode_message's own code
// (ObjectTranscoder, core/recode/detail/object_transcoder.h), in one of two ways:
//   - an object whose data frames change only by their codec (a GPU layout
//     and the header pickles change its sub-header alone): its sub-header
//     first, then its frames one at a time, window by window, as below;
//   - an object whose own data pickle inlines its out-of-band buffers
//     (ObjectTranscoder::inlines(): protocol 3 and 4, or 5 with
//     inline_buffers), when they come to TranscodeOptions::stream_frame_bytes
//     or more: its pickle is recoded in memory with each large buffer left
//     as a gap (pickle::RecodeOptions::gap_bytes), and the new frame (the
//     pickle's parts, each buffer decoded from its frames between them) is
//     cut into shards and compressed as transcode_message cuts it, shard
//     by shard, window by window;
//   - any other object whose data pickles change (collections, an error's
//     exception, __Pickled__, small buffers): whole, in memory, before
//     anything is written.
// Frame counts may change (inlined buffers, new shards), so every object is
// planned before anything is written: frame 0 depends on them.
// Then frame 0, each object's frames as they are recoded, its sub-header
// once its frames' "compression" entries are known, and the prelude with
// every frame's length last. A streamed object's data frames are written
// after room for its sub-header as it would be if every recoded frame
// compresses; when one is written raw the sub-header is shorter (nil
// instead of the codec's name), and the object's frames move back by the
// difference (MessageSink::move). Memory: a window, the encoder's state and
// the input pieces, whatever the streamed objects decode to, and the
// objects recoded whole.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/handshake.h"
#include "core/wire/internal/frame_encoder.h"
#include "core/wire/internal/frame_input.h"
#include "daskcaps/wire/message.h"
#include "core/wire/internal/message_sink.h"

namespace daskcaps {

/// Where one recoded frame goes.
class FrameSink : public ByteSink {
 public:
  /// Forgets what was put: the frame is written again from its start.
  virtual Status restart() = 0;
  /// How the frame announced by expect() is about to be written.
  enum class Expect {
    raw,         ///< raw: all of the bytes expected are written
    compressed,  ///< compressed: a part of them, unless it is written raw after all
  };
  /// The frame will take at most this many bytes (its decoded size: what
  /// it is written raw, and more than it is compressed).
  virtual void expect(std::uint64_t, Expect) {}
  /// What was put, when the sink holds it in memory (then recode_frame
  /// reads its input once, and a frame written raw after all is decoded
  /// from the sink's bytes: FrameInput::read_once); null otherwise.
  virtual const Buffer* held() const { return nullptr; }
};

/// A FrameSink into memory.
class BufferFrameSink final : public FrameSink {
 public:
  Status put(ByteSpan bytes) override {
    buffer_.append(bytes.data(), bytes.size());
    return ok_status();
  }
  Status restart() override {
    buffer_.clear();
    return ok_status();
  }
  /// Room for the frame raw: in huge pages when it will all be written,
  /// in 4 KiB pages when its compressed form fills a part of it
  /// (Buffer::reserve_sparse).
  void expect(std::uint64_t n, Expect how) override {
    const auto bytes = static_cast<std::size_t>(n);
    if (how == Expect::compressed) {
      buffer_.reserve_sparse(bytes);
    } else if (bytes > buffer_.capacity()) {
      buffer_.reserve(bytes);
    } else {
      advise_huge_pages(buffer_.data(), buffer_.capacity());  // raw after all, in room reserved sparse
    }
  }
  const Buffer* held() const override { return &buffer_; }
  Buffer& buffer() { return buffer_; }

 private:
  Buffer buffer_;
};

/// Recodes one wire frame whose compression entry is `entry` for the
/// target codec (frame_recode_for() said recode), to `out`; returns the
/// frame's new entry (the target's name or nil). Counts the frame in
/// report.frames_recompressed as transcode_message() does (a frame that
/// changes; a raw frame that stays raw is not counted). Errors:
/// decompress()'s for the input (Errc::codec_failed, limit_exceeded), the
/// sink's, Errc::unsupported for a snappy frame decoded only whole
/// (core/wire/internal/window_codec.h: the caller recodes it whole).
Result<CompressionValue> recode_frame(FrameInput& input, const CompressionValue& entry, Codec target,
                                      const TranscodeOptions& options, FrameSink& out, TranscodeReport& report);

/// True when transcode_message_in_place() applies: the message is no
/// handshake (rewritten whole), has no frame that no object claims
/// before its last object's frames, and no TranscodeOptions::frame_codec
/// is set (a codec per frame is transcode_message()'s alone).
bool in_place_applies(const Message& message, const TranscodeOptions& options);

/// Writes what transcode_message() returns for `message` (see above) to
/// `out`, prelude first, and returns its size on the wire. The frames may be
/// in memory or stored (Message::store). Errors as transcode_message()'s
/// (with the same contexts: the object's path, the frame's label), and the
/// sink's; after an error the sink holds part of a message. Errc::usage
/// when in_place_applies() is false.
Result<std::uint64_t> transcode_message_in_place(const Message& message, const TranscodeOptions& options,
                                                 TranscodeReport& report, MessageSink& out);

}  // namespace daskcaps
