// A check gate: a built report judged by a policy and compared with a
// baseline, in the one order that makes them agree:
//   1. the report is built with the policy's Python-version rule
//      (report_options);
//   2. endpoints that appeared or vanished since the baseline become
//      findings (baseline::add_endpoint_changes), so that
//   3. the policy judges them like any other (policy::apply_policy: its
//      severities, its ignores out of the report, the summary recounted);
//   4. what is left is compared with the baseline (baseline::compare):
//      ignored findings neither match nor count as new.
// What decides a gate (deciding()) is the worst new finding with a baseline,
// the worst finding without one; a program maps it to its exit status.
#pragma once

#include <optional>
#include <vector>

#include "daskcaps/caps/baseline.h"
#include "daskcaps/caps/caps_report.h"
#include "daskcaps/caps/policy.h"

namespace daskcaps::gate {

struct Gate {
  std::optional<policy::Policy> policy;
  std::optional<baseline::Baseline> baseline;
  // Filled by judge():
  std::vector<policy::IgnoredFinding> ignored;  // with a policy
  std::optional<baseline::Diff> diff;           // with a baseline

  /// With a baseline: the worst new finding; else the worst of the report.
  std::optional<Severity> deciding(const report::Report& report) const;
};

/// The options to build the report with (the policy's Python-version rule).
report::ReportOptions report_options(const Gate& gate);

/// Steps 2 to 4 above, on a report built with report_options(gate).
void judge(report::Report& report, Gate& gate);

}  // namespace daskcaps::gate
