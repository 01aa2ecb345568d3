// The pcapng half of the pcap reader (formats/detail/pcap_reader.h): one
// block at a time, its declared length checked against the limits before
// anything is read into memory; section headers, interfaces and the three
// packet blocks (EPB, SPB, PB). The layout is at the top of
// formats/internal/pcap.h.
#include <algorithm>
#include <string>

#include "formats/detail/pcap_reader.h"
#include "daskcaps/base/option_name.h"

namespace daskcaps::formats::pcap {

using namespace detail;

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
                          " (" + option_name("max_packet_bytes") + ")",
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
                            " (" + option_name("max_packet_bytes") + ")",
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

}  // namespace daskcaps::formats::pcap
