#include "daskcaps/caps/caps_report.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "daskcaps/net/address.h"

namespace daskcaps::report {

namespace {

const msgpack::Value* reply_value(const std::optional<rpc::Reply>& r) {
  return r && r->ok() ? &r->value : nullptr;
}

bool is_worker_type(const std::string& t) { return t == "Worker" || t == "Nanny"; }

}  // namespace

EndpointInfo endpoint_from_query(std::string address, Result<rpc::QueryResult> result) {
  EndpointInfo e;
  e.address = std::move(address);
  if (!result) {
    e.error = std::move(result).error();
    return e;
  }
  rpc::QueryResult& q = *result;
  e.handshake = std::move(q.exchange.handshake);
  e.identity = std::move(q.exchange.identity);
  e.versions = std::move(q.exchange.versions);
  e.rtt_ms = q.rtt_ms;
  e.peer_ip = std::move(q.peer_ip);
  e.local_ip = std::move(q.local_ip);
  e.link = q.link;
  if (const auto* id = reply_value(e.identity))
    if (const auto* t = id->find("type"); t && t->is_str()) e.type = t->as_str();
  return e;
}

EndpointInfo endpoint_from_probe(std::string path, HostProbe probe) {
  EndpointInfo e;
  e.address = std::move(path);
  e.type = "file";
  e.is_file = true;
  e.handshake = probe.handshake;
  e.probe = std::move(probe);
  return e;
}

std::vector<std::string> workers_of(const msgpack::Value& identity) {
  std::vector<std::string> out;
  const auto* workers = identity.find("workers");
  if (!workers || !workers->is_map()) return out;
  for (const auto& [k, v] : workers->as_map())
    if (k.is_str()) out.push_back(k.as_str());
  return out;
}

const std::string& side_name(const Report& report, std::size_t index) {
  static const std::string kThisHost = "this host";
  if (index == kLocal) return report.local ? report.local->name : kThisHost;
  return report.endpoints[index].address;
}

std::vector<std::string> side_members(const Report& report, std::size_t index) {
  if (index == kLocal) return {side_name(report, index)};
  const auto& e = report.endpoints[index];
  if (!e.group || *e.group >= report.summary.groups.size()) return {e.address};
  std::vector<std::string> out;
  for (std::size_t m : report.summary.groups[*e.group].members) out.push_back(report.endpoints[m].address);
  return out;
}

Report build_report(std::optional<Peer> local, std::vector<EndpointInfo> endpoints,
                    const ReportOptions& options) {
  Report rep;
  rep.local = std::move(local);
  rep.endpoints = std::move(endpoints);
  auto& eps = rep.endpoints;

  std::unordered_map<std::string, std::size_t> by_address;
  for (std::size_t i = 0; i < eps.size(); ++i) by_address.emplace(eps[i].address, i);

  // Peers.
  for (auto& e : eps) {
    if (e.is_file) {
      if (e.probe) e.peer = peer_from_probe(*e.probe, e.address, "file");
      continue;
    }
    if (!e.handshake) continue;
    std::string host = e.peer_ip;
    if (host.empty())
      if (auto a = net::parse_address(e.address)) host = a->host;
    e.peer = peer_from_live(e.address, e.type, host, *e.handshake, reply_value(e.versions),
                            reply_value(e.identity), options.limits);
    // Reached on its own host, a newest peer advertised None to us by rule.
    e.peer->compression_hidden = e.peer->release.uncompressed_to_same_host() && !e.peer_ip.empty() &&
                                 e.peer_ip == e.local_ip;
    // The scheduler's entry for a worker carries GPU metrics where the
    // worker has pynvml; the worker's own identity does not.
    if (!e.discovered_by.empty() && !e.peer->gpu) {
      if (auto s = by_address.find(e.discovered_by); s != by_address.end())
        if (const auto* sid = reply_value(eps[s->second].identity))
          if (const auto* ws = sid->find("workers"))
            if (const auto* entry = ws->find(e.address))
              if (const auto* m = entry->find("metrics"); m && m->find("gpu")) e.peer->gpu = true;
    }
    const auto missing = e.handshake->missing_keys();
    if (!missing.empty() && !e.error)
      e.error = make_error(Errc::protocol, "the peer's handshake lacks \"" + missing.front() +
                                               "\": Dask refuses to talk to it");
  }

  // Groups of surveyed workers, per scheduler.
  std::map<std::pair<std::size_t, std::string>, std::size_t> group_of_sig;
  for (std::size_t i = 0; i < eps.size(); ++i) {
    auto& e = eps[i];
    if (e.given || !e.peer) continue;
    auto s = by_address.find(e.discovered_by);
    const std::size_t sched = s == by_address.end() ? kLocal : s->second;
    const auto key = std::make_pair(sched, capability_signature(*e.peer));
    auto [it, inserted] = group_of_sig.emplace(key, rep.summary.groups.size());
    if (inserted) rep.summary.groups.push_back(Group{sched, {}});
    rep.summary.groups[it->second].members.push_back(i);
    e.group = it->second;
  }
  // Largest group first within each scheduler; the rest are outliers. On a
  // tie, a group that advertises what its scheduler advertises comes first.
  const auto like_scheduler = [&](const Group& g) {
    if (g.scheduler == kLocal) return false;
    const auto& w = eps[g.representative()].handshake;
    const auto& s = eps[g.scheduler].handshake;
    return w && s && w->compression == s->compression && w->pickle_protocol == s->pickle_protocol;
  };
  std::stable_sort(rep.summary.groups.begin(), rep.summary.groups.end(), [&](const Group& x, const Group& y) {
    if (x.scheduler != y.scheduler) return x.scheduler < y.scheduler;
    if (x.members.size() != y.members.size()) return x.members.size() > y.members.size();
    return like_scheduler(x) && !like_scheduler(y);
  });
  for (std::size_t g = 0; g < rep.summary.groups.size(); ++g) {
    for (std::size_t m : rep.summary.groups[g].members) eps[m].group = g;
    if (g > 0 && rep.summary.groups[g - 1].scheduler == rep.summary.groups[g].scheduler)
      for (std::size_t m : rep.summary.groups[g].members) rep.summary.outliers.push_back(m);
  }

  // Same host: the IPs we reached (and ours), or the probes' host names.
  const auto same_host = [&](std::size_t a, std::size_t b) {
    if (a == kLocal || b == kLocal) {
      const std::size_t o = a == kLocal ? b : a;
      if (o == kLocal) return true;
      const auto& e = eps[o];
      if (e.is_file) return rep.local && !rep.local->host.empty() && rep.local->host == e.peer->host;
      return !e.peer_ip.empty() && e.peer_ip == e.local_ip;
    }
    const auto& x = eps[a];
    const auto& y = eps[b];
    if (x.is_file || y.is_file)
      return x.is_file && y.is_file && x.peer && y.peer && !x.peer->host.empty() &&
             x.peer->host == y.peer->host;
    return !x.peer_ip.empty() && x.peer_ip == y.peer_ip;
  };
  const auto peer_at = [&](std::size_t i) -> const Peer& { return i == kLocal ? *rep.local : *eps[i].peer; };

  const auto add_pair = [&](std::size_t a, std::size_t b) {
    PairEntry p;
    p.a = a;
    p.b = b;
    p.report = evaluate_pair(peer_at(a), peer_at(b), same_host(a, b), options.python_rule);
    if (a != kLocal) p.a_group = eps[a].group;
    if (b != kLocal) p.b_group = eps[b].group;
    rep.pairs.push_back(std::move(p));
  };

  std::vector<std::size_t> given;
  for (std::size_t i = 0; i < eps.size(); ++i)
    if (eps[i].given && eps[i].peer) given.push_back(i);
  if (rep.local) {
    for (std::size_t g : given) add_pair(kLocal, g);
  } else {
    for (std::size_t i = 0; i < given.size(); ++i)
      for (std::size_t j = i + 1; j < given.size(); ++j) add_pair(given[i], given[j]);
  }
  const auto& groups = rep.summary.groups;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::size_t r = groups[g].representative();
    if (rep.local) add_pair(kLocal, r);
    for (std::size_t i : given) add_pair(i, r);
    for (std::size_t h = g + 1; h < groups.size(); ++h)
      if (groups[h].scheduler == groups[g].scheduler) add_pair(r, groups[h].representative());
  }

