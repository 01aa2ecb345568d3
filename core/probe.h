// What this host, and a Dask process started here, can do (DESIGN.md
// `probe`). The probe is also the in-memory form of a probe file: the JSON
// that `dask-caps probe --json` prints, which every command accepts in place
// of a live endpoint (core/probe_file.h reads and writes it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/codec.h"
#include "core/handshake.h"
#include "core/result.h"

namespace daskcaps {

struct CodecSupport {
  std::string name;     // "lz4", ...
  std::string library;  // "liblz4"
  std::string version;  // "1.9.4"
  bool read = true;
  bool write = true;
};

struct GpuDevice {
  int index = 0;
  std::string name;
  std::string compute_capability;  // "9.0"
  std::uint64_t memory_bytes = 0;
};

struct GpuInfo {
  bool available = false;
  std::optional<std::string> driver;  // driver version, e.g. "13.0"
  std::vector<GpuDevice> devices;
  std::optional<std::string> error;  // why none were found, when that is known
};

/// What a Dask process started with one Python interpreter would use.
struct PythonEnv {
  std::string executable;
  std::string version;  // "3.11.2"
  std::int64_t pickle_protocol = 0;  // pickle.HIGHEST_PROTOCOL
  std::optional<std::string> dask;
  std::optional<std::string> distributed;
  /// distributed.comm.compression as configured ("auto", "lz4", null, false)
  /// before "auto" is resolved.
  CompressionValue compression_config;
  std::vector<std::string> compressions;  // codecs distributed can import
  /// numpy, cupy, lz4, zstandard, snappy, msgpack, cloudpickle, ...: version
  /// or nullopt when not importable.
  std::map<std::string, std::optional<std::string>> packages;
};

struct HostProbe {
  std::string tool_version;  // dask-caps version that made it
  std::string hostname;
  std::vector<CodecSupport> codecs;
  std::vector<int> pickle_protocols_read;   // 0..5
  std::vector<int> pickle_protocols_write;  // 0..5
  GpuInfo gpu;
  std::optional<PythonEnv> python;
  /// Exactly the dict Dask on this host would send (only with python).
  std::optional<Handshake> handshake;
  Capabilities capabilities;
};

}  // namespace daskcaps
