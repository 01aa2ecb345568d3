#include "core/caps/internal/gate_steps.h"

#include <doctest/doctest.h>

#include <set>

#include "support/gate_reports.h"

using namespace daskcaps;
using baseline::State;
using gatetest::check;
using gatetest::Host;

namespace {

baseline::Baseline parsed(const std::string& text) {
  auto b = baseline::parse_baseline(text);
  REQUIRE_MESSAGE(b, (b ? "" : b.error().message()));
  b->path = "baseline.json";
  return std::move(*b);
}

Error parse_error(const std::string& text) {
  auto b = baseline::parse_baseline(text);
  REQUIRE(!b);
  return b.error();
}

// Two hosts whose only difference is the codec: one compression-mismatch
// warning on the pair a.json <-> b.json.
std::vector<Host> codec_apart() {
  Host a{"a.json", "node-a"};
  Host b{"b.json", "node-b"};
  b.compression = "zstd";
  return {a, b};
}

// A check document as check --json writes it, with the keys the baseline reads.
const char* kCodecApart = R"({
  "schema": "dask-caps.check/1", "local": null,
  "endpoints": [{"address": "a.json", "type": "file"}, {"address": "b.json", "type": "file"}],
  "pairs": [{"a": "a.json", "b": "b.json", "findings": [
     {"severity": "warning", "code": "compression-mismatch", "message": "an older wording", "hint": "h"}]}],
  "summary": {"groups": [], "cluster-findings": []}})";

std::size_t count(const std::vector<State>& v, State s) {
  std::size_t n = 0;
  for (State x : v) n += x == s;
  return n;
}

}  // namespace

TEST_CASE("baseline: the same findings again are unchanged, whatever the message says") {
  auto r = check(codec_apart());
  const auto b = parsed(kCodecApart);
  baseline::add_endpoint_changes(r, b);
  CHECK(r.summary.findings.empty());  // same endpoints
  const auto d = baseline::compare(r, b);
  REQUIRE(d.pairs.size() == 1);
  REQUIRE(d.pairs[0].size() == 1);
  CHECK(d.pairs[0][0] == State::unchanged);
  CHECK(d.unchanged == 1);
  CHECK(d.vanished.empty());
  CHECK(!d.worst_new);
  CHECK(baseline::to_string(State::unchanged) == "unchanged");
}

TEST_CASE("baseline: a finding the baseline lacks is new; only new ones decide") {
  auto hosts = codec_apart();
  hosts[1].python = "3.10.8";  // now also a python-version-mismatch warning
  auto r = check(hosts);
  const auto d = baseline::compare(r, parsed(kCodecApart));
  const auto& fs = r.pairs[0].report.findings;
  REQUIRE(fs.size() == 2);
  for (std::size_t i = 0; i < fs.size(); ++i)
    CHECK(d.pairs[0][i] == (fs[i].code == "compression-mismatch" ? State::unchanged : State::new_));
  CHECK(d.new_warnings == 1);
  CHECK(d.new_errors == 0);
  CHECK(d.worst_new == Severity::warning);
  CHECK(d.unchanged == 1);
  CHECK(baseline::to_string(State::new_) == "new");
}

TEST_CASE("baseline: findings the check no longer has are vanished") {
  Host a{"a.json", "node-a"};
  Host b{"b.json", "node-b"};  // same codec now: nothing to report
  auto r = check({a, b});
  const auto d = baseline::compare(r, parsed(kCodecApart));
  CHECK(d.unchanged == 0);
  CHECK(!d.worst_new);
  REQUIRE(d.vanished.size() == 1);
  CHECK(d.vanished[0].code == "compression-mismatch");
  CHECK(d.vanished[0].a.name == "a.json");
  CHECK(d.vanished[0].b.name == "b.json");
  CHECK(d.vanished[0].message == "an older wording");
}

