#include "core/caps/internal/gate_steps.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/gate_reports.h"

using namespace daskcaps;
using gatetest::check;
using gatetest::findings_of;
using gatetest::Host;

namespace {

policy::Policy parsed(const std::string& body) {
  auto p = policy::parse_policy(R"({"schema": "dask-caps.policy/1")" + (body.empty() ? "" : ", " + body) + "}");
  REQUIRE_MESSAGE(p, (p ? "" : p.error().message()));
  p->name = "test";
  return std::move(*p);
}

Error parse_error(const std::string& text) {
  auto p = policy::parse_policy(text);
  REQUIRE(!p);
  return p.error();
}

Error body_error(const std::string& body) { return parse_error(R"({"schema": "dask-caps.policy/1", )" + body + "}"); }

// Two hosts: compression differs (warning), Python differs in the patch
// release (info), pandas differs (info package-mismatch).
std::vector<Host> patch_apart() {
  Host a{"a.json", "node-a"};
  Host b{"b.json", "node-b"};
  b.compression = "zstd";
  b.python = "3.11.4";
  b.pandas = "2.0.0";
  return {a, b};
}

}  // namespace

TEST_CASE("policy: the three profiles read back as policy files, and their settings are as documented") {
  for (std::string_view name : policy::profile_names()) {
    auto p = policy::profile(name);
    REQUIRE(p);
    CHECK(p->name == name);
    CHECK(p->path.empty());
    auto again = policy::parse_policy(policy::policy_to_json(*p));
    REQUIRE(again);
    CHECK(again->python_rule == p->python_rule);
    CHECK(again->severity == p->severity);
  }
  CHECK(!policy::profile("strictest"));

  const auto def = *policy::profile("default");
  CHECK(def.python_rule == PythonRule::same_minor);
  CHECK(def.severity.empty());
  CHECK(def.ignores.empty());

  const auto strict = *policy::profile("strict");
  CHECK(strict.python_rule == PythonRule::exact);
  for (const char* code : {"compression-mismatch", "codec-unavailable", "gpu-to-cpu", "unreachable", "endpoint-vanished"})
    CHECK(strict.severity.at(code) == Severity::error);

  const auto relaxed = *policy::profile("relaxed");
  CHECK(relaxed.python_rule == PythonRule::same_major);
  for (const char* code : {"compression-mismatch", "unreachable", "endpoint-vanished"})
    CHECK(relaxed.severity.at(code) == Severity::info);
}

TEST_CASE("policy: the default profile changes nothing") {
  auto plain = check(patch_apart());
  auto judged = check(patch_apart(), policy::profile("default")->python_rule);
  const auto ignored = policy::apply_policy(judged, *policy::profile("default"));
  CHECK(ignored.empty());
  REQUIRE(judged.pairs.size() == 1);
  REQUIRE(judged.pairs[0].report.findings.size() == plain.pairs[0].report.findings.size());
  for (std::size_t i = 0; i < plain.pairs[0].report.findings.size(); ++i) {
    CHECK(judged.pairs[0].report.findings[i].code == plain.pairs[0].report.findings[i].code);
    CHECK(judged.pairs[0].report.findings[i].severity == plain.pairs[0].report.findings[i].severity);
  }
  CHECK(judged.summary.worst == Severity::warning);
}

TEST_CASE("policy: strict makes compression a mismatch an error and any Python difference a warning") {
  const auto strict = *policy::profile("strict");
  auto r = check(patch_apart(), strict.python_rule);
  // Without the severities yet: the exact rule alone.
  REQUIRE(findings_of(r, "python-version-mismatch").size() == 1);
  CHECK(findings_of(r, "python-version-mismatch")[0].severity == Severity::warning);
  policy::apply_policy(r, strict);
  CHECK(findings_of(r, "compression-mismatch")[0].severity == Severity::error);
  CHECK(findings_of(r, "python-version-mismatch")[0].severity == Severity::warning);
  CHECK(findings_of(r, "package-mismatch")[0].severity == Severity::info);  // not named: built-in
  CHECK(r.summary.worst == Severity::error);
  CHECK(r.summary.errors == 1);
  REQUIRE(r.summary.degraded.size() == 1);
  CHECK(r.summary.degraded[0].worst == Severity::error);
}

