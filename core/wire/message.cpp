#include "daskcaps/wire/message.h"

#include <algorithm>

#include "core/wire/internal/message_layout.h"
#include "daskcaps/wire/frames.h"

namespace daskcaps {

std::string_view placeholder_key(Placeholder p) {
  return p == Placeholder::serialized ? "__Serialized__" : "__Pickled__";
}

std::optional<std::string> Message::op() const {
  const msgpack::Value* op = root.find("op");
  if (op == nullptr || !op->is_str()) return std::nullopt;
  return op->as_str();
}

std::vector<std::string> Message::batched_ops() const {
  std::vector<std::string> out;
  if (!root.is_array()) return out;
  for (const auto& item : root.as_array()) {
    const msgpack::Value* op = item.find("op");
    if (op != nullptr && op->is_str()) out.push_back(op->as_str());
  }
  return out;
}

bool Message::is_handshake() const {
  if (!root.is_map() || root.find("op") != nullptr) return false;
  return root.find("pickle-protocol") != nullptr || root.find("compression") != nullptr;
}

std::string SubObject::frame_label(std::size_t i) const {
  std::string out = "frame " + std::to_string(header_frame + 1 + i);
  if (i < frame_offsets.size() && frame_offsets[i] != kNoOffset) out += " @" + hex_offset(frame_offsets[i]);
  return out;
}

Status load_stored_frames(Message& message) {
  if (!message.raw.any_stored()) return ok_status();
  if (Status s = message.raw.load_stored_frames(); !s) return s;
  for (SubObject& obj : message.objects)
    for (std::size_t i = 0; i < obj.frames.size(); ++i) obj.frames[i] = message.raw.frames[obj.header_frame + 1 + i].bytes();
  return ok_status();
}

namespace {

struct Found {
  Placeholder kind;
  std::uint64_t index;
  std::string path;
};

std::string key_repr(const msgpack::Value& key) {
  if (key.is_str()) return key.as_str();
  return msgpack::repr(key, 40);
}

// Where the walk is: a map key, or an array index (key == nullptr).
struct PathStep {
  const msgpack::Value* key;
  std::size_t index;
};

// "tasks['x'][1]": the steps as the path of a placeholder is shown.
std::string path_text(const std::vector<PathStep>& steps) {
  if (steps.empty()) return "<root>";
  std::string out;
  for (const PathStep& s : steps) {
    if (s.key == nullptr) {
      out += '[';
      out += std::to_string(s.index);
      out += ']';
    } else if (out.empty()) {
      out = key_repr(*s.key);
    } else {
      out += '[';
      out += msgpack::repr(*s.key, 40);
      out += ']';
    }
  }
  return out;
}

// Depth is bounded by the msgpack decoder's limit, so recursion is safe. The
// path is written out only for the placeholders found.
void find_placeholders(const msgpack::Value& v, std::vector<PathStep>& path, std::vector<Found>& out) {
  if (v.is_map()) {
    for (Placeholder p : {Placeholder::serialized, Placeholder::pickled}) {
      const msgpack::Value* idx = v.find(placeholder_key(p));
      if (idx == nullptr) continue;
      auto k = idx->to_uint64();
      if (k && *k > 0) {
        out.push_back({p, *k, path_text(path)});
        return;
      }
    }
    for (const auto& [key, val] : v.as_map()) {
      if (!val.is_map() && !val.is_array()) continue;
      path.push_back({&key, 0});
      find_placeholders(val, path, out);
      path.pop_back();
    }
  } else if (v.is_array()) {
    const auto& items = v.as_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_map() && !items[i].is_array()) continue;
      path.push_back({nullptr, i});
      find_placeholders(items[i], path, out);
      path.pop_back();
    }
  }
}

// Rewrites placeholder indices in place; `next` yields the new index of the
// object whose old index is given.
template <typename F>
void rewrite_placeholders(msgpack::Value& v, F&& new_index) {
  if (v.is_map()) {
    for (Placeholder p : {Placeholder::serialized, Placeholder::pickled}) {
      msgpack::Value* idx = v.find(placeholder_key(p));
      if (idx == nullptr) continue;
      auto k = idx->to_uint64();
      if (k && *k > 0) {
        *idx = msgpack::Value::uinteger(new_index(*k));
        return;
      }
    }
    for (auto& [key, val] : v.as_map()) rewrite_placeholders(val, new_index);
  } else if (v.is_array()) {
    for (auto& item : v.as_array()) rewrite_placeholders(item, new_index);
  }
}

}  // namespace

std::vector<std::pair<Placeholder, std::uint64_t>> placeholder_frames(const msgpack::Value& root) {
  std::vector<PathStep> path;
  std::vector<Found> found;
  find_placeholders(root, path, found);
  std::vector<std::pair<Placeholder, std::uint64_t>> out;
  out.reserve(found.size());
  for (const Found& f : found) out.emplace_back(f.kind, f.index);
  return out;
}

Result<Message> parse_message(std::vector<Bytes> frames, const Limits& limits,
                              std::span<const std::uint64_t> frame_offsets) {
  return parse_message(RawMessage::of(std::move(frames)), limits, frame_offsets);
}

