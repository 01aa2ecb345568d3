// Dask messages out of a packet capture: the capture-level API that `inspect`
// and `transcode` use.
//
//   auto reader = PcapMessageReader::open("dask.pcap", limits, {});
//   if (!reader) return reader.error();
//   while (true) {
//     auto m = (*reader)->next();          // Result<optional<CaptureMessage>>
//     if (!m) return m.error();           // bad capture file: offset inside
//     if (!*m) break;                     // end of capture
//     use((*m)->connection, (*m)->direction, (*m)->message);
//   }
//   (*reader)->connections();  (*reader)->warnings();
//
// Layers: formats/internal/pcap.h reads the file record by record (libpcap or
// pcapng) and decodes link, IP and TCP headers; formats/internal/tcp_reassembly.h puts
// each connection's two byte streams in order and cuts them into messages
// with formats/internal/message_stream.h. Memory stays bounded by the reorder window
// and the messages in progress, never by the file.
//
// Order: next() yields messages in capture order, i.e. the order in which
// their last byte became available in sequence, across all connections. The
// first message of each direction of a connection captured from its SYN is
// the Dask handshake (docs/protocol.md §2; CaptureMessage::at_stream_start()).
//
// Connections are numbered from 0 in the order their first packet appears
// (as Wireshark's tcp.stream); a reused 4-tuple gets a new number.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/result.h"
#include "daskcaps/formats/capture_options.h"
#include "formats/internal/pcap.h"
#include "formats/internal/tcp_reassembly.h"

namespace daskcaps::formats {

/// Counts of what the packets held.
struct CaptureStats {
  std::uint64_t packets = 0;
  std::uint64_t tcp_segments = 0;       // decoded TCP segments (before the port filter)
  std::uint64_t filtered_out = 0;       // TCP segments the port filter dropped
  std::uint64_t other = 0;              // not IP, or not TCP
  std::uint64_t fragments = 0;          // non-first IP fragments skipped
  std::uint64_t first_fragments = 0;    // TCP in a first fragment: the rest is lost
  std::uint64_t cut_segments = 0;       // TCP payload cut by the snapshot length
  std::uint64_t cut_headers = 0;        // cut inside a header: skipped
  std::uint64_t malformed = 0;          // contradictory headers: skipped
  std::uint64_t unsupported_link = 0;   // on an interface we cannot decode
};

class PcapMessageReader {
 public:
  /// Opens a libpcap or pcapng file. Errors: Errc::io, Errc::bad_magic ("not
  /// a pcap file"), Errc::unsupported_version, Errc::truncated (header),
  /// Errc::unsupported (a libpcap file whose link type is not read).
  static Result<std::unique_ptr<PcapMessageReader>> open(const std::string& path, const Limits& limits,
                                                         const CaptureOptions& options = {});
  /// The same over bytes in memory, which must outlive the reader.
  static Result<std::unique_ptr<PcapMessageReader>> open_memory(ByteSpan bytes, const Limits& limits,
                                                                const CaptureOptions& options = {});
  /// True when the first bytes of a file are a libpcap or pcapng header.
  static bool sniff(ByteSpan first_bytes);

  ~PcapMessageReader();
  PcapMessageReader(const PcapMessageReader&) = delete;
  PcapMessageReader& operator=(const PcapMessageReader&) = delete;

  /// The next message in capture order; nullopt once the capture is over
  /// (every connection flushed); an error when the file is bad (truncated
  /// record, length over a limit, inconsistent block: the offset says
  /// where). After an error every call returns it again. Problems inside
  /// TCP streams are never errors: they are warnings and skipped bytes.
  Result<std::optional<CaptureMessage>> next();

  /// Every connection seen so far (all of them once next() gave nullopt).
  const std::vector<ConnectionInfo>& connections() const;
  /// Recoverable problems, one each, in this order: the file reader's
  /// (formats/internal/pcap.h: unsupported blocks or link types, odd record
  /// lengths); a capture that ends inside a record (capture_truncated, with
  /// tolerate_truncation); the packet summaries, each with the offset of its
  /// first packet (packets_skipped: non-first fragments, cut inside a
  /// header, on an unsupported link; segments_cut: TCP payload lost to the
  /// snapshot length or to fragments; packets_malformed); the streams'
  /// (formats/internal/tcp_reassembly.h: conflicting retransmissions, streams that
  /// are not Dask, bytes in no message per direction).
  const std::vector<Diagnostic>& warnings() const;
  const CaptureStats& stats() const { return stats_; }
  pcap::FileFormat format() const;

 private:
  PcapMessageReader(std::unique_ptr<pcap::Reader> reader, const Limits& limits,
                    const CaptureOptions& options);
  static Result<std::unique_ptr<PcapMessageReader>> make(Result<std::unique_ptr<pcap::Reader>> reader,
                                                         const Limits& limits,
                                                         const CaptureOptions& options);
  void handle(const pcap::Packet& packet);
  void note_first(std::uint64_t& first_at, std::uint64_t count, std::uint64_t at);

  std::unique_ptr<pcap::Reader> reader_;
  TcpReassembler reassembler_;
  CaptureOptions options_;
  CaptureStats stats_;
  std::optional<Error> failed_;
  std::vector<Diagnostic> own_warnings_;
  mutable std::vector<Diagnostic> warnings_;
  double last_ts_ = 0;
  bool done_ = false;
  // Offsets of the first packet of each skipped kind, for the summaries.
  std::uint64_t first_fragment_at_ = 0, first_first_fragment_at_ = 0, first_cut_at_ = 0,
                first_cut_header_at_ = 0, first_malformed_at_ = 0, first_unsupported_at_ = 0;
  std::string first_malformed_why_;
};

}  // namespace daskcaps::formats
