// What a capture source is asked for, and what it tells of the TCP
// connections it found: the part of capture reading that programs see
// (formats/message_source.h opens captures with these options). How a
// capture is read (the pcap and pcapng reader, link/IP/TCP decoding, TCP
// reassembly, cutting streams into messages) is the layer's own business:
// formats/internal/, not installed (docs/design.md §2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace daskcaps::formats {

/// A direction of a TCP connection. Client: the side that sent the SYN (or
/// received the SYN-ACK), else the first sender seen.
enum class Direction : std::uint8_t { client_to_server = 0, server_to_client = 1 };

/// "client_to_server" / "server_to_client".
std::string_view to_string(Direction direction);
/// Parses the names above, their hyphenated forms ("client-to-server") and
/// the short forms "c2s", "s2c"; nullopt otherwise.
std::optional<Direction> parse_direction(std::string_view text);

/// One TCP connection as the capture showed it. Connections are numbered
/// from 0 in the order their first packet appears (as Wireshark's
/// tcp.stream); a reused 4-tuple gets a new number.
struct ConnectionInfo {
  std::size_t id = 0;   // index in connections(), in order of first packet
  std::string client;   // "127.0.0.1:53012", "[::1]:53012"
  std::string server;   // "127.0.0.1:8786"
  bool saw_syn = false; // the capture holds the SYN or SYN-ACK: both streams start in sync
  double first_ts = 0, last_ts = 0;
  std::uint64_t bytes[2] = {0, 0};     // stream bytes captured in order, per Direction
  std::uint64_t skipped[2] = {0, 0};   // bytes in no message: lost + resync + unfinished tail
                                       // (only lost ones for a direction not extracted)
  std::uint64_t lost[2] = {0, 0};      // of those, bytes missing from the capture
  std::uint64_t messages[2] = {0, 0};  // messages extracted
  bool ended = false;                  // FIN seen both ways, or RST
};

struct ReassemblyOptions {
  /// Out-of-order bytes held per direction before the oldest hole is
  /// declared lost (--tcp-window-bytes).
  std::uint64_t window_bytes = std::uint64_t{64} << 20;
  /// Delivered bytes remembered per direction to compare late
  /// retransmissions with (older ones are dropped unchecked).
  std::uint64_t history_bytes = std::uint64_t{64} << 10;
  /// When set, only this connection / direction has its messages extracted
  /// (others are still tracked and counted).
  std::optional<std::size_t> only_connection;
  std::optional<Direction> only_direction;
};

namespace pcap {

struct ReaderOptions {
  /// The largest record or block read into memory (--max-packet-bytes).
  /// tcpdump's largest snaplen is 262144; pcapng blocks we skip are never read.
  std::uint32_t max_packet_bytes = std::uint32_t{16} << 20;
};

}  // namespace pcap

struct CaptureOptions {
  /// Record/block size limit of the file reader.
  pcap::ReaderOptions reader;
  /// Reorder window per direction, and the connection/direction whose
  /// messages are wanted (`transcode --connection N --direction D`).
  ReassemblyOptions reassembly;
  /// Keep only TCP segments with one of these ports as source or
  /// destination; empty keeps all TCP.
  std::vector<std::uint16_t> ports;
  /// When the file ends inside its last record (a capture still being
  /// written, or killed), end cleanly with a warning instead of the
  /// Errc::truncated error.
  bool tolerate_truncation = false;
};

}  // namespace daskcaps::formats
