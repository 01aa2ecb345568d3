// Frames decoded and encoded in windows: what `inspect` and `transcode` use
// so that their memory follows a window, never a frame's decoded size.
// The frame formats are those of core/wire/codec.h.
//
// Decoding. decode_in_windows() reads a frame through a FrameInput
// (core/wire/internal/frame_input.h) in pieces of Options::input_bytes and hands
// its output to a callback in windows of at most Options::window_bytes, in
// order; it returns the decoded size. It decodes what decompress() decodes
// with the same max_output, to the same bytes, and refuses what it refuses
// with the same Errc and words (the checks of a frame's declared size come
// first, in decompress()'s order), but for these:
//   lz4     a block is decoded by detail::Lz4BlockStream, which makes
//           liblz4 1.9.4's decisions except that it refuses a match offset
//           of 0 (liblz4 copies the output onto itself: bytes that depend on
//           what the buffer held). Every refusal reads "lz4 block is
//           corrupt", as decompress() says, or "lz4 block decoded to N
//           bytes, its prefix says M".
//   zstd    libzstd's streaming decoder, never its one-pass path (which
//           decompress() takes when it has room for the whole output): a
//           compressed block of 0 bytes is read as an empty block, a block
//           larger than the frame's Block_Maximum_Size is refused. A frame
//           whose window is larger than 2^27 bytes (libzstd's streaming
//           default) is decoded whole by decompress(), as decompress() does
//           (its memory is then the declared size), and handed out in
//           windows.
//   snappy  the block is first checked by snappy itself (IsValidCompressed,
//           without output), then decoded here keeping the last 64 KiB of
//           output: a valid block whose copies reach further back (no
//           snappy encoder writes one: it compresses 64 KiB at a time) is
//           Errc::unsupported, and the caller decodes it whole.
//   zlib    inflate in steps, as decompress() does.
// The callback may stop the decoding by returning an error, which is
// returned as it is. Memory: one input piece, one output window (lz4 and
// zstd: two, the one before being used again once its pieces are gone), and the
// codec's state (lz4: 64 KiB of history; zstd: its window, at most 2^27
// bytes and never more than the frame declares; zlib: 32 KiB).
//
// measure_frame() is decode_in_windows() without output: the decoded size
// or the error, for `inspect`. snappy frames are not decoded at all: snappy
// checks them (IsValidCompressed) and their declared size is the answer.
//
// Encoding in pieces is core/wire/internal/frame_encoder.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/codec.h"
#include "core/wire/internal/frame_input.h"

namespace daskcaps {

/// Where the decoded windows go. Return an error to stop.
using WindowFn = std::function<Status(ByteSpan window)>;

struct WindowOptions {
  /// Largest output window (below glibc's mmap threshold: a window is
  /// allocated once per frame and reused).
  std::size_t window_bytes = std::size_t{448} << 10;
  /// Largest piece read from the input at a time.
  std::size_t input_bytes = std::size_t{256} << 10;
};

/// Decodes one frame of codec `c` in windows (see above). Returns the
/// decoded size; errors as decompress() gives them (no offset: callers add
/// the frame's), Errc::unsupported for a snappy block decoded only whole,
/// the FrameInput's read errors, and the callback's.
Result<std::uint64_t> decode_in_windows(Codec c, FrameInput& input, std::uint64_t max_output, const WindowFn& fn,
                                        const WindowOptions& options = WindowOptions());

/// The decoded size of a frame, or the error decompress() gives for it
/// (see above); nothing of the output is kept.
Result<std::uint64_t> measure_frame(Codec c, FrameInput& input, std::uint64_t max_output);

}  // namespace daskcaps
