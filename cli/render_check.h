// Rendering of the check report (core/caps/caps_report.h) as JSON (schema
// dask-caps.check/1, schemas/check.schema.json; keys are contract:
// docs/cli.md §3) and as text. SARIF is cli/render_sarif.h.
#pragma once

#include <ostream>

#include "cli/common.h"
#include "daskcaps/caps/caps_report.h"
#include "daskcaps/caps/gate.h"
#include "daskcaps/caps/negotiate.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps::cli {

inline constexpr const char* kCheckSchema = "dask-caps.check/1";

// One finding and one pair as the check document writes them (the SARIF
// properties too): core/caps/negotiate.h, shared with the Python module.

/// The check document. With the gate's policy: "policy" (the effective
/// policy document) and "ignored"; with its baseline: "baseline" on every
/// finding and a "baseline" object (file, new counts, unchanged, vanished).
/// The gate must have judged the report (gate::judge).
Json check_report_json(const report::Report& report, const gate::Gate& gate = {});
void render_check_text(const report::Report& report, std::ostream& out, const gate::Gate& gate = {});

}  // namespace daskcaps::cli
