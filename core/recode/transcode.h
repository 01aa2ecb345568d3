// Recoding Dask messages for a recipient (docs/cli.md §5): codec,
// pickle protocol and GPU -> CPU layout, one message at a time, without
// executing any pickle.
//
// Per sub-object (core/wire/message.h):
//  * layout cpu: GPU array headers become NumPy headers (core/recode/internal/gpu_layout.h);
//    what cannot be converted is an error naming it, or is left as it is
//    and reported with keep_unconvertible.
//  * pickle protocol P: every pickle is re-emitted for P by the pickle
//    engine: the `pickle` family (frame 0 plus out-of-band buffers, with
//    `writeable`), numpy object arrays ({"pickle": true}), pickled numpy
//    dtypes, `type-serialized` classes, `__Pickled__` objects, and the
//    exceptions and tracebacks of Dask's error messages, pickles inside
//    `bytes` found by Dask's conventions (core/recode/internal/error_pickles.h;
//    other bytes are data and pass untouched). Below 5, out-of-band buffers
//    are inlined and their frames removed; `writeable`, the split layout
//    and the compression list are rebuilt.
//  * codec: every frame is decompressed and compressed again with Dask's
//    maybe_compress rule for the target codec (small or incompressible
//    frames stay raw), shard by shard, so split layouts stay valid; where
//    the codec alone changes, a large frame goes from decoder to encoder
//    window by window (TranscodeOptions::stream_frame_bytes). Frames
//    marked false (`cuda` family) are never compressed, as in Dask.
//    `__Pickled__` buffers are always written raw: Dask 2022.12 does not
//    decompress them on receipt (docs/protocol.md §3.3).
// Frames of objects nothing changes are passed through byte for byte, and
// their sub-headers too: a pickle that the engine writes back as it was
// (CPython's pickles at their own protocol), or a raw frame that stays raw
// under Dask's rule, is no change. A sub-header gains or changes a key only
// for a frame or pickle that changed, and then only the keys Dask reads
// differently: split keys when a frame is split (or the header had them),
// "compression" when a frame is compressed (or the header had it),
// "writeable" when the header had it. A message whose frames and pickles all
// stay is sent as it came, byte for byte.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daskcaps/wire/codec.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

/// The link's codec per raw frame (core/recode/internal/frame_codec.h:
/// the bridge's legs set one; a program of the library does not).
class FrameCodecPolicy;

struct TranscodeOptions {
  std::optional<Codec> codec;             // nullopt: keep every frame's codec
  /// With `codec`: codecs the receiver reads as they are. A frame already in
  /// one of them (or raw) keeps its bytes; only the others become `codec`.
  /// Empty: every frame becomes `codec`.
  std::vector<Codec> accept_codecs;
  std::optional<int> pickle_protocol;     // nullopt: keep every pickle
  bool inline_buffers = false;            // at protocol 5, inline out-of-band buffers too
  bool layout_cpu = false;                // GPU arrays become NumPy arrays
  bool keep_unconvertible = false;        // leave what cannot become CPU data, report it
  CompressOptions compress;               // zstd level, ...
  MaybeCompressRules rules;               // Dask's maybe_compress thresholds
  std::uint64_t shard_bytes = std::uint64_t{64} << 20;  // distributed.comm.shard
  /// Frames whose codec alone changes and that declare at least this many
  /// decoded bytes (or do not say) are recoded window by window
  /// (core/recode/internal/stream_recode.h recode_frame), never held decoded; the
  /// same bytes come out. The maximum: every frame whole.
  std::uint64_t stream_frame_bytes = std::uint64_t{1} << 20;
  Limits limits;
  /// The codec of each raw frame that the rules above keep raw (every raw
  /// frame without `codec`), decided per frame by the link it goes out on
  /// (core/recode/internal/frame_codec.h; the bridge's legs). Null: kept raw.
  /// transcode_message() asks it; transcode_message_in_place() does not
  /// apply while one is set (in_place_applies()).
  std::shared_ptr<FrameCodecPolicy> frame_codec;

  /// True when the options change nothing (every frame passes through).
  bool is_identity() const {
    return !codec && !pickle_protocol && !inline_buffers && !layout_cpu && !frame_codec;
  }
};

/// The one check of TranscodeOptions, for every caller (the command line,
/// the Python module, the bridge): validate(compress), a pickle protocol
/// of 0 to 5, a shard size above 0. Errc::usage naming the value.
Status validate(const TranscodeOptions& options);

/// What transcoding one message did.
struct TranscodeReport {
  std::size_t frames_recompressed = 0;
  std::size_t pickles_recoded = 0;
  std::size_t buffers_inlined = 0;
  std::size_t arrays_converted = 0;
  /// Of frames_recompressed, raw frames compressed by frame_codec's choice.
  std::size_t frames_link_coded = 0;
  std::vector<std::string> unconvertible;  // "data: rmm.DeviceBuffer: <reason>"
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;

  TranscodeReport& operator+=(const TranscodeReport& other);
};

/// Recodes one parsed message and returns its new wire frames. A handshake
/// message is rewritten to advertise the target codec and protocol.
/// Errors name the object ("data: ...") and carry Errc::unsupported for
/// what cannot be expressed, codec/pickle errors for bad input.
Result<std::vector<Bytes>> transcode_message(const Message& message, const TranscodeOptions& options,
                                             TranscodeReport& report);
/// The same, recoding the message's objects in place (no copy of it).
Result<std::vector<Bytes>> transcode_message(Message&& message, const TranscodeOptions& options,
                                             TranscodeReport& report);

// The streaming driver over many messages is core/recode/engine.h.

}  // namespace daskcaps
