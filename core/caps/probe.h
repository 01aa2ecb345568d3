// What this host, and a Dask process started here, can do (docs/cli.md §2:
// `probe`). The probe is also the in-memory form of a probe file: the JSON
// that `dask-caps probe --json` prints, which every command accepts in place
// of a live endpoint (read and written by the functions at the end).
//
// Where the parts come from:
//   codecs            this build (core/wire/codec.h) with its library versions
//   pickle-protocols  the pickle engine's range, 0..5 read and write
//   gpu               the CUDA driver, loaded at run time (core/caps/internal/gpu.h)
//   python            one interpreter, run on a short script (core/caps/internal/python_env.h)
//   handshake         Dask's own Comm.handshake_info() as that interpreter
//                     computes it; when the interpreter could not say (or a
//                     probe file has only the python part), the rule of
//                     docs/protocol.md §2.3 applied to the python part (dask_handshake below)
//   capabilities      derived from the above (capabilities_of below)
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/result.h"
#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/handshake.h"

namespace daskcaps {

/// The probe file schema this build writes and reads.
inline constexpr const char* kProbeSchema = "dask-caps.probe/1";

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
  std::string executable;  // as named with --python (a path), else sys.executable
  std::string version;     // "3.11.2": sys.version_info[:3]
  std::int64_t pickle_protocol = 0;  // pickle.HIGHEST_PROTOCOL
  std::optional<std::string> dask;
  std::optional<std::string> distributed;
  /// distributed.comm.compression as configured ("auto", "lz4", null, false)
  /// before "auto" is resolved.
  CompressionValue compression_config;
  /// What Dask resolves the configuration to (get_default_compression()),
  /// when the interpreter reported it.
  std::optional<CompressionValue> compression;
  std::vector<std::string> compressions;  // codecs distributed can import
  /// numpy, cupy, lz4, zstandard, snappy, msgpack, cloudpickle, ...: version
  /// or nullopt when not importable ("unknown" when importable but the
  /// version cannot be read).
  std::map<std::string, std::optional<std::string>> packages;
  /// The dict Dask's own Comm.handshake_info() returned in that interpreter
  /// (to a peer on another host). Not part of the python JSON object: it
  /// becomes HostProbe::handshake.
  std::optional<Handshake> dask_handshake;
  /// Why Dask could not make its handshake there (distributed 2023.5 and
  /// later import with an unknown configured codec and fail on their first
  /// connection: "ValueError: Invalid compression setting ..."). Not part of
  /// the JSON either.
  std::optional<std::string> handshake_error;
};

struct HostProbe {
  std::string tool_version;  // dask-caps version that made it
  std::string hostname;
  std::vector<CodecSupport> codecs;
  std::vector<int> pickle_protocols_read;   // 0..5
  std::vector<int> pickle_protocols_write;  // 0..5
  GpuInfo gpu;
  std::optional<PythonEnv> python;
  /// Why python is absent when a probe was attempted and failed, or why
  /// the handshake could not be derived from it (JSON "python-error");
  /// nullopt when all went well or Python was not asked for.
  std::optional<std::string> python_error;
  /// Exactly the dict Dask on this host would send (only with python).
  std::optional<Handshake> handshake;
  Capabilities capabilities;
};

