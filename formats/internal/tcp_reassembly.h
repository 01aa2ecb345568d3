// TCP reassembly for captures: segments in capture order in, whole Dask
// messages per connection and direction out (formats/internal/message_stream.h cuts
// them), as soon as their last byte is in sequence.
//
// Model (one TcpStream per direction, two per connection):
//
//   - Sequence numbers are 32-bit and wrap; each stream keeps 64-bit stream
//     offsets. Offset 0 is the byte after the SYN (isn + 1). Without a SYN it
//     is the first sequence number that carried data, and the message
//     extractor then starts out of sync and resynchronises (the skipped bytes
//     are counted). A SYN-ACK without its SYN still gives both starts: its
//     own seq, and its ack for the client.
//   - Segments ahead of the next expected byte wait in a reorder buffer of at
//     most ReassemblyOptions::window_bytes per direction (data bytes plus
//     kPieceOverhead per buffered piece). Bytes seen twice (retransmissions,
//     overlaps) are deduplicated: the first copy wins; a later copy that
//     differs is counted as a conflict. Delivered bytes are remembered
//     (history_bytes) so late retransmissions can be compared too.
//   - A hole that is never filled becomes gap(n) on the extractor (which
//     drops its partial message and resynchronises) as soon as the receiver
//     acknowledges past it (it got bytes the capture missed: a capture drop),
//     else when the window overflows or the stream is finished. Bytes a
//     snapshot length cut off a packet are holes known at once: they become
//     gaps when reached.
//   - FIN ends a direction once every byte before it is in (or given up as
//     lost); RST ends both. A connection is closed when both directions have
//     ended or at RST; then its holes are flushed as gaps and its buffers
//     released. Connections still open at the end of the capture are
//     flushed the same way.
//   - A new SYN (without ACK) on a 4-tuple that was seen before, with another
//     ISN, starts a new connection with a new id; a SYN with the same ISN is a
//     retransmission.
//   - Client: the side that sent the SYN (or received the SYN-ACK), else the
//     first sender seen.
//
// Memory per connection: the reorder window, the retransmission history and
// the extractor's partial message, per direction; ended connections keep only
// their ConnectionInfo.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/formats/capture_options.h"
#include "formats/internal/message_stream.h"
#include "formats/internal/packet.h"

namespace daskcaps::formats {

/// One direction of a TCP connection put back in sequence order.
class TcpStream {
 public:
  /// Each buffered piece counts at least this much against the window, so
  /// many tiny pieces cannot hold unbounded memory.
  static constexpr std::uint64_t kPieceOverhead = 64;

  /// Receives the stream in order: contiguous bytes, or a count of bytes the
  /// capture does not have.
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual void data(ByteSpan bytes) = 0;
    virtual void gap(std::uint64_t count) = 0;
  };

  /// What one segment contributed, for diagnostics.
  struct AddResult {
    std::uint64_t duplicate_bytes = 0;  // bytes already seen (first copy kept)
    std::uint64_t conflict_bytes = 0;   // of those, bytes in overlaps that differ
    std::uint64_t conflict_offset = 0;  // stream offset of the first conflict
    std::uint64_t unchecked_bytes = 0;  // old bytes beyond the history: dropped unchecked
    bool before_start = false;          // the segment lies before stream offset 0
  };

  TcpStream(const ReassemblyOptions& options, Sink& sink);

  /// Fixes the sequence number of stream offset 0. Call once, before add().
  void start(std::uint32_t seq_of_offset_zero);
  bool started() const { return started_; }

  /// A segment: `payload` as captured at sequence number `seq`,
  /// `wire_length` >= payload.size() the length it had on the wire (the rest
  /// is lost), `fin` when it carries FIN (at seq + wire_length).
  AddResult add(std::uint32_t seq, ByteSpan payload, std::uint32_t wire_length, bool fin);

  /// The receiver acknowledged every byte before sequence number `ack`:
  /// bytes before it that the capture lacks were received but not captured
  /// and will never come, so they become gaps now (up to the FIN, if known).
  void acknowledged(std::uint32_t ack);

  /// No more segments: holes become gaps, everything buffered is delivered
  /// in order. The stream then accepts nothing more.
  void finish();

  /// FIN seen and every byte before it delivered.
  bool fin_reached() const { return fin_at_ && next_ >= *fin_at_; }
  bool fin_seen() const { return fin_at_.has_value(); }
  bool finished() const { return finished_; }
  std::uint64_t next_offset() const { return next_; }
  std::uint64_t delivered_bytes() const { return delivered_; }
  std::uint64_t lost_bytes() const { return lost_; }
  /// Cost of what the reorder buffer holds (see kPieceOverhead).
  std::uint64_t buffered_cost() const { return held_; }
  std::size_t buffered_pieces() const { return pending_.size(); }

