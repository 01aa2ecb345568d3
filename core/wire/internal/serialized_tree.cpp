#include "core/wire/internal/serialized_tree.h"

namespace daskcaps {

namespace {

using msgpack::Value;

std::string element_path(const std::string& parent, const Value& element, std::size_t i) {
  std::string out = parent;
  out += '[';
  if (const Value* key = element.find("key"); key != nullptr)
    out += msgpack::repr(*key, 40);
  else
    out += std::to_string(i);
  out += ']';
  return out;
}

Status walk(Value& header, std::vector<Bytes>* frames, std::uint32_t depth, std::uint32_t max_depth,
            const std::string& path, const LeafVisitor& visit) {
  if (!is_collection_header(header)) {
    std::vector<Bytes> none;
    Status st = visit(header, frames != nullptr ? *frames : none, path);
    if (!st && !path.empty()) return std::move(st).error().add_context("element " + path);
    return st;
  }
  const std::string where = path.empty() ? "collection" : "collection " + path;
  if (depth >= max_depth)
    return make_error(Errc::limit_exceeded,
                      where + " is nested deeper than " + std::to_string(max_depth) + " collection levels");
  Value* subs = header.find("sub-headers");
  if (subs == nullptr || !subs->is_array())
    return make_error(Errc::bad_value, where + " has no \"sub-headers\" list");
  auto elements = subs->as_array();
  if (frames == nullptr) {
    for (std::size_t i = 0; i < elements.size(); ++i) {
      if (!elements[i].is_map())
        return make_error(Errc::bad_value, where + " element " + std::to_string(i) + " is not a map");
      if (Status st = walk(elements[i], nullptr, depth + 1, max_depth, element_path(path, elements[i], i), visit); !st)
        return st;
    }
    return {};
  }
  Value* lengths = header.find("frame-lengths");
  if (lengths == nullptr || !lengths->is_array())
    return make_error(Errc::bad_value, where + " has no \"frame-lengths\" list");
  auto counts = lengths->as_array();
  if (counts.size() != elements.size())
    return make_error(Errc::bad_value, where + ": \"frame-lengths\" and \"sub-headers\" differ in length");
  std::vector<Bytes> out;
  out.reserve(frames->size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < elements.size(); ++i) {
    auto n = counts[i].to_uint64();
    if (!n || *n > frames->size() - at)
      return make_error(Errc::length_out_of_range,
                        where + " element " + std::to_string(i) + " claims frames past the object's end");
    if (!elements[i].is_map())
      return make_error(Errc::bad_value, where + " element " + std::to_string(i) + " is not a map");
    std::vector<Bytes> slice(frames->begin() + static_cast<std::ptrdiff_t>(at),
                             frames->begin() + static_cast<std::ptrdiff_t>(at + *n));
    at += static_cast<std::size_t>(*n);
    if (Status st = walk(elements[i], &slice, depth + 1, max_depth, element_path(path, elements[i], i), visit); !st)
      return st;
    if (slice.size() != *n) counts[i] = Value::uinteger(slice.size());
    for (Bytes& b : slice) out.push_back(std::move(b));
  }
  for (std::size_t i = at; i < frames->size(); ++i) out.push_back(std::move((*frames)[i]));
  *frames = std::move(out);
  return {};
}

}  // namespace

bool is_collection_header(const msgpack::Value& header) {
  return header.is_map() && header.find("is-collection") != nullptr;
}

Status for_each_leaf(msgpack::Value& header, std::vector<Bytes>* frames, std::uint32_t max_depth,
                     const LeafVisitor& visit) {
  return walk(header, frames, 0, max_depth, "", visit);
}

}  // namespace daskcaps
