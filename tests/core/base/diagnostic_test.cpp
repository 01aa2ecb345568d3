#include "daskcaps/base/diagnostic.h"

#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>

using namespace daskcaps;

TEST_CASE("diagnostic: every kind has its own stable lower-case hyphenated name") {
  std::set<std::string_view> seen;
  for (DiagnosticKind k : kAllDiagnosticKinds) {
    const std::string_view name = to_string(k);
    CAPTURE(name);
    CHECK(seen.insert(name).second);
    CHECK(name != "unknown");
    REQUIRE(!name.empty());
    CHECK(name.front() != '-');
    CHECK(name.back() != '-');
    for (char c : name) CHECK(((c >= 'a' && c <= 'z') || c == '-'));
    CHECK(diagnostic_kind_from_string(name) == k);
  }
  // The list holds every enumerator: the last one is its last entry.
  CHECK(kAllDiagnosticKinds.back() == DiagnosticKind::unconvertible);
  CHECK(static_cast<std::size_t>(DiagnosticKind::unconvertible) + 1 == kAllDiagnosticKinds.size());
  // A few names scripts already test.
  CHECK(to_string(DiagnosticKind::capture_truncated) == "capture-truncated");
  CHECK(to_string(DiagnosticKind::bytes_lost) == "bytes-lost");
  CHECK(to_string(DiagnosticKind::not_dask) == "not-dask");
  CHECK(to_string(DiagnosticKind::pickle_unreadable) == "pickle-unreadable");
  CHECK(!diagnostic_kind_from_string("bytes_lost"));
  CHECK(!diagnostic_kind_from_string(""));
}

TEST_CASE("diagnostic: from an error, limits and missing codecs keep their own kind") {
  Error e = make_error(Errc::codec_failed, "lz4 block is corrupt", 0x40);
  e.add_context("frame 2");
  Diagnostic d = diagnostic_from_error(DiagnosticKind::codec_failed, e, "data: ");
  CHECK(d == Diagnostic{DiagnosticKind::codec_failed, 0x40, "data: frame 2 @0x40: lz4 block is corrupt"});
  CHECK(d.has_offset());

  CHECK(diagnostic_from_error(DiagnosticKind::codec_failed, make_error(Errc::limit_exceeded, "too big")).kind ==
        DiagnosticKind::limit_exceeded);
  CHECK(diagnostic_from_error(DiagnosticKind::pickle_unreadable, make_error(Errc::too_deep, "deep")).kind ==
        DiagnosticKind::limit_exceeded);
  CHECK(diagnostic_from_error(DiagnosticKind::codec_failed, make_error(Errc::unknown_codec, "blosc")).kind ==
        DiagnosticKind::unknown_codec);
  Diagnostic plain = diagnostic_from_error(DiagnosticKind::bad_split, make_error(Errc::bad_value, "odd"));
  CHECK(plain == Diagnostic{DiagnosticKind::bad_split, kNoOffset, "odd"});
  CHECK(!plain.has_offset());

  CHECK(diagnostic_texts({plain, d}) == std::vector<std::string>{"odd", "data: frame 2 @0x40: lz4 block is corrupt"});
  CHECK(diagnostic_texts({}).empty());
}

TEST_CASE("diagnostic: the man page lists every kind under DIAGNOSTICS") {
  std::ifstream in(std::string(DASKCAPS_SOURCE_DIR) + "/man/dask-caps.1");
  REQUIRE(in);
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  const auto start = text.find("\n.SH DIAGNOSTICS\n");
  REQUIRE(start != std::string::npos);
  const auto end = text.find("\n.SH ", start + 1);
  const std::string section = text.substr(start, end - start);
  for (DiagnosticKind k : kAllDiagnosticKinds) {
    // Names are written in bold after .B, alone or in a comma list, with
    // \- for each hyphen (a plain - may print as a typographic hyphen).
    std::string name;
    for (char c : to_string(k)) name += c == '-' ? std::string("\\-") : std::string(1, c);
    CAPTURE(name);
    const bool listed = section.find(".B " + name + "\n") != std::string::npos ||
                        section.find(".B " + name + ",") != std::string::npos ||
                        section.find(", " + name + "\n") != std::string::npos;
    CHECK(listed);
  }
}

TEST_CASE("error: a context that already names the outer one is not named twice") {
  Error e = make_error(Errc::unsupported, "cupy.ndarray cannot become a CPU object");
  e.add_context("data['x'][0][0]");
  e.add_context("data['x']");  // the path inside it names it already
  CHECK(e.message() == "data['x'][0][0]: cupy.ndarray cannot become a CPU object");
  e.add_context("data['x'][0][0]");  // the same context
  e.add_context("message 3");
  CHECK(e.message() == "message 3: data['x'][0][0]: cupy.ndarray cannot become a CPU object");
  // A context that only begins with the same letters is another one.
  Error f = make_error(Errc::bad_value, "odd");
  f.add_context("data2");
  f.add_context("data");
  CHECK(f.message() == "data: data2: odd");
}