TEST_CASE("baseline: pairs match in either order, and a code on another pair is new") {
  auto hosts = codec_apart();
  std::swap(hosts[0], hosts[1]);
  auto r = check(hosts);
  REQUIRE(report::side_name(r, r.pairs[0].a) == "b.json");
  CHECK(baseline::compare(r, parsed(kCodecApart)).pairs[0][0] == State::unchanged);

  Host c{"c.json", "node-c"};
  c.compression = "zstd";
  auto r2 = check({codec_apart()[0], c});
  const auto d = baseline::compare(r2, parsed(kCodecApart));
  CHECK(d.pairs[0][0] == State::new_);
  CHECK(d.vanished.size() == 1);
}

TEST_CASE("baseline: endpoints that appeared or vanished are findings of their own") {
  Host a{"a.json", "node-a"};
  Host c{"c.json", "node-c"};
  c.compression = "zstd";
  auto r = check({a, c});
  const auto b = parsed(kCodecApart);
  baseline::add_endpoint_changes(r, b);
  report::count_findings(r);
  REQUIRE(r.summary.findings.size() == 2);
  const Finding& appeared = r.summary.findings[0];
  CHECK(appeared.code == "endpoint-appeared");
  CHECK(appeared.endpoint == "c.json");
  CHECK(appeared.severity == Severity::info);
  CHECK(appeared.message.find("baseline.json") != std::string::npos);
  const Finding& vanished = r.summary.findings[1];
  CHECK(vanished.code == "endpoint-vanished");
  CHECK(vanished.endpoint == "b.json");
  CHECK(vanished.severity == Severity::warning);
  CHECK(r.summary.worst == Severity::warning);

  const auto d = baseline::compare(r, b);
  CHECK(count(d.summary, State::new_) == 2);
  CHECK(d.worst_new == Severity::warning);
  CHECK(d.pairs[0][0] == State::new_);  // a <-> c was never checked

  // A policy judges them like any other finding.
  auto relaxed = *policy::profile("relaxed");
  policy::apply_policy(r, relaxed);
  CHECK(r.summary.findings[1].severity == Severity::info);
}

TEST_CASE("baseline: comparisons written into a baseline are not read back as findings") {
  // A check that ran with --baseline, used as the next baseline.
  const auto b = parsed(R"({"schema": "dask-caps.check/1",
    "endpoints": [{"address": "a.json"}, {"address": "b.json"}],
    "pairs": [{"a": "a.json", "b": "b.json", "findings": [
       {"severity": "warning", "code": "compression-mismatch", "baseline": "new"}]}],
    "summary": {"cluster-findings": [
       {"severity": "info", "code": "endpoint-appeared", "endpoint": "b.json", "baseline": "new"}]}})");
  CHECK(b.findings.size() == 1);
  auto r = check(codec_apart());
  baseline::add_endpoint_changes(r, b);
  const auto d = baseline::compare(r, b);
  CHECK(d.vanished.empty());
  CHECK(!d.worst_new);
}

TEST_CASE("baseline: this host matches this host whatever its host name") {
  Host peer{"peer.json", "peer"};
  peer.compression = "zstd";
  auto probe = parse_probe_file(gatetest::probe_text(Host{"", "runner-2"}));
  REQUIRE(probe);
  Peer local = peer_from_probe(*probe, "this host (runner-2)", "client");
  std::vector<report::EndpointInfo> eps{gatetest::endpoint(peer)};
  auto r = report::build_report(local, std::move(eps));
  REQUIRE(r.pairs.size() == 1);
  REQUIRE(r.pairs[0].a == report::kLocal);

  const std::string doc = R"J({"schema": "dask-caps.check/1", "local": {"name": "this host (runner-1)"},
    "endpoints": [{"address": "peer.json"}],
    "pairs": [{"a": "this host (runner-1)", "b": "peer.json", "findings": [
       {"severity": "warning", "code": "compression-mismatch"}]}]})J";
  CHECK(baseline::compare(r, parsed(doc)).pairs[0][0] == State::unchanged);

  // A file endpoint that happens to carry that name is not this host.
  const std::string not_local = R"J({"schema": "dask-caps.check/1", "local": null,
    "endpoints": [{"address": "peer.json"}],
    "pairs": [{"a": "this host (runner-2)", "b": "peer.json", "findings": [
       {"severity": "warning", "code": "compression-mismatch"}]}]})J";
  CHECK(baseline::compare(r, parsed(not_local)).pairs[0][0] == State::new_);
}

