#include "daskcaps/caps/caps.h"

#include "core/caps/detail/names.h"

#include <algorithm>
#include <charconv>
#include <set>

namespace daskcaps {

namespace {

using detail::contains;
using detail::version_numbers;

/// The public part of a version, without a local "+..." suffix.
std::string_view public_version(std::string_view v) {
  const auto plus = v.find('+');
  return plus == std::string_view::npos ? v : v.substr(0, plus);
}

std::string lower_role(const Peer& p) {
  std::string r = p.role;
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
  return r;
}

/// How messages name a peer: "scheduler tcp://10.0.0.5:8786", "this host".
std::string describe(const Peer& p) {
  if (p.role == "Scheduler" || p.role == "Worker" || p.role == "Nanny")
    return lower_role(p) + " " + p.name;
  if (p.role == "file") return "probe file " + p.name;
  return p.name;
}

/// Where a hint sends the user: "on this host", "on host 10.0.0.5 (worker tcp://...)".
std::string where(const Peer& p) {
  if (p.role == "client") return "on " + p.name;
  if (p.host.empty()) return "where " + describe(p) + " runs";
  return "on host " + p.host + " (" + describe(p) + ")";
}

/// The Python package that provides a codec to Dask.
std::string_view python_package_for(std::string_view codec) {
  if (codec == "lz4") return "lz4";
  if (codec == "zstd") return "zstandard";
  if (codec == "snappy") return "python-snappy";
  return "";
}

std::string install_hint(std::string_view codec, const Peer& p) {
  const std::string_view pkg = python_package_for(codec);
  if (pkg.empty()) return "make " + std::string(codec) + " importable " + where(p);
  const std::string conda = pkg == "python-snappy" ? "python-snappy" : std::string(pkg);
  return "install " + std::string(pkg) + " " + where(p) + " (pip install " + std::string(pkg) +
         ", or conda install " + conda + ") in the environment that runs Dask";
}

std::string config_hint(std::string_view codec, const Peer& a, const Peer& b) {
  return "set distributed.comm.compression: " + std::string(codec) + " " + where(a) + " and " +
         where(b) + " (environment variable DASK_DISTRIBUTED__COMM__COMPRESSION=" +
         std::string(codec) + ")";
}

std::string quoted(const CompressionValue& c) {
  if (c.kind == CompressionValue::Kind::name) return "\"" + c.name + "\"";
  return c.kind == CompressionValue::Kind::nil ? "None (no compression)" : "False (no compression)";
}

/// A codec that both decode, for a hint that puts both on one setting:
/// the best codec from a to b that a decodes itself and b writes.
std::optional<std::string> common_codec(const Peer& a, const Peer& b) {
  for (const auto& c : a.codecs)
    if (b.decodes(c)) return c;
  for (const auto& c : b.codecs)
    if (a.decodes(c)) return c;
  return std::nullopt;
}

std::pair<int, int> major_minor(std::string_view python) {
  const auto n = version_numbers(python);
  if (n.size() < 2) return {-1, -1};
  return {static_cast<int>(n[0]), static_cast<int>(n[1])};
}

}  // namespace

std::string_view to_string(Severity s) {
  switch (s) {
    case Severity::info: return "info";
    case Severity::warning: return "warning";
    case Severity::error: return "error";
  }
  return "error";
}

std::optional<Severity> severity_from_string(std::string_view s) {
  if (s == "info") return Severity::info;
  if (s == "warning") return Severity::warning;
  if (s == "error") return Severity::error;
  return std::nullopt;
}

namespace {

constexpr FindingCodeInfo kFindingCodes[] = {
    {finding_code::kCompressionMismatch, Severity::warning, "warning",
     "the peers advertise different codecs, so Dask sends everything between them uncompressed"},
    {finding_code::kCodecUnavailable, Severity::error,
     "error when data reaches a peer that cannot decode its codec (relayed through the scheduler); "
     "warning when that is predicted for workers not seen; info when a peer is only configured with a "
     "codec the other lacks",
     "a peer compresses with a codec the receiver cannot decode"},
    {finding_code::kPickleProtocolDowngrade, Severity::error,
     "error when one side reads protocol 5 and the other not (Dask writes some pickles with protocol 5 "
     "regardless); info for other differences",
     "the peers read different highest pickle protocols"},
    {finding_code::kPythonVersionMismatch, Severity::warning,
     "error across major versions; across minor versions warning (info under the same-major rule); "
     "across patch releases info (warning under the exact rule)",
     "the peers run different Python versions"},
    {finding_code::kHandshakeIncomplete, Severity::error, "error",
     "a handshake lacks a key Dask needs, so Dask fails the connection"},
    {finding_code::kGpuToCpu, Severity::warning, "warning",
     "GPU results travel to a peer without a GPU, which cannot deserialize them"},
    {finding_code::kPackageMismatch, Severity::error,
     "error for different dask or distributed releases; warning for different numpy major versions; "
     "info for other packages and for a probe without Dask",
     "the peers have different package versions"},
    {finding_code::kUnreachable, Severity::warning, "warning",
     "workers a scheduler lists could not be checked"},
    {finding_code::kEndpointAppeared, Severity::info, "info",
     "an endpoint (or workers of a scheduler) that the baseline does not have"},
    {finding_code::kEndpointVanished, Severity::warning,
     "warning for an endpoint named on the command line; info for workers found by --workers",
     "an endpoint (or workers of a scheduler) in the baseline that this check does not have"},
};

}  // namespace

std::span<const FindingCodeInfo> finding_codes() { return kFindingCodes; }

const FindingCodeInfo* find_finding_code(std::string_view code) {
  for (const auto& row : kFindingCodes)
    if (row.code == code) return &row;
  return nullptr;
}

std::string_view to_string(PythonRule rule) {
  switch (rule) {
    case PythonRule::exact: return "exact";
    case PythonRule::same_minor: return "same-minor";
    case PythonRule::same_major: return "same-major";
  }
  return "same-minor";
}

std::optional<PythonRule> python_rule_from_string(std::string_view s) {
  if (s == "exact") return PythonRule::exact;
  if (s == "same-minor") return PythonRule::same_minor;
  if (s == "same-major") return PythonRule::same_major;
  return std::nullopt;
}

std::optional<Severity> worst_severity(std::span<const Finding> findings) {
  std::optional<Severity> worst;
  for (const auto& f : findings)
    if (!worst || f.severity > *worst) worst = f.severity;
  return worst;
}

DaskNegotiation dask_negotiate(const Handshake& local, const Handshake& remote) {
  DaskNegotiation out;
  // Comm.handshake_configuration: the min() sits inside `try ... except
  // KeyError: raise ValueError(...)`, the compression lookup does not.
  if (!local.pickle_protocol || !remote.pickle_protocol) {
    out.ok = false;
    out.failure =
        "ValueError: Your Dask versions may not be in sync. Please ensure that you have the same "
        "version of dask and distributed on your client, scheduler, and worker machines";
    return out;
  }
  out.pickle_protocol = std::min(*local.pickle_protocol, *remote.pickle_protocol);
  if (!local.compression || !remote.compression) {
    out.ok = false;
    out.failure = "KeyError: 'compression'";
    return out;
  }
  out.compression = *local.compression == *remote.compression ? *local.compression
                                                              : CompressionValue::nil();
  return out;
}

Handshake advertised_to(const Peer& peer, bool same_host) {
  Handshake h = peer.handshake.value_or(Handshake{});
  if (peer.release.uncompressed_to_same_host() && same_host && h.compression)
    h.compression = CompressionValue::nil();
  return h;
}

namespace {

void incomplete_findings(const Peer& p, const Peer& other, std::vector<Finding>& out) {
  if (!p.handshake) return;
  const auto missing = p.handshake->missing_keys();
  if (missing.empty()) return;
  std::string keys;
  for (const auto& k : missing) keys += (keys.empty() ? "\"" : ", \"") + k + "\"";
  const bool no_pickle = std::find(missing.begin(), missing.end(), "pickle-protocol") != missing.end();
  Finding f;
  f.severity = Severity::error;
  f.code = finding_code::kHandshakeIncomplete;
  f.message = "the handshake of " + describe(p) + " has no " + keys + ": Dask " + where(other) +
              " fails the connection with " +
              (no_pickle ? "ValueError \"Your Dask versions may not be in sync\""
                         : "a bare KeyError('compression')") +
              " and a listener leaves the socket open and silent";
  f.hint = "run dask and distributed 2.23.0 or later, the same release " + where(p) + " and " +
           where(other) + "; a peer that sends no complete handshake is not a Dask comm";
  out.push_back(std::move(f));
}

/// "scheduler tcp://... (distributed 2026.7.1)".
std::string with_release(const Peer& p) {
  auto d = p.packages.find("distributed");
  if (d == p.packages.end() || !d->second) return describe(p);
  return describe(p) + " (distributed " + *d->second + ")";
}

/// The info finding of a link Dask leaves uncompressed by design.
void by_design_finding(const Peer& a, const Peer& b, std::vector<Finding>& out) {
  const bool an = a.release.uncompressed_to_same_host();
  const bool bn = b.release.uncompressed_to_same_host();
  Finding f;
  f.severity = Severity::info;
  f.code = finding_code::kCompressionMismatch;
  f.message = describe(a) + " and " + describe(b) + " run on one host, and " +
              (an && bn ? "both send" : with_release(an ? a : b) + " sends") +
              " compression None to a peer on " + (an && bn ? "their" : "its") +
              " own host by design (distributed PR #7768, 2023.5.0): this link is same-host and "
              "uncompressed whatever either side configures";
  f.hint = "nothing to change: compression between processes of one host costs CPU and saves no "
           "network traffic";
  for (const Peer* p : {&a, &b}) {
    if (!p->compression_hidden) continue;
    f.message += "; the codec " + describe(*p) +
                 " is configured with cannot be seen from this host, since it advertises None to "
                 "every peer here";
    f.hint += "; to see the codec " + describe(*p) + " uses towards other hosts, check it from another host";
  }
  out.push_back(std::move(f));
}

void compression_findings(const Peer& a, const Peer& b, const Handshake& ha, const Handshake& hb,
                          const DaskNegotiation& dask, std::vector<Finding>& out) {
  // What a peer reached on its own host advertises to another host is not
  // known: its None to us is the same-host rule.
  for (const auto& [hidden, other] : {std::pair<const Peer&, const Peer&>{a, b},
                                      std::pair<const Peer&, const Peer&>{b, a}}) {
    if (!hidden.compression_hidden) continue;
    Finding f;
    f.severity = Severity::info;
    f.code = finding_code::kCompressionMismatch;
    f.message = with_release(hidden) +
                " advertised compression None to this host because it runs here (distributed PR "
                "#7768); the codec it advertises to " + describe(other) +
                " cannot be seen from this host, so what Dask negotiates between them is not known";
    f.hint = "check " + describe(hidden) + " from another host to see its codec";
    out.push_back(std::move(f));
    return;
  }
  const CompressionValue& ca = *ha.compression;
  const CompressionValue& cb = *hb.compression;
  if (dask.compression.compresses() || (!ca.compresses() && !cb.compresses())) return;

  Finding f;
  f.severity = Severity::warning;
  f.code = finding_code::kCompressionMismatch;
  f.message = describe(a) + " advertises " + quoted(ca) + " and " + describe(b) + " advertises " +
              quoted(cb) +
              ": Dask compresses only when both name the same codec, so everything between "
              "them travels uncompressed in both directions";
  const auto common = common_codec(a, b);
  if (common) {
    f.hint = config_hint(*common, a, b);
  } else {
    f.hint = "no codec is known to both; " + install_hint("lz4", a) + " and " +
             install_hint("lz4", b) + ", then " + config_hint("lz4", a, b);
  }
  // Name the install that would let the configured codec work.
  for (const auto& [sender, receiver, c] :
       {std::tuple<const Peer&, const Peer&, const CompressionValue&>{a, b, ca},
        std::tuple<const Peer&, const Peer&, const CompressionValue&>{b, a, cb}}) {
    if (c.compresses() && receiver.lacks(c.name) && (!common || *common != c.name))
      f.hint += "; or, to keep " + c.name + ", " + install_hint(c.name, receiver) +
                " and set it there too";
  }
  out.push_back(std::move(f));

  for (const auto& [sender, receiver, c] :
       {std::tuple<const Peer&, const Peer&, const CompressionValue&>{a, b, ca},
        std::tuple<const Peer&, const Peer&, const CompressionValue&>{b, a, cb}}) {
    if (!c.compresses() || !receiver.lacks(c.name)) continue;
    Finding u;
    u.severity = Severity::info;
    u.code = finding_code::kCodecUnavailable;
    u.message = describe(sender) + " is configured to compress with " + c.name + ", which " +
                describe(receiver) + " cannot decode";
    u.hint = install_hint(c.name, receiver);
    out.push_back(std::move(u));
  }
}

void pickle_findings(const Peer& a, const Peer& b, std::vector<Finding>& out) {
  const std::int64_t pa = a.handshake && a.handshake->pickle_protocol ? *a.handshake->pickle_protocol
                                                                      : a.max_pickle_protocol;
  const std::int64_t pb = b.handshake && b.handshake->pickle_protocol ? *b.handshake->pickle_protocol
                                                                      : b.max_pickle_protocol;
  if (pa == pb) return;
  const Peer& low = pa < pb ? a : b;
  const Peer& high = pa < pb ? b : a;
  const std::int64_t lo = std::min(pa, pb);
  const std::int64_t hi = std::max(pa, pb);
  Finding f;
  f.code = finding_code::kPickleProtocolDowngrade;
  if (lo < 5 && hi >= 5) {
    f.severity = Severity::error;
    f.message = describe(low) + " reads pickle protocol " + std::to_string(lo) +
                " at most, so Dask negotiates protocol " + std::to_string(lo) + " with " +
                describe(high) +
                "; but Dask writes type-serialized headers, ToPickle (__Pickled__) objects and "
                "error pickles with protocol 5 whatever was negotiated, and " + describe(low) +
                " fails on them with \"unsupported pickle protocol: 5\""
                " (docs/protocol.md §2.6, §6.3)";
    f.hint = "run Python 3.8 or later " + where(low) +
             "; to replay captured messages for it, re-encode them with `dask-caps transcode IN -o "
             "OUT --pickle-protocol " + std::to_string(lo) + "` (or --for with its probe file)";
  } else {
    f.severity = Severity::info;
    f.message = describe(low) + " reads pickle protocol " + std::to_string(lo) + " and " +
                describe(high) + " protocol " + std::to_string(hi) +
                ": Dask writes with protocol " + std::to_string(lo) + " between them";
    f.hint = "run the same Python " + where(low) + " and " + where(high);
  }
  out.push_back(std::move(f));
}

void python_findings(const Peer& a, const Peer& b, PythonRule rule, std::vector<Finding>& out) {
  if (a.python.empty() || b.python.empty() || a.python == b.python) return;
  const auto [amaj, amin] = major_minor(a.python);
  const auto [bmaj, bmin] = major_minor(b.python);
  Finding f;
  f.code = finding_code::kPythonVersionMismatch;
  const std::string both = describe(a) + " runs Python " + a.python + " and " + describe(b) +
                           " Python " + b.python;
  if (amaj != bmaj) {
    f.severity = Severity::error;
    f.message = both + ": pickles of functions and classes do not cross Python major versions";
  } else if (amin != bmin) {
    f.severity = rule == PythonRule::same_major ? Severity::info : Severity::warning;
    f.message = both +
                ": functions and lambdas that cloudpickle serializes by value carry bytecode "
                "that does not load across Python minor versions, so tasks fail on the other side";
  } else {
    f.severity = rule == PythonRule::exact ? Severity::warning : Severity::info;
    f.message = both + " (same minor version: pickles are compatible)";
  }
  f.hint = std::string("run the same Python ") +
           (amaj == bmaj && amin == bmin ? "release" : "minor version") +
           " " + where(a) + " and " + where(b) + " (now " + a.python + " and " + b.python + ")";
  out.push_back(std::move(f));
}

void package_findings(const Peer& a, const Peer& b, std::vector<Finding>& out) {
  std::set<std::string> names;
  for (const auto& [k, v] : a.packages) names.insert(k);
  for (const auto& [k, v] : b.packages) names.insert(k);
  std::string harmless;
  std::vector<std::string> harmless_names;
  for (const auto& name : names) {
    if (name == "python") continue;
    auto ia = a.packages.find(name);
    auto ib = b.packages.find(name);
    if (ia == a.packages.end() || ib == b.packages.end()) continue;  // asked of one only
    const auto& va = ia->second;
    const auto& vb = ib->second;
    if (!va && !vb) continue;
    const bool codec_module =
        name == "lz4" || name == "zstandard" || name == "snappy" || name == "python-snappy";
    if (!va || !vb) {
      if (codec_module || name == "dask" || name == "distributed") continue;  // said elsewhere
      harmless_names.push_back(name);
      harmless += (harmless.empty() ? "" : ", ") + name + " " + (va ? *va : "missing") + " vs " +
                  (vb ? *vb : "missing");
      continue;
    }
    if (*va == *vb || *va == "unknown" || *vb == "unknown") continue;
    const bool core = name == "dask" || name == "distributed";
    if (core && public_version(*va) != public_version(*vb)) {
      Finding f;
      f.severity = Severity::error;
      f.code = finding_code::kPackageMismatch;
      f.message = describe(a) + " has " + name + " " + *va + " and " + describe(b) + " " + name +
                  " " + *vb +
                  ": Dask requires the same dask and distributed on client, scheduler and "
                  "workers (messages and task graphs change between releases)";
      f.hint = "install the same " + name + " release " + where(a) + " and " + where(b) +
               " (e.g. pip install " + name + "==" + std::string(public_version(*va)) + ")";
      f.packages = {name};
      out.push_back(std::move(f));
      continue;
    }
    if (name == "numpy") {
      const auto na = version_numbers(*va);
      const auto nb = version_numbers(*vb);
      if (!na.empty() && !nb.empty() && na[0] != nb[0]) {
        Finding f;
        f.severity = Severity::warning;
        f.code = finding_code::kPackageMismatch;
        f.message = describe(a) + " has numpy " + *va + " and " + describe(b) + " numpy " + *vb +
                    ": pickles from numpy 2 name numpy._core, which numpy 1 cannot import";
        f.hint = "install the same numpy major version " + where(a) + " and " + where(b);
        f.packages = {name};
        out.push_back(std::move(f));
        continue;
      }
    }
    harmless_names.push_back(name);
    harmless += (harmless.empty() ? "" : ", ") + name + " " + *va + " vs " + *vb;
  }
  if (harmless.empty()) return;
  Finding f;
  f.severity = Severity::info;
  f.code = finding_code::kPackageMismatch;
  f.message = "packages differ between " + describe(a) + " and " + describe(b) + ": " + harmless;
  f.hint = "usually harmless; align them " + where(a) + " and " + where(b) +
           " if Dask's own version check warns";
  f.packages = std::move(harmless_names);
  out.push_back(std::move(f));
}

void gpu_findings(const Peer& a, const Peer& b, std::vector<Finding>& out) {
  for (const auto& [src, dst] : {std::pair<const Peer&, const Peer&>{a, b},
                                 std::pair<const Peer&, const Peer&>{b, a}}) {
    if (!(src.gpu.value_or(false) && dst.gpu.has_value() && !*dst.gpu)) continue;
    Finding f;
    f.severity = Severity::warning;
    f.code = finding_code::kGpuToCpu;
    f.message = describe(src) + " has a GPU and " + describe(dst) +
                " has none: CuPy results travel in GPU layout (cupy type, dask/cuda serializer) "
                "that " + describe(dst) + " cannot deserialize; Dask does not downgrade them";
    f.hint = "convert to NumPy " + where(src) +
             " before the result leaves (e.g. x.map_blocks(cupy.asnumpy)), or re-encode captured "
             "messages with `dask-caps transcode IN -o OUT --layout cpu`";
    out.push_back(std::move(f));
  }
}

}  // namespace

PairReport evaluate_pair(const Peer& a, const Peer& b, bool same_host, PythonRule python_rule) {
  PairReport r;
  r.recommended = recommend(a, b, same_host);
  incomplete_findings(a, b, r.findings);
  incomplete_findings(b, a, r.findings);
  if (a.handshake && b.handshake) {
    const Handshake ha = advertised_to(a, same_host);
    const Handshake hb = advertised_to(b, same_host);
    r.dask = dask_negotiate(ha, hb);
    const Peer* scheduler = a.role == "Scheduler" ? &a : (b.role == "Scheduler" ? &b : nullptr);
    const Peer* other = scheduler == &a ? &b : &a;
    if (scheduler && (other->role == "Worker" || other->role == "Nanny")) {
      // The scheduler's outgoing comms carry its handshake overrides
      // (pickle-protocol 4); its listeners do not (docs/protocol.md §2.7).
      Handshake hs = scheduler == &a ? ha : hb;
      if (hs.pickle_protocol) hs.pickle_protocol = 4;
      r.scheduler_initiated = dask_negotiate(hs, scheduler == &a ? hb : ha);
    }
    if (r.dask->ok) {
      if (uncompressed_by_design(a, b, same_host))
        by_design_finding(a, b, r.findings);
      else
        compression_findings(a, b, ha, hb, *r.dask, r.findings);
    }
  } else {
    for (const Peer* p : {&a, &b}) {
      if (p->handshake) continue;
      Finding f;
      f.severity = Severity::info;
      f.code = finding_code::kPackageMismatch;
      f.message = "no Dask found " + where(*p) +
                  " (its probe has no Python with distributed): what Dask negotiates there cannot "
                  "be predicted; `recommended` uses the codecs dask-caps has";
      f.hint = "probe the Python that runs Dask " + where(*p) + " (dask-caps probe --python EXE)";
      r.findings.push_back(std::move(f));
    }
  }
  pickle_findings(a, b, r.findings);
  python_findings(a, b, python_rule, r.findings);
  package_findings(a, b, r.findings);
  gpu_findings(a, b, r.findings);
  return r;
}

RelayReport evaluate_relay(const Peer& client, const Peer& scheduler,
                           std::span<const Peer* const> workers,
                           const std::function<bool(const Peer&, const Peer&)>& same_host) {
  RelayReport out;
  if (!client.handshake || !scheduler.handshake) return out;
  const auto link = [&](const Peer& x, const Peer& y) {
    const bool same = same_host(x, y);
    return dask_negotiate(advertised_to(x, same), advertised_to(y, same));
  };

  // worker -> scheduler -> client: the codec each worker negotiated with the
  // scheduler, grouped by codec so a thousand workers give one finding.
  std::map<std::string, std::vector<const Peer*>> by_codec;
  for (const Peer* w : workers) {
    if (!w->handshake) continue;
    const auto d = link(*w, scheduler);
    if (!d.ok || !d.compression.compresses()) continue;
    if (client.lacks(d.compression.name)) by_codec[d.compression.name].push_back(w);
  }
  for (const auto& [codec, ws] : by_codec) {
    for (const Peer* w : ws) out.broken.push_back({w->name, scheduler.name, client.name, codec, false});
    Finding f;
    f.severity = Severity::error;
    f.code = finding_code::kCodecUnavailable;
    f.message = describe(client) + " will receive data that " +
                (ws.size() == 1 ? describe(*ws[0])
                                : std::to_string(ws.size()) + " workers (" + ws[0]->name + ", ...)") +
                " compressed with " + codec + " on " + (ws.size() == 1 ? "its link" : "their links") +
                " to " + describe(scheduler) +
                "; the scheduler forwards those frames unchanged (docs/protocol.md §3.7) and " +
                describe(client) +
                " cannot decode " + codec + ": it fails with KeyError('" + codec +
                "') (dask/distributed#7774)";
    f.hint = install_hint(codec, client) +
             "; or set distributed.comm.compression to a codec it has on the scheduler and workers";
    out.findings.push_back(std::move(f));
  }

  if (workers.empty()) {
    // Workers configured like the scheduler compress with its codec.
    const Handshake hs = advertised_to(scheduler, false);
    if (hs.compression && hs.compression->compresses() && client.lacks(hs.compression->name)) {
      const std::string& codec = hs.compression->name;
      out.broken.push_back({"workers like " + scheduler.name, scheduler.name, client.name, codec, true});
      Finding f;
      f.severity = Severity::warning;
      f.code = finding_code::kCodecUnavailable;
      f.message = "workers configured like " + describe(scheduler) + " compress with " + codec +
                  " on their links to it, the scheduler forwards such data unchanged"
                  " (docs/protocol.md §3.7), "
                  "and " + describe(client) + " cannot decode " + codec +
                  ": results gathered through the scheduler fail with KeyError('" + codec +
                  "') (dask/distributed#7774)";
      f.hint = install_hint(codec, client) +
               "; or check the workers with --workers to see what they really use";
      out.findings.push_back(std::move(f));
    }
    return out;
  }

  // client -> scheduler -> worker: what the client compresses on its link
  // to the scheduler reaches the workers unchanged.
  const auto cs = link(client, scheduler);
  if (cs.ok && cs.compression.compresses()) {
    const std::string& codec = cs.compression.name;
    std::vector<const Peer*> lacking;
    for (const Peer* w : workers)
      if (w->lacks(codec)) lacking.push_back(w);
    if (!lacking.empty()) {
      for (const Peer* w : lacking) out.broken.push_back({client.name, scheduler.name, w->name, codec, false});
      Finding f;
      f.severity = Severity::error;
      f.code = finding_code::kCodecUnavailable;
      f.message = "data " + describe(client) + " sends through " + describe(scheduler) +
                  " is compressed with " + codec + " and forwarded unchanged to " +
                  (lacking.size() == 1 ? describe(*lacking[0])
                                       : std::to_string(lacking.size()) + " workers (" +
                                             lacking[0]->name + ", ...)") +
                  ", which cannot decode " + codec;
      f.hint = install_hint(codec, *lacking[0]) + (lacking.size() > 1 ? " and the other workers" : "");
      out.findings.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace daskcaps
