// One object of a message recoded as transcode_message() recodes it
// (core/recode/transcode.h): its codecs, its pickles (data, header and
// error pickles) at the target protocol, its GPU layout, its shards. The
// whole-message path (transcode.cpp) and the object-by-object one
// (object_transcoder.h: the in-place file path, cut-through, inlined-buffer
// windows) both drive this class, so they write the same bytes.
//
// Contract: one ObjectRecoder per message and option set, used by one
// thread; `opt` and `rep` outlive it. `storage`, where not null, is the
// buffer the message's frames lie in: a compressed input frame's pages go
// back to the kernel once it is decoded. changed() says whether any header,
// frame or pickle recoded so far differs from the input.
#pragma once

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "core/recode/internal/error_pickles.h"
#include "daskcaps/base/bytes.h"
#include "core/base/internal/page_buffer.h"
#include "daskcaps/base/result.h"
#include "daskcaps/pickle/pickle.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps::detail {

class ObjectRecoder {
  using Value = msgpack::Value;

 public:
  ObjectRecoder(const TranscodeOptions& opt, TranscodeReport& rep, PageBuffer* storage,
                std::vector<std::pair<std::size_t, ErrorPart>> error_objects)
      : opt_(opt), rep_(rep), storage_(storage), error_objects_(std::move(error_objects)) {}

  // `obj` recoded whole, its frames in memory: its layout, its pickles,
  // its codecs (a __Pickled__ object's buffers always go raw).
  Status recode(SubObject& obj);

  // True when recode() may change `obj`'s data frames other than by their
  // codec: a __Pickled__ object, or, with a pickle protocol, an error
  // dict's exception or a data pickle anywhere in the sub-header (looked
  // for at every depth, whichever depth recode_serialized() reaches).
  bool touches_data(const SubObject& obj) const;

  // ObjectTranscoder::inlines().
  bool inlines(const SubObject& obj) const;

  // ObjectTranscoder::recode_inlining(): recode_serialized() up to and
  // with recode_data(), on frames already merged, the larger buffers left
  // as gaps.
  Status recode_inlining(SubObject& obj, std::vector<Bytes>& merged, std::size_t gap_bytes,
                         std::vector<pickle::BufferGap>& gaps);

  // A pickle without out-of-band buffers, re-emitted at the target protocol;
  // nullopt when that gives its own bytes back (CPython's pickles at their
  // own protocol): nothing of it changes. The same small pickles (a class
  // reference in every type-serialized header) come again and again: their
  // recoding is remembered per thread.
  Result<std::optional<Buffer>> recode_plain(ByteSpan pickled, const char* what);

 private:
  // frames[0] is a pickle, frames[1..] its out-of-band buffers. Returns the
  // new frames (pickle first, then the buffers that stay out of band) and
  // their writeable flags; nullopt when the pickle comes out as it was and
  // keeps every buffer.
  Result<std::optional<std::vector<Bytes>>> recode_with_buffers(const std::vector<Bytes>& frames,
                                                                std::vector<bool>& writeable, const char* what);

  // type-serialized and pickled numpy dtypes of every (sub-)header of an
  // object, at every depth (core/wire/internal/serialized_tree.h: a collection's
  // own type-serialized is a plain string); a pickle that comes out as it
  // was is left as it is.
  Status recode_header_pickles(Value& header);
  Status recode_leaf_pickles(Value& header);

  static std::vector<bool> writeable_of(const Value& header, std::size_t buffers);
  static Value writeable_value(const std::vector<bool>& w);

  // Whether a header or any map inside it holds a data pickle.
  static bool holds_data_pickle(const Value& v);

  // Which pickle a (sub-)header's data frames hold: the `pickle` family, a
  // numpy object array, or nothing.
  enum class DataPickle { none, pickle_family, numpy_object };
  static DataPickle data_pickle_of(const Value& header);

  // Recodes the data pickle of one (sub-)header in place on its frames.
  Status recode_data(Value& header, std::vector<Bytes>& frames, bool& changed);

