// A ValueView (daskcaps/wire/value_view.h) of a Python object, for the
// core's readers of what a peer sent when Dask has decoded it already (the
// plugin's handshake dicts): dict is a map, list and tuple are lists, str
// a string (its UTF-8 bytes), int an integer, bool a boolean, None nil;
// anything else "other". Counts and lengths are O(1) (a string that is not
// ASCII costs one pass over its characters, no allocation); items are
// looked up only when the core asks for them, so nothing past a count or
// length the core refuses is touched. No member raises: a Python error
// inside one (a dict key whose __eq__ raises) is cleared and reads as
// "absent". Called with the GIL held; the view holds a reference to its
// object, and so keeps it alive.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "daskcaps/wire/value_view.h"

namespace daskcaps::python {

class PyValueView final : public ValueView {
 public:
  explicit PyValueView(pybind11::object o) : o_(std::move(o)) {}

  Kind kind() const override;
  std::string type_text() const override;
  bool boolean() const override;
  std::optional<std::int64_t> integer() const override;
  std::uint64_t size() const override;
  std::uint64_t printable_ascii_prefix() const override;
  std::string_view head(std::uint64_t n) const override;
  std::unique_ptr<ValueView> item(std::uint64_t i) const override;
  std::unique_ptr<ValueView> member(std::string_view key) const override;

  /// The object viewed.
  const pybind11::object& object() const { return o_; }

 private:
  pybind11::object o_;
  mutable std::string head_;  // head() of a string that is not ASCII: its first bytes, encoded
};

}  // namespace daskcaps::python
