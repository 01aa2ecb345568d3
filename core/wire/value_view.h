// ValueView: a read-only view of one value a peer sent, whatever holds it.
//
// The readers of what a peer publishes (read_capabilities, core/wire/handshake.h)
// read through it, so that one reader serves a msgpack::Value the core
// decoded (check, serve, the bridge) and a value another program decoded
// already (the Dask plugin's Python dict, python/src/py_value_view.h)
// without packing that value again. A view answers the cheap questions
// first (its kind, a container's count, a string's length) and hands out
// items only when asked, so a reader that refuses a value on its count or
// length has materialised nothing of it.
//
// Contract of every implementation: no member throws; a value is never
// copied whole (head() copies at most the bytes asked for); what a view
// hands out stays valid while the view lives; a child view may outlive the
// call that made it but not its root's owner.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace daskcaps {

class ValueView {
 public:
  enum class Kind : std::uint8_t { nil, boolean, integer, string, list, map, other };

  virtual ~ValueView() = default;

  virtual Kind kind() const = 0;
  /// What it is, for a refusal: "a msgpack int", "a Python float".
  virtual std::string type_text() const = 0;

  /// boolean: its value (false for any other kind).
  virtual bool boolean() const = 0;
  /// integer: its value when it fits int64; nullopt otherwise (and for any
  /// other kind, booleans included).
  virtual std::optional<std::int64_t> integer() const = 0;

  /// list: its items; map: its entries; string: its bytes in UTF-8 (what
  /// msgpack would carry); 0 for any other kind. O(1) or one pass over a
  /// string without allocating.
  virtual std::uint64_t size() const = 0;
  /// string: how many of its first bytes are printable ASCII (0x20-0x7E),
  /// so size() when all are; 0 for any other kind. Allocates nothing.
  virtual std::uint64_t printable_ascii_prefix() const = 0;
  /// string: its first min(n, size()) bytes (UTF-8; a cut may split a
  /// character); "" for any other kind. Valid while the view lives.
  virtual std::string_view head(std::uint64_t n) const = 0;

  /// list: item i (i < size()); nullptr past the end or for any other kind.
  virtual std::unique_ptr<ValueView> item(std::uint64_t i) const = 0;
  /// map: the value of the entry whose key is the string `key` (the first
  /// one where keys repeat); nullptr when there is none or for any other kind.
  virtual std::unique_ptr<ValueView> member(std::string_view key) const = 0;

  /// A string's bytes, whole: for a string already checked against a bound.
  std::string str() const { return std::string(head(size())); }
};

}  // namespace daskcaps
