#include "core/caps/internal/gpu.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#ifdef DASKCAPS_HAVE_CUDA_HEADERS
#include <cuda.h>
#endif

namespace daskcaps {

namespace {

#ifdef DASKCAPS_HAVE_CUDA_HEADERS
using CuResult = CUresult;
using CuDevice = CUdevice;
constexpr CuResult kCudaSuccess = CUDA_SUCCESS;
constexpr int kAttrCcMajor = CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR;
constexpr int kAttrCcMinor = CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR;
using CuDeviceAttribute = CUdevice_attribute;
#else
// The few declarations of cuda.h this file needs, with the values the driver
// API has had since CUDA 2 (they are ABI and never change).
using CuResult = int;  // enum CUresult: int-sized
using CuDevice = int;  // typedef int CUdevice
constexpr CuResult kCudaSuccess = 0;
constexpr int kAttrCcMajor = 75;
constexpr int kAttrCcMinor = 76;
using CuDeviceAttribute = int;  // enum CUdevice_attribute
#endif

using CuInitFn = CuResult (*)(unsigned int);
using CuDriverGetVersionFn = CuResult (*)(int*);
using CuDeviceGetCountFn = CuResult (*)(int*);
using CuDeviceGetFn = CuResult (*)(CuDevice*, int);
using CuDeviceGetNameFn = CuResult (*)(char*, int, CuDevice);
using CuDeviceGetAttributeFn = CuResult (*)(int*, CuDeviceAttribute, CuDevice);
using CuDeviceTotalMemFn = CuResult (*)(std::size_t*, CuDevice);
using CuGetErrorTextFn = CuResult (*)(CuResult, const char**);

#ifdef DASKCAPS_HAVE_CUDA_HEADERS
// Our pointer types must be exactly the header's, or the calls are wrong.
static_assert(std::is_same_v<CuInitFn, decltype(&::cuInit)>);
static_assert(std::is_same_v<CuDriverGetVersionFn, decltype(&::cuDriverGetVersion)>);
static_assert(std::is_same_v<CuDeviceGetCountFn, decltype(&::cuDeviceGetCount)>);
static_assert(std::is_same_v<CuDeviceGetFn, decltype(&::cuDeviceGet)>);
static_assert(std::is_same_v<CuDeviceGetNameFn, decltype(&::cuDeviceGetName)>);
static_assert(std::is_same_v<CuDeviceGetAttributeFn, decltype(&::cuDeviceGetAttribute)>);
static_assert(std::is_same_v<CuDeviceTotalMemFn, decltype(&::cuDeviceTotalMem_v2)>);
static_assert(std::is_same_v<CuGetErrorTextFn, decltype(&::cuGetErrorName)>);
#endif

struct Driver {
  CuInitFn init = nullptr;
  CuDriverGetVersionFn driver_get_version = nullptr;
  CuDeviceGetCountFn device_get_count = nullptr;
  CuDeviceGetFn device_get = nullptr;
  CuDeviceGetNameFn device_get_name = nullptr;
  CuDeviceGetAttributeFn device_get_attribute = nullptr;
  CuDeviceTotalMemFn device_total_mem = nullptr;
  CuGetErrorTextFn get_error_name = nullptr;    // optional
  CuGetErrorTextFn get_error_string = nullptr;  // optional
};

template <typename Fn>
bool bind(void* handle, const char* symbol, Fn& out) {
  dlerror();
  void* p = dlsym(handle, symbol);
  if (!p) return false;
  // POSIX guarantees object and function pointers convert through dlsym.
  out = reinterpret_cast<Fn>(p);
  return true;
}

// "CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected", or just
// "error 100" when the driver cannot name it.
std::string describe(const Driver& d, CuResult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.get_error_name && d.get_error_name(r, &name) != kCudaSuccess) name = nullptr;
  if (d.get_error_string && d.get_error_string(r, &text) != kCudaSuccess) text = nullptr;
  std::string out = name ? std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")"
                         : "error " + std::to_string(static_cast<int>(r));
  if (text && *text) out += std::string(": ") + text;
  return out;
}

std::string failed(const Driver& d, std::string_view call, CuResult r) {
  return std::string(call) + " failed: " + describe(d, r);
}

}  // namespace

