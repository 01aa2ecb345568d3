#include "formats/internal/capture.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/pcap_builder.h"
#include "support/prefixes.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport::pcapb;

namespace {

const Direction c2s = Direction::client_to_server;
const Direction s2c = Direction::server_to_client;

struct Result_ {
  std::vector<CaptureMessage> messages;
  std::vector<ConnectionInfo> connections;
  std::vector<Diagnostic> warnings;
  CaptureStats stats;
  std::optional<Error> error;
};

Result_ read_capture(ByteSpan file, const CaptureOptions& options = {}, const Limits& limits = {}) {
  Result_ out;
  auto reader = PcapMessageReader::open_memory(file, limits, options);
  if (!reader) {
    out.error = reader.error();
    return out;
  }
  for (;;) {
    auto m = (*reader)->next();
    if (!m) {
      out.error = m.error();
      // The error sticks.
      auto again = (*reader)->next();
      CHECK(!again);
      if (!again) CHECK(again.error().offset == out.error->offset);
      break;
    }
    if (!*m) break;
    out.messages.push_back(std::move(**m));
  }
  out.connections = (*reader)->connections();
  out.warnings = (*reader)->warnings();
  out.stats = (*reader)->stats();
  return out;
}

Buffer wire_of(const CaptureMessage& m) {
  return encode_message(std::span<const Bytes>(m.message.raw.memory_frames()));
}

std::vector<Buffer> wires(const Result_& r, std::size_t conn, Direction d) {
  std::vector<Buffer> out;
  for (const auto& m : r.messages)
    if (m.connection == conn && m.direction == d) out.push_back(wire_of(m));
  return out;
}

// A small complete conversation between two endpoints.
struct Sample {
  Conversation conv;
  std::vector<Buffer> c2s_msgs, s2c_msgs;
};

Sample sample(const std::string& client, const std::string& server, std::uint16_t cport = 40000) {
  Sample s;
  s.conv.client = client;
  s.conv.server = server;
  s.conv.cport = cport;
  s.c2s_msgs = {dask_handshake(), dask_op("register-client"), dask_op("update-graph", 3000, 5000)};
  s.s2c_msgs = {dask_handshake(4), dask_op("stream-start"), dask_op("key-in-memory", 20)};
  s.conv.open();
  s.conv.send(true, s.c2s_msgs[0]);
  s.conv.send(false, s.s2c_msgs[0]);
  s.conv.send(true, concat({s.c2s_msgs[1], s.c2s_msgs[2]}));
  s.conv.send(false, concat({s.s2c_msgs[1], s.s2c_msgs[2]}));
  s.conv.close();
  return s;
}

void check_sample(const Result_& r, const Sample& s, const std::string& client, const std::string& server) {
  REQUIRE(!r.error);
  REQUIRE(r.connections.size() == 1);
  const ConnectionInfo& c = r.connections[0];
  CHECK(c.client == client);
  CHECK(c.server == server);
  CHECK(c.saw_syn);
  CHECK(c.ended);
  CHECK(c.messages[0] == 3);
  CHECK(c.messages[1] == 3);
  CHECK(c.skipped[0] == 0);
  CHECK(c.skipped[1] == 0);
  CHECK(wires(r, 0, c2s) == s.c2s_msgs);
  CHECK(wires(r, 0, s2c) == s.s2c_msgs);
  REQUIRE(r.messages.size() == 6);
  CHECK(r.messages[0].at_stream_start());
  CHECK(r.messages[0].direction == c2s);
  CHECK(r.messages[1].at_stream_start());
  CHECK(r.messages[1].direction == s2c);
  CHECK(r.warnings.empty());
}

}  // namespace

TEST_CASE("capture: every link type, IPv4 and IPv6, pcap and pcapng in both byte orders") {
  for (Link l : kAllLinks) {
    for (bool v6 : {false, true}) {
      CAPTURE(link_name(l));
      CAPTURE(v6);
      const Sample s = v6 ? sample("::1", "::1") : sample("127.0.0.1", "127.0.0.1");
      const std::string client = v6 ? "[::1]:40000" : "127.0.0.1:40000";
      const std::string server = v6 ? "[::1]:8786" : "127.0.0.1:8786";
      for (bool be : {false, true}) {
        CAPTURE(be);
        check_sample(read_capture(write_pcap(s.conv.segments, l, {be, be})), s, client, server);
        check_sample(read_capture(write_pcapng(s.conv.segments, l, be)), s, client, server);
      }
    }
  }
}

