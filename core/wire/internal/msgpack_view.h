// A ValueView (daskcaps/wire/value_view.h) of a msgpack::Value the core
// decoded: the adapter by which read_capabilities reads what check, serve
// and the bridge received. It borrows the value, which must outlive it and
// every view it hands out; it copies nothing.
#pragma once

#include "daskcaps/wire/msgpack.h"
#include "daskcaps/wire/value_view.h"

namespace daskcaps {

class MsgpackView final : public ValueView {
 public:
  explicit MsgpackView(const msgpack::Value& v) : v_(v) {}

  Kind kind() const override;
  std::string type_text() const override;
  bool boolean() const override;
  std::optional<std::int64_t> integer() const override;
  std::uint64_t size() const override;
  std::uint64_t printable_ascii_prefix() const override;
  std::string_view head(std::uint64_t n) const override;
  std::unique_ptr<ValueView> item(std::uint64_t i) const override;
  std::unique_ptr<ValueView> member(std::string_view key) const override;

 private:
  const msgpack::Value& v_;
};

}  // namespace daskcaps
