// transcode_message_in_place() and in_place_applies()
// (daskcaps/recode/stream_recode.h, "One message, in place"): a message
// recoded straight into its place in the output, object by object, frame by
// frame. The frames made of pieces, for the pickles that inline their
// buffers, are core/recode/detail/inline_frame.h; one frame at a time is
// core/recode/internal/stream_recode.cpp.
#include "core/wire/internal/message_layout.h"
#include "core/recode/internal/stream_recode.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "core/recode/detail/object_transcoder.h"
#include "core/recode/internal/frame_codec.h"
#include "core/recode/detail/frame_sample.h"
#include "core/recode/detail/inline_frame.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "core/wire/internal/serialized.h"
#include "core/wire/internal/window_codec.h"

namespace daskcaps {

using detail::declared_of;
using detail::InlinePlan;
using detail::plan_inline;
using detail::recode_decoded;
using detail::run_inlined;

namespace {

// One frame written at a place of the message.
class PlacedSink final : public FrameSink {
 public:
  PlacedSink(MessageSink& out, std::uint64_t at) : out_(out), at_(at) {}
  Status put(ByteSpan bytes) override {
    if (Status s = out_.write_at(at_ + written_, bytes); !s) return s;
    written_ += bytes.size();
    return ok_status();
  }
  Status restart() override {
    written_ = 0;
    return ok_status();
  }
  std::uint64_t written() const { return written_; }

