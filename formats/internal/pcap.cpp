// The pcap reader (formats/internal/pcap.h): sniffing a file's format, the
// link types, the reader's common reading and opening, and the libpcap half
// (the file header and its records). The pcapng half is
// formats/detail/pcapng_blocks.cpp; the state both share is
// formats/detail/pcap_reader.h.
#include "formats/internal/pcap.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "formats/detail/pcap_reader.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::formats::pcap {

namespace detail {

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// True when a file this short could still be the start of a capture.
bool prefix_of_magic(ByteSpan head) {
  for (std::uint32_t magic : {kPcapMagicUs, kPcapMagicNs, kShbType}) {
    for (bool be : {true, false}) {
      std::uint8_t bytes[4];
      for (int i = 0; i < 4; ++i)
        bytes[i] = static_cast<std::uint8_t>(magic >> (be ? 24 - 8 * i : 8 * i));
      if (std::equal(head.begin(), head.end(), bytes)) return true;
    }
  }
  return false;
}

// Converts a count of `units_per_second` ticks to seconds and nanoseconds.
Timestamp make_timestamp(std::uint64_t ticks, std::uint64_t units_per_second,
                         std::int64_t offset_seconds) {
  __extension__ using U128 = unsigned __int128;
  Timestamp ts;
  const std::uint64_t whole = ticks / units_per_second;
  const std::uint64_t rest = ticks % units_per_second;
  ts.seconds = static_cast<std::int64_t>(whole) + offset_seconds;
  ts.nanoseconds = static_cast<std::uint32_t>(static_cast<U128>(rest) * 1000000000u / units_per_second);
  return ts;
}

}  // namespace detail

using namespace detail;

// --- sniffing ---------------------------------------------------------------

std::string_view to_string(FileFormat format) {
  switch (format) {
    case FileFormat::pcap: return "pcap";
    case FileFormat::pcapng: return "pcapng";
    case FileFormat::unknown: break;
  }
  return "unknown";
}

FileFormat sniff(ByteSpan first_bytes) {
  if (first_bytes.size() < 4) return FileFormat::unknown;
  const std::uint32_t be = load_u32(first_bytes.data(), true);
  const std::uint32_t le = load_u32(first_bytes.data(), false);
  if (be == kPcapMagicUs || be == kPcapMagicNs || le == kPcapMagicUs || le == kPcapMagicNs)
    return FileFormat::pcap;
  if (be != kShbType) return FileFormat::unknown;
  if (first_bytes.size() < 12) return FileFormat::pcapng;
  const std::uint8_t* bom = first_bytes.data() + 8;
  if (load_u32(bom, true) == kByteOrderMagic || load_u32(bom, false) == kByteOrderMagic)
    return FileFormat::pcapng;
  return FileFormat::unknown;
}

bool link_type_supported(std::uint32_t link_type) {
  switch (link_type) {
    case link::kNull: case link::kEthernet: case link::kRawBsd12: case link::kRawBsd14:
    case link::kRaw: case link::kLoop: case link::kLinuxSll: case link::kIpv4:
    case link::kIpv6: case link::kLinuxSll2:
      return true;
    default:
      return false;
  }
}

std::string link_type_name(std::uint32_t link_type) {
  switch (link_type) {
    case link::kNull: return "NULL";
    case link::kEthernet: return "EN10MB";
    case link::kRawBsd12: case link::kRawBsd14: case link::kRaw: return "RAW";
    case link::kLoop: return "LOOP";
    case link::kLinuxSll: return "LINUX_SLL";
    case link::kIpv4: return "IPV4";
    case link::kIpv6: return "IPV6";
    case link::kLinuxSll2: return "LINUX_SLL2";
    default: return "LINKTYPE " + std::to_string(link_type);
  }
}

// --- the reader -------------------------------------------------------------


