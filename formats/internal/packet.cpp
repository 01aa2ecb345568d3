#include "formats/internal/packet.h"

#include <arpa/inet.h>

#include <cstdio>

#include "core/base/internal/byte_reader.h"

namespace daskcaps::formats::pcap {

std::string IpAddress::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  if (!v6) {
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", bytes[0], bytes[1], bytes[2], bytes[3]);
    return buf;
  }
  if (::inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf) == nullptr) return "[?]";
  return std::string("[") + buf + "]";
}

std::string_view to_string(PacketKind kind) {
  switch (kind) {
    case PacketKind::tcp: return "tcp";
    case PacketKind::other: return "other";
    case PacketKind::ip_fragment: return "ip_fragment";
    case PacketKind::unsupported_link: return "unsupported_link";
    case PacketKind::truncated: return "truncated";
    case PacketKind::malformed: return "malformed";
  }
  return "other";
}

namespace {

constexpr std::uint16_t kEtherIpv4 = 0x0800;
constexpr std::uint16_t kEtherIpv6 = 0x86dd;
constexpr std::uint8_t kProtoTcp = 6;
constexpr int kMaxVlanTags = 4;
constexpr int kMaxIpv6ExtensionHeaders = 32;

enum class Net { ipv4, ipv6, other };

struct Decoder {
  ByteSpan data;
  bool cut;  // the capture holds fewer bytes than the wire had
  std::uint32_t original_length;
  DecodedPacket out;

  DecodedPacket short_header(std::string_view header) {
    out.kind = cut ? PacketKind::truncated : PacketKind::malformed;
    out.why = std::string(cut ? "cut by the snapshot length inside the " : "packet ends inside the ") +
              std::string(header) + " header";
    return std::move(out);
  }
  DecodedPacket malformed(std::string why) {
    out.kind = PacketKind::malformed;
    out.why = std::move(why);
    return std::move(out);
  }
  DecodedPacket kind(PacketKind k) {
    out.kind = k;
    return std::move(out);
  }

  static Net from_ethertype(std::uint16_t type) {
    if (type == kEtherIpv4) return Net::ipv4;
    if (type == kEtherIpv6) return Net::ipv6;
    return Net::other;
  }
  static Net from_version(ByteSpan ip) {
    if (ip.empty()) return Net::other;
    if ((ip[0] >> 4) == 4) return Net::ipv4;
    if ((ip[0] >> 4) == 6) return Net::ipv6;
    return Net::other;
  }
  static Net from_af(std::uint32_t af) {
    if (af == 2) return Net::ipv4;
    // AF_INET6 differs by system: Linux 10, NetBSD/OpenBSD 24, FreeBSD 28, Darwin 30.
    if (af == 10 || af == 24 || af == 28 || af == 30) return Net::ipv6;
    return Net::other;
  }

  DecodedPacket run(std::uint32_t link_type) {
    ByteReader r(data);
    Net net = Net::other;
    switch (link_type) {
      case link::kEthernet: {
        if (!r.skip(12)) return short_header("Ethernet");
        auto type = r.u16_be();
        if (!type) return short_header("Ethernet");
        for (int tags = 0; *type == 0x8100 || *type == 0x88a8 || *type == 0x9100; ++tags) {
          if (tags == kMaxVlanTags) return kind(PacketKind::other);
          if (!r.skip(2)) return short_header("802.1Q");
          type = r.u16_be();
          if (!type) return short_header("802.1Q");
        }
        net = from_ethertype(*type);
        break;
      }
      case link::kLinuxSll: {
        if (!r.skip(14)) return short_header("Linux cooked");
        auto type = r.u16_be();
        if (!type) return short_header("Linux cooked");
        net = from_ethertype(*type);
        break;
      }
      case link::kLinuxSll2: {
        auto type = r.u16_be();
        if (!type || !r.skip(18)) return short_header("Linux cooked v2");
        net = from_ethertype(*type);
        break;
      }
      case link::kNull:
      case link::kLoop: {
        // NULL holds the family in the capturing host's order, LOOP in
        // network order; accept either and let the IP version confirm it.
        auto le = r.u32_le();
        if (!le) return short_header("loopback");
        const std::uint32_t be = __builtin_bswap32(*le);
        net = from_af(*le) != Net::other ? from_af(*le) : from_af(be);
        if (net != Net::other && from_version(r.rest()) != net && !r.empty())
          return malformed("loopback family says IPv" + std::string(net == Net::ipv4 ? "4" : "6") +
                           ", the IP header disagrees");
        break;
      }
      case link::kRaw:
      case link::kRawBsd12:
      case link::kRawBsd14:
        net = from_version(r.rest());
        if (r.empty()) return short_header("IP");
        break;
      case link::kIpv4:
        net = Net::ipv4;
        break;
      case link::kIpv6:
        net = Net::ipv6;
        break;
      default:
        return kind(PacketKind::unsupported_link);
    }
    const std::size_t link_len = r.position();
    // Bytes of the IP packet on the wire, as far as the record says.
    const std::uint64_t wire_ip = original_length > link_len ? original_length - link_len : 0;
    if (net == Net::ipv4) return ipv4(r.rest(), wire_ip);
    if (net == Net::ipv6) return ipv6(r.rest(), wire_ip);
    return kind(PacketKind::other);
  }

