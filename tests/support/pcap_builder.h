// Test helper: builds libpcap and pcapng captures in memory from readable
// lists of TCP segments (docs/design.md §9.1), for every link type the reader
// decodes, IPv4 (with options, fragments) and IPv6 (with extension headers).
//
//   Conversation c;                     // 10.0.0.1:40000 -> 10.0.0.2:8786
//   c.open();                           // SYN, SYN-ACK, ACK
//   c.send(true, dask_handshake());     // client -> server, seq managed
//   c.close();                          // FIN both ways
//   Buffer file = write_pcap(c.segments, Link::ethernet);
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/base/internal/byte_writer.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/msgpack.h"

namespace testsupport::pcapb {

using daskcaps::Buffer;
using daskcaps::ByteSpan;
using daskcaps::ByteWriter;

inline constexpr std::uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;

struct Segment {
  std::string src = "10.0.0.1";
  std::uint16_t sport = 40000;
  std::string dst = "10.0.0.2";
  std::uint16_t dport = 8786;
  std::uint32_t seq = 0, ack = 0;
  std::uint8_t flags = kAck;
  Buffer payload;
  std::uint64_t ts_ns = 1700000000ull * 1000000000ull;
  std::size_t ipv4_options = 0;  // bytes of IPv4 options (multiple of 4, <= 40)
  bool ipv6_extensions = false;  // hop-by-hop, routing and destination options headers
  std::uint16_t frag_offset = 0;  // IPv4/IPv6 fragment offset in 8-byte units
  bool more_fragments = false;
  std::size_t tcp_options = 0;  // bytes of TCP options (multiple of 4, <= 40)
  bool tso_zero_length = false; // IPv4 total length 0, as TSO captures show
  std::optional<std::uint32_t> snap;  // keep only this many bytes of the frame
};

inline bool is_v6(const std::string& a) { return a.find(':') != std::string::npos; }

inline std::vector<std::uint8_t> addr_bytes(const std::string& a) {
  std::vector<std::uint8_t> out(is_v6(a) ? 16 : 4);
  if (::inet_pton(is_v6(a) ? AF_INET6 : AF_INET, a.c_str(), out.data()) != 1)
    throw std::invalid_argument("bad address " + a);
  return out;
}

/// The IP packet (IPv4 or IPv6, by the address form) carrying the segment.
inline Buffer ip_packet(const Segment& s) {
  Buffer tcp;
  ByteWriter t(tcp);
  t.u16_be(s.sport);
  t.u16_be(s.dport);
  t.u32_be(s.seq);
  t.u32_be(s.ack);
  const std::size_t tcp_header = 20 + s.tcp_options;
  t.u16_be(static_cast<std::uint16_t>(((tcp_header / 4) << 12) | s.flags));
  t.u16_be(65535);  // window
  t.u16_be(0);      // checksum (not checked)
  t.u16_be(0);      // urgent
  for (std::size_t i = 0; i < s.tcp_options; ++i) t.u8(1);  // NOP
  t.bytes(s.payload);

  Buffer ip;
  ByteWriter w(ip);
  if (!is_v6(s.src)) {
    const std::size_t ihl = 20 + s.ipv4_options;
    w.u8(static_cast<std::uint8_t>(0x40 | (ihl / 4)));
    w.u8(0);
    w.u16_be(s.tso_zero_length ? 0 : static_cast<std::uint16_t>(ihl + tcp.size()));
    w.u16_be(0x1234);
    w.u16_be(static_cast<std::uint16_t>((s.more_fragments ? 0x2000 : 0x4000 * (s.frag_offset == 0)) |
                                        s.frag_offset));
    w.u8(64);
    w.u8(6);
    w.u16_be(0);
    w.bytes(addr_bytes(s.src));
    w.bytes(addr_bytes(s.dst));
    for (std::size_t i = 0; i < s.ipv4_options; ++i) w.u8(1);  // NOP options
  } else {
    Buffer ext;
    ByteWriter e(ext);
    std::uint8_t first_next = 6;
    if (s.ipv6_extensions) {
      first_next = 0;  // hop-by-hop -> routing -> destination options -> ...
      e.u8(43); e.u8(0); for (int i = 0; i < 6; ++i) e.u8(i == 0 ? 1 : 0);   // HBH, 8 bytes
      e.u8(60); e.u8(1); for (int i = 0; i < 14; ++i) e.u8(0);               // routing, 16 bytes
      e.u8(s.frag_offset || s.more_fragments ? 44 : 6); e.u8(0);
      for (int i = 0; i < 6; ++i) e.u8(i == 0 ? 1 : 0);                       // dest opts, 8 bytes
    }
    if (s.frag_offset != 0 || s.more_fragments) {
      if (!s.ipv6_extensions) first_next = 44;
      e.u8(6);
      e.u8(0);
      e.u16_be(static_cast<std::uint16_t>((s.frag_offset << 3) | (s.more_fragments ? 1 : 0)));
      e.u32_be(0xabcd);
    }
    w.u32_be(0x60000000);
    w.u16_be(static_cast<std::uint16_t>(ext.size() + tcp.size()));
    w.u8(first_next);
    w.u8(64);
    w.bytes(addr_bytes(s.src));
    w.bytes(addr_bytes(s.dst));
    w.bytes(ext);
  }
  w.bytes(tcp);
  return ip;
}

enum class Link {
  ethernet, ethernet_vlan, ethernet_qinq, sll, sll2, null_le, null_be, loop, raw, raw12, raw14,
};

inline std::uint32_t link_type(Link l) {
  switch (l) {
    case Link::ethernet: case Link::ethernet_vlan: case Link::ethernet_qinq: return 1;
    case Link::sll: return 113;
    case Link::sll2: return 276;
    case Link::null_le: case Link::null_be: return 0;
    case Link::loop: return 108;
    case Link::raw: return 101;
    case Link::raw12: return 12;
    case Link::raw14: return 14;
  }
  return 1;
}

inline const char* link_name(Link l) {
  switch (l) {
    case Link::ethernet: return "ethernet";
    case Link::ethernet_vlan: return "ethernet+802.1Q";
    case Link::ethernet_qinq: return "ethernet+802.1ad+802.1Q";
    case Link::sll: return "sll";
    case Link::sll2: return "sll2";
    case Link::null_le: return "null-le";
    case Link::null_be: return "null-be";
    case Link::loop: return "loop";
    case Link::raw: return "raw";
    case Link::raw12: return "raw12";
    case Link::raw14: return "raw14";
  }
  return "?";
}

inline const Link kAllLinks[] = {Link::ethernet, Link::ethernet_vlan, Link::ethernet_qinq, Link::sll,
                                 Link::sll2,     Link::null_le,       Link::null_be,       Link::loop,
                                 Link::raw,      Link::raw12,         Link::raw14};

/// The link-layer frame around an IP packet.
inline Buffer frame(Link l, const Buffer& ip, bool v6) {
  Buffer f;
  ByteWriter w(f);
  const std::uint16_t ethertype = v6 ? 0x86dd : 0x0800;
  switch (l) {
    case Link::ethernet:
    case Link::ethernet_vlan:
    case Link::ethernet_qinq:
      for (int i = 0; i < 12; ++i) w.u8(static_cast<std::uint8_t>(i));
      if (l == Link::ethernet_qinq) { w.u16_be(0x88a8); w.u16_be(100); }
      if (l != Link::ethernet) { w.u16_be(0x8100); w.u16_be(42); }
      w.u16_be(ethertype);
      break;
    case Link::sll:
      w.u16_be(0);    // packet type: to us
      w.u16_be(772);  // ARPHRD_LOOPBACK
      w.u16_be(6);
      for (int i = 0; i < 8; ++i) w.u8(0);
      w.u16_be(ethertype);
      break;
    case Link::sll2:
      w.u16_be(ethertype);
      w.u16_be(0);
      w.u32_be(1);    // interface index
      w.u16_be(772);
      w.u8(0);
      w.u8(6);
      for (int i = 0; i < 8; ++i) w.u8(0);
      break;
    case Link::null_le: w.u32_le(v6 ? 10 : 2); break;
    case Link::null_be: w.u32_be(v6 ? 30 : 2); break;
    case Link::loop: w.u32_be(v6 ? 24 : 2); break;
    case Link::raw: case Link::raw12: case Link::raw14: break;
  }
  w.bytes(ip);
  return f;
}

/// One packet record: the bytes kept and the length on the wire.
struct Record {
  Buffer data;
  std::uint32_t original = 0;
  std::uint64_t ts_ns = 0;
};

inline Record record_of(const Segment& s, Link l) {
  Record r;
  r.data = frame(l, ip_packet(s), is_v6(s.src));
  r.original = static_cast<std::uint32_t>(r.data.size());
  if (s.snap && *s.snap < r.data.size()) r.data.resize_uninitialised(*s.snap);
  r.ts_ns = s.ts_ns;
  return r;
}

class OrderedWriter {
 public:
  OrderedWriter(Buffer& out, bool big_endian) : w_(out), be_(big_endian) {}
  void u16(std::uint16_t v) { be_ ? w_.u16_be(v) : w_.u16_le(v); }
  void u32(std::uint32_t v) { be_ ? w_.u32_be(v) : w_.u32_le(v); }
  void u64(std::uint64_t v) { be_ ? w_.u64_be(v) : w_.u64_le(v); }
  void bytes(ByteSpan b) { w_.bytes(b); }
  void pad4() { while (w_.size() % 4 != 0) w_.u8(0); }
  std::size_t size() const { return w_.size(); }

