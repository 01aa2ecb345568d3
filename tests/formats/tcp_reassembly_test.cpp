#include "formats/internal/tcp_reassembly.h"

#include <doctest/doctest.h>

#include <algorithm>

#include "support/pcap_builder.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport::pcapb;

namespace {

// Records what a TcpStream delivers: bytes, with each gap as '?' x count.
struct Recorder final : TcpStream::Sink {
  std::string text;
  std::vector<std::uint64_t> gaps;
  void data(ByteSpan bytes) override { text += std::string(as_chars(bytes)); }
  void gap(std::uint64_t count) override {
    gaps.push_back(count);
    text += std::string(static_cast<std::size_t>(count), '?');
  }
};

ByteSpan b(std::string_view s) { return as_bytes(s); }

TcpStream::AddResult add(TcpStream& s, std::uint32_t seq, std::string_view bytes, bool fin = false) {
  return s.add(seq, b(bytes), static_cast<std::uint32_t>(bytes.size()), fin);
}

pcap::IpAddress ip(const std::string& text) {
  pcap::IpAddress a;
  a.v6 = is_v6(text);
  auto bytes = addr_bytes(text);
  std::copy(bytes.begin(), bytes.end(), a.bytes.begin());
  return a;
}

pcap::TcpSegment to_tcp(const Segment& s) {
  pcap::TcpSegment t;
  t.src = ip(s.src);
  t.dst = ip(s.dst);
  t.src_port = s.sport;
  t.dst_port = s.dport;
  t.seq = s.seq;
  t.ack = s.ack;
  t.flags = s.flags;
  t.payload = s.payload;
  t.wire_payload_length = static_cast<std::uint32_t>(s.payload.size());
  return t;
}

struct Run {
  std::vector<CaptureMessage> messages;
  std::vector<ConnectionInfo> connections;
  std::vector<Diagnostic> warnings;
};

Run reassemble(const std::vector<Segment>& segs, const ReassemblyOptions& options = {},
               const Limits& limits = {}) {
  TcpReassembler r(limits, options);
  Run out;
  std::uint64_t at = 0;
  for (const auto& s : segs) {
    r.add(to_tcp(s), static_cast<double>(s.ts_ns) * 1e-9, at++);
    while (r.has_message()) out.messages.push_back(r.take_message());
  }
  r.finish();
  while (r.has_message()) out.messages.push_back(r.take_message());
  out.connections = r.connections();
  out.warnings = r.warnings();
  return out;
}

// Frame 0 of a message as its msgpack "op" (or "handshake").
std::string op_of(const CaptureMessage& m) {
  auto v = msgpack::decode_all(m.message.raw.frames.at(0).bytes());
  REQUIRE(v);
  if (const auto* op = v->find("op")) return op->as_str();
  if (v->find("pickle-protocol")) return "handshake";
  return "?";
}

std::vector<std::string> ops(const Run& r, std::size_t conn, Direction d) {
  std::vector<std::string> out;
  for (const auto& m : r.messages)
    if (m.connection == conn && m.direction == d) out.push_back(op_of(m));
  return out;
}

const Direction c2s = Direction::client_to_server;
const Direction s2c = Direction::server_to_client;

}  // namespace

TEST_CASE("tcp_reassembly: in-order bytes pass straight through") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(100);
  CHECK(add(s, 100, "hello ").duplicate_bytes == 0);
  add(s, 106, "world");
  CHECK(rec.text == "hello world");
  CHECK(s.next_offset() == 11);
  CHECK(s.delivered_bytes() == 11);
  CHECK(s.buffered_pieces() == 0);
}

TEST_CASE("tcp_reassembly: out-of-order segments wait for the hole") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(0);
  add(s, 6, "world");
  add(s, 11, "!");
  CHECK(rec.text.empty());
  CHECK(s.buffered_pieces() == 2);
  CHECK(s.buffered_cost() == 6 + 2 * TcpStream::kPieceOverhead);
  add(s, 0, "hello ");
  CHECK(rec.text == "hello world!");
  CHECK(s.buffered_pieces() == 0);
  CHECK(s.buffered_cost() == 0);
}