  // Relay through each scheduler.
  std::unordered_map<const Peer*, std::size_t> index_of;
  if (rep.local) index_of.emplace(&*rep.local, kLocal);
  for (std::size_t i = 0; i < eps.size(); ++i)
    if (eps[i].peer) index_of.emplace(&*eps[i].peer, i);
  const auto same_peer_host = [&](const Peer& x, const Peer& y) {
    return same_host(index_of.at(&x), index_of.at(&y));
  };
  std::vector<std::size_t> clients;
  if (rep.local) clients.push_back(kLocal);
  for (std::size_t i : given)
    if (eps[i].is_file) clients.push_back(i);
  for (std::size_t s : given) {
    if (eps[s].type != "Scheduler") continue;
    std::vector<const Peer*> workers;
    for (std::size_t i = 0; i < eps.size(); ++i) {
      if (!eps[i].peer || !is_worker_type(eps[i].type)) continue;
      if (eps[i].given || eps[i].discovered_by == eps[s].address) workers.push_back(&*eps[i].peer);
    }
    for (std::size_t c : clients) {
      RelayReport rr = evaluate_relay(peer_at(c), peer_at(s), workers, same_peer_host);
      for (auto& path : rr.broken) rep.summary.relay.push_back(std::move(path));
      auto pair = std::find_if(rep.pairs.begin(), rep.pairs.end(), [&](const PairEntry& p) {
        return (p.a == c && p.b == s) || (p.a == s && p.b == c);
      });
      const bool to_summary = pair == rep.pairs.end();
      auto& sink = to_summary ? rep.summary.findings : pair->report.findings;
      for (auto& f : rr.findings) {
        if (to_summary) f.endpoint = eps[s].address;
        sink.push_back(std::move(f));
      }
    }
  }

