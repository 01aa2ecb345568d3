// A checked pair as JSON: the pair object `check --json` prints
// (pair_json(), at the end) and negotiate(), which makes it from two
// documents.
//
// negotiate(): what `check` says of two peers, for callers that hold them
// as documents rather than as endpoints (the Python module's
// dask_caps.negotiate(), and through it the Dask plugin): what Dask
// negotiates between them, what it should negotiate per direction, and the
// findings, by the rules of core/caps/caps.h (evaluate_pair), as the pair
// object of `check --json` (pair_json() below).
//
// A side is one of:
//   - a probe document (an object with "schema": what `probe --json`
//     prints, read as a probe file is, core/caps/probe.h): its
//     handshake, capabilities, Python version and packages;
//   - a handshake dict ({"compression": ..., "python": [3, 11, 2],
//     "pickle-protocol": 5}, as Dask sends it, read as a probe file's
//     "handshake" is): capabilities inferred from it as `check` infers them
//     for a live peer without a versions reply (peer_from_live), unless the
//     dict has a "capabilities" member ({"codecs": [...],
//     "max-pickle-protocol": N, "gpu": bool}), which is then published.
// Capabilities given beside a side (NegotiateSide::capabilities) take the
// place of those keys they name, and make the side's capabilities published.
//
// The result is the pair object with a = local and b = remote, followed by
// what each side should write with, always per direction:
//   "local-to-remote": {"compression": "lz4"|null, "pickle-protocol": 5, "layout": "cpu"|"gpu"},
//   "remote-to-local": {...}
// `check REMOTE.json --as LOCAL.json --json` gives the same pair object
// (its pairs[0]) for the same two probe files, named by their paths.
//
// Documents go in and out as JSON text (the result compact, UTF-8, a byte
// of a string that is not UTF-8 replaced by U+FFFD), so that no installed
// header ties a program to one JSON library (docs/design.md §2).
//
// Errors: Errc::bad_magic for a document that is not JSON (with the offset
// of the first bad byte), Errc::bad_value for a side that is neither (not an object, a
// wrong type in a key, named by its JSON pointer under "/local" or
// "/remote"), and the probe file errors of probe_from_json.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/caps.h"
#include "daskcaps/wire/handshake.h"

namespace daskcaps {

struct NegotiateSide {
  std::string document;  // a probe document or a handshake dict (JSON text)
  std::string name;      // how the findings name it
  /// The role its findings and hints use ("client", "file", "Scheduler",
  /// "Worker", "Nanny", or ""); nullopt: "client" for the local side (as
  /// `check --as` has it), "file" for a probe document, "" for a handshake.
  std::optional<std::string> role;
  /// Published capabilities (see above); nullopt: none given.
  std::optional<std::string> capabilities;  // JSON text
};

struct NegotiateOptions {
  /// Both sides on one host (what the newest releases advertise then);
  /// nullopt: as `check` decides for probe files, when both name the same
  /// host name.
  std::optional<bool> same_host;
  PythonRule python_rule = PythonRule::same_minor;
};

/// The pair object described above.
Result<std::string> negotiate(const NegotiateSide& local, const NegotiateSide& remote,
                              const NegotiateOptions& options = {});

// The JSON of one checked pair (schema dask-caps.check/1,
// schemas/check.schema.json; keys are contract: docs/cli.md §3): what
// Dask negotiates between two peers, what it should negotiate, and the
// findings. `dask-caps check --json` writes one such object per pair (and
// adds its group and baseline keys); the Python module's
// dask_caps.negotiate() returns it for the two peers it is given.
//
//   {"a": "<name>", "b": "<name>",
//    "dask": {"compression": "lz4"|null|false, "pickle-protocol": 5,
//             ["error": "..." when Dask fails the connection: then both are null],
//             ["scheduler-initiated": {...} when one side is a scheduler]} | null,
//    "recommended": {"compression": "lz4"|null | {"a-to-b": ..., "b-to-a": ...},
//                    "pickle-protocol": 5,
//                    "layout": "cpu"|"gpu" | {"a-to-b": ..., "b-to-a": ...}},
//    "findings": [{"severity", "code", "message", "hint", ["packages"], ["endpoint"]}]}
//
// "recommended" names one value when both directions agree, else one per
// direction.
//
// Each function returns JSON text (compact, UTF-8; a byte of a string that
// is not UTF-8 becomes U+FFFD), which a program parses with its own JSON
// library: no installed header ties a program to one (docs/design.md §2).

/// One finding: severity, code, message, hint, and packages / endpoint
/// when it has them.
std::string finding_json(const Finding& finding);

/// The whole pair object above, without baseline marks.
std::string pair_json(const std::string& a, const std::string& b, const PairReport& report);

}  // namespace daskcaps
