#include "formats/internal/tcp_reassembly.h"

#include <algorithm>
#include <cstring>

namespace daskcaps::formats {

// --- connections ------------------------------------------------------------

class DirectionSink;

struct TcpReassembler::Connection {
  struct Side {
    std::unique_ptr<DirectionSink> sink;
    std::unique_ptr<TcpStream> stream;
    std::optional<MessageExtractor> extractor;
    bool extract = false;
    bool failed = false;
    bool isn_known = false;  // from its SYN, or the peer's SYN-ACK
    std::uint32_t isn = 0;
    std::uint64_t message_bytes = 0;
    std::uint64_t need_left = 0;
    std::uint64_t conflicts = 0;
    std::uint64_t conflict_bytes = 0;
    std::uint64_t first_conflict_offset = 0;
    std::uint64_t first_conflict_packet = 0;
  };
  std::size_t id = 0;
  Endpoint client, server;
  Side side[2];
};

class DirectionSink final : public TcpStream::Sink {
 public:
  DirectionSink(TcpReassembler& owner, TcpReassembler::Connection& conn, Direction dir)
      : owner_(owner), conn_(conn), dir_(dir) {}

  void data(ByteSpan bytes) override {
    auto& side = conn_.side[static_cast<int>(dir_)];
    if (!side.extractor || side.failed) return;
    side.extractor->push(bytes);
    if (bytes.size() < side.need_left) {
      side.need_left -= bytes.size();
      return;
    }
    drain();
  }
  void gap(std::uint64_t count) override {
    auto& side = conn_.side[static_cast<int>(dir_)];
    if (!side.extractor || side.failed) return;
    side.extractor->gap(count);
    side.need_left = 0;
    drain();  // complete messages before the hole are kept by the extractor
  }

  void drain() {
    auto& side = conn_.side[static_cast<int>(dir_)];
    for (;;) {
      auto step = side.extractor->next();
      if (!step) {
        side.failed = true;
        Error e = std::move(step).error();
        owner_.warnings_.push_back(Diagnostic{
            DiagnosticKind::not_dask, owner_.packet_at_,
            owner_.describe(conn_, dir_) + ": not a Dask stream at stream offset " + hex_offset(e.offset) +
                ": " + e.what + "; rest of this direction skipped"});
        return;
      }
      if (!*step) {
        side.need_left = side.extractor->pending_need();
        return;
      }
      CaptureMessage m;
      m.connection = conn_.id;
      m.direction = dir_;
      m.timestamp = owner_.now_;
      m.index = owner_.infos_[conn_.id].messages[static_cast<int>(dir_)]++;
      m.message = std::move(**step);
      side.message_bytes += m.message.raw.wire_size;
      owner_.queue_.push_back(std::move(m));
    }
  }

