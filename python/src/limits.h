// The limits= argument of the module's functions as the core's Limits
// (core/base/limits.h), by their field names, and dask_caps.LIMITS: the
// core's defaults, so that no Python file copies a bound.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <string_view>

#include "daskcaps/base/limits.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::python {

/// None: the defaults; a dict {field name: int >= 0} changes those it
/// names. An unknown name or a value out of range raises (TypeError, or
/// dask_caps.Error of kind usage).
Limits limits_argument(const pybind11::handle& value);

/// {field name: value} of `limits`, every field.
pybind11::dict limits_to_python(const Limits& limits);

/// How the core's messages name an option in Python (core/base/option_name.h):
/// a limit as the key of limits= ("limits['max_frames']"), another option
/// as its keyword ("keep_unconvertible"). Set when the module loads.
std::string python_spelling(std::string_view field, OptionKind kind);

}  // namespace daskcaps::python
