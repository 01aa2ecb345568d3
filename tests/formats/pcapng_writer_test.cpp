#include "formats/internal/pcapng_writer.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daskcaps/wire/frames.h"
#include "formats/internal/capture.h"
#include "support/dask_builder.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport;

namespace {

Buffer message(const std::string& op, std::size_t payload) {
  std::vector<Bytes> frames =
      frames_of({msgpack::encode(map({{"op", str(op)}})), Buffer(payload, static_cast<std::uint8_t>(op.size()))});
  return encode_message(std::span<const Bytes>(frames));
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("daskcaps-pcapng-") + std::to_string(::getpid()) + "-" + name))
      .string();
}

}  // namespace

TEST_CASE("pcapng_writer: flows read back as connections with their messages, in sync, over many segments") {
  const std::string path = temp_path("flows.pcapng");
  auto w = PcapngWriter::create(path);
  REQUIRE(w);
  auto a = (*w)->open_flow("127.0.0.1:40000", "127.0.0.1:8786", 1.5);
  auto b = (*w)->open_flow("[::1]:40001", "[::1]:8787", 1.5);
  REQUIRE(a);
  REQUIRE(b);
  const Buffer big = message("big", 200000);  // several segments
  const Buffer small = message("s", 3);
  const ByteSpan pieces[] = {ByteSpan(big).first(10), ByteSpan(big).subspan(10)};
  REQUIRE((*w)->write(*a, true, pieces, 2.0));
  const ByteSpan one[] = {ByteSpan(small)};
  REQUIRE((*w)->write(*a, false, one, 2.5));
  REQUIRE((*w)->write(*b, true, one, 3.0));
  REQUIRE((*w)->close_flow(*a, 4.0));
  REQUIRE((*w)->commit(5.0));
  CHECK(std::filesystem::exists(path));

  auto reader = PcapMessageReader::open(path, {}, {});
  REQUIRE(reader);
  std::vector<CaptureMessage> got;
  for (;;) {
    auto m = (*reader)->next();
    REQUIRE(m);
    if (!*m) break;
    got.push_back(std::move(**m));
  }
  CHECK((*reader)->format() == pcap::FileFormat::pcapng);
  REQUIRE(got.size() == 3);
  CHECK(got[0].connection == 0);
  CHECK(got[0].direction == Direction::client_to_server);
  CHECK(got[0].at_stream_start());
  CHECK(got[0].message.raw.wire_size == big.size());
  CHECK(got[0].message.raw.frames[1].size() == 200000);
  CHECK(got[1].direction == Direction::server_to_client);
  CHECK(got[1].message.raw.wire_size == small.size());
  CHECK(got[2].connection == 1);
  const auto& conns = (*reader)->connections();
  REQUIRE(conns.size() == 2);
  CHECK(conns[0].client == "127.0.0.1:40000");
  CHECK(conns[0].server == "127.0.0.1:8786");
  CHECK(conns[0].saw_syn);
  CHECK(conns[0].ended);
  CHECK(conns[0].lost[0] == 0);
  CHECK(conns[1].client == "[::1]:40001");
  CHECK((*reader)->warnings().empty());
  std::filesystem::remove(path);
}

TEST_CASE("pcapng_writer: bad endpoints are usage errors; nothing appears without commit") {
  const std::string path = temp_path("bad.pcapng");
  {
    auto w = PcapngWriter::create(path);
    REQUIRE(w);
    CHECK((*w)->open_flow("127.0.0.1", "127.0.0.1:1", 0).error().code == Errc::usage);
    CHECK((*w)->open_flow("127.0.0.1:1", "[::1]:2", 0).error().code == Errc::usage);
    CHECK((*w)->open_flow("1.2.3.4:70000", "1.2.3.4:1", 0).error().code == Errc::usage);
  }
  CHECK(!std::filesystem::exists(path));
}

