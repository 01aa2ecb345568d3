// Renders inspect reports (core/recode/describe.h) as JSON or readable text.
#pragma once

#include <ostream>
#include <string>

#include "cli/common.h"
#include "daskcaps/recode/describe.h"

namespace daskcaps::cli {

Json message_report_json(const MessageReport& report);
void render_message_text(std::ostream& out, const MessageReport& report);

/// JSON for a handshake as received: exactly its keys and values.
Json handshake_json(const Handshake& h);

}  // namespace daskcaps::cli
