// dask_caps.deliver() and dask_caps.dask_release(): the core's one policy
// (core/caps/delivery.h) and its Dask release type (core/wire/dask_release.h)
// for Python callers, the Dask plugin among them, so that what a receiver
// gets is decided in the core and nowhere else.
#pragma once

#include <pybind11/pybind11.h>

namespace daskcaps::python {

/// Adds deliver() and dask_release() to the module.
void register_delivery(pybind11::module_& m);

}  // namespace daskcaps::python
