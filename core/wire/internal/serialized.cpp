#include "core/wire/internal/serialized.h"

#include <algorithm>

namespace daskcaps {

Result<std::vector<CompressionValue>> frame_compression(const SubObject& obj) {
  std::vector<CompressionValue> out(obj.frames.size(), CompressionValue::nil());
  const msgpack::Value* list = obj.header.find("compression");
  if (list == nullptr || list->is_nil()) return out;
  if (!list->is_array())
    return make_error(Errc::bad_value, "sub-header \"compression\" is a msgpack " +
                                           std::string(msgpack::type_name(list->type())) +
                                           ", not an array");
  const auto& items = list->as_array();
  if (items.size() != obj.frames.size())
    return make_error(Errc::bad_value, "sub-header \"compression\" has " +
                                           std::to_string(items.size()) + " entries for " +
                                           std::to_string(obj.frames.size()) + " frames");
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto cv = CompressionValue::from_msgpack(items[i]);
    if (!cv)
      return make_error(Errc::bad_value, "sub-header \"compression\" entry " + std::to_string(i) +
                                             " is a msgpack " +
                                             std::string(msgpack::type_name(items[i].type())));
    out[i] = std::move(*cv);
  }
  return out;
}

void set_frame_compression(SubObject& obj, std::span<const CompressionValue> codecs) {
  msgpack::Array list;
  list.reserve(codecs.size());
  for (const CompressionValue& c : codecs) list.push_back(c.to_msgpack());
  obj.header.set("compression", msgpack::Value::array(std::move(list)));
}

Result<Codec> codec_of(const CompressionValue& value) {
  if (!value.compresses()) return Codec::none;
  auto c = codec_from_name(value.name);
  if (!c || *c == Codec::none)
    return make_error(Errc::unknown_codec, "codec \"" + value.name + "\" is not one this build decodes");
  return *c;
}

Result<Bytes> decompress_frame(const CompressionValue& value, const Bytes& frame,
                               const Limits& limits) {
  auto codec = codec_of(value);
  if (!codec) return std::move(codec).error();
  if (*codec == Codec::none) return frame;
  auto out = decompress(*codec, frame, limits.max_decompressed_bytes);
  if (!out) return std::move(out).error();
  return Bytes(std::move(*out));
}

Result<std::vector<Bytes>> decompressed_frames(const SubObject& obj, const Limits& limits) {
  auto codecs = frame_compression(obj);
  if (!codecs) return std::move(codecs).error();
  // Each frame is capped by max_decompressed_bytes; the object as a whole
  // by max_message_bytes, so many small frames that each claim 2 GiB cannot
  // add up to an allocation the message limit would have refused.
  std::vector<Bytes> out;
  out.reserve(obj.frames.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < obj.frames.size(); ++i) {
    Limits frame_limits = limits;
    const std::uint64_t left = limits.max_message_bytes - std::min(total, limits.max_message_bytes);
    frame_limits.max_decompressed_bytes = std::min(limits.max_decompressed_bytes, left);
    auto f = decompress_frame((*codecs)[i], obj.frames[i], frame_limits);
    if (!f)
      return std::move(f).error().add_context(obj.frame_label(i));
    total += f->size();
    out.push_back(std::move(*f));
  }
  return out;
}

namespace {
Result<std::vector<std::uint64_t>> uint_list(const msgpack::Value& v, const char* key) {
  if (!v.is_array())
    return make_error(Errc::bad_value, std::string("sub-header \"") + key + "\" is not an array");
  std::vector<std::uint64_t> out;
  out.reserve(v.as_array().size());
  for (const auto& e : v.as_array()) {
    auto u = e.to_uint64();
    if (!u)
      return make_error(Errc::bad_value,
                        std::string("sub-header \"") + key + "\" holds a non-integer or negative value");
    out.push_back(*u);
  }
  return out;
}
}  // namespace

Result<std::optional<SplitLayout>> split_layout(const SubObject& obj) {
  const msgpack::Value* counts = obj.header.find("split-num-sub-frames");
  const msgpack::Value* offsets = obj.header.find("split-offsets");
  if (counts == nullptr && offsets == nullptr) return std::optional<SplitLayout>{};
  if (counts == nullptr || offsets == nullptr)
    return make_error(Errc::bad_value,
                      "sub-header has only one of \"split-num-sub-frames\" and \"split-offsets\"");
  auto c = uint_list(*counts, "split-num-sub-frames");
  if (!c) return std::move(c).error();
  auto o = uint_list(*offsets, "split-offsets");
  if (!o) return std::move(o).error();
  if (c->size() != o->size())
    return make_error(Errc::bad_value, "\"split-num-sub-frames\" and \"split-offsets\" differ in length");
  const std::uint64_t n = obj.frames.size();
  for (std::size_t i = 0; i < c->size(); ++i) {
    if ((*o)[i] > n || (*c)[i] > n - (*o)[i])
      return make_error(Errc::length_out_of_range,
                        "split range " + std::to_string(i) + " (offset " + std::to_string((*o)[i]) +
                            ", " + std::to_string((*c)[i]) + " shards) runs past the " +
                            std::to_string(n) + " frames of the object");
  }
  return std::optional<SplitLayout>(SplitLayout{std::move(*c), std::move(*o)});
}

Result<std::vector<Bytes>> merge_frames(const SubObject& obj, std::vector<Bytes> decompressed) {
  auto layout = split_layout(obj);
  if (!layout) return std::move(layout).error();
  if (!*layout) return decompressed;
  std::vector<Bytes> out;
  out.reserve((*layout)->counts.size());
  for (std::size_t i = 0; i < (*layout)->counts.size(); ++i) {
    const std::size_t off = static_cast<std::size_t>((*layout)->offsets[i]);
    const std::size_t cnt = static_cast<std::size_t>((*layout)->counts[i]);
    if (cnt == 1) {
      out.push_back(decompressed[off]);
      continue;
    }
    std::size_t total = 0;
    for (std::size_t j = off; j < off + cnt; ++j) total += decompressed[j].size();
    Buffer merged;
    merged.reserve(total);
    for (std::size_t j = off; j < off + cnt; ++j)
      merged.append(decompressed[j].data(), decompressed[j].size());
    out.emplace_back(std::move(merged));
  }
  return out;
}

}  // namespace daskcaps
