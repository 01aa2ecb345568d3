#include "core/caps/internal/gpu.h"

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <string>

#include "support/scoped_env.h"

using namespace daskcaps;
using testsupport::ScopedEnv;

namespace {

// The stand-in driver answers from these; start every test from its defaults.
void fake_defaults(ScopedEnv& env) {
  for (const char* name :
       {"FAKE_CUDA_INIT_RESULT", "FAKE_CUDA_DRIVER_VERSION", "FAKE_CUDA_DEVICE_COUNT",
        "FAKE_CUDA_NAME_0", "FAKE_CUDA_NAME_1", "FAKE_CUDA_CC_0", "FAKE_CUDA_CC_1",
        "FAKE_CUDA_MEM_0", "FAKE_CUDA_MEM_1", "FAKE_CUDA_FAIL_MEM_DEVICE"})
    env.set(name, nullptr);
}

}  // namespace

TEST_CASE("gpu: the stand-in driver's devices are reported exactly") {
  ScopedEnv env;
  fake_defaults(env);
  const GpuInfo g = probe_gpus(DASKCAPS_FAKE_CUDA);
  CHECK(g.available);
  CHECK(!g.error);
  REQUIRE(g.driver);
  CHECK(*g.driver == "12.4");
  REQUIRE(g.devices.size() == 2);
  CHECK(g.devices[0].index == 0);
  CHECK(g.devices[0].name == "Fake H200");
  CHECK(g.devices[0].compute_capability == "9.0");
  CHECK(g.devices[0].memory_bytes == 150000000000ull);
  CHECK(g.devices[1].index == 1);
  CHECK(g.devices[1].name == "Fake A10");
  CHECK(g.devices[1].compute_capability == "8.6");
  CHECK(g.devices[1].memory_bytes == 24000000000ull);
}

TEST_CASE("gpu: names, compute capability, memory and version come from the driver") {
  ScopedEnv env;
  fake_defaults(env);
  env.set("FAKE_CUDA_DEVICE_COUNT", "3")
      .set("FAKE_CUDA_NAME_1", "Tesla V100-SXM2-16GB")
      .set("FAKE_CUDA_CC_1", "7.0")
      .set("FAKE_CUDA_MEM_1", "17179869184")
      .set("FAKE_CUDA_DRIVER_VERSION", "13000");
  const GpuInfo g = probe_gpus(DASKCAPS_FAKE_CUDA);
  CHECK(g.available);
  CHECK(*g.driver == "13.0");
  REQUIRE(g.devices.size() == 3);
  CHECK(g.devices[1].name == "Tesla V100-SXM2-16GB");
  CHECK(g.devices[1].compute_capability == "7.0");
  CHECK(g.devices[1].memory_bytes == 17179869184ull);
  CHECK(g.devices[2].name == "Fake GPU 2");
}

TEST_CASE("gpu: cuInit failing gives available=false with the driver's reason") {
  ScopedEnv env;
  fake_defaults(env);
  env.set("FAKE_CUDA_INIT_RESULT", "100");  // CUDA_ERROR_NO_DEVICE
  const GpuInfo g = probe_gpus(DASKCAPS_FAKE_CUDA);
  CHECK(!g.available);
  CHECK(g.devices.empty());
  CHECK(!g.driver);
  REQUIRE(g.error);
  CHECK(*g.error == "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected");
}

TEST_CASE("gpu: an error the driver cannot name is shown by number") {
  ScopedEnv env;
  fake_defaults(env);
  env.set("FAKE_CUDA_INIT_RESULT", "999");
  const GpuInfo g = probe_gpus(DASKCAPS_FAKE_CUDA);
  CHECK(!g.available);
  CHECK(*g.error == "cuInit failed: error 999");
}

TEST_CASE("gpu: a driver without devices is not available") {
  ScopedEnv env;
  fake_defaults(env);
  env.set("FAKE_CUDA_DEVICE_COUNT", "0");
  const GpuInfo g = probe_gpus(DASKCAPS_FAKE_CUDA);
  CHECK(!g.available);
  CHECK(*g.driver == "12.4");
  CHECK(*g.error == "the CUDA driver reports no devices");
}

TEST_CASE("gpu: a failing device query names the device and keeps the others") {
  ScopedEnv env;
  fake_defaults(env);
  env.set("FAKE_CUDA_FAIL_MEM_DEVICE", "1");
  const GpuInfo g = probe_gpus(DASKCAPS_FAKE_CUDA);
  CHECK(g.available);
  REQUIRE(g.devices.size() == 1);
  CHECK(g.devices[0].name == "Fake H200");
  REQUIRE(g.error);
  CHECK(*g.error ==
        "device 1: cuDeviceTotalMem_v2 failed: CUDA_ERROR_INVALID_DEVICE (101): invalid device ordinal");
}

TEST_CASE("gpu: a missing driver library gives dlopen's reason") {
  const GpuInfo g = probe_gpus("/nonexistent/libcuda.so.1");
  CHECK(!g.available);
  CHECK(g.devices.empty());
  REQUIRE(g.error);
  CHECK(*g.error == "/nonexistent/libcuda.so.1: cannot open shared object file: No such file or directory");
}

TEST_CASE("gpu: a library that is not a CUDA driver is refused by name") {
  const GpuInfo g = probe_gpus("libz.so.1");
  CHECK(!g.available);
  REQUIRE(g.error);
  CHECK(*g.error == "libz.so.1: not a CUDA driver library (no symbol cuInit)");
}

TEST_CASE("gpu: on this host the default driver either loads or says why") {
  ScopedEnv env;
  env.set(kCudaDriverEnv, nullptr);
  CHECK(default_cuda_driver_path() == "libcuda.so.1");
  void* real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!real) real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  const GpuInfo g = probe_gpus(default_cuda_driver_path());
  if (!real) {
    CHECK(!g.available);
    REQUIRE(g.error);
    CHECK(g.error->find("libcuda.so.1: cannot open shared object file") == 0);
  } else {
    CHECK((g.available || g.error));
  }
}

TEST_CASE("gpu: DASKCAPS_CUDA_DRIVER names another driver") {
  ScopedEnv env;
  env.set(kCudaDriverEnv, "/opt/x/libcuda.so");
  CHECK(default_cuda_driver_path() == "/opt/x/libcuda.so");
  env.set(kCudaDriverEnv, "");
  CHECK(default_cuda_driver_path() == "libcuda.so.1");
}

TEST_CASE("gpu: driver versions read as major.minor") {
  CHECK(cuda_version_string(13000) == "13.0");
  CHECK(cuda_version_string(12040) == "12.4");
  CHECK(cuda_version_string(11080) == "11.8");
  CHECK(cuda_version_string(9020) == "9.2");
  CHECK(cuda_version_string(0) == "0");
}
