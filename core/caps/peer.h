// A peer: one side of a connection as every rule of dask-caps sees it
// (what it decodes, the pickle protocol it reads, its GPU, its Dask
// release, its Python and packages), and where one comes from: a probe
// (this host, a probe file), what a live endpoint sent (core/net/rpc.h), or
// a handshake alone. The "capabilities" key a dask-caps peer publishes is
// read here and in core/wire/handshake.h (read_capabilities) only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/limits.h"
#include "daskcaps/caps/probe.h"
#include "daskcaps/wire/dask_release.h"
#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/wire/value_view.h"

namespace daskcaps {

/// One side of a connection as these rules see it.
struct Peer {
  std::string name;  // as reports name it: "tcp://10.0.0.5:8786", "this host", a file
  std::string role;  // "Scheduler", "Worker", "Nanny", "client", "file", or ""
  std::string host;  // host name or IP, for hints ("on host 10.0.0.5")
  /// The Dask handshake dict it sends; nullopt when there is no Dask there
  /// (a probe without Python).
  std::optional<Handshake> handshake;
  /// Its release (core/wire/dask_release.h), from the distributed version
  /// it reports; 2022.12's when it reports none.
  DaskRelease release;
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


/// A peer from its handshake alone, as a bridge or a Dask process sees the
/// other end of a connection: its published "capabilities" key when it
/// has one that read_capabilities accepts under `limits` (the refusal, if
/// any, in capabilities_refused), else a plain Dask peer that decodes the
/// codec it advertises (none when it advertises None or False) and reads
/// the pickle protocol it advertises (5 when it says none). Its role is
/// the key's "role" member ("" for a plain peer).
Peer peer_from_handshake(std::string name, const Handshake& handshake, const Limits& limits = Limits{});

/// A peer from the handshake of a connection that Dask itself has read and
/// accepted, at hand only as a ValueView (the Dask plugin's dict of the
/// remote side, python/src/py_value_view.h), and its "capabilities" key as
/// read_capabilities(handshake, limits) found it (`key`). Published: as
/// above. Else a plain Dask peer that decodes the codec its "compression"
/// names when that is a name the key could hold (capability_name_problem:
/// Dask takes any string there, and this one reaches log lines), none
/// otherwise, and reads the pickle protocol its "pickle-protocol" names
/// when that is an integer, else 5; its GPU is not known. The refusal, if
/// any, is in capabilities_refused.
Peer peer_from_handshake(std::string name, const ValueView& handshake, CapabilitiesKey key, const Limits& limits);

/// A string equal for two peers exactly when every rule here treats them
/// alike (handshake, codecs, pickle, GPU, Python, packages): used to group
/// thousands of workers.
std::string capability_signature(const Peer& peer);

}  // namespace daskcaps