 private:
  ByteWriter w_;
  bool be_;
};

struct PcapOptions {
  bool big_endian = false;
  bool nanoseconds = false;
  std::uint32_t snaplen = 262144;
};

inline Buffer pcap_header(std::uint32_t link, const PcapOptions& o = {}) {
  Buffer out;
  OrderedWriter w(out, o.big_endian);
  w.u32(o.nanoseconds ? 0xa1b23c4d : 0xa1b2c3d4);
  w.u16(2);
  w.u16(4);
  w.u32(0);
  w.u32(0);
  w.u32(o.snaplen);
  w.u32(link);
  return out;
}

inline void append_pcap_record(Buffer& out, const Record& r, const PcapOptions& o = {}) {
  OrderedWriter w(out, o.big_endian);
  const std::uint64_t unit = o.nanoseconds ? 1 : 1000;
  w.u32(static_cast<std::uint32_t>(r.ts_ns / 1000000000ull));
  w.u32(static_cast<std::uint32_t>((r.ts_ns % 1000000000ull) / unit));
  w.u32(static_cast<std::uint32_t>(r.data.size()));
  w.u32(r.original);
  w.bytes(r.data);
}

inline Buffer write_pcap(const std::vector<Segment>& segs, Link l, const PcapOptions& o = {}) {
  Buffer out = pcap_header(link_type(l), o);
  for (const auto& s : segs) append_pcap_record(out, record_of(s, l), o);
  return out;
}

/// pcapng blocks, written in the byte order of the current section.
class PcapngWriter {
 public:
  explicit PcapngWriter(bool big_endian = false) { section(big_endian); }

