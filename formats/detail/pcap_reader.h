// The pcap reader's state (Reader::Impl of formats/internal/pcap.h) and the
// constants of both file formats, shared by the libpcap half
// (formats/internal/pcap.cpp: sniffing, the file header and records,
// opening) and the pcapng half (formats/detail/pcapng_blocks.cpp: blocks,
// sections, interfaces, packets). The formats are described at the top of
// formats/internal/pcap.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "core/base/internal/byte_reader.h"
#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/result.h"
#include "formats/internal/pcap.h"
#include "formats/detail/capture_bytes.h"

// Internals of libdaskcaps: never exported from the shared library.
#pragma GCC visibility push(hidden)

namespace daskcaps::formats::pcap {

namespace detail {

inline constexpr std::uint32_t kPcapMagicUs = 0xa1b2c3d4;
inline constexpr std::uint32_t kPcapMagicNs = 0xa1b23c4d;
inline constexpr std::uint32_t kShbType = 0x0a0d0d0a;
inline constexpr std::uint32_t kByteOrderMagic = 0x1a2b3c4d;
inline constexpr std::uint32_t kIdbType = 0x00000001;
inline constexpr std::uint32_t kPbType = 0x00000002;
inline constexpr std::uint32_t kSpbType = 0x00000003;
inline constexpr std::uint32_t kEpbType = 0x00000006;
inline constexpr std::size_t kPcapHeaderSize = 24;
inline constexpr std::size_t kPcapRecordHeaderSize = 16;
inline constexpr std::uint16_t kOptEndOfOpt = 0;
inline constexpr std::uint16_t kOptIfTsresol = 9;
inline constexpr std::uint16_t kOptIfTsoffset = 14;

inline std::uint32_t load_u32(const std::uint8_t* p, bool big_endian) {
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

/// "0x0a0d0d0a".
std::string hex32(std::uint32_t v);
/// True when a file this short could still be the start of a capture.
bool prefix_of_magic(ByteSpan head);
/// A count of `units_per_second` ticks as seconds and nanoseconds.
Timestamp make_timestamp(std::uint64_t ticks, std::uint64_t units_per_second, std::int64_t offset_seconds);

}  // namespace detail

// Hidden as the rest of this header: a class nested in an exported one
// would otherwise take its visibility.
class __attribute__((visibility("hidden"))) Reader::Impl {
 public:
  Impl(std::unique_ptr<detail::Source> source, const ReaderOptions& options)
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

  std::unique_ptr<detail::Source> source_;
  ReaderOptions options_;
  Buffer buf_;
  bool big_endian_ = false;
  std::set<std::string> warned_;
  std::optional<Error> failed_;
  // pcapng: the block just read.
  std::uint32_t block_type_ = 0;
  std::uint64_t block_at_ = 0;
};

}  // namespace daskcaps::formats::pcap

#pragma GCC visibility pop