  DecodedPacket ipv4(ByteSpan ip, std::uint64_t wire_ip) {
    ByteReader r(ip);
    auto vihl = r.u8();
    if (!vihl) return short_header("IPv4");
    if ((*vihl >> 4) != 4) return malformed("IPv4 header has version " + std::to_string(*vihl >> 4));
    const std::size_t ihl = std::size_t{*vihl & 0x0fu} * 4;
    if (ihl < 20) return malformed("IPv4 header length " + std::to_string(ihl) + " is below 20");
    (void)r.u8();  // TOS
    auto total = r.u16_be();
    auto ident = r.u16_be();
    auto frag = r.u16_be();
    auto ttl = r.u8();
    auto proto = r.u8();
    auto csum = r.u16_be();
    auto src = r.bytes(4);
    auto dst = r.bytes(4);
    if (!total || !ident || !frag || !ttl || !proto || !csum || !src || !dst || !r.skip(ihl - 20))
      return short_header("IPv4");
    if ((*frag & 0x1fffu) != 0) return kind(PacketKind::ip_fragment);
    if (*proto != kProtoTcp) return kind(PacketKind::other);
    out.tcp.first_fragment = (*frag & 0x2000u) != 0;
    std::copy(src->begin(), src->end(), out.tcp.src.bytes.begin());
    std::copy(dst->begin(), dst->end(), out.tcp.dst.bytes.begin());
    // Total length 0 appears on packets captured before TCP segmentation
    // offload split them: the record's length is then all we know.
    std::uint64_t ip_len = *total;
    if (ip_len == 0) ip_len = std::max<std::uint64_t>(wire_ip, ip.size());
    if (ip_len < ihl)
      return malformed("IPv4 total length " + std::to_string(ip_len) + " is below its header length " +
                       std::to_string(ihl));
    return tcp(ip.subspan(ihl, std::min<std::size_t>(ip.size(), ip_len) - ihl), ip_len - ihl);
  }

