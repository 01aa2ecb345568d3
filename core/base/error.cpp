#include "daskcaps/base/result.h"

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

Error& Error::add_context(std::string_view outer) {
  if (outer.empty()) return *this;
  // A context that is `outer` already, or a path inside it ("data['x'][0]"
  // inside "data['x']"), names it: it is not named twice.
  if (context.starts_with(outer) && (context.size() == outer.size() || context[outer.size()] == '['))
    return *this;
  context = context.empty() ? std::string(outer) : std::string(outer) + ": " + context;
  return *this;
}

std::string Error::message() const {
  std::string out = context;
  if (has_offset()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "@0x%llx", static_cast<unsigned long long>(offset));
    if (!out.empty()) out += ' ';
    out += buf;
  }
  if (!out.empty()) out += ": ";
  return out + what;
}

Error rebase_error(Error e, std::uint64_t base) {
  if (!e.has_offset()) return e;
  if (base != kNoOffset) {
    e.offset += base;
    return e;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "at byte 0x%llx of it: ", static_cast<unsigned long long>(e.offset));
  e.what = buf + e.what;
  e.offset = kNoOffset;
  return e;
}

Error make_error(Errc code, std::string what, std::uint64_t offset) {
  return Error{code, offset, std::move(what), {}};
}

}  // namespace daskcaps
