// The dask_release= argument of the module's functions as the core's one
// type for a Dask release (core/wire/dask_release.h).
#pragma once

#include <string>

#include "daskcaps/wire/dask_release.h"

namespace daskcaps::python {

/// "2022.12" or "newest"; anything else raises dask_caps.Error (usage).
DaskRelease release_argument(const std::string& name);

}  // namespace daskcaps::python