TEST_CASE("capture: timestamps from nanosecond files; message time is when its last byte came") {
  Sample s = sample("10.1.1.1", "10.1.1.2");
  PcapOptions o;
  o.nanoseconds = true;
  Result_ r = read_capture(write_pcap(s.conv.segments, Link::ethernet, o));
  REQUIRE(r.messages.size() == 6);
  // Segments are 1000 ns apart from 1700000000 s; the client's handshake is
  // the 4th segment (index 3).
  CHECK(r.messages[0].timestamp == doctest::Approx(1700000000.000003).epsilon(1e-15));
  CHECK(r.connections[0].first_ts == doctest::Approx(1700000000.0).epsilon(1e-15));
  for (std::size_t i = 1; i < r.messages.size(); ++i) CHECK(r.messages[i].timestamp >= r.messages[i - 1].timestamp);
}

TEST_CASE("capture: reordering, retransmission (same and conflicting) and overlap") {
  Sample s = sample("10.0.0.1", "10.0.0.2");
  Conversation& c = s.conv;
  // Find the client's data segments after the handshakes.
  std::vector<std::size_t> client_data;
  for (std::size_t i = 0; i < c.segments.size(); ++i)
    if (c.segments[i].src == c.client && !c.segments[i].payload.empty()) client_data.push_back(i);
  REQUIRE(client_data.size() >= 4);
  std::vector<Segment> segs = c.segments;
  std::swap(segs[client_data[1]], segs[client_data[3]]);
  // An identical retransmission, an overlapping one spanning two segments,
  // and a conflicting copy.
  Segment overlap = c.segments[client_data[1]];
  const Segment& next = c.segments[client_data[2]];
  overlap.payload.append(next.payload.data(), 100);
  Segment conflicting = c.segments[client_data[2]];
  conflicting.payload[10] ^= 0xff;
  segs.insert(segs.begin() + static_cast<std::ptrdiff_t>(client_data[3] + 1),
              {c.segments[client_data[1]], overlap, conflicting});
  Result_ r = read_capture(write_pcap(segs, Link::sll2));
  REQUIRE(!r.error);
  CHECK(wires(r, 0, c2s) == s.c2s_msgs);
  CHECK(wires(r, 0, s2c) == s.s2c_msgs);
  CHECK(r.connections[0].skipped[0] == 0);
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].kind == DiagnosticKind::retransmission_conflict);
  CHECK(r.warnings[0].text.find("connection 0 10.0.0.1:40000->10.0.0.2:8786: 1 retransmitted segment(s) differ from "
                                "the first copy (1 bytes") == 0);
  // The offset is the packet of the conflicting copy, also named in the text.
  REQUIRE(r.warnings[0].has_offset());
  CHECK(r.warnings[0].text.find("packet at " + hex_offset(r.warnings[0].offset) + ")") != std::string::npos);
}

TEST_CASE("capture: a capture that starts mid-stream reports skipped bytes and finds the next message") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(false, dask_handshake());
  const Buffer cut = dask_op("gather", 2500);
  const std::size_t at = c.send(true, concat({cut, dask_op("after-cut"), dask_op("more")}), 1000);
  c.send(false, dask_op("reply", 10));
  std::vector<Segment> segs(c.segments.begin() + static_cast<std::ptrdiff_t>(at + 1), c.segments.end());
  Result_ r = read_capture(write_pcapng(segs, Link::ethernet));
  REQUIRE(!r.error);
  REQUIRE(r.connections.size() == 1);
  CHECK(!r.connections[0].saw_syn);
  CHECK(wires(r, 0, c2s) == std::vector<Buffer>{dask_op("after-cut"), dask_op("more")});
  CHECK(wires(r, 0, s2c) == std::vector<Buffer>{dask_op("reply", 10)});
  CHECK(r.connections[0].skipped[0] == cut.size() - 1000);
  REQUIRE(!r.messages.empty());
  CHECK(r.messages[0].message.skipped_before == cut.size() - 1000);
  CHECK(!r.messages[0].at_stream_start());
  REQUIRE(r.warnings.size() == 1);
  // Every byte was captured, only not in a message: skipped, not lost.
  CHECK(r.warnings[0].kind == DiagnosticKind::bytes_skipped);
  CHECK(!r.warnings[0].has_offset());
  CHECK(r.warnings[0].text.find("discarded while resynchronising") != std::string::npos);
}

