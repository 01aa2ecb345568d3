// dask_caps.Error: the core's errors (core/base/result.h) as one Python
// exception class. str(e) is the error's one-line message as the command
// prints it after "dask-caps: <subject>: " (with its context and byte
// offset); e.kind is the Errc name ("codec_failed", "truncated", ...);
// e.offset the byte offset it names, or None.
#pragma once

#include <pybind11/pybind11.h>

#include "daskcaps/base/result.h"

namespace daskcaps::python {

/// Raises dask_caps.Error for `error` (throws; the translator registered by
/// register_error() turns it into the Python exception).
[[noreturn]] void raise(Error error);

/// Adds the Error class to the module and registers its translator.
void register_error(pybind11::module_& m);

}  // namespace daskcaps::python
