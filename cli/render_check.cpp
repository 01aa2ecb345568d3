#include "cli/render_check.h"
#include "cli/render_link.h"

#include <cmath>
#include <cstdio>

#include "daskcaps/base/peer_text.h"

namespace daskcaps::cli {

namespace {

using report::kLocal;
using report::Report;

Json handshake_json(const Handshake& h) {
  return json_value(msgpack_to_json(h.raw.is_map() ? h.raw : h.to_msgpack()));
}

Json peer_capabilities_json(const Peer& p) {
  Json c = Json::object();
  c["codecs"] = p.codecs;
  if (!p.codecs_unknown.empty()) c["codecs-unknown"] = p.codecs_unknown;
  c["max-pickle-protocol"] = p.max_pickle_protocol;
  c["gpu"] = p.gpu ? Json(*p.gpu) : Json(nullptr);
  c["source"] = p.published ? "published" : "inferred";
  if (!p.capabilities_refused.empty()) c["refused"] = p.capabilities_refused;
  if (!p.published_by.empty()) c["published-by"] = "dask-caps " + p.published_by;
  return c;
}

Json findings_json(const std::vector<Finding>& findings, const std::vector<baseline::State>* states) {
  Json arr = Json::array();
  for (std::size_t i = 0; i < findings.size(); ++i) {
    Json j = json_value(finding_json(findings[i]));
    if (states) j["baseline"] = std::string(baseline::to_string((*states)[i]));
    arr.push_back(std::move(j));
  }
  return arr;
}

Json severity_counts(std::size_t errors, std::size_t warnings, std::size_t info) {
  return Json{{"error", errors}, {"warning", warnings}, {"info", info}};
}

std::string state_tag(const gate::Gate& gate, std::size_t pair, std::size_t index) {
  if (!gate.diff) return "";
  const auto& states = pair == report::kLocal ? gate.diff->summary : gate.diff->pairs[pair];
  return " [" + std::string(baseline::to_string(states[index])) + "]";
}

double round2(double v) { return std::round(v * 100.0) / 100.0; }

std::string short_compression(const CompressionValue& c) {
  switch (c.kind) {
    case CompressionValue::Kind::nil: return "None";
    case CompressionValue::Kind::false_: return "False";
    case CompressionValue::Kind::name: return peer_text(c.name, 64);
  }
  return "None";
}

/// A line of text that may carry a peer's strings (a finding's message
/// quotes its codec names): escaped, and bounded far above any line
/// dask-caps writes itself.
std::string line_text(std::string_view s) { return peer_text(s, 4096); }

std::string codec_text(const std::optional<std::string>& c) { return c ? *c : "none"; }

}  // namespace

Json check_report_json(const Report& rep, const gate::Gate& gate) {
  Json doc = json_document(kCheckSchema);
  if (rep.local) {
    Json l = Json::object();
    l["name"] = rep.local->name;
    l["host"] = rep.local->host;
    l["handshake"] = rep.local->handshake ? handshake_json(*rep.local->handshake) : Json(nullptr);
    l["python"] = rep.local->python.empty() ? Json(nullptr) : Json(rep.local->python);
    l["capabilities"] = peer_capabilities_json(*rep.local);
    doc["local"] = std::move(l);
  } else {
    doc["local"] = nullptr;
  }

  Json eps = Json::array();
  for (const auto& e : rep.endpoints) {
    Json j = Json::object();
    j["address"] = e.address;
    j["type"] = e.type.empty() ? Json(nullptr) : Json(e.type);
    j["handshake"] = e.handshake ? handshake_json(*e.handshake) : Json(nullptr);
    if (e.versions && e.versions->ok())
      j["versions"] = json_value(msgpack_to_json(e.versions->value));
    else
      j["versions"] = nullptr;
    j["rtt-ms"] = e.rtt_ms ? Json(round2(*e.rtt_ms)) : Json(nullptr);
    if (auto link = link_json(e)) j["link"] = std::move(*link);
    j["error"] = e.error ? Json(e.error->message()) : Json(nullptr);
    if (e.error) j["error-kind"] = std::string(to_string(e.error->code));
    if (e.identity && !e.identity->ok()) j["identity-error"] = e.identity->describe("identity");
    if (e.versions && !e.versions->ok()) j["versions-error"] = e.versions->describe("versions");
    if (e.identity && e.identity->ok())
      if (const auto* id = e.identity->value.find("id"); id && id->is_str()) j["id"] = id->as_str();
    if (!e.given) j["discovered-by"] = e.discovered_by;
    if (e.group) j["group"] = *e.group;
    if (e.peer) {
      j["python"] = e.peer->python.empty() ? Json(nullptr) : Json(e.peer->python);
      j["capabilities"] = peer_capabilities_json(*e.peer);
    }
    eps.push_back(std::move(j));
  }
  doc["endpoints"] = std::move(eps);

  Json pairs = Json::array();
  for (std::size_t pi = 0; pi < rep.pairs.size(); ++pi) {
    const auto& p = rep.pairs[pi];
    Json j = json_value(pair_json(report::side_name(rep, p.a), report::side_name(rep, p.b), p.report));
    if (gate.diff)
      for (std::size_t i = 0; i < j["findings"].size(); ++i)
        j["findings"][i]["baseline"] = std::string(baseline::to_string(gate.diff->pairs[pi][i]));
    if (p.a_group) j["a-group"] = *p.a_group;
    if (p.b_group) {
      j["b-group"] = *p.b_group;
      j["b-members"] = rep.summary.groups[*p.b_group].members.size();
    }
    pairs.push_back(std::move(j));
  }
  doc["pairs"] = std::move(pairs);

  const auto& s = rep.summary;
  Json sum = Json::object();
  sum["endpoints"] = s.endpoints;
  sum["reachable"] = s.reachable;
  sum["unreachable"] = s.unreachable;
  sum["pairs"] = rep.pairs.size();
  sum["findings"] = severity_counts(s.errors, s.warnings, s.info);
  sum["worst"] = s.worst ? Json(std::string(to_string(*s.worst))) : Json(nullptr);
  Json groups = Json::array();
  for (std::size_t g = 0; g < s.groups.size(); ++g) {
    const auto& grp = s.groups[g];
    const auto& repr = rep.endpoints[grp.representative()];
    Json j = Json::object();
    j["id"] = g;
    j["scheduler"] = rep.endpoints[grp.scheduler].address;
    j["size"] = grp.members.size();
    j["handshake"] = repr.handshake ? handshake_json(*repr.handshake) : Json(nullptr);
    j["python"] = repr.peer && !repr.peer->python.empty() ? Json(repr.peer->python) : Json(nullptr);
    if (repr.peer) j["capabilities"] = peer_capabilities_json(*repr.peer);
    Json members = Json::array();
    for (std::size_t m : grp.members) members.push_back(rep.endpoints[m].address);
    j["members"] = std::move(members);
    groups.push_back(std::move(j));
  }
  sum["groups"] = std::move(groups);
  Json outliers = Json::array();
  for (std::size_t o : s.outliers) outliers.push_back(rep.endpoints[o].address);
  sum["outliers"] = std::move(outliers);
  Json degraded = Json::array();
  for (const auto& d : s.degraded) {
    const auto& p = rep.pairs[d.pair];
    degraded.push_back(Json{{"a", report::side_name(rep, p.a)},
                            {"b", report::side_name(rep, p.b)},
                            {"worst", std::string(to_string(d.worst))},
                            {"codes", d.codes}});
  }
  sum["degraded"] = std::move(degraded);
  Json relay = Json::array();
  for (const auto& r : s.relay)
    relay.push_back(Json{{"from", r.from}, {"via", r.via}, {"to", r.to}, {"codec", r.codec}, {"predicted", r.predicted}});
  sum["relay"] = std::move(relay);
  sum["cluster-findings"] = findings_json(s.findings, gate.diff ? &gate.diff->summary : nullptr);
  doc["summary"] = std::move(sum);

  if (gate.policy) {
    doc["policy"] = json_value(policy::policy_to_json(*gate.policy));
    Json ignored = Json::array();
    for (const auto& ig : gate.ignored) {
      Json j = Json::object();
      if (!ig.a.empty()) {
        j["a"] = ig.a;
        j["b"] = ig.b;
      }
      Json f = json_value(finding_json(ig.finding));
      for (auto& [k, v] : f.items()) j[k] = std::move(v);
      j["reason"] = ig.reason;
      ignored.push_back(std::move(j));
    }
    doc["ignored"] = std::move(ignored);
  }
  if (gate.baseline && gate.diff) {
    const auto& d = *gate.diff;
    Json b = Json::object();
    b["file"] = gate.baseline->path;
    b["new"] = severity_counts(d.new_errors, d.new_warnings, d.new_info);
    b["worst-new"] = d.worst_new ? Json(std::string(to_string(*d.worst_new))) : Json(nullptr);
    b["unchanged"] = d.unchanged;
    Json vanished = Json::array();
    for (const auto& e : d.vanished) {
      Json j = Json::object();
      if (e.in_pair) {
        j["a"] = e.a.name;
        j["b"] = e.b.name;
      } else {
        j["endpoint"] = e.endpoint;
      }
      j["severity"] = to_string(e.severity);
      j["code"] = e.code;
      j["message"] = e.message;
      if (!e.packages.empty()) j["packages"] = e.packages;
      vanished.push_back(std::move(j));
    }
    b["vanished"] = std::move(vanished);
    doc["baseline"] = std::move(b);
  }
  return doc;
}

void render_check_text(const Report& rep, std::ostream& out, const gate::Gate& gate) {
  const auto describe_peer = [](const Peer& p) {
    std::string s;
    if (p.handshake) {
      s += "compression " + (p.handshake->compression ? short_compression(*p.handshake->compression) : "<missing>");
      if (p.compression_hidden) s += " (to this host, which it shares)";
      s += ", pickle " + (p.handshake->pickle_protocol ? std::to_string(*p.handshake->pickle_protocol)
                                                         : std::string("<missing>"));
    } else {
      s += "no Dask";
    }
    if (!p.python.empty()) s += ", Python " + p.python;
    s += ", codecs";
    for (const auto& c : p.codecs) {
      s += ' ';  // appended: GCC 12 -O3 misreads `" " + string&&` (CMakeLists.txt)
      s += peer_text(c, 64);
    }
    if (p.codecs.empty()) s += " none";
    if (p.gpu) s += *p.gpu ? ", GPU" : ", no GPU";
    if (!p.published_by.empty()) {
      s += ", published by dask-caps ";
      s += peer_text(p.published_by, 64);
    }
    return s;
  };

  if (rep.local) out << rep.local->name << ": " << describe_peer(*rep.local) << '\n';
  std::size_t shown = 0;
  const std::size_t kMaxWorkers = 20;
  std::size_t hidden = 0;
  for (const auto& e : rep.endpoints) {
    if (!e.given && shown >= kMaxWorkers) {
      ++hidden;
      continue;
    }
    if (!e.given) ++shown;
    out << peer_text(e.address);
    if (!e.type.empty() && e.type != "file") out << " (" << peer_text(e.type, 64) << ")";
    if (e.peer) out << ": " << describe_peer(*e.peer);
    if (e.rtt_ms) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", *e.rtt_ms);
      out << ", rtt " << buf << " ms";
    }
    // Both are ours, with the peer's strings in them escaped where they
    // were read (escaping them again would double the backslashes).
    if (e.error) out << "\n  error: " << e.error->message();
    if (e.peer && !e.peer->capabilities_refused.empty()) out << "\n  warning: " << e.peer->capabilities_refused;
    out << '\n' << link_text(e);
  }
  if (hidden) out << "... and " << hidden << " more workers (--json lists them all)\n";