TEST_CASE("policy: relaxed lets Python minor versions differ and compression mismatches pass as info") {
  auto hosts = patch_apart();
  hosts[1].python = "3.10.12";
  auto plain = check(hosts);
  CHECK(findings_of(plain, "python-version-mismatch")[0].severity == Severity::warning);

  const auto relaxed = *policy::profile("relaxed");
  auto r = check(hosts, relaxed.python_rule);
  policy::apply_policy(r, relaxed);
  CHECK(findings_of(r, "python-version-mismatch")[0].severity == Severity::info);
  CHECK(findings_of(r, "compression-mismatch")[0].severity == Severity::info);
  CHECK(r.summary.worst == Severity::info);
  CHECK(r.summary.degraded.empty());

  // A major version apart stays an error under every rule.
  hosts[1].python = "2.7.18";
  auto major = check(hosts, PythonRule::same_major);
  CHECK(findings_of(major, "python-version-mismatch")[0].severity == Severity::error);
}

TEST_CASE("policy: the Python-version rules side by side") {
  struct Case {
    const char* other;
    PythonRule rule;
    Severity want;
  };
  for (const Case& c : {Case{"3.11.4", PythonRule::exact, Severity::warning},
                        Case{"3.11.4", PythonRule::same_minor, Severity::info},
                        Case{"3.11.4", PythonRule::same_major, Severity::info},
                        Case{"3.10.4", PythonRule::exact, Severity::warning},
                        Case{"3.10.4", PythonRule::same_minor, Severity::warning},
                        Case{"3.10.4", PythonRule::same_major, Severity::info}}) {
    CAPTURE(c.other);
    CAPTURE(to_string(c.rule));
    Host a{"a.json", "node-a"};
    Host b{"b.json", "node-b"};
    b.python = c.other;
    auto r = check({a, b}, c.rule);
    REQUIRE(findings_of(r, "python-version-mismatch").size() == 1);
    CHECK(findings_of(r, "python-version-mismatch")[0].severity == c.want);
  }
}

TEST_CASE("policy: severity per code, and ignore takes the findings out with the policy's reason") {
  auto p = parsed(R"("severity": {"compression-mismatch": "error", "package-mismatch": "ignore"})");
  auto r = check(patch_apart());
  const auto ignored = policy::apply_policy(r, p);
  CHECK(findings_of(r, "compression-mismatch")[0].severity == Severity::error);
  CHECK(findings_of(r, "package-mismatch").empty());
  REQUIRE(ignored.size() == 1);
  CHECK(ignored[0].finding.code == "package-mismatch");
  CHECK(ignored[0].a == "a.json");
  CHECK(ignored[0].b == "b.json");
  CHECK(ignored[0].reason == "policy test sets package-mismatch to ignore");
  CHECK(r.summary.info == 1);  // python-version-mismatch only
  CHECK(r.summary.errors == 1);
}

TEST_CASE("policy: ignores for named endpoints, by glob, each with its reason") {
  Host a{"a.json", "node-a"};
  Host b{"hosts/old-1.json", "old-1"};
  Host c{"hosts/old-2.json", "old-2"};
  b.compression = c.compression = "zstd";
  auto p = parsed(R"("ignore": [{"code": "compression-mismatch", "endpoint": "hosts/old-*",
                                 "reason": "old images, retired in March"}])");
  auto r = check({a, b, c});
  REQUIRE(r.pairs.size() == 3);
  const auto ignored = policy::apply_policy(r, p);
  // a-old1 and a-old2 have the mismatch; old1-old2 agree.
  REQUIRE(ignored.size() == 2);
  for (const auto& ig : ignored) {
    CHECK(ig.finding.code == "compression-mismatch");
    CHECK(ig.reason == "old images, retired in March");
  }
  CHECK(findings_of(r, "compression-mismatch").empty());

  // Another endpoint: nothing matches.
  auto r2 = check({a, b, c});
  auto p2 = parsed(R"("ignore": [{"code": "compression-mismatch", "endpoint": "tcp://10.*", "reason": "r"}])");
  CHECK(policy::apply_policy(r2, p2).empty());
  CHECK(findings_of(r2, "compression-mismatch").size() == 2);

  // "*" matches every code for that endpoint.
  auto r3 = check({a, b});
  auto p3 = parsed(R"("ignore": [{"code": "*", "endpoint": "hosts/old-1.json", "reason": "lab machine"}])");
  CHECK(policy::apply_policy(r3, p3).size() == 1);
  CHECK(r3.pairs[0].report.findings.empty());
  CHECK(!r3.summary.worst);
}