Result<Message> parse_message(RawMessage raw, const Limits& limits, std::span<const std::uint64_t> frame_offsets) {
  const std::vector<WireFrame>& frames = raw.frames;
  auto offset_of = [&](std::size_t i) -> std::uint64_t {
    return i < frame_offsets.size() ? frame_offsets[i] : kNoOffset;
  };
  auto base_of = [&](std::size_t i) -> std::uint64_t {
    return i < frame_offsets.size() ? frame_offsets[i] : 0;
  };
  if (frames.empty()) return make_error(Errc::bad_value, "message has no frames");

  auto in_memory = [&](std::size_t i) -> Status {
    if (!frames[i].is_stored()) return ok_status();
    return make_error(Errc::bad_value, "frame " + std::to_string(i) + " is parsed but was left in its file",
                      offset_of(i));
  };
  if (Status s = in_memory(0); !s) return std::move(s).error();
  Message msg;
  auto root = msgpack::decode_all(frames[0].bytes(), limits, base_of(0));
  if (!root) return std::move(root).error().add_context("frame 0");
  msg.root = std::move(*root);

  std::vector<Found> found;
  std::vector<PathStep> path;
  find_placeholders(msg.root, path, found);
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.index < b.index; });

  std::vector<bool> claimed(frames.size(), false);
  claimed[0] = true;
  for (const Found& f : found) {
    const std::string where = std::string(placeholder_key(f.kind)) + " at " + f.path;
    if (f.index >= frames.size())
      return make_error(Errc::length_out_of_range,
                        where + " points at frame " + std::to_string(f.index) + " of " +
                            std::to_string(frames.size()),
                        offset_of(0));
    const std::size_t k = static_cast<std::size_t>(f.index);
    if (claimed[k])
      return make_error(Errc::length_out_of_range,
                        where + " points at frame " + std::to_string(k) +
                            ", which another object already holds",
                        offset_of(k));
    if (Status s = in_memory(k); !s) return std::move(s).error();
    auto header = msgpack::decode_all(frames[k].bytes(), limits, base_of(k));
    if (!header) return std::move(header).error().add_context("frame " + std::to_string(k));
    if (!header->is_map())
      return make_error(Errc::bad_value,
                        "frame " + std::to_string(k) + ": sub-header of " + where + " is a msgpack " +
                            std::string(msgpack::type_name(header->type())) + ", not a map",
                        offset_of(k));
    const msgpack::Value* nsub = header->find("num-sub-frames");
    auto m = nsub ? nsub->to_uint64() : std::nullopt;
    if (!m)
      return make_error(Errc::bad_value,
                        "frame " + std::to_string(k) + ": sub-header of " + where +
                            " has no integer \"num-sub-frames\"",
                        offset_of(k));
    if (*m > frames.size() - 1 - k)
      return make_error(Errc::length_out_of_range,
                        "frame " + std::to_string(k) + ": \"num-sub-frames\" " + std::to_string(*m) +
                            " runs past the last frame (" + std::to_string(frames.size()) +
                            " frames)",
                        offset_of(k));
    SubObject obj;
    obj.kind = f.kind;
    obj.header_frame = k;
    obj.path = f.path;
    obj.header = std::move(*header);
    obj.header_offset = offset_of(k);
    claimed[k] = true;
    for (std::size_t i = k + 1; i <= k + *m; ++i) {
      obj.frame_offsets.push_back(offset_of(i));
      if (claimed[i])
        return make_error(Errc::length_out_of_range,
                          "frame " + std::to_string(i) + " belongs to two objects (" + where + ")",
                          offset_of(i));
      claimed[i] = true;
      obj.frames.push_back(frames[i].bytes());
    }
    msg.objects.push_back(std::move(obj));
  }
  for (std::size_t i = 1; i < frames.size(); ++i)
    if (!claimed[i]) msg.loose_frames.push_back(i);
  msg.raw = std::move(raw);
  return msg;
}

Bytes encode_sub_header(const SubObject& obj) {
  const msgpack::Value* count = obj.header.find("num-sub-frames");
  if (count != nullptr && count->to_uint64() == std::optional<std::uint64_t>(obj.frames.size()))
    return Bytes(msgpack::encode(obj.header));
  msgpack::Value header = obj.header;
  header.set("num-sub-frames", msgpack::Value::uinteger(obj.frames.size()));
  return Bytes(msgpack::encode(header));
}

Result<std::vector<Bytes>> assemble_message(const Message& message, bool root_unchanged) {
  // New index of every object, in their (sorted) order.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> remap;  // old k -> new k, sorted by old k
  remap.reserve(message.objects.size());
  std::uint64_t next = 1;
  bool moved = false;
  for (const SubObject& obj : message.objects) {
    remap.emplace_back(obj.header_frame, next);
    moved |= obj.header_frame != next;
    next += 1 + obj.frames.size();
  }

  std::vector<Bytes> out;
  out.reserve(static_cast<std::size_t>(next) + message.loose_frames.size());
  if (moved) {
    msgpack::Value root = message.root;
    rewrite_placeholders(root, [&](std::uint64_t old) {
      auto it = std::lower_bound(remap.begin(), remap.end(), old,
                                 [](const auto& entry, std::uint64_t k) { return entry.first < k; });
      return it != remap.end() && it->first == old ? it->second : old;
    });
    out.emplace_back(msgpack::encode(root));
  } else if (root_unchanged && !message.raw.frames.empty()) {
    // Dask's bytes as they came: encoding the same value gives them back.
    out.push_back(message.raw.frames[0].bytes());
  } else {
    out.emplace_back(msgpack::encode(message.root));
  }
  for (const SubObject& obj : message.objects) {
    out.push_back(encode_sub_header(obj));
    for (const Bytes& f : obj.frames) out.push_back(f);
  }
  for (std::size_t i : message.loose_frames) {
    if (i >= message.raw.frames.size())
      return make_error(Errc::internal, "loose frame index out of range");
    out.push_back(message.raw.frames[i].bytes());
  }
  return out;
}

}  // namespace daskcaps