TEST_CASE("capture: a lost segment becomes a gap; sequence numbers wrap") {
  Conversation c;
  c.cseq = 0xffffff00;
  c.open();
  c.send(true, dask_handshake());
  const Buffer victim = dask_op("victim", 3000);
  const std::size_t at = c.send(true, concat({victim, dask_op("next-one")}), 1000);
  c.close();
  std::vector<Segment> segs = c.segments;
  segs.erase(segs.begin() + static_cast<std::ptrdiff_t>(at + 2));
  Result_ r = read_capture(write_pcap(segs, Link::raw));
  REQUIRE(!r.error);
  CHECK(wires(r, 0, c2s) == std::vector<Buffer>{dask_handshake(), dask_op("next-one")});
  CHECK(r.connections[0].lost[0] == 1000);
  CHECK(r.connections[0].skipped[0] == victim.size());
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0] == Diagnostic{DiagnosticKind::bytes_lost, kNoOffset,
                                    "connection 0 10.0.0.1:40000->10.0.0.2:8786: " + std::to_string(victim.size()) +
                                        " bytes in no message (1000 missing from the capture, " +
                                        std::to_string(victim.size() - 1000) + " discarded while resynchronising)"});
}

TEST_CASE("capture: a reused 4-tuple is a new connection") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.close();
  c.cseq += 77777;
  c.open();
  c.send(true, dask_handshake(4));
  c.close();
  Result_ r = read_capture(write_pcap(c.segments, Link::ethernet));
  REQUIRE(r.connections.size() == 2);
  CHECK(wires(r, 0, c2s) == std::vector<Buffer>{dask_handshake()});
  CHECK(wires(r, 1, c2s) == std::vector<Buffer>{dask_handshake(4)});
  CHECK(r.connections[0].ended);
  CHECK(r.connections[1].ended);
}

TEST_CASE("capture: port filter and connection/direction choice") {
  Sample a = sample("10.0.0.1", "10.0.0.2", 40000);
  Sample other = sample("10.0.0.1", "10.0.0.2", 40001);
  for (auto& seg : other.conv.segments) (seg.sport == 8786 ? seg.sport : seg.dport) = 9999;
  std::vector<Segment> segs = a.conv.segments;
  segs.insert(segs.end(), other.conv.segments.begin(), other.conv.segments.end());
  const Buffer file = write_pcap(segs, Link::ethernet);

  Result_ all = read_capture(file);
  CHECK(all.connections.size() == 2);
  CHECK(all.messages.size() == 12);

  CaptureOptions ports;
  ports.ports = {8786};
  Result_ filtered = read_capture(file, ports);
  REQUIRE(filtered.connections.size() == 1);
  CHECK(filtered.connections[0].server == "10.0.0.2:8786");
  CHECK(filtered.stats.filtered_out == other.conv.segments.size());

  CaptureOptions one;
  one.reassembly.only_connection = 1;
  one.reassembly.only_direction = s2c;
  Result_ chosen = read_capture(file, one);
  CHECK(chosen.connections.size() == 2);
  CHECK(wires(chosen, 1, s2c) == other.s2c_msgs);
  CHECK(chosen.messages.size() == 3);
}

