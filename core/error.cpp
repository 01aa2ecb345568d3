#include "core/error.h"

#include <cstdio>

namespace daskcaps {

std::string_view to_string(Errc code) {
  switch (code) {
    case Errc::truncated: return "truncated";
    case Errc::bad_magic: return "bad_magic";
    case Errc::unsupported_version: return "unsupported_version";
    case Errc::length_out_of_range: return "length_out_of_range";
    case Errc::limit_exceeded: return "limit_exceeded";
    case Errc::too_deep: return "too_deep";
    case Errc::bad_opcode: return "bad_opcode";
    case Errc::bad_value: return "bad_value";
    case Errc::codec_failed: return "codec_failed";
    case Errc::unknown_codec: return "unknown_codec";
    case Errc::unsupported: return "unsupported";
    case Errc::io: return "io";
    case Errc::network: return "network";
    case Errc::refused: return "refused";
    case Errc::timeout: return "timeout";
    case Errc::tls: return "tls";
    case Errc::protocol: return "protocol";
    case Errc::usage: return "usage";
    case Errc::not_found: return "not_found";
    case Errc::internal: return "internal";
  }
  return "internal";
}

Error& Error::add_context(std::string_view context) {
  if (!context.empty()) what = std::string(context) + ": " + what;
  return *this;
}

std::string Error::message() const {
  if (!has_offset()) return what;
  char buf[32];
  std::snprintf(buf, sizeof buf, "@0x%llx: ", static_cast<unsigned long long>(offset));
  return buf + what;
}

Error make_error(Errc code, std::string what, std::uint64_t offset) {
  return Error{code, offset, std::move(what)};
}

}  // namespace daskcaps
