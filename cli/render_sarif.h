// Rendering of the check report as SARIF 2.1.0 (OASIS), for code-scanning
// dashboards such as GitHub's:
//   - one run; tool.driver.rules lists every finding code (ruleId), with
//     its default level (the policy's severity when it sets one);
//   - one result per finding the policy kept: level error / warning / note
//     from error / warning / info; message = the finding's message and hint;
//     partialFingerprints."daskCapsFinding/v1" = baseline::fingerprints
//     (stable across runs); baselineState new / unchanged with a baseline;
//     properties: severity, code, hint, the pair's sides (a, b) or the
//     endpoint, every endpoint it is about (endpoints), packages;
//   - every result has a physical location, `location` (a file of the
//     repository: --sarif-location, the policy or the baseline file), line 1:
//     code scanning refuses results without one;
//   - ignored findings are left out (code scanning does not honour SARIF
//     suppressions); run.properties lists the policy, the baseline and the
//     findings gone since it.
#pragma once

#include <string>

#include "cli/common.h"
#include "cli/render_check.h"
#include "daskcaps/caps/caps_report.h"
#include "daskcaps/caps/gate.h"

namespace daskcaps::cli {

/// A file path as a SARIF artifact URI: relative paths stay relative (to
/// the repository root, as code scanning wants), absolute ones become
/// file:// URIs; bytes other than letters, digits, "-._~/" are %-escaped.
std::string sarif_uri(const std::string& path);

/// The SARIF log of a report that `gate` judged (gate::judge).
Json check_report_sarif(const report::Report& report, const gate::Gate& gate, const std::string& location);

}  // namespace daskcaps::cli