Status Reader::Impl::read_more(std::size_t n, std::string_view what, std::uint64_t item_at,
                               std::uint64_t item_size) {
  const std::size_t old = buf_.size();
  buf_.resize_uninitialised(old + n);
  auto got = source_->read(buf_.data() + old, n);
  if (!got) return std::move(got).error();
  offset_ += *got;
  if (*got < n) {
    const std::uint64_t have = offset_ - item_at;
    buf_.resize_uninitialised(old + *got);
    return make_error(Errc::truncated,
                      "truncated " + std::string(what) + " at " + hex_offset(item_at) + ": needs " +
                          std::to_string(item_size) + " bytes, " + std::to_string(have) + " left",
                      item_at);
  }
  return ok_status();
}

Status Reader::Impl::read_exact(std::size_t n, std::string_view what, std::uint64_t item_at,
                                std::uint64_t item_size) {
  buf_.clear();
  return read_more(n, what, item_at, item_size);
}

void Reader::Impl::warn_once(const std::string& key, DiagnosticKind kind, std::uint64_t at,
                             std::string text) {
  if (warned_.insert(key).second) warnings_.push_back(Diagnostic{kind, at, std::move(text)});
}

Status Reader::Impl::start() {
  Buffer head = Buffer::uninitialised(4);
  auto got = source_->read(head.data(), head.size());
  if (!got) return std::move(got).error();
  offset_ = *got;
  head.resize_uninitialised(*got);
  // 4 bytes decide libpcap; for pcapng the byte-order magic decides too.
  if (head.size() == 4 && load_u32(head.data(), true) == kShbType) {
    Buffer more = Buffer::uninitialised(8);
    auto got2 = source_->read(more.data(), more.size());
    if (!got2) return std::move(got2).error();
    offset_ += *got2;
    head.append(more.data(), *got2);
    if (head.size() < 12)
      return make_error(Errc::truncated,
                        "truncated pcapng section header at 0x0: needs 28 bytes, " +
                            std::to_string(head.size()) + " left",
                        0);
  }
  format_ = sniff(head);
  if (format_ == FileFormat::unknown && head.size() < 4 && prefix_of_magic(head))
    return make_error(Errc::truncated,
                      "truncated capture file header at 0x0: needs 24 bytes, " +
                          std::to_string(head.size()) + " left",
                      0);
  if (format_ == FileFormat::unknown) {
    std::string magic;
    for (std::uint8_t b : ByteSpan(head).first(std::min<std::size_t>(head.size(), 4))) {
      char h[4];
      std::snprintf(h, sizeof h, "%02x", b);
      magic += h;
    }
    return make_error(Errc::bad_magic,
                      "not a pcap file: magic " + (magic.empty() ? std::string("(empty file)") : magic) +
                          " is neither libpcap nor pcapng",
                      0);
  }
  buf_ = std::move(head);
  if (format_ == FileFormat::pcap) return start_pcap();
  // pcapng: the rest of the first SHB.
  big_endian_ = load_u32(buf_.data() + 8, true) == kByteOrderMagic;
  block_type_ = kShbType;
  block_at_ = 0;
  return read_section_header(0);
}

Status Reader::Impl::start_pcap() {
  if (auto s = read_more(kPcapHeaderSize - buf_.size(), "pcap file header", 0, kPcapHeaderSize); !s)
    return s;
  big_endian_ = load_u32(buf_.data(), true) == kPcapMagicUs || load_u32(buf_.data(), true) == kPcapMagicNs;
  ByteReader r(buf_);
  OrderedReader o{r, big_endian_};
  const std::uint32_t magic = *o.u32();
  const std::uint16_t major = *o.u16();
  const std::uint16_t minor = *o.u16();
  if (major != 2 || minor > 4)
    return make_error(Errc::unsupported_version,
                      "pcap version " + std::to_string(major) + "." + std::to_string(minor) +
                          " unsupported (2.4 expected)",
                      4);
  (void)*o.u32();  // thiszone
  (void)*o.u32();  // sigfigs
  Interface iface;
  iface.snaplen = *o.u32();
  iface.link_type = *o.u32() & 0xffffu;
  iface.units_per_second = magic == kPcapMagicNs ? 1000000000u : 1000000u;
  interfaces_.assign(1, iface);
  return ok_status();
}

