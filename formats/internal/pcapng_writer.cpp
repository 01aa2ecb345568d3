#include "formats/internal/pcapng_writer.h"

#include <arpa/inet.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "core/base/internal/byte_writer.h"

namespace daskcaps::formats {

namespace {

constexpr std::uint32_t kSectionHeader = 0x0A0D0D0A;
constexpr std::uint32_t kInterfaceDescription = 1;
constexpr std::uint32_t kEnhancedPacket = 6;
constexpr std::uint16_t kLinkEthernet = 1;
constexpr std::uint8_t kFin = 0x01, kSyn = 0x02, kPsh = 0x08, kAck = 0x10;

void put16be(Buffer& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}
void put32be(Buffer& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

// The ones' complement sum of RFC 1071 over several pieces, in network byte
// order. Each piece is summed eight bytes at a time in the host's order (the
// sum does not depend on the byte order once folded and swapped, RFC 1071
// section 2(B)); a piece that starts at an odd offset of the whole has its
// bytes' roles swapped, so its folded sum is swapped too.
struct Checksum {
  std::uint64_t sum = 0;  // network order, unfolded
  bool odd = false;       // the bytes so far are an odd number
  static std::uint16_t swap(std::uint16_t v) { return static_cast<std::uint16_t>((v << 8) | (v >> 8)); }
  static std::uint16_t fold(std::uint64_t v) {
    while (v >> 16) v = (v & 0xffff) + (v >> 16);
    return static_cast<std::uint16_t>(v);
  }
  void add(ByteSpan bytes) {
    const std::uint8_t* p = bytes.data();
    std::size_t n = bytes.size();
    std::uint64_t host = 0;  // sum of the piece's 16-bit words in host order, from its first byte
    for (; n >= 8; p += 8, n -= 8) {
      std::uint64_t w;
      std::memcpy(&w, p, 8);
      host += (w & 0xffffffffu) + (w >> 32);
    }
    for (; n >= 2; p += 2, n -= 2) {
      std::uint16_t w;
      std::memcpy(&w, p, 2);
      host += w;
    }
    if (n == 1) {
      // The last byte is the high byte of its word in network order.
      const std::uint8_t last[2] = {*p, 0};
      std::uint16_t w;
      std::memcpy(&w, last, 2);
      host += w;
    }
    std::uint16_t net = fold(host);
    if constexpr (std::endian::native == std::endian::little) net = swap(net);
    sum += odd ? swap(net) : net;
    odd = odd != (bytes.size() % 2 == 1);
  }
  std::uint16_t value() const { return static_cast<std::uint16_t>(~fold(sum)); }
};

}  // namespace

Result<std::unique_ptr<PcapngWriter>> PcapngWriter::create(const std::string& path) {
  auto f = AtomicFile::create(path);
  if (!f) return std::move(f).error();
  std::unique_ptr<PcapngWriter> w(new PcapngWriter(std::move(*f)));
  Buffer head;
  ByteWriter bw(head);
  // Section header: type, length, byte-order magic, version 1.0, section
  // length unknown (-1), length again.
  bw.u32_le(kSectionHeader);
  bw.u32_le(28);
  bw.u32_le(0x1A2B3C4D);
  bw.u16_le(1);
  bw.u16_le(0);
  bw.u64_le(~std::uint64_t{0});
  bw.u32_le(28);
  // Interface description: Ethernet, snapshot length 0 (none).
  bw.u32_le(kInterfaceDescription);
  bw.u32_le(20);
  bw.u16_le(kLinkEthernet);
  bw.u16_le(0);
  bw.u32_le(0);
  bw.u32_le(20);
  if (auto st = w->file_->write(head); !st) return std::move(st).error();
  return w;
}

PcapngWriter::~PcapngWriter() = default;

Result<PcapngWriter::Endpoint> PcapngWriter::parse_endpoint(const std::string& text) {
  Endpoint e;
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return make_error(Errc::usage, "not [ip]:port: " + text);
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    e.v6 = true;
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) return make_error(Errc::usage, "not ip:port: " + text);
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (e.v6) {
    if (::inet_pton(AF_INET6, host.c_str(), e.ip.data()) != 1) return make_error(Errc::usage, "not an IPv6 address: " + host);
  } else if (::inet_pton(AF_INET, host.c_str(), e.ip.data()) != 1) {
    return make_error(Errc::usage, "not an IPv4 address: " + host);
  }
  char* end = nullptr;
  const unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p > 65535) return make_error(Errc::usage, "not a port: " + port);
  e.port = static_cast<std::uint16_t>(p);
  return e;
}

