// fuzz_msgpack: the msgpack layer (core/wire/msgpack.h) on arbitrary bytes.
//
// Input: one msgpack document, as a Dask frame 0 or sub-header holds it.
//
// Properties, when msgpack::decode_all accepts the input:
//  1. decode from a ByteReader reads the same value and consumes it all
//     (and when decode_all refuses, decode never takes the whole input);
//  2. encode gives at most as many bytes as the input (it writes the
//     smallest form of every value);
//  3. decoding that encoding gives an equal value (floats compared by their
//     bits, so NaN and -0.0 count), and encoding it again the same bytes;
//  4. ownership: a copy encodes the same; the elements of a top-level array
//     or map, moved out of the decoded tree, rebuild the same bytes after
//     the tree is gone; and swapping them within a decoded tree (each swap
//     copies between the heap and the tree's arena) and back changes nothing.
#include <cstdint>
#include <cstring>

#include "core/wire/internal/msgpack_stream.h"
#include "fuzz_common.h"

using namespace daskcaps;
namespace mp = daskcaps::msgpack;

namespace {

/// Value equality where floats compare bit for bit.
bool same(const mp::Value& a, const mp::Value& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case mp::Type::float32: {
      const float x = a.as_float32(), y = b.as_float32();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    case mp::Type::float64: {
      const double x = a.as_double(), y = b.as_double();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    case mp::Type::array: {
      const auto& x = a.as_array();
      const auto& y = b.as_array();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!same(x[i], y[i])) return false;
      return true;
    }
    case mp::Type::map: {
      const auto& x = a.as_map();
      const auto& y = b.as_map();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!same(x[i].first, y[i].first) || !same(x[i].second, y[i].second)) return false;
      return true;
    }
    default:
      return a == b;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ByteSpan input(data, size);
  const Limits limits = fuzzsupport::fuzz_limits();

  auto whole = mp::decode_all(input, limits);
  if (!whole) {
    (void)whole.error().message();
    // A prefix may still be one value followed by trailing bytes.
    ByteReader r(input);
    auto first = mp::decode(r, limits);
    if (first) FUZZ_CHECK(r.remaining() > 0);  // else decode_all should have taken it
    return 0;
  }
  const mp::Value& v = *whole;
  (void)mp::repr(v, 16);

  // 1. The streaming decoder agrees.
  ByteReader r(input);
  auto streamed = mp::decode(r, limits);
  FUZZ_CHECK(streamed.ok());
  FUZZ_CHECK(r.remaining() == 0);
  FUZZ_CHECK(same(*streamed, v));

  // 2. Smallest forms.
  const Buffer once = mp::encode(v);
  FUZZ_CHECK(once.size() <= size);

  // 3. Round trip and a fixed point.
  auto again = mp::decode_all(once, limits);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(same(*again, v));
  const Buffer twice = mp::encode(*again);
  FUZZ_CHECK(twice == once);

  // 4. Ownership.
  const mp::Value copy = v;
  FUZZ_CHECK(same(copy, v));
  FUZZ_CHECK(mp::encode(copy) == once);
  mp::Value rebuilt;
  {
    mp::Value tree = std::move(*whole);
    if (tree.is_array()) {
      mp::Array items;
      for (mp::Value& e : tree.as_array()) items.push_back(std::move(e));
      rebuilt = mp::Value::array(std::move(items));
    } else if (tree.is_map()) {
      mp::Map entries;
      for (auto& [k, e] : tree.as_map()) entries.emplace_back(std::move(k), std::move(e));
      rebuilt = mp::Value::map(std::move(entries));
    } else {
      rebuilt = std::move(tree);
    }
  }
  FUZZ_CHECK(mp::encode(rebuilt) == once);
  if (again->is_array()) {
    auto items = again->as_array();
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t i = 0, j = items.size(); i + 1 < j; ++i, --j) std::swap(items[i], items[j - 1]);
    FUZZ_CHECK(mp::encode(*again) == once);
  } else if (again->is_map()) {
    auto entries = again->as_map();
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t i = 0, j = entries.size(); i + 1 < j; ++i, --j) std::swap(entries[i], entries[j - 1]);
    FUZZ_CHECK(mp::encode(*again) == once);
  }
  return 0;
}
