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
//
// A program loads a policy (policy::load_policy) and a baseline
// (baseline::read_baseline_file) into a Gate, builds its report with
// report_options(), and judge()s it. The steps judge() takes, and the
// parsers under the loaders, are core/caps/internal/gate_steps.h.
//
// Policies (daskcaps::policy): how a check gate judges its findings. A policy sets the
// severity of finding codes, ignores codes for named endpoints or packages
// (each with a reason that the report keeps), and sets the Python-version
// rule (core/caps/caps.h PythonRule). Three profiles are built in; a policy file
// is JSON and may build on one of them.
//
// A policy file (schema dask-caps.policy/1, schemas/policy.schema.json):
//
//   {"schema": "dask-caps.policy/1",
//    "extends": "default",                 // optional: default|strict|relaxed
//    "description": "our cluster",         // optional
//    "python-version": "same-minor",       // optional: exact|same-minor|same-major
//    "severity": {"compression-mismatch": "error", "gpu-to-cpu": "ignore"},
//    "ignore": [{"code": "python-version-mismatch",
//                "endpoint": "tcp://10.0.0.7:*",
//                "reason": "legacy worker, retired in March"},
//               {"code": "package-mismatch", "package": "pandas",
//                "reason": "only the scheduler imports pandas"}]}
//
//   - "severity": code -> info|warning|error|ignore, for every finding of
//     that code (after the Python-version rule). Unknown codes are refused,
//     so that a misspelt code does not silently do nothing.
//   - "ignore": entries of "code" (a finding code or "*"), "reason"
//     (required, not empty), and optionally "endpoint" (a glob, fnmatch(3),
//     matched against the endpoints the finding is about: both sides of its
//     pair, every worker of a group side, or a summary finding's endpoint)
//     and "package" (matched against the packages a finding is about; a
//     finding that names several packages is ignored when every one of them
//     is). An entry with neither ignores the code everywhere, with its reason.
//   - Unknown keys are refused anywhere in the file.
//   - With "extends": the profile's settings first; "python-version" given
//     replaces the profile's, "severity" entries replace the profile's for
//     their codes, "ignore" entries are added.
//
// Profiles (also in the man page):
//   default  the built-in severities, python-version same-minor;
//   strict   python-version exact; compression-mismatch, codec-unavailable,
//            gpu-to-cpu, unreachable and endpoint-vanished are errors;
//   relaxed  python-version same-major; compression-mismatch, unreachable and
//            endpoint-vanished are info.
//
// Errors: Errc::bad_magic (not JSON, not a policy),
// Errc::unsupported_version ("dask-caps.policy/N", N != 1), Errc::bad_value
// (a wrong key, type or value, named by its JSON pointer), and the file
// errors of json::read_text. A name that is neither a profile nor a file:
// Errc::not_found.
//
// Baselines (daskcaps::baseline): a check compared with an earlier one, so that a CI gate fails
// on what is new, not on what was accepted. A baseline is the document an
// earlier `check --json` printed (schema dask-caps.check/1; a trimmed file
// with schema dask-caps.baseline/1 and the same keys is read alike; the keys
// read are in schemas/baseline.schema.json):
//
//   endpoints[].address, endpoints[].discovered-by   who was checked
//   local.name                                       this host's side name
//   pairs[].a, .b, .a-group, .b-group, .findings[]   pair findings
//   summary.groups[].id, .members                    who a group side stands for
//   summary.cluster-findings[]                       findings about one endpoint
//   findings: code, severity, message, packages, endpoint
//
// Matching (never by message text): a finding of this check is "unchanged"
// when the baseline has a finding of the same code on the same pair (in
// either order) or, for summary findings, about the same endpoint; else it
// is "new". A side matches when the names agree, when both are this host
// (its name holds the host name, which differs between CI runners), or
// when a group side's members share a worker. Several findings of one code
// on one pair (package-mismatch for dask and for distributed) match those
// with the same packages first, then one for one in order. Baseline
// findings left over have vanished. Findings of the codes endpoint-appeared
// and endpoint-vanished in a baseline are comparisons of their own run and
// are not read.
//
// Endpoints: one named on the command line that the baseline does not name
// is an endpoint-appeared finding (info); one the baseline names that this
// check does not, endpoint-vanished (warning). Workers found by --workers
// are compared per scheduler, one finding each way listing them (info):
// clusters grow and shrink.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/caps.h"
#include "daskcaps/caps/caps_report.h"

namespace daskcaps::policy {

struct Ignore {
  std::string code;      // a finding code, or "*"
  std::string endpoint;  // a glob; empty: any endpoint
  std::string package;   // empty: any package (or none)
  std::string reason;
};

struct Policy {
  std::string name;         // "default", "strict", "relaxed", or the file's path
  std::string path;         // the file; empty for a profile
  std::string description;
  PythonRule python_rule = PythonRule::same_minor;
  /// Severity per code; nullopt: "ignore".
  std::map<std::string, std::optional<Severity>, std::less<>> severity;
  std::vector<Ignore> ignores;
};

/// "default", "strict", "relaxed".
std::span<const std::string_view> profile_names();

/// A profile name, else the path of a policy file (a file named like a
/// profile is read as ./strict).
Result<Policy> load_policy(const std::string& name_or_path);

/// The policy as a document that parse_policy reads back (the effective
/// settings; "extends" resolved), "schema" first, as JSON text (compact,
/// UTF-8).
std::string policy_to_json(const Policy& policy);

/// A finding a policy took out of the report, with the reason.
struct IgnoredFinding {
  std::string a, b;  // the pair's sides; empty for summary findings
  Finding finding;   // with the severity the policy gave it
  std::string reason;
};

}  // namespace daskcaps::policy

namespace daskcaps::baseline {

/// Who one side of a baseline pair stands for.
struct Side {
  std::string name;                  // as the pair names it
  std::vector<std::string> members;  // the name, or the group's members
  bool local = false;                // this host of that run
};

/// A finding of the baseline.
struct Entry {
  bool in_pair = true;
  Side a, b;             // pair findings
  std::string endpoint;  // summary findings
  std::string code;
  Severity severity = Severity::info;
  std::string message;
  std::vector<std::string> packages;
};

struct Baseline {
  std::string path;
  std::vector<std::string> endpoints;                         // named on its command line
  std::map<std::string, std::vector<std::string>> workers;    // scheduler -> workers it found
  std::vector<Entry> findings;
};

/// Reads a baseline file; errors carry the path as context.
Result<Baseline> read_baseline_file(const std::string& path);

enum class State : std::uint8_t { new_, unchanged };
/// "new", "unchanged".
std::string_view to_string(State s);

struct Diff {
  std::vector<std::vector<State>> pairs;  // [pair][finding], shaped like the report
  std::vector<State> summary;             // [summary finding]
  std::vector<Entry> vanished;            // baseline findings this check does not have
  std::size_t unchanged = 0;
  std::size_t new_info = 0, new_warnings = 0, new_errors = 0;
  std::optional<Severity> worst_new;
};

/// A stable identity per finding, the same in every run that finds the
/// same thing on the same endpoints: SHA-256 (hex) over the code, the sides
/// (addresses; "this host" for this host; a group side by its scheduler and
/// capability signature), the packages and the finding's number among
/// those equal in all of these. Shaped like the report.
struct Fingerprints {
  std::vector<std::vector<std::string>> pairs;
  std::vector<std::string> summary;
};
Fingerprints fingerprints(const report::Report& report);

}  // namespace daskcaps::baseline

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
