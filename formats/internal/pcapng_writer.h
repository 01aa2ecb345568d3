// PcapngWriter: writes TCP conversations as a pcapng capture that Wireshark,
// tshark and `dask-caps inspect` read, for traffic that was never on a wire
// this process could capture (the two legs of `bridge --capture`).
//
// Layout (pcapng, little-endian, microsecond timestamps):
//   Section Header Block     byte-order magic 0x1A2B3C4D, version 1.0
//   Interface Description    link type 1 (Ethernet), no snapshot limit
//   Enhanced Packet Block*   one per synthesised packet
//
// Each flow is one TCP connection between two "ip:port" endpoints (IPv4 or
// IPv6, as the text says). Packets are synthesised with consistent headers:
//   Ethernet  02:00:00:00:00:01 / :02, EtherType IPv4 or IPv6
//   IP        TTL 64, no options, checksum computed (IPv4)
//   TCP       20 bytes, window 65535, checksum computed over the pseudo
//             header; the sequence number of each direction starts at its
//             ISN and grows by every byte sent (SYN and FIN count one);
//             every segment acknowledges what the other direction has sent
// open_flow() writes the three-way handshake, write() cuts the bytes into
// segments of at most kMaxSegment payload bytes (PSH on the last), and
// close_flow() writes FIN from both ends. Readers then see each direction
// from its start, in sync.
//
// The file is written atomically (core/base/atomic_file.h): it appears
// under its name at commit(), complete, or not at all.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "daskcaps/base/atomic_file.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"

namespace daskcaps::formats {

class PcapngWriter {
 public:
  /// TCP payload bytes per synthesised segment.
  static constexpr std::size_t kMaxSegment = 32768;

  static Result<std::unique_ptr<PcapngWriter>> create(const std::string& path);
  ~PcapngWriter();

  using FlowId = std::size_t;
  /// A new connection from `client` to `server` ("127.0.0.1:8786",
  /// "[::1]:8786"); writes SYN, SYN-ACK, ACK at `ts` (seconds since the
  /// epoch). Errc::usage for an endpoint that is not ip:port, or mixed
  /// families.
  Result<FlowId> open_flow(const std::string& client, const std::string& server, double ts);
  /// Bytes sent on a flow, in order: the pieces are one stream.
  Status write(FlowId flow, bool from_client, std::span<const ByteSpan> pieces, double ts);
  /// Bytes sent on a flow that the capture does not hold: the sequence
  /// number moves past them, so readers see a gap there (lost segments).
  void skip(FlowId flow, bool from_client, std::uint64_t bytes);
  /// FIN from the client, then from the server.
  Status close_flow(FlowId flow, double ts);
  /// Closes every open flow and commits the file.
  Status commit(double ts);

  std::uint64_t packets() const { return packets_; }
  const std::string& path() const { return file_->path(); }

 private:
  struct Endpoint {
    bool v6 = false;
    std::array<std::uint8_t, 16> ip{};
    std::uint16_t port = 0;
  };
  struct Flow {
    Endpoint end[2];        // [0] client, [1] server
    std::uint32_t next[2];  // next sequence number each end sends
    bool open = true;
  };

  explicit PcapngWriter(std::unique_ptr<AtomicFile> file) : file_(std::move(file)) {}
  Status packet(Flow& f, int from, std::uint8_t flags, std::span<const ByteSpan> payload, double ts);
  Status flush();
  static constexpr std::size_t kFlushBytes = std::size_t{256} << 10;
  static Result<Endpoint> parse_endpoint(const std::string& text);

  std::unique_ptr<AtomicFile> file_;
  std::vector<Flow> flows_;
  Buffer scratch_;
  std::vector<ByteSpan> segment_;  // the pieces of the segment being cut
  Buffer pending_;  // blocks not yet written to the file
  std::uint64_t packets_ = 0;
};

}  // namespace daskcaps::formats
