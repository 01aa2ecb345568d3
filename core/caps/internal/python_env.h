// The Python environment a Dask process would have: found by running one
// interpreter on a short embedded script (python_probe_script()).
//
// The interpreter is started directly (posix_spawnp: no shell; a name without
// a slash is searched on PATH), with stdin from /dev/null and the caller's
// environment, so DASK_* variables and PYTHONPATH apply as they would to a
// real Dask process. Its stdout is read up to max_output_bytes, its stderr
// is kept for error messages (last line), and it is killed (SIGKILL) when the
// timeout passes. The script imports dask and distributed and reads their
// configuration; it starts no cluster, opens no socket and writes no file.
//
// The script prints one JSON object on stdout:
//   {"dask-caps-probe": 1, "executable": str, "python": [3, 11, 2],
//    "pickle-protocol": int, "dask": str, "distributed": str,
//    "compression-config": str|null|false, "compression": str|null|false,
//    "compressions": [str...], "handshake": {...}, "packages": {name: str|null}}
// or, when dask or distributed cannot be imported, the same object cut short
// with "error": "cannot import distributed: ModuleNotFoundError: ...".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "daskcaps/caps/probe.h"
#include "daskcaps/base/result.h"

namespace daskcaps {

struct PythonRunOptions {
  std::chrono::milliseconds timeout{60'000};
  std::uint64_t max_output_bytes = std::uint64_t{1} << 20;
};

/// The embedded Python source (Python 3.6 and later).
std::string_view python_probe_script();

/// Runs `executable` on the script and reads what it printed. Errors, each
/// with the executable as context:
///   Errc::not_found      it cannot be started ("cannot run: No such file or
///                        directory"), or dask/distributed is not importable
///                        ("cannot import distributed: ...")
///   Errc::timeout        it did not finish within the timeout (it is killed)
///   Errc::limit_exceeded it printed more than max_output_bytes
///   Errc::bad_value      it exited non-zero or by a signal (with the last
///                        line of its stderr), or its output is not the
///                        script's JSON ("not a Python interpreter ...")
Result<PythonEnv> probe_python(const std::string& executable, const PythonRunOptions& options = {});

/// Parses what the script printed (exposed for tests). Errors as above for
/// output that is not the script's JSON or that carries "error".
Result<PythonEnv> parse_python_probe(std::string_view output);

}  // namespace daskcaps
