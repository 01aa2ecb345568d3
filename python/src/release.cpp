#include "python/src/release.h"

#include "python/src/errors.h"

namespace daskcaps::python {

DaskRelease release_argument(const std::string& name) {
  auto release = DaskRelease::from_name(name);
  if (!release)
    raise(make_error(Errc::usage, "dask_release " + name + ": use \"2022.12\" (ratio 0.9) or \"newest\" (0.7)"));
  return *release;
}

}  // namespace daskcaps::python