 private:
  TcpReassembler& owner_;
  TcpReassembler::Connection& conn_;
  Direction dir_;
};

std::string TcpReassembler::describe(const Connection& c, Direction d) const {
  const ConnectionInfo& info = infos_[c.id];
  const bool c2s = d == Direction::client_to_server;
  return "connection " + std::to_string(c.id) + " " + (c2s ? info.client : info.server) + "->" +
         (c2s ? info.server : info.client);
}

TcpReassembler::TcpReassembler(const Limits& limits, const ReassemblyOptions& options)
    : limits_(limits), options_(options) {}

TcpReassembler::~TcpReassembler() = default;

namespace {
std::string endpoint_text(const pcap::IpAddress& addr, std::uint16_t port) {
  return addr.to_string() + ":" + std::to_string(port);
}
}  // namespace

TcpReassembler::Connection& TcpReassembler::open_connection(const Key& key, const Endpoint& client,
                                                            double ts) {
  auto conn = std::make_unique<Connection>();
  conn->id = infos_.size();
  conn->client = client;
  conn->server = client == key.first ? key.second : key.first;
  ConnectionInfo info;
  info.id = conn->id;
  info.client = endpoint_text(conn->client.addr, conn->client.port);
  info.server = endpoint_text(conn->server.addr, conn->server.port);
  info.first_ts = info.last_ts = ts;
  infos_.push_back(std::move(info));
  for (int d = 0; d < 2; ++d) {
    const Direction dir = static_cast<Direction>(d);
    auto& side = conn->side[d];
    side.sink = std::make_unique<DirectionSink>(*this, *conn, dir);
    side.stream = std::make_unique<TcpStream>(options_, *side.sink);
    side.extract = (!options_.only_connection || *options_.only_connection == conn->id) &&
                   (!options_.only_direction || *options_.only_direction == dir);
  }
  last_id_[key] = conn->id;
  auto& slot = active_[key];
  slot = std::move(conn);
  return *slot;
}

namespace {
// Starts a direction whose initial sequence number is known: in sync.
void start_side(TcpReassembler::Connection::Side& side, std::uint32_t isn, bool in_sync,
                const Limits& limits) {
  side.isn_known = true;
  side.isn = isn;
  side.stream->start(isn + 1);
  if (side.extract) side.extractor.emplace(limits, in_sync);
}
}  // namespace

void TcpReassembler::end_connection(Connection& c, bool rst) {
  ConnectionInfo& info = infos_[c.id];
  const bool ended = rst || (c.side[0].stream->fin_seen() && c.side[1].stream->fin_seen());
  for (int d = 0; d < 2; ++d) {
    auto& side = c.side[d];
    const Direction dir = static_cast<Direction>(d);
    side.stream->finish();
    const std::uint64_t delivered = side.stream->delivered_bytes();
    const std::uint64_t lost = side.stream->lost_bytes();
    info.bytes[d] = delivered;
    info.lost[d] = lost;
    if (side.conflicts > 0)
      warnings_.push_back(Diagnostic{
          DiagnosticKind::retransmission_conflict, side.first_conflict_packet,
          describe(c, dir) + ": " + std::to_string(side.conflicts) +
              " retransmitted segment(s) differ from the first copy (" +
              std::to_string(side.conflict_bytes) + " bytes, first at stream offset " +
              hex_offset(side.first_conflict_offset) + ", packet at " +
              hex_offset(side.first_conflict_packet) + "); first copies kept"});
    if (!side.extractor) {
      info.skipped[d] = lost;
      continue;
    }
    const std::uint64_t total = delivered + lost;
    const std::uint64_t skipped = total >= side.message_bytes ? total - side.message_bytes : 0;
    info.skipped[d] = skipped;
    if (skipped == 0 || side.failed) continue;
    const std::uint64_t tail = std::min(side.extractor->buffered(), skipped - std::min(skipped, lost));
    const std::uint64_t other = skipped - std::min(skipped, lost) - tail;
    std::string parts;
    auto add = [&](std::uint64_t n, const char* what) {
      if (n == 0) return;
      if (!parts.empty()) parts += ", ";
      parts += std::to_string(n) + " " + what;
    };
    add(lost, "missing from the capture");
    add(other, "discarded while resynchronising");
    add(tail, "in an unfinished message at the end");
    // Bytes the capture lacks say more than bytes it has in no message.
    warnings_.push_back(Diagnostic{lost > 0 ? DiagnosticKind::bytes_lost : DiagnosticKind::bytes_skipped,
                                   kNoOffset,
                                   describe(c, dir) + ": " + std::to_string(skipped) +
                                       " bytes in no message (" + parts + ")"});
  }
  info.ended = ended;
  for (auto& side : c.side) side.extractor.reset();
}

void TcpReassembler::add(const pcap::TcpSegment& seg, double timestamp, std::uint64_t packet_offset) {
  if (finished_) return;
  now_ = timestamp;
  packet_at_ = packet_offset;
  const Endpoint src{seg.src, seg.src_port};
  const Endpoint dst{seg.dst, seg.dst_port};
  const Key key = src < dst ? Key{src, dst} : Key{dst, src};
  add_segment(seg, key, timestamp, packet_offset);
  after_segment(key, seg.has(pcap::tcp_flag::kRst));
}

void TcpReassembler::add_segment(const pcap::TcpSegment& seg, const Key& key, double timestamp,
                                 std::uint64_t packet_offset) {
  const Endpoint src{seg.src, seg.src_port};
  const Endpoint dst{seg.dst, seg.dst_port};
  const bool syn = seg.has(pcap::tcp_flag::kSyn);
  const bool ack = seg.has(pcap::tcp_flag::kAck);
  const bool fin = seg.has(pcap::tcp_flag::kFin);

  auto it = active_.find(key);
  Connection* conn = it != active_.end() ? it->second.get() : nullptr;
  if (syn && !ack) {
    if (conn != nullptr && conn->client == src && conn->side[0].isn_known &&
        conn->side[0].isn == seg.seq) {
      infos_[conn->id].last_ts = timestamp;  // a retransmitted SYN
      return;
    }
    // The 4-tuple is reused (or the old connection's end was not captured).
    if (conn != nullptr) close_connection(key, false);
    conn = &open_connection(key, src, timestamp);
  } else if (conn == nullptr) {
    if (seg.has(pcap::tcp_flag::kRst) && !syn) return;  // a stray reset opens nothing
    if (last_id_.count(key) != 0) {
      // A late packet of an ended connection (final ACK, retransmitted FIN).
      infos_[last_id_[key]].last_ts = timestamp;
      return;
    }
    conn = &open_connection(key, syn ? dst : src, timestamp);
  }

  ConnectionInfo& info = infos_[conn->id];
  info.last_ts = timestamp;
  const Direction dir = src == conn->client ? Direction::client_to_server : Direction::server_to_client;
  const int d = static_cast<int>(dir);
  auto& side = conn->side[d];
  auto& other = conn->side[1 - d];

  // What this side acknowledges ends the holes of the other direction.
  if (ack && !syn) other.stream->acknowledged(seg.ack);

  std::uint32_t data_seq = seg.seq;
  bool carries = !seg.payload.empty() || seg.wire_payload_length > 0 || fin;
  if (syn) {
    data_seq = seg.seq + 1;  // the SYN takes one sequence number
    if (!side.stream->started()) {
      info.saw_syn = true;
      start_side(side, seg.seq, true, limits_);
    } else if (!side.isn_known || side.isn != seg.seq) {
      carries = false;  // a SYN that contradicts the stream: ignore its data
    }
    // The SYN-ACK acknowledges the client's ISN: the client's data starts there.
    if (ack && !other.stream->started()) start_side(other, seg.ack - 1, true, limits_);
  }
  if (!carries) {
    info.bytes[1 - d] = other.stream->delivered_bytes();
    info.lost[1 - d] = other.stream->lost_bytes();
    return;
  }
  if (!side.stream->started()) {
    // Mid-stream: the first byte seen is offset 0, and the extractor
    // resynchronises. A bare FIN starts it too, so the direction can end.
    side.stream->start(data_seq);
    if (side.extract) side.extractor.emplace(limits_, false);
  }
  auto r = side.stream->add(data_seq, seg.payload, seg.wire_payload_length, fin);
  if (r.conflict_bytes > 0) {
    if (side.conflicts == 0) {
      side.first_conflict_offset = r.conflict_offset;
      side.first_conflict_packet = packet_offset;
    }
    ++side.conflicts;
    side.conflict_bytes += r.conflict_bytes;
  }
  for (int k = 0; k < 2; ++k) {
    info.bytes[k] = conn->side[k].stream->delivered_bytes();
    info.lost[k] = conn->side[k].stream->lost_bytes();
  }
}

void TcpReassembler::after_segment(const Key& key, bool rst) {
  auto it = active_.find(key);
  if (it == active_.end()) return;
  Connection& c = *it->second;
  if (rst || (c.side[0].stream->fin_reached() && c.side[1].stream->fin_reached()))
    close_connection(key, rst);
}

void TcpReassembler::close_connection(const Key& key, bool rst) {
  auto it = active_.find(key);
  if (it == active_.end()) return;
  end_connection(*it->second, rst);
  active_.erase(it);
}

void TcpReassembler::finish() {
  if (finished_) return;
  finished_ = true;
  packet_at_ = kNoOffset;
  // In order of connection id, so the output does not depend on map order.
  std::vector<std::pair<std::size_t, Connection*>> open;
  for (auto& [key, conn] : active_) open.emplace_back(conn->id, conn.get());
  std::sort(open.begin(), open.end());
  for (auto& [id, conn] : open) {
    now_ = infos_[id].last_ts;
    end_connection(*conn, false);
  }
  active_.clear();
}

CaptureMessage TcpReassembler::take_message() {
  CaptureMessage m = std::move(queue_.front());
  queue_.pop_front();
  return m;
}

}  // namespace daskcaps::formats
