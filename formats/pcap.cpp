#include "daskcaps/formats/pcap.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <set>

#include "daskcaps/base/byte_reader.h"

namespace daskcaps::formats::pcap {

namespace {

constexpr std::uint32_t kPcapMagicUs = 0xa1b2c3d4;
constexpr std::uint32_t kPcapMagicNs = 0xa1b23c4d;
constexpr std::uint32_t kShbType = 0x0a0d0d0a;
constexpr std::uint32_t kByteOrderMagic = 0x1a2b3c4d;
constexpr std::uint32_t kIdbType = 0x00000001;
constexpr std::uint32_t kPbType = 0x00000002;
constexpr std::uint32_t kSpbType = 0x00000003;
constexpr std::uint32_t kEpbType = 0x00000006;
constexpr std::size_t kPcapHeaderSize = 24;
constexpr std::size_t kPcapRecordHeaderSize = 16;
constexpr std::uint16_t kOptEndOfOpt = 0;
constexpr std::uint16_t kOptIfTsresol = 9;
constexpr std::uint16_t kOptIfTsoffset = 14;

std::uint32_t load_u32(const std::uint8_t* p, bool big_endian) {
  if (big_endian)
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
  return (std::uint32_t{p[3]} << 24) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[1]} << 8) | p[0];
}

// Reads integers in the byte order of the file or section being read.
struct OrderedReader {
  ByteReader& r;
  bool big_endian;
  Result<std::uint16_t> u16() { return big_endian ? r.u16_be() : r.u16_le(); }
  Result<std::uint32_t> u32() { return big_endian ? r.u32_be() : r.u32_le(); }
  Result<std::uint64_t> u64() { return big_endian ? r.u64_be() : r.u64_le(); }
};

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

// --- input sources ----------------------------------------------------------

class Source {
 public:
  virtual ~Source() = default;
  /// Reads up to n bytes; fewer only at the end of the input.
  virtual Result<std::size_t> read(std::uint8_t* dst, std::size_t n) = 0;
  /// Skips up to n bytes; fewer only at the end of the input.
  virtual Result<std::uint64_t> skip(std::uint64_t n) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(ByteSpan data) : data_(data) {}
  Result<std::size_t> read(std::uint8_t* dst, std::size_t n) override {
    const std::size_t k = std::min(n, data_.size() - pos_);
    if (k > 0) std::memcpy(dst, data_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  Result<std::uint64_t> skip(std::uint64_t n) override {
    const std::uint64_t k = std::min<std::uint64_t>(n, data_.size() - pos_);
    pos_ += static_cast<std::size_t>(k);
    return k;
  }

 private:
  ByteSpan data_;
  std::size_t pos_ = 0;
};

class FileSource final : public Source {
 public:
  static Result<std::unique_ptr<FileSource>> open(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return make_error(Errc::io, "cannot open " + path + ": " + std::strerror(errno));
    auto src = std::unique_ptr<FileSource>(new FileSource(f, path));
    struct stat st {};
    if (::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
      src->seekable_ = true;
      src->size_ = static_cast<std::uint64_t>(st.st_size);
    }
    std::setvbuf(f, nullptr, _IOFBF, std::size_t{1} << 20);
    return src;
  }
  ~FileSource() override { std::fclose(f_); }

  Result<std::size_t> read(std::uint8_t* dst, std::size_t n) override {
    const std::size_t k = std::fread(dst, 1, n, f_);
    if (k < n && std::ferror(f_)) return make_error(Errc::io, "cannot read " + path_ + ": " + std::strerror(errno), pos_ + k);
    pos_ += k;
    return k;
  }
  Result<std::uint64_t> skip(std::uint64_t n) override {
    if (seekable_) {
      const std::uint64_t left = size_ > pos_ ? size_ - pos_ : 0;
      const std::uint64_t k = std::min(n, left);
      if (::fseeko(f_, static_cast<off_t>(k), SEEK_CUR) != 0)
        return make_error(Errc::io, "cannot seek in " + path_ + ": " + std::strerror(errno), pos_);
      pos_ += k;
      return k;
    }
    std::uint8_t scratch[65536];
    std::uint64_t done = 0;
    while (done < n) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, sizeof scratch));
      auto got = read(scratch, want);
      if (!got) return std::move(got).error();
      done += *got;
      if (*got < want) break;
    }
    return done;
  }

 private:
  FileSource(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  std::FILE* f_;
  std::string path_;
  bool seekable_ = false;
  std::uint64_t size_ = 0;
  std::uint64_t pos_ = 0;
};

}  // namespace

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

class Reader::Impl {
 public:
  Impl(std::unique_ptr<Source> source, const ReaderOptions& options)
      : source_(std::move(source)), options_(options) {}

