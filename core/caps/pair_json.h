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
#pragma once

#include <string>

#include "daskcaps/caps/caps.h"

namespace daskcaps {

/// One finding: severity, code, message, hint, and packages / endpoint
/// when it has them.
std::string finding_json(const Finding& finding);

/// What Dask negotiates: compression and pickle-protocol, or both null and
/// the "error" Dask fails the connection with.
std::string negotiation_json(const DaskNegotiation& negotiation);

/// The recommended rule for a pair: compression, pickle-protocol, layout.
std::string recommendation_json(const Recommendation& recommendation);

/// The whole pair object above, without baseline marks.
std::string pair_json(const std::string& a, const std::string& b, const PairReport& report);

}  // namespace daskcaps
