#include "core/recode/internal/cut_through.h"

#include <algorithm>

#include "core/wire/internal/message_layout.h"
#include "core/recode/detail/object_transcoder.h"
#include "core/recode/internal/frame_codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "daskcaps/wire/msgpack.h"
#include "core/wire/internal/serialized.h"

namespace daskcaps {

namespace {

// What happens to one frame from the plan's point of view.
struct FramePlan {
  bool decode = false;
  Codec codec = Codec::none;  // the frame's codec when decoded
};

}  // namespace

Result<CutVerdict> plan_cut_through(std::uint64_t offset, std::span<const std::uint64_t> lengths, const Bytes& have,
                                    const TranscodeOptions& options,
                                    const FrameStreamDecoder::Options& decoder_options) {
  if (options.pickle_protocol || options.layout_cpu || options.inline_buffers)
    return CutVerdict(CutNo{"pickles or layouts change: the whole message is needed"});
  const std::size_t n = lengths.size();
  if (n == 0) return CutVerdict(CutNo{"no frames"});
  // Where each frame starts, from the L field.
  std::vector<std::uint64_t> at(n + 1);
  at[0] = prelude_size(n);
  for (std::size_t i = 0; i < n; ++i) at[i + 1] = at[i] + lengths[i];
  // A raw frame the link compresses has its size only once it is whole;
  // only a message of bounded size is held for that.
  if (options.frame_codec && options.frame_codec->may_compress() && at[n] <= kLinkCodedWholeBytes)
    return CutVerdict(CutNo{"the link may compress raw frames: their sizes are known only once they are whole"});
  auto complete = [&](std::size_t i) { return at[i + 1] <= have.size(); };
  auto frame = [&](std::size_t i) {
    return have.slice(static_cast<std::size_t>(at[i]), static_cast<std::size_t>(lengths[i]));
  };

  if (!complete(0)) return CutVerdict(CutWait{at[1]});
  auto root = msgpack::decode_all(frame(0), options.limits, offset + at[0]);
  if (!root) return std::move(root).error().add_context("frame 0");
  if (root->is_map() && root->find("op") == nullptr &&
      (root->find("pickle-protocol") != nullptr || root->find("compression") != nullptr))
    return CutVerdict(CutNo{"a handshake"});

  std::size_t last_header = 0;
  for (const auto& [kind, k] : placeholder_frames(*root)) {
    if (kind == Placeholder::pickled) return CutVerdict(CutNo{"__Pickled__ objects take the whole path"});
    if (k >= n) return CutVerdict(CutNo{"a placeholder outside the message (the whole path reports it)"});
    last_header = std::max(last_header, static_cast<std::size_t>(k));
  }
  if (!complete(last_header)) return CutVerdict(CutWait{at[last_header + 1]});

  // The message as far as it is in: the frames not (wholly) in yet stand
  // in as empty frames, which only the data frames after the last
  // sub-header can be; nothing below reads them.
  std::vector<Bytes> frames(n);
  std::vector<std::uint64_t> offsets(n);
  for (std::size_t i = 0; i < n; ++i) {
    offsets[i] = offset + at[i];
    if (complete(i)) frames[i] = frame(i);
  }
  auto message = parse_message(std::move(frames), options.limits, offsets);
  if (!message) return std::move(message).error();

  std::vector<FramePlan> plan(n);
  std::vector<std::vector<CompressionValue>> entries(message->objects.size());  // per object
  std::optional<std::size_t> last_decoded;
  if (options.codec) {
    for (std::size_t o = 0; o < message->objects.size(); ++o) {
      const SubObject& obj = message->objects[o];
      auto codecs = frame_compression(obj);
      if (!codecs) return std::move(codecs).error().add_context(obj.path);
      entries[o] = std::move(*codecs);
      const std::vector<CompressionValue>& e = entries[o];
      for (std::size_t i = 0; i < obj.frames.size(); ++i) {
        auto action = frame_recode_for(e[i], *options.codec, options);
        if (!action) return std::move(action).error().add_context(obj.frame_label(i)).add_context(obj.path);
        if (*action == FrameRecode::keep) continue;
        if (*options.codec != Codec::none)
          return CutVerdict(CutNo{"frames are recompressed: their sizes are known only once they are whole"});
        const std::size_t j = obj.header_frame + 1 + i;
        plan[j].decode = true;
        plan[j].codec = *codec_of(e[i]);
        last_decoded = std::max(last_decoded.value_or(0), j);
      }
    }
  }

  // The cut: after the last sub-header, or at the last frame decoded when
  // that comes later (it is decoded as it streams; those before it are
  // whole by then).
  std::size_t start = last_header + 1;
  if (last_decoded && *last_decoded >= start) start = *last_decoded;
  if (start >= n) return CutVerdict(CutNo{"the headers run to the end of the message"});
  if (!complete(start - 1)) return CutVerdict(CutWait{at[start]});

  CutPlan out;
  out.offset = offset;
  out.in_lengths.assign(lengths.begin(), lengths.end());
  out.start = start;
  if (plan[start].decode) {
    if (!FrameStreamDecoder::supports(plan[start].codec))
      return CutVerdict(CutNo{std::string(codec_name(plan[start].codec)) + " frames are decoded whole"});
    const std::uint64_t need = at[start] + FrameStreamDecoder::header_bytes(plan[start].codec, lengths[start]);
    if (have.size() < need) return CutVerdict(CutWait{need});
    const ByteSpan head = have.span().subspan(static_cast<std::size_t>(at[start]),
                                              static_cast<std::size_t>(need - at[start]));
    auto dec = FrameStreamDecoder::start(plan[start].codec, head, lengths[start],
                                         options.limits.max_decompressed_bytes, decoder_options);
    if (!dec && dec.error().code == Errc::unsupported)  // a frame only the whole path reads
      return CutVerdict(CutNo{dec.error().message()});
    if (!dec) return std::move(dec).error().add_context("frame " + std::to_string(start) + " @" +
                                                        hex_offset(offset + at[start]));
    out.decoder = std::move(*dec);
  }

  // The head, recoded as the whole path recodes it: decoded frames become
  // raw and their entries nil; every object's compression list is set again.
  if (last_decoded) {
    for (std::size_t o = 0; o < message->objects.size(); ++o) {
      SubObject& obj = message->objects[o];
      std::vector<CompressionValue>& codecs = entries[o];
      for (std::size_t i = 0; i < obj.frames.size(); ++i) {
        const std::size_t j = obj.header_frame + 1 + i;
        if (!plan[j].decode) continue;
        if (j < start) {
          auto raw = decompress_frame(codecs[i], obj.frames[i], options.limits);
          if (!raw) return std::move(raw).error().add_context(obj.frame_label(i)).add_context(obj.path);
          obj.frames[i] = std::move(*raw);
        }
        codecs[i] = CompressionValue::nil();
      }
      set_frame_compression(obj, codecs);
    }
    auto assembled = assemble_message(*message, /*root_unchanged=*/true);
    if (!assembled) return std::move(assembled).error();
    if (assembled->size() != n) return CutVerdict(CutNo{"the frame count changes"});
    out.head.assign(assembled->begin(), assembled->begin() + static_cast<std::ptrdiff_t>(start));
    out.out_lengths.resize(n);
    for (std::size_t j = 0; j < n; ++j) out.out_lengths[j] = j < start ? (*assembled)[j].size() : lengths[j];
    if (out.decoder) out.out_lengths[start] = out.decoder->output_size();
    out.changed = true;
  } else {
    for (std::size_t j = 0; j < start; ++j) out.head.push_back(message->raw.frames[j].bytes());
    out.out_lengths = out.in_lengths;
  }
  return CutVerdict(std::move(out));
}

CutThrough::CutThrough(CutPlan plan) : plan_(std::move(plan)) {
  const std::size_t n = plan_.in_lengths.size();
  in_total_ = prelude_size(n);
  out_total_ = prelude_size(n);
  for (std::size_t i = 0; i < n; ++i) {
    in_total_ += plan_.in_lengths[i];
    out_total_ += plan_.out_lengths[i];
  }
  head_end_ = prelude_size(n);
  for (std::size_t i = 0; i < plan_.start; ++i) head_end_ += plan_.in_lengths[i];
  frame_ = plan_.start;
  frame_left_ = plan_.in_lengths[frame_];
}

std::vector<Bytes> CutThrough::begin() {
  std::vector<Bytes> out;
  out.reserve(plan_.head.size() + 1);
  out.emplace_back(encode_prelude(plan_.out_lengths));
  for (Bytes& b : plan_.head) out.push_back(std::move(b));
  plan_.head.clear();
  return out;
}

Status CutThrough::feed(const Bytes& piece, std::vector<Bytes>& out) {
  std::uint64_t pos = 0;  // in `piece`
  const std::uint64_t size = std::min<std::uint64_t>(piece.size(), in_total_ - in_at_);
  if (in_at_ < head_end_) {
    const std::uint64_t skip = std::min(size, head_end_ - in_at_);
    pos += skip;
    in_at_ += skip;
  }
  while (pos < size) {
    while (frame_left_ == 0 && frame_ + 1 < plan_.in_lengths.size()) frame_left_ = plan_.in_lengths[++frame_];
    const std::uint64_t k = std::min(size - pos, frame_left_);
    const Bytes part = piece.slice(static_cast<std::size_t>(pos), static_cast<std::size_t>(k));
    if (frame_ == plan_.start && plan_.decoder) {
      if (auto st = plan_.decoder->feed(part.span(), out); !st)
        return std::move(st).error().add_context("frame " + std::to_string(frame_));
      if (k == frame_left_) {
        if (auto st = plan_.decoder->finish(out); !st)
          return std::move(st).error().add_context("frame " + std::to_string(frame_));
      }
    } else if (k > 0) {
      out.push_back(part);
    }
    pos += k;
    in_at_ += k;
    frame_left_ -= k;
  }
  return {};
}

}  // namespace daskcaps
