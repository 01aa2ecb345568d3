// The decoding of one captured packet down to its TCP segment: the link
// layers of formats/internal/pcap.h (Ethernet with VLAN tags, Linux cooked v1/v2,
// BSD loopback, raw IP), IPv4 and IPv6 (extension headers, fragments), TCP.
// It never fails: what is not a readable TCP segment comes back as another
// PacketKind, with the reason for a truncated or malformed one.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "daskcaps/base/bytes.h"
#include "formats/internal/pcap.h"

namespace daskcaps::formats::pcap {


struct IpAddress {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};  // IPv4 in the first 4

  /// "127.0.0.1", or IPv6 in brackets, RFC 5952 form: "[::1]".
  std::string to_string() const;
  auto operator<=>(const IpAddress&) const = default;
};

namespace tcp_flag {
inline constexpr std::uint8_t kFin = 0x01;
inline constexpr std::uint8_t kSyn = 0x02;
inline constexpr std::uint8_t kRst = 0x04;
inline constexpr std::uint8_t kPsh = 0x08;
inline constexpr std::uint8_t kAck = 0x10;
inline constexpr std::uint8_t kUrg = 0x20;
}  // namespace tcp_flag

/// A TCP segment found in a packet; `payload` points into the packet data.
struct TcpSegment {
  IpAddress src, dst;
  std::uint16_t src_port = 0, dst_port = 0;
  std::uint32_t seq = 0, ack = 0;
  std::uint8_t flags = 0;
  ByteSpan payload;
  /// Payload length the IP header claims: larger than payload.size() when
  /// the capture's snapshot length cut the packet (the rest is lost).
  std::uint32_t wire_payload_length = 0;
  /// An IPv4/IPv6 first fragment: more payload followed in fragments that
  /// are not read.
  bool first_fragment = false;

  bool has(std::uint8_t flag) const { return (flags & flag) != 0; }
};

enum class PacketKind : std::uint8_t {
  tcp,               // `tcp` is valid
  other,             // not IP, or IP but not TCP (ARP, UDP, ICMP, ESP ...)
  ip_fragment,       // a non-first IP fragment: skipped
  unsupported_link,  // a link type decode_packet() does not read
  truncated,         // the capture cut the packet inside a header
  malformed,         // headers that contradict themselves
};

std::string_view to_string(PacketKind kind);

struct DecodedPacket {
  PacketKind kind = PacketKind::other;
  TcpSegment tcp;
  std::string why;  // for truncated/malformed: which header and why
};

/// Decodes the link, IP and TCP headers of one packet. Never fails: what is
/// not a readable TCP segment comes back as another kind. `original_length`
/// is the length on the wire (for telling a snapshot cut from a bad header).
DecodedPacket decode_packet(std::uint32_t link_type, ByteSpan data,
                            std::uint32_t original_length);

}  // namespace daskcaps::formats::pcap