  Status start();
  Result<std::optional<Packet>> next();

  FileFormat format_ = FileFormat::unknown;
  std::uint64_t offset_ = 0;
  std::vector<Interface> interfaces_;
  std::vector<Diagnostic> warnings_;

 private:
  // Reads exactly n bytes at offset_ into buf_ (replacing its contents).
  // `what` names the item for the truncated error, which reports `item_at`.
  Status read_exact(std::size_t n, std::string_view what, std::uint64_t item_at,
                    std::uint64_t item_size);
  // Reads n more bytes, appended to buf_.
  Status read_more(std::size_t n, std::string_view what, std::uint64_t item_at,
                   std::uint64_t item_size);
  // Says a kind of oddity once: `key` tells the kinds apart (one per link
  // type, block type, ...); later ones of the same key are not repeated.
  void warn_once(const std::string& key, DiagnosticKind kind, std::uint64_t at, std::string text);
  Error fail(Error e) {
    failed_ = e;
    return e;
  }

  Status start_pcap();
  Result<std::optional<Packet>> next_pcap();
  // Reads one pcapng block; returns false at a clean end of file.
  Result<bool> read_block();
  Status read_section_header(std::uint64_t at);
  Status read_interface(ByteReader body, std::uint64_t at);
  Result<std::optional<Packet>> next_pcapng();

  std::unique_ptr<Source> source_;
  ReaderOptions options_;
  Buffer buf_;
  bool big_endian_ = false;
  std::set<std::string> warned_;
  std::optional<Error> failed_;
  // pcapng: the block just read.
  std::uint32_t block_type_ = 0;
  std::uint64_t block_at_ = 0;
};

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
                          " (--max-packet-bytes)",
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

Result<bool> Reader::Impl::read_block() {
  const std::uint64_t at = offset_;
  buf_.clear();
  buf_.resize_uninitialised(8);
  auto got = source_->read(buf_.data(), 8);
  if (!got) return std::move(got).error();
  offset_ += *got;
  if (*got == 0) return false;
  if (*got < 8)
    return make_error(Errc::truncated,
                      "truncated pcapng block header at " + hex_offset(at) + ": needs 8 bytes, " +
                          std::to_string(*got) + " left",
                      at);
  block_at_ = at;
  if (load_u32(buf_.data(), true) == kShbType) {
    // A new section: its byte-order magic says how to read its length.
    if (auto s = read_more(4, "pcapng section header", at, 12); !s) return std::move(s).error();
    const std::uint8_t* bom = buf_.data() + 8;
    if (load_u32(bom, true) == kByteOrderMagic) {
      big_endian_ = true;
    } else if (load_u32(bom, false) == kByteOrderMagic) {
      big_endian_ = false;
    } else {
      return make_error(Errc::bad_magic,
                        "pcapng section header at " + hex_offset(at) + " has byte-order magic " +
                            hex32(load_u32(bom, true)) + ", not 1a2b3c4d in either order",
                        at + 8);
    }
  }
  block_type_ = load_u32(buf_.data(), big_endian_);
  return true;
}

Status Reader::Impl::read_section_header(std::uint64_t at) {
  // buf_ holds type, length and byte-order magic.
  const std::uint32_t length = load_u32(buf_.data() + 4, big_endian_);
  if (length < 28 || length % 4 != 0)
    return make_error(Errc::bad_value,
                      "pcapng section header at " + hex_offset(at) + " has total length " +
                          hex_offset(length) + " (a multiple of 4, at least 0x1c, expected)",
                      at + 4);
  if (length > options_.max_packet_bytes)
    return make_error(Errc::limit_exceeded,
                      "pcapng section header at " + hex_offset(at) + " claims " + hex_offset(length) +
                          " bytes, over the limit of " + hex_offset(options_.max_packet_bytes) +
                          " (--max-packet-bytes)",
                      at + 4);
  if (auto s = read_more(length - 12, "pcapng section header", at, length); !s) return s;
  ByteReader r(ByteSpan(buf_).subspan(8, length - 12), at + 8);
  OrderedReader o{r, big_endian_};
  (void)*o.u32();  // byte-order magic
  const std::uint16_t major = *o.u16();
  const std::uint16_t minor = *o.u16();
  if (major != 1)
    return make_error(Errc::unsupported_version,
                      "pcapng section version " + std::to_string(major) + "." + std::to_string(minor) +
                          " at " + hex_offset(at) + " unsupported (1.0 expected)",
                      at + 12);
  const std::uint32_t trailer = load_u32(buf_.data() + length - 4, big_endian_);
  if (trailer != length)
    return make_error(Errc::bad_value,
                      "pcapng section header at " + hex_offset(at) + ": trailing length " +
                          hex_offset(trailer) + " differs from " + hex_offset(length),
                      at + length - 4);
  interfaces_.clear();
  return ok_status();
}

