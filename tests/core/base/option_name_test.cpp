#include "daskcaps/base/option_name.h"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/wire/frames.h"

using namespace daskcaps;

namespace {

std::string test_spelling(std::string_view field, OptionKind kind) {
  return std::string(kind == OptionKind::limit ? "L:" : "O:") + std::string(field);
}

// Puts the library's own speller back however the test ends: the speller
// is the process's, and other tests read the library's spelling.
struct SpellerScope {
  explicit SpellerScope(OptionSpeller s) { set_option_speller(s); }
  ~SpellerScope() { set_option_speller(nullptr); }
};

}  // namespace

TEST_CASE("option_name: the library spells its own fields until a program says otherwise") {
  CHECK(option_name("max_frames") == "limit max_frames");
  CHECK(option_name("keep_unconvertible", OptionKind::option) == "keep_unconvertible");
  {
    SpellerScope scope(test_spelling);
    CHECK(option_name("max_frames") == "L:max_frames");
    CHECK(option_name("keep_unconvertible", OptionKind::option) == "O:keep_unconvertible");
  }
  CHECK(option_name("max_frames") == "limit max_frames");
}

TEST_CASE("option_name: a refusal names the limit as the process's speller spells it") {
  const Bytes one = Bytes::copy_of(as_bytes("\x80"));
  Limits few;
  few.max_frames = 2;
  const std::vector<Bytes> frames(3, one);
  auto plain = check_frames(frames, few);
  REQUIRE(!plain);
  CHECK(plain.error().what == "frame count 3 exceeds limit 2 (limit max_frames)");
  SpellerScope scope(test_spelling);
  auto spelt = check_frames(frames, few);
  REQUIRE(!spelt);
  CHECK(spelt.error().what == "frame count 3 exceeds limit 2 (L:max_frames)");
}
