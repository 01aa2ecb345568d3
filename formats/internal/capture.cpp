#include "formats/internal/capture.h"

#include <algorithm>

namespace daskcaps::formats {

PcapMessageReader::PcapMessageReader(std::unique_ptr<pcap::Reader> reader, const Limits& limits,
                                     const CaptureOptions& options)
    : reader_(std::move(reader)), reassembler_(limits, options.reassembly), options_(options) {}

PcapMessageReader::~PcapMessageReader() = default;

bool PcapMessageReader::sniff(ByteSpan first_bytes) {
  return pcap::sniff(first_bytes) != pcap::FileFormat::unknown;
}

Result<std::unique_ptr<PcapMessageReader>> PcapMessageReader::make(
    Result<std::unique_ptr<pcap::Reader>> reader, const Limits& limits, const CaptureOptions& options) {
  if (!reader) return std::move(reader).error();
  if ((*reader)->format() == pcap::FileFormat::pcap) {
    // A libpcap file has one link type: one we cannot decode is the file's
    // problem, not a packet's.
    const std::uint32_t link = (*reader)->interfaces().front().link_type;
    if (!pcap::link_type_supported(link))
      return make_error(Errc::unsupported,
                        "pcap link type " + pcap::link_type_name(link) +
                            " unsupported (Ethernet, Linux cooked, loopback and raw IP are read)",
                        20);
  }
  return std::unique_ptr<PcapMessageReader>(
      new PcapMessageReader(std::move(*reader), limits, options));
}

Result<std::unique_ptr<PcapMessageReader>> PcapMessageReader::open(const std::string& path,
                                                                   const Limits& limits,
                                                                   const CaptureOptions& options) {
  return make(pcap::Reader::open_file(path, options.reader), limits, options);
}

Result<std::unique_ptr<PcapMessageReader>> PcapMessageReader::open_memory(ByteSpan bytes,
                                                                          const Limits& limits,
                                                                          const CaptureOptions& options) {
  return make(pcap::Reader::open_memory(bytes, options.reader), limits, options);
}

pcap::FileFormat PcapMessageReader::format() const { return reader_->format(); }

const std::vector<ConnectionInfo>& PcapMessageReader::connections() const {
  return reassembler_.connections();
}

void PcapMessageReader::note_first(std::uint64_t& first_at, std::uint64_t count, std::uint64_t at) {
  if (count == 1) first_at = at;
}

void PcapMessageReader::handle(const pcap::Packet& packet) {
  ++stats_.packets;
  if (packet.has_timestamp) last_ts_ = packet.timestamp.as_double();
  pcap::DecodedPacket d = pcap::decode_packet(packet.link_type, packet.data, packet.original_length);
  switch (d.kind) {
    case pcap::PacketKind::tcp:
      break;
    case pcap::PacketKind::other:
      ++stats_.other;
      return;
    case pcap::PacketKind::ip_fragment:
      note_first(first_fragment_at_, ++stats_.fragments, packet.offset);
      return;
    case pcap::PacketKind::unsupported_link:
      note_first(first_unsupported_at_, ++stats_.unsupported_link, packet.offset);
      return;
    case pcap::PacketKind::truncated:
      note_first(first_cut_header_at_, ++stats_.cut_headers, packet.offset);
      return;
    case pcap::PacketKind::malformed:
      if (++stats_.malformed == 1) {
        first_malformed_at_ = packet.offset;
        first_malformed_why_ = d.why;
      }
      return;
  }
  ++stats_.tcp_segments;
  const pcap::TcpSegment& seg = d.tcp;
  if (!options_.ports.empty()) {
    const auto& ports = options_.ports;
    const bool keep = std::find(ports.begin(), ports.end(), seg.src_port) != ports.end() ||
                      std::find(ports.begin(), ports.end(), seg.dst_port) != ports.end();
    if (!keep) {
      ++stats_.filtered_out;
      return;
    }
  }
  if (seg.wire_payload_length > seg.payload.size())
    note_first(first_cut_at_, ++stats_.cut_segments, packet.offset);
  if (seg.first_fragment) note_first(first_first_fragment_at_, ++stats_.first_fragments, packet.offset);
  reassembler_.add(seg, last_ts_, packet.offset);
}

Result<std::optional<CaptureMessage>> PcapMessageReader::next() {
  if (failed_) return *failed_;
  for (;;) {
    if (reassembler_.has_message()) return std::optional<CaptureMessage>(reassembler_.take_message());
    if (done_) return std::optional<CaptureMessage>{};
    auto packet = reader_->next();
    if (!packet) {
      Error e = std::move(packet).error();
      if (options_.tolerate_truncation && e.code == Errc::truncated) {
        own_warnings_.push_back(Diagnostic{DiagnosticKind::capture_truncated, e.offset,
                                           "capture ends inside a record: " + e.message() + " (ignored)"});
        reassembler_.finish();
        done_ = true;
        continue;
      }
      failed_ = e;
      return e;
    }
    if (!*packet) {
      reassembler_.finish();
      done_ = true;
      continue;
    }
    handle(**packet);
  }
}

const std::vector<Diagnostic>& PcapMessageReader::warnings() const {
  warnings_ = reader_->warnings();
  warnings_.insert(warnings_.end(), own_warnings_.begin(), own_warnings_.end());
  auto summary = [&](DiagnosticKind kind, std::uint64_t count, std::uint64_t first_at, const std::string& what) {
    if (count == 0) return;
    warnings_.push_back(Diagnostic{
        kind, first_at, std::to_string(count) + " " + what + " (first packet at " + hex_offset(first_at) + ")"});
  };
  summary(DiagnosticKind::packets_skipped, stats_.fragments, first_fragment_at_,
          "non-first IP fragment(s) skipped");
  summary(DiagnosticKind::segments_cut, stats_.first_fragments, first_first_fragment_at_,
          "TCP segment(s) in a fragmented IP packet: only the first fragment is read, the rest is lost");
  summary(DiagnosticKind::segments_cut, stats_.cut_segments, first_cut_at_,
          "TCP segment(s) cut by the snapshot length: the missing bytes are gaps");
  summary(DiagnosticKind::packets_skipped, stats_.cut_headers, first_cut_header_at_,
          "packet(s) cut by the snapshot length inside a header skipped");
  summary(DiagnosticKind::packets_malformed, stats_.malformed, first_malformed_at_,
          "malformed packet(s) skipped, the first: " + first_malformed_why_);
  summary(DiagnosticKind::packets_skipped, stats_.unsupported_link, first_unsupported_at_,
          "packet(s) on an unsupported link type skipped");
  const auto& more = reassembler_.warnings();
  warnings_.insert(warnings_.end(), more.begin(), more.end());
  return warnings_;
}

}  // namespace daskcaps::formats
