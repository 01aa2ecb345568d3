#include "daskcaps/formats/stream_outputs.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "core/wire/internal/message_sink.h"
#include "daskcaps/wire/frames.h"
#include "support/dask_builder.h"
#include "support/test_bytes.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport;

namespace {
std::string temp_path() {
  char tmpl[] = "/tmp/daskcaps-out-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  std::remove(tmpl);
  return tmpl;
}
Buffer read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return Buffer(as_bytes(s));
}
}  // namespace

TEST_CASE("stream_outputs: messages written in place sit between whole ones, their bytes where they were put") {
  const std::string path = temp_path();
  auto out = StreamOutputs::create(path, false);
  REQUIRE(out);
  const std::vector<Bytes> first = frames_of({Buffer(10, 1), Buffer(300000, 2)});
  REQUIRE((*out)->write(0, first));
  // In place: the tail first, a hole, then the head; a large write and a
  // move back over the hole; bytes past the size it returns are cut.
  const Buffer big = random_bytes(700000, 3);
  REQUIRE((*out)->write_in_place(0, [&](MessageSink& s) -> Result<std::uint64_t> {
    if (Status st = s.write_at(100, ByteSpan(big).first(1000)); !st) return std::move(st).error();
    if (Status st = s.write_at(1100, ByteSpan(big).subspan(1000)); !st) return std::move(st).error();
    if (Status st = s.move(100, 40, big.size()); !st) return std::move(st).error();
    if (Status st = s.write_at(0, ByteSpan(big).first(40)); !st) return std::move(st).error();
    return 40 + big.size();
  }));
  const std::vector<Bytes> last = frames_of({Buffer(5, 9)});
  REQUIRE((*out)->write(0, last));
  REQUIRE((*out)->commit());
  Buffer expected = encode_message(std::span<const Bytes>(first));
  expected.append(big.data(), 40);
  expected.append(big.data(), big.size());
  const Buffer tail = encode_message(std::span<const Bytes>(last));
  expected.append(tail.data(), tail.size());
  CHECK(read_file(path) == expected);
  const auto files = (*out)->files();
  REQUIRE(files.size() == 1);
  CHECK(files[0].messages == 3);
  CHECK(files[0].bytes == expected.size());
  std::remove(path.c_str());
}

TEST_CASE("stream_outputs: a move forward copies from the back") {
  const std::string path = temp_path();
  auto out = StreamOutputs::create(path, false);
  REQUIRE(out);
  const Buffer data = random_bytes(3 << 20, 4);
  REQUIRE((*out)->write_in_place(0, [&](MessageSink& s) -> Result<std::uint64_t> {
    if (Status st = s.write_at(0, data); !st) return std::move(st).error();
    if (Status st = s.move(0, 1000, data.size()); !st) return std::move(st).error();
    return 1000 + data.size();
  }));
  REQUIRE((*out)->commit());
  const Buffer got = read_file(path);
  REQUIRE(got.size() == 1000 + data.size());
  CHECK(std::equal(data.begin(), data.end(), got.begin() + 1000));
  std::remove(path.c_str());
}
