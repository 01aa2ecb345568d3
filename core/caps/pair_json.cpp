#include "daskcaps/caps/negotiate.h"

#include <optional>
#include <utility>

#include "core/caps/internal/json_read.h"
#include "core/recode/internal/json_text.h"
#include "core/caps/internal/probe_json.h"

namespace daskcaps {

namespace {

OrderedJson codec_json(const std::optional<std::string>& c) { return c ? OrderedJson(*c) : OrderedJson(nullptr); }

OrderedJson finding_value(const Finding& f) {
  OrderedJson j = OrderedJson::object();
  j["severity"] = to_string(f.severity);
  j["code"] = f.code;
  j["message"] = f.message;
  j["hint"] = f.hint;
  if (!f.packages.empty()) j["packages"] = f.packages;
  if (!f.endpoint.empty()) j["endpoint"] = f.endpoint;
  return j;
}

OrderedJson negotiation_value(const DaskNegotiation& d) {
  OrderedJson j = OrderedJson::object();
  if (!d.ok) {
    j["compression"] = nullptr;
    j["pickle-protocol"] = nullptr;
    j["error"] = d.failure;
    return j;
  }
  j["compression"] = compression_to_json(d.compression);
  j["pickle-protocol"] = d.pickle_protocol;
  return j;
}

OrderedJson recommendation_value(const Recommendation& r) {
  OrderedJson rec = OrderedJson::object();
  if (r.a_to_b.codec == r.b_to_a.codec)
    rec["compression"] = codec_json(r.a_to_b.codec);
  else
    rec["compression"] = OrderedJson{{"a-to-b", codec_json(r.a_to_b.codec)}, {"b-to-a", codec_json(r.b_to_a.codec)}};
  rec["pickle-protocol"] = r.pickle_protocol;
  if (r.a_to_b.layout == r.b_to_a.layout)
    rec["layout"] = r.a_to_b.layout;
  else
    rec["layout"] = OrderedJson{{"a-to-b", r.a_to_b.layout}, {"b-to-a", r.b_to_a.layout}};
  return rec;
}

OrderedJson pair_value(const std::string& a, const std::string& b, const PairReport& report) {
  OrderedJson j = OrderedJson::object();
  j["a"] = a;
  j["b"] = b;
  if (report.dask) {
    OrderedJson d = negotiation_value(*report.dask);
    if (report.scheduler_initiated) d["scheduler-initiated"] = negotiation_value(*report.scheduler_initiated);
    j["dask"] = std::move(d);
  } else {
    j["dask"] = nullptr;
  }
  j["recommended"] = recommendation_value(report.recommended);
  OrderedJson findings = OrderedJson::array();
  for (const Finding& f : report.findings) findings.push_back(finding_value(f));
  j["findings"] = std::move(findings);
  return j;
}

}  // namespace

std::string finding_json(const Finding& finding) { return json_text(finding_value(finding)); }
std::string pair_json(const std::string& a, const std::string& b, const PairReport& report) {
  return json_text(pair_value(a, b, report));
}

}  // namespace daskcaps
