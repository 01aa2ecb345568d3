// Rendering of the check report (core/caps/caps_report.h) as JSON (schema
// dask-caps.check/1, keys are contract: DESIGN.md `check`) and as text.
#pragma once

#include <ostream>

#include "cli/common.h"
#include "core/caps/caps_report.h"
#include "core/wire/msgpack.h"

namespace daskcaps::cli {

inline constexpr const char* kCheckSchema = "dask-caps.check/1";

Json check_report_json(const report::Report& report);
void render_check_text(const report::Report& report, std::ostream& out);

}  // namespace daskcaps::cli