TEST_CASE("tcp_reassembly: retransmissions are deduplicated, first copy wins") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(0);
  add(s, 5, "56789");
  // Identical copy of a buffered segment.
  auto same = add(s, 5, "56789");
  CHECK(same.duplicate_bytes == 5);
  CHECK(same.conflict_bytes == 0);
  // A conflicting overlap with the buffered piece: counted, not used.
  auto bad = add(s, 7, "XY");
  CHECK(bad.duplicate_bytes == 2);
  CHECK(bad.conflict_bytes == 2);
  CHECK(bad.conflict_offset == 7);
  // Partly overlapping and partly new.
  auto part = add(s, 3, "3456789ab");
  CHECK(part.duplicate_bytes == 5);
  CHECK(part.conflict_bytes == 0);
  add(s, 0, "012");
  CHECK(rec.text == "0123456789ab");
  // A retransmission of delivered bytes is compared with the history.
  auto late = add(s, 2, "2345");
  CHECK(late.duplicate_bytes == 4);
  CHECK(late.conflict_bytes == 0);
  auto late_bad = add(s, 8, "8Z");
  CHECK(late_bad.conflict_bytes == 1);
  CHECK(late_bad.conflict_offset == 9);
  // A segment spanning delivered and new bytes delivers only the new ones.
  add(s, 10, "abcd");
  CHECK(rec.text == "0123456789abcd");
}

TEST_CASE("tcp_reassembly: a segment covering several buffered pieces fills between them") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(0);
  add(s, 2, "23");
  add(s, 6, "67");
  auto r = add(s, 1, "1X3456Y8");
  CHECK(r.duplicate_bytes == 4);
  CHECK(r.conflict_bytes == 2);  // X over '2', Y over '7'
  CHECK(r.conflict_offset == 2);
  add(s, 0, "0");
  CHECK(rec.text == "012345678");
}

TEST_CASE("tcp_reassembly: history bounds what late retransmissions are compared with") {
  Recorder rec;
  ReassemblyOptions o;
  o.history_bytes = 4;
  TcpStream s(o, rec);
  s.start(0);
  add(s, 0, "0123456789");
  auto r = add(s, 0, "X1234567");
  CHECK(r.duplicate_bytes == 8);
  CHECK(r.unchecked_bytes == 6);  // only bytes 6..9 are remembered
  CHECK(r.conflict_bytes == 0);
  auto r2 = add(s, 6, "6Z");
  CHECK(r2.conflict_bytes == 1);
}

TEST_CASE("tcp_reassembly: sequence numbers wrap around") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(0xfffffffb);
  add(s, 0xfffffffb, "abc");
  add(s, 0x00000001, "ghi");  // after the wrap, out of order
  add(s, 0xfffffffe, "def");  // spans the wrap
  CHECK(rec.text == "abcdefghi");
  CHECK(s.next_offset() == 9);
  auto old = add(s, 0xfffffffc, "bc");
  CHECK(old.duplicate_bytes == 2);
  CHECK(!old.before_start);
  auto before = add(s, 0xfffffff0, "x");
  CHECK(before.before_start);
  CHECK(rec.text == "abcdefghi");
}

TEST_CASE("tcp_reassembly: a hole never filled becomes a gap at finish") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(0);
  add(s, 0, "ab");
  add(s, 5, "fg");
  add(s, 9, "j");
  s.finish();
  CHECK(rec.text == "ab???fg??j");
  CHECK(rec.gaps == std::vector<std::uint64_t>{3, 2});
  CHECK(s.lost_bytes() == 5);
  CHECK(s.delivered_bytes() == 5);
  CHECK(add(s, 2, "cde").duplicate_bytes == 0);  // finished: ignored
  CHECK(rec.text == "ab???fg??j");
}