  void section(bool big_endian) {
    be_ = big_endian;
    Buffer body;
    OrderedWriter w(body, be_);
    w.u32(0x1a2b3c4d);
    w.u16(1);
    w.u16(0);
    w.u64(~std::uint64_t{0});  // section length unknown
    block(0x0a0d0d0a, body);
  }
  /// tsresol: the if_tsresol byte; tsoffset: if_tsoffset seconds.
  void interface(std::uint16_t link, std::uint32_t snaplen = 262144,
                 std::optional<std::uint8_t> tsresol = {}, std::optional<std::int64_t> tsoffset = {}) {
    Buffer body;
    OrderedWriter w(body, be_);
    w.u16(link);
    w.u16(0);
    w.u32(snaplen);
    // an if_name option first, as dumpcap writes
    const std::string name = "lo";
    w.u16(2);
    w.u16(static_cast<std::uint16_t>(name.size()));
    w.bytes(daskcaps::as_bytes(name));
    w.pad4();
    if (tsresol) {
      w.u16(9);
      w.u16(1);
      Buffer v{*tsresol};
      w.bytes(v);
      w.pad4();
    }
    if (tsoffset) {
      w.u16(14);
      w.u16(8);
      w.u64(static_cast<std::uint64_t>(*tsoffset));
    }
    w.u16(0);
    w.u16(0);
    block(1, body);
  }
  void epb(std::uint32_t iface, std::uint64_t ticks, ByteSpan data, std::uint32_t original) {
    Buffer body;
    OrderedWriter w(body, be_);
    w.u32(iface);
    w.u32(static_cast<std::uint32_t>(ticks >> 32));
    w.u32(static_cast<std::uint32_t>(ticks));
    w.u32(static_cast<std::uint32_t>(data.size()));
    w.u32(original);
    w.bytes(data);
    w.pad4();
    // an epb_flags option, as dumpcap writes
    w.u16(2);
    w.u16(4);
    w.u32(1);
    w.u16(0);
    w.u16(0);
    block(6, body);
  }
  void spb(ByteSpan data, std::uint32_t original) {
    Buffer body;
    OrderedWriter w(body, be_);
    w.u32(original);
    w.bytes(data);
    w.pad4();
    block(3, body);
  }
  void pb(std::uint16_t iface, std::uint64_t ticks, ByteSpan data, std::uint32_t original) {
    Buffer body;
    OrderedWriter w(body, be_);
    w.u16(iface);
    w.u16(0);
    w.u32(static_cast<std::uint32_t>(ticks >> 32));
    w.u32(static_cast<std::uint32_t>(ticks));
    w.u32(static_cast<std::uint32_t>(data.size()));
    w.u32(original);
    w.bytes(data);
    w.pad4();
    block(2, body);
  }
  /// Any block; the body is padded to 4 bytes.
  void block(std::uint32_t type, ByteSpan body) {
    Buffer padded(body.begin(), body.end());
    while (padded.size() % 4 != 0) padded.push_back(0);
    OrderedWriter w(out, be_);
    w.u32(type);
    w.u32(static_cast<std::uint32_t>(padded.size() + 12));
    w.bytes(padded);
    w.u32(static_cast<std::uint32_t>(padded.size() + 12));
  }
  bool big_endian() const { return be_; }

