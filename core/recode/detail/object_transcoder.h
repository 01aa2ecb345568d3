// The pieces of transcode_message() that recode one object at a time
// (core/recode/transcode.h), for the recode layer's other drivers: the
// in-place file path (core/recode/message_in_place.cpp), the cut-through
// path (core/recode/internal/cut_through.h) and the inlined-buffer windows
// (core/recode/detail/inline_frame.h). They run the same code as
// transcode_message(), so they write the same bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/pickle/pickle.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

/// What a change of codec does to one wire frame of a `__Serialized__`
/// object whose compression entry is `entry` (transcode_message's rule):
/// keep its bytes (never compressed, already in the target or, with
/// accept_codecs, in a codec the receiver reads, or raw), or recode it
/// (decompress, then Dask's maybe_compress for the target). Errors: an
/// entry naming a codec this build lacks (Errc::unknown_codec).
enum class FrameRecode : std::uint8_t { keep, recode };
Result<FrameRecode> frame_recode_for(const CompressionValue& entry, Codec target, const TranscodeOptions& options);

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

}  // namespace daskcaps