  for (std::size_t pi = 0; pi < rep.pairs.size(); ++pi) {
    const auto& p = rep.pairs[pi];
    out << '\n' << peer_text(report::side_name(rep, p.a)) << "  <->  " << peer_text(report::side_name(rep, p.b));
    if (p.b_group) {
      const std::size_t n = rep.summary.groups[*p.b_group].members.size();
      out << "  (group " << *p.b_group << ": " << n << (n == 1 ? " worker)" : " workers)");
    }
    out << '\n';
    if (p.report.dask) {
      const auto& d = *p.report.dask;
      if (d.ok)
        out << "  Dask negotiates:  compression " << short_compression(d.compression) << ", pickle protocol "
            << d.pickle_protocol << '\n';
      else
        out << "  Dask fails:       " << line_text(d.failure) << '\n';
      if (p.report.scheduler_initiated && p.report.scheduler_initiated->ok)
        out << "  (scheduler-opened comms: compression "
            << short_compression(p.report.scheduler_initiated->compression) << ", pickle protocol "
            << p.report.scheduler_initiated->pickle_protocol << ")\n";
    }
    const auto& r = p.report.recommended;
    out << "  recommended:      ";
    if (r.a_to_b.codec == r.b_to_a.codec)
      out << "compression " << codec_text(r.a_to_b.codec);
    else
      out << "compression " << codec_text(r.a_to_b.codec) << " a->b, " << codec_text(r.b_to_a.codec) << " b->a";
    out << ", pickle protocol " << r.pickle_protocol << ", layout ";
    if (r.a_to_b.layout == r.b_to_a.layout)
      out << r.a_to_b.layout;
    else
      out << r.a_to_b.layout << " a->b, " << r.b_to_a.layout << " b->a";
    out << '\n';
    for (std::size_t i = 0; i < p.report.findings.size(); ++i) {
      const auto& f = p.report.findings[i];
      out << "  " << to_string(f.severity) << " " << f.code << state_tag(gate, pi, i) << ": " << line_text(f.message)
          << '\n';
      out << "      hint: " << line_text(f.hint) << '\n';
    }
  }

