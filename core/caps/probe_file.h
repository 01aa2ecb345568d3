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
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daskcaps/caps/probe.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

inline constexpr std::uint64_t kMaxProbeFileBytes = std::uint64_t{16} << 20;

/// The probe document, "schema" first, dumped with two-space indent and a
/// final newline (what `probe --json` prints).
std::string probe_to_json_text(const HostProbe& probe);

/// Reads a probe document from its text (or from a file, below).
Result<HostProbe> parse_probe_file(std::string_view text);
/// Reads a probe file; errors carry the path as context.
Result<HostProbe> read_probe_file(const std::string& path);

}  // namespace daskcaps
