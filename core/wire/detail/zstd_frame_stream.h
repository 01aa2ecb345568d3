// The zstd decoder of core/wire/internal/stream_codec.h: libzstd's streaming decoder
// (ZSTD_decompressStream), which keeps the frame's window itself, writing
// into output windows of piece_bytes (detail/output_window.h).
//
// Two things make it decode exactly the frames decompress() decodes (in
// one pass, when it has room for the whole output), but for the
// differences stream_codec.h names:
//   - libzstd's first call gets the frame header alone. Given a whole frame
//     and room for all of its output, ZSTD_decompressStream would take its
//     one-pass path, which checks less (Block_Maximum_Size): the pieces
//     would decide which frames decode;
//   - a compressed block of 0 bytes is refused, as the one-pass decoder
//     refuses it (the streaming one reads it as an empty block): the
//     block headers are followed as the bytes go by.
// The context is the decoder's own, freed with it; its window is at most
// 2^27 bytes (ZSTD_d_windowLogMax 27, libzstd's default for streaming).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "core/wire/internal/stream_codec.h"

namespace daskcaps::detail {

/// FrameStreamDecoder::start() for Codec::zstd, after the common checks.
Result<std::unique_ptr<FrameStreamDecoder>> start_zstd_stream(ByteSpan head,
                                                              std::uint64_t frame_bytes,
                                                              std::uint64_t max_output,
                                                              std::size_t piece_bytes);

}  // namespace daskcaps::detail
