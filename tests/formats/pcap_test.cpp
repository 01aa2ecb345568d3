#include "formats/internal/pcap.h"
#include "formats/internal/packet.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>

#include "support/pcap_builder.h"
#include "support/prefixes.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport::pcapb;

namespace {

struct ReadAll {
  std::vector<pcap::Packet> packets;
  std::vector<Buffer> data;  // copies: Packet::data dies at the next call
  std::optional<Error> error;
  std::vector<Diagnostic> warnings;
};

ReadAll read_all(ByteSpan file, const pcap::ReaderOptions& options = {}) {
  ReadAll out;
  auto reader = pcap::Reader::open_memory(file, options);
  if (!reader) {
    out.error = reader.error();
    return out;
  }
  for (;;) {
    auto p = (*reader)->next();
    if (!p) {
      out.error = p.error();
      break;
    }
    if (!*p) break;
    out.packets.push_back(**p);
    out.data.emplace_back((*p)->data.begin(), (*p)->data.end());
  }
  out.warnings = (*reader)->warnings();
  return out;
}

Segment sample_segment(bool v6) {
  Segment s;
  if (v6) {
    s.src = "fd00::1";
    s.dst = "::1";
  }
  s.sport = 53012;
  s.dport = 8786;
  s.seq = 0xdeadbeef;
  s.ack = 0x01020304;
  s.flags = kAck | kPsh;
  s.payload = dask_handshake();
  s.ts_ns = 1700000000ull * 1000000000ull + 123456789;
  return s;
}

void check_sample(const pcap::DecodedPacket& d, const Segment& s, bool v6) {
  REQUIRE(d.kind == pcap::PacketKind::tcp);
  CHECK(d.tcp.src.to_string() == (v6 ? "[fd00::1]" : "10.0.0.1"));
  CHECK(d.tcp.dst.to_string() == (v6 ? "[::1]" : "10.0.0.2"));
  CHECK(d.tcp.src_port == 53012);
  CHECK(d.tcp.dst_port == 8786);
  CHECK(d.tcp.seq == 0xdeadbeef);
  CHECK(d.tcp.ack == 0x01020304);
  CHECK(d.tcp.flags == (kAck | kPsh));
  CHECK(d.tcp.has(pcap::tcp_flag::kPsh));
  CHECK(!d.tcp.has(pcap::tcp_flag::kSyn));
  CHECK(Buffer(d.tcp.payload.begin(), d.tcp.payload.end()) == s.payload);
  CHECK(d.tcp.wire_payload_length == s.payload.size());
  CHECK(!d.tcp.first_fragment);
}

// The decoded packet points into its record: keep every record alive.
pcap::DecodedPacket decode_segment(const Segment& s, Link l = Link::ethernet) {
  static std::deque<Record> records;
  const Record& r = records.emplace_back(record_of(s, l));
  return pcap::decode_packet(link_type(l), r.data, r.original);
}

}  // namespace

TEST_CASE("pcap: sniff tells libpcap and pcapng in both byte orders") {
  const Buffer us_le{0xd4, 0xc3, 0xb2, 0xa1}, us_be{0xa1, 0xb2, 0xc3, 0xd4};
  const Buffer ns_le{0x4d, 0x3c, 0xb2, 0xa1}, ns_be{0xa1, 0xb2, 0x3c, 0x4d};
  for (const Buffer* b : {&us_le, &us_be, &ns_le, &ns_be}) CHECK(pcap::sniff(*b) == pcap::FileFormat::pcap);
  CHECK(pcap::sniff(PcapngWriter(false).out) == pcap::FileFormat::pcapng);
  CHECK(pcap::sniff(PcapngWriter(true).out) == pcap::FileFormat::pcapng);
  const Buffer shb_bad_bom{0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 28, 1, 2, 3, 4};
  CHECK(pcap::sniff(shb_bad_bom) == pcap::FileFormat::unknown);
  CHECK(pcap::sniff(ByteSpan(shb_bad_bom).first(4)) == pcap::FileFormat::pcapng);
  CHECK(pcap::sniff(dask_handshake()) == pcap::FileFormat::unknown);
  CHECK(pcap::sniff(Buffer{0xd4, 0xc3}) == pcap::FileFormat::unknown);
  CHECK(pcap::sniff({}) == pcap::FileFormat::unknown);
}