TEST_CASE("baseline: several findings of one code on a pair match by their packages first") {
  auto hosts = codec_apart();
  hosts[1].compression = "lz4";
  hosts[1].dask = "2023.1.0";  // errors for dask and for distributed
  auto r = check(hosts);
  std::vector<std::string> order;
  for (const auto& f : r.pairs[0].report.findings) order.push_back(f.code + ":" + (f.packages.empty() ? "" : f.packages[0]));
  REQUIRE(order == std::vector<std::string>{"package-mismatch:dask", "package-mismatch:distributed"});

  // The baseline knew of distributed only (written in the other order).
  const auto d = baseline::compare(r, parsed(R"({"schema": "dask-caps.baseline/1",
    "endpoints": [{"address": "a.json"}, {"address": "b.json"}],
    "pairs": [{"a": "b.json", "b": "a.json", "findings": [
       {"severity": "error", "code": "package-mismatch", "packages": ["distributed"]}]}]})"));
  CHECK(d.pairs[0][0] == State::new_);        // dask
  CHECK(d.pairs[0][1] == State::unchanged);   // distributed
  CHECK(d.new_errors == 1);

  // Without packages (an older baseline): one for one, in order.
  const auto d2 = baseline::compare(r, parsed(R"({"schema": "dask-caps.baseline/1",
    "endpoints": [{"address": "a.json"}, {"address": "b.json"}],
    "pairs": [{"a": "a.json", "b": "b.json", "findings": [
       {"severity": "error", "code": "package-mismatch"}, {"severity": "error", "code": "package-mismatch"},
       {"severity": "error", "code": "package-mismatch"}]}]})"));
  CHECK(d2.unchanged == 2);
  CHECK(d2.vanished.size() == 1);
}

TEST_CASE("baseline: a worker group matches through any worker it shares with the baseline's group") {
  // Scheduler a.json (a probe file stands in for it), workers found by a survey.
  auto make = [](std::vector<std::string> workers) {
    std::vector<report::EndpointInfo> eps;
    Host s{"tcp://10.0.0.1:8786", "sched"};
    auto sched = gatetest::endpoint(s);
    sched.type = "Scheduler";
    eps.push_back(std::move(sched));
    for (const auto& w : workers) {
      Host h{w, "worker"};
      h.compression = "zstd";
      auto e = gatetest::endpoint(h);
      e.given = false;
      e.discovered_by = "tcp://10.0.0.1:8786";
      eps.push_back(std::move(e));
    }
    Host c{"client.json", "client"};
    eps.push_back(gatetest::endpoint(c));
    return report::build_report(std::nullopt, std::move(eps));
  };
  auto r = make({"tcp://10.0.0.5:4000", "tcp://10.0.0.6:4000"});
  REQUIRE(!r.summary.groups.empty());
  const auto b = parsed(R"({"schema": "dask-caps.check/1",
    "endpoints": [{"address": "tcp://10.0.0.1:8786"}, {"address": "client.json"},
                  {"address": "tcp://10.0.0.6:4000", "discovered-by": "tcp://10.0.0.1:8786"},
                  {"address": "tcp://10.0.0.7:4000", "discovered-by": "tcp://10.0.0.1:8786"}],
    "pairs": [{"a": "tcp://10.0.0.1:8786", "b": "tcp://10.0.0.7:4000", "b-group": 0, "findings": [
                {"severity": "warning", "code": "compression-mismatch"}]},
              {"a": "client.json", "b": "tcp://10.0.0.7:4000", "b-group": 0, "findings": [
                {"severity": "warning", "code": "compression-mismatch"}]}],
    "summary": {"groups": [{"id": 0, "members": ["tcp://10.0.0.7:4000", "tcp://10.0.0.6:4000"]}]}})");
  const auto d = baseline::compare(r, b);
  CHECK(d.new_warnings == 0);
  CHECK(d.unchanged == 2);
  CHECK(d.vanished.empty());

  // The survey's members changed: one finding each way, per scheduler, info.
  baseline::add_endpoint_changes(r, b);
  std::set<std::string> codes;
  for (const auto& f : r.summary.findings) {
    CHECK(f.endpoint == "tcp://10.0.0.1:8786");
    CHECK(f.severity == Severity::info);
    codes.insert(f.code);
    if (f.code == "endpoint-appeared") CHECK(f.message.find("tcp://10.0.0.5:4000") != std::string::npos);
    if (f.code == "endpoint-vanished") CHECK(f.message.find("tcp://10.0.0.7:4000") != std::string::npos);
  }
  CHECK(codes == std::set<std::string>{"endpoint-appeared", "endpoint-vanished"});
}

