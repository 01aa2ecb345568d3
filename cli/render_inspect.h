// Renders inspect reports (core/recode/describe.h) as readable text; their
// JSON is core/recode/describe_json.h, shared with the Python module.
#pragma once

#include <ostream>
#include <string>

#include "cli/common.h"
#include "daskcaps/recode/describe.h"
#include "daskcaps/recode/describe_json.h"

namespace daskcaps::cli {

void render_message_text(std::ostream& out, const MessageReport& report);

}  // namespace daskcaps::cli
