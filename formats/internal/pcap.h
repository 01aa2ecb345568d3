// Capture files as tcpdump, dumpcap and Wireshark write them (libpcap and
// pcapng), read packet by packet: the file container only. The decoding of
// one packet down to its TCP segment is formats/internal/packet.h, TCP reassembly
// formats/internal/tcp_reassembly.h; the capture-level API that commands use is
// formats/internal/capture.h.
//
// libpcap (one header, then records; every integer in the byte order the
// magic reveals):
//
//   offset  size  field
//   0       4     magic: a1b2c3d4 (microsecond timestamps) or a1b23c4d
//                 (nanosecond); d4c3b2a1 / 4d3cb2a1 on disk means
//                 little-endian
//   4       2     version major (2)        6  2  version minor (4; 3 accepted)
//   8       4     thiszone (ignored)      12  4  sigfigs (ignored)
//   16      4     snaplen                 20  4  link type in bits 0..15
//                                                 (FCS bits 26..28 ignored)
//   record: ts_sec u32, ts_frac u32 (us or ns), incl_len u32, orig_len u32,
//           then incl_len bytes of packet
//
// pcapng (blocks; byte order set per section by the SHB's byte-order magic):
//
//   block:  type u32, total_length u32, body, total_length u32 again;
//           total_length >= 12 and a multiple of 4
//   SHB  0a0d0d0a  byte-order magic 1a2b3c4d, major u16 (1), minor u16,
//                  section length i64, options. Starts a new section: the
//                  interface list and byte order start over.
//   IDB  00000001  link type u16, reserved u16, snaplen u32, options
//                  (if_tsresol code 9: 10^-v, or 2^-(v & 0x7f) when the top
//                  bit is set, default 10^-6; if_tsoffset code 14: i64 s)
//   EPB  00000006  interface u32, ts high u32, ts low u32, captured u32,
//                  original u32, data padded to 4, options
//   SPB  00000003  original u32, data (captured = min(original, snaplen of
//                  interface 0, room in the block)); no timestamp
//   PB   00000002  (obsolete) interface u16, drops u16, ts high, ts low,
//                  captured u32, original u32, data, options
//   other types (NRB, ISB, DSB, custom, ...) are skipped unread, with one
//   warning per type.
//
// Limits: a record or block is read into memory only after its declared size
// is checked against ReaderOptions::max_packet_bytes, so a length of 2^32-1
// is an error, never an allocation; blocks that are skipped are seeked over.
// A record longer than the file's snaplen is kept (with a warning). Memory is
// one record or block at a time.
//
// Errors (all with absolute file offsets): Errc::bad_magic "not a pcap file",
// Errc::unsupported_version for a known magic with a version we do not read,
// Errc::truncated "truncated pcap record at 0x..." when the file ends inside a
// record or block, Errc::limit_exceeded for sizes over the limit,
// Errc::bad_value for inconsistent block lengths or interface ids.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/result.h"
#include "daskcaps/formats/capture_options.h"

namespace daskcaps::formats::pcap {

enum class FileFormat : std::uint8_t { unknown, pcap, pcapng };

std::string_view to_string(FileFormat format);

/// Which capture format `first_bytes` start: libpcap needs 4 bytes (either
/// byte order, us or ns magic), pcapng its SHB type and, when at least 12
/// bytes are given, the byte-order magic. Never fails; unknown otherwise.
FileFormat sniff(ByteSpan first_bytes);

/// Link-layer header types (LINKTYPE_* values as they appear in files).
namespace link {
inline constexpr std::uint32_t kNull = 0;         // 4-byte AF_ value, host order
inline constexpr std::uint32_t kEthernet = 1;     // incl. 802.1Q / 802.1ad tags
inline constexpr std::uint32_t kRawBsd12 = 12;    // raw IP (DLT_RAW on OpenBSD)
inline constexpr std::uint32_t kRawBsd14 = 14;    // raw IP (DLT_RAW on BSD/OS)
inline constexpr std::uint32_t kRaw = 101;        // raw IPv4 or IPv6
inline constexpr std::uint32_t kLoop = 108;       // 4-byte AF_ value, big-endian
inline constexpr std::uint32_t kLinuxSll = 113;   // Linux cooked v1 (16 bytes)
inline constexpr std::uint32_t kIpv4 = 228;       // raw IPv4
inline constexpr std::uint32_t kIpv6 = 229;       // raw IPv6
inline constexpr std::uint32_t kLinuxSll2 = 276;  // Linux cooked v2 (20 bytes)
}  // namespace link

/// True for the link types decode_packet() reads.
bool link_type_supported(std::uint32_t link_type);
/// "EN10MB", "LINUX_SLL2", ... or "LINKTYPE 105".
std::string link_type_name(std::uint32_t link_type);

/// Seconds since the epoch plus nanoseconds, exact for every resolution up to
/// 1 ns (finer ones are rounded down).
struct Timestamp {
  std::int64_t seconds = 0;
  std::uint32_t nanoseconds = 0;
  double as_double() const { return static_cast<double>(seconds) + nanoseconds * 1e-9; }
  auto operator<=>(const Timestamp&) const = default;
};

/// One capture interface: the libpcap file header, or a pcapng IDB.
struct Interface {
  std::uint32_t link_type = 0;
  std::uint32_t snaplen = 0;  // 0: not limited
  std::uint64_t units_per_second = 1000000;
  std::int64_t offset_seconds = 0;  // pcapng if_tsoffset
};

/// One packet record. `data` is valid until the next call to Reader::next().
struct Packet {
  std::uint64_t offset = 0;       // file offset of the record header or block
  std::uint64_t data_offset = 0;  // file offset of data[0]
  std::uint32_t interface = 0;    // pcapng interface id in its section; 0 for libpcap
  std::uint32_t link_type = 0;
  bool has_timestamp = true;      // false for pcapng simple packet blocks
  Timestamp timestamp;
  std::uint32_t original_length = 0;  // length on the wire (>= data.size() when cut)
  ByteSpan data;
};

/// Reads packets one record or block at a time from a file (or, for tests and
/// fuzzing, from memory). Each instance reads one capture from its start.
class Reader {
 public:
  /// Opens a file and reads its header (libpcap) or first SHB (pcapng).
  /// Fails with Errc::io when it cannot be opened, Errc::bad_magic when it is
  /// neither format, Errc::unsupported_version, or Errc::truncated.
  static Result<std::unique_ptr<Reader>> open_file(const std::string& path,
                                                   const ReaderOptions& options = {});
  /// The same over bytes in memory, which must outlive the reader.
  static Result<std::unique_ptr<Reader>> open_memory(ByteSpan bytes,
                                                     const ReaderOptions& options = {});
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  /// The next packet, nullopt at a clean end of file, or an error (the file
  /// ends inside a record or block, a length over the limit, an inconsistent
  /// block). After an error every call returns the same error.
  Result<std::optional<Packet>> next();

  FileFormat format() const;
  /// Absolute file offset of the next unread byte.
  std::uint64_t offset() const;
  /// Interfaces of the current section (one for libpcap).
  const std::vector<Interface>& interfaces() const;
  /// Recoverable oddities, each kind said once, with the offset of the
  /// record or block that showed it first: unsupported pcapng block types
  /// skipped (unsupported_block; one per block type), interfaces of a link
  /// type not decoded (unsupported_link; one per link type), records longer
  /// than the snaplen (record_over_snaplen), captured > original
  /// (record_over_original).
  const std::vector<Diagnostic>& warnings() const;

  class Impl;

 private:
  explicit Reader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace daskcaps::formats::pcap