  DecodedPacket ipv6(ByteSpan ip, std::uint64_t wire_ip) {
    ByteReader r(ip);
    auto first = r.u32_be();
    auto payload_len = r.u16_be();
    auto next = r.u8();
    auto hops = r.u8();
    auto src = r.bytes(16);
    auto dst = r.bytes(16);
    if (!first || !payload_len || !next || !hops || !src || !dst) return short_header("IPv6");
    if ((*first >> 28) != 6) return malformed("IPv6 header has version " + std::to_string(*first >> 28));
    out.tcp.src.v6 = out.tcp.dst.v6 = true;
    std::copy(src->begin(), src->end(), out.tcp.src.bytes.begin());
    std::copy(dst->begin(), dst->end(), out.tcp.dst.bytes.begin());
    // Payload length 0: a jumbogram or a segmentation-offload capture.
    std::uint64_t remaining = *payload_len;
    if (remaining == 0) remaining = std::max<std::uint64_t>(wire_ip >= 40 ? wire_ip - 40 : 0, r.remaining());
    std::uint8_t header = *next;
    for (int i = 0;; ++i) {
      if (header == kProtoTcp) break;
      if (i == kMaxIpv6ExtensionHeaders) return malformed("more than 32 IPv6 extension headers");
      std::size_t size = 0;
      switch (header) {
        case 0:    // hop-by-hop options
        case 43:   // routing
        case 60:   // destination options
        case 135:  // mobility
        case 139:  // HIP
        case 140: {  // shim6
          auto nh = r.u8();
          auto len = r.u8();
          if (!nh || !len) return short_header("IPv6 extension");
          size = (std::size_t{*len} + 1) * 8;
          if (!r.skip(size - 2)) return short_header("IPv6 extension");
          header = *nh;
          break;
        }
        case 51: {  // authentication header: length in 4-byte units, minus 2
          auto nh = r.u8();
          auto len = r.u8();
          if (!nh || !len) return short_header("IPv6 authentication");
          size = (std::size_t{*len} + 2) * 4;
          if (!r.skip(size - 2)) return short_header("IPv6 authentication");
          header = *nh;
          break;
        }
        case 44: {  // fragment
          auto nh = r.u8();
          auto reserved = r.u8();
          auto off = r.u16_be();
          auto ident = r.u32_be();
          if (!nh || !reserved || !off || !ident) return short_header("IPv6 fragment");
          if ((*off >> 3) != 0) return kind(PacketKind::ip_fragment);
          if ((*off & 1u) != 0) out.tcp.first_fragment = true;
          size = 8;
          header = *nh;
          break;
        }
        default:  // no next header (59), ESP (50), UDP, ICMPv6, ...
          return kind(PacketKind::other);
      }
      if (size > remaining)
        return malformed("IPv6 extension headers run past the payload length " +
                         std::to_string(*payload_len));
      remaining -= size;
    }
    ByteSpan rest = r.rest();
    return tcp(rest.first(std::min<std::uint64_t>(rest.size(), remaining)), remaining);
  }

  // `seg` holds the captured part of the TCP segment, `wire_len` what the
  // IP header says it had.
  DecodedPacket tcp(ByteSpan seg, std::uint64_t wire_len) {
    ByteReader r(seg);
    auto sport = r.u16_be();
    auto dport = r.u16_be();
    auto seq = r.u32_be();
    auto ack = r.u32_be();
    auto off_flags = r.u16_be();
    if (!sport || !dport || !seq || !ack || !off_flags || !r.skip(6)) return short_header("TCP");
    const std::size_t header_len = static_cast<std::size_t>(*off_flags >> 12) * 4;
    if (header_len < 20) return malformed("TCP header length " + std::to_string(header_len) + " is below 20");
    if (wire_len < header_len)
      return malformed("TCP header length " + std::to_string(header_len) + " exceeds the IP payload " +
                       std::to_string(wire_len));
    if (!r.skip(header_len - 20)) return short_header("TCP");
    TcpSegment& t = out.tcp;
    t.src_port = *sport;
    t.dst_port = *dport;
    t.seq = *seq;
    t.ack = *ack;
    t.flags = static_cast<std::uint8_t>(*off_flags & 0xffu);
    t.payload = r.rest();
    const std::uint64_t wire_payload = wire_len - header_len;
    t.wire_payload_length = static_cast<std::uint32_t>(std::min<std::uint64_t>(wire_payload, 0xffffffffu));
    if (t.wire_payload_length < t.payload.size()) t.wire_payload_length = static_cast<std::uint32_t>(t.payload.size());
    out.kind = PacketKind::tcp;
    return std::move(out);
  }
};

}  // namespace

DecodedPacket decode_packet(std::uint32_t link_type, ByteSpan data, std::uint32_t original_length) {
  Decoder d{data, original_length > data.size(), original_length, {}};
  return d.run(link_type);
}

}  // namespace daskcaps::formats::pcap