  // The codec an object already uses (its first compressing entry).
  static Result<Codec> object_codec(const std::vector<CompressionValue>& codecs);

  Status recode_serialized(SubObject& obj);

  // GPU objects of `obj`, at every depth Dask nests them, to the CPU
  // layout (opt_.layout_cpu).
  Status convert_layout(SubObject& obj);

  // The exception or traceback of one of Dask's error dicts
  // (core/recode/internal/error_pickles.h).
  bool is_error_pickle(const SubObject& obj) const;

  // Splits original frames into shards of at most shard_bytes and
  // compresses each shard with Dask's rule; rewrites the split keys and the
  // compression list. A header that had no split keys gets them only when a
  // frame is split, one without "compression" only when a shard is
  // compressed: what Dask would read the same way is left out.
  Status resplit(SubObject& obj, const std::vector<Bytes>& frames, Codec codec);

  Result<std::pair<Bytes, CompressionValue>> compress_one(const Bytes& raw, Codec codec);

  // A frame large enough to go from decoder to encoder window by window:
  // it declares at least stream_frame_bytes decoded, or does not say. (To
  // raw, the output is the decoded frame: decoding it whole into its
  // buffer costs one copy less.)
  bool streams(const CompressionValue& entry, const Bytes& frame, Codec target) const;

  // A raw frame the codec rule keeps raw, compressed in the codec the
  // link chose for it (TranscodeOptions::frame_codec,
  // core/recode/internal/frame_codec.h) under Dask's maybe_compress rule; nullopt:
  // it stays as it came (no policy, no choice, none, or it does not shrink
  // enough).
  Result<std::optional<std::pair<Bytes, CompressionValue>>> link_code(const CompressionValue& entry,
                                                                     const Bytes& frame);

  // Same shards, new codec. A raw frame that stays raw (small or
  // incompressible, Dask's rule) is no change: the header keeps its
  // "compression" list, or its lack of one.
  // Without a target (frame_codec alone), every frame keeps its codec.
  Status recompress(SubObject& obj, std::vector<CompressionValue> codecs, std::optional<Codec> target_codec);

  Status recode_pickled(SubObject& obj);

  // An input frame that was compressed, once decoded into a buffer of its
  // own, is never read again: its pages go back to the kernel now, not when
  // the whole message is done. (Raw frames are not released: their decoded
  // form is the frame itself.)
  void release(const Bytes& frame);
  bool inside_storage(const Bytes& frame) const;

  const TranscodeOptions& opt_;
  TranscodeReport& rep_;
  PageBuffer* storage_;
  // recode_inlining(): buffers of this size or more are left as gaps.
  std::size_t gap_bytes_ = 0;
  std::vector<pickle::BufferGap> gaps_;
  std::vector<std::pair<std::size_t, ErrorPart>> error_objects_;  // header frame, part
  bool changed_ = false;  // some object's header or frames differ from the input

 public:
  bool changed() const { return changed_; }
};

/// Whether frame 0 of `message` may hold one of Dask's error dicts (its
/// key "exception" appears in the frame's bytes): where not, the walks for
/// their pickles are spared.
bool may_hold_errors(const Message& message);

/// Whether frame 0 of a message may hold pickles in plain fields that the
/// pickle protocol of `options` recodes: Dask's conventions put them there
/// by op and key (core/recode/internal/field_pickles.h).
bool recodes_field_pickles(const Message& message, const TranscodeOptions& options);

/// The pickles frame 0 holds as bin, recoded in place: those of Dask's
/// error dicts (the scheduler's KilledWorker; `errors`) and those Dask puts
/// in plain fields by op and key (a result's type, client.run's function, a
/// plugin; `fields`). True when one changed. The whole-message path and the
/// in-place one (ObjectTranscoder::recode_root) both come here.
Result<bool> recode_root_pickles(ObjectRecoder& recoder, msgpack::Value& root, bool errors, bool fields);

}  // namespace daskcaps::detail
