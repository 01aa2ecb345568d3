#include "core/caps/internal/gate_steps.h"

#include <openssl/evp.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>

#include "core/caps/internal/json_read.h"

namespace daskcaps::baseline {

namespace {

using json::child;
using json::Json;

constexpr std::string_view kCheckSchema = "dask-caps.check/1";

bool is_comparison(std::string_view code) {
  return code == finding_code::kEndpointAppeared || code == finding_code::kEndpointVanished;
}

Result<Entry> entry_from_json(const Json& v, std::string_view where) {
  if (!v.is_object()) return json::wrong_type(where, "an object", v);
  Entry e;
  const Json* code = json::member(v, "code");
  if (!code) return json::missing_key(where, "code");
  auto c = json::as_string(*code, child(where, "code"));
  if (!c) return std::move(c).error();
  e.code = std::move(*c);
  const Json* sev = json::member(v, "severity");
  if (!sev) return json::missing_key(where, "severity");
  auto s = json::as_string(*sev, child(where, "severity"));
  if (!s) return std::move(s).error();
  auto level = severity_from_string(*s);
  if (!level)
    return make_error(Errc::bad_value, child(where, "severity") + ": \"" + *s +
                                           "\" is not a severity (info, warning, error)");
  e.severity = *level;
  auto msg = json::optional_string_member(v, "message", where);
  if (!msg) return std::move(msg).error();
  e.message = msg->value_or("");
  auto ep = json::optional_string_member(v, "endpoint", where);
  if (!ep) return std::move(ep).error();
  e.endpoint = ep->value_or("");
  if (const Json* p = json::present(v, "packages")) {
    auto l = json::string_list(*p, child(where, "packages"));
    if (!l) return std::move(l).error();
    e.packages = std::move(*l);
  }
  return e;
}

Result<std::string> required_string(const Json& obj, std::string_view key, std::string_view where) {
  const Json* m = json::member(obj, key);
  if (!m) return json::missing_key(where, key);
  return json::as_string(*m, child(where, key));
}

Result<std::optional<std::size_t>> optional_index(const Json& obj, std::string_view key, std::string_view where) {
  const Json* m = json::present(obj, key);
  if (!m) return std::optional<std::size_t>{};
  auto i = json::as_uint64(*m, child(where, key));
  if (!i) return std::move(i).error();
  return std::optional<std::size_t>(static_cast<std::size_t>(*i));
}

bool sides_match(const std::vector<std::string>& now, bool now_local, const Side& then,
                 const std::unordered_set<std::string>& then_members) {
  if (now_local || then.local) return now_local && then.local;
  for (const auto& n : now)
    if (then_members.count(n)) return true;
  return false;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::string sha256_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr) != 1) len = 0;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace

std::string_view to_string(State s) { return s == State::new_ ? "new" : "unchanged"; }

Result<Baseline> parse_baseline(std::string_view text) {
  auto parsed = json::parse(text);
  if (!parsed) return std::move(parsed).error();
  const Json& doc = *parsed;
  if (!doc.is_object())
    return make_error(Errc::bad_magic,
                      "not a baseline: the JSON document is " + json::describe_type(doc) + ", not an object");
  const Json* schema = json::member(doc, "schema");
  if (!schema || !schema->is_string())
    return make_error(Errc::bad_magic, "not a baseline: no \"schema\" string (expected \"" +
                                           std::string(kCheckSchema) + "\", what check --json prints)");
  const std::string s = schema->get<std::string>();
  if (s.rfind("dask-caps.check/", 0) != 0 && s.rfind("dask-caps.baseline/", 0) != 0)
    return make_error(Errc::bad_magic, "not a baseline: schema is \"" + s + "\", expected \"" +
                                           std::string(kCheckSchema) + "\" (what check --json prints)");
  if (s != kCheckSchema && s != kBaselineSchema)
    return make_error(Errc::unsupported_version,
                      "baseline schema \"" + s + "\" is not supported (this build reads \"" +
                          std::string(kCheckSchema) + "\" and \"" + std::string(kBaselineSchema) + "\")");

  Baseline b;
  const Json* endpoints = json::member(doc, "endpoints");
  if (!endpoints) return json::missing_key("", "endpoints");
  if (!endpoints->is_array()) return json::wrong_type("/endpoints", "an array", *endpoints);
  for (std::size_t i = 0; i < endpoints->size(); ++i) {
    const std::string at = child("/endpoints", i);
    const Json& e = (*endpoints)[i];
    if (!e.is_object()) return json::wrong_type(at, "an object", e);
    auto address = required_string(e, "address", at);
    if (!address) return std::move(address).error();
    auto by = json::optional_string_member(e, "discovered-by", at);
    if (!by) return std::move(by).error();
    if (*by)
      b.workers[**by].push_back(std::move(*address));
    else
      b.endpoints.push_back(std::move(*address));
  }

  std::string local_name;
  if (const Json* local = json::present(doc, "local")) {
    if (!local->is_object()) return json::wrong_type("/local", "an object or null", *local);
    auto name = required_string(*local, "name", "/local");
    if (!name) return std::move(name).error();
    local_name = std::move(*name);
  }

  // Group members by id, for group sides.
  std::map<std::size_t, std::vector<std::string>> groups;
  const Json* summary = json::present(doc, "summary");
  if (summary && !summary->is_object()) return json::wrong_type("/summary", "an object", *summary);
  if (summary) {
    if (const Json* gs = json::present(*summary, "groups")) {
      if (!gs->is_array()) return json::wrong_type("/summary/groups", "an array", *gs);
      for (std::size_t i = 0; i < gs->size(); ++i) {
        const std::string at = child("/summary/groups", i);
        const Json& g = (*gs)[i];
        if (!g.is_object()) return json::wrong_type(at, "an object", g);
        auto id = optional_index(g, "id", at);
        if (!id) return std::move(id).error();
        const Json* members = json::member(g, "members");
        if (!members) return json::missing_key(at, "members");
        auto m = json::string_list(*members, child(at, "members"));
        if (!m) return std::move(m).error();
        groups[id->value_or(i)] = std::move(*m);
      }
    }
  }

  const Json* pairs = json::member(doc, "pairs");
  if (!pairs) return json::missing_key("", "pairs");
  if (!pairs->is_array()) return json::wrong_type("/pairs", "an array", *pairs);
  for (std::size_t i = 0; i < pairs->size(); ++i) {
    const std::string at = child("/pairs", i);
    const Json& p = (*pairs)[i];
    if (!p.is_object()) return json::wrong_type(at, "an object", p);
    Side sides[2];
    for (int k = 0; k < 2; ++k) {
      const char* key = k == 0 ? "a" : "b";
      auto name = required_string(p, key, at);
      if (!name) return std::move(name).error();
      auto group = optional_index(p, k == 0 ? "a-group" : "b-group", at);
      if (!group) return std::move(group).error();
      Side& side = sides[k];
      side.name = std::move(*name);
      side.local = !local_name.empty() && side.name == local_name;
      if (*group) {
        auto g = groups.find(**group);
        if (g == groups.end())
          return make_error(Errc::bad_value, child(at, k == 0 ? "a-group" : "b-group") + ": group " +
                                                 std::to_string(**group) + " is not in /summary/groups");
        side.members = g->second;
      }
      if (std::find(side.members.begin(), side.members.end(), side.name) == side.members.end())
        side.members.push_back(side.name);
    }
    const Json* findings = json::member(p, "findings");
    if (!findings) return json::missing_key(at, "findings");
    if (!findings->is_array()) return json::wrong_type(child(at, "findings"), "an array", *findings);
    for (std::size_t j = 0; j < findings->size(); ++j) {
      auto e = entry_from_json((*findings)[j], child(child(at, "findings"), j));
      if (!e) return std::move(e).error();
      if (is_comparison(e->code)) continue;
      e->in_pair = true;
      e->a = sides[0];
      e->b = sides[1];
      b.findings.push_back(std::move(*e));
    }
  }
  if (summary) {
    if (const Json* cf = json::present(*summary, "cluster-findings")) {
      if (!cf->is_array()) return json::wrong_type("/summary/cluster-findings", "an array", *cf);
      for (std::size_t j = 0; j < cf->size(); ++j) {
        auto e = entry_from_json((*cf)[j], child("/summary/cluster-findings", j));
        if (!e) return std::move(e).error();
        if (is_comparison(e->code)) continue;
        e->in_pair = false;
        b.findings.push_back(std::move(*e));
      }
    }
  }
  return b;
}

Result<Baseline> read_baseline_file(const std::string& path) {
  auto text = json::read_text(path, kMaxBaselineFileBytes, "a baseline");
  if (!text) return std::move(text).error();
  auto b = parse_baseline(*text);
  if (!b) return std::move(b.error().add_context(path));
  b->path = path;
  return b;
}

void add_endpoint_changes(report::Report& rep, const Baseline& base) {
  const std::set<std::string> then(base.endpoints.begin(), base.endpoints.end());
  std::set<std::string> now;
  std::map<std::string, std::set<std::string>> workers_now;
  for (const auto& e : rep.endpoints) {
    if (e.given)
      now.insert(e.address);
    else
      workers_now[e.discovered_by].insert(e.address);
  }
  const std::string file = base.path.empty() ? "the baseline" : "the baseline " + base.path;
  auto& out = rep.summary.findings;

  for (const auto& e : rep.endpoints) {
    if (!e.given || then.count(e.address)) continue;
    Finding f;
    f.severity = Severity::info;
    f.code = finding_code::kEndpointAppeared;
    f.endpoint = e.address;
    f.message = e.address + " is not in " + file + ": every finding about it is new";
    f.hint = "review its findings; when they are accepted, make this check's --json output the new baseline";
    out.push_back(std::move(f));
  }
  for (const auto& address : base.endpoints) {
    if (now.count(address)) continue;
    Finding f;
    f.severity = Severity::warning;
    f.code = finding_code::kEndpointVanished;
    f.endpoint = address;
    f.message = address + " is in " + file + " but this check did not look at it: its findings are not checked";
    f.hint = "name it on the command line again, or, when it is gone for good, make this check's --json output "
             "the new baseline";
    out.push_back(std::move(f));
  }

  // Workers, per scheduler that both runs looked at.
  const auto listing = [](const std::vector<std::string>& names) {
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < 3; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > 3) s += ", ...";
    return s;
  };
  std::set<std::string> schedulers;
  for (const auto& [sched, ws] : base.workers) schedulers.insert(sched);
  for (const auto& [sched, ws] : workers_now) schedulers.insert(sched);
  for (const auto& sched : schedulers) {
    if (!now.count(sched) || !then.count(sched)) continue;  // the scheduler's own finding says it
    const auto b = base.workers.find(sched);
    const std::set<std::string> before =
        b == base.workers.end() ? std::set<std::string>{} : std::set<std::string>(b->second.begin(), b->second.end());
    const auto w = workers_now.find(sched);
    const std::set<std::string> after = w == workers_now.end() ? std::set<std::string>{} : w->second;
    std::vector<std::string> added, gone;
    std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
    std::set_difference(before.begin(), before.end(), after.begin(), after.end(), std::back_inserter(gone));
    if (!added.empty()) {
      Finding f;
      f.severity = Severity::info;
      f.code = finding_code::kEndpointAppeared;
      f.endpoint = sched;
      f.message = std::to_string(added.size()) + (added.size() == 1 ? " worker" : " workers") + " of " + sched +
                  " not in " + file + ": " + listing(added);
      f.hint = "clusters grow; their findings are judged like any other";
      out.push_back(std::move(f));
    }
    if (!gone.empty()) {
      Finding f;
      f.severity = Severity::info;
      f.code = finding_code::kEndpointVanished;
      f.endpoint = sched;
      f.message = std::to_string(gone.size()) + (gone.size() == 1 ? " worker" : " workers") + " of " + sched +
                  " in " + file + " are no longer listed by it: " + listing(gone);
      f.hint = "clusters shrink; if they should be there, look at why they left the scheduler";
      out.push_back(std::move(f));
    }
  }
}