 private:
  struct Piece {
    std::uint64_t length = 0;
    bool lost = false;  // bytes the capture cut off: no data
    Buffer bytes;       // empty when lost
  };

  void insert(std::uint64_t from, std::uint64_t to, const std::uint8_t* data, AddResult& result);
  void emit_data(ByteSpan bytes);
  void emit_gap(std::uint64_t count);
  void deliver_ready();
  void enforce_window();
  void compare_with_history(std::uint64_t from, std::uint64_t to, const std::uint8_t* data,
                            AddResult& result);

  ReassemblyOptions options_;
  Sink& sink_;
  bool started_ = false;
  bool finished_ = false;
  std::uint32_t seq0_ = 0;
  std::uint64_t next_ = 0;
  std::optional<std::uint64_t> fin_at_;
  std::map<std::uint64_t, Piece> pending_;  // non-overlapping, keys >= next_
  std::uint64_t held_ = 0;
  std::uint64_t delivered_ = 0;
  std::uint64_t lost_ = 0;
  Buffer history_;  // the last delivered bytes, history_[0] at history_start_
  std::uint64_t history_start_ = 0;
};

/// One message with the connection and direction it travelled on.
struct CaptureMessage {
  std::size_t connection = 0;
  Direction direction = Direction::client_to_server;
  double timestamp = 0;     // capture time of the packet that completed it
  std::uint64_t index = 0;  // position among the messages of its direction
  StreamMessage message;

  /// True for the first message of a direction captured from its start:
  /// the Dask handshake (docs/protocol.md §2).
  bool at_stream_start() const { return index == 0 && message.raw.offset == 0; }
};

/// Reassembles every TCP connection of a capture and extracts messages.
class TcpReassembler {
 public:
  TcpReassembler(const Limits& limits, const ReassemblyOptions& options);
  ~TcpReassembler();
  TcpReassembler(const TcpReassembler&) = delete;
  TcpReassembler& operator=(const TcpReassembler&) = delete;

  /// The next segment in capture order; `packet_offset` is the file offset
  /// of its packet (for diagnostics). Messages it completes are queued.
  void add(const pcap::TcpSegment& segment, double timestamp, std::uint64_t packet_offset);
  /// End of capture: every open connection is flushed (holes become gaps).
  void finish();

  bool has_message() const { return !queue_.empty(); }
  /// The oldest queued message; only when has_message().
  CaptureMessage take_message();

  const std::vector<ConnectionInfo>& connections() const { return infos_; }
  /// One per problem, its text naming the connection and direction:
  ///   retransmission_conflict  retransmitted segments that differ (offset:
  ///                            the packet of the first)
  ///   not_dask                 a direction that is not Dask messages (offset:
  ///                            the packet being read when it was found,
  ///                            kNoOffset when found at the end of the capture)
  ///   bytes_lost, bytes_skipped  bytes in no message, per direction (no
  ///                            offset): bytes_lost when some are missing
  ///                            from the capture, bytes_skipped when all
  ///                            were captured (resynchronising, unfinished)
  const std::vector<Diagnostic>& warnings() const { return warnings_; }

  struct Connection;  // per-connection state (defined in the .cpp)

 private:
  struct Endpoint {
    pcap::IpAddress addr;
    std::uint16_t port = 0;
    auto operator<=>(const Endpoint&) const = default;
  };
  using Key = std::pair<Endpoint, Endpoint>;  // lower endpoint first

  Connection& open_connection(const Key& key, const Endpoint& client, double ts);
  void add_segment(const pcap::TcpSegment& seg, const Key& key, double timestamp,
                   std::uint64_t packet_offset);
  // Ends the connection at RST, or once both directions reached their FIN.
  void after_segment(const Key& key, bool rst);
  // Flushes and releases an open connection.
  void close_connection(const Key& key, bool rst);
  void end_connection(Connection& c, bool rst);
  std::string describe(const Connection& c, Direction d) const;

  friend class DirectionSink;
  Limits limits_;
  ReassemblyOptions options_;
  std::vector<ConnectionInfo> infos_;
  std::map<Key, std::unique_ptr<Connection>> active_;  // open connections
  std::map<Key, std::size_t> last_id_;                 // latest connection on each 4-tuple
  std::deque<CaptureMessage> queue_;
  std::vector<Diagnostic> warnings_;
  double now_ = 0;
  std::uint64_t packet_at_ = kNoOffset;  // file offset of the packet being added
  bool finished_ = false;
};

}  // namespace daskcaps::formats
