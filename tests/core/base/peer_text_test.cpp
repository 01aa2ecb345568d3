#include "daskcaps/base/peer_text.h"

#include <doctest/doctest.h>

#include <string>

using namespace daskcaps;

TEST_CASE("peer_text: printable ASCII and well-formed UTF-8 are shown as they came") {
  CHECK(peer_text("lz4") == "lz4");
  CHECK(peer_text("compression \"zstd\", pickle 5") == "compression \"zstd\", pickle 5");
  CHECK(peer_text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8d") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8d");
  CHECK(peer_text("") == "");
}

TEST_CASE("peer_text: a newline cannot forge a log line, nor a NUL or an escape reach the terminal") {
  const std::string forged = "lz4\n2026-12-03 13:00:00,000 - distributed.scheduler - CRITICAL - forged";
  const std::string shown = peer_text(forged);
  CHECK(shown.find('\n') == std::string::npos);
  CHECK(shown == "lz4\\n2026-12-03 13:00:00,000 - distributed.scheduler - CRITICAL - forged");
  CHECK(peer_text(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(peer_text("\r\t\x1b[2J\x7f") == "\\r\\t\\x1b[2J\\x7f");
  // A backslash is doubled, so that an escape in the output is always ours.
  CHECK(peer_text("a\\nb") == "a\\\\nb");
}

TEST_CASE("peer_text: bytes that are not well-formed UTF-8 are escaped one by one") {
  CHECK(peer_text("\xff\xfe") == "\\xff\\xfe");
  CHECK(peer_text("\xc3") == "\\xc3");                  // cut short
  CHECK(peer_text("\xc0\xaf") == "\\xc0\\xaf");         // overlong '/'
  CHECK(peer_text("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  CHECK(peer_text("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(peer_text("\x80x") == "\\x80x");
}

TEST_CASE("peer_text: a 50 MiB name is cut, and the text says how much was cut") {
  const std::string huge(std::size_t{50} << 20, 'a');
  const std::string shown = peer_text(huge);
  CHECK(shown == std::string(kPeerTextBytes, 'a') + "...(+" + std::to_string(huge.size() - kPeerTextBytes) + " bytes)");
  // Every byte escaped to four: still bounded by 4 * max_bytes + 24.
  const std::string nuls(std::size_t{10} << 20, '\0');
  CHECK(peer_text(nuls, 64).size() <= 4 * 64 + 24);
  CHECK(peer_text("abcdef", 3) == "abc...(+3 bytes)");
  CHECK(peer_text("abc", 3) == "abc");
}
