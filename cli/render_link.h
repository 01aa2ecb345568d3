// What `check` says of the link to a live endpoint: what it measured
// (TCP_INFO after the conversation: RTT, and a delivery rate where the
// kernel has one the sender did not limit) and the codec the per-link
// choice (core/caps/link_choice.h) would pick there for large compressible
// frames. Endpoints without link figures (probe files, sockets that give
// none) get nothing: no key, no line, so outputs of probe files stay as
// they were.
#pragma once

#include <optional>
#include <string>

#include "cli/common.h"
#include "daskcaps/caps/caps_report.h"

namespace daskcaps::cli {

/// The endpoint's "link" object (schemas/check.schema.json $defs/link);
/// nullopt without link figures.
std::optional<Json> link_json(const report::EndpointInfo& e);
/// "  link: rtt 0.05 ms (min 0.03 ms), rate unknown (...); codec here: ...\n",
/// or "" without link figures.
std::string link_text(const report::EndpointInfo& e);

}  // namespace daskcaps::cli
