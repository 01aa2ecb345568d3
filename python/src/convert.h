// JSON documents of the core (nlohmann::ordered_json) as Python values and
// back: null/None, booleans, integers, floats, strings, arrays/lists and
// objects/dicts, in their order. Strings the core made that are not UTF-8
// come out with U+FFFD in their place, as the command's JSON output has
// them (error_handler_t::replace).
#pragma once

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>

namespace daskcaps::python {

pybind11::object to_python(const nlohmann::ordered_json& value);

/// A Python value as JSON: None, bool, int (64-bit), float, str, list or
/// tuple, and dict with str keys, nested at most 512 deep. Raises
/// TypeError naming the value's place (`what`, then [index] / [key]).
nlohmann::ordered_json to_json(const pybind11::handle& value, const std::string& what);

}  // namespace daskcaps::python
