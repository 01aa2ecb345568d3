#include "core/caps/internal/gate_steps.h"

#include <fnmatch.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "core/caps/internal/json_read.h"
#include "core/recode/internal/json_text.h"

namespace daskcaps::policy {

namespace {

using json::child;
using json::Json;

constexpr std::string_view kProfileNames[] = {"default", "strict", "relaxed"};

// The profiles are policy documents, read by the same parser as files.
constexpr std::string_view kDefaultProfile = R"({
  "schema": "dask-caps.policy/1",
  "description": "the built-in severities; Python versions may differ in the patch release",
  "python-version": "same-minor"
})";

constexpr std::string_view kStrictProfile = R"({
  "schema": "dask-caps.policy/1",
  "description": "any difference that costs speed or coverage fails: Python versions must be equal",
  "python-version": "exact",
  "severity": {
    "compression-mismatch": "error",
    "codec-unavailable": "error",
    "gpu-to-cpu": "error",
    "unreachable": "error",
    "endpoint-vanished": "error"
  }
})";

constexpr std::string_view kRelaxedProfile = R"({
  "schema": "dask-caps.policy/1",
  "description": "only what breaks work counts: Python versions may differ in the minor version",
  "python-version": "same-major",
  "severity": {
    "compression-mismatch": "info",
    "unreachable": "info",
    "endpoint-vanished": "info"
  }
})";

std::string_view profile_text(std::string_view name) {
  if (name == "default") return kDefaultProfile;
  if (name == "strict") return kStrictProfile;
  if (name == "relaxed") return kRelaxedProfile;
  return {};
}

std::string known_codes() {
  std::string s;
  for (const auto& row : finding_codes()) s += (s.empty() ? "" : ", ") + std::string(row.code);
  return s;
}

Result<std::string> nonempty_string(const Json& v, std::string_view where) {
  auto s = json::as_string(v, where);
  if (!s) return std::move(s).error();
  if (s->empty()) return make_error(Errc::bad_value, json::shown(where) + ": must not be empty");
  return s;
}