Result<std::optional<Packet>> Reader::Impl::next() {
  if (failed_) return *failed_;
  auto p = format_ == FileFormat::pcap ? next_pcap() : next_pcapng();
  if (!p) return fail(std::move(p).error());
  return p;
}

Result<std::optional<Packet>> Reader::Impl::next_pcap() {
  const std::uint64_t at = offset_;
  buf_.clear();
  buf_.resize_uninitialised(kPcapRecordHeaderSize);
  auto got = source_->read(buf_.data(), buf_.size());
  if (!got) return std::move(got).error();
  offset_ += *got;
  if (*got == 0) return std::optional<Packet>{};
  if (*got < kPcapRecordHeaderSize)
    return make_error(Errc::truncated,
                      "truncated pcap record header at " + hex_offset(at) + ": needs 16 bytes, " +
                          std::to_string(*got) + " left",
                      at);
  ByteReader r(buf_, at);
  OrderedReader o{r, big_endian_};
  const std::uint32_t sec = *o.u32();
  const std::uint32_t frac = *o.u32();
  const std::uint32_t incl = *o.u32();
  const std::uint32_t orig = *o.u32();
  const Interface& iface = interfaces_.front();
  if (incl > options_.max_packet_bytes)
    return make_error(Errc::limit_exceeded,
                      "pcap record at " + hex_offset(at) + " claims " + hex_offset(incl) +
                          " captured bytes, over the limit of " + hex_offset(options_.max_packet_bytes) +
                          " (" + option_name("max_packet_bytes") + ")",
                      at + 8);
  if (iface.snaplen != 0 && incl > iface.snaplen)
    warn_once("snaplen", DiagnosticKind::record_over_snaplen, at,
              "pcap record at " + hex_offset(at) + " holds " + std::to_string(incl) +
                  " bytes, more than the file's snapshot length " + std::to_string(iface.snaplen) +
                  " (kept)");
  if (orig < incl)
    warn_once("orig<incl", DiagnosticKind::record_over_original, at,
              "pcap record at " + hex_offset(at) + " captured " + std::to_string(incl) +
                  " bytes of a " + std::to_string(orig) + "-byte packet (kept)");
  if (auto s = read_exact(incl, "pcap record", at, kPcapRecordHeaderSize + std::uint64_t{incl}); !s)
    return std::move(s).error();
  Packet p;
  p.offset = at;
  p.data_offset = at + kPcapRecordHeaderSize;
  p.link_type = iface.link_type;
  p.timestamp = make_timestamp(std::uint64_t{sec} * iface.units_per_second + frac, iface.units_per_second, 0);
  p.original_length = orig;
  p.data = buf_;
  return std::optional<Packet>(p);
}

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::~Reader() = default;

Result<std::unique_ptr<Reader>> Reader::open_file(const std::string& path, const ReaderOptions& options) {
  auto src = FileSource::open(path);
  if (!src) return std::move(src).error();
  auto impl = std::make_unique<Impl>(std::move(*src), options);
  if (auto s = impl->start(); !s) return std::move(s).error();
  return std::unique_ptr<Reader>(new Reader(std::move(impl)));
}

Result<std::unique_ptr<Reader>> Reader::open_memory(ByteSpan bytes, const ReaderOptions& options) {
  auto impl = std::make_unique<Impl>(std::make_unique<MemorySource>(bytes), options);
  if (auto s = impl->start(); !s) return std::move(s).error();
  return std::unique_ptr<Reader>(new Reader(std::move(impl)));
}

Result<std::optional<Packet>> Reader::next() { return impl_->next(); }
FileFormat Reader::format() const { return impl_->format_; }
std::uint64_t Reader::offset() const { return impl_->offset_; }
const std::vector<Interface>& Reader::interfaces() const { return impl_->interfaces_; }
const std::vector<Diagnostic>& Reader::warnings() const { return impl_->warnings_; }

}  // namespace daskcaps::formats::pcap
