#include "formats/internal/raw_stream.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <fstream>

#include "core/wire/internal/frame_store.h"
#include "daskcaps/wire/message.h"
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

namespace {
// {"op": "x", "data": <object>}: a sub-header, then `data` frames.
Buffer object_message(const std::vector<Buffer>& data) {
  Value h = map({{"serializer", str("dask")}, {"num-sub-frames", num(static_cast<std::int64_t>(data.size()))}});
  std::vector<Buffer> bufs{msgpack::encode(map({{"op", str("x")}, {"data", placeholder("__Serialized__", 1)}})),
                           msgpack::encode(h)};
  for (const Buffer& d : data) bufs.push_back(d);
  std::vector<Bytes> frames = frames_of(std::move(bufs));
  return encode_message(std::span<const Bytes>(frames));
}
}  // namespace

TEST_CASE("raw_stream: a large message is read from its head, its other frames left in the file") {
  Buffer big0(300000, 7), big1(700000, 9);
  for (std::size_t i = 0; i < big1.size(); ++i) big1[i] = static_cast<std::uint8_t>(i * 31);
  Buffer s = message(10);
  const std::uint64_t big_at = s.size();
  const Buffer big = object_message({big0, big1});
  s.append(big);
  const Buffer after = message(20);
  s.append(after);
  TempFile f(s);
  auto r = RawStreamReader::open(f.path, {}, 500000);
  REQUIRE(r);
  auto a = (*r)->next();
  REQUIRE(a);
  REQUIRE(*a);
  CHECK(!(*a)->store);  // small: read whole
  auto b = (*r)->next();
  REQUIRE(b);
  REQUIRE(*b);
  const RawMessage& m = **b;
  REQUIRE(m.store);
  CHECK(m.offset == big_at);
  CHECK(m.wire_size == big.size());
  CHECK(m.sizes() == std::vector<std::uint64_t>{m.frames[0].size(), m.frames[1].size(), 300000, 700000});
  CHECK(!m.frames[0].is_stored());
  CHECK(!m.frames[1].is_stored());  // the sub-header
  CHECK(m.frames[2].is_stored());
  CHECK(m.frames[3].is_stored());
  // The stored frames read back, in pieces and whole.
  Buffer piece = Buffer::uninitialised(1000);
  auto got = m.store->read(3, 123456, piece);
  REQUIRE(got);
  CHECK(*got == 1000);
  CHECK(std::equal(piece.begin(), piece.end(), big1.begin() + 123456));
  auto parsed = parse_message(m, {});
  REQUIRE(parsed);
  CHECK(parsed->raw.frames[3].is_stored());
  CHECK(parsed->raw.frames[3].size() == 700000);
  auto whole = parsed->raw.load_frame(3);
  REQUIRE(whole);
  CHECK(*whole == Bytes::copy_of(big1));
  REQUIRE(load_stored_frames(*parsed));
  CHECK(!parsed->raw.store);
  CHECK(!parsed->raw.any_stored());
  CHECK(parsed->objects[0].frames[0] == Bytes::copy_of(big0));
  CHECK(parsed->objects[0].frames[1] == Bytes::copy_of(big1));
  // The reader goes on after it.
  auto c = (*r)->next();
  REQUIRE(c);
  REQUIRE(*c);
  CHECK((*c)->offset == big_at + big.size());
  CHECK((*c)->frames[1].size() == 20);
  auto end = (*r)->next();
  REQUIRE(end);
  CHECK(!*end);
}

TEST_CASE("raw_stream: a stored message's frames are an io error once the file is shorter") {
  const Buffer big = object_message({Buffer(600000, 1)});
  TempFile f(big);
  auto r = RawStreamReader::open(f.path, {}, 100000);
  REQUIRE(r);
  auto m = (*r)->next();
  REQUIRE(m);
  REQUIRE(*m);
  REQUIRE((*m)->store);
  REQUIRE(truncate(f.path.c_str(), static_cast<off_t>(big.size() - 1000)) == 0);
  Buffer piece = Buffer::uninitialised(4096);
  auto got = (*m)->store->read(2, 600000 - 4096, piece);
  REQUIRE(!got);
  CHECK(got.error().code == Errc::io);
}
