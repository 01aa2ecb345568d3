// Text a peer sent, made fit for a log line or a terminal.
//
// A peer's strings (a handshake's codec names, role and version, its
// compression name, an identity's type, an op it sent) reach log lines and
// the text reports. Written as they came, a newline in them forges a line
// of our output, a NUL or an escape sequence reaches the terminal, and a
// 50 MiB name becomes a 50 MiB line. peer_text() is the one way such a
// string is printed: printable ASCII and well-formed UTF-8 stay as they
// are; a backslash becomes "\\"; \n, \r and \t become those two-character
// escapes; every other control byte (NUL included), DEL, and every byte
// that is not part of well-formed UTF-8 becomes "\xNN". At most
// `max_bytes` bytes of the input are shown; the rest is cut, and the text
// says how many bytes were cut ("...(+52428700 bytes)"), so the result is
// at most 4 * max_bytes + 24 bytes long.
//
// JSON output does not use it: nlohmann's dump() escapes, and what a JSON
// document holds is bounded where it is read (the "capabilities" key,
// core/wire/handshake.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace daskcaps {

/// How much of a peer's string a log line shows by default.
inline constexpr std::size_t kPeerTextBytes = 256;

/// `text` escaped and bounded as described above.
std::string peer_text(std::string_view text, std::size_t max_bytes = kPeerTextBytes);

/// The same for a string of which only the first bytes are at hand (`head`,
/// at least min(max_bytes, total_bytes) of them): the text of the string
/// of `total_bytes` bytes that starts so.
std::string peer_text(std::string_view head, std::uint64_t total_bytes, std::size_t max_bytes);

}  // namespace daskcaps