TEST_CASE("baseline: summary findings match by code and endpoint") {
  auto r = check(codec_apart());
  Finding f;
  f.severity = Severity::warning;
  f.code = "unreachable";
  f.endpoint = "tcp://10.0.0.1:8786";
  r.summary.findings.push_back(f);
  f.endpoint = "tcp://10.0.0.2:8786";
  r.summary.findings.push_back(f);
  const auto d = baseline::compare(r, parsed(R"({"schema": "dask-caps.check/1", "endpoints": [], "pairs": [],
    "summary": {"cluster-findings": [{"severity": "warning", "code": "unreachable", "endpoint": "tcp://10.0.0.1:8786"}]}})"));
  CHECK(d.summary == std::vector<State>{State::unchanged, State::new_});
  CHECK(d.pairs[0][0] == State::new_);
}

TEST_CASE("baseline: fingerprints are stable across runs and tell findings apart") {
  auto hosts = codec_apart();
  hosts[1].dask = "2023.1.0";
  const auto r1 = check(hosts);
  auto swapped = hosts;
  std::swap(swapped[0], swapped[1]);
  const auto r2 = check(swapped);
  const auto f1 = baseline::fingerprints(r1);
  const auto f2 = baseline::fingerprints(r2);
  REQUIRE(f1.pairs.size() == 1);
  REQUIRE(f1.pairs[0].size() == r1.pairs[0].report.findings.size());
  CHECK(f1.pairs[0][0].size() == 64);
  std::set<std::string> a(f1.pairs[0].begin(), f1.pairs[0].end());
  std::set<std::string> b(f2.pairs[0].begin(), f2.pairs[0].end());
  CHECK(a.size() == f1.pairs[0].size());  // all different
  CHECK(a == b);                          // same findings, other order of endpoints
  CHECK(baseline::fingerprints(r1).pairs == f1.pairs);

  Host c{"c.json", "node-c"};
  c.compression = "zstd";
  const auto f3 = baseline::fingerprints(check({hosts[0], c}));
  CHECK(f3.pairs[0][0] != f1.pairs[0][0]);
}

TEST_CASE("baseline: bad baselines say what is wrong") {
  CHECK(parse_error("nope").code == Errc::bad_magic);
  CHECK(parse_error(R"({"schema": "dask-caps.probe/1"})").code == Errc::bad_magic);
  CHECK(parse_error(R"({"schema": "dask-caps.check/2"})").code == Errc::unsupported_version);
  CHECK(parse_error(R"({"schema": "dask-caps.check/1", "pairs": []})").message() ==
        "/: missing required key \"endpoints\"");
  CHECK(parse_error(R"({"schema": "dask-caps.check/1", "endpoints": [{"address": 3}], "pairs": []})").message() ==
        "/endpoints/0/address: expected a string, found an integer");
  CHECK(parse_error(R"({"schema": "dask-caps.check/1", "endpoints": [], "pairs": [{"a": "x", "b": "y"}]})").message() ==
        "/pairs/0: missing required key \"findings\"");
  CHECK(parse_error(R"({"schema": "dask-caps.check/1", "endpoints": [],
      "pairs": [{"a": "x", "b": "y", "findings": [{"code": "gpu-to-cpu", "severity": "fatal"}]}]})")
            .message()
            .find("/pairs/0/findings/0/severity") == 0);
  CHECK(parse_error(R"({"schema": "dask-caps.check/1", "endpoints": [],
      "pairs": [{"a": "x", "b": "y", "b-group": 4, "findings": []}]})")
            .message()
            .find("not in /summary/groups") != std::string::npos);
  CHECK(baseline::read_baseline_file("/nonexistent/baseline.json").error().code == Errc::not_found);
}
