#include "daskcaps/recode/describe.h"
#include "core/wire/internal/serialized.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "core/recode/detail/describe_parts.h"
#include "core/wire/internal/window_codec.h"
#include "daskcaps/pickle/pickle.h"
#include "core/recode/internal/error_pickles.h"

namespace daskcaps {

namespace {

std::optional<std::vector<std::int64_t>> int_list(const msgpack::Value* v) {
  if (v == nullptr || !v->is_array()) return std::nullopt;
  std::vector<std::int64_t> out;
  for (const auto& e : v->as_array()) {
    auto i = e.to_int64();
    if (!i) return std::nullopt;
    out.push_back(*i);
  }
  return out;
}

// Element size of a numpy type string such as "<f8", "|S5", "<U3", "<M8[ns]".
std::optional<std::int64_t> itemsize_of(std::string_view typestr) {
  if (typestr.size() < 3) return std::nullopt;
  const char kind = typestr[1];
  std::int64_t n = 0;
  std::size_t i = 2;
  for (; i < typestr.size() && typestr[i] >= '0' && typestr[i] <= '9'; ++i) {
    n = n * 10 + (typestr[i] - '0');
    if (n > (std::int64_t{1} << 40)) return std::nullopt;
  }
  if (i == 2) return std::nullopt;
  return kind == 'U' ? n * 4 : n;  // <U counts characters of 4 bytes
}

std::string order_of(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& strides,
                     std::optional<std::int64_t> itemsize) {
  if (shape.size() != strides.size() || !itemsize) return "strided";
  for (std::int64_t s : strides)
    if (s == 0) return "broadcast";
  auto contiguous = [&](bool c_order) {
    std::int64_t expect = *itemsize;
    for (std::size_t k = 0; k < shape.size(); ++k) {
      const std::size_t i = c_order ? shape.size() - 1 - k : k;
      if (shape[i] > 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  };
  const bool c = contiguous(true);
  const bool f = contiguous(false);
  if (c && f) return "C+F";
  if (c) return "C";
  if (f) return "F";
  return "strided";
}

// `base`: absolute offset of the pickle's first byte when it sits as it is
// in the input (kNoOffset when it was decompressed, merged or is inside a
// msgpack header), so that errors point at the right byte.
void add_pickle(ObjectReport& out, std::string where, ByteSpan bytes, const DescribeOptions& options,
                std::uint64_t base = kNoOffset) {
  PickleReport p;
  p.where = std::move(where);
  auto summary = pickle::summarize(bytes, options.limits);
  if (summary) {
    p.protocol = summary->protocol;
    p.globals = summary->globals;
    p.out_of_band_buffers = summary->out_of_band_buffers;
    if (options.disassemble) {
      auto dis = pickle::disassemble(bytes, options.limits);
      p.disassembly = dis ? std::move(*dis) : "unreadable: " + rebase_error(dis.error(), base).message();
    }
  } else {
    const Error e = rebase_error(summary.error(), base);
    p.error = e.message();
    out.problems.push_back(
        diagnostic_from_error(DiagnosticKind::pickle_unreadable, e, p.where + ": pickle does not parse: "));
  }
  out.pickles.push_back(std::move(p));
}

std::string class_name_of(ByteSpan type_serialized, const DescribeOptions& options, ObjectReport& out) {
  auto ref = pickle::class_reference(type_serialized, options.limits);
  if (!ref) {
    // The pickle sits inside a msgpack header: its offsets count from the
    // pickle's start, so none is absolute.
    Diagnostic d = diagnostic_from_error(DiagnosticKind::type_unreadable, ref.error(), "type-serialized: ");
    d.offset = kNoOffset;
    out.problems.push_back(std::move(d));
    return "";
  }
  return ref->first.empty() ? ref->second : ref->first + "." + ref->second;
}

bool is_gpu_type(std::string_view type) {
  for (std::string_view prefix : {"cupy.", "cupy", "rmm.", "numba.cuda", "cudf."}) {
    if (type.substr(0, prefix.size()) == prefix &&
        (prefix.back() == '.' || type.size() == prefix.size() || type[prefix.size()] == '.'))
      return true;
  }
  return false;
}

// An object's original frames (its wire frames decompressed and the split
// undone): every frame's size, and the bytes of those the report reads
// (the pickles the serializer keeps in its data frames). Only those are
// kept: the others were measured in windows (core/wire/internal/window_codec.h).
// A planning pass, without any bytes, records which frames are read.
struct OriginalFrames {
  std::vector<std::uint64_t> sizes;
  std::vector<std::optional<Bytes>> bytes;  // parallel to sizes; nullopt: not kept
  std::set<std::size_t>* wanted = nullptr;  // planning: the frames read
};

// Frames [first, first + count) of an object's original frames: all of
// them, or a collection element's.
class FrameView {
 public:
  FrameView(const OriginalFrames& all, std::size_t first, std::size_t count)
      : all_(all), first_(first), count_(count) {}
  std::size_t size() const { return count_; }
  std::uint64_t length(std::size_t i) const { return all_.sizes[first_ + i]; }
  FrameView slice(std::size_t at, std::size_t n) const { return FrameView(all_, first_ + at, n); }
  /// The bytes of frame i, to read a pickle from; null while planning
  /// (which records the frame as read).
  const Bytes* bytes(std::size_t i) const {
    if (all_.wanted != nullptr) all_.wanted->insert(first_ + i);
    const std::optional<Bytes>& b = all_.bytes[first_ + i];
    return b ? &*b : nullptr;
  }

 private:
  const OriginalFrames& all_;
  std::size_t first_, count_;
};

// Fills serializer, type, layout, array, pickles and elements from a
// sub-header and the object's original frames, when they are available.
// `header_at`: absolute offset of the sub-header frame, for its problems.
void describe_header(const msgpack::Value& header, const FrameView* frames, ObjectReport& out,
                     const DescribeOptions& options, std::uint64_t data_base = kNoOffset,
                     std::uint64_t header_at = kNoOffset) {
  if (const auto* s = header.find("serializer"); s != nullptr && s->is_str())
    out.serializer = s->as_str();

  const msgpack::Value* ts = header.find("type-serialized");
  if (ts != nullptr && ts->is_bin()) {
    add_pickle(out, "type-serialized", ts->as_bin(), options);
    std::string name = class_name_of(ts->as_bin(), options, out);
    if (!name.empty()) out.type = name;
  } else if (ts != nullptr && ts->is_str()) {
    out.type = ts->as_str();  // collections name their type as a plain string
  }
  if (!out.type) {
    if (const auto* t = header.find("type"); t != nullptr && t->is_str()) out.type = t->as_str();
  }

  // Collections (docs/protocol.md §3.6): one sub-header per element.
  if (const auto* ic = header.find("is-collection"); ic != nullptr && ic->is_bool() && ic->as_bool()) {
    out.collection = true;
    const msgpack::Value* subs = header.find("sub-headers");
    auto lengths = int_list(header.find("frame-lengths"));
    if (subs == nullptr || !subs->is_array()) {
      out.problems.push_back(
          Diagnostic{DiagnosticKind::bad_sub_header, header_at, "collection without a \"sub-headers\" list"});
      return;
    }
    std::size_t at = 0;
    const auto& items = subs->as_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      ObjectReport element;
      element.path = out.path + "[" + std::to_string(i) + "]";
      element.placeholder = out.placeholder;
      element.header_frame = out.header_frame;
      std::optional<FrameView> element_frames;
      if (frames != nullptr && lengths && i < lengths->size() && (*lengths)[i] >= 0 &&
          static_cast<std::size_t>((*lengths)[i]) <= frames->size() - std::min(at, frames->size())) {
        const std::size_t n = static_cast<std::size_t>((*lengths)[i]);
        element_frames.emplace(frames->slice(at, n));
        at += n;
        std::uint64_t raw = 0;
        for (std::size_t k = 0; k < n; ++k) raw += element_frames->length(k);
        element.raw_bytes = raw;
      }
      if (const auto* key = items[i].find("key"); key != nullptr)
        element.path = out.path + "[" + msgpack::repr(*key, 40) + "]";
      describe_header(items[i], element_frames ? &*element_frames : nullptr, element, options, kNoOffset, header_at);
      out.elements.push_back(std::move(element));
    }
    return;
  }

  const std::string serializer = out.serializer.value_or("");
  const std::string type = out.type.value_or("");
  const msgpack::Value* sub = header.find("sub-header");

  if (serializer == "cuda" || is_gpu_type(type)) {
    out.layout = "gpu";
    if (sub != nullptr) out.array = cupy_layout(*sub);
  } else if (sub != nullptr && (type == "numpy.ndarray" || type.rfind("numpy.", 0) == 0)) {
    out.array = numpy_layout(*sub);
    if (out.array) out.layout = "cpu";
    if (out.array && out.array->object_pickle && frames != nullptr && frames->size() > 0)
      if (const Bytes* b = frames->bytes(0)) add_pickle(out, "object array data", *b, options, data_base);
    if (const auto* dt = sub->find("dtype"); dt != nullptr && dt->is_array() &&
                                             dt->as_array().size() == 2 &&
                                             dt->as_array()[1].is_bin())
      add_pickle(out, "dtype", dt->as_array()[1].as_bin(), options);
  }

  if (serializer == "pickle" && frames != nullptr && frames->size() > 0)
    if (const Bytes* b = frames->bytes(0)) add_pickle(out, "pickle data", *b, options, data_base);
}

void finish_pickles(ObjectReport& out) {
  std::set<std::string> seen;
  for (const PickleReport& p : out.pickles) {
    out.pickle_protocol = std::max(out.pickle_protocol, p.protocol);
    for (const std::string& g : p.globals)
      if (seen.insert(g).second) out.globals.push_back(g);
  }
  for (ObjectReport& e : out.elements) {
    finish_pickles(e);
    out.pickle_protocol = std::max(out.pickle_protocol, e.pickle_protocol);
    for (const std::string& g : e.globals)
      if (seen.insert(g).second) out.globals.push_back(g);
  }
}

// A problem of a part of the object that sits at `at` in the input (a wire
// frame, the sub-header frame): the error's own offset when it has one.
void problem(ObjectReport& out, DiagnosticKind kind, const Error& e, std::uint64_t at,
             std::string_view prefix = {}) {
  Diagnostic d = diagnostic_from_error(kind, e, prefix);
  if (!d.has_offset()) d.offset = at;
  out.problems.push_back(std::move(d));
}

// The size a frame declares in its own header (core/wire/codec.h
// declared_size), read from memory or from the message's store; nullopt
// when it declares none (zlib, a zstd frame without a content size) or its
// codec is unknown.
std::optional<std::uint64_t> declared_of(const Message& message, std::size_t index, const CompressionValue& cv) {
  auto codec = codec_of(cv);
  if (!codec) return std::nullopt;
  if (*codec == Codec::none) return message.raw.frames[index].size();
  if (!message.raw.frames[index].is_stored()) return declared_size(*codec, message.raw.frames[index].bytes());
  auto in = message.raw.frame_input(index);
  std::uint8_t head[18];
  std::size_t have = 0;
  while (have < sizeof head && have < in->size()) {
    auto p = in->read(have, sizeof head - have);
    if (!p || p->empty()) return std::nullopt;
    std::memcpy(head + have, p->data(), p->size());
    have += p->size();
  }
  return declared_size(*codec, ByteSpan(head, have));
}

// The wire frames of `obj` whose bytes the report reads: those of the
// original frames that describe_header reads, found by a pass without
// bytes, and an error message's exception or traceback pickle.
std::vector<bool> frames_read(const SubObject& obj, const std::optional<SplitLayout>& layout,
                              std::optional<ErrorPart> error_part, const DescribeOptions& options) {
  std::vector<bool> keep(obj.frames.size(), false);
  std::set<std::size_t> wanted;
  OriginalFrames plan;
  const std::size_t count = layout ? layout->counts.size() : obj.frames.size();
  plan.sizes.assign(count, 0);
  plan.bytes.assign(count, std::nullopt);
  plan.wanted = &wanted;
  const FrameView all(plan, 0, count);
  ObjectReport scratch;
  scratch.path = obj.path;
  describe_header(obj.header, &all, scratch, options);
  if (count > 0 && error_part) wanted.insert(0);
  for (std::size_t m : wanted) {
    if (!layout) {
      keep[m] = true;
      continue;
    }
    const std::size_t off = static_cast<std::size_t>(layout->offsets[m]);
    for (std::size_t j = off; j < off + layout->counts[m]; ++j) keep[j] = true;
  }
  return keep;
}

ObjectReport describe_object(const Message& message, const SubObject& obj, std::optional<ErrorPart> error_part,
                             const DescribeOptions& options) {
  ObjectReport out;
  out.path = obj.path;
  out.placeholder = std::string(placeholder_key(obj.kind));
  out.header_frame = obj.header_frame;

  auto codecs = frame_compression(obj);
  if (!codecs) problem(out, DiagnosticKind::bad_sub_header, codecs.error(), obj.header_offset);
  const std::size_t n = obj.frames.size();
  const bool serialized = obj.kind == Placeholder::serialized;
  auto layout = serialized ? split_layout(obj) : Result<std::optional<SplitLayout>>(std::optional<SplitLayout>());

  // Which frames keep their decoded bytes.
  std::vector<bool> keep(n, true);
  if (codecs) {
    std::uint64_t total = 0;
    bool known = true;
    for (std::size_t i = 0; i < n && known && total <= options.decode_whole_bytes; ++i) {
      auto d = declared_of(message, obj.header_frame + 1 + i, (*codecs)[i]);
      known = d.has_value();
      total += d.value_or(0);
    }
    if (!known || total > options.decode_whole_bytes)
      keep = serialized && layout ? frames_read(obj, *layout, error_part, options) : std::vector<bool>(n, false);
  }

  std::vector<std::uint64_t> raw_sizes(n, 0);
  std::vector<std::optional<Bytes>> kept(n);
  bool all_decoded = codecs.ok();
  std::uint64_t raw_total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t index = obj.header_frame + 1 + i;
    FrameReport fr;
    fr.index = index;
    fr.wire_bytes = message.raw.frames[index].size();
    out.wire_bytes += fr.wire_bytes;
    if (codecs) {
      const CompressionValue& cv = (*codecs)[i];
      fr.compression = cv.to_string();
      // Each frame under the per-frame limit, the object's frames together
      // under the message limit (as decompressed_frames does for transcode):
      // many small frames that each make the most allowed cannot add up past
      // what a message may hold.
      Limits frame_limits = options.limits;
      frame_limits.max_decompressed_bytes =
          std::min(options.limits.max_decompressed_bytes,
                   options.limits.max_message_bytes - std::min(raw_total, options.limits.max_message_bytes));
      Result<std::uint64_t> size{std::uint64_t{0}};
      auto codec = codec_of(cv);
      const std::optional<std::uint64_t> declared = declared_of(message, index, cv);
      if (!codec) {
        size = codec.error();
      } else if (*codec == Codec::none) {
        size = fr.wire_bytes;
        if (keep[i]) {
          auto bytes = message.raw.load_frame(index);
          if (bytes) kept[i] = std::move(*bytes);
          else size = std::move(bytes).error();
        }
      } else if (keep[i] || (!message.raw.frames[index].is_stored() && declared && *declared <= options.decode_whole_bytes)) {
        auto bytes = message.raw.load_frame(index);
        auto raw = bytes ? decompress_frame(cv, *bytes, frame_limits) : Result<Bytes>(std::move(bytes).error());
        if (raw) {
          size = raw->size();
          if (keep[i]) kept[i] = std::move(*raw);
        } else {
          size = std::move(raw).error();
        }
      } else {
        auto in = message.raw.frame_input(index);
        size = measure_frame(*codec, *in, frame_limits.max_decompressed_bytes);
      }
      if (size) {
        fr.raw_bytes = *size;
        raw_sizes[i] = *size;
        raw_total += *size;
      } else {
        problem(out, DiagnosticKind::codec_failed, size.error(),
                i < obj.frame_offsets.size() ? obj.frame_offsets[i] : kNoOffset, obj.frame_label(i) + ": ");
        all_decoded = false;
      }
    }
    out.frames.push_back(std::move(fr));
  }
  if (all_decoded) out.raw_bytes = raw_total;

  if (!serialized) {
    out.serializer = std::nullopt;
    const msgpack::Value* po = obj.header.find("pickled-obj");
    if (po != nullptr && po->is_bin()) {
      add_pickle(out, "pickled-obj", po->as_bin(), options);
    } else {
      out.problems.push_back(Diagnostic{DiagnosticKind::bad_sub_header, obj.header_offset,
                                        "__Pickled__ sub-header has no bin \"pickled-obj\""});
    }
    finish_pickles(out);
    return out;
  }

  if (!layout) {
    problem(out, DiagnosticKind::bad_split, layout.error(), obj.header_offset);
  } else {
    out.split = *layout;
  }
  // The original frames: shards concatenated per the split layout (as
  // merge_frames does), each with its size, and its bytes where kept.
  std::optional<OriginalFrames> merged;
  if (all_decoded && layout) {
    OriginalFrames m;
    if (!*layout) {
      m.sizes = raw_sizes;
      m.bytes = std::move(kept);
    } else {
      for (std::size_t r = 0; r < (*layout)->counts.size(); ++r) {
        const std::size_t off = static_cast<std::size_t>((*layout)->offsets[r]);
        const std::size_t cnt = static_cast<std::size_t>((*layout)->counts[r]);
        std::uint64_t size = 0;
        bool have = true;
        for (std::size_t j = off; j < off + cnt; ++j) {
          size += raw_sizes[j];
          have = have && kept[j].has_value();
        }
        m.sizes.push_back(size);
        if (!have) {
          m.bytes.emplace_back();
        } else if (cnt == 1) {
          m.bytes.push_back(kept[off]);
        } else {
          Buffer joined;
          joined.reserve(static_cast<std::size_t>(size));
          for (std::size_t j = off; j < off + cnt; ++j) joined.append(kept[j]->data(), kept[j]->size());
          m.bytes.emplace_back(Bytes(std::move(joined)));
        }
      }
    }
    merged = std::move(m);
  }
  // Where the first original frame starts in the input, when it is one raw
  // wire frame (its pickle's offsets can then be made absolute).
  std::uint64_t data_base = kNoOffset;
  if (codecs && !obj.frames.empty()) {
    std::size_t first = 0, count = obj.frames.size() == 0 ? 0 : 1;
    if (layout && *layout && !(*layout)->counts.empty()) {
      first = static_cast<std::size_t>((*layout)->offsets[0]);
      count = static_cast<std::size_t>((*layout)->counts[0]);
    }
    if (count == 1 && first < obj.frame_offsets.size() && !(*codecs)[first].compresses())
      data_base = obj.frame_offsets[first];
  }
  std::optional<FrameView> view;
  if (merged) view.emplace(*merged, 0, merged->sizes.size());
  describe_header(obj.header, view ? &*view : nullptr, out, options, data_base, obj.header_offset);

  // The exceptions and tracebacks of error messages are pickles sent as
  // `bytes` (core/recode/internal/error_pickles.h).
  if (view && view->size() > 0 && error_part)
    if (const Bytes* b = view->bytes(0)) add_pickle(out, std::string(to_string(*error_part)) + " pickle", *b, options, data_base);
  finish_pickles(out);
  return out;
}

}  // namespace

std::optional<ArrayLayout> numpy_layout(const msgpack::Value& sub) {
  if (!sub.is_map()) return std::nullopt;
  ArrayLayout a;
  a.library = "numpy";
  if (const auto* p = sub.find("pickle"); p != nullptr && p->is_bool() && p->as_bool()) {
    a.object_pickle = true;
    a.dtype = "object";
    a.order = "pickle";
    return a;
  }
  const msgpack::Value* dt = sub.find("dtype");
  if (dt == nullptr || !dt->is_array() || dt->as_array().size() != 2) return std::nullopt;
  const auto& flag = dt->as_array()[0];
  const auto& value = dt->as_array()[1];
  std::optional<std::int64_t> itemsize;
  if (flag.to_int64() == 0 && value.is_str()) {
    a.dtype = value.as_str();
    itemsize = itemsize_of(a.dtype);
  } else if (flag.to_int64() == 0 && value.is_array()) {
    a.dtype = "descr " + msgpack::repr(value, 120);
  } else if (flag.to_int64() == 1 && value.is_bin()) {
    a.dtype = "pickled dtype";
  } else {
    return std::nullopt;
  }
  auto shape = int_list(sub.find("shape"));
  auto strides = int_list(sub.find("strides"));
  if (!shape || !strides) return std::nullopt;
  auto broadcast = int_list(sub.find("broadcast_to"));
  a.shape = broadcast ? *broadcast : *shape;
  a.strides = *strides;
  a.order = order_of(*shape, *strides, itemsize);
  if (const auto* w = sub.find("writeable"); w != nullptr && w->is_array() && !w->as_array().empty() &&
                                             w->as_array()[0].is_bool())
    a.writeable = w->as_array()[0].as_bool();
  return a;
}

std::optional<ArrayLayout> cupy_layout(const msgpack::Value& cai) {
  if (!cai.is_map()) return std::nullopt;
  const msgpack::Value* ts = cai.find("typestr");
  auto shape = int_list(cai.find("shape"));
  if (ts == nullptr || !ts->is_str() || !shape) return std::nullopt;
  ArrayLayout a;
  a.library = "cupy";
  a.dtype = ts->as_str();
  a.shape = *shape;
  auto strides = int_list(cai.find("strides"));
  if (strides) a.strides = *strides;
  a.order = strides ? order_of(a.shape, a.strides, itemsize_of(a.dtype)) : "C";
  return a;
}

MessageReport describe_message(const Message& message, const DescribeOptions& options) {
  MessageReport r;
  for (std::size_t i = 0; i < message.raw.frames.size(); ++i) r.frame_sizes.push_back(message.raw.frames[i].size());
  r.op = message.op();
  r.batched_ops = message.batched_ops();
  if (message.is_handshake()) {
    auto h = handshake_from_msgpack(message.root);
    if (h) r.handshake = std::move(*h);
  }
  std::map<std::size_t, ErrorPart> errors;
  for (const auto& [frame, part] : error_objects(message)) errors.emplace(frame, part);
  for (const SubObject& obj : message.objects) {
    auto it = errors.find(obj.header_frame);
    r.objects.push_back(
        describe_object(message, obj, it == errors.end() ? std::nullopt : std::optional(it->second), options));
  }
  r.loose_frames = message.loose_frames;
  r.errors = describe_errors(message, options);
  return r;
}

}  // namespace daskcaps