Status Reader::Impl::read_interface(ByteReader body, std::uint64_t at) {
  OrderedReader o{body, big_endian_};
  auto link_type = o.u16();
  auto reserved = o.u16();
  auto snaplen = o.u32();
  if (!link_type || !reserved || !snaplen)
    return make_error(Errc::bad_value,
                      "pcapng interface description at " + hex_offset(at) + " is too short", at + 4);
  Interface iface;
  iface.link_type = *link_type;
  iface.snaplen = *snaplen;
  const std::size_t id = interfaces_.size();
  // Options: code u16, length u16, value padded to 4 bytes.
  while (body.remaining() >= 4) {
    const std::uint64_t opt_at = body.offset();
    const std::uint16_t code = *o.u16();
    const std::uint16_t len = *o.u16();
    if (code == kOptEndOfOpt) break;
    const std::uint32_t padded = (std::uint32_t{len} + 3u) & ~3u;
    auto value = body.bytes(padded);
    if (!value)
      return make_error(Errc::length_out_of_range,
                        "pcapng option at " + hex_offset(opt_at) + " claims " + std::to_string(len) +
                            " bytes, its block has " + std::to_string(body.remaining()) + " left",
                        opt_at + 2);
    ByteReader v(value->first(len), opt_at + 4);
    if (code == kOptIfTsresol && len >= 1) {
      const std::uint8_t res = *v.u8();
      const unsigned exponent = res & 0x7fu;
      const bool binary = (res & 0x80u) != 0;
      if ((binary && exponent > 63) || (!binary && exponent > 19))
        return make_error(Errc::unsupported,
                          "pcapng interface " + std::to_string(id) + " at " + hex_offset(at) +
                              ": timestamp resolution " + (binary ? "2^-" : "10^-") +
                              std::to_string(exponent) + " unsupported",
                          opt_at + 4);
      std::uint64_t units = 1;
      for (unsigned i = 0; i < exponent; ++i) units *= binary ? 2u : 10u;
      iface.units_per_second = units;
    } else if (code == kOptIfTsoffset && len == 8) {
      auto off = o.big_endian ? v.i64_be() : v.i64_le();
      iface.offset_seconds = *off;
    }
  }
  if (!link_type_supported(iface.link_type))
    warn_once("link" + std::to_string(iface.link_type), DiagnosticKind::unsupported_link, at,
              "pcapng interface " + std::to_string(id) + " at " + hex_offset(at) + ": link type " +
                  link_type_name(iface.link_type) + " unsupported, its packets are skipped");
  interfaces_.push_back(iface);
  return ok_status();
}

