// Capabilities and negotiation: what Dask negotiates between two peers, what
// it should negotiate, and the findings that explain the difference.
//
// Dask's own rule (docs/protocol.md §2.4, identical in 2022.12 and newest): each side
// computes, from its own handshake dict and the peer's,
//   pickle-protocol = min(local, remote)
//   compression     = local if local == remote (Python equality: "lz4" ==
//                     "lz4", None == None, False == False) else None
// and uses it only for what it *writes*. A dict without "pickle-protocol"
// fails with ValueError "Your Dask versions may not be in sync"; one without
// "compression" with a bare KeyError (docs/protocol.md §2.5). Newest releases
// (distributed >= 2023.5.0) advertise None to a peer on the same host
// (docs/protocol.md §2.3); 2022.12 advertises its configuration to everyone.
//
// The rule Dask should have (docs/design.md §3) is the one policy of
// core/caps/delivery.h: deliver() for one direction, recommend() for both.
//
// Findings carry a stable code (docs/cli.md §12), a severity, a message that names
// both peers and a hint that says what to install or which setting to change
// on which host. Nothing here touches the network: peers come from probe
// files, from this host's probe, or from what a live endpoint sent
// (core/net/rpc.h), converted with the peer_from_* functions.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/wire/handshake.h"
#include "daskcaps/caps/delivery.h"
#include "daskcaps/caps/peer.h"

namespace daskcaps {

enum class Severity : std::uint8_t { info, warning, error };

/// "info", "warning", "error".
std::string_view to_string(Severity s);
/// Parses the names above; nullopt for anything else.
std::optional<Severity> severity_from_string(std::string_view s);

/// The finding codes of docs/cli.md §12 (stable: scripts match on them).
namespace finding_code {
inline constexpr std::string_view kCompressionMismatch = "compression-mismatch";
inline constexpr std::string_view kCodecUnavailable = "codec-unavailable";
inline constexpr std::string_view kPickleProtocolDowngrade = "pickle-protocol-downgrade";
inline constexpr std::string_view kPythonVersionMismatch = "python-version-mismatch";
inline constexpr std::string_view kHandshakeIncomplete = "handshake-incomplete";
inline constexpr std::string_view kGpuToCpu = "gpu-to-cpu";
inline constexpr std::string_view kPackageMismatch = "package-mismatch";
inline constexpr std::string_view kUnreachable = "unreachable";
// A check against a baseline (core/caps/gate.h): an endpoint the
// baseline did not have, or one it had that this check does not.
inline constexpr std::string_view kEndpointAppeared = "endpoint-appeared";
inline constexpr std::string_view kEndpointVanished = "endpoint-vanished";
}  // namespace finding_code

/// One row of the finding-code table (man page, SARIF rules).
struct FindingCodeInfo {
  std::string_view code;
  Severity severity;            // the usual severity (SARIF's default level)
  std::string_view severities;  // when it takes which severity, for readers
  std::string_view summary;     // one sentence
};
/// Every finding code, in the order of docs/cli.md §12.
std::span<const FindingCodeInfo> finding_codes();
/// The row of `code`; nullptr for a code that does not exist.
const FindingCodeInfo* find_finding_code(std::string_view code);

struct Finding {
  Severity severity = Severity::info;
  std::string code;     // one of finding_code
  std::string message;  // what happens, naming the peers
  std::string hint;     // what to change, where
  /// The packages it is about (package-mismatch), for policies that
  /// ignore a package; empty for the others.
  std::vector<std::string> packages;
  /// Findings not tied to a pair (a report's summary): the endpoint they
  /// are about (the scheduler of unreachable workers, an endpoint that
  /// appeared or vanished). Empty for pair findings.
  std::string endpoint;
};

/// How far apart two Python versions may be before python-version-mismatch
/// is a warning: `exact` (any difference), `same-minor` (3.11.2 and 3.11.4
/// are fine; the default), `same-major` (3.10 and 3.11 are fine). A
/// different major version is always an error.
enum class PythonRule : std::uint8_t { exact, same_minor, same_major };
std::string_view to_string(PythonRule rule);
/// "exact", "same-minor", "same-major"; nullopt for anything else.
std::optional<PythonRule> python_rule_from_string(std::string_view s);

/// The most severe of a list; nullopt when empty.
std::optional<Severity> worst_severity(std::span<const Finding> findings);

// ---- Dask's rule -------------------------------------------------------

struct DaskNegotiation {
  bool ok = true;                 // false: Dask fails the connection
  std::string failure;            // Python's error when !ok
  CompressionValue compression;   // what each side writes with
  std::int64_t pickle_protocol = 0;
};

/// Comm.handshake_configuration(local, remote) of both releases
/// (docs/protocol.md §2.4, §2.5). Both sides compute the same result from the two dicts.
DaskNegotiation dask_negotiate(const Handshake& local, const Handshake& remote);

/// The dict a peer sends to another: its handshake, with compression None
/// when it follows the newest rules and the other is on the same host.
Handshake advertised_to(const Peer& peer, bool same_host);


// ---- pairs --------------------------------------------------------------

struct PairReport {
  /// What Dask negotiates on a connection between them; nullopt when one
  /// side has no Dask handshake.
  std::optional<DaskNegotiation> dask;
  /// When one side is a scheduler: what the connections the *scheduler*
  /// opens negotiate (its outgoing comms advertise pickle protocol 4,
  /// docs/protocol.md §2.7).
  std::optional<DaskNegotiation> scheduler_initiated;
  Recommendation recommended;
  std::vector<Finding> findings;
};

/// Negotiation, recommendation and findings for one pair. `same_host`: both
/// run on one host (decides what newest releases advertise). A link Dask
/// leaves uncompressed by design gets an info finding that says so
/// (compression-mismatch at info), never a compression warning; so does a
/// pair with a compression_hidden peer, whose codec towards the other
/// cannot be seen. `python_rule` decides the severity of
/// python-version-mismatch.
PairReport evaluate_pair(const Peer& a, const Peer& b, bool same_host,
                         PythonRule python_rule = PythonRule::same_minor);

// ---- relay through the scheduler (docs/protocol.md §3.7) ---------------------------

/// Data the scheduler forwards keeps the codec its original sender chose on
/// its own link. For a client, a scheduler and the workers the check knows
/// (possibly none): worker -> scheduler -> client (gather through the
/// scheduler, dask/distributed#7774) and client -> scheduler -> worker
/// (scatter through the scheduler). A receiver that cannot decode the codec
/// fails with KeyError on that codec. With no workers known, workers are
/// assumed configured like the scheduler (a warning, not an error).
struct RelayPath {
  std::string from;
  std::string via;
  std::string to;
  std::string codec;   // the codec the receiver gets
  bool predicted;      // assumed workers, not seen
};
struct RelayReport {
  std::vector<RelayPath> broken;  // receiver lacks the codec
  std::vector<Finding> findings;
};
RelayReport evaluate_relay(const Peer& client, const Peer& scheduler,
                           std::span<const Peer* const> workers,
                           const std::function<bool(const Peer&, const Peer&)>& same_host);

}  // namespace daskcaps