TEST_CASE("tcp_reassembly: window overflow declares the oldest hole lost") {
  Recorder rec;
  ReassemblyOptions o;
  o.window_bytes = 2 * TcpStream::kPieceOverhead + 10;
  TcpStream s(o, rec);
  s.start(0);
  add(s, 3, "34567");
  add(s, 20, "KLMNO");
  CHECK(rec.text.empty());  // exactly at the window
  add(s, 30, "U");          // over it: the hole at 0..2 is given up
  CHECK(rec.text == "???34567");
  CHECK(s.buffered_pieces() == 2);
  add(s, 8, "89ABCDEFGHIJ");  // fills the next hole and delivers through 'O'
  CHECK(rec.text == "???3456789ABCDEFGHIJKLMNO");
  add(s, 0, "012");  // too late
  CHECK(rec.text == "???3456789ABCDEFGHIJKLMNO");
}

TEST_CASE("tcp_reassembly: bytes a snapshot length cut off are gaps when reached") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(0);
  s.add(4, b("ef"), 4, false);  // on the wire: 4 bytes, captured 2
  CHECK(rec.text.empty());
  s.add(0, b("abcd"), 4, false);
  CHECK(rec.text == "abcdef??");
  s.add(8, b("ij"), 2, false);
  CHECK(rec.text == "abcdef??ij");
  CHECK(s.lost_bytes() == 2);
}

TEST_CASE("tcp_reassembly: FIN ends a direction once every byte before it is in") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(0);
  add(s, 3, "def", true);
  CHECK(!s.fin_reached());
  add(s, 9, "late");  // past the FIN: not part of the stream
  add(s, 0, "abc");
  CHECK(s.fin_reached());
  CHECK(rec.text == "abcdef");
  s.finish();
  CHECK(rec.text == "abcdef");

  Recorder rec2;
  TcpStream t({}, rec2);
  t.start(0);
  add(t, 0, "ab");
  add(t, 4, "", true);  // FIN at 4: bytes 2..3 never seen
  CHECK(!t.fin_reached());
  t.finish();
  CHECK(rec2.text == "ab??");
}

TEST_CASE("tcp_reassembly: a conversation gives handshakes and messages per direction") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(false, dask_handshake());
  c.send(true, concat({dask_op("register-client"), dask_op("heartbeat")}));
  c.send(false, dask_op("stream-start", 5000), 1000);  // several segments
  c.close();
  Run r = reassemble(c.segments);
  REQUIRE(r.connections.size() == 1);
  const ConnectionInfo& info = r.connections[0];
  CHECK(info.id == 0);
  CHECK(info.client == "10.0.0.1:40000");
  CHECK(info.server == "10.0.0.2:8786");
  CHECK(info.saw_syn);
  CHECK(info.ended);
  CHECK(info.messages[0] == 3);
  CHECK(info.messages[1] == 2);
  CHECK(info.skipped[0] == 0);
  CHECK(info.skipped[1] == 0);
  CHECK(info.bytes[0] == dask_handshake().size() + dask_op("register-client").size() + dask_op("heartbeat").size());
  CHECK(info.first_ts == doctest::Approx(1700000000.0));
  CHECK(info.last_ts > info.first_ts);
  CHECK(r.warnings.empty());
  CHECK(ops(r, 0, c2s) == std::vector<std::string>{"handshake", "register-client", "heartbeat"});
  CHECK(ops(r, 0, s2c) == std::vector<std::string>{"handshake", "stream-start"});
  REQUIRE(r.messages.size() == 5);
  CHECK(r.messages[0].at_stream_start());
  CHECK(r.messages[0].index == 0);
  CHECK(r.messages[1].at_stream_start());
  CHECK(!r.messages[2].at_stream_start());
  CHECK(r.messages[2].index == 1);
  CHECK(r.messages[4].message.raw.offset == dask_handshake().size());
}

TEST_CASE("tcp_reassembly: messages come out as soon as their last byte is in") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  const std::size_t first = c.send(true, dask_op("big", 10000));
  TcpReassembler r({}, {});
  for (std::size_t i = 0; i < c.segments.size(); ++i) {
    r.add(to_tcp(c.segments[i]), 1.0 + static_cast<double>(i), i);
    if (i == 3) {
      REQUIRE(r.has_message());  // the handshake, before anything else arrives
      CaptureMessage m = r.take_message();
      CHECK(m.timestamp == 4.0);
    }
    if (i + 1 < c.segments.size() && i >= first) CHECK(!r.has_message());
  }
  REQUIRE(r.has_message());
  CHECK(r.take_message().timestamp == static_cast<double>(c.segments.size()));
}

