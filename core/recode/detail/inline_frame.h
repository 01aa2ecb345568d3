// The frames made of pieces of transcode_message_in_place()
// (core/recode/message_in_place.cpp) for an object whose pickle inlines its
// large out-of-band buffers (ObjectTranscoder::inlines()): the plan (the
// new pickle with a gap for each large buffer, and the buffers' frames that
// fill them), the new frame's bytes run from the pickle's parts and the
// buffers decoded between them, and a frame so run recoded as
// transcode_message's resplit compresses it, window by window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/recode/detail/object_transcoder.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/pickle/pickle.h"
#include "core/recode/internal/stream_recode.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"
#include "core/wire/internal/window_codec.h"

// Hidden, declarations included: message_in_place.cpp (a public source)
// instantiates Result<std::optional<InlinePlan>>, and the type information
// of that instance would otherwise leave libdaskcaps.so under the daskcaps
// namespace (tests/cli/test_install.py refuses any detail/ internal there).
#pragma GCC visibility push(hidden)

namespace daskcaps::detail {

// Runs the decoded bytes of a frame through `fn`, in order, in windows.
using DecodedRun = std::function<Status(const WindowFn& fn)>;

// What compress_one() (transcode_message's resplit) gives for a raw frame of
// `size` bytes that `run` produces: raw for codec none, else Dask's
// maybe_compress rule, judged as recode_one() judges a compressed input
// (the sample kept as the windows pass, the whole at its end, written again
// raw when either fails). The same bytes as maybe_compress() on the whole.
Result<CompressionValue> recode_decoded(const DecodedRun& run, std::uint64_t size, Codec target,
                                        const TranscodeOptions& opt, FrameSink& out);

// One original frame of an object (the shards the split keys join), its
// wire frames decoded in turn.
struct Joined {
  std::vector<std::size_t> frames;        // absolute frame indices
  std::vector<CompressionValue> entries;  // their compression entries
  std::vector<std::uint64_t> sizes;       // their decoded sizes
  std::vector<std::string> labels;        // their SubObject::frame_label(), for errors
  std::uint64_t size = 0;
};

// An object whose pickle inlines its large buffers, streamed: the new
// pickle with gaps, and the buffers that fill them.
struct InlinePlan {
  Bytes pickle;
  std::vector<pickle::BufferGap> gaps;
  std::vector<Joined> buffers;  // buffer k: the object's original frame k + 1
  Codec codec = Codec::none;
  std::uint64_t size = 0;  // the new frame's size
  std::vector<std::uint64_t> shards;  // its shards' sizes
  msgpack::Value header;   // the sub-header before its split keys and compression list
};

// Bytes [from, from + length) of the plan's new frame, to `fn`.
Status run_inlined(const Message& in, const InlinePlan& p, std::uint64_t from, std::uint64_t length,
                   const TranscodeOptions& opt, const WindowFn& fn);

// The plan for an object that inlines() its buffers, when they are large
// enough to stream (TranscodeOptions::stream_frame_bytes in all) and every
// frame's decoded size is known; nullopt otherwise (recoded whole). Recodes
// the object's pickle and sub-header (ObjectTranscoder::recode_inlining).
Result<std::optional<InlinePlan>> plan_inline(const Message& in, SubObject& obj, ObjectTranscoder& objects,
                                              const TranscodeOptions& opt);

}  // namespace daskcaps::detail

#pragma GCC visibility pop
