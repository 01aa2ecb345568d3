// The check report: which pairs a check looks at, their negotiation and
// findings, and the cluster summary (groups, outliers, degraded pairs,
// relay paths). Pure logic over what the endpoints told us; the network
// part is core/net/rpc.h (query_endpoint(), survey()), the rendering is cli/render_check.
//
// Which pairs:
//   - one endpoint given: this host (its probe, or --as) against it;
//   - several: every pair of them;
//   - workers found through a scheduler (--workers) are grouped by
//     capability_signature(): members of a group are interchangeable for
//     every rule in core/caps/caps.h, so pairs are made with one representative
//     per group: each group against every endpoint given (and this host),
//     and the groups against each other. A thousand identical workers give
//     one group and a handful of pairs.
// Relay (docs/protocol.md §3.7): for each scheduler, the clients (this host, probe files
// given) against the scheduler's workers (evaluate_relay); the findings go
// to the client-scheduler pair and the paths to the summary.
// Unreachable endpoints: a worker found by a survey that cannot be checked
// is an `unreachable` finding (warning) in the summary; an endpoint the user
// named keeps its error (Errc::network, ...) and has no pairs.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/caps/caps.h"
#include "daskcaps/base/result.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/caps/probe.h"
#include "daskcaps/net/rpc.h"

namespace daskcaps::report {

/// Index of this host in PairEntry::a/b.
inline constexpr std::size_t kLocal = static_cast<std::size_t>(-1);

struct EndpointInfo {
  std::string address;            // "tcp://127.0.0.1:8786", or the probe file path
  std::string type;               // identity "type" (Scheduler, Worker, Nanny), "file", or ""
  bool is_file = false;
  bool given = true;              // named by the user (false: found by --workers)
  std::string discovered_by;      // the scheduler's address, for surveyed workers
  std::optional<Handshake> handshake;
  std::optional<rpc::Reply> identity;
  std::optional<rpc::Reply> versions;
  std::optional<double> rtt_ms;
  std::string peer_ip;            // for the same-host rule
  std::string local_ip;
  std::optional<net::LinkFigures> link;  // live endpoints whose socket gave TCP_INFO
  std::optional<Error> error;     // could not be checked (or broke the protocol)
  std::optional<HostProbe> probe; // probe files
  std::optional<Peer> peer;       // filled by build_report when usable
  std::optional<std::size_t> group;  // surveyed workers: their group
};

/// An endpoint from a live query (rpc::QueryResult) or its error.
EndpointInfo endpoint_from_query(std::string address, Result<rpc::QueryResult> result);
/// An endpoint from a probe file.
EndpointInfo endpoint_from_probe(std::string path, HostProbe probe);

/// Worker addresses in a scheduler's identity reply ("workers" keys), in
/// the reply's order. Entries that are not strings are skipped.
std::vector<std::string> workers_of(const msgpack::Value& identity);

struct PairEntry {
  std::size_t a = 0;  // endpoint index, or kLocal
  std::size_t b = 0;
  PairReport report;
  std::optional<std::size_t> a_group;
  std::optional<std::size_t> b_group;
};

struct Group {
  std::size_t scheduler = 0;            // endpoint index of the scheduler
  std::vector<std::size_t> members;     // endpoint indexes
  std::size_t representative() const { return members.front(); }
};

struct Degraded {
  std::size_t pair = 0;  // index into pairs
  Severity worst = Severity::warning;
  std::vector<std::string> codes;
};

struct Summary {
  std::size_t endpoints = 0;
  std::size_t reachable = 0;
  std::size_t unreachable = 0;
  std::vector<Group> groups;
  std::vector<std::size_t> outliers;  // surveyed workers outside their scheduler's largest group
  std::vector<Degraded> degraded;     // pairs with a warning or an error
  std::vector<RelayPath> relay;       // broken relay paths
  std::vector<Finding> findings;      // not tied to one pair (unreachable workers)
  std::size_t info = 0, warnings = 0, errors = 0;
  std::optional<Severity> worst;
};

struct Report {
  std::optional<Peer> local;  // this host, when it takes part
  std::vector<EndpointInfo> endpoints;
  std::vector<PairEntry> pairs;
  Summary summary;
};

struct ReportOptions {
  PythonRule python_rule = PythonRule::same_minor;  // for python-version-mismatch
  Limits limits;  // what a live peer's "capabilities" key may hold (peer_from_live)
};

/// Builds peers, pairs, relay findings and the summary. `local` takes part
/// when given (the one-endpoint form). A live endpoint whose handshake lacks
/// a key gets an Errc::protocol error (Dask refuses it) but still takes part,
/// so the pair shows the handshake-incomplete finding.
Report build_report(std::optional<Peer> local, std::vector<EndpointInfo> endpoints,
                    const ReportOptions& options = {});

/// Recomputes the summary's counts, worst severity and degraded pairs from
/// the findings as they are now (after a policy changed or removed some).
void count_findings(Report& report);

/// The name a pair uses for one side.
const std::string& side_name(const Report& report, std::size_t index);
/// The endpoints one side of a pair stands for: its address, or every
/// member of its group when it is a surveyed worker (groups are paired
/// through their representative); this host's name for kLocal.
std::vector<std::string> side_members(const Report& report, std::size_t index);

}  // namespace daskcaps::report