TEST_CASE("tcp_reassembly: messages in capture order across connections") {
  Conversation a, bconv;
  bconv.cport = 40001;
  a.open();
  bconv.open();
  std::vector<Segment> segs = a.segments;
  segs.insert(segs.end(), bconv.segments.begin(), bconv.segments.end());
  a.segments.clear();
  bconv.segments.clear();
  a.send(true, dask_op("a1"));
  bconv.send(true, dask_op("b1"));
  a.send(true, dask_op("a2"));
  segs.push_back(a.segments[0]);
  segs.push_back(bconv.segments[0]);
  segs.push_back(a.segments[1]);
  Run r = reassemble(segs);
  REQUIRE(r.messages.size() == 3);
  CHECK(op_of(r.messages[0]) == "a1");
  CHECK(r.messages[0].connection == 0);
  CHECK(op_of(r.messages[1]) == "b1");
  CHECK(r.messages[1].connection == 1);
  CHECK(op_of(r.messages[2]) == "a2");
  CHECK(r.connections.size() == 2);
  CHECK(r.connections[1].client == "10.0.0.1:40001");
  CHECK(!r.connections[0].ended);
}

TEST_CASE("tcp_reassembly: reordered, duplicated and conflicting segments in a conversation") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  const std::size_t first = c.send(true, concat({dask_op("one", 3000), dask_op("two", 100)}), 1000);
  const std::size_t last = c.segments.size();
  c.close();
  std::vector<Segment> segs(c.segments.begin(), c.segments.begin() + static_cast<std::ptrdiff_t>(first));
  // Reverse the data segments, retransmit one identically and one with
  // different bytes (which must lose).
  for (std::size_t i = last; i-- > first;) segs.push_back(c.segments[i]);
  segs.push_back(c.segments[first + 1]);
  Segment bad = c.segments[first + 2];
  std::fill(bad.payload.begin(), bad.payload.end(), 0xee);
  const std::uint64_t bad_at = segs.size();  // reassemble() numbers packets from 0
  segs.push_back(bad);
  segs.insert(segs.end(), c.segments.begin() + static_cast<std::ptrdiff_t>(last), c.segments.end());
  Run r = reassemble(segs);
  CHECK(ops(r, 0, c2s) == std::vector<std::string>{"handshake", "one", "two"});
  CHECK(r.connections[0].skipped[0] == 0);
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].kind == DiagnosticKind::retransmission_conflict);
  CHECK(r.warnings[0].offset == bad_at);
  CHECK(r.warnings[0].text.find("connection 0 10.0.0.1:40000->10.0.0.2:8786: 1 retransmitted segment(s) differ from "
                                "the first copy") == 0);
}

TEST_CASE("tcp_reassembly: a capture that starts mid-stream resynchronises") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(false, dask_handshake());
  const Buffer partial = dask_op("cut-in-half", 700);
  const std::size_t mid = c.segments.size();
  c.send(true, concat({partial, dask_op("after", 10)}), 500);
  c.send(false, dask_op("reply"));
  c.close();
  // The capture begins with the second data segment of the client.
  std::vector<Segment> segs(c.segments.begin() + static_cast<std::ptrdiff_t>(mid + 1), c.segments.end());
  Run r = reassemble(segs);
  REQUIRE(r.connections.size() == 1);
  CHECK(!r.connections[0].saw_syn);
  CHECK(r.connections[0].client == "10.0.0.1:40000");  // the first sender
  CHECK(ops(r, 0, c2s) == std::vector<std::string>{"after"});
  CHECK(ops(r, 0, s2c) == std::vector<std::string>{"reply"});
  const CaptureMessage* after = nullptr;
  for (const auto& m : r.messages)
    if (m.direction == c2s) after = &m;
  REQUIRE(after != nullptr);
  CHECK(after->message.skipped_before == partial.size() - 500);
  CHECK(after->message.raw.offset == partial.size() - 500);
  CHECK(!after->at_stream_start());
  CHECK(r.connections[0].skipped[0] == partial.size() - 500);
  CHECK(r.connections[0].lost[0] == 0);
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0] == Diagnostic{DiagnosticKind::bytes_skipped, kNoOffset,
                                    "connection 0 10.0.0.1:40000->10.0.0.2:8786: " +
                                        std::to_string(partial.size() - 500) + " bytes in no message (" +
                                        std::to_string(partial.size() - 500) + " discarded while resynchronising)"});
}

