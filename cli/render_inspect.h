// Renders inspect reports (core/recode/describe.h) as readable text; their
// JSON is core/recode/describe.h, shared with the Python module.
#pragma once

#include <ostream>
#include <string>

#include "cli/common.h"
#include "daskcaps/recode/describe.h"

namespace daskcaps::cli {

void render_message_text(std::ostream& out, const MessageReport& report);

}  // namespace daskcaps::cli
