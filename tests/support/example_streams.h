// Test helper: the messages of the example streams in examples/ (what the
// real Dask wrote; examples/generate.py made them), for unit tests that want
// real bytes rather than built ones (docs/design.md §9.1).
//
//   auto msgs = testsupport::example_messages("pickle5.stream");
//   auto m = daskcaps::parse_message(msgs[1].frames, {}, msgs[1].frame_offsets());
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "daskcaps/wire/message.h"
#include "formats/internal/raw_stream.h"

#ifndef DASKCAPS_SOURCE_DIR
#error "DASKCAPS_SOURCE_DIR must name the source tree (tests/CMakeLists.txt)"
#endif

namespace testsupport {

struct ExampleMessage {
  std::uint64_t offset = 0;  // file offset of its L field
  std::vector<daskcaps::Bytes> frames;
  /// Absolute file offsets of each frame, for parse_message.
  std::vector<std::uint64_t> frame_offsets() const { return daskcaps::frame_offsets_for(offset, frames); }
};

/// Every message of examples/NAME, handshake first; fails the test when the
/// file cannot be read whole.
inline std::vector<ExampleMessage> example_messages(const std::string& name) {
  std::vector<ExampleMessage> out;
  auto reader = daskcaps::formats::RawStreamReader::open(std::string(DASKCAPS_SOURCE_DIR) + "/examples/" + name, {});
  REQUIRE_MESSAGE(reader, name);
  for (;;) {
    auto m = (*reader)->next();
    REQUIRE_MESSAGE(m, name);
    if (!*m) break;
    out.push_back({(*m)->offset, (*m)->memory_frames()});
  }
  return out;
}

/// Message `index` of examples/NAME, parsed with its file offsets.
inline daskcaps::Message example_message(const std::string& name, std::size_t index) {
  auto all = example_messages(name);
  REQUIRE(index < all.size());
  const auto offsets = all[index].frame_offsets();
  auto m = daskcaps::parse_message(all[index].frames, {}, offsets);
  REQUIRE(m);
  return std::move(*m);
}

}  // namespace testsupport
