#include "daskcaps/formats/capture_queue.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <future>

#include "formats/internal/capture.h"
#include "daskcaps/wire/frames.h"
#include "support/dask_builder.h"

using namespace daskcaps;
using namespace daskcaps::formats;
using namespace testsupport;

namespace {

Bytes message(const std::string& op, std::size_t payload) {
  std::vector<Bytes> frames =
      frames_of({msgpack::encode(map({{"op", str(op)}})), Buffer(payload, static_cast<std::uint8_t>(op.size()))});
  return Bytes(encode_message(std::span<const Bytes>(frames)));
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          (std::string("daskcaps-capture-queue-") + std::to_string(::getpid()) + "-" + name))
      .string();
}

struct Read {
  std::vector<CaptureMessage> messages;
  std::vector<ConnectionInfo> connections;
};

Read read_back(const std::string& path) {
  auto reader = PcapMessageReader::open(path, {}, {});
  REQUIRE(reader);
  Read out;
  for (;;) {
    auto m = (*reader)->next();
    REQUIRE(m);
    if (!*m) break;
    out.messages.push_back(std::move(**m));
  }
  out.connections = (*reader)->connections();
  return out;
}

}  // namespace

TEST_CASE("capture_queue: what is queued is written in order, pieces of a message as one stream") {
  const std::string path = temp_path("order.pcapng");
  auto q = CaptureQueue::create(path, {});
  REQUIRE(q);
  const auto a = (*q)->open_flow("127.0.0.1:40000", "127.0.0.1:8786", 1.0);
  const auto b = (*q)->open_flow("127.0.0.9:40001", "127.0.0.2:8786", 1.0);
  const Bytes big = message("big", 300000);
  // A message cut through: its pieces as they pass, 1 byte, then odd sizes.
  const Bytes pieces[] = {big.slice(0, 1), big.slice(1, 4095), big.slice(4096, big.size() - 4096)};
  CHECK((*q)->write(a, true, std::span<const Bytes>(pieces, 1), true, 2.0));
  CHECK((*q)->write(a, true, std::span<const Bytes>(pieces + 1, 2), false, 2.1));
  const Bytes small = message("s", 5);
  CHECK((*q)->write(b, false, std::span<const Bytes>(&small, 1), true, 2.2));
  CHECK((*q)->write(a, false, std::span<const Bytes>(&small, 1), true, 2.3));
  (*q)->close_flow(a, 3.0);
  REQUIRE((*q)->finish(4.0));
  CHECK((*q)->dropped().bytes == 0);
  CHECK(!(*q)->take_notice());

  const Read r = read_back(path);
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].connection == 0);
  CHECK(r.messages[0].message.raw.wire_size == big.size());
  CHECK(r.messages[0].message.raw.frames[1].size() == 300000);
  CHECK(r.messages[1].connection == 1);
  CHECK(r.messages[1].direction == Direction::server_to_client);
  CHECK(r.messages[2].connection == 0);
  REQUIRE(r.connections.size() == 2);
  CHECK(r.connections[0].ended);
  CHECK(r.connections[0].lost[0] == 0);
  std::filesystem::remove(path);
}

TEST_CASE("capture_queue: a full queue drops, says so once, leaves a gap and resumes at a message start") {
  const std::string path = temp_path("drops.pcapng");
  std::promise<void> go;
  std::shared_future<void> released = go.get_future().share();
  const Bytes m1 = message("m1", 100), m2 = message("m2", 100), m3 = message("m3", 40);
  CaptureQueue::Options o;
  o.max_queued_bytes = m1.size() + m3.size();
  o.before_item = [released] { released.wait(); };  // the writer is held: nothing leaves the queue
  auto q = CaptureQueue::create(path, o);
  REQUIRE(q);
  const auto f = (*q)->open_flow("127.0.0.1:40000", "127.0.0.1:8786", 1.0);
  CHECK((*q)->write(f, true, std::span<const Bytes>(&m1, 1), true, 2.0));
  CHECK(!(*q)->take_notice());
  CHECK(!(*q)->write(f, true, std::span<const Bytes>(&m2, 1), true, 2.1));  // no room
  auto notice = (*q)->take_notice();
  REQUIRE(notice);
  CHECK(notice->find("falls behind") != std::string::npos);
  CHECK(!(*q)->take_notice());  // once per run of drops
  // Room again, but in the middle of a message: still dropped.
  const Bytes part = m2.slice(0, 10);
  CHECK(!(*q)->write(f, true, std::span<const Bytes>(&part, 1), false, 2.2));
  // The next message start fits: taken.
  CHECK((*q)->write(f, true, std::span<const Bytes>(&m3, 1), true, 2.3));
  CHECK((*q)->dropped().bytes == m2.size() + 10);
  CHECK((*q)->dropped().pieces == 2);
  go.set_value();
  REQUIRE((*q)->finish(3.0));

  const Read r = read_back(path);
  REQUIRE(r.messages.size() == 2);
  CHECK(r.messages[0].message.raw.frames[1].size() == 100);
  CHECK(r.messages[1].message.raw.frames[1].size() == 40);
  REQUIRE(r.connections.size() == 1);
  CHECK(r.connections[0].lost[0] == m2.size() + 10);  // the gap, where the dropped bytes were
  std::filesystem::remove(path);
}

TEST_CASE("capture_queue: without finish() nothing appears") {
  const std::string path = temp_path("none.pcapng");
  {
    auto q = CaptureQueue::create(path, {});
    REQUIRE(q);
    const auto f = (*q)->open_flow("127.0.0.1:1", "127.0.0.1:2", 0);
    const Bytes m = message("x", 10);
    (*q)->write(f, true, std::span<const Bytes>(&m, 1), true, 0);
  }
  CHECK(!std::filesystem::exists(path));
}

TEST_CASE("capture_queue: a flow whose endpoints do not parse is the file's error, at finish") {
  const std::string path = temp_path("bad.pcapng");
  auto q = CaptureQueue::create(path, {});
  REQUIRE(q);
  const auto f = (*q)->open_flow("not an address", "127.0.0.1:2", 0);
  const Bytes m = message("x", 10);
  (*q)->write(f, true, std::span<const Bytes>(&m, 1), true, 0);
  auto st = (*q)->finish(1.0);
  REQUIRE(!st);
  CHECK(st.error().code == Errc::usage);
  CHECK(!std::filesystem::exists(path));
}
