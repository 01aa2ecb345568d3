#include "daskcaps/caps/gate.h"

#include "core/caps/internal/gate_steps.h"

namespace daskcaps::gate {

std::optional<Severity> Gate::deciding(const report::Report& report) const {
  return diff ? diff->worst_new : report.summary.worst;
}

report::ReportOptions report_options(const Gate& gate) {
  report::ReportOptions options;
  if (gate.policy) options.python_rule = gate.policy->python_rule;
  return options;
}

void judge(report::Report& report, Gate& gate) {
  if (gate.baseline) baseline::add_endpoint_changes(report, *gate.baseline);
  if (gate.policy)
    gate.ignored = policy::apply_policy(report, *gate.policy);  // recounts
  else
    report::count_findings(report);
  if (gate.baseline) gate.diff = baseline::compare(report, *gate.baseline);
}

}  // namespace daskcaps::gate
