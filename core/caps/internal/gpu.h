// GPUs of this host, found at run time through the CUDA driver API.
//
// The driver library is loaded with dlopen, never linked: one dask-caps
// binary runs on CPU-only and GPU hosts alike (docs/design.md §8.4). The entry points
// used, all from the driver API (cuda.h), in this order:
//
//   cuInit(0)                                  -> CUDA_SUCCESS or why not
//   cuDriverGetVersion(&v)                     -> 13000 means "13.0"
//   cuDeviceGetCount(&n)
//   per device i < n:
//     cuDeviceGet(&dev, i)
//     cuDeviceGetName(buf, len, dev)
//     cuDeviceGetAttribute(&major, COMPUTE_CAPABILITY_MAJOR (75), dev)
//     cuDeviceGetAttribute(&minor, COMPUTE_CAPABILITY_MINOR (76), dev)
//     cuDeviceTotalMem_v2(&bytes, dev)
//   cuGetErrorName / cuGetErrorString          (optional, for messages)
//
// The library stays loaded for the life of the process once opened: a CUDA
// driver that has been initialised starts threads and must not be unloaded.
#pragma once

#include <string>

#include "daskcaps/caps/probe.h"

namespace daskcaps {

/// The environment variable that names another driver library to load in
/// place of libcuda.so.1 (the tests point it at a stand-in driver).
inline constexpr const char* kCudaDriverEnv = "DASKCAPS_CUDA_DRIVER";
/// The driver library's soname on Linux.
inline constexpr const char* kCudaDriverDefault = "libcuda.so.1";

/// $DASKCAPS_CUDA_DRIVER when set and not empty, else "libcuda.so.1".
std::string default_cuda_driver_path();

/// Loads the driver library at `driver_path` (a soname searched like dlopen
/// does, or a path) and lists its devices. Never fails: a host without a
/// driver, a driver whose cuInit fails (e.g. CUDA_ERROR_NO_DEVICE) or one
/// without devices gives available = false and `error` saying why, e.g.
/// "libcuda.so.1: cannot open shared object file: No such file or directory"
/// or "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is
/// detected". available is true when at least one device was listed; a
/// device query that fails after that is named in `error` and the device is
/// left out.
GpuInfo probe_gpus(const std::string& driver_path);

/// "13.0" from the integer cuDriverGetVersion reports (1000*major + 10*minor).
std::string cuda_version_string(int version);

}  // namespace daskcaps
