#include "daskcaps/caps/peer.h"

#include <algorithm>

#include "core/caps/detail/names.h"

namespace daskcaps {

namespace {

using detail::contains;
using detail::version_numbers;

constexpr std::string_view kOrderedCodecs[] = {"lz4", "snappy", "zstd", "zlib"};

void push_unique(std::vector<std::string>& v, std::string_view s) {
  if (!contains(v, s)) v.emplace_back(s);
}

const msgpack::Value* find_path(const msgpack::Value* v, std::initializer_list<std::string_view> keys) {
  for (auto k : keys) {
    if (!v) return nullptr;
    v = v->find(k);
  }
  return v;
}

}  // namespace

bool Peer::decodes(std::string_view codec) const { return contains(codecs, codec); }

bool Peer::lacks(std::string_view codec) const {
  return !contains(codecs, codec) && !contains(codecs_unknown, codec);
}

std::string python_version_from_string(std::string_view s) {
  const auto n = version_numbers(s);
  if (n.size() < 2) return "";
  // Appended part by part: GCC 12 -O3 misreads `"." + string&&` (CMakeLists.txt).
  std::string out = std::to_string(n[0]);
  for (std::size_t i = 1; i < std::min<std::size_t>(n.size(), 3); ++i) {
    out += '.';
    out += std::to_string(n[i]);
  }
  return out;
}

Peer peer_from_probe(const HostProbe& probe, std::string name, std::string role) {
  Peer p;
  p.name = std::move(name);
  p.role = std::move(role);
  p.host = probe.hostname;
  p.handshake = probe.handshake;
  p.codecs = probe.capabilities.codecs;
  p.max_pickle_protocol = probe.capabilities.max_pickle_protocol;
  p.gpu = probe.capabilities.gpu;
  p.published = true;
  // A client there loads the Dask plugin: its handshake names the version.
  if (probe.handshake)
    if (auto key = read_capabilities(probe.handshake->raw, Limits{}); key.state == CapabilitiesKey::State::published)
      p.published_by = key.capabilities.dask_caps;
  if (probe.python) {
    p.python = python_version_from_string(probe.python->version);
    p.packages = probe.python->packages;
    p.packages["dask"] = probe.python->dask;
    p.packages["distributed"] = probe.python->distributed;
    p.release = DaskRelease::from_version(probe.python->distributed.value_or(""));
  }
  if (p.python.empty() && probe.handshake) p.python = probe.handshake->python_version();
  return p;
}

Peer peer_from_live(std::string name, std::string role, std::string host,
                    const Handshake& handshake, const msgpack::Value* versions,
                    const msgpack::Value* identity, const Limits& limits) {
  Peer p;
  p.name = std::move(name);
  p.role = std::move(role);
  p.host = std::move(host);
  p.handshake = handshake;
  p.python = handshake.python_version();

  if (const auto* packages = find_path(versions, {"packages"}); packages && packages->is_map()) {
    for (const auto& [k, v] : packages->as_map()) {
      if (!k.is_str()) continue;
      if (v.is_str())
        p.packages[k.as_str()] = v.as_str();
      else
        p.packages[k.as_str()] = std::nullopt;
    }
  }
  if (p.python.empty()) {
    if (const auto* py = find_path(versions, {"host", "python"}); py && py->is_str())
      p.python = python_version_from_string(py->as_str());
  }
  if (auto d = p.packages.find("distributed"); d != p.packages.end() && d->second)
    p.release = DaskRelease::from_version(*d->second);

  // The handshake's key, else the identity's; a refused one that nothing
  // published replaces leaves the peer plain and says why.
  using KeyState = CapabilitiesKey::State;
  CapabilitiesKey key = read_capabilities(handshake.raw, limits);
  if (key.state == KeyState::absent && !handshake.capabilities_refused.empty()) {
    key.state = KeyState::refused;
    key.refused = handshake.capabilities_refused;
  }
  if (key.state != KeyState::published) {
    if (const auto* dc = find_path(identity, {"dask-caps"})) {
      CapabilitiesKey from_identity = read_capabilities(*dc, limits);
      if (from_identity.state == KeyState::published || key.state == KeyState::absent) key = std::move(from_identity);
    }
  }
  if (key.state == KeyState::refused) p.capabilities_refused = key.refused;
  if (key.state == KeyState::published) {
    Capabilities& published = key.capabilities;
    p.codecs = std::move(published.codecs);
    p.max_pickle_protocol = published.max_pickle_protocol;
    p.gpu = published.gpu;
    p.published = true;
    p.published_by = std::move(published.dask_caps);
    return p;
  }

  // Inferred: Dask writes with the advertised codec, so it has it; lz4 and
  // zstandard report versions; python-snappy reports none, so a null snappy
  // entry says nothing; zlib is in Python's standard library.
  if (handshake.compression && handshake.compression->compresses())
    push_unique(p.codecs, handshake.compression->name);
  auto has_package = [&](const std::string& pkg) -> std::optional<bool> {
    auto it = p.packages.find(pkg);
    if (it == p.packages.end()) return std::nullopt;
    return it->second.has_value();
  };
  // From 2025.4.0 (distributed PR #9048) `versions` reads distribution
  // metadata, so python-snappy answers for snappy; before, nothing did.
  bool by_distribution = false;
  if (auto d = p.packages.find("distributed"); d != p.packages.end() && d->second)
    by_distribution = p.release.versions_name_distributions();
  for (std::string_view codec : kOrderedCodecs) {
    if (contains(p.codecs, codec)) continue;
    if (codec == "zlib") {
      p.codecs.emplace_back(codec);
      continue;
    }
    std::optional<bool> present;
    if (codec == "lz4") present = has_package("lz4");
    if (codec == "zstd") present = has_package("zstandard");
    if (codec == "snappy" && by_distribution) present = has_package("python-snappy");
    if (present && *present)
      p.codecs.emplace_back(codec);
    else if (!present || (codec == "snappy" && !by_distribution))
      p.codecs_unknown.emplace_back(codec);
  }
  p.max_pickle_protocol = handshake.pickle_protocol.value_or(5);
  if (const auto* gpu = find_path(identity, {"metrics", "gpu"}); gpu && gpu->is_map()) p.gpu = true;
  return p;
}

namespace {

// What a read capabilities key gives a peer: everything when it was
// published (true: the handshake's plain fields are not read), the refusal
// when it was refused (false: the plain fields still say what Dask uses).
bool take_capabilities_key(Peer& p, CapabilitiesKey& key) {
  if (key.state == CapabilitiesKey::State::published) {
    Capabilities& published = key.capabilities;
    p.codecs = std::move(published.codecs);
    p.max_pickle_protocol = published.max_pickle_protocol;
    p.gpu = published.gpu;
    p.role = std::move(published.role);
    p.published = true;
    p.published_by = std::move(published.dask_caps);
    return true;
  }
  if (key.state == CapabilitiesKey::State::refused) p.capabilities_refused = std::move(key.refused);
  return false;
}

}  // namespace

Peer peer_from_handshake(std::string name, const Handshake& handshake, const Limits& limits) {
  Peer p;
  p.name = std::move(name);
  p.handshake = handshake;
  p.python = handshake.python_version();
  CapabilitiesKey key = read_capabilities(handshake.raw, limits);
  if (key.state == CapabilitiesKey::State::absent && !handshake.capabilities_refused.empty()) {
    key.state = CapabilitiesKey::State::refused;
    key.refused = handshake.capabilities_refused;
  }
  if (take_capabilities_key(p, key)) return p;
  if (handshake.compression && handshake.compression->compresses()) p.codecs.push_back(handshake.compression->name);
  p.max_pickle_protocol = handshake.pickle_protocol.value_or(5);
  return p;
}

Peer peer_from_handshake(std::string name, const ValueView& handshake, CapabilitiesKey key, const Limits& limits) {
  Peer p;
  p.name = std::move(name);
  if (take_capabilities_key(p, key)) return p;
  if (const auto c = handshake.member("compression"); c && capability_name_problem(*c, limits).empty())
    p.codecs.push_back(c->str());
  if (const auto pickle = handshake.member("pickle-protocol"))
    p.max_pickle_protocol = pickle->integer().value_or(5);
  return p;
}

std::string capability_signature(const Peer& peer) {
  std::string s = peer.role;
  s += '\x1f';
  if (peer.handshake) {
    const Buffer enc = msgpack::encode(peer.handshake->raw.is_map() ? peer.handshake->raw
                                                                      : peer.handshake->to_msgpack());
    s.append(reinterpret_cast<const char*>(enc.data()), enc.size());
  }
  s += '\x1f';
  for (const auto& c : peer.codecs) s += c + ",";
  s += '\x1f';
  for (const auto& c : peer.codecs_unknown) s += c + ",";
  s += '\x1f' + std::to_string(peer.max_pickle_protocol);
  s += '\x1f';
  s += peer.gpu ? (*peer.gpu ? "gpu" : "cpu") : "?";
  s += '\x1f' + peer.python + '\x1f' + std::string(peer.release.name());
  s += peer.compression_hidden ? "\x1fhidden" : "";
  for (const auto& [k, v] : peer.packages) s += '\x1f' + k + "=" + v.value_or("\x01");
  return s;
}

}  // namespace daskcaps