  Buffer out;

 private:
  bool be_ = false;
};

/// A whole pcapng capture of the segments on one interface (EPBs,
/// microsecond timestamps unless tsresol is given).
inline Buffer write_pcapng(const std::vector<Segment>& segs, Link l, bool big_endian = false,
                           std::optional<std::uint8_t> tsresol = {}) {
  PcapngWriter w(big_endian);
  w.interface(static_cast<std::uint16_t>(link_type(l)), 262144, tsresol);
  std::uint64_t per_second = 1000000;
  if (tsresol) {
    per_second = 1;
    for (int i = 0; i < (*tsresol & 0x7f); ++i) per_second *= (*tsresol & 0x80) ? 2 : 10;
  }
  for (const auto& s : segs) {
    Record r = record_of(s, l);
    const std::uint64_t ticks = (r.ts_ns / 1000000000ull) * per_second +
                                (r.ts_ns % 1000000000ull) * per_second / 1000000000ull;
    w.epb(0, ticks, r.data, r.original);
  }
  return w.out;
}

// --- Dask messages ----------------------------------------------------------

/// A one-frame Dask message whose frame 0 is a msgpack map.
inline Buffer dask_message(const daskcaps::msgpack::Value& header) {
  Buffer f0 = daskcaps::msgpack::encode(header);
  std::vector<ByteSpan> frames{f0};
  return daskcaps::encode_message(frames);
}

inline Buffer dask_handshake(int pickle_protocol = 5) {
  using daskcaps::msgpack::Value;
  Value m = Value::map();
  m.set("compression", Value::nil());
  m.set("python", Value::array({Value::integer(3), Value::integer(11), Value::integer(2)}));
  m.set("pickle-protocol", Value::integer(pickle_protocol));
  return dask_message(m);
}

/// {"op": op, "data": <bin of n bytes>} plus a second frame of `extra`
/// bytes when extra > 0.
inline Buffer dask_op(const std::string& op, std::size_t n = 0, std::size_t extra = 0,
                      std::uint8_t fill = 0x5a) {
  using daskcaps::msgpack::Value;
  Value m = Value::map();
  m.set("op", Value::str(op));
  m.set("data", Value::bin(Buffer(n, fill)));
  Buffer f0 = daskcaps::msgpack::encode(m);
  Buffer f1(extra, static_cast<std::uint8_t>(fill + 1));
  std::vector<ByteSpan> frames{f0};
  if (extra > 0) frames.push_back(f1);
  return daskcaps::encode_message(frames);
}

inline Buffer concat(std::initializer_list<Buffer> parts) {
  Buffer out;
  for (const auto& p : parts) out.append(p);
  return out;
}

// --- conversations ----------------------------------------------------------

/// Builds the segments of one TCP connection with sequence numbers managed.
struct Conversation {
  std::string client = "10.0.0.1", server = "10.0.0.2";
  std::uint16_t cport = 40000, sport = 8786;
  std::uint32_t cseq = 1000, sseq = 5000;  // next sequence number of each side
  std::uint64_t ts_ns = 1700000000ull * 1000000000ull;
  std::uint64_t step_ns = 1000;
  std::vector<Segment> segments;

