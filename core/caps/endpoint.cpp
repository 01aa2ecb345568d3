#include "daskcaps/caps/endpoint.h"

#include <sys/stat.h>

#include "daskcaps/caps/probe.h"
#include "daskcaps/net/rpc.h"

namespace daskcaps {

namespace {
bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
const msgpack::Value* value_of(const std::optional<rpc::Reply>& r) {
  return r && r->ok() ? &r->value : nullptr;
}
}  // namespace

Result<Peer> peer_for_endpoint(const std::string& text, const EndpointOptions& options) {
  if (is_regular_file(text)) {
    auto probe = read_probe_file(text);
    if (!probe) return std::move(probe).error();
    return peer_from_probe(*probe, text, "file");
  }
  auto address = net::parse_address(text);
  if (!address) return std::move(address).error();

  std::shared_ptr<net::TlsClientContext> tls;
  if (address->scheme == net::Scheme::tls) {
    auto ctx = net::TlsClientContext::create(options.tls);
    if (!ctx) return std::move(ctx).error();
    tls = std::move(*ctx);
  }
  rpc::QueryOptions query;
  query.session.ours.compression = CompressionValue::nil();
  query.session.ours.pickle_protocol = 5;
  Capabilities ours;
  for (Codec c : kAllCodecs) ours.codecs.emplace_back(codec_name(c));
  publish_capabilities(query.session.ours, ours);
  query.session.limits = options.limits;
  query.timeout = options.timeout;
  query.tls = tls.get();
  auto result = rpc::query_endpoint(*address, query);
  if (!result) return std::move(result).error().add_context(address->to_string());
  std::string type;
  if (const auto* id = value_of(result->exchange.identity))
    if (const auto* t = id->find("type"); t != nullptr && t->is_str()) type = t->as_str();
  return peer_from_live(address->to_string(), type, result->peer_ip.empty() ? address->host : result->peer_ip,
                        result->exchange.handshake, value_of(result->exchange.versions),
                        value_of(result->exchange.identity), options.limits);
}

}  // namespace daskcaps
