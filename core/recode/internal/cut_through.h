// Cut-through recoding: a large message forwarded while it still arrives
// (the bridge, core/bridge/bridge.h), with the same bytes out as
// transcode_message() would give for the whole message.
//
// A message can be cut through when only codecs change
// (TranscodeOptions without pickle protocol, layout or inlining) and every
// frame that changes is decoded to raw (the target codec is none, or the
// frame is in a codec the receiver does not read and the target is none):
// a recompressed frame's size is known only once it is whole, and the
// prelude, which lists every frame's size, goes first. `__Pickled__`
// objects and handshakes always take the whole-message path, and so does
// a message of at most kLinkCodedWholeBytes while
// TranscodeOptions::frame_codec may compress a raw frame
// (FrameCodecPolicy::may_compress(): a slow link). A larger one is cut
// through as it would be without a link policy, its raw frames raw: held
// whole, a run of them would cost the bridge a message each (a 48 MiB
// echo under ASan held 600 MiB), and memory stays within a window.
//
// plan_cut_through() looks at what has arrived of the message (from its L
// field, its length table in) and answers:
//   CutWait{n}  it can tell once the first n bytes are in: frame 0, every
//               sub-header, and the head of the one frame that is decoded
//               as it streams;
//   CutNo       this message takes the whole-message path;
//   CutPlan     the message is cut at frame `start`: the frames before it
//               (frame 0, the sub-headers, any frames between) are complete
//               and recoded now; from `start` on every frame is passed as
//               it arrives, except that frame `start` itself may be decoded
//               as it arrives (core/wire/internal/stream_codec.h), lz4 and zstd only.
// Frame 0 and the sub-headers are read under the limits, as the whole path
// reads them; errors are those the whole path would report.
//
// CutThrough then turns the message's bytes, in pieces as they arrive
// (core/wire/internal/assembler.h stream_rest()), into output pieces: first the
// prelude with the new lengths and the full L plus the head frames, then
// the rest. Memory: the pieces it is given and one decoder window, never
// the message. A frame that turns out corrupt after the prelude went out
// is an error; the caller must end the connection (its receiver holds part
// of a message).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/recode/transcode.h"
#include "core/wire/internal/stream_codec.h"

namespace daskcaps {

struct CutWait {
  std::uint64_t bytes = 0;  // of the message, from its L field
};
struct CutNo {
  std::string why;
};
struct CutPlan {
  std::uint64_t offset = 0;                // stream offset of the message's L field
  std::vector<std::uint64_t> in_lengths;   // every input frame
  std::vector<std::uint64_t> out_lengths;  // every output frame
  std::size_t start = 0;                   // first frame forwarded as it arrives
  std::vector<Bytes> head;                 // output frames [0, start)
  /// Decodes frame `start` as it arrives; null: it passes as it is.
  std::unique_ptr<FrameStreamDecoder> decoder;
  bool changed = false;                    // false: every byte passes as it came
};
using CutVerdict = std::variant<CutWait, CutNo, CutPlan>;

/// The largest message recoded whole so that the link may compress its raw
/// frames (see above).
inline constexpr std::uint64_t kLinkCodedWholeBytes = std::uint64_t{16} << 20;

/// Plans cutting a message through (see above). `lengths` are its frames'
/// lengths, `have` its first bytes from the L field (the length table
/// included).
Result<CutVerdict> plan_cut_through(std::uint64_t offset, std::span<const std::uint64_t> lengths, const Bytes& have,
                                    const TranscodeOptions& options,
                                    const FrameStreamDecoder::Options& decoder_options = FrameStreamDecoder::Options{});

class CutThrough {
 public:
  explicit CutThrough(CutPlan plan);

  /// The prelude and the head frames: what goes out first.
  std::vector<Bytes> begin();
  /// The message's next bytes, in order from its L field (the bytes plan_
  /// cut_through() saw come again: they are skipped); output pieces are
  /// appended to `out`. After the last byte it checks the decoded frame
  /// (its declared size, its end).
  Status feed(const Bytes& piece, std::vector<Bytes>& out);
  /// Every input byte has been fed.
  bool done() const { return in_at_ == in_total_; }

  std::uint64_t in_bytes() const { return in_total_; }
  std::uint64_t out_bytes() const { return out_total_; }
  bool changed() const { return plan_.changed; }

 private:
  CutPlan plan_;
  std::uint64_t in_total_ = 0;    // the input message's wire size
  std::uint64_t out_total_ = 0;   // the output message's wire size
  std::uint64_t in_at_ = 0;       // bytes of the input seen
  std::uint64_t head_end_ = 0;    // input offset of frame `start`
  std::size_t frame_ = 0;         // frame the next input byte belongs to
  std::uint64_t frame_left_ = 0;  // bytes of it still to come
};

}  // namespace daskcaps