  Segment make(bool from_client, std::uint8_t flags) {
    Segment s;
    s.src = from_client ? client : server;
    s.dst = from_client ? server : client;
    s.sport = from_client ? cport : sport;
    s.dport = from_client ? sport : cport;
    s.seq = from_client ? cseq : sseq;
    s.ack = from_client ? sseq : cseq;
    s.flags = flags;
    s.ts_ns = ts_ns;
    ts_ns += step_ns;
    return s;
  }
  /// SYN, SYN-ACK, ACK.
  void open() {
    segments.push_back(make(true, kSyn));
    ++cseq;
    segments.push_back(make(false, kSyn | kAck));
    ++sseq;
    segments.push_back(make(true, kAck));
  }
  /// Sends bytes in segments of at most mss bytes; returns the first index.
  std::size_t send(bool from_client, const Buffer& bytes, std::size_t mss = 1448) {
    const std::size_t first = segments.size();
    for (std::size_t at = 0; at < bytes.size(); at += mss) {
      Segment s = make(from_client, kAck | kPsh);
      const std::size_t n = std::min(mss, bytes.size() - at);
      s.payload = Buffer(bytes.data() + at, n);
      (from_client ? cseq : sseq) += static_cast<std::uint32_t>(n);
      segments.push_back(std::move(s));
    }
    return first;
  }
  void fin(bool from_client) {
    segments.push_back(make(from_client, kFin | kAck));
    ++(from_client ? cseq : sseq);
  }
  void close() {
    fin(true);
    fin(false);
    segments.push_back(make(true, kAck));
  }
  void rst(bool from_client) { segments.push_back(make(from_client, kRst | kAck)); }
};

}  // namespace testsupport::pcapb