Result<PcapngWriter::FlowId> PcapngWriter::open_flow(const std::string& client, const std::string& server,
                                                      double ts) {
  auto c = parse_endpoint(client);
  if (!c) return std::move(c).error();
  auto s = parse_endpoint(server);
  if (!s) return std::move(s).error();
  if (c->v6 != s->v6) return make_error(Errc::usage, "an IPv4 and an IPv6 endpoint in one flow");
  Flow f;
  f.end[0] = *c;
  f.end[1] = *s;
  // Fixed, distinct initial sequence numbers: the captures are made, not
  // observed, and stay reproducible.
  const auto id = static_cast<std::uint32_t>(flows_.size());
  f.next[0] = 0x10000000u + id * 0x10000u;
  f.next[1] = 0x80000000u + id * 0x10000u;
  flows_.push_back(f);
  Flow& flow = flows_.back();
  if (auto st = packet(flow, 0, kSyn, {}, ts); !st) return std::move(st).error();
  if (auto st = packet(flow, 1, kSyn | kAck, {}, ts); !st) return std::move(st).error();
  if (auto st = packet(flow, 0, kAck, {}, ts); !st) return std::move(st).error();
  return flows_.size() - 1;
}

Status PcapngWriter::write(FlowId id, bool from_client, std::span<const ByteSpan> pieces, double ts) {
  if (id >= flows_.size() || !flows_[id].open) return make_error(Errc::internal, "no open flow " + std::to_string(id));
  Flow& f = flows_[id];
  const int from = from_client ? 0 : 1;
  // Segments of at most kMaxSegment bytes, each taken from the pieces
  // where they lie (no copy before the one into the file's buffer).
  std::size_t total = 0;
  for (ByteSpan p : pieces) total += p.size();
  std::size_t sent = 0, in_segment = 0;
  segment_.clear();
  for (ByteSpan p : pieces) {
    while (!p.empty()) {
      const std::size_t k = std::min(p.size(), kMaxSegment - in_segment);
      segment_.push_back(p.first(k));
      in_segment += k;
      p = p.subspan(k);
      if (in_segment == kMaxSegment) {
        sent += in_segment;
        if (auto st = packet(f, from, sent == total ? (kAck | kPsh) : kAck, segment_, ts); !st) return st;
        segment_.clear();
        in_segment = 0;
      }
    }
  }
  if (in_segment > 0) return packet(f, from, kAck | kPsh, segment_, ts);
  return {};
}

void PcapngWriter::skip(FlowId id, bool from_client, std::uint64_t bytes) {
  if (id >= flows_.size() || !flows_[id].open) return;
  flows_[id].next[from_client ? 0 : 1] += static_cast<std::uint32_t>(bytes);  // sequence numbers wrap
}

Status PcapngWriter::close_flow(FlowId id, double ts) {
  if (id >= flows_.size() || !flows_[id].open) return {};
  Flow& f = flows_[id];
  if (auto st = packet(f, 0, kFin | kAck, {}, ts); !st) return st;
  if (auto st = packet(f, 1, kFin | kAck, {}, ts); !st) return st;
  if (auto st = packet(f, 0, kAck, {}, ts); !st) return st;
  f.open = false;
  return {};
}

Status PcapngWriter::commit(double ts) {
  for (FlowId i = 0; i < flows_.size(); ++i)
    if (auto st = close_flow(i, ts); !st) return st;
  if (auto st = flush(); !st) return st;
  return file_->commit();
}

