#include "daskcaps/caps/negotiate.h"

#include <utility>

#include "core/caps/internal/json_read.h"
#include "core/recode/internal/json_text.h"
#include "daskcaps/caps/probe.h"
#include "core/caps/internal/probe_json.h"

namespace daskcaps {

namespace {

OrderedJson direction_json(const DirectionPlan& plan, std::int64_t pickle_protocol) {
  OrderedJson j = OrderedJson::object();
  j["compression"] = plan.codec ? OrderedJson(*plan.codec) : OrderedJson(nullptr);
  j["pickle-protocol"] = pickle_protocol;
  j["layout"] = plan.layout;
  return j;
}

/// One side as a Peer; `where` prefixes the JSON pointers of errors.
Result<Peer> peer_from_document(const NegotiateSide& side, std::string default_role, std::string_view where) {
  auto parsed = json::parse(side.document);
  if (!parsed) return std::move(parsed).error().add_context(json::shown(where));
  const OrderedJson& doc = *parsed;
  if (!doc.is_object()) return json::wrong_type(where, "a probe document or a handshake dict (an object)", doc);
  Peer peer;
  if (json::member(doc, "schema") != nullptr) {
    auto probe = probe_from_json(doc);
    if (!probe) return std::move(probe).error().add_context(json::shown(where));
    peer = peer_from_probe(*probe, side.name, side.role.value_or(default_role.empty() ? "file" : default_role));
  } else {
    auto handshake = handshake_from_json(doc, where);
    if (!handshake) return std::move(handshake).error();
    peer = peer_from_live(side.name, side.role.value_or(default_role), "", *handshake, nullptr, nullptr);
    if (const OrderedJson* c = json::present(doc, "capabilities")) {
      auto caps = capabilities_from_json(*c, json::child(where, "capabilities"), Capabilities{});
      if (!caps) return std::move(caps).error();
      peer.codecs = std::move(caps->codecs);
      peer.codecs_unknown.clear();
      peer.max_pickle_protocol = caps->max_pickle_protocol;
      peer.gpu = caps->gpu;
      peer.published = true;
    }
  }
  if (side.capabilities) {
    const std::string at = std::string(where) + "-capabilities";
    auto given = json::parse(*side.capabilities);
    if (!given) return std::move(given).error().add_context(json::shown(at));
    Capabilities current{peer.codecs, peer.max_pickle_protocol, peer.gpu.value_or(false)};
    const bool gpu_given = given->is_object() && json::present(*given, "gpu") != nullptr;
    auto caps = capabilities_from_json(*given, at, std::move(current));
    if (!caps) return std::move(caps).error();
    peer.codecs = std::move(caps->codecs);
    peer.codecs_unknown.clear();
    peer.max_pickle_protocol = caps->max_pickle_protocol;
    if (gpu_given || peer.gpu) peer.gpu = caps->gpu;
    peer.published = true;
  }
  return peer;
}

}  // namespace

Result<std::string> negotiate(const NegotiateSide& local, const NegotiateSide& remote,
                              const NegotiateOptions& options) {
  auto a = peer_from_document(local, "client", "/local");
  if (!a) return std::move(a).error();
  auto b = peer_from_document(remote, "", "/remote");
  if (!b) return std::move(b).error();
  const bool same_host = options.same_host.value_or(!a->host.empty() && a->host == b->host);
  const PairReport report = evaluate_pair(*a, *b, same_host, options.python_rule);
  auto pair = json::parse(pair_json(a->name, b->name, report));
  if (!pair) return std::move(pair).error();  // never: pair_json writes JSON
  OrderedJson& j = *pair;
  j["local-to-remote"] = direction_json(report.recommended.a_to_b, report.recommended.pickle_protocol);
  j["remote-to-local"] = direction_json(report.recommended.b_to_a, report.recommended.pickle_protocol);
  return json_text(j);
}

}  // namespace daskcaps
