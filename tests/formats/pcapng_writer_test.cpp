#include "daskcaps/formats/pcapng_writer.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daskcaps/wire/frames.h"
#include "daskcaps/formats/capture.h"
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
  CHECK(got[0].message.wire_size == big.size());
  CHECK(got[0].message.frames[1].size() == 200000);
  CHECK(got[1].direction == Direction::server_to_client);
  CHECK(got[1].message.wire_size == small.size());
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
