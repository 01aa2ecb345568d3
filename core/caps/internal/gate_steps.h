// The steps of a check gate (daskcaps/caps/gate.h) one by one, and the
// parsers under its loaders: for gate.cpp, which takes them in their one
// order, and for the tests that pin each. A program loads and judges
// through gate.h only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/caps_report.h"
#include "daskcaps/caps/gate.h"

namespace daskcaps::policy {

inline constexpr std::string_view kPolicySchema = "dask-caps.policy/1";
inline constexpr std::uint64_t kMaxPolicyFileBytes = std::uint64_t{1} << 20;

/// A built-in profile; nullopt for another name.
std::optional<Policy> profile(std::string_view name);
/// Reads a policy document (name and path left empty).
Result<Policy> parse_policy(std::string_view text);
/// Reads a policy file; errors carry the path as context.
Result<Policy> read_policy_file(const std::string& path);

/// Sets the severities of the policy on every finding of `report` (pairs
/// and summary), takes out the ignored ones and recounts the summary
/// (report::count_findings). The Python-version rule is not applied here:
/// it is the report's ReportOptions::python_rule, given when the report is
/// built. Returns the ignored findings, pairs first, in report order.
std::vector<IgnoredFinding> apply_policy(report::Report& report, const Policy& policy);

}  // namespace daskcaps::policy

namespace daskcaps::baseline {

inline constexpr std::string_view kBaselineSchema = "dask-caps.baseline/1";
/// A check document with thousands of workers is large; a baseline is read whole.
inline constexpr std::uint64_t kMaxBaselineFileBytes = std::uint64_t{256} << 20;

/// Reads a baseline document (path left empty). Errors: Errc::bad_magic
/// (not JSON, not a check document), Errc::unsupported_version, Errc::bad_value
/// (a missing key or wrong type, named by its JSON pointer).
Result<Baseline> parse_baseline(std::string_view text);

/// Adds endpoint-appeared and endpoint-vanished findings to the report's
/// summary findings (before a policy judges them; recount after).
void add_endpoint_changes(report::Report& report, const Baseline& baseline);

/// Marks every finding of the report new or unchanged (call after the
/// policy, so that ignored findings neither match nor count).
Diff compare(const report::Report& report, const Baseline& baseline);

}  // namespace daskcaps::baseline