Diff compare(const report::Report& rep, const Baseline& base) {
  Diff d;
  d.pairs.resize(rep.pairs.size());
  for (std::size_t p = 0; p < rep.pairs.size(); ++p)
    d.pairs[p].assign(rep.pairs[p].report.findings.size(), State::new_);
  d.summary.assign(rep.summary.findings.size(), State::new_);

  std::vector<std::unordered_set<std::string>> a_members, b_members;
  for (const auto& e : base.findings) {
    a_members.emplace_back(e.a.members.begin(), e.a.members.end());
    b_members.emplace_back(e.b.members.begin(), e.b.members.end());
  }
  std::vector<bool> used(base.findings.size(), false);

  struct Now {
    std::vector<std::string> a, b;
    bool a_local = false, b_local = false;
  };
  std::vector<Now> sides(rep.pairs.size());
  for (std::size_t p = 0; p < rep.pairs.size(); ++p) {
    const auto& pair = rep.pairs[p];
    sides[p] = Now{report::side_members(rep, pair.a), report::side_members(rep, pair.b),
                   pair.a == report::kLocal, pair.b == report::kLocal};
  }

  const auto pair_matches = [&](std::size_t p, const Finding& f, std::size_t k, bool same_packages) {
    const Entry& e = base.findings[k];
    if (!e.in_pair || e.code != f.code) return false;
    if (same_packages && sorted(e.packages) != sorted(f.packages)) return false;
    const Now& s = sides[p];
    return (sides_match(s.a, s.a_local, e.a, a_members[k]) && sides_match(s.b, s.b_local, e.b, b_members[k])) ||
           (sides_match(s.a, s.a_local, e.b, b_members[k]) && sides_match(s.b, s.b_local, e.a, a_members[k]));
  };
  const auto summary_matches = [&](const Finding& f, std::size_t k, bool same_packages) {
    const Entry& e = base.findings[k];
    if (e.in_pair || e.code != f.code || e.endpoint != f.endpoint) return false;
    return !same_packages || sorted(e.packages) == sorted(f.packages);
  };

  for (bool same_packages : {true, false}) {
    for (std::size_t p = 0; p < rep.pairs.size(); ++p) {
      const auto& fs = rep.pairs[p].report.findings;
      for (std::size_t i = 0; i < fs.size(); ++i) {
        if (d.pairs[p][i] == State::unchanged) continue;
        for (std::size_t k = 0; k < base.findings.size(); ++k) {
          if (used[k] || !pair_matches(p, fs[i], k, same_packages)) continue;
          used[k] = true;
          d.pairs[p][i] = State::unchanged;
          break;
        }
      }
    }
    const auto& sf = rep.summary.findings;
    for (std::size_t i = 0; i < sf.size(); ++i) {
      if (d.summary[i] == State::unchanged) continue;
      for (std::size_t k = 0; k < base.findings.size(); ++k) {
        if (used[k] || !summary_matches(sf[i], k, same_packages)) continue;
        used[k] = true;
        d.summary[i] = State::unchanged;
        break;
      }
    }
  }

  const auto tally = [&](const Finding& f, State s) {
    if (s == State::unchanged) {
      ++d.unchanged;
      return;
    }
    switch (f.severity) {
      case Severity::info: ++d.new_info; break;
      case Severity::warning: ++d.new_warnings; break;
      case Severity::error: ++d.new_errors; break;
    }
    if (!d.worst_new || f.severity > *d.worst_new) d.worst_new = f.severity;
  };
  for (std::size_t p = 0; p < rep.pairs.size(); ++p)
    for (std::size_t i = 0; i < rep.pairs[p].report.findings.size(); ++i)
      tally(rep.pairs[p].report.findings[i], d.pairs[p][i]);
  for (std::size_t i = 0; i < rep.summary.findings.size(); ++i) tally(rep.summary.findings[i], d.summary[i]);

  for (std::size_t k = 0; k < base.findings.size(); ++k)
    if (!used[k]) d.vanished.push_back(base.findings[k]);
  return d;
}

