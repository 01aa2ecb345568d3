// CompressionValue: what Dask writes where a codec is named: a handshake's
// "compression" (docs/protocol.md §2.2) and each entry of a sub-header's "compression"
// list (docs/protocol.md §3.4): a codec name, nil, or false.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daskcaps/wire/msgpack.h"

namespace daskcaps {

/// The value of a handshake's "compression": a codec name, nil or false.
/// nil and false both mean "no compression" but are distinct on the wire
/// (2022.12 sends false when configured false; docs/protocol.md §2.3) and in Python's
/// equality, which decides negotiation (docs/protocol.md §2.4).
struct CompressionValue {
  enum class Kind : std::uint8_t { nil, false_, name };
  Kind kind = Kind::nil;
  std::string name;  // when kind == name

  static CompressionValue nil() { return {}; }
  static CompressionValue none_false() { return {Kind::false_, {}}; }
  static CompressionValue named(std::string n) { return {Kind::name, std::move(n)}; }
  /// True when frames written under this value are compressed.
  bool compresses() const { return kind == Kind::name; }
  /// Python equality: "lz4" == "lz4", None == None, False == False.
  bool operator==(const CompressionValue&) const = default;
  /// "lz4", "null" or "false", as the JSON reports write it.
  std::string to_string() const;
  msgpack::Value to_msgpack() const;
  /// nullopt when the value is not str, nil or false.
  static std::optional<CompressionValue> from_msgpack(const msgpack::Value& v);
};

}  // namespace daskcaps
