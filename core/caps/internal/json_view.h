// A ValueView (daskcaps/wire/value_view.h) of a parsed JSON value: the
// adapter by which read_capabilities, the one reader of the "capabilities"
// key, reads that key where a JSON document holds it (probe files, the
// documents `negotiate` takes). It borrows the value, which must outlive it
// and every view it hands out; it copies nothing.
#pragma once

#include <nlohmann/json.hpp>

#include "daskcaps/wire/value_view.h"

namespace daskcaps {

class JsonView final : public ValueView {
 public:
  explicit JsonView(const nlohmann::ordered_json& v) : v_(v) {}

  /// JSON has no other kind: a float is Kind::other.
  Kind kind() const override;
  /// "a JSON string", "a JSON number", ...
  std::string type_text() const override;
  bool boolean() const override;
  std::optional<std::int64_t> integer() const override;
  std::uint64_t size() const override;
  std::uint64_t printable_ascii_prefix() const override;
  std::string_view head(std::uint64_t n) const override;
  std::unique_ptr<ValueView> item(std::uint64_t i) const override;
  /// The member named `key` (JSON objects here keep one entry per key).
  std::unique_ptr<ValueView> member(std::string_view key) const override;

 private:
  const nlohmann::ordered_json& v_;
};

}  // namespace daskcaps