TEST_CASE("tcp_reassembly: a capture that starts with the server's SYN-ACK is in sync") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(false, dask_handshake());
  c.close();
  std::vector<Segment> segs(c.segments.begin() + 1, c.segments.end());
  Run r = reassemble(segs);
  REQUIRE(r.connections.size() == 1);
  CHECK(r.connections[0].saw_syn);
  CHECK(r.connections[0].client == "10.0.0.1:40000");
  CHECK(ops(r, 0, c2s) == std::vector<std::string>{"handshake"});
  CHECK(ops(r, 0, s2c) == std::vector<std::string>{"handshake"});
  CHECK(r.messages[0].at_stream_start());
}

TEST_CASE("tcp_reassembly: a lost segment drops its message, the next ones are found") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  const Buffer victim = dask_op("victim", 2000);
  const std::size_t first = c.send(true, concat({victim, dask_op("survivor")}), 1000);
  c.send(true, dask_op("later"));
  c.close();
  std::vector<Segment> segs = c.segments;
  segs.erase(segs.begin() + static_cast<std::ptrdiff_t>(first + 1));  // bytes 1000..1999 of the victim
  Run r = reassemble(segs);
  CHECK(ops(r, 0, c2s) == std::vector<std::string>{"handshake", "survivor", "later"});
  const ConnectionInfo& info = r.connections[0];
  CHECK(info.lost[0] == 1000);
  CHECK(info.skipped[0] == victim.size());
  CHECK(info.ended);  // the server's ACK of the client's FIN gave the hole up
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0].kind == DiagnosticKind::bytes_lost);
  CHECK(!r.warnings[0].has_offset());
  CHECK(r.warnings[0].text.find("1000 missing from the capture") != std::string::npos);
  for (const auto& m : r.messages)
    if (op_of(m) == "survivor") CHECK(m.message.skipped_before == victim.size());
}

TEST_CASE("tcp_reassembly: an acknowledgement past a hole makes it a gap at once") {
  Recorder rec;
  TcpStream s({}, rec);
  s.start(1000);
  add(s, 1000, "ab");
  add(s, 1005, "fg");
  s.acknowledged(1001);  // behind what we have: nothing to do
  s.acknowledged(1000);
  CHECK(rec.text == "ab");
  s.acknowledged(1004);  // the receiver got bytes 2..3 that the capture lacks
  CHECK(rec.text == "ab??");
  s.acknowledged(1009);  // 4 is lost too; 5..6 are here; 7..8 lost
  CHECK(rec.text == "ab???fg??");
  CHECK(s.lost_bytes() == 5);
  add(s, 1009, "j", true);  // FIN at offset 10
  s.acknowledged(1011);     // the ACK of the FIN covers no byte
  CHECK(rec.text == "ab???fg??j");
  CHECK(s.fin_reached());
  // Sequence numbers wrap for acknowledgements too.
  Recorder rec2;
  TcpStream w({}, rec2);
  w.start(0xfffffffe);
  add(w, 0x00000001, "d");
  w.acknowledged(0x00000002);
  CHECK(rec2.text == "???d");
}

