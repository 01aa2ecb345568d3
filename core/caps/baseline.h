// Baselines: a check compared with an earlier one, so that a CI gate fails
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
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/caps.h"
#include "daskcaps/caps/caps_report.h"

namespace daskcaps::baseline {

inline constexpr std::string_view kBaselineSchema = "dask-caps.baseline/1";
/// A check document with thousands of workers is large; a baseline is read whole.
inline constexpr std::uint64_t kMaxBaselineFileBytes = std::uint64_t{256} << 20;

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

/// Reads a baseline document (path left empty). Errors: Errc::bad_magic
/// (not JSON, not a check document), Errc::unsupported_version, Errc::bad_value
/// (a missing key or wrong type, named by its JSON pointer).
Result<Baseline> parse_baseline(std::string_view text);
/// Reads a baseline file; errors carry the path as context.
Result<Baseline> read_baseline_file(const std::string& path);

/// Adds endpoint-appeared and endpoint-vanished findings to the report's
/// summary findings (before a policy judges them; recount after).
void add_endpoint_changes(report::Report& report, const Baseline& baseline);

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

/// Marks every finding of the report new or unchanged (call after the
/// policy, so that ignored findings neither match nor count).
Diff compare(const report::Report& report, const Baseline& baseline);

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