 private:
  MessageSink& out_;
  std::uint64_t at_;
  std::uint64_t written_ = 0;
};

// A frame passed as it is.
Result<std::uint64_t> copy_frame(const Message& message, std::size_t index, MessageSink& out, std::uint64_t at) {
  if (!message.raw.frames[index].is_stored()) {
    const Bytes& f = message.raw.frames[index].bytes();
    if (Status s = out.write_at(at, f.span()); !s) return std::move(s).error();
    return f.size();
  }
  auto in = message.raw.frame_input(index);
  std::uint64_t done = 0;
  while (done < in->size()) {
    auto p = in->read(done, std::size_t{256} << 10);
    if (!p) return std::move(p).error();
    if (p->empty()) return make_error(Errc::io, "frame input ended early");
    if (Status s = out.write_at(at + done, *p); !s) return std::move(s).error();
    done += p->size();
  }
  return done;
}

// The message as it came, with a prelude of its lengths, from the start of
// `out`: what transcode_message gives when nothing was recoded.
Result<std::uint64_t> write_as_it_came(const Message& in, std::span<const std::uint64_t> in_sizes, MessageSink& out,
                                       TranscodeReport& report) {
  const Buffer prelude = encode_prelude(in_sizes);
  if (Status s = out.write_at(0, prelude); !s) return std::move(s).error();
  std::uint64_t at = prelude.size();
  for (std::size_t i = 0; i < in_sizes.size(); ++i) {
    auto k = copy_frame(in, i, out, at);
    if (!k) return std::move(k).error();
    at += *k;
  }
  report.bytes_out += at - prelude.size();
  return at;
}

}  // namespace

bool in_place_applies(const Message& message, const TranscodeOptions& options) {
  if (message.is_handshake()) return false;
  // A codec per frame from the link is transcode_message()'s alone.
  if (options.frame_codec) return false;
  // Frames no object claims are written after the objects' frames: only
  // where they already are there (Dask sends none; a loose frame before an
  // object would move).
  if (!message.loose_frames.empty() && !message.objects.empty()) {
    const SubObject& last = message.objects.back();
    if (message.loose_frames.front() < last.header_frame + 1 + last.frames.size()) return false;
  }
  return true;
}

Result<std::uint64_t> transcode_message_in_place(const Message& in, const TranscodeOptions& options,
                                                 TranscodeReport& report, MessageSink& out) {
  if (!in_place_applies(in, options))
    return make_error(Errc::usage, "a handshake, or a message with frames no object claims before its last, "
                                   "is recoded whole");
  const std::size_t n = in.raw.frames.size();
  std::vector<std::uint64_t> in_sizes(n);
  for (std::size_t i = 0; i < n; ++i) {
    in_sizes[i] = in.raw.frames[i].size();
    report.bytes_in += in_sizes[i];
  }

  // Each object, as transcode_message's ObjectRecoder would recode it:
  // whole (its frames read into memory) when its data pickles change;
  // otherwise its sub-header now, and its frames later, one at a time, as
  // recompress() decides for each. For those, the entries each sub-header
  // would have if every recoded frame compresses.
  ObjectTranscoder objects(in, options, report);
  Message m = in;
  auto root_changed = objects.recode_root(m.root);
  if (!root_changed) return std::move(root_changed).error();
  std::vector<bool> whole(m.objects.size(), false);
  std::vector<std::optional<InlinePlan>> inlined(m.objects.size());
  std::vector<msgpack::Value> headers(m.objects.size());  // header_only objects' sub-headers before their codecs
  std::vector<std::vector<CompressionValue>> entries(m.objects.size());
  std::vector<std::vector<bool>> recode(m.objects.size());
  bool changes = false;
  for (std::size_t o = 0; o < m.objects.size(); ++o) {
    SubObject& obj = m.objects[o];
    if (objects.inlines(obj)) {
      auto plan = plan_inline(in, obj, objects, options);
      if (!plan) return std::move(plan).error().add_context(obj.path);
      if (*plan) {
        // The shards' entries as they would be if every one compresses.
        const InlinePlan& p = **plan;
        std::vector<CompressionValue> guess;
        for (std::uint64_t k : p.shards)
          guess.push_back(p.codec == Codec::none || k < options.rules.min_size || k > options.rules.max_size
                              ? CompressionValue::nil()
                              : CompressionValue::named(std::string(codec_name(p.codec))));
        obj.frames.assign(p.shards.size(), Bytes());
        const std::uint64_t one[] = {p.shards.size()};
        set_resplit_keys(obj, one, guess);
        inlined[o] = std::move(*plan);
        changes = true;
        continue;
      }
    }
    if (!objects.header_only(obj)) {
      whole[o] = true;
      for (std::size_t i = 0; i < obj.frames.size(); ++i) {
        auto f = in.raw.load_frame(obj.header_frame + 1 + i);
        if (!f) return std::move(f).error().add_context(obj.path);
        obj.frames[i] = std::move(*f);
      }
      if (Status st = objects.recode(obj); !st) return std::move(st).error().add_context(obj.path);
      continue;
    }
    if (Status st = objects.recode_header(obj); !st) return std::move(st).error().add_context(obj.path);
    headers[o] = obj.header;
    auto codecs = frame_compression(obj);
    if (!codecs) return std::move(codecs).error().add_context(obj.path);
    entries[o] = *codecs;
    recode[o].assign(obj.frames.size(), false);
    if (!options.codec) continue;
    const Codec target = *options.codec;
    for (std::size_t i = 0; i < obj.frames.size(); ++i) {
      auto action = frame_recode_for((*codecs)[i], target, options);
      if (!action) return std::move(action).error().add_context(obj.frame_label(i)).add_context(obj.path);
      if (*action == FrameRecode::keep) continue;
      recode[o][i] = changes = true;
      std::optional<std::uint64_t> size;
      if (target != Codec::none) {
        auto codec = codec_of((*codecs)[i]);
        auto input = in.raw.frame_input(obj.header_frame + 1 + i);
        size = !codec ? std::nullopt
               : *codec == Codec::none ? std::optional<std::uint64_t>(input->size())
                                       : declared_of(*codec, *input);
      }
      const bool raw = target == Codec::none ||
                       (size && (*size < options.rules.min_size || *size > options.rules.max_size));
      (*codecs)[i] = raw ? CompressionValue::nil() : CompressionValue::named(std::string(codec_name(target)));
    }
    set_frame_compression(obj, *codecs);
  }
  changes |= *root_changed || objects.changed();

  // Nothing recoded: the message as it came (transcode_message returns its
  // frames untouched), with a prelude of its lengths.
  if (!changes) return write_as_it_came(in, in_sizes, out, report);

  auto provisional = assemble_message(m, /*root_unchanged=*/!*root_changed);
  if (!provisional) return std::move(provisional).error();
  const std::size_t n_out = provisional->size();
  std::vector<std::uint64_t> out_sizes(n_out, 0);
  std::uint64_t at = prelude_size(n_out);
  const Bytes& root = (*provisional)[0];
  if (Status s = out.write_at(at, root.span()); !s) return std::move(s).error();
  out_sizes[0] = root.size();
  at += root.size();
  // Whether a frame or a sub-header really changed (a frame planned for a
  // codec may stay raw), and whether every frame written so far is the
  // input's own bytes: where nothing changed, transcode_message gives the
  // message as it came, and so must this, even where re-encoding a
  // sub-header would write it otherwise (a positive int as int32).
  bool changed = *root_changed || objects.changed();
  // (A stored frame's bytes() is empty, so it never compares equal.)
  bool as_it_came = n_out == n && root == in.raw.frames[0].bytes();
  auto same_header = [&](const SubObject& obj, const Bytes& header) {
    return header == in.raw.frames[obj.header_frame].bytes();
  };

  std::size_t j = 1;  // output frame index
  for (std::size_t o = 0; o < m.objects.size(); ++o) {
    SubObject& obj = m.objects[o];
    if (whole[o]) {
      // Recoded already, in memory: its sub-header and frames as they are.
      as_it_came = as_it_came && same_header(in.objects[o], (*provisional)[j]);
      for (std::size_t i = 0; i <= obj.frames.size(); ++i) {
        const Bytes& f = (*provisional)[j + i];
        if (Status s = out.write_at(at, f.span()); !s) return std::move(s).error();
        out_sizes[j + i] = f.size();
        at += f.size();
      }
      j += 1 + obj.frames.size();
      continue;
    }
    if (inlined[o]) {
      // The new pickle with its buffers, shard by shard.
      changed = true;
      const InlinePlan& p = *inlined[o];
      const std::uint64_t header_at = at;
      const std::uint64_t room = (*provisional)[j].size();
      std::uint64_t data_at = header_at + room;
      std::vector<CompressionValue> final_entries;
      std::uint64_t from = 0;
      for (std::size_t k = 0; k < p.shards.size(); ++k) {
        PlacedSink sink(out, data_at);
        const std::uint64_t length = p.shards[k];
        auto run = [&](const WindowFn& fn) { return run_inlined(in, p, from, length, options, fn); };
        auto entry = recode_decoded(run, length, p.codec, options, sink);
        if (!entry) return std::move(entry).error().add_context(obj.path);
        if (entry->compresses()) ++report.frames_recompressed;
        final_entries.push_back(std::move(*entry));
        out_sizes[j + 1 + k] = sink.written();
        data_at += sink.written();
        from += length;
      }
      obj.header = p.header;
      const std::uint64_t one[] = {p.shards.size()};
      set_resplit_keys(obj, one, final_entries);
      const Bytes header = encode_sub_header(obj);
      if (header.size() > room) return make_error(Errc::internal, "a sub-header outgrew its room");
      if (header.size() != room) {
        if (Status s = out.move(header_at + room, header_at + header.size(), data_at - (header_at + room)); !s)
          return std::move(s).error();
        data_at = data_at - room + header.size();
      }
      if (Status s = out.write_at(header_at, header.span()); !s) return std::move(s).error();
      out_sizes[j] = header.size();
      j += 1 + obj.frames.size();
      at = data_at;
      continue;
    }
    const std::uint64_t header_at = at;
    const std::uint64_t room = (*provisional)[j].size();
    std::uint64_t data_at = header_at + room;
    std::vector<CompressionValue> final_entries = entries[o];
    bool any = false;  // a frame whose bytes changed (raw that stays raw is none)
    for (std::size_t i = 0; i < obj.frames.size(); ++i) {
      const std::size_t index = obj.header_frame + 1 + i;
      std::uint64_t size = 0;
      if (!recode[o][i]) {
        auto k = copy_frame(in, index, out, data_at);
        if (!k) return std::move(k).error().add_context(obj.path);
        size = *k;
      } else {
        auto input = in.raw.frame_input(index);
        PlacedSink sink(out, data_at);
        auto entry = recode_frame(*input, entries[o][i], *options.codec, options, sink, report);
        if (!entry) return std::move(entry).error().add_context(obj.frame_label(i)).add_context(obj.path);
        any |= entries[o][i].compresses() || entry->compresses();
        final_entries[i] = std::move(*entry);
        size = sink.written();
      }
      out_sizes[j + 1 + i] = size;
      data_at += size;
    }
    // As transcode_message's recompress(): a sub-header none of whose frames
    // changed keeps its "compression" list, or its lack of one.
    if (any)
      set_frame_compression(obj, final_entries);
    else
      obj.header = std::move(headers[o]);
    changed |= any;
    const Bytes header = encode_sub_header(obj);
    as_it_came = as_it_came && same_header(in.objects[o], header);
    if (header.size() != room) {
      // A frame written raw after all: the sub-header is shorter than the
      // room left for it, and the object's frames move back.
      if (Status s = out.move(header_at + room, header_at + header.size(), data_at - (header_at + room)); !s)
        return std::move(s).error();
      data_at = data_at - room + header.size();
    }
    if (Status s = out.write_at(header_at, header.span()); !s) return std::move(s).error();
    out_sizes[j] = header.size();
    j += 1 + obj.frames.size();
    at = data_at;
  }
  for (std::size_t i : in.loose_frames) {
    auto k = copy_frame(in, i, out, at);
    if (!k) return std::move(k).error();
    out_sizes[j++] = *k;
    at += *k;
  }
  if (!changed && !as_it_came) return write_as_it_came(in, in_sizes, out, report);
  if (Status s = out.write_at(0, encode_prelude(out_sizes)); !s) return std::move(s).error();
  for (std::uint64_t k : out_sizes) report.bytes_out += k;
  return at;
}

}  // namespace daskcaps
