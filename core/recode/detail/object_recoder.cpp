#include "core/recode/detail/object_recoder.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>

#include "core/recode/detail/decoded_blocks.h"
#include "core/recode/detail/object_transcoder.h"
#include "core/recode/detail/pickle_cache.h"
#include "core/recode/internal/field_pickles.h"
#include "core/recode/internal/frame_codec.h"
#include "core/recode/internal/gpu_layout.h"
#include "core/recode/internal/stream_recode.h"
#include "core/wire/internal/serialized.h"
#include "core/wire/internal/serialized_tree.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps {

void set_resplit_keys(SubObject& obj, std::span<const std::uint64_t> shards, std::span<const CompressionValue> entries) {
  using msgpack::Value;
  msgpack::Array counts, offsets;
  bool any_split = false, any_compressed = false;
  std::uint64_t first = 0;
  for (std::uint64_t n : shards) {
    counts.push_back(Value::uinteger(n));
    offsets.push_back(Value::uinteger(first));
    first += n;
    any_split |= n > 1;
  }
  for (const CompressionValue& e : entries) any_compressed |= e.compresses();
  if (any_split || obj.header.find("split-num-sub-frames") != nullptr || obj.header.find("split-offsets") != nullptr) {
    obj.header.set("split-num-sub-frames", Value::array(std::move(counts)));
    obj.header.set("split-offsets", Value::array(std::move(offsets)));
  }
  if (any_compressed || obj.header.find("compression") != nullptr) set_frame_compression(obj, entries);
}

Result<FrameRecode> frame_recode_for(const CompressionValue& entry, Codec target, const TranscodeOptions& options) {
  if (entry.kind == CompressionValue::Kind::false_) return FrameRecode::keep;  // never compressed
  auto current = codec_of(entry);
  if (!current) return std::move(current).error();
  if (*current == target) return FrameRecode::keep;
  const auto& accept = options.accept_codecs;
  if (!accept.empty() &&
      (*current == Codec::none || std::find(accept.begin(), accept.end(), *current) != accept.end()))
    return FrameRecode::keep;
  return FrameRecode::recode;
}

namespace detail {

namespace {

using msgpack::Value;

Result<ClassRef> read_class(ByteSpan type_serialized) {
  auto ref = pickle::class_reference(type_serialized);
  if (!ref) return std::move(ref).error();
  return ClassRef{ref->first, ref->second};
}

// A frame in the message's own buffer: read once, in order
// (FrameInput::read_once), the pages behind the reads go back as it is
// decoded, so that the input shrinks while the output grows.
class PagedFrameInput final : public FrameInput {
 public:
  PagedFrameInput(ByteSpan frame, PageBuffer* storage) : frame_(frame), storage_(storage) {}
  std::uint64_t size() const override { return frame_.size(); }
  Result<ByteSpan> read(std::uint64_t at, std::size_t max) override {
    if (once_ && storage_ != nullptr && at >= released_ + kReleaseStep) {
      storage_->discard(frame_.subspan(static_cast<std::size_t>(released_), static_cast<std::size_t>(at - released_)));
      released_ = at;
    }
    if (at >= frame_.size()) return ByteSpan{};
    const std::size_t from = static_cast<std::size_t>(at);
    return frame_.subspan(from, std::min(max, frame_.size() - from));
  }
  void read_once() override { once_ = true; }

