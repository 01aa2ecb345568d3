// Probe documents as JSON values (daskcaps/caps/probe.h gives programs
// the text): the whole document and its parts, written and read back, for
// the layers' own documents that embed them (check's endpoints and pairs,
// baselines, negotiate). Errors of the readers: Errc::bad_value with the
// JSON pointer of the value (daskcaps/caps/probe.h lists them).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/probe.h"

namespace daskcaps {

using OrderedJson = nlohmann::ordered_json;

/// The whole probe document, "schema" first (what `probe --json` prints).
OrderedJson probe_to_json(const HostProbe& probe);

/// The parts, for reports that embed them (check's endpoints and pairs).
OrderedJson compression_to_json(const CompressionValue& value);  // "lz4", null or false
OrderedJson handshake_to_json(const Handshake& handshake);       // present keys only
OrderedJson gpu_to_json(const GpuInfo& gpu);
OrderedJson python_to_json(const PythonEnv& python);
OrderedJson capabilities_to_json(const Capabilities& capabilities);

/// Reads the parts back. `where` is the JSON pointer of the value, used in
/// error messages ("/handshake"). Errors: Errc::bad_value as above.
Result<CompressionValue> compression_from_json(const OrderedJson& value, std::string_view where);
Result<Handshake> handshake_from_json(const OrderedJson& value, std::string_view where);
Result<GpuInfo> gpu_from_json(const OrderedJson& value, std::string_view where);
Result<PythonEnv> python_from_json(const OrderedJson& value, std::string_view where);
/// {"codecs": [...], "max-pickle-protocol": N, "gpu": bool, "dask-caps":
/// str, "role": str}: the keys present (and not null) replace those of
/// `defaults`. Read by read_capabilities (daskcaps/wire/handshake.h), the
/// reader of a peer's key, with the default Limits: a refusal is
/// Errc::bad_value (a wrong type, a negative protocol, a byte that is not
/// printable ASCII) or Errc::limit_exceeded (more codec names, or a longer
/// string, than those limits allow), named by its JSON pointer.
Result<Capabilities> capabilities_from_json(const OrderedJson& value, std::string_view where,
                                            Capabilities defaults);

/// Reads a probe document from a parsed JSON value.
Result<HostProbe> probe_from_json(const OrderedJson& doc);

}  // namespace daskcaps
