// dask_caps._core.LinkChooser: the codec choice per connection
// (core/caps/link_choice.h) for the Dask plugin, which holds one per comm.
#pragma once

#include <pybind11/pybind11.h>

namespace daskcaps::python {

void register_link_chooser(pybind11::module_& m);

}  // namespace daskcaps::python