 private:
  static constexpr std::uint64_t kReleaseStep = std::uint64_t{1} << 20;
  ByteSpan frame_;
  PageBuffer* storage_;
  bool once_ = false;
  std::uint64_t released_ = 0;
};

}  // namespace

Status ObjectRecoder::recode(SubObject& obj) {
  if (obj.kind == Placeholder::pickled) return recode_pickled(obj);
  return recode_serialized(obj);
}

bool ObjectRecoder::touches_data(const SubObject& obj) const {
  if (obj.kind == Placeholder::pickled) return true;
  if (!opt_.pickle_protocol) return false;
  return is_error_pickle(obj) || holds_data_pickle(obj.header);
}

bool ObjectRecoder::inlines(const SubObject& obj) const {
  if (obj.kind != Placeholder::serialized || !opt_.pickle_protocol || *opt_.pickle_protocol < 3) return false;
  if (*opt_.pickle_protocol == 5 && !opt_.inline_buffers) return false;
  if (is_error_pickle(obj) || obj.header.find("sub-headers") != nullptr) return false;
  return data_pickle_of(obj.header) != DataPickle::none;
}

Status ObjectRecoder::recode_inlining(SubObject& obj, std::vector<Bytes>& merged, std::size_t gap_bytes,
                                      std::vector<pickle::BufferGap>& gaps) {
  if (opt_.layout_cpu) {
    if (auto st = convert_layout(obj); !st) return st;
  }
  if (auto st = recode_header_pickles(obj.header); !st) return st;
  bool changed = false;
  gap_bytes_ = gap_bytes;
  Status st = recode_data(obj.header, merged, changed);
  gap_bytes_ = 0;
  gaps = changed ? std::move(gaps_) : std::vector<pickle::BufferGap>{};
  gaps_.clear();
  if (!st) return st;
  if (!changed || merged.size() != 1)
    return make_error(Errc::internal, "an inlining pickle recode kept buffers out of band");
  changed_ = true;
  return {};
}

Result<std::optional<Buffer>> ObjectRecoder::recode_plain(ByteSpan pickled, const char* what) {
  pickle::RecodeOptions ro;
  ro.target_protocol = *opt_.pickle_protocol;
  ro.inline_buffers = opt_.inline_buffers;
  auto changed = [&](Buffer out) -> std::optional<Buffer> {
    if (out.size() == pickled.size() && std::equal(out.begin(), out.end(), pickled.begin())) return std::nullopt;
    ++rep_.pickles_recoded;
    changed_ = true;
    return out;
  };
  PickleCache& cache = pickle_cache();
  const bool cacheable = pickled.size() <= PickleCache::kMaxPickleBytes;
  if (cacheable) {
    // (changed() takes a copy: the cache keeps its own)
    if (const Buffer* hit = cache.find(pickled, ro, opt_.limits)) return changed(*hit);
  }
  auto r = pickle::recode(pickled, {}, ro, opt_.limits);
  if (!r) return rebase_error(std::move(r).error(), kNoOffset).add_context(what);
  if (cacheable) cache.put(pickled, ro, opt_.limits, r->pickle);
  return changed(std::move(r->pickle));
}

Result<std::optional<std::vector<Bytes>>> ObjectRecoder::recode_with_buffers(const std::vector<Bytes>& frames,
                                                                             std::vector<bool>& writeable, const char* what) {
  std::vector<pickle::OutOfBandBuffer> buffers;
  buffers.reserve(frames.size() - 1);
  for (std::size_t i = 1; i < frames.size(); ++i)
    buffers.push_back({frames[i].span(), i - 1 < writeable.size() ? bool(writeable[i - 1]) : true});
  pickle::RecodeOptions ro;
  ro.target_protocol = *opt_.pickle_protocol;
  ro.inline_buffers = opt_.inline_buffers;
  ro.gap_bytes = gap_bytes_;
  auto r = pickle::recode(frames[0], buffers, ro, opt_.limits);
  if (!r) return rebase_error(std::move(r).error(), kNoOffset).add_context(what);
  gaps_ = std::move(r->gaps);
  bool same = r->pickle.size() == frames[0].size() &&
              std::equal(r->pickle.begin(), r->pickle.end(), frames[0].data()) &&
              r->out_of_band.size() == buffers.size();
  for (std::size_t i = 0; same && i < r->out_of_band.size(); ++i) same = r->out_of_band[i] == i;
  if (same) return std::optional<std::vector<Bytes>>();
  ++rep_.pickles_recoded;
  changed_ = true;
  rep_.buffers_inlined += buffers.size() - r->out_of_band.size();
  std::vector<Bytes> out;
  out.emplace_back(std::move(r->pickle));
  std::vector<bool> kept;
  for (std::size_t idx : r->out_of_band) {
    if (idx >= buffers.size()) return make_error(Errc::internal, "pickle engine kept an unknown buffer");
    out.push_back(frames[idx + 1]);
    kept.push_back(buffers[idx].writeable);
  }
  writeable = std::move(kept);
  return std::optional<std::vector<Bytes>>(std::move(out));
}

Status ObjectRecoder::recode_header_pickles(Value& header) {
  return for_each_leaf(header, nullptr, opt_.limits.max_msgpack_depth,
                       [&](Value& leaf, std::vector<Bytes>&, const std::string&) { return recode_leaf_pickles(leaf); });
}

Status ObjectRecoder::recode_leaf_pickles(Value& header) {
  if (Value* ts = header.find("type-serialized"); ts != nullptr && ts->is_bin()) {
    auto r = recode_plain(ts->as_bin(), "type-serialized");
    if (!r) return std::move(r).error();
    if (*r) *ts = Value::bin(std::move(**r));
  }
  if (Value* sub = header.find("sub-header"); sub != nullptr && sub->is_map()) {
    if (Value* dt = sub->find("dtype"); dt != nullptr && dt->is_array() && dt->as_array().size() == 2 &&
                                        dt->as_array()[0].to_int64() == 1 && dt->as_array()[1].is_bin()) {
      auto r = recode_plain(dt->as_array()[1].as_bin(), "pickled dtype");
      if (!r) return std::move(r).error();
      if (*r) dt->as_array()[1] = Value::bin(std::move(**r));
    }
  }
  return {};
}

std::vector<bool> ObjectRecoder::writeable_of(const Value& header, std::size_t buffers) {
  std::vector<bool> out(buffers, true);
  if (const Value* w = header.find("writeable"); w != nullptr && w->is_array()) {
    const auto& items = w->as_array();
    for (std::size_t i = 0; i < buffers && i < items.size(); ++i)
      if (items[i].is_bool()) out[i] = items[i].as_bool();
  }
  return out;
}

Value ObjectRecoder::writeable_value(const std::vector<bool>& w) {
  msgpack::Array a;
  for (bool b : w) a.push_back(Value::boolean(b));
  return Value::array(std::move(a));
}

bool ObjectRecoder::holds_data_pickle(const Value& v) {
  if (v.is_map()) {
    if (data_pickle_of(v) != DataPickle::none) return true;
    for (const auto& [k, e] : v.as_map())
      if (holds_data_pickle(e)) return true;
  } else if (v.is_array()) {
    for (const Value& e : v.as_array())
      if (holds_data_pickle(e)) return true;
  }
  return false;
}

ObjectRecoder::DataPickle ObjectRecoder::data_pickle_of(const Value& header) {
  const Value* s = header.find("serializer");
  if (s != nullptr && s->is_str() && s->as_str() == "pickle") return DataPickle::pickle_family;
  if (const Value* sub = header.find("sub-header"); sub != nullptr) {
    if (const Value* p = sub->find("pickle"); p != nullptr && p->is_bool() && p->as_bool())
      return DataPickle::numpy_object;
  }
  return DataPickle::none;
}

Status ObjectRecoder::recode_data(Value& header, std::vector<Bytes>& frames, bool& changed) {
  const DataPickle kind = data_pickle_of(header);
  if (kind == DataPickle::none || frames.empty()) return {};
  std::vector<bool> writeable = writeable_of(header, frames.size() - 1);
  auto out = recode_with_buffers(frames, writeable,
                                 kind == DataPickle::pickle_family ? "pickle" : "object array");
  if (!out) return std::move(out).error();
  if (!*out) return {};
  frames = std::move(**out);
  // One flag per buffer that stays out of band; a header without the key
  // (Dask before 2024.4) keeps going without it.
  if (kind == DataPickle::pickle_family && header.find("writeable") != nullptr)
    header.set("writeable", writeable_value(writeable));
  changed = true;
  return {};
}

Result<Codec> ObjectRecoder::object_codec(const std::vector<CompressionValue>& codecs) {
  for (const CompressionValue& c : codecs)
    if (c.compresses()) return codec_of(c);
  return Codec::none;
}

Status ObjectRecoder::recode_serialized(SubObject& obj) {
  auto codecs = frame_compression(obj);
  if (!codecs) return std::move(codecs).error();

  if (opt_.layout_cpu) {
    if (auto st = convert_layout(obj); !st) return st;
    codecs = frame_compression(obj);  // false entries may have become nil
    if (!codecs) return std::move(codecs).error();
  }

  bool frames_changed = false;
  std::vector<Bytes> merged;
  if (opt_.pickle_protocol) {
    if (auto st = recode_header_pickles(obj.header); !st) return std::move(st).error();
    const bool error_pickle = is_error_pickle(obj);
    bool has_data_pickle = error_pickle;
    if (auto st = for_each_leaf(obj.header, nullptr, opt_.limits.max_msgpack_depth,
                                [&](Value& leaf, std::vector<Bytes>&, const std::string&) -> Status {
                                  has_data_pickle |= data_pickle_of(leaf) != DataPickle::none;
                                  return {};
                                });
        !st)
      return std::move(st).error();
    if (has_data_pickle) {
      auto raw = decompressed_frames(obj, opt_.limits);
      if (!raw) return std::move(raw).error();
      auto m = merge_frames(obj, std::move(*raw));
      if (!m) return std::move(m).error();
      merged = std::move(*m);
      if (error_pickle && !merged.empty()) {
        auto r = recode_plain(merged[0], "exception pickle");
        if (!r) return std::move(r).error();
        if (*r) {
          merged[0] = Bytes(std::move(**r));
          frames_changed = true;
        }
      }
      // Every leaf's data pickle, on its slice of the merged frames, at
      // every depth; collections get their new frame counts.
      if (auto st = for_each_leaf(obj.header, &merged, opt_.limits.max_msgpack_depth,
                                  [&](Value& leaf, std::vector<Bytes>& frames, const std::string&) {
                                    return recode_data(leaf, frames, frames_changed);
                                  });
          !st)
        return std::move(st).error();
    }
  }

  if (frames_changed) {
    // The input's compressed frames are decoded in `merged` and not read
    // again (only now: had nothing changed, they would go out as they are).
    for (std::size_t i = 0; i < obj.frames.size() && i < codecs->size(); ++i)
      if ((*codecs)[i].compresses()) release(obj.frames[i]);
    auto codec = opt_.codec ? Result<Codec>(*opt_.codec) : object_codec(*codecs);
    if (!codec) return std::move(codec).error();
    return resplit(obj, merged, *codec);
  }
  if (opt_.codec || opt_.frame_codec) return recompress(obj, *codecs, opt_.codec);
  return {};
}

Status ObjectRecoder::convert_layout(SubObject& obj) {
  auto layout = convert_object_to_cpu(obj, &read_class, opt_.limits.max_msgpack_depth);
  if (!layout) return std::move(layout).error();
  for (LayoutResult& r : *layout) {
    if (r.outcome == LayoutOutcome::converted) {
      ++rep_.arrays_converted;
      changed_ = true;
      continue;
    }
    std::string what = r.type + " cannot become a CPU object: " + r.reason;
    // The error names the object by its whole path, which the caller's
    // context (the object's own path) then does not repeat.
    if (!opt_.keep_unconvertible)
      return make_error(Errc::unsupported,
                        what + " (" + option_name("keep_unconvertible", OptionKind::option) + " leaves it as it is)")
          .add_context(obj.path + r.path);
    rep_.unconvertible.push_back(obj.path + r.path + ": " + what);
  }
  return {};
}

bool ObjectRecoder::is_error_pickle(const SubObject& obj) const {
  for (const auto& [frame, part] : error_objects_)
    if (frame == obj.header_frame) return true;
  return false;
}

Status ObjectRecoder::resplit(SubObject& obj, const std::vector<Bytes>& frames, Codec codec) {
  std::vector<Bytes> wire;
  std::vector<CompressionValue> entries;
  std::vector<std::uint64_t> counts;
  const std::uint64_t shard = std::max<std::uint64_t>(opt_.shard_bytes, 1);
  for (const Bytes& f : frames) {
    std::uint64_t pieces = 0;
    for (std::uint64_t at = 0; at < f.size() || (at == 0 && f.size() == 0); at += shard) {
      const std::uint64_t len = std::min<std::uint64_t>(shard, f.size() - at);
      Bytes piece = f.slice(static_cast<std::size_t>(at), static_cast<std::size_t>(len));
      auto c = compress_one(piece, codec);
      if (!c) return std::move(c).error();
      if (c->second.compresses()) ++rep_.frames_recompressed;
      wire.push_back(std::move(c->first));
      entries.push_back(std::move(c->second));
      ++pieces;
      if (f.size() == 0) break;
    }
    counts.push_back(pieces);
  }
  obj.frames = std::move(wire);
  changed_ = true;
  set_resplit_keys(obj, counts, entries);
  return {};
}

Result<std::pair<Bytes, CompressionValue>> ObjectRecoder::compress_one(const Bytes& raw, Codec codec) {
  if (codec == Codec::none) return std::pair<Bytes, CompressionValue>{raw, CompressionValue::nil()};
  auto mc = maybe_compress(codec, raw, opt_.rules, opt_.compress);
  if (!mc) return std::move(mc).error();
  if (!mc->compressed) return std::pair<Bytes, CompressionValue>{raw, CompressionValue::nil()};
  return std::pair<Bytes, CompressionValue>{Bytes(std::move(mc->data)),
                                            CompressionValue::named(std::string(codec_name(codec)))};
}

bool ObjectRecoder::streams(const CompressionValue& entry, const Bytes& frame, Codec target) const {
  if (target == Codec::none) return false;
  auto codec = codec_of(entry);
  if (!codec) return false;
  const auto size = *codec == Codec::none ? std::optional<std::uint64_t>(frame.size()) : declared_size(*codec, frame);
  return !size || *size >= opt_.stream_frame_bytes;
}

Result<std::optional<std::pair<Bytes, CompressionValue>>> ObjectRecoder::link_code(const CompressionValue& entry,
                                                                                   const Bytes& frame) {
  using Coded = std::optional<std::pair<Bytes, CompressionValue>>;
  if (!opt_.frame_codec || entry.kind != CompressionValue::Kind::nil) return Coded{};
  if (frame.size() < opt_.rules.min_size || frame.size() > opt_.rules.max_size) return Coded{};
  const std::optional<FrameCodec> choice = opt_.frame_codec->choose(frame.span());
  if (!choice || choice->codec == Codec::none) return Coded{};
  CompressOptions how = opt_.compress;
  if (choice->codec == Codec::zstd && choice->zstd_level > 0) how.zstd_level = choice->zstd_level;
  const auto start = std::chrono::steady_clock::now();
  auto mc = maybe_compress(choice->codec, frame.span(), opt_.rules, how);
  if (!mc) return std::move(mc).error();
  opt_.frame_codec->compressed(*choice, frame.size(),
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!mc->compressed) return Coded{};
  ++rep_.frames_recompressed;
  ++rep_.frames_link_coded;
  return Coded{std::pair<Bytes, CompressionValue>{Bytes(std::move(mc->data)),
                                                  CompressionValue::named(std::string(codec_name(choice->codec)))}};
}

Status ObjectRecoder::recompress(SubObject& obj, std::vector<CompressionValue> codecs, std::optional<Codec> target_codec) {
  bool any = false;
  for (std::size_t i = 0; i < obj.frames.size(); ++i) {
    const CompressionValue& entry = codecs[i];
    auto action = target_codec ? frame_recode_for(entry, *target_codec, opt_) : Result<FrameRecode>(FrameRecode::keep);
    if (!action) return std::move(action).error().add_context(obj.frame_label(i));
    if (*action == FrameRecode::keep) {
      auto coded = link_code(entry, obj.frames[i]);
      if (!coded) return std::move(coded).error().add_context(obj.frame_label(i));
      if (!*coded) continue;
      obj.frames[i] = std::move((*coded)->first);
      codecs[i] = std::move((*coded)->second);
      changed_ = true;
      any = true;
      continue;
    }
    const Codec target = *target_codec;  // recode: there is a target
    if (streams(entry, obj.frames[i], target)) {
      PagedFrameInput input(obj.frames[i].span(), inside_storage(obj.frames[i]) ? storage_ : nullptr);
      BufferFrameSink sink;
      auto e = recode_frame(input, entry, target, opt_, sink, rep_);
      if (!e) return std::move(e).error().add_context(obj.frame_label(i));
      if (!entry.compresses() && !e->compresses()) continue;  // raw, and raw again
      if (entry.compresses()) release(obj.frames[i]);
      obj.frames[i] = Bytes(std::move(sink.buffer()));
      codecs[i] = std::move(*e);
      changed_ = true;
      any = true;
      continue;
    }
    auto raw = target == Codec::none ? decompress_to_raw(entry, obj.frames[i], opt_.limits)
                                     : decompress_frame(entry, obj.frames[i], opt_.limits);
    if (!raw) return std::move(raw).error().add_context(obj.frame_label(i));
    auto c = compress_one(*raw, target);
    if (!c) return std::move(c).error();
    if (!entry.compresses() && !c->second.compresses()) continue;  // raw, and raw again
    if (entry.compresses()) release(obj.frames[i]);
    obj.frames[i] = std::move(c->first);
    ++rep_.frames_recompressed;
    changed_ = true;
    any = true;
    codecs[i] = std::move(c->second);
  }
  if (any) set_frame_compression(obj, codecs);
  return {};
}

Status ObjectRecoder::recode_pickled(SubObject& obj) {
  const bool recode_pickle = opt_.pickle_protocol.has_value();
  if (!recode_pickle && !opt_.codec) return {};
  auto raw = decompressed_frames(obj, opt_.limits);
  if (!raw) return std::move(raw).error();
  std::vector<Bytes> frames = std::move(*raw);
  bool pickle_same = true;
  if (recode_pickle) {
    Value* po = obj.header.find("pickled-obj");
    if (po == nullptr || !po->is_bin())
      return make_error(Errc::bad_value, "__Pickled__ sub-header has no bin \"pickled-obj\"");
    std::vector<Bytes> all;
    all.push_back(Bytes::copy_of(po->as_bin()));
    all.insert(all.end(), frames.begin(), frames.end());
    // ToPickle sends no writeable flags; inline as bytearray, which gives
    // NumPy the writeable arrays the receiver would have had.
    std::vector<bool> writeable(frames.size(), true);
    auto out = recode_with_buffers(all, writeable, "pickled-obj");
    if (!out) return std::move(out).error();
    if (*out) {
      pickle_same = false;
      *po = Value::bin(Buffer((**out)[0].span()));
      frames.assign((**out).begin() + 1, (**out).end());
    }
  }
  // Always raw: 2022.12 does not decompress __Pickled__ buffers (docs/protocol.md §3.3).
  // An object whose pickle and buffers all stay keeps its header.
  bool obj_changed = frames.size() != obj.frames.size() || !pickle_same;
  for (std::size_t i = 0; i < frames.size() && !obj_changed; ++i)
    obj_changed = frames[i].data() != obj.frames[i].data();
  if (!obj_changed) return {};
  changed_ = true;
  obj.frames = std::move(frames);
  std::vector<CompressionValue> none(obj.frames.size(), CompressionValue::nil());
  set_frame_compression(obj, none);
  return {};
}

void ObjectRecoder::release(const Bytes& frame) {
  if (inside_storage(frame)) storage_->discard(frame.span());
}

bool ObjectRecoder::inside_storage(const Bytes& frame) const {
  if (storage_ == nullptr || frame.size() == 0) return false;
  const ByteSpan all = storage_->span();
  return frame.data() >= all.data() && frame.data() + frame.size() <= all.data() + all.size();
}

// Whether frame 0 may hold one of Dask's error dicts, whose key
// "exception" is_error_dict() needs: a map key is its bytes as they are, so
// a frame 0 without them holds none, and the two walks of the decoded frame
// for them (error_objects, for_each_error_bin: a tenth of a small message's
// recode) are spared. The root is frame 0 decoded (parse_message).
bool may_hold_errors(const Message& message) {
  if (message.raw.frames.empty()) return true;
  const ByteSpan f0 = message.raw.frames[0].bytes().span();
  constexpr std::string_view key = "exception";
  return f0.size() >= key.size() && ::memmem(f0.data(), f0.size(), key.data(), key.size()) != nullptr;
}

bool recodes_field_pickles(const Message& message, const TranscodeOptions& options) {
  return options.pickle_protocol.has_value() && !message.is_handshake() && !message.raw.frames.empty() &&
         may_hold_field_pickles(message.raw.frames[0].bytes().span());
}

Result<bool> recode_root_pickles(ObjectRecoder& recoder, msgpack::Value& root, bool errors, bool fields) {
  bool changed = false;
  std::optional<Error> failed;
  auto recode = [&](msgpack::Value& v, const std::string& what) {
    if (failed) return;
    auto r = recoder.recode_plain(v.as_bin(), what.c_str());
    if (!r) {
      failed = std::move(r).error().add_context("frame 0");
    } else if (*r) {
      v = msgpack::Value::bin(std::move(**r));
      changed = true;
    }
  };
  if (errors) {
    for_each_error_bin(root, [&](ErrorPart part, msgpack::Value& v) {
      recode(v, part == ErrorPart::exception ? "exception pickle" : "traceback pickle");
    });
  }
  if (fields) {
    for_each_field_pickle(root, [&](std::string_view op, std::string_view key, msgpack::Value& v) {
      std::string what(op);
      what += ' ';
      what += key;
      what += " pickle";
      recode(v, what);
    });
  }
  if (failed) return std::move(*failed);
  return changed;
}

}  // namespace detail
}  // namespace daskcaps