TEST_CASE("policy: ignores for packages cover a finding only when they name all its packages") {
  auto hosts = patch_apart();
  hosts[1].numpy = "1.26.0";  // the info finding now names numpy and pandas
  {
    auto r = check(hosts);
    const auto pkgs = findings_of(r, "package-mismatch");
    REQUIRE(pkgs.size() == 1);
    CHECK(pkgs[0].packages == std::vector<std::string>{"numpy", "pandas"});
    auto p = parsed(R"("ignore": [{"code": "package-mismatch", "package": "pandas", "reason": "scheduler only"}])");
    CHECK(policy::apply_policy(r, p).empty());
    CHECK(findings_of(r, "package-mismatch").size() == 1);
  }
  {
    auto r = check(hosts);
    auto p = parsed(R"("ignore": [{"code": "package-mismatch", "package": "pandas", "reason": "scheduler only"},
                                  {"code": "package-mismatch", "package": "numpy", "reason": "pinned by conda"}])");
    const auto ignored = policy::apply_policy(r, p);
    REQUIRE(ignored.size() == 1);
    CHECK(ignored[0].reason == "pinned by conda; scheduler only");
    CHECK(findings_of(r, "package-mismatch").empty());
  }
  {
    // dask differs: an error about dask alone; a pandas ignore leaves it.
    hosts[1].dask = "2023.1.0";
    auto r = check(hosts);
    auto p = parsed(R"("ignore": [{"code": "package-mismatch", "package": "dask", "reason": "upgrade in progress"}])");
    const auto ignored = policy::apply_policy(r, p);
    REQUIRE(ignored.size() == 1);
    CHECK(ignored[0].finding.packages == std::vector<std::string>{"dask"});
    CHECK(ignored[0].finding.severity == Severity::error);
    // distributed and the info finding stay.
    CHECK(findings_of(r, "package-mismatch").size() == 2);
  }
}

TEST_CASE("policy: extends starts from a profile; the file's settings win code by code") {
  auto p = parsed(R"("extends": "strict", "severity": {"gpu-to-cpu": "warning", "endpoint-appeared": "error"},
                     "ignore": [{"code": "unreachable", "endpoint": "tcp://10.0.0.9:*", "reason": "down for repair"}])");
  CHECK(p.python_rule == PythonRule::exact);  // from strict
  CHECK(p.severity.at("compression-mismatch") == Severity::error);
  CHECK(p.severity.at("gpu-to-cpu") == Severity::warning);
  CHECK(p.severity.at("endpoint-appeared") == Severity::error);
  REQUIRE(p.ignores.size() == 1);
  CHECK(p.ignores[0].endpoint == "tcp://10.0.0.9:*");

  auto q = parsed(R"("extends": "strict", "python-version": "same-major")");
  CHECK(q.python_rule == PythonRule::same_major);
  auto d = parsed(R"("description": "ours")");
  CHECK(d.python_rule == PythonRule::same_minor);
  CHECK(d.description == "ours");
}