struct ProbeOptions {
  enum class PythonMode : std::uint8_t {
    automatic,  // the first of python_candidates that imports distributed
    named,      // exactly python_executable; its failure fails the probe
    none,       // do not look at Python (python stays null, no handshake)
  };
  PythonMode python_mode = PythonMode::automatic;
  std::string python_executable;  // PythonMode::named: a path or a name on PATH
  std::vector<std::string> python_candidates{"/usr/bin/python3", "python3"};
  std::chrono::milliseconds python_timeout{60'000};
  /// Driver library to load; empty: default_cuda_driver_path() (core/caps/internal/gpu.h).
  std::string cuda_driver;
};

/// Probes this host. Fails only in PythonMode::named, with the reason that
/// interpreter could not be probed (it cannot be run, is not Python, lacks
/// distributed, timed out; the error's context is the executable). In
/// automatic mode a failure of every candidate leaves python null and puts
/// each candidate's reason into python_error.
Result<HostProbe> probe_host(const ProbeOptions& options);

/// Every codec of this build (kAllCodecs order) with its library and version.
std::vector<CodecSupport> build_codecs();

/// Pickle protocols the dask-caps pickle engine reads and writes.
std::vector<int> pickle_protocols_read();
std::vector<int> pickle_protocols_write();

/// The "compression" a Python Dask peer with this environment advertises
/// (docs/protocol.md §2.3), from compression_config and compressions:
///   "auto"    -> "lz4" if importable, else "snappy", else nil
///   false     -> false for distributed < 2023.5.0, nil from 2023.5.0 on
///   nil       -> nil
///   a name    -> that name; Errc::unknown_codec when distributed cannot
///                import it (Dask raises ValueError at import time)
/// The newest releases' same-host rule (nil between processes on one host)
/// is not applied: this is what the host advertises to other hosts.
Result<CompressionValue> advertised_compression(const PythonEnv& python);

/// The handshake dict Dask with this environment sends: dask_handshake when
/// the interpreter reported it; Errc::unknown_codec with its reason when it
/// reported why it could not make one; else {advertised_compression, python
/// version as [major, minor, micro], pickle_protocol}.
Result<Handshake> dask_handshake(const PythonEnv& python);

/// The extended capability set of a probed host:
///   codecs  with python: the codecs distributed imports that dask-caps also
///           knows, the advertised codec first, then lz4, snappy, zstd, zlib;
///           without python: this build's codecs in that order, or (for a
///           probe file without either) the handshake's codec if it names one
///   max-pickle-protocol  python's HIGHEST_PROTOCOL, else the handshake's,
///           else the highest protocol in pickle_protocols_read
///   gpu     gpu.available
Capabilities capabilities_of(const HostProbe& probe);

// Probe files: the JSON `dask-caps probe --json` prints, read back in place
// of a live endpoint, or written by hand to describe a remote host.
//
// Layout (keys are contract, docs/cli.md §2; "schema" always first):
//
//   {"schema": "dask-caps.probe/1",
//    "dask-caps-version": "0.1.0", "hostname": "node1",
//    "codecs": [{"name": "lz4", "library": "liblz4", "version": "1.9.4",
//                "read": true, "write": true}, ...],
//    "pickle-protocols": {"read": [0,1,2,3,4,5], "write": [0,1,2,3,4,5]},
//    "gpu": {"available": true, "driver": "13.0",
//            "devices": [{"index": 0, "name": "NVIDIA H200",
//                         "compute-capability": "9.0",
//                         "memory-bytes": 150109880320}],
//            "error": null},
//    "python": {"executable": "/usr/bin/python3", "version": "3.11.2",
//               "pickle-protocol": 5, "dask": "2022.12.1", "distributed":
//               "2022.12.1", "compression-config": "auto",
//               "compression": "lz4",
//               "compressions": ["lz4", "snappy", "zlib", "zstd"],
//               "packages": {"numpy": "1.24.2", "cupy": null, ...}},
//    "python-error": null,
//    "handshake": {"compression": "lz4", "python": [3, 11, 2],
//                  "pickle-protocol": 5},
//    "capabilities": {"codecs": ["lz4", "snappy", "zstd", "zlib"],
//                     "max-pickle-protocol": 5, "gpu": true}}
//
// "python", "handshake" and "gpu" may be null; "compression" values are a
// codec name, null or false, exactly as Dask puts them in its handshake.
//
// Reading (hand-written files welcome). Required:
//   - "schema": "dask-caps.probe/1";
//   - at least one of "handshake", "python", "capabilities" not null;
//   - inside "python": "version" and "pickle-protocol";
//   - inside "codecs[]": "name".
// Everything else is optional and defaults to: codecs and pickle-protocols
// empty (what the dask-caps build there can do is unknown), gpu unavailable,
// python-error none, gpu.available true exactly when devices are listed,
// device index its position in the list, python "compression-config" the
// python "compression" when given, else "auto" (Dask 2022.12's default).
// A missing "handshake" is derived from "python" (dask_handshake, docs/protocol.md §2.3),
// missing "capabilities" (or missing keys inside it) from the rest
// (capabilities_of); a "handshake" given is kept as written, missing keys
// included (that is what an incomplete peer sends). Unknown keys are ignored.
//
// Errors:
//   Errc::not_found / io      the file cannot be opened or read
//   Errc::limit_exceeded      larger than kMaxProbeFileBytes, or a
//                             "capabilities" key past the bounds a peer's
//                             key has (Limits: max_capability_codecs names,
//                             max_capability_name bytes); such a key is read
//                             as a peer's is (read_capabilities)
//   Errc::bad_magic           not JSON, not an object, no "schema", or a
//                             schema of another kind ("dask-caps.check/1")
//   Errc::unsupported_version "dask-caps.probe/N" with N other than 1
//   Errc::bad_value           a required key is missing or a key has the
//                             wrong type; the message names the key as a
//                             JSON pointer, e.g. "/python/pickle-protocol"

inline constexpr std::uint64_t kMaxProbeFileBytes = std::uint64_t{16} << 20;

/// The probe document, "schema" first, dumped with two-space indent and a
/// final newline (what `probe --json` prints).
std::string probe_to_json_text(const HostProbe& probe);

/// Reads a probe document from its text (or from a file, below).
Result<HostProbe> parse_probe_file(std::string_view text);
/// Reads a probe file; errors carry the path as context.
Result<HostProbe> read_probe_file(const std::string& path);

}  // namespace daskcaps
