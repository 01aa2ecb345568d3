#include "daskcaps/caps/gate.h"

#include <doctest/doctest.h>

#include "core/caps/internal/gate_steps.h"
#include "support/gate_reports.h"

using namespace daskcaps;
using baseline::State;
using gatetest::check;
using gatetest::Host;

namespace {

policy::Policy parsed_policy(const std::string& text) {
  auto p = policy::parse_policy(text);
  REQUIRE_MESSAGE(p, (p ? "" : p.error().message()));
  p->name = "test";
  return std::move(*p);
}

baseline::Baseline parsed(const std::string& text) {
  auto b = baseline::parse_baseline(text);
  REQUIRE_MESSAGE(b, (b ? "" : b.error().message()));
  b->path = "baseline.json";
  return std::move(*b);
}

// The check of a.json (lz4) and b.json (zstd): one compression-mismatch.
const char* kCodecApart = R"({"schema": "dask-caps.check/1",
  "endpoints": [{"address": "a.json"}, {"address": "b.json"}],
  "pairs": [{"a": "a.json", "b": "b.json", "findings": [{"severity": "warning", "code": "compression-mismatch"}]}]})";

}  // namespace

TEST_CASE("gate: endpoint changes are judged by the policy, ignored findings neither match nor count") {
  Host a{"a.json", "node-a"};
  Host c{"c.json", "node-c"};
  c.compression = "zstd";
  gate::Gate g;
  g.policy = parsed_policy(R"({"schema": "dask-caps.policy/1", "extends": "relaxed",
    "ignore": [{"code": "compression-mismatch", "endpoint": "c.json", "reason": "being rebuilt"}]})");
  g.baseline = parsed(kCodecApart);
  auto r = report::build_report(std::nullopt, {gatetest::endpoint(a), gatetest::endpoint(c)}, gate::report_options(g));
  gate::judge(r, g);
  // b.json vanished (relaxed: info), c.json appeared (info); a <-> c's mismatch is ignored.
  REQUIRE(g.ignored.size() == 1);
  CHECK(g.ignored[0].finding.code == "compression-mismatch");
  CHECK(r.pairs[0].report.findings.empty());
  REQUIRE(r.summary.findings.size() == 2);
  for (const auto& f : r.summary.findings) CHECK(f.severity == Severity::info);
  REQUIRE(g.diff);
  CHECK(g.diff->summary == std::vector<State>{State::new_, State::new_});
  // The baseline's a <-> b mismatch has no counterpart: vanished, not matched by the ignored one.
  CHECK(g.diff->vanished.size() == 1);
  CHECK(g.deciding(r) == Severity::info);
  CHECK(r.summary.worst == Severity::info);

  // Without a baseline the worst finding of the report decides.
  gate::Gate plain;
  auto r2 = check({a, c});
  gate::judge(r2, plain);
  CHECK(!plain.diff);
  CHECK(plain.deciding(r2) == Severity::warning);
  CHECK(gate::report_options(plain).python_rule == PythonRule::same_minor);
}