TEST_CASE("tcp_reassembly: a capture drop is given up when the receiver acknowledges it") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(false, dask_handshake());
  const std::size_t lost = c.send(true, dask_op("dropped", 3000), 1000);
  c.send(true, dask_op("after-drop"));
  c.segments.push_back(c.make(false, kAck));  // the server acknowledges everything
  const std::size_t ack_at = c.segments.size() - 1;
  c.send(false, dask_op("reply"));
  std::vector<Segment> segs = c.segments;
  segs.erase(segs.begin() + static_cast<std::ptrdiff_t>(lost + 1));
  TcpReassembler r({}, {});
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    r.add(to_tcp(segs[i]), static_cast<double>(i), i);
    while (r.has_message()) {
      CaptureMessage m = r.take_message();
      if (op_of(m) == "after-drop") CHECK(m.timestamp == static_cast<double>(ack_at - 1));
      seen.push_back(op_of(m));
    }
  }
  // Out before the end of the capture, in capture order.
  CHECK(seen == std::vector<std::string>{"handshake", "handshake", "after-drop", "reply"});
  CHECK(r.connections()[0].lost[0] == 1000);
}

TEST_CASE("tcp_reassembly: a small window gives up a hole early and keeps streaming") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  const std::size_t lost = c.send(true, dask_op("lost", 100));
  for (int i = 0; i < 20; ++i) c.send(true, dask_op(std::string("m").append(std::to_string(i)), 200));
  std::vector<Segment> segs = c.segments;
  segs.erase(segs.begin() + static_cast<std::ptrdiff_t>(lost));
  ReassemblyOptions o;
  o.window_bytes = 1000;
  TcpReassembler r({}, o);
  std::size_t seen = 0;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    r.add(to_tcp(segs[i]), 0, i);
    while (r.has_message()) {
      r.take_message();
      ++seen;
    }
  }
  // Before the end of the capture almost every message is out.
  CHECK(seen >= 17);
  r.finish();
  while (r.has_message()) {
    r.take_message();
    ++seen;
  }
  CHECK(seen == 21);
  CHECK(r.connections()[0].lost[0] == dask_op("lost", 100).size());
}

TEST_CASE("tcp_reassembly: sequence wrap inside a conversation") {
  Conversation c;
  c.cseq = 0xfffff000;
  c.sseq = 0xffffffff;
  c.open();
  c.send(true, dask_handshake());
  c.send(false, dask_handshake());
  c.send(true, dask_op("across", 9000));
  c.send(false, dask_op("reply", 100));
  c.close();
  CHECK(c.cseq < 0x10000);  // it did wrap
  std::vector<Segment> segs = c.segments;
  std::swap(segs[6], segs[8]);  // some reordering across the wrap
  Run r = reassemble(segs);
  CHECK(ops(r, 0, c2s) == std::vector<std::string>{"handshake", "across"});
  CHECK(ops(r, 0, s2c) == std::vector<std::string>{"handshake", "reply"});
  CHECK(r.connections[0].ended);
  CHECK(r.warnings.empty());
}

TEST_CASE("tcp_reassembly: a reused 4-tuple after close is a new connection") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(true, dask_op("first-life"));
  c.close();
  c.segments.push_back(c.make(false, kAck));  // a late ACK of the old one
  c.cseq += 100000;
  c.sseq += 200000;
  c.open();
  c.segments.push_back(c.segments[c.segments.size() - 3]);  // retransmitted SYN
  c.send(true, dask_handshake());
  c.send(true, dask_op("second-life"));
  c.rst(false);
  Run r = reassemble(c.segments);
  REQUIRE(r.connections.size() == 2);
  CHECK(r.connections[0].client == r.connections[1].client);
  CHECK(r.connections[0].ended);
  CHECK(r.connections[1].ended);  // by RST
  CHECK(r.connections[1].saw_syn);
  CHECK(ops(r, 0, c2s) == std::vector<std::string>{"handshake", "first-life"});
  CHECK(ops(r, 1, c2s) == std::vector<std::string>{"handshake", "second-life"});
  CHECK(r.warnings.empty());
}