  // Workers a survey could not check.
  std::map<std::string, std::vector<std::size_t>> unreachable;
  for (std::size_t i = 0; i < eps.size(); ++i)
    if (!eps[i].given && !eps[i].peer) unreachable[eps[i].discovered_by].push_back(i);
  for (const auto& [sched, idx] : unreachable) {
    std::size_t total = 0;
    for (const auto& e : eps)
      if (!e.given && e.discovered_by == sched) ++total;
    Finding f;
    f.severity = Severity::warning;
    f.code = finding_code::kUnreachable;
    f.message = std::to_string(idx.size()) + " of the " + std::to_string(total) + " workers of " + sched +
                " could not be checked: ";
    for (std::size_t k = 0; k < idx.size() && k < 3; ++k) {
      const auto& e = eps[idx[k]];
      f.message += (k ? "; " : "") + e.address + " (" + (e.error ? e.error->message() : "no handshake") + ")";
    }
    if (idx.size() > 3) f.message += "; ...";
    f.hint = "the scheduler lists them but they do not answer from here: check that they run and that "
             "this host may reach them (firewall, TLS settings, --timeout)";
    f.endpoint = sched;
    rep.summary.findings.push_back(std::move(f));
  }

  auto& sum = rep.summary;
  sum.endpoints = eps.size();
  for (const auto& e : eps) (e.peer && !e.error) ? ++sum.reachable : ++sum.unreachable;
  count_findings(rep);
  return rep;
}

void count_findings(Report& rep) {
  auto& sum = rep.summary;
  sum.info = sum.warnings = sum.errors = 0;
  sum.worst.reset();
  sum.degraded.clear();
  const auto count = [&](const Finding& f) {
    switch (f.severity) {
      case Severity::info: ++sum.info; break;
      case Severity::warning: ++sum.warnings; break;
      case Severity::error: ++sum.errors; break;
    }
    if (!sum.worst || f.severity > *sum.worst) sum.worst = f.severity;
  };
  for (std::size_t p = 0; p < rep.pairs.size(); ++p) {
    const auto& fs = rep.pairs[p].report.findings;
    for (const auto& f : fs) count(f);
    const auto worst = worst_severity(fs);
    if (!worst || *worst == Severity::info) continue;
    Degraded d;
    d.pair = p;
    d.worst = *worst;
    for (const auto& f : fs)
      if (f.severity >= Severity::warning &&
          std::find(d.codes.begin(), d.codes.end(), f.code) == d.codes.end())
        d.codes.push_back(f.code);
    sum.degraded.push_back(std::move(d));
  }
  for (const auto& f : sum.findings) count(f);
}

}  // namespace daskcaps::report