TEST_CASE("capture: fragments, snapshot cuts and other traffic are counted and reported") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  const std::size_t big = c.send(true, dask_op("big", 500));
  c.send(true, dask_op("after"));
  std::vector<Segment> segs = c.segments;
  segs[big].snap = 14 + 20 + 20 + 100;  // cut by the snapshot length
  Segment frag = segs[big];
  frag.frag_offset = 100;
  frag.snap.reset();
  segs.push_back(frag);
  Segment cut_header = segs[big];
  cut_header.snap = 20;
  segs.push_back(cut_header);
  Result_ r = read_capture(write_pcap(segs, Link::ethernet));
  REQUIRE(!r.error);
  CHECK(wires(r, 0, c2s) == std::vector<Buffer>{dask_handshake(), dask_op("after")});
  CHECK(r.stats.fragments == 1);
  CHECK(r.stats.cut_segments == 1);
  CHECK(r.stats.cut_headers == 1);
  CHECK(r.stats.packets == segs.size());
  REQUIRE(r.warnings.size() == 4);
  CHECK(r.warnings[0].kind == DiagnosticKind::packets_skipped);
  CHECK(r.warnings[0].text == "1 non-first IP fragment(s) skipped (first packet at " +
                                  hex_offset(r.warnings[0].offset) + ")");
  CHECK(r.warnings[1].kind == DiagnosticKind::segments_cut);
  CHECK(r.warnings[1].text.find("1 TCP segment(s) cut by the snapshot length") == 0);
  CHECK(r.warnings[2].kind == DiagnosticKind::packets_skipped);
  CHECK(r.warnings[2].text.find("1 packet(s) cut by the snapshot length inside a header skipped") == 0);
  CHECK(r.warnings[3].kind == DiagnosticKind::bytes_lost);
  CHECK(r.warnings[3].text.find("missing from the capture") != std::string::npos);
  // The packets were appended in this order: the cut one, the fragment,
  // the one cut inside a header.
  CHECK(r.warnings[1].offset < r.warnings[0].offset);
  CHECK(r.warnings[0].offset < r.warnings[2].offset);
  CHECK(r.connections[0].lost[0] == dask_op("big", 500).size() - 100);
}

TEST_CASE("capture: a pcapng interface with an unsupported link type is skipped with a warning") {
  Sample s = sample("10.0.0.1", "10.0.0.2");
  PcapngWriter w;
  w.interface(105);  // IEEE 802.11
  w.interface(1);
  for (const auto& seg : s.conv.segments) {
    Record rec = record_of(seg, Link::ethernet);
    w.epb(0, 0, rec.data, rec.original);
    w.epb(1, 0, rec.data, rec.original);
  }
  Result_ r = read_capture(w.out);
  REQUIRE(!r.error);
  CHECK(wires(r, 0, c2s) == s.c2s_msgs);
  CHECK(r.stats.unsupported_link == s.conv.segments.size());
  REQUIRE(r.warnings.size() == 2);
  CHECK(r.warnings[0].kind == DiagnosticKind::unsupported_link);
  CHECK(r.warnings[0].offset == 0x1c);
  CHECK(r.warnings[0].text.find("pcapng interface 0 at 0x1c: link type LINKTYPE 105 unsupported") == 0);
  CHECK(r.warnings[1].kind == DiagnosticKind::packets_skipped);
  CHECK(r.warnings[1].text.find(std::to_string(s.conv.segments.size()) + " packet(s) on an unsupported link type") == 0);
}

TEST_CASE("capture: not a pcap file, unsupported libpcap link type") {
  Result_ r = read_capture(dask_handshake());
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::bad_magic);
  CHECK(r.error->what.find("not a pcap file") == 0);
  Buffer wifi = pcap_header(105);
  Result_ w = read_capture(wifi);
  REQUIRE(w.error);
  CHECK(w.error->code == Errc::unsupported);
  CHECK(w.error->offset == 20);
  CHECK(w.error->what.find("pcap link type LINKTYPE 105 unsupported") == 0);
  CHECK(PcapMessageReader::sniff(wifi));
  CHECK(!PcapMessageReader::sniff(dask_handshake()));
}

