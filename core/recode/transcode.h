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

#include "daskcaps/recode/frame_codec.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/compression_value.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/base/result.h"
#include "daskcaps/pickle/pickle.h"

namespace daskcaps {

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
  /// (core/recode/frame_codec.h; the bridge's legs). Null: kept raw.
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

/// What a change of codec does to one wire frame of a `__Serialized__`
/// object whose compression entry is `entry` (transcode_message's rule):
/// keep its bytes (never compressed, already in the target or, with
/// accept_codecs, in a codec the receiver reads, or raw), or recode it
/// (decompress, then Dask's maybe_compress for the target). Errors: an
/// entry naming a codec this build lacks (Errc::unknown_codec).
enum class FrameRecode : std::uint8_t { keep, recode };
Result<FrameRecode> frame_recode_for(const CompressionValue& entry, Codec target, const TranscodeOptions& options);

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

/// The split keys and "compression" list of a sub-header whose original
/// frames were cut into shards of TranscodeOptions::shard_bytes (`shards`
/// per original frame, `entries` one per shard), as transcode_message()
/// writes them: split keys when a frame is split (or the header had
/// them), "compression" when a shard is compressed (or the header had it).
void set_resplit_keys(SubObject& obj, std::span<const std::uint64_t> shards, std::span<const CompressionValue> entries);

/// The objects of one message recoded one at a time, each as
/// transcode_message() recodes it, for a caller that writes a message
/// object by object (core/recode/internal/stream_recode.h
/// transcode_message_in_place): the same code, so the same bytes. Holds
/// what transcode_message() knows of the whole message (which objects
/// hold the pickles of Dask's error dicts).
class ObjectTranscoder {
 public:
  /// `message` is only read here (frame 0's error dicts); it need not
  /// outlive the transcoder. `report` must.
  ObjectTranscoder(const Message& message, const TranscodeOptions& options, TranscodeReport& report);
  ~ObjectTranscoder();
  ObjectTranscoder(const ObjectTranscoder&) = delete;
  ObjectTranscoder& operator=(const ObjectTranscoder&) = delete;

  /// True when recode() would change no byte of `obj`'s data frames but by
  /// a change of codec: a __Serialized__ object without a data pickle at
  /// any depth of its sub-header (or no pickle protocol asked for), and not
  /// an error dict's exception. Its sub-header is then recode_header()'s,
  /// and each frame's bytes frame_recode_for() and recode_frame()'s.
  bool header_only(const SubObject& obj) const;
  /// What recode() does to a header_only() object before its codecs: the
  /// GPU layout and the header pickles (type-serialized, dtypes), on the
  /// sub-header alone; the frames are not read. Errors as recode()'s.
  Status recode_header(SubObject& obj);
  /// The object recoded whole (its frames in memory), as transcode_message().
  Status recode(SubObject& obj);
  /// True when recode() gives `obj` one data frame: its own data pickle
  /// (the `pickle` family or an object array; no collection, no error
  /// dict) with every out-of-band buffer inlined, at a target protocol of
  /// 3 or more (where an inlined buffer's bytes go into the pickle as they
  /// are), cut into shards and compressed by set_resplit_keys()'s rule.
  bool inlines(const SubObject& obj) const;
  /// For an inlines() object: what recode() does up to the new pickle, on
  /// `merged` (its original frames decoded: the pickle, then its buffers).
  /// Buffers of `gap_bytes` or more are not read, only their size
  /// (pickle::RecodeOptions::gap_bytes): `merged` becomes the one new
  /// frame without their bytes, `gaps` where they go. The sub-header is
  /// recode()'s but for its split keys and compression list
  /// (set_resplit_keys(), once the shards are known). Errors as recode()'s.
  Status recode_inlining(SubObject& obj, std::vector<Bytes>& merged, std::size_t gap_bytes,
                         std::vector<pickle::BufferGap>& gaps);
  /// Frame 0's pickles held as bin (the scheduler's KilledWorker, and the
  /// plain fields of core/recode/internal/field_pickles.h), as transcode_message()
  /// recodes them; true when one changed.
  Result<bool> recode_root(msgpack::Value& root);
  /// True when some header, frame or pickle recoded so far changed.
  bool changed() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The streaming driver over many messages is core/recode/engine.h.

}  // namespace daskcaps
