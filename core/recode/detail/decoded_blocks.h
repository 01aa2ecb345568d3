// Frames decoded to raw into blocks used again (DecodedBlocks in
// core/recode/detail/decoded_blocks.cpp), for the object recoder of
// core/recode/detail/object_recoder.cpp: a fresh large block costs a page fault and a
// zeroed page for every 4 KiB the decoder writes (bench/RESULTS.md,
// "Transcode in windows", counts them); a block used again costs neither.
// The blocks in existence (held and kept) are never more than were held at
// once.
#pragma once

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/handshake.h"

namespace daskcaps::detail {

/// decompress_frame() (core/wire/internal/serialized.h) for a frame that is written
/// raw: an lz4 or snappy frame that declares 1 MiB or more decoded goes
/// into a block used again, owned by the Bytes returned (given back when the
/// last slice of it goes). The same bytes and the same errors.
Result<Bytes> decompress_to_raw(const CompressionValue& entry, const Bytes& frame, const Limits& limits);

}  // namespace daskcaps::detail