TEST_CASE("pcap: every link type, IPv4 and IPv6, in libpcap and pcapng") {
  for (Link l : kAllLinks) {
    for (bool v6 : {false, true}) {
      CAPTURE(link_name(l));
      CAPTURE(v6);
      const Segment s = sample_segment(v6);
      for (int format = 0; format < 2; ++format) {
        const Buffer file = format == 0 ? write_pcap({s}, l) : write_pcapng({s}, l);
        ReadAll all = read_all(file);
        REQUIRE(!all.error);
        REQUIRE(all.packets.size() == 1);
        const pcap::Packet& p = all.packets[0];
        CHECK(p.link_type == link_type(l));
        CHECK(p.interface == 0);
        CHECK(p.timestamp.seconds == 1700000000);
        CHECK(p.timestamp.nanoseconds == 123456000);  // microsecond file
        CHECK(p.original_length == all.data[0].size());
        CHECK(all.warnings.empty());
        check_sample(pcap::decode_packet(p.link_type, all.data[0], p.original_length), s, v6);
      }
    }
  }
}

TEST_CASE("pcap: libpcap in both byte orders with micro- and nanosecond timestamps") {
  const Segment s = sample_segment(false);
  for (bool be : {false, true}) {
    for (bool ns : {false, true}) {
      CAPTURE(be);
      CAPTURE(ns);
      PcapOptions o;
      o.big_endian = be;
      o.nanoseconds = ns;
      const Buffer file = write_pcap({s, s}, Link::sll2, o);
      CHECK(file[0] == (be ? 0xa1 : (ns ? 0x4d : 0xd4)));
      ReadAll all = read_all(file);
      REQUIRE(!all.error);
      REQUIRE(all.packets.size() == 2);
      CHECK(all.packets[1].offset == 24 + 16 + all.data[0].size());
      CHECK(all.packets[1].data_offset == all.packets[1].offset + 16);
      CHECK(all.packets[0].timestamp.seconds == 1700000000);
      CHECK(all.packets[0].timestamp.nanoseconds == (ns ? 123456789u : 123456000u));
      check_sample(pcap::decode_packet(all.packets[0].link_type, all.data[0], all.packets[0].original_length), s,
                   false);
    }
  }
}

TEST_CASE("pcap: pcapng timestamp resolutions and offsets") {
  const Segment s = sample_segment(false);
  struct Case {
    std::optional<std::uint8_t> tsresol;
    std::uint32_t nanos;
  } cases[] = {{{}, 123456000}, {6, 123456000}, {9, 123456789}, {3, 123000000}, {0x80 | 20, 0}};
  for (const Case& c : cases) {
    CAPTURE(c.tsresol.value_or(255));
    ReadAll all = read_all(write_pcapng({s}, Link::raw, false, c.tsresol));
    REQUIRE(!all.error);
    REQUIRE(all.packets.size() == 1);
    CHECK(all.packets[0].timestamp.seconds == 1700000000);
    if (c.tsresol == (0x80 | 20)) {
      // 2^-20 s ticks: exact to within one tick (about 954 ns).
      CHECK(all.packets[0].timestamp.nanoseconds <= 123456789u);
      CHECK(all.packets[0].timestamp.nanoseconds + 954 >= 123456789u);
    } else {
      CHECK(all.packets[0].timestamp.nanoseconds == c.nanos);
    }
  }
  PcapngWriter w;
  w.interface(101, 0, std::uint8_t{9}, std::int64_t{100});
  const Buffer pkt = record_of(s, Link::raw).data;
  w.epb(0, 5'000000001ull, pkt, static_cast<std::uint32_t>(pkt.size()));
  ReadAll all = read_all(w.out);
  REQUIRE(all.packets.size() == 1);
  CHECK(all.packets[0].timestamp.seconds == 105);
  CHECK(all.packets[0].timestamp.nanoseconds == 1);

  PcapngWriter bad;
  bad.interface(101, 0, std::uint8_t{30});
  ReadAll r = read_all(bad.out);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::unsupported);
  CHECK(r.error->what.find("timestamp resolution 10^-30 unsupported") != std::string::npos);
}

