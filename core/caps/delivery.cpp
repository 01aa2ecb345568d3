#include "daskcaps/caps/delivery.h"

#include <algorithm>
#include <cctype>

namespace daskcaps {

namespace {

/// The first codec of `order` that `reader` decodes.
std::optional<std::string> first_decoded(const std::vector<std::string>& order, const Peer& reader) {
  for (const auto& c : order)
    if (reader.decodes(c)) return c;
  return std::nullopt;
}

bool is_scheduler(const Peer& p) {
  std::string role = p.role;
  std::transform(role.begin(), role.end(), role.begin(), [](unsigned char c) { return std::tolower(c); });
  return role == "scheduler";
}

}  // namespace

Codec Delivery::written() const {
  if (!codec) return Codec::none;
  return codec_from_name(*codec).value_or(Codec::none);
}

bool Delivery::recodes_frames() const {
  return std::any_of(std::begin(kAllCodecs), std::end(kAllCodecs),
                     [&](Codec c) { return std::find(accept.begin(), accept.end(), c) == accept.end(); });
}

TranscodeOptions Delivery::recode_options(TranscodeOptions base) const {
  if (recodes_frames()) {
    base.codec = written();
    base.accept_codecs = accept;
  }
  if (pickle_protocol < 5) base.pickle_protocol = static_cast<int>(pickle_protocol);
  if (cpu_layout.value_or(false)) base.layout_cpu = true;
  return base;
}

void Delivery::fill_unset(std::optional<Codec>& codec_out, std::optional<int>& pickle_protocol_out,
                          bool& layout_cpu, Given given) const {
  if (!given.codec) codec_out = written();
  if (!given.pickle_protocol) pickle_protocol_out = static_cast<int>(pickle_protocol);
  if (!given.layout && cpu_layout) layout_cpu = *cpu_layout;
}

Result<Delivery> deliver(const Peer& sender, const Peer& receiver, const DeliveryOptions& options) {
  if (options.pickle_protocol && (*options.pickle_protocol < 0 || *options.pickle_protocol > 5))
    return make_error(Errc::usage, "pickle protocol " + std::to_string(*options.pickle_protocol) +
                                       ": the engine writes protocols 0 to 5");
  Delivery d;
  if (options.codec) {
    if (*options.codec != Codec::none) d.codec = std::string(codec_name(*options.codec));
    d.accept = {*options.codec};
  } else {
    if (!uncompressed_by_design(sender, receiver, options.same_host))
      d.codec = options.order == DeliveryOptions::Order::sender ? first_decoded(sender.codecs, receiver)
                                                                : first_decoded(receiver.codecs, sender);
    for (Codec c : kAllCodecs)
      if (receiver.decodes(codec_name(c))) d.accept.push_back(c);
  }
  d.pickle_protocol = options.pickle_protocol
                          ? *options.pickle_protocol
                          : std::max<std::int64_t>(0, std::min(sender.max_pickle_protocol, receiver.max_pickle_protocol));
  if (options.cpu_layout)
    d.cpu_layout = options.cpu_layout;
  else if (receiver.gpu && !(options.keep_layout_for_schedulers && is_scheduler(receiver)))
    d.cpu_layout = !*receiver.gpu;
  return d;
}

Peer this_build() {
  Peer p;
  p.name = "dask-caps";
  for (Codec c : kAllCodecs) p.codecs.emplace_back(codec_name(c));
  p.max_pickle_protocol = 5;
  p.published = true;
  return p;
}

bool uncompressed_by_design(const Peer& a, const Peer& b, bool same_host) {
  return same_host && a.handshake && b.handshake &&
         (a.release.uncompressed_to_same_host() || b.release.uncompressed_to_same_host());
}

Recommendation recommend(const Peer& a, const Peer& b, bool same_host) {
  DeliveryOptions options;
  options.same_host = same_host;
  // Without user options deliver() cannot fail.
  const Delivery ab = deliver(a, b, options).value();
  const Delivery ba = deliver(b, a, options).value();
  Recommendation r;
  r.a_to_b.codec = ab.codec;
  r.b_to_a.codec = ba.codec;
  r.a_to_b.layout = ab.cpu_layout.value_or(true) ? "cpu" : "gpu";
  r.b_to_a.layout = ba.cpu_layout.value_or(true) ? "cpu" : "gpu";
  r.pickle_protocol = ab.pickle_protocol;
  return r;
}

}  // namespace daskcaps