TEST_CASE("tcp_reassembly: a new SYN on an open 4-tuple ends the old connection") {
  Conversation c;
  c.open();
  c.send(true, dask_handshake());
  c.send(true, dask_op("x", 10));
  c.cseq += 5000;
  c.open();
  c.send(true, dask_handshake());
  Run r = reassemble(c.segments);
  REQUIRE(r.connections.size() == 2);
  CHECK(!r.connections[0].ended);
  CHECK(r.connections[0].messages[0] == 2);
  CHECK(r.connections[1].messages[0] == 1);
}

TEST_CASE("tcp_reassembly: only the chosen connection and direction are extracted") {
  Conversation a, bconv;
  bconv.cport = 41000;
  for (Conversation* c : {&a, &bconv}) {
    c->open();
    c->send(true, dask_handshake());
    c->send(false, dask_handshake());
    c->send(false, dask_op("reply"));
  }
  std::vector<Segment> segs = a.segments;
  segs.insert(segs.end(), bconv.segments.begin(), bconv.segments.end());
  ReassemblyOptions o;
  o.only_connection = 1;
  o.only_direction = s2c;
  Run r = reassemble(segs, o);
  REQUIRE(r.messages.size() == 2);
  for (const auto& m : r.messages) {
    CHECK(m.connection == 1);
    CHECK(m.direction == s2c);
  }
  REQUIRE(r.connections.size() == 2);
  CHECK(r.connections[0].bytes[0] == dask_handshake().size());  // still counted
  CHECK(r.connections[0].messages[0] == 0);
}

TEST_CASE("tcp_reassembly: a stream that is not Dask is reported, others go on") {
  Conversation web;
  web.sport = 80;
  web.open();
  web.send(true, Buffer(as_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n").begin(),
                        as_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n").end()));
  Conversation dask;
  dask.open();
  dask.send(true, dask_handshake());
  std::vector<Segment> segs = web.segments;
  segs.insert(segs.end(), dask.segments.begin(), dask.segments.end());
  Run r = reassemble(segs);
  REQUIRE(r.connections.size() == 2);
  CHECK(ops(r, 1, c2s) == std::vector<std::string>{"handshake"});
  REQUIRE(r.warnings.size() == 1);
  INFO(r.warnings[0].text);
  CHECK(r.warnings[0].kind == DiagnosticKind::not_dask);
  CHECK(r.warnings[0].text.find("connection 0 10.0.0.1:40000->10.0.0.2:80: not a Dask stream at stream offset 0x8: frame count") ==
        0);
  // Found while the packet with the request was read (reassemble() numbers
  // packets from 0): the file offset of that packet.
  std::uint64_t request_at = 0;
  while (request_at < web.segments.size() && web.segments[request_at].payload.empty()) ++request_at;
  CHECK(r.warnings[0].offset == request_at);
}

TEST_CASE("tcp_reassembly: IPv6 endpoints are bracketed") {
  Conversation c;
  c.client = "::1";
  c.server = "::1";
  c.open();
  c.send(true, dask_handshake());
  Run r = reassemble(c.segments);
  REQUIRE(r.connections.size() == 1);
  CHECK(r.connections[0].client == "[::1]:40000");
  CHECK(r.connections[0].server == "[::1]:8786");
  CHECK(r.messages.size() == 1);
}

TEST_CASE("tcp_reassembly: a refused connection is listed, a stray reset is not") {
  Conversation c;
  c.segments.push_back(c.make(true, kSyn));
  c.segments.push_back(c.make(false, kRst | kAck));
  Conversation stray;
  stray.cport = 50000;
  stray.rst(true);
  std::vector<Segment> segs = c.segments;
  segs.push_back(stray.segments[0]);
  Run r = reassemble(segs);
  REQUIRE(r.connections.size() == 1);
  CHECK(r.connections[0].saw_syn);
  CHECK(r.connections[0].ended);
  CHECK(r.connections[0].bytes[0] == 0);
  CHECK(r.messages.empty());
}

TEST_CASE("tcp_reassembly: direction names") {
  CHECK(to_string(c2s) == "client_to_server");
  CHECK(parse_direction("s2c") == s2c);
  CHECK(parse_direction("server_to_client") == s2c);
  CHECK(!parse_direction("up"));
}
