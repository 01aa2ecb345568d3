// JSON documents of the core, which hands them over as text (its public
// headers show no JSON library, docs/design.md §2), as Python values and
// back: null/None, booleans, integers, floats, strings, arrays/lists and
// objects/dicts, in their order. Strings the core made that are not UTF-8
// come out with U+FFFD in their place, as the command's JSON output has
// them (error_handler_t::replace).
#pragma once

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>
#include <string>

namespace daskcaps::python {

pybind11::object to_python(const nlohmann::ordered_json& value);
/// The core's JSON text as a Python value (the text is the core's own, so
/// valid JSON).
pybind11::object json_text_to_python(const std::string& text);

/// A Python value as JSON: None, bool, int (64-bit), float, str, list or
/// tuple, and dict with str keys, nested at most 512 deep. Raises
/// TypeError naming the value's place (`what`, then [index] / [key]).
nlohmann::ordered_json to_json(const pybind11::handle& value, const std::string& what);
/// to_json, as the JSON text the core reads.
std::string to_json_text(const pybind11::handle& value, const std::string& what);

}  // namespace daskcaps::python