Fingerprints fingerprints(const report::Report& rep) {
  const auto side_key = [&](std::size_t index) -> std::string {
    if (index == report::kLocal) return "this host";
    const auto& e = rep.endpoints[index];
    if (e.group && e.peer) return "workers of " + e.discovered_by + " like " + sha256_hex(capability_signature(*e.peer));
    return e.address;
  };
  const auto key_of = [](const Finding& f, std::vector<std::string> sides) {
    std::sort(sides.begin(), sides.end());
    std::string k = f.code;
    for (const auto& s : sides) k += '\x1f' + s;
    k += '\x1e';
    for (const auto& p : sorted(f.packages)) k += '\x1f' + p;
    return k;
  };
  std::map<std::string, std::size_t> seen;
  const auto finish = [&](const std::string& key) {
    const std::size_t n = seen[key]++;
    return sha256_hex(key + '\x1d' + std::to_string(n));
  };

  Fingerprints out;
  out.pairs.resize(rep.pairs.size());
  for (std::size_t p = 0; p < rep.pairs.size(); ++p) {
    const auto& pair = rep.pairs[p];
    for (const auto& f : pair.report.findings)
      out.pairs[p].push_back(finish(key_of(f, {side_key(pair.a), side_key(pair.b)})));
  }
  for (const auto& f : rep.summary.findings) out.summary.push_back(finish(key_of(f, {"endpoint " + f.endpoint})));
  return out;
}

}  // namespace daskcaps::baseline