Status PcapngWriter::packet(Flow& f, int from, std::uint8_t flags, std::span<const ByteSpan> payload, double ts) {
  const Endpoint& src = f.end[from];
  const Endpoint& dst = f.end[1 - from];
  const bool v6 = src.v6;
  const std::size_t ip_header = v6 ? 40 : 20;
  std::size_t payload_size = 0;
  for (ByteSpan b : payload) payload_size += b.size();
  const std::size_t tcp_length = 20 + payload_size;
  Buffer& p = scratch_;  // the headers: Ethernet, IP, TCP
  p.clear();
  // Ethernet.
  const std::uint8_t mac_a[6] = {0x02, 0, 0, 0, 0, 0x01}, mac_b[6] = {0x02, 0, 0, 0, 0, 0x02};
  p.append(from == 0 ? mac_b : mac_a, 6);  // destination
  p.append(from == 0 ? mac_a : mac_b, 6);  // source
  put16be(p, v6 ? 0x86DD : 0x0800);
  const std::size_t ip_at = p.size();
  if (v6) {
    put32be(p, 0x60000000u);
    put16be(p, static_cast<std::uint16_t>(tcp_length));
    p.push_back(6);   // next header: TCP
    p.push_back(64);  // hop limit
    p.append(src.ip.data(), src.ip.size());
    p.append(dst.ip.data(), dst.ip.size());
  } else {
    p.push_back(0x45);
    p.push_back(0);
    put16be(p, static_cast<std::uint16_t>(ip_header + tcp_length));
    put16be(p, static_cast<std::uint16_t>(packets_));  // identification
    put16be(p, 0x4000);                                  // don't fragment
    p.push_back(64);
    p.push_back(6);
    put16be(p, 0);  // checksum, below
    p.append(src.ip.data(), 4);
    p.append(dst.ip.data(), 4);
    Checksum c;
    c.add(ByteSpan(p).subspan(ip_at, 20));
    const std::uint16_t sum = c.value();
    p[ip_at + 10] = static_cast<std::uint8_t>(sum >> 8);
    p[ip_at + 11] = static_cast<std::uint8_t>(sum);
  }
  const std::size_t tcp_at = p.size();
  put16be(p, src.port);
  put16be(p, dst.port);
  put32be(p, f.next[from]);
  put32be(p, (flags & kAck) ? f.next[1 - from] : 0);
  p.push_back(5 << 4);  // data offset: 20 bytes
  p.push_back(flags);
  put16be(p, 65535);
  put16be(p, 0);  // checksum, below
  put16be(p, 0);
  // TCP checksum over the pseudo header, the header and the payload.
  Checksum c;
  std::uint8_t pseudo[40];
  std::size_t pseudo_size = 0;
  auto pseudo_put = [&](const std::uint8_t* b, std::size_t n) {
    std::memcpy(pseudo + pseudo_size, b, n);
    pseudo_size += n;
  };
  if (v6) {
    pseudo_put(src.ip.data(), 16);
    pseudo_put(dst.ip.data(), 16);
    const std::uint8_t tail[8] = {static_cast<std::uint8_t>(tcp_length >> 24), static_cast<std::uint8_t>(tcp_length >> 16),
                                  static_cast<std::uint8_t>(tcp_length >> 8), static_cast<std::uint8_t>(tcp_length),
                                  0, 0, 0, 6};
    pseudo_put(tail, 8);
  } else {
    pseudo_put(src.ip.data(), 4);
    pseudo_put(dst.ip.data(), 4);
    const std::uint8_t tail[4] = {0, 6, static_cast<std::uint8_t>(tcp_length >> 8), static_cast<std::uint8_t>(tcp_length)};
    pseudo_put(tail, 4);
  }
  c.add(ByteSpan(pseudo, pseudo_size));
  c.add(ByteSpan(p).subspan(tcp_at));
  for (ByteSpan b : payload) c.add(b);
  const std::uint16_t sum = c.value();
  p[tcp_at + 16] = static_cast<std::uint8_t>(sum >> 8);
  p[tcp_at + 17] = static_cast<std::uint8_t>(sum);

  f.next[from] += static_cast<std::uint32_t>(payload_size) + ((flags & (kSyn | kFin)) ? 1u : 0u);

  // Enhanced packet block: interface 0, microseconds, lengths, the packet
  // padded to 4 bytes, total length again.
  const std::size_t packet_size = p.size() + payload_size;
  const std::uint64_t micros = ts > 0 ? static_cast<std::uint64_t>(std::llround(ts * 1e6)) : 0;
  const std::size_t padded = (packet_size + 3) / 4 * 4;
  const std::uint32_t block = static_cast<std::uint32_t>(32 + padded);
  std::uint8_t head[28];
  const std::uint32_t fields[7] = {kEnhancedPacket, block, 0, static_cast<std::uint32_t>(micros >> 32),
                                   static_cast<std::uint32_t>(micros), static_cast<std::uint32_t>(packet_size),
                                   static_cast<std::uint32_t>(packet_size)};
  for (int i = 0; i < 7; ++i)
    for (int k = 0; k < 4; ++k) head[4 * i + k] = static_cast<std::uint8_t>(fields[i] >> (8 * k));
  const std::uint8_t tail[4 + 3] = {0, 0, 0, static_cast<std::uint8_t>(block), static_cast<std::uint8_t>(block >> 8),
                                    static_cast<std::uint8_t>(block >> 16), static_cast<std::uint8_t>(block >> 24)};
  pending_.append(head, sizeof head);
  pending_.append(p);
  for (ByteSpan b : payload) pending_.append(b);
  // The padding (zeros, up to 3 bytes) and the block length again.
  pending_.append(tail + (3 - (padded - packet_size)), (padded - packet_size) + 4);
  ++packets_;
  return pending_.size() >= kFlushBytes ? flush() : Status{};
}

Status PcapngWriter::flush() {
  if (pending_.empty()) return {};
  auto st = file_->write(pending_);
  pending_.clear();
  return st;
}

}  // namespace daskcaps::formats
