#include "daskcaps/formats/raw_stream.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "support/dask_builder.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport;

namespace {
struct TempFile {
  std::string path;
  explicit TempFile(const Buffer& data) {
    char tmpl[] = "/tmp/daskcaps-raw-XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()));
    close(fd);
    path = tmpl;
  }
  ~TempFile() { std::remove(path.c_str()); }
};
Buffer message(std::size_t payload) {
  std::vector<Bytes> frames = frames_of({msgpack::encode(map({{"op", str("x")}})), Buffer(payload, 1)});
  return encode_message(std::span<const Bytes>(frames));
}
}  // namespace

TEST_CASE("raw_stream: reads every message, then a clean end") {
  Buffer s = message(10);
  Buffer m2 = message(100000);
  s.append(m2);
  TempFile f(s);
  auto r = RawStreamReader::open(f.path, {});
  REQUIRE(r);
  auto a = (*r)->next();
  REQUIRE(a);
  REQUIRE(*a);
  CHECK((*a)->frames.size() == 2);
  auto b = (*r)->next();
  REQUIRE(b);
  REQUIRE(*b);
  CHECK((*b)->offset == message(10).size());
  CHECK((*b)->frames[1].size() == 100000);
  auto end = (*r)->next();
  REQUIRE(end);
  CHECK(!*end);
  CHECK(RawStreamReader::sniff(s, {}));
  CHECK(!RawStreamReader::sniff(Buffer(16, 0xff), {}));
}

TEST_CASE("raw_stream: a truncated file names the message and its offset") {
  Buffer s = message(10);
  Buffer m2 = message(5000);
  s.append(m2.data(), m2.size() - 1);
  TempFile f(s);
  auto r = RawStreamReader::open(f.path, {});
  REQUIRE(r);
  REQUIRE((*r)->next());
  auto bad = (*r)->next();
  REQUIRE(!bad);
  CHECK(bad.error().code == Errc::truncated);
  CHECK(bad.error().offset == message(10).size());
  CHECK(bad.error().message() == "message 1 @0x" + [] { char b[16]; std::snprintf(b, sizeof b, "%zx", message(10).size()); return std::string(b); }() + ": needs " + std::to_string(message(5000).size()) + " bytes, the file has " + std::to_string(message(5000).size() - 1) + " left");
}

TEST_CASE("raw_stream: a promise larger than the file is refused before reading it") {
  Buffer s(24, 0);
  s[0] = 0x10;
  s[7] = 0x40;  // L ~ 2^62
  s[8] = 1;
  s[16] = 0x00;
  s[23] = 0x40;  // len[0] ~ 2^62
  TempFile f(s);
  auto r = RawStreamReader::open(f.path, {});
  REQUIRE(r);
  auto bad = (*r)->next();
  REQUIRE(!bad);
  CHECK(bad.error().code == Errc::limit_exceeded);
  CHECK(bad.error().offset == 16);
}

TEST_CASE("raw_stream: missing files and directories are io errors") {
  CHECK(RawStreamReader::open("/nonexistent/x", {}).error().code == Errc::io);
  CHECK(RawStreamReader::open("/tmp", {}).error().code == Errc::io);
}
