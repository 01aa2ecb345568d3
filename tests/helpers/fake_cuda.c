/* A stand-in for the CUDA driver library (libcuda.so.1), so the GPU probe
 * can be tested on hosts without a GPU. core/caps/internal/gpu.cpp loads it through
 * DASKCAPS_CUDA_DRIVER. It exports the driver API entry points dask-caps
 * uses, with the driver's C ABI (CUresult and CUdevice are int), and answers
 * from environment variables read at each call:
 *
 *   FAKE_CUDA_INIT_RESULT     what cuInit returns (default 0; 100 is
 *                             CUDA_ERROR_NO_DEVICE)
 *   FAKE_CUDA_DRIVER_VERSION  cuDriverGetVersion (default 12040, "12.4")
 *   FAKE_CUDA_DEVICE_COUNT    cuDeviceGetCount (default 2, at most 8)
 *   FAKE_CUDA_NAME_<i>        device i's name (defaults below)
 *   FAKE_CUDA_CC_<i>          device i's compute capability "M.m"
 *   FAKE_CUDA_MEM_<i>         device i's memory in bytes
 *   FAKE_CUDA_FAIL_MEM_DEVICE cuDeviceTotalMem_v2 fails with
 *                             CUDA_ERROR_INVALID_DEVICE for this device
 *
 * Defaults: device 0 "Fake H200" 9.0 150000000000 bytes; device 1
 * "Fake A10" 8.6 24000000000 bytes; others "Fake GPU <i>" 7.5 1 GiB. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kNotInitialized = 3,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kAttrCcMajor = 75,
  kAttrCcMinor = 76,
  kMaxDevices = 8,
};

static long long env_number(const char* name, long long fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  return strtoll(v, NULL, 10);
}

static const char* env_indexed(const char* prefix, int i) {
  char name[64];
  snprintf(name, sizeof name, "%s%d", prefix, i);
  return getenv(name);
}

static int device_count(void) {
  long long n = env_number("FAKE_CUDA_DEVICE_COUNT", 2);
  if (n < 0) n = 0;
  if (n > kMaxDevices) n = kMaxDevices;
  return (int)n;
}

static int valid(int dev) { return dev >= 0 && dev < device_count(); }

FAKE_EXPORT int cuInit(unsigned int flags) {
  (void)flags;
  return (int)env_number("FAKE_CUDA_INIT_RESULT", 0);
}

FAKE_EXPORT int cuDriverGetVersion(int* version) {
  if (!version) return kInvalidValue;
  *version = (int)env_number("FAKE_CUDA_DRIVER_VERSION", 12040);
  return kSuccess;
}

FAKE_EXPORT int cuDeviceGetCount(int* count) {
  if (!count) return kInvalidValue;
  *count = device_count();
  return kSuccess;
}

FAKE_EXPORT int cuDeviceGet(int* device, int ordinal) {
  if (!device) return kInvalidValue;
  if (!valid(ordinal)) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

FAKE_EXPORT int cuDeviceGetName(char* name, int len, int dev) {
  if (!name || len <= 0) return kInvalidValue;
  if (!valid(dev)) return kInvalidDevice;
  const char* given = env_indexed("FAKE_CUDA_NAME_", dev);
  if (given) snprintf(name, (size_t)len, "%s", given);
  else if (dev == 0) snprintf(name, (size_t)len, "Fake H200");
  else if (dev == 1) snprintf(name, (size_t)len, "Fake A10");
  else snprintf(name, (size_t)len, "Fake GPU %d", dev);
  return kSuccess;
}

FAKE_EXPORT int cuDeviceGetAttribute(int* value, int attribute, int dev) {
  if (!value) return kInvalidValue;
  if (!valid(dev)) return kInvalidDevice;
  int major = dev == 0 ? 9 : dev == 1 ? 8 : 7;
  int minor = dev == 0 ? 0 : dev == 1 ? 6 : 5;
  const char* cc = env_indexed("FAKE_CUDA_CC_", dev);
  if (cc && sscanf(cc, "%d.%d", &major, &minor) != 2) return kInvalidValue;
  if (attribute == kAttrCcMajor) *value = major;
  else if (attribute == kAttrCcMinor) *value = minor;
  else return kInvalidValue;
  return kSuccess;
}

FAKE_EXPORT int cuDeviceTotalMem_v2(size_t* bytes, int dev) {
  if (!bytes) return kInvalidValue;
  if (!valid(dev) || env_number("FAKE_CUDA_FAIL_MEM_DEVICE", -1) == dev) return kInvalidDevice;
  long long fallback = dev == 0 ? 150000000000LL : dev == 1 ? 24000000000LL : 1073741824LL;
  const char* given = env_indexed("FAKE_CUDA_MEM_", dev);
  *bytes = (size_t)(given ? strtoull(given, NULL, 10) : (unsigned long long)fallback);
  return kSuccess;
}

FAKE_EXPORT int cuGetErrorName(int error, const char** text) {
  if (!text) return kInvalidValue;
  switch (error) {
    case kSuccess: *text = "CUDA_SUCCESS"; return kSuccess;
    case kInvalidValue: *text = "CUDA_ERROR_INVALID_VALUE"; return kSuccess;
    case kNotInitialized: *text = "CUDA_ERROR_NOT_INITIALIZED"; return kSuccess;
    case kNoDevice: *text = "CUDA_ERROR_NO_DEVICE"; return kSuccess;
    case kInvalidDevice: *text = "CUDA_ERROR_INVALID_DEVICE"; return kSuccess;
    default: *text = NULL; return kInvalidValue;
  }
}

FAKE_EXPORT int cuGetErrorString(int error, const char** text) {
  if (!text) return kInvalidValue;
  switch (error) {
    case kSuccess: *text = "no error"; return kSuccess;
    case kInvalidValue: *text = "invalid argument"; return kSuccess;
    case kNotInitialized: *text = "initialization error"; return kSuccess;
    case kNoDevice: *text = "no CUDA-capable device is detected"; return kSuccess;
    case kInvalidDevice: *text = "invalid device ordinal"; return kSuccess;
    default: *text = NULL; return kInvalidValue;
  }
}
