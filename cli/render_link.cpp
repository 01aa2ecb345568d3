#include "cli/render_link.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "daskcaps/caps/link_choice.h"

namespace daskcaps::cli {

namespace {

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

link::LinkView view(const report::EndpointInfo& e) {
  std::vector<Codec> receiver;
  if (e.peer) {
    for (const auto& name : e.peer->codecs)
      if (auto c = codec_from_name(name); c && *c != Codec::none) receiver.push_back(*c);
  }
  // Dask's same-host rule: a peer reached at our own address.
  const bool same_host = !e.peer_ip.empty() && e.peer_ip == e.local_ip;
  return link::view_link(*e.link, std::move(receiver), same_host);
}

}  // namespace

std::optional<Json> link_json(const report::EndpointInfo& e) {
  if (!e.link) return std::nullopt;
  const link::LinkView v = view(e);
  Json j = Json::object();
  j["rtt-ms"] = round3(e.link->rtt_s * 1e3);
  j["min-rtt-ms"] = round3(e.link->min_rtt_s * 1e3);
  j["delivery-rate"] = v.rate ? Json(std::round(*v.rate)) : Json(nullptr);
  j["rate-source"] = v.rate_source;
  j["codec"] = v.codec ? Json(link::choice_name(*v.codec)) : Json(nullptr);
  return j;
}

std::string link_text(const report::EndpointInfo& e) {
  if (!e.link) return "";
  const link::LinkView v = view(e);
  char buf[160];
  std::snprintf(buf, sizeof buf, "  link: rtt %.3f ms (min %.3f ms), ", e.link->rtt_s * 1e3, e.link->min_rtt_s * 1e3);
  std::string out = buf;
  if (v.rate) {
    std::snprintf(buf, sizeof buf, "delivery rate %.3g MB/s", *v.rate / 1e6);
    out += buf;
  } else {
    std::snprintf(buf, sizeof buf, "no delivery rate (the connection was busy sending for under %g s)",
                  link::ChooserOptions{}.span_seconds);
    out += buf;
  }
  out += "; codec for large compressible frames: ";
  out += v.codec ? link::choice_name(*v.codec) : std::string("unknown (Dask's choice stays)");
  return out + '\n';
}

}  // namespace daskcaps::cli