std::string default_cuda_driver_path() {
  const char* env = std::getenv(kCudaDriverEnv);
  if (env && *env) return env;
  return kCudaDriverDefault;
}

std::string cuda_version_string(int version) {
  if (version <= 0) return std::to_string(version);
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

GpuInfo probe_gpus(const std::string& driver_path) {
  GpuInfo info;
  // Never dlclose'd: see the header.
  void* handle = dlopen(driver_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    info.error = why ? std::string(why) : driver_path + ": cannot be loaded";
    return info;
  }

  Driver d;
  struct Required {
    const char* symbol;
    bool ok;
  };
  const Required required[] = {
      {"cuInit", bind(handle, "cuInit", d.init)},
      {"cuDriverGetVersion", bind(handle, "cuDriverGetVersion", d.driver_get_version)},
      {"cuDeviceGetCount", bind(handle, "cuDeviceGetCount", d.device_get_count)},
      {"cuDeviceGet", bind(handle, "cuDeviceGet", d.device_get)},
      {"cuDeviceGetName", bind(handle, "cuDeviceGetName", d.device_get_name)},
      {"cuDeviceGetAttribute", bind(handle, "cuDeviceGetAttribute", d.device_get_attribute)},
      {"cuDeviceTotalMem_v2", bind(handle, "cuDeviceTotalMem_v2", d.device_total_mem)},
  };
  for (const Required& r : required) {
    if (!r.ok) {
      info.error = driver_path + ": not a CUDA driver library (no symbol " + r.symbol + ")";
      return info;
    }
  }
  (void)bind(handle, "cuGetErrorName", d.get_error_name);
  (void)bind(handle, "cuGetErrorString", d.get_error_string);

  if (CuResult r = d.init(0); r != kCudaSuccess) {
    info.error = failed(d, "cuInit", r);
    return info;
  }
  int version = 0;
  if (CuResult r = d.driver_get_version(&version); r == kCudaSuccess)
    info.driver = cuda_version_string(version);
  int count = 0;
  if (CuResult r = d.device_get_count(&count); r != kCudaSuccess) {
    info.error = failed(d, "cuDeviceGetCount", r);
    return info;
  }
  if (count <= 0) {
    info.error = "the CUDA driver reports no devices";
    return info;
  }

  std::string errors;
  auto note = [&errors](int index, const std::string& what) {
    if (!errors.empty()) errors += "; ";
    errors += "device " + std::to_string(index) + ": " + what;
  };
  for (int i = 0; i < count; ++i) {
    CuDevice dev{};
    if (CuResult r = d.device_get(&dev, i); r != kCudaSuccess) {
      note(i, failed(d, "cuDeviceGet", r));
      continue;
    }
    GpuDevice g;
    g.index = i;
    char name[256] = {};
    if (CuResult r = d.device_get_name(name, static_cast<int>(sizeof name) - 1, dev);
        r != kCudaSuccess) {
      note(i, failed(d, "cuDeviceGetName", r));
      continue;
    }
    name[sizeof name - 1] = '\0';  // the driver need not terminate a cut name
    g.name = name;
    int major = 0;
    int minor = 0;
    if (CuResult r = d.device_get_attribute(&major, static_cast<CuDeviceAttribute>(kAttrCcMajor), dev);
        r != kCudaSuccess) {
      note(i, failed(d, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", r));
      continue;
    }
    if (CuResult r = d.device_get_attribute(&minor, static_cast<CuDeviceAttribute>(kAttrCcMinor), dev);
        r != kCudaSuccess) {
      note(i, failed(d, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", r));
      continue;
    }
    g.compute_capability = std::to_string(major) + "." + std::to_string(minor);
    std::size_t bytes = 0;
    if (CuResult r = d.device_total_mem(&bytes, dev); r != kCudaSuccess) {
      note(i, failed(d, "cuDeviceTotalMem_v2", r));
      continue;
    }
    g.memory_bytes = bytes;
    info.devices.push_back(std::move(g));
  }
  info.available = !info.devices.empty();
  if (!errors.empty()) info.error = errors;
  return info;
}

}  // namespace daskcaps