Result<Ignore> ignore_from_json(const Json& v, std::string_view where) {
  if (!v.is_object()) return json::wrong_type(where, "an object", v);
  if (auto st = json::only_keys(v, where, {"code", "endpoint", "package", "reason"}); !st)
    return std::move(st).error();
  Ignore ig;
  const Json* code = json::member(v, "code");
  if (!code) return json::missing_key(where, "code");
  auto c = json::as_string(*code, child(where, "code"));
  if (!c) return std::move(c).error();
  if (*c != "*" && !find_finding_code(*c))
    return make_error(Errc::bad_value, child(where, "code") + ": unknown finding code \"" + *c +
                                           "\" (known: " + known_codes() + ", or \"*\")");
  ig.code = std::move(*c);
  const Json* reason = json::member(v, "reason");
  if (!reason) return json::missing_key(where, "reason");
  auto r = nonempty_string(*reason, child(where, "reason"));
  if (!r) return std::move(r).error();
  ig.reason = std::move(*r);
  for (auto [key, field] : {std::pair<const char*, std::string*>{"endpoint", &ig.endpoint},
                            {"package", &ig.package}}) {
    if (const Json* m = json::member(v, key)) {
      auto s = nonempty_string(*m, child(where, key));
      if (!s) return std::move(s).error();
      *field = std::move(*s);
    }
  }
  return ig;
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool glob_match(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

// The reasons of the ignore entries that take out `f` (about `names`),
// joined; empty when none does.
std::string ignore_reason(const Policy& policy, const Finding& f, const std::vector<std::string>& names) {
  const auto endpoint_ok = [&](const Ignore& ig) {
    if (ig.endpoint.empty()) return true;
    return std::any_of(names.begin(), names.end(), [&](const std::string& n) { return glob_match(ig.endpoint, n); });
  };
  std::vector<const Ignore*> applicable;
  for (const auto& ig : policy.ignores)
    if ((ig.code == "*" || ig.code == f.code) && endpoint_ok(ig)) applicable.push_back(&ig);

  std::string reason;
  const auto add = [&](const std::string& r) {
    if (reason.find(r) == std::string::npos) reason += (reason.empty() ? "" : "; ") + r;
  };
  for (const Ignore* ig : applicable)
    if (ig->package.empty()) {
      add(ig->reason);
      return reason;
    }
  // Package entries: every package the finding names must be covered.
  if (f.packages.empty()) return {};
  for (const auto& pkg : f.packages) {
    auto it = std::find_if(applicable.begin(), applicable.end(), [&](const Ignore* ig) { return ig->package == pkg; });
    if (it == applicable.end()) return {};
    add((*it)->reason);
  }
  return reason;
}

// Judges one list of findings: severities set, ignored ones moved out.
void judge(const Policy& policy, std::vector<Finding>& findings, const std::vector<std::string>& names,
           const std::string& a, const std::string& b, std::vector<IgnoredFinding>& ignored) {
  std::vector<Finding> kept;
  kept.reserve(findings.size());
  for (auto& f : findings) {
    std::string reason;
    if (auto it = policy.severity.find(f.code); it != policy.severity.end()) {
      if (it->second)
        f.severity = *it->second;
      else
        reason = "policy " + policy.name + " sets " + f.code + " to ignore";
    }
    if (reason.empty()) reason = ignore_reason(policy, f, names);
    if (reason.empty()) {
      kept.push_back(std::move(f));
      continue;
    }
    ignored.push_back(IgnoredFinding{a, b, std::move(f), std::move(reason)});
  }
  findings = std::move(kept);
}

}  // namespace

std::span<const std::string_view> profile_names() { return kProfileNames; }

std::optional<Policy> profile(std::string_view name) {
  const std::string_view text = profile_text(name);
  if (text.empty()) return std::nullopt;
  auto p = parse_policy(text);
  if (!p) return std::nullopt;  // the profiles above are valid: the unit tests read each
  p->name = std::string(name);
  return std::move(*p);
}

Result<Policy> parse_policy(std::string_view text) {
  auto parsed = json::parse(text);
  if (!parsed) return std::move(parsed).error();
  const Json& doc = *parsed;
  if (!doc.is_object())
    return make_error(Errc::bad_magic,
                      "not a policy file: the JSON document is " + json::describe_type(doc) + ", not an object");
  const Json* schema = json::member(doc, "schema");
  if (!schema)
    return make_error(Errc::bad_magic,
                      "not a policy file: no \"schema\" key (expected \"" + std::string(kPolicySchema) + "\")");
  if (!schema->is_string())
    return make_error(Errc::bad_magic, "not a policy file: \"schema\" is " + json::describe_type(*schema));
  const std::string s = schema->get<std::string>();
  if (s.rfind("dask-caps.policy/", 0) != 0)
    return make_error(Errc::bad_magic,
                      "not a policy file: schema is \"" + s + "\", expected \"" + std::string(kPolicySchema) + "\"");
  if (s != kPolicySchema)
    return make_error(Errc::unsupported_version, "policy file schema \"" + s +
                                                     "\" is not supported (this build reads \"" +
                                                     std::string(kPolicySchema) + "\")");
  if (auto st = json::only_keys(doc, "", {"schema", "name", "description", "extends", "python-version", "severity",
                                          "ignore"});
      !st)
    return std::move(st).error();

  Policy p;
  if (const Json* m = json::member(doc, "extends")) {
    auto e = json::as_string(*m, "/extends");
    if (!e) return std::move(e).error();
    if (profile_text(*e).empty())
      return make_error(Errc::bad_value, "/extends: \"" + *e + "\" is not a profile (default, strict, relaxed)");
    auto base = parse_policy(profile_text(*e));
    if (!base) return std::move(base).error();
    p = std::move(*base);
  }
  if (const Json* m = json::member(doc, "description")) {
    auto d = json::as_string(*m, "/description");
    if (!d) return std::move(d).error();
    p.description = std::move(*d);
  }
  if (const Json* m = json::member(doc, "name")) {
    // Written by policy_to_json; a name read back is only informative.
    if (!m->is_string()) return json::wrong_type("/name", "a string", *m);
  }
  if (const Json* m = json::member(doc, "python-version")) {
    auto r = json::as_string(*m, "/python-version");
    if (!r) return std::move(r).error();
    auto rule = python_rule_from_string(*r);
    if (!rule)
      return make_error(Errc::bad_value,
                        "/python-version: \"" + *r + "\" is not a rule (exact, same-minor, same-major)");
    p.python_rule = *rule;
  }
  if (const Json* m = json::member(doc, "severity")) {
    if (!m->is_object()) return json::wrong_type("/severity", "an object", *m);
    for (const auto& [code, value] : m->items()) {
      const std::string at = child("/severity", code);
      if (!find_finding_code(code))
        return make_error(Errc::bad_value, at + ": unknown finding code (known: " + known_codes() + ")");
      auto v = json::as_string(value, at);
      if (!v) return std::move(v).error();
      if (*v == "ignore") {
        p.severity[code] = std::nullopt;
        continue;
      }
      auto sev = severity_from_string(*v);
      if (!sev)
        return make_error(Errc::bad_value, at + ": \"" + *v + "\" is not a severity (info, warning, error, ignore)");
      p.severity[code] = *sev;
    }
  }
  if (const Json* m = json::member(doc, "ignore")) {
    if (!m->is_array()) return json::wrong_type("/ignore", "an array", *m);
    for (std::size_t i = 0; i < m->size(); ++i) {
      auto ig = ignore_from_json((*m)[i], child("/ignore", i));
      if (!ig) return std::move(ig).error();
      p.ignores.push_back(std::move(*ig));
    }
  }
  return p;
}

Result<Policy> read_policy_file(const std::string& path) {
  auto text = json::read_text(path, kMaxPolicyFileBytes, "a policy file");
  if (!text) return std::move(text).error();
  auto p = parse_policy(*text);
  if (!p) return std::move(p.error().add_context(path));
  p->name = path;
  p->path = path;
  return p;
}

Result<Policy> load_policy(const std::string& name_or_path) {
  if (auto p = profile(name_or_path)) return std::move(*p);
  if (!is_regular_file(name_or_path))
    return std::move(make_error(Errc::not_found, "neither a profile (default, strict, relaxed) nor a policy file")
                         .add_context(name_or_path));
  return read_policy_file(name_or_path);
}

std::string policy_to_json(const Policy& policy) {
  Json doc = Json::object();
  doc["schema"] = kPolicySchema;
  doc["name"] = policy.name;
  if (!policy.description.empty()) doc["description"] = policy.description;
  doc["python-version"] = to_string(policy.python_rule);
  Json sev = Json::object();
  for (const auto& [code, s] : policy.severity) sev[code] = s ? std::string(to_string(*s)) : std::string("ignore");
  doc["severity"] = std::move(sev);
  Json ignores = Json::array();
  for (const auto& ig : policy.ignores) {
    Json j = Json::object();
    j["code"] = ig.code;
    if (!ig.endpoint.empty()) j["endpoint"] = ig.endpoint;
    if (!ig.package.empty()) j["package"] = ig.package;
    j["reason"] = ig.reason;
    ignores.push_back(std::move(j));
  }
  doc["ignore"] = std::move(ignores);
  return json_text(doc);
}

std::vector<IgnoredFinding> apply_policy(report::Report& rep, const Policy& policy) {
  std::vector<IgnoredFinding> ignored;
  for (auto& pair : rep.pairs) {
    std::vector<std::string> names = report::side_members(rep, pair.a);
    for (auto& n : report::side_members(rep, pair.b)) names.push_back(std::move(n));
    judge(policy, pair.report.findings, names, report::side_name(rep, pair.a), report::side_name(rep, pair.b),
          ignored);
  }
  // Summary findings are each about their own endpoint.
  std::vector<Finding> kept;
  for (auto& f : rep.summary.findings) {
    std::vector<Finding> one;
    one.push_back(std::move(f));
    const std::vector<std::string> names{one.front().endpoint};
    judge(policy, one, names, "", "", ignored);
    for (auto& k : one) kept.push_back(std::move(k));
  }
  rep.summary.findings = std::move(kept);
  report::count_findings(rep);
  return ignored;
}

}  // namespace daskcaps::policy
