#include "cli/render_sarif.h"

#include <cctype>
#include <map>

#include "daskcaps/version.h"

namespace daskcaps::cli {

namespace {

std::string_view sarif_level(Severity s) {
  switch (s) {
    case Severity::info: return "note";
    case Severity::warning: return "warning";
    case Severity::error: return "error";
  }
  return "error";
}

// "compression-mismatch" -> "CompressionMismatch" (SARIF rule names are
// identifiers, the id keeps the code).
std::string rule_name(std::string_view code) {
  std::string out;
  bool upper = true;
  for (char c : code) {
    if (c == '-') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

Json text(std::string s) { return Json{{"text", std::move(s)}}; }

}  // namespace

std::string sarif_uri(const std::string& path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = path.starts_with('/') ? "file://" : "";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

Json check_report_sarif(const report::Report& rep, const gate::Gate& gate, const std::string& location) {
  Json rules = Json::array();
  std::map<std::string, std::size_t, std::less<>> rule_index;
  for (const auto& row : finding_codes()) {
    Severity level = row.severity;
    if (gate.policy)
      if (auto it = gate.policy->severity.find(row.code); it != gate.policy->severity.end() && it->second)
        level = *it->second;
    Json r = Json::object();
    r["id"] = row.code;
    r["name"] = rule_name(row.code);
    r["shortDescription"] = text(std::string(row.summary));
    r["fullDescription"] = text(std::string(row.summary) + "; severity: " + std::string(row.severities));
    r["defaultConfiguration"] = Json{{"level", sarif_level(level)}};
    r["help"] = text("see the finding codes in dask-caps(1); each result's message ends with a hint saying "
                     "what to install or which setting to change, where");
    r["properties"] = Json{{"tags", Json::array({"dask", "compatibility"})}};
    rule_index.emplace(std::string(row.code), rules.size());
    rules.push_back(std::move(r));
  }

  const auto fps = baseline::fingerprints(rep);
  const Json location_json = Json::array(
      {Json{{"physicalLocation",
             Json{{"artifactLocation", Json{{"uri", sarif_uri(location)}}}, {"region", Json{{"startLine", 1}}}}}}});
  Json results = Json::array();
  const auto add = [&](const Finding& f, const std::string& fingerprint, std::vector<std::string> endpoints,
                       const std::string& a, const std::string& b, const baseline::State* state) {
    Json r = Json::object();
    r["ruleId"] = f.code;
    if (auto it = rule_index.find(f.code); it != rule_index.end()) r["ruleIndex"] = it->second;
    r["level"] = sarif_level(f.severity);
    r["message"] = text(f.message + "\nhint: " + f.hint);
    r["locations"] = location_json;
    r["partialFingerprints"] = Json{{"daskCapsFinding/v1", fingerprint}};
    if (state) r["baselineState"] = std::string(baseline::to_string(*state));
    Json props = json_value(finding_json(f));
    if (!a.empty()) {
      props["a"] = a;
      props["b"] = b;
    }
    props["endpoints"] = std::move(endpoints);
    r["properties"] = std::move(props);
    results.push_back(std::move(r));
  };
  for (std::size_t p = 0; p < rep.pairs.size(); ++p) {
    const auto& pair = rep.pairs[p];
    const std::string& a = report::side_name(rep, pair.a);
    const std::string& b = report::side_name(rep, pair.b);
    std::vector<std::string> endpoints = report::side_members(rep, pair.a);
    for (auto& n : report::side_members(rep, pair.b)) endpoints.push_back(std::move(n));
    for (std::size_t i = 0; i < pair.report.findings.size(); ++i)
      add(pair.report.findings[i], fps.pairs[p][i], endpoints, a, b, gate.diff ? &gate.diff->pairs[p][i] : nullptr);
  }
  for (std::size_t i = 0; i < rep.summary.findings.size(); ++i) {
    const Finding& f = rep.summary.findings[i];
    add(f, fps.summary[i], {f.endpoint}, "", "", gate.diff ? &gate.diff->summary[i] : nullptr);
  }

  Json driver = Json::object();
  driver["name"] = "dask-caps";
  driver["version"] = DASKCAPS_VERSION_STRING;
  driver["semanticVersion"] = DASKCAPS_VERSION_STRING;
  driver["rules"] = std::move(rules);

  Json run = Json::object();
  run["tool"] = Json{{"driver", std::move(driver)}};
  run["results"] = std::move(results);
  Json props = Json::object();
  if (gate.policy) props["policy"] = gate.policy->name;
  if (gate.policy) props["ignored"] = gate.ignored.size();
  if (gate.baseline && gate.diff) {
    props["baseline"] = gate.baseline->path;
    Json vanished = Json::array();
    for (const auto& e : gate.diff->vanished) {
      Json j = Json::object();
      j["code"] = e.code;
      j["severity"] = to_string(e.severity);
      if (e.in_pair) {
        j["a"] = e.a.name;
        j["b"] = e.b.name;
      } else {
        j["endpoint"] = e.endpoint;
      }
      vanished.push_back(std::move(j));
    }
    props["vanished"] = std::move(vanished);
  }
  if (!props.empty()) run["properties"] = std::move(props);

  Json doc = Json::object();
  doc["$schema"] = "https://json.schemastore.org/sarif-2.1.0.json";
  doc["version"] = "2.1.0";
  doc["runs"] = Json::array({std::move(run)});
  return doc;
}

}  // namespace daskcaps::cli
