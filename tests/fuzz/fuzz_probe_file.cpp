// fuzz_probe_file: probe files (core/caps/probe.h), the JSON that
// `probe --json` prints and every command accepts in place of an endpoint,
// often written by hand.
//
// Input: the text of a probe file.
//
// Property, when parse_probe_file accepts it: writing the probe back with
// probe_to_json_text gives a document that parses again, and writing that
// gives the same text (what we write, we read back unchanged).
#include <cstdint>
#include <string>

#include "daskcaps/caps/probe.h"
#include "fuzz_common.h"

using namespace daskcaps;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_chars(ByteSpan(data, size));
  auto probe = parse_probe_file(text);
  if (!probe) {
    (void)probe.error().message();
    return 0;
  }
  const std::string once = probe_to_json_text(*probe);
  auto again = parse_probe_file(once);
  FUZZ_CHECK(again.ok());
  const std::string twice = probe_to_json_text(*again);
  FUZZ_CHECK(twice == once);
  return 0;
}
