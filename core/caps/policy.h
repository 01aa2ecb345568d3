// Policies: how a check gate judges its findings. A policy sets the
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

inline constexpr std::string_view kPolicySchema = "dask-caps.policy/1";
inline constexpr std::uint64_t kMaxPolicyFileBytes = std::uint64_t{1} << 20;

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
/// A built-in profile; nullopt for another name.
std::optional<Policy> profile(std::string_view name);

/// Reads a policy document (name and path left empty).
Result<Policy> parse_policy(std::string_view text);
/// Reads a policy file; errors carry the path as context.
Result<Policy> read_policy_file(const std::string& path);
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

/// Sets the severities of the policy on every finding of `report` (pairs
/// and summary), takes out the ignored ones and recounts the summary
/// (report::count_findings). The Python-version rule is not applied here:
/// it is the report's ReportOptions::python_rule, given when the report is
/// built. Returns the ignored findings, pairs first, in report order.
std::vector<IgnoredFinding> apply_policy(report::Report& report, const Policy& policy);

}  // namespace daskcaps::policy