TEST_CASE("capture: a file cut at every length: fewer messages or a truncated error, never more") {
  Sample s = sample("10.0.0.1", "10.0.0.2");
  const Buffer files[] = {write_pcap(s.conv.segments, Link::ethernet), write_pcapng(s.conv.segments, Link::sll, true)};
  for (const Buffer& file : files) {
    Result_ whole = read_capture(file);
    REQUIRE(!whole.error);
    testsupport::for_each_strict_prefix(file, [&](ByteSpan cut) {
      CAPTURE(cut.size());
      Result_ part = read_capture(cut);
      if (part.error) CHECK(part.error->code == Errc::truncated);
      CHECK(part.messages.size() <= whole.messages.size());
      for (std::size_t i = 0; i < part.messages.size(); ++i) CHECK(wire_of(part.messages[i]) == wire_of(whole.messages[i]));
      CaptureOptions tolerant;
      tolerant.tolerate_truncation = true;
      Result_ t = read_capture(cut, tolerant);
      if (cut.size() >= (file[0] == 0x0a ? 28u : 24u)) {
        CHECK(!t.error);
        if (part.error) {
          REQUIRE(!t.warnings.empty());
          CHECK(t.warnings[0].kind == DiagnosticKind::capture_truncated);
          CHECK(t.warnings[0].offset == part.error->offset);
          CHECK(t.warnings[0].text.find("capture ends inside a record: ") == 0);
        }
      }
    });
  }
}

TEST_CASE("capture: huge lengths stop the capture with the file offset") {
  Sample s = sample("10.0.0.1", "10.0.0.2");
  Buffer file = write_pcap(s.conv.segments, Link::ethernet);
  const std::size_t at = file.size();
  const Buffer bad{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  file.append(bad);
  Result_ r = read_capture(file);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::limit_exceeded);
  CHECK(r.error->offset == at + 8);
  // Messages completed before the bad record were already handed out.
  CHECK(r.messages.size() == 6);

  PcapngWriter w;
  w.interface(1);
  const std::size_t blk = w.out.size();
  const Buffer huge{6, 0, 0, 0, 0xfc, 0xff, 0xff, 0xff};
  w.out.append(huge);
  Result_ ng = read_capture(w.out);
  REQUIRE(ng.error);
  CHECK(ng.error->code == Errc::limit_exceeded);
  CHECK(ng.error->offset == blk + 4);
}

TEST_CASE("capture: random corruption gives errors or warnings, never a crash") {
  // A deterministic mini fuzz over both formats (run it under the sanitizers).
  Sample s = sample("10.0.0.1", "10.0.0.2");
  std::vector<Segment> segs = s.conv.segments;
  segs.push_back(segs[5]);  // a retransmission
  std::swap(segs[6], segs[7]);
  const Buffer files[] = {write_pcap(segs, Link::ethernet_vlan), write_pcapng(segs, Link::sll2, true, 9)};
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto rnd = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::size_t errors = 0, clean = 0;
  for (const Buffer& file : files) {
    for (int round = 0; round < 1500; ++round) {
      Buffer bad = file;
      const int edits = 1 + static_cast<int>(rnd() % 4);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = rnd() % bad.size();
        switch (rnd() % 3) {
          case 0: bad[at] = static_cast<std::uint8_t>(rnd()); break;
          case 1: bad[at] ^= static_cast<std::uint8_t>(1u << (rnd() % 8)); break;
          default: bad[at] = (rnd() % 2) ? 0xff : 0x00; break;
        }
      }
      Result_ r = read_capture(bad);
      if (r.error) {
        ++errors;
        CHECK(r.error->what.size() > 0);
      } else {
        ++clean;
      }
      CHECK(r.messages.size() <= 64);
    }
  }
  CHECK(errors > 0);
  CHECK(clean > 0);
}

TEST_CASE("capture: reads a file from disk") {
  Sample s = sample("127.0.0.1", "127.0.0.1");
  const Buffer file = write_pcap(s.conv.segments, Link::null_le);
  const auto path = std::filesystem::temp_directory_path() /
                    ("daskcaps-capture-test-" + std::to_string(::getpid()) + ".pcap");
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  }
  auto reader = PcapMessageReader::open(path.string(), {}, {});
  REQUIRE(reader);
  CHECK((*reader)->format() == pcap::FileFormat::pcap);
  std::size_t n = 0;
  for (;;) {
    auto m = (*reader)->next();
    REQUIRE(m);
    if (!*m) break;
    ++n;
  }
  CHECK(n == 6);
  CHECK((*reader)->connections().size() == 1);
  std::filesystem::remove(path);
  auto missing = PcapMessageReader::open(path.string(), {}, {});
  REQUIRE(!missing);
  CHECK(missing.error().code == Errc::io);
}