  const auto& s = rep.summary;
  if (!s.groups.empty()) {
    out << "\nworker groups (identical capabilities):\n";
    for (std::size_t g = 0; g < s.groups.size(); ++g) {
      const auto& grp = s.groups[g];
      out << "  group " << g << ": " << grp.members.size() << " worker" << (grp.members.size() == 1 ? "" : "s")
          << " of " << peer_text(rep.endpoints[grp.scheduler].address) << ", e.g. "
          << peer_text(rep.endpoints[grp.representative()].address) << '\n';
    }
    if (!s.outliers.empty()) {
      out << "  outliers:";
      std::size_t n = 0;
      for (std::size_t o : s.outliers) {
        if (n++ == 10) {
          out << " ...";
          break;
        }
        out << ' ' << peer_text(rep.endpoints[o].address);
      }
      out << '\n';
    }
  }
  for (const auto& r : s.relay)
    out << "relay: " << peer_text(r.from) << " -> " << peer_text(r.via) << " -> " << peer_text(r.to) << " carries " << peer_text(r.codec, 64)
        << (r.predicted ? " (predicted)" : "") << ", which the receiver cannot decode\n";
  for (std::size_t i = 0; i < s.findings.size(); ++i) {
    const auto& f = s.findings[i];
    out << to_string(f.severity) << " " << f.code << state_tag(gate, report::kLocal, i) << ": "
        << line_text(f.message) << '\n';
    out << "    hint: " << line_text(f.hint) << '\n';
  }
  if (gate.policy && !gate.ignored.empty()) {
    out << "\nignored by policy " << gate.policy->name << ":\n";
    for (const auto& ig : gate.ignored) {
      out << "  " << ig.finding.code << "  ";
      if (!ig.a.empty())
        out << ig.a << " <-> " << ig.b;
      else
        out << ig.finding.endpoint;
      out << ": " << ig.reason << '\n';
    }
  }
  if (gate.baseline && gate.diff && !gate.diff->vanished.empty()) {
    out << "\ngone since the baseline " << gate.baseline->path << ":\n";
    for (const auto& e : gate.diff->vanished) {
      out << "  " << to_string(e.severity) << " " << e.code << "  ";
      if (e.in_pair)
        out << e.a.name << " <-> " << e.b.name;
      else
        out << e.endpoint;
      out << '\n';
    }
  }
  out << "\nsummary: " << s.endpoints << " endpoint" << (s.endpoints == 1 ? "" : "s") << " (" << s.reachable
      << " reachable), " << rep.pairs.size() << " pair" << (rep.pairs.size() == 1 ? "" : "s") << ", "
      << s.errors << " error" << (s.errors == 1 ? "" : "s") << ", " << s.warnings << " warning"
      << (s.warnings == 1 ? "" : "s") << ", " << s.info << " info";
  if (gate.policy) out << " (policy " << gate.policy->name << ")";
  out << '\n';
  if (gate.baseline && gate.diff) {
    const auto& d = *gate.diff;
    out << "baseline " << gate.baseline->path << ": " << d.new_errors + d.new_warnings + d.new_info << " new ("
        << d.new_errors << " error" << (d.new_errors == 1 ? "" : "s") << ", " << d.new_warnings << " warning"
        << (d.new_warnings == 1 ? "" : "s") << ", " << d.new_info << " info), " << d.unchanged << " unchanged, "
        << d.vanished.size() << " gone\n";
  }
}

}  // namespace daskcaps::cli