namespace {

// RFC 1071, a byte at a time: the reference for the writer's checksums.
std::uint16_t reference_checksum(ByteSpan a, ByteSpan b = {}) {
  std::uint32_t sum = 0;
  std::size_t i = 0;
  auto byte_at = [&](std::size_t k) { return k < a.size() ? a[k] : b[k - a.size()]; };
  const std::size_t n = a.size() + b.size();
  for (; i + 1 < n; i += 2) sum += (std::uint32_t{byte_at(i)} << 8) | byte_at(i + 1);
  if (i < n) sum += std::uint32_t{byte_at(i)} << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

std::uint32_t le32(const Buffer& f, std::size_t at) {
  return f[at] | (std::uint32_t{f[at + 1]} << 8) | (std::uint32_t{f[at + 2]} << 16) | (std::uint32_t{f[at + 3]} << 24);
}

}  // namespace

TEST_CASE("pcapng_writer: IP and TCP checksums verify for pieces of every size and alignment") {
  const std::string path = temp_path("checksums.pcapng");
  auto w = PcapngWriter::create(path);
  REQUIRE(w);
  auto v4 = (*w)->open_flow("10.1.2.3:40000", "10.9.8.7:8786", 1);
  auto v6 = (*w)->open_flow("[fe80::1]:40001", "[2001:db8::7]:8787", 1);
  REQUIRE(v4);
  REQUIRE(v6);
  Buffer data = Buffer::uninitialised(100000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 131 + (i >> 7));
  // Pieces of 1, 2, 3, ... bytes: odd and even starts, segments that end mid-piece.
  std::vector<ByteSpan> pieces;
  for (std::size_t at = 0, k = 1; at < data.size(); at += k, ++k)
    pieces.push_back(ByteSpan(data).subspan(at, std::min(k, data.size() - at)));
  REQUIRE((*w)->write(*v4, true, pieces, 2));
  REQUIRE((*w)->write(*v6, false, pieces, 2));
  (*w)->skip(*v4, false, 12345);  // a gap: the sequence numbers move on
  REQUIRE((*w)->commit(3));

  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Buffer f(as_bytes(text));
  std::size_t at = 28 + 20, packets = 0, with_payload = 0;
  while (at + 12 <= f.size()) {
    REQUIRE(le32(f, at) == 6);  // enhanced packet blocks only, after the headers
    const std::uint32_t block = le32(f, at + 4), caplen = le32(f, at + 20);
    const ByteSpan pkt(f.data() + at + 28, caplen);
    const bool v6p = pkt[12] == 0x86;
    const std::size_t ip = 14, tcp = ip + (v6p ? 40 : 20);
    const std::size_t tcp_len = caplen - tcp;
    Buffer pseudo;
    if (v6p) {
      pseudo.append(pkt.subspan(ip + 8, 32));
      for (int s = 24; s >= 0; s -= 8) pseudo.push_back(static_cast<std::uint8_t>(tcp_len >> s));
      for (std::uint8_t b : {0, 0, 0, 6}) pseudo.push_back(b);
    } else {
      CHECK(reference_checksum(pkt.subspan(ip, 20)) == 0xffff);
      pseudo.append(pkt.subspan(ip + 12, 8));
      for (std::uint8_t b : {std::uint8_t{0}, std::uint8_t{6}, static_cast<std::uint8_t>(tcp_len >> 8),
                             static_cast<std::uint8_t>(tcp_len)})
        pseudo.push_back(b);
    }
    CHECK(reference_checksum(pseudo, pkt.subspan(tcp)) == 0xffff);
    with_payload += tcp_len > 20;
    ++packets;
    at += block;
  }
  CHECK(at == f.size());
  CHECK(with_payload == 2 * ((data.size() + PcapngWriter::kMaxSegment - 1) / PcapngWriter::kMaxSegment));
  CHECK(packets > with_payload);
  std::filesystem::remove(path);
}