TEST_CASE("policy: summary findings are judged by their endpoint") {
  report::Report r = check(patch_apart());
  Finding f;
  f.severity = Severity::warning;
  f.code = "unreachable";
  f.endpoint = "tcp://10.0.0.1:8786";
  f.message = "2 of the 5 workers of tcp://10.0.0.1:8786 could not be checked";
  r.summary.findings.push_back(f);
  f.endpoint = "tcp://10.0.0.2:8786";
  r.summary.findings.push_back(f);
  auto p = parsed(R"("ignore": [{"code": "unreachable", "endpoint": "tcp://10.0.0.1:*", "reason": "maintenance"}])");
  const auto ignored = policy::apply_policy(r, p);
  REQUIRE(ignored.size() == 1);
  CHECK(ignored[0].a.empty());
  CHECK(ignored[0].finding.endpoint == "tcp://10.0.0.1:8786");
  REQUIRE(r.summary.findings.size() == 1);
  CHECK(r.summary.findings[0].endpoint == "tcp://10.0.0.2:8786");
  CHECK(r.summary.warnings == 2);  // the compression mismatch and the other scheduler
}

TEST_CASE("policy: policy_to_json writes the effective policy, schema first") {
  auto p = parsed(R"("extends": "relaxed", "ignore": [{"code": "gpu-to-cpu", "package": "cupy", "reason": "x"}])");
  const auto j = nlohmann::ordered_json::parse(policy::policy_to_json(p));
  CHECK(j.begin().key() == "schema");
  CHECK(j["schema"] == "dask-caps.policy/1");
  CHECK(j["name"] == "test");
  CHECK(j["python-version"] == "same-major");
  CHECK(j["severity"]["compression-mismatch"] == "info");
  CHECK(j["ignore"][0]["package"] == "cupy");
  CHECK(!j.contains("extends"));
}

TEST_CASE("policy: bad policy files say which key is wrong") {
  CHECK(parse_error("[1]").code == Errc::bad_magic);
  const Error syntax = parse_error("{\"schema\": ");
  CHECK(syntax.code == Errc::bad_magic);
  CHECK(syntax.has_offset());
  CHECK(parse_error(R"({"severity": {}})").code == Errc::bad_magic);
  CHECK(parse_error(R"({"schema": "dask-caps.check/1"})").code == Errc::bad_magic);
  CHECK(parse_error(R"({"schema": "dask-caps.policy/2"})").code == Errc::unsupported_version);

  const Error unknown_key = body_error(R"("severities": {})");
  CHECK(unknown_key.code == Errc::bad_value);
  CHECK(unknown_key.message().find("/severities: unknown key") != std::string::npos);

  const Error unknown_code = body_error(R"("severity": {"compresion-mismatch": "error"})");
  CHECK(unknown_code.message().find("/severity/compresion-mismatch: unknown finding code") != std::string::npos);
  CHECK(body_error(R"("severity": {"gpu-to-cpu": "fatal"})").message().find("is not a severity") != std::string::npos);
  CHECK(body_error(R"("severity": {"gpu-to-cpu": 2})").message().find("/severity/gpu-to-cpu: expected a string") !=
        std::string::npos);
  CHECK(body_error(R"("severity": [])").message().find("/severity: expected an object") != std::string::npos);
  CHECK(body_error(R"("python-version": "same-patch")").message().find("/python-version") != std::string::npos);
  CHECK(body_error(R"("extends": "paranoid")").message().find("/extends") != std::string::npos);

  const Error no_reason = body_error(R"("ignore": [{"code": "gpu-to-cpu", "endpoint": "x"}])");
  CHECK(no_reason.message().find("/ignore/0: missing required key \"reason\"") != std::string::npos);
  CHECK(body_error(R"("ignore": [{"code": "gpu-to-cpu", "reason": ""}])").message().find("/ignore/0/reason: must not be empty") !=
        std::string::npos);
  CHECK(body_error(R"("ignore": [{"code": "nope", "reason": "r"}])").message().find("/ignore/0/code: unknown finding code") !=
        std::string::npos);
  CHECK(body_error(R"("ignore": [{"code": "gpu-to-cpu", "reason": "r", "host": "x"}])").message().find("/ignore/0/host: unknown key") !=
        std::string::npos);
  CHECK(body_error(R"("ignore": {})").message().find("/ignore: expected an array") != std::string::npos);
}

TEST_CASE("policy: load_policy takes a profile name, else a file") {
  CHECK(policy::load_policy("strict")->name == "strict");
  const Error missing = policy::load_policy("no-such-policy.json").error();
  CHECK(missing.code == Errc::not_found);
  CHECK(missing.message().find("no-such-policy.json") != std::string::npos);

  char path[] = "/tmp/dask-caps-policy-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  {
    std::ofstream out(path);
    out << R"({"schema": "dask-caps.policy/1", "python-version": "exact"})";
  }
  auto p = policy::load_policy(path);
  REQUIRE(p);
  CHECK(p->name == path);
  CHECK(p->path == path);
  CHECK(p->python_rule == PythonRule::exact);
  {
    std::ofstream out(path);
    out << R"({"schema": "dask-caps.policy/1", "python-version": 3})";
  }
  const Error bad = policy::load_policy(path).error();
  CHECK(bad.message().rfind(std::string(path) + ": /python-version", 0) == 0);
  std::remove(path);
}