Result<std::optional<Packet>> Reader::Impl::next_pcapng() {
  for (;;) {
    auto more = read_block();
    if (!more) return std::move(more).error();
    if (!*more) return std::optional<Packet>{};
    const std::uint64_t at = block_at_;
    if (block_type_ == kShbType) {
      if (auto s = read_section_header(at); !s) return std::move(s).error();
      continue;
    }
    const std::uint32_t length = load_u32(buf_.data() + 4, big_endian_);
    if (length < 12 || length % 4 != 0)
      return make_error(Errc::bad_value,
                        "pcapng block type " + hex32(block_type_) + " at " + hex_offset(at) +
                            " has total length " + hex_offset(length) +
                            " (a multiple of 4, at least 0xc, expected)",
                        at + 4);
    const bool wanted = block_type_ == kIdbType || block_type_ == kEpbType ||
                        block_type_ == kSpbType || block_type_ == kPbType;
    if (!wanted) {
      // Skipped unread: only the trailing length is checked.
      warn_once("block" + std::to_string(block_type_), DiagnosticKind::unsupported_block, at,
                "pcapng block type " + hex32(block_type_) + " at " + hex_offset(at) +
                    " unsupported, skipped");
      auto skipped = source_->skip(length - 12);
      if (!skipped) return std::move(skipped).error();
      offset_ += *skipped;
      if (*skipped < length - 12u)
        return make_error(Errc::truncated,
                          "truncated pcapng block at " + hex_offset(at) + ": needs " +
                              std::to_string(length) + " bytes, " + std::to_string(offset_ - at) + " left",
                          at);
      if (auto s = read_exact(4, "pcapng block", at, length); !s) return std::move(s).error();
      const std::uint32_t trailer = load_u32(buf_.data(), big_endian_);
      if (trailer != length)
        return make_error(Errc::bad_value,
                          "pcapng block at " + hex_offset(at) + ": trailing length " +
                              hex_offset(trailer) + " differs from " + hex_offset(length),
                          at + length - 4);
      continue;
    }
    if (length > options_.max_packet_bytes)
      return make_error(Errc::limit_exceeded,
                        "pcapng block at " + hex_offset(at) + " claims " + hex_offset(length) +
                            " bytes, over the limit of " + hex_offset(options_.max_packet_bytes) +
                            " (--max-packet-bytes)",
                        at + 4);
    if (auto s = read_more(length - 8, "pcapng block", at, length); !s) return std::move(s).error();
    const std::uint32_t trailer = load_u32(buf_.data() + length - 4, big_endian_);
    if (trailer != length)
      return make_error(Errc::bad_value,
                        "pcapng block at " + hex_offset(at) + ": trailing length " +
                            hex_offset(trailer) + " differs from " + hex_offset(length),
                        at + length - 4);
    ByteReader body(ByteSpan(buf_).subspan(8, length - 12), at + 8);
    if (block_type_ == kIdbType) {
      if (auto s = read_interface(body, at); !s) return std::move(s).error();
      continue;
    }
    OrderedReader o{body, big_endian_};
    const char* name = block_type_ == kEpbType   ? "enhanced packet block"
                       : block_type_ == kSpbType ? "simple packet block"
                                                 : "packet block";
    auto too_short = [&] {
      return make_error(Errc::bad_value,
                        std::string("pcapng ") + name + " at " + hex_offset(at) + " is too short (" +
                            std::to_string(length) + " bytes)",
                        at + 4);
    };
    Packet p;
    p.offset = at;
    std::uint32_t iface_id = 0;
    std::uint32_t captured = 0;
    if (block_type_ == kSpbType) {
      auto orig = o.u32();
      if (!orig) return too_short();
      p.original_length = *orig;
      p.has_timestamp = false;
    } else {
      std::uint64_t hi = 0, lo = 0;
      if (block_type_ == kEpbType) {
        auto id = o.u32();
        if (!id) return too_short();
        iface_id = *id;
      } else {
        auto id = o.u16();
        if (!id || !o.u16()) return too_short();
        iface_id = *id;
      }
      auto h = o.u32();
      auto l = o.u32();
      auto cap = o.u32();
      auto orig = o.u32();
      if (!h || !l || !cap || !orig) return too_short();
      hi = *h;
      lo = *l;
      captured = *cap;
      p.original_length = *orig;
      if (iface_id < interfaces_.size()) {
        const Interface& iface = interfaces_[iface_id];
        p.timestamp = make_timestamp((hi << 32) | lo, iface.units_per_second, iface.offset_seconds);
      }
    }
    if (iface_id >= interfaces_.size())
      return make_error(Errc::bad_value,
                        std::string("pcapng ") + name + " at " + hex_offset(at) + " names interface " +
                            std::to_string(iface_id) + ", its section describes " +
                            std::to_string(interfaces_.size()),
                        at + 8);
    const Interface& iface = interfaces_[iface_id];
    if (block_type_ == kSpbType) {
      std::uint64_t cap = std::min<std::uint64_t>(p.original_length, body.remaining());
      if (iface.snaplen != 0) cap = std::min<std::uint64_t>(cap, iface.snaplen);
      captured = static_cast<std::uint32_t>(cap);
    }
    const std::uint64_t data_at = body.offset();
    auto data = body.bytes(captured);
    if (!data)
      return make_error(Errc::length_out_of_range,
                        std::string("pcapng ") + name + " at " + hex_offset(at) + " claims " +
                            std::to_string(captured) + " captured bytes, its block holds " +
                            std::to_string(body.remaining()),
                        at + 20);
    if (iface.snaplen != 0 && captured > iface.snaplen)
      warn_once("snaplen", DiagnosticKind::record_over_snaplen, at,
                std::string("pcapng ") + name + " at " + hex_offset(at) + " holds " +
                    std::to_string(captured) + " bytes, more than interface " +
                    std::to_string(iface_id) + "'s snapshot length " +
                    std::to_string(iface.snaplen) + " (kept)");
    if (p.original_length < captured)
      warn_once("orig<incl", DiagnosticKind::record_over_original, at,
                std::string("pcapng ") + name + " at " + hex_offset(at) + " captured " +
                    std::to_string(captured) + " bytes of a " + std::to_string(p.original_length) +
                    "-byte packet (kept)");
    p.interface = iface_id;
    p.link_type = iface.link_type;
    p.data_offset = data_at;
    p.data = *data;
    return std::optional<Packet>(p);
  }
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
