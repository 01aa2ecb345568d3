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
// The rule Dask should have (docs/design.md §3): each side publishes the
// ordered list of codecs it decodes; each direction is written with the first
// codec of the *sender's* preference that the *receiver* decodes, else none;
// pickle protocol = the highest both read; layout = "cpu" when the receiver
// has no GPU. That is `recommend()`.
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

#include "daskcaps/wire/compression_value.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/caps/probe.h"

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
// A check against a baseline (core/caps/baseline.h): an endpoint the
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

/// Which release's handshake behaviour a peer has.
enum class DaskRules : std::uint8_t {
  v2022_12,  // up to 2023.4.x: advertises its configured codec to every peer
  newest,    // 2023.5.0 on: advertises None to peers on the same host
};
/// v2022_12 for distributed < 2023.5.0 (or an unreadable version), else newest.
DaskRules dask_rules_for_version(std::string_view distributed_version);

/// One side of a connection as these rules see it.
struct Peer {
  std::string name;  // as reports name it: "tcp://10.0.0.5:8786", "this host", a file
  std::string role;  // "Scheduler", "Worker", "Nanny", "client", "file", or ""
  std::string host;  // host name or IP, for hints ("on host 10.0.0.5")
  /// The Dask handshake dict it sends; nullopt when there is no Dask there
  /// (a probe without Python).
  std::optional<Handshake> handshake;
  DaskRules rules = DaskRules::v2022_12;
  /// Codecs it decodes, in the order it prefers to write them.
  std::vector<std::string> codecs;
  /// Codecs whose presence is not known (a live Dask peer's versions reply
  /// of a release before 2025.4 cannot tell python-snappy apart from its
  /// absence). Never claimed missing.
  std::vector<std::string> codecs_unknown;
  std::int64_t max_pickle_protocol = 5;  // highest protocol it reads
  std::optional<bool> gpu;               // nullopt: not known
  std::string python;                    // "3.11.2", "" when not known
  /// Package versions as Dask's `versions` reports them (nullopt: missing).
  std::map<std::string, std::optional<std::string>> packages;
  /// True when codecs/pickle/gpu were published (probe file, dask-caps
  /// peer) rather than inferred from a Dask handshake and versions reply.
  bool published = false;
  /// The dask-caps version that published them (a live peer's
  /// "capabilities" key: the Dask plugin, or dask-caps itself); "" when
  /// inferred or not said.
  std::string published_by;
  /// Why the peer's "capabilities" key was refused (read_capabilities,
  /// core/wire/handshake.h), so that it is read as a plain Dask peer; one
  /// line, its peer strings escaped and bounded. "" when not refused.
  std::string capabilities_refused;
  /// A live peer of the newest rules reached from its own host: the None
  /// its handshake says is the same-host rule, not its configuration,
  /// which cannot be seen from here.
  bool compression_hidden = false;

  bool decodes(std::string_view codec) const;
  /// True only when the peer is known not to decode `codec`.
  bool lacks(std::string_view codec) const;
};

/// A peer from a probe (this host, --as, or a probe file endpoint): its
/// handshake, capabilities (codecs, pickle protocol, GPU), Python version and
/// packages (python.packages plus dask and distributed).
Peer peer_from_probe(const HostProbe& probe, std::string name, std::string role);

/// A live peer from what it sent: its handshake and, when it answered, its
/// `versions` reply ({"host": {...}, "packages": {...}}) and identity reply.
/// Capabilities come from a "capabilities" entry in the handshake or the
/// identity (published by dask-caps peers: {"codecs": [...],
/// "max-pickle-protocol": N, "gpu": bool}); otherwise they are inferred: the
/// advertised codec first, then lz4, snappy, zstd (when the versions reply
/// lists lz4 / zstandard / python-snappy with a version; before 2025.4.0
/// versions come from modules and python-snappy reports none, so snappy
/// stays unknown there unless advertised), then zlib (Python's stdlib);
/// max pickle protocol = the handshake's (Python's HIGHEST_PROTOCOL); GPU
/// from the identity's "gpu" metrics when present, else unknown. Both keys
/// are read by read_capabilities under `limits`: a refused one (or one the
/// handshake's reader took out, Handshake::capabilities_refused) leaves the
/// peer plain, and says why in capabilities_refused.
Peer peer_from_live(std::string name, std::string role, std::string host,
                    const Handshake& handshake, const msgpack::Value* versions,
                    const msgpack::Value* identity, const Limits& limits = Limits{});

/// "3.11.2" from "3.11.2.final.0" or "3.11.2"; "" when unreadable.
std::string python_version_from_string(std::string_view s);

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

/// True when Dask leaves a link between them uncompressed whatever either
/// side configures: they share a host and one follows the newest rules, so
/// it advertises None (distributed PR #7768), and None equals no codec.
bool uncompressed_by_design(const Peer& a, const Peer& b, bool same_host);

// ---- the rule Dask should have ----------------------------------------

struct DirectionPlan {
  std::optional<std::string> codec;  // nullopt: send uncompressed
  std::string layout = "cpu";        // "cpu" or "gpu"
};
struct Recommendation {
  DirectionPlan a_to_b;
  DirectionPlan b_to_a;
  std::int64_t pickle_protocol = 5;
};

/// The first codec of `sender`'s preference that `receiver` decodes.
std::optional<std::string> best_codec(const Peer& sender, const Peer& receiver);
/// best_codec per direction, except on a link Dask leaves uncompressed by
/// design (uncompressed_by_design): compressing between processes of one
/// host costs CPU and saves no network, so both directions stay uncompressed.
Recommendation recommend(const Peer& a, const Peer& b, bool same_host = false);

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

/// A string equal for two peers exactly when every rule here treats them
/// alike (handshake, codecs, pickle, GPU, Python, packages): used to group
/// thousands of workers.
std::string capability_signature(const Peer& peer);

}  // namespace daskcaps