TEST_CASE("pcap: pcapng sections, interfaces, SPB, obsolete PB, unknown blocks") {
  const Segment a = sample_segment(false);
  const Segment b = sample_segment(true);
  const Buffer eth = record_of(a, Link::ethernet).data;
  const Buffer sll = record_of(b, Link::sll).data;
  PcapngWriter w(false);
  w.interface(1);
  w.interface(113, 0, std::uint8_t{9});
  w.block(0x00000004, Buffer(16, 0));  // name resolution block: skipped
  w.epb(1, 7'000000000ull, sll, static_cast<std::uint32_t>(sll.size()));
  w.block(0x00000bad, Buffer(5, 1));  // custom block: skipped
  w.block(0x00000bad, Buffer(5, 1));
  w.spb(eth, static_cast<std::uint32_t>(eth.size()));
  w.pb(0, 9'000000ull, eth, static_cast<std::uint32_t>(eth.size()));
  w.block(0x00000005, Buffer(20, 0));  // interface statistics: skipped
  // A second section in the other byte order: interface ids start over.
  w.section(true);
  w.interface(276);
  const Buffer sll2 = record_of(a, Link::sll2).data;
  w.epb(0, 1'500000ull, sll2, static_cast<std::uint32_t>(sll2.size()));

  ReadAll all = read_all(w.out);
  REQUIRE(!all.error);
  REQUIRE(all.packets.size() == 4);
  CHECK(all.packets[0].interface == 1);
  CHECK(all.packets[0].link_type == 113);
  CHECK(all.packets[0].timestamp.seconds == 7);
  CHECK(all.packets[1].link_type == 1);
  CHECK(!all.packets[1].has_timestamp);
  CHECK(all.packets[2].link_type == 1);
  CHECK(all.packets[2].timestamp.seconds == 9);
  CHECK(all.packets[3].link_type == 276);
  CHECK(all.packets[3].timestamp.seconds == 1);
  CHECK(all.packets[3].timestamp.nanoseconds == 500000000);
  check_sample(pcap::decode_packet(113, all.data[0], all.packets[0].original_length), b, true);
  for (int i = 1; i < 4; ++i)
    check_sample(pcap::decode_packet(all.packets[i].link_type, all.data[i], all.packets[i].original_length), a,
                 false);
  // Each unsupported block type is reported once.
  REQUIRE(all.warnings.size() == 3);
  // SHB 28 bytes, IDB 32, IDB with if_tsresol 40: the NRB starts at 100.
  CHECK(all.warnings[0] ==
        Diagnostic{DiagnosticKind::unsupported_block, 0x64, "pcapng block type 0x00000004 at 0x64 unsupported, skipped"});
  CHECK(all.warnings[1].kind == DiagnosticKind::unsupported_block);
  CHECK(all.warnings[1].text.find("pcapng block type 0x00000bad at " + hex_offset(all.warnings[1].offset)) == 0);
  CHECK(all.warnings[2].kind == DiagnosticKind::unsupported_block);
  CHECK(all.warnings[2].text.find("pcapng block type 0x00000005 at " + hex_offset(all.warnings[2].offset)) == 0);
  CHECK(all.warnings[0].offset < all.warnings[1].offset);
}

TEST_CASE("pcap: a simple packet block is cut to the interface snaplen") {
  const Segment s = sample_segment(false);
  const Buffer pkt = record_of(s, Link::raw).data;
  PcapngWriter w;
  w.interface(101, 60);
  w.spb(ByteSpan(pkt).first(60), static_cast<std::uint32_t>(pkt.size()));
  ReadAll all = read_all(w.out);
  REQUIRE(all.packets.size() == 1);
  CHECK(all.data[0].size() == 60);
  CHECK(all.packets[0].original_length == pkt.size());
  auto d = pcap::decode_packet(101, all.data[0], all.packets[0].original_length);
  REQUIRE(d.kind == pcap::PacketKind::tcp);
  CHECK(d.tcp.payload.size() == 60 - 40);
  CHECK(d.tcp.wire_payload_length == s.payload.size());
}

TEST_CASE("pcap: IPv4 options, TCP options, IPv6 extension headers") {
  Segment s = sample_segment(false);
  s.ipv4_options = 12;
  s.tcp_options = 12;
  check_sample(decode_segment(s, Link::ethernet), s, false);
  Segment s6 = sample_segment(true);
  s6.ipv6_extensions = true;
  s6.tcp_options = 20;
  check_sample(decode_segment(s6, Link::raw), s6, true);
}

TEST_CASE("pcap: IP fragments: non-first skipped, first read with a flag") {
  for (bool v6 : {false, true}) {
    CAPTURE(v6);
    Segment later = sample_segment(v6);
    later.frag_offset = 185;
    CHECK(decode_segment(later).kind == pcap::PacketKind::ip_fragment);
    Segment first = sample_segment(v6);
    first.more_fragments = true;
    auto d = decode_segment(first);
    REQUIRE(d.kind == pcap::PacketKind::tcp);
    CHECK(d.tcp.first_fragment);
  }
  Segment later6 = sample_segment(true);
  later6.ipv6_extensions = true;
  later6.frag_offset = 3;
  CHECK(decode_segment(later6).kind == pcap::PacketKind::ip_fragment);
}

TEST_CASE("pcap: Ethernet padding is trimmed, TSO zero lengths use the record") {
  Segment s = sample_segment(false);
  s.payload = {1, 2, 3};
  Record r = record_of(s, Link::ethernet);
  r.data.resize(r.data.size() + 9, 0xee);  // padding and FCS after the IP packet
  auto d = pcap::decode_packet(1, r.data, static_cast<std::uint32_t>(r.data.size()));
  REQUIRE(d.kind == pcap::PacketKind::tcp);
  CHECK(Buffer(d.tcp.payload.begin(), d.tcp.payload.end()) == Buffer{1, 2, 3});

  Segment tso = sample_segment(false);
  tso.tso_zero_length = true;
  check_sample(decode_segment(tso), tso, false);
}

TEST_CASE("pcap: snapshot cuts: inside the payload, inside a header") {
  Segment s = sample_segment(false);
  s.snap = 14 + 20 + 20 + 10;
  auto d = decode_segment(s);
  REQUIRE(d.kind == pcap::PacketKind::tcp);
  CHECK(d.tcp.payload.size() == 10);
  CHECK(d.tcp.wire_payload_length == s.payload.size());

  s.snap = 14 + 20 + 10;
  d = decode_segment(s);
  CHECK(d.kind == pcap::PacketKind::truncated);
  CHECK(d.why == "cut by the snapshot length inside the TCP header");

  // The same bytes without the record saying the packet was longer.
  Record r = record_of(s, Link::ethernet);
  d = pcap::decode_packet(1, r.data, static_cast<std::uint32_t>(r.data.size()));
  CHECK(d.kind == pcap::PacketKind::malformed);
  CHECK(d.why == "packet ends inside the TCP header");

  // Every cut of a full packet decodes to something without reading past it.
  Segment full = sample_segment(true);
  full.ipv6_extensions = true;
  for (Link l : kAllLinks) {
    Record rec = record_of(full, l);
    testsupport::for_each_strict_prefix(rec.data, [&](ByteSpan cut) {
      auto k = pcap::decode_packet(link_type(l), cut, rec.original);
      if (k.kind == pcap::PacketKind::tcp) {
        CHECK(k.tcp.payload.size() < full.payload.size());
        CHECK(k.tcp.wire_payload_length == full.payload.size());
      } else {
        CHECK((k.kind == pcap::PacketKind::truncated || k.kind == pcap::PacketKind::other));
      }
    });
  }
}

TEST_CASE("pcap: packets that are not TCP, or not readable") {
  Segment s = sample_segment(false);
  Buffer ip = ip_packet(s);
  Buffer udp = ip;
  udp[9] = 17;
  CHECK(pcap::decode_packet(101, udp, static_cast<std::uint32_t>(udp.size())).kind == pcap::PacketKind::other);
  Buffer arp = frame(Link::ethernet, ip, false);
  arp[12] = 0x08;
  arp[13] = 0x06;
  CHECK(pcap::decode_packet(1, arp, static_cast<std::uint32_t>(arp.size())).kind == pcap::PacketKind::other);
  Buffer bad_ihl = ip;
  bad_ihl[0] = 0x44;
  auto d = pcap::decode_packet(101, bad_ihl, static_cast<std::uint32_t>(bad_ihl.size()));
  CHECK(d.kind == pcap::PacketKind::malformed);
  CHECK(d.why == "IPv4 header length 16 is below 20");
  Buffer bad_doff = ip;
  bad_doff[20 + 12] = 0x40;
  d = pcap::decode_packet(101, bad_doff, static_cast<std::uint32_t>(bad_doff.size()));
  CHECK(d.kind == pcap::PacketKind::malformed);
  CHECK(d.why == "TCP header length 16 is below 20");
  Buffer bad_total = ip;
  bad_total[2] = 0;
  bad_total[3] = 10;
  d = pcap::decode_packet(101, bad_total, static_cast<std::uint32_t>(bad_total.size()));
  CHECK(d.kind == pcap::PacketKind::malformed);
  Buffer loop_mismatch = frame(Link::loop, ip_packet(sample_segment(true)), false);
  d = pcap::decode_packet(108, loop_mismatch, static_cast<std::uint32_t>(loop_mismatch.size()));
  CHECK(d.kind == pcap::PacketKind::malformed);
  CHECK(pcap::decode_packet(105, ip, static_cast<std::uint32_t>(ip.size())).kind ==
        pcap::PacketKind::unsupported_link);
  CHECK(pcap::decode_packet(1, {}, 0).kind == pcap::PacketKind::malformed);
  CHECK(!pcap::link_type_supported(105));
  CHECK(pcap::link_type_name(276) == "LINUX_SLL2");
  CHECK(pcap::link_type_name(105) == "LINKTYPE 105");
}

TEST_CASE("pcap: magic, then version; say which failed") {
  ReadAll junk = read_all(as_bytes("GET / HTTP/1.1\r\n\r\n"));
  REQUIRE(junk.error);
  CHECK(junk.error->code == Errc::bad_magic);
  CHECK(junk.error->offset == 0);
  CHECK(junk.error->message() == "@0x0: not a pcap file: magic 47455420 is neither libpcap nor pcapng");

  ReadAll raw_dask = read_all(dask_handshake());
  REQUIRE(raw_dask.error);
  CHECK(raw_dask.error->code == Errc::bad_magic);

  Buffer v3 = pcap_header(1);
  v3[4] = 3;
  ReadAll old = read_all(v3);
  REQUIRE(old.error);
  CHECK(old.error->code == Errc::unsupported_version);
  CHECK(old.error->offset == 4);
  CHECK(old.error->what == "pcap version 3.4 unsupported (2.4 expected)");

  PcapngWriter w;
  w.out[12] = 2;  // major version 2
  ReadAll ng = read_all(w.out);
  REQUIRE(ng.error);
  CHECK(ng.error->code == Errc::unsupported_version);
  CHECK(ng.error->what == "pcapng section version 2.0 at 0x0 unsupported (1.0 expected)");

  // A second section with a byte-order magic that is neither order.
  PcapngWriter two;
  two.interface(1);
  const std::size_t at = two.out.size();
  two.section(false);
  two.out[at + 8] = 0x11;
  ReadAll bom = read_all(two.out);
  REQUIRE(bom.error);
  CHECK(bom.error->code == Errc::bad_magic);
  CHECK(bom.error->offset == at + 8);
}

TEST_CASE("pcap: huge and inconsistent lengths are errors, never allocations") {
  const Segment s = sample_segment(false);
  // libpcap record claiming 2^32-1 bytes.
  Buffer file = write_pcap({s}, Link::raw);
  const std::size_t rec = file.size();
  Buffer hdr{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  file.append(hdr);
  ReadAll all = read_all(file);
  REQUIRE(all.packets.size() == 1);
  REQUIRE(all.error);
  CHECK(all.error->code == Errc::limit_exceeded);
  CHECK(all.error->offset == rec + 8);
  CHECK(all.error->what ==
        "pcap record at " + hex_offset(rec) + " claims 0xffffffff captured bytes, over the limit of 0x1000000 (limit max_packet_bytes)");

  // A record longer than the snaplen but within the limit is kept, with a warning.
  PcapOptions small;
  small.snaplen = 64;
  ReadAll lie = read_all(write_pcap({s, s}, Link::raw, small));
  CHECK(!lie.error);
  CHECK(lie.packets.size() == 2);
  REQUIRE(lie.warnings.size() == 1);
  CHECK(lie.warnings[0].kind == DiagnosticKind::record_over_snaplen);
  CHECK(lie.warnings[0].offset == 24);  // the first record, after the file header
  CHECK(lie.warnings[0].text.find("more than the file's snapshot length 64 (kept)") != std::string::npos);

  // The option lowers the limit.
  pcap::ReaderOptions tight;
  tight.max_packet_bytes = 32;
  ReadAll capped = read_all(write_pcap({s}, Link::raw), tight);
  REQUIRE(capped.error);
  CHECK(capped.error->code == Errc::limit_exceeded);

  // pcapng: 2^32-1 is not a multiple of 4.
  PcapngWriter w;
  w.interface(101);
  const std::size_t blk = w.out.size();
  Buffer huge{6, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  Buffer f1 = w.out;
  f1.append(huge);
  ReadAll r1 = read_all(f1);
  REQUIRE(r1.error);
  CHECK(r1.error->code == Errc::bad_value);
  CHECK(r1.error->offset == blk + 4);

  // 0xfffffffc for a packet block: over the limit.
  Buffer f2 = f1;
  f2[blk + 4] = 0xfc;
  ReadAll r2 = read_all(f2);
  REQUIRE(r2.error);
  CHECK(r2.error->code == Errc::limit_exceeded);
  CHECK(r2.error->offset == blk + 4);

  // 0xfffffffc for a block that is skipped: the file ends first.
  Buffer f3 = f2;
  f3[blk] = 0x99;
  ReadAll r3 = read_all(f3);
  REQUIRE(r3.error);
  CHECK(r3.error->code == Errc::truncated);
  CHECK(r3.error->offset == blk);
  CHECK(r3.error->what == "truncated pcapng block at " + hex_offset(blk) + ": needs 4294967292 bytes, 8 left");

  // Length below the minimum.
  Buffer f4 = f1;
  f4[blk + 4] = 8;
  f4[blk + 5] = f4[blk + 6] = f4[blk + 7] = 0;
  ReadAll r4 = read_all(f4);
  REQUIRE(r4.error);
  CHECK(r4.error->code == Errc::bad_value);

  // Trailing length that differs from the leading one.
  PcapngWriter t;
  t.interface(101);
  const Buffer pkt = record_of(s, Link::raw).data;
  t.epb(0, 0, pkt, static_cast<std::uint32_t>(pkt.size()));
  t.out[t.out.size() - 4] ^= 0x04;
  ReadAll r5 = read_all(t.out);
  REQUIRE(r5.error);
  CHECK(r5.error->code == Errc::bad_value);
  CHECK(r5.error->what.find("trailing length") != std::string::npos);

  // Captured length beyond its block.
  PcapngWriter c;
  c.interface(101);
  const std::size_t epb = c.out.size();
  c.epb(0, 0, pkt, static_cast<std::uint32_t>(pkt.size()));
  c.out[epb + 20] = 0xff;
  c.out[epb + 21] = 0xff;
  ReadAll r6 = read_all(c.out);
  REQUIRE(r6.error);
  CHECK(r6.error->code == Errc::length_out_of_range);

  // An interface id that the section does not describe.
  PcapngWriter i;
  i.interface(101);
  i.epb(3, 0, pkt, static_cast<std::uint32_t>(pkt.size()));
  ReadAll r7 = read_all(i.out);
  REQUIRE(r7.error);
  CHECK(r7.error->code == Errc::bad_value);
  CHECK(r7.error->what.find("names interface 3, its section describes 1") != std::string::npos);

  // An IDB option whose length runs past the block.
  PcapngWriter o;
  o.interface(101);
  o.out[28 + 16 + 2] = 0xff;  // if_name length
  ReadAll r8 = read_all(o.out);
  REQUIRE(r8.error);
  CHECK(r8.error->code == Errc::length_out_of_range);
}

TEST_CASE("pcap: a file cut at every length is truncated at the partial record") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(false, dask_handshake());
  const std::vector<Segment>& segs = c.segments;
  PcapngWriter ng(true);
  ng.interface(1);
  ng.block(0x00000bad, Buffer(7, 1));
  for (const auto& s : segs) {
    Record r = record_of(s, Link::ethernet);
    ng.epb(0, r.ts_ns / 1000, r.data, r.original);
  }
  ng.section(false);
  ng.interface(101, 0, std::uint8_t{9});
  {
    Record r = record_of(segs[0], Link::raw);
    ng.epb(0, r.ts_ns, r.data, r.original);
  }
  const Buffer files[] = {write_pcap(segs, Link::ethernet), write_pcap(segs, Link::sll, {true, true}), ng.out};
  for (const Buffer& file : files) {
    ReadAll whole = read_all(file);
    REQUIRE(!whole.error);
    // Where each record starts, and where the file could end cleanly.
    std::vector<std::uint64_t> boundaries;
    for (const auto& p : whole.packets) boundaries.push_back(p.offset);
    testsupport::for_each_strict_prefix(file, [&](ByteSpan cut) {
      CAPTURE(cut.size());
      ReadAll part = read_all(cut);
      if (!part.error) {
        // Only a cut at a record boundary reads cleanly, and then it holds
        // exactly the records before the cut.
        std::size_t before = 0;
        while (before < boundaries.size() && boundaries[before] < cut.size()) ++before;
        REQUIRE(part.packets.size() == before);
        for (std::size_t i = 0; i < before; ++i) CHECK(part.data[i] == whole.data[i]);
        return;
      }
      CHECK(part.error->code == Errc::truncated);
      CHECK(part.error->offset <= cut.size());
      CHECK(part.error->what.find("truncated") == 0);
      for (std::size_t i = 0; i < part.packets.size(); ++i) CHECK(part.data[i] == whole.data[i]);
    });
  }
  ReadAll empty = read_all({});
  REQUIRE(empty.error);
  CHECK(empty.error->code == Errc::truncated);
  CHECK(empty.error->message() == "@0x0: truncated capture file header at 0x0: needs 24 bytes, 0 left");
  ReadAll head = read_all(ByteSpan(files[0]).first(30));
  REQUIRE(head.error);
  CHECK(head.error->message() == "@0x18: truncated pcap record header at 0x18: needs 16 bytes, 6 left");
  ReadAll body = read_all(ByteSpan(files[0]).first(50));
  REQUIRE(body.error);
  // The SYN record: 16 + 54 bytes (Ethernet, IPv4, TCP).
  CHECK(body.error->message() == "@0x18: truncated pcap record at 0x18: needs 70 bytes, 26 left");
}

TEST_CASE("pcap: reads a file block by block, seeking over skipped blocks") {
  const Segment s = sample_segment(false);
  PcapngWriter w;
  w.interface(1);
  w.block(0x00000bad, Buffer(std::size_t{3} << 20, 7));  // 3 MiB custom block
  Record r = record_of(s, Link::ethernet);
  w.epb(0, 0, r.data, r.original);
  const auto path = std::filesystem::temp_directory_path() / ("daskcaps-pcap-test-" + std::to_string(::getpid()) + ".pcapng");
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(w.out.data()), static_cast<std::streamsize>(w.out.size()));
  }
  pcap::ReaderOptions o;
  o.max_packet_bytes = 1 << 20;  // the skipped block is larger than the limit
  auto reader = pcap::Reader::open_file(path.string(), o);
  REQUIRE(reader);
  CHECK((*reader)->format() == pcap::FileFormat::pcapng);
  auto p = (*reader)->next();
  REQUIRE(p);
  REQUIRE(*p);
  check_sample(pcap::decode_packet((*p)->link_type, (*p)->data, (*p)->original_length), s, false);
  auto end = (*reader)->next();
  REQUIRE(end);
  CHECK(!*end);
  CHECK((*reader)->offset() == w.out.size());
  std::filesystem::remove(path);

  auto missing = pcap::Reader::open_file("/nonexistent/capture.pcap");
  REQUIRE(!missing);
  CHECK(missing.error().code == Errc::io);
}
