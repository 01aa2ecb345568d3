#include "daskcaps/recode/engine.h"

#include <poll.h>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "daskcaps/wire/codec.h"
#include "daskcaps/wire/frames.h"
#include "daskcaps/wire/message.h"
#include "core/recode/internal/stream_recode.h"
#include "support/dask_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

// A message whose frame 0 says which stream and position it is, with a
// numpy object of `n` float64 compressed with lz4 (so a codec change has
// work to do), or a plain single-frame message when n == 0.
std::vector<Bytes> make_message(int stream, int index, std::size_t n) {
  if (n == 0) {
    return frames_of({msgpack::encode(map({{"op", str("task-finished")}, {"stream", num(stream)}, {"i", num(index)}}))});
  }
  // Incompressible bytes: the wire size is about n * 8.
  Buffer raw = Buffer::uninitialised(n * 8);
  std::mt19937 rng(static_cast<unsigned>(stream * 100003 + index));
  for (auto& b : raw) b = static_cast<std::uint8_t>(rng());
  auto lz4 = compress(Codec::lz4, raw);
  REQUIRE(lz4);
  Value header = numpy_header("<f8", static_cast<std::int64_t>(n), 8, {str("lz4")});
  header.set("num-sub-frames", num(1));
  return frames_of({msgpack::encode(map({{"op", str("result")},
                                         {"stream", num(stream)},
                                         {"i", num(index)},
                                         {"data", placeholder("__Serialized__", 1)}})),
                    msgpack::encode(header),
                    std::move(*lz4)});
}

int index_of(const std::vector<Bytes>& frames) {
  auto root = msgpack::decode_all(frames[0].span());
  REQUIRE(root);
  return static_cast<int>(*root->find("i")->to_int64());
}

RecodeEngine::Input input_of(std::vector<Bytes> frames, std::uint64_t tag) {
  RecodeEngine::Input in;
  in.tag = tag;
  in.raw = RawMessage::of(std::move(frames));
  return in;
}

RecodeEngine::StreamOptions to_zstd() {
  RecodeEngine::StreamOptions so;
  so.transcode.codec = Codec::zstd;
  return so;
}

}  // namespace

TEST_CASE("engine: each stream's messages come back in submission order, whatever finishes first") {
  EngineOptions eo;
  eo.threads = 4;
  eo.batch_messages = 8;
  RecodeEngine engine(eo);
  constexpr int kStreams = 5, kMessages = 120;
  std::mutex mu;
  std::map<int, std::vector<int>> seen;
  std::vector<RecodeEngine::StreamId> ids;
  for (int s = 0; s < kStreams; ++s) {
    ids.push_back(engine.open_stream(to_zstd(), [&, s](RecodeEngine::Output&& out) {
      std::lock_guard<std::mutex> lock(mu);
      if (!out.frames) {
        FAIL_CHECK(out.frames.error().message());
        seen[s].push_back(-1);
        return;
      }
      seen[s].push_back(index_of(*out.frames));
      CHECK(out.tag == static_cast<std::uint64_t>(seen[s].size() - 1));
    }));
  }
  // Mixed sizes in a random order of streams: large messages finish late,
  // small ones early, and batches overtake single jobs.
  std::mt19937 rng(1);
  std::vector<int> next(kStreams, 0);
  for (int k = 0; k < kStreams * kMessages; ++k) {
    int s = static_cast<int>(rng() % kStreams);
    while (next[s] == kMessages) s = (s + 1) % kStreams;
    const int i = next[s]++;
    const std::size_t n = (rng() % 10 == 0) ? 200000 : (rng() % 3 == 0 ? 0 : 100);
    REQUIRE(engine.submit(ids[s], input_of(make_message(s, i, n), static_cast<std::uint64_t>(i))));
  }
  for (auto id : ids) engine.finish(id);
  for (int s = 0; s < kStreams; ++s) {
    REQUIRE(seen[s].size() == kMessages);
    for (int i = 0; i < kMessages; ++i) CHECK(seen[s][i] == i);
  }
  CHECK(engine.inflight_bytes() == 0);
}

TEST_CASE("engine: work in flight stays within the byte bound, and one large message always passes") {
  EngineOptions eo;
  eo.threads = 2;
  eo.max_inflight_bytes = 300000;
  eo.batch_bytes = 0;
  RecodeEngine engine(eo);
  std::atomic<std::uint64_t> peak{0};
  std::atomic<int> delivered{0};
  auto id = engine.open_stream(to_zstd(), [&](RecodeEngine::Output&& out) {
    CHECK(out.frames);
    peak = std::max<std::uint64_t>(peak.load(), engine.inflight_bytes());
    ++delivered;
  });
  // 100 KB wire messages: at most 3 fit; a 1.6 MB one exceeds the bound
  // alone and still goes through.
  for (int i = 0; i < 30; ++i) {
    auto frames = make_message(0, i, i == 10 ? 200000 : 12000);
    REQUIRE(engine.submit(id, input_of(std::move(frames), i)));
    CHECK(engine.inflight_bytes() <= std::max<std::uint64_t>(eo.max_inflight_bytes, 1700000));
  }
  engine.finish(id);
  CHECK(delivered == 30);
  CHECK(peak.load() <= 1700000);
}

TEST_CASE("engine: try_submit answers full instead of waiting, and keeps the message") {
  EngineOptions eo;
  eo.threads = 1;
  eo.max_inflight_bytes = 10;  // less than one message
  eo.batch_bytes = 0;
  RecodeEngine engine(eo);
  auto id = engine.open_stream(to_zstd());  // poll mode
  RecodeEngine::Input first = input_of(make_message(0, 0, 1000), 0);
  CHECK(engine.try_submit(id, first) == RecodeEngine::Submitted::accepted);
  RecodeEngine::Input second = input_of(make_message(0, 1, 1000), 1);
  // The first is still in flight (until polled): no room for the second.
  int full = 0;
  while (engine.try_submit(id, second) == RecodeEngine::Submitted::full) {
    CHECK(!second.raw.frames.empty());  // not taken
    ++full;
    std::vector<int> got;
    engine.poll([&](RecodeEngine::Output&& o) { got.push_back(index_of(*o.frames)); });
    // Nothing out yet: wait for the worker (on a loaded machine it may not
    // run for a while) instead of spinning on a count.
    if (got.empty()) {
      pollfd pfd{engine.event_fd(), POLLIN, 0};
      REQUIRE(::poll(&pfd, 1, 60'000) == 1);
    }
  }
  CHECK(full > 0);
  engine.finish(id);
  std::vector<int> rest;
  while (engine.poll([&](RecodeEngine::Output&& o) { rest.push_back(index_of(*o.frames)); }) > 0) {
  }
  CHECK(rest == std::vector<int>{1});
}

TEST_CASE("engine: the eventfd is readable while outputs wait for poll") {
  EngineOptions eo;
  eo.threads = 2;
  RecodeEngine engine(eo);
  auto id = engine.open_stream(to_zstd());
  for (int i = 0; i < 10; ++i) REQUIRE(engine.submit(id, input_of(make_message(0, i, i % 2 ? 5000 : 0), i)));
  engine.finish(id);
  std::uint64_t count = 0;
  CHECK(::read(engine.event_fd(), &count, sizeof count) == sizeof count);
  CHECK(count > 0);
  // The read above disarmed it, but outputs are still queued: poll drains them.
  std::vector<int> got;
  while (engine.poll([&](RecodeEngine::Output&& o) { got.push_back(index_of(*o.frames)); }, 3) > 0) {
  }
  CHECK(got == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(engine.inflight_bytes() == 0);
}

TEST_CASE("engine: cancelling a stream drops its work; nothing of it is delivered after cancel returns") {
  EngineOptions eo;
  eo.threads = 2;
  RecodeEngine engine(eo);
  std::atomic<bool> cancelled{false};
  std::atomic<int> after{0}, before{0};
  auto id = engine.open_stream(to_zstd(), [&](RecodeEngine::Output&&) {
    if (cancelled) ++after;
    else ++before;
  });
  std::atomic<int> other{0};
  auto keep = engine.open_stream(to_zstd(), [&](RecodeEngine::Output&& o) {
    CHECK(o.frames);
    ++other;
  });
  for (int i = 0; i < 40; ++i) {
    REQUIRE(engine.submit(id, input_of(make_message(0, i, 100000), i)));
    REQUIRE(engine.submit(keep, input_of(make_message(1, i, 100), i)));
  }
  engine.cancel(id);
  cancelled = true;
  RecodeEngine::Input late = input_of(make_message(0, 99, 0), 99);
  CHECK(engine.try_submit(id, late) == RecodeEngine::Submitted::closed);
  engine.finish(keep);
  CHECK(after == 0);
  CHECK(before <= 40);
  CHECK(other == 40);
  CHECK(engine.inflight_bytes() == 0);
}

TEST_CASE("engine: an error in one message comes back in its place; its stream and the others go on") {
  EngineOptions eo;
  eo.threads = 2;
  RecodeEngine engine(eo);
  std::vector<bool> ok_a, ok_b;
  auto a = engine.open_stream(to_zstd(), [&](RecodeEngine::Output&& o) { ok_a.push_back(bool(o.frames)); });
  auto b = engine.open_stream(to_zstd(), [&](RecodeEngine::Output&& o) { ok_b.push_back(bool(o.frames)); });
  for (int i = 0; i < 6; ++i) {
    auto frames = make_message(0, i, 1000);
    if (i == 2) frames[2] = Bytes(Buffer{1, 2, 3});  // not lz4
    REQUIRE(engine.submit(a, input_of(std::move(frames), i)));
    REQUIRE(engine.submit(b, input_of(make_message(1, i, 1000), i)));
  }
  engine.finish(a);
  engine.finish(b);
  CHECK(ok_a == std::vector<bool>{true, true, false, true, true, true});
  CHECK(ok_b == std::vector<bool>(6, true));
}

TEST_CASE("engine: messages that need no change pass with their frames untouched") {
  RecodeEngine engine(EngineOptions{});
  std::vector<RecodeEngine::Output> outs;
  auto id = engine.open_stream(to_zstd(), [&](RecodeEngine::Output&& o) { outs.push_back(std::move(o)); });
  auto plain = make_message(0, 0, 0);
  const std::uint8_t* where = plain[0].data();
  REQUIRE(engine.submit(id, input_of(plain, 0)));
  REQUIRE(engine.submit(id, input_of(make_message(0, 1, 1000), 1)));
  engine.finish(id);
  REQUIRE(outs.size() == 2);
  CHECK(outs[0].passed_through);
  CHECK((*outs[0].frames)[0].data() == where);
  CHECK(!outs[1].passed_through);
  CHECK(outs[1].report.frames_recompressed == 1);
}

TEST_CASE("engine: needs_recode reads frame 0 only") {
  TranscodeOptions none;
  CHECK(!needs_recode(RawMessage::of(make_message(0, 0, 100)), none));
  TranscodeOptions zstd;
  zstd.codec = Codec::zstd;
  CHECK(needs_recode(RawMessage::of(make_message(0, 0, 100)), zstd));
  CHECK(!needs_recode(RawMessage::of(make_message(0, 0, 0)), zstd));
  auto hs = frames_of({msgpack::encode(map({{"compression", str("lz4")}, {"pickle-protocol", num(5)}}))});
  CHECK(needs_recode(RawMessage::of(hs), zstd));
}

TEST_CASE("engine: inline streams recode small messages on the submitting thread") {
  RecodeEngine engine(EngineOptions{});
  RecodeEngine::StreamOptions so = to_zstd();
  so.inline_bytes = 1 << 20;
  std::thread::id where;
  auto id = engine.open_stream(so, [&](RecodeEngine::Output&&) { where = std::this_thread::get_id(); });
  REQUIRE(engine.submit(id, input_of(make_message(0, 0, 1000), 0)));
  CHECK(where == std::this_thread::get_id());
  engine.finish(id);
}

TEST_CASE("engine: transcode_stream stops at the first error with the message index") {
  std::vector<std::vector<Bytes>> msgs;
  for (int i = 0; i < 5; ++i) msgs.push_back(make_message(0, i, 1000));
  msgs[3][2] = Bytes(Buffer{9, 9});
  std::size_t at = 0;
  std::vector<int> written;
  TranscodeOptions to;
  to.codec = Codec::none;
  auto r = transcode_stream(
      [&]() -> Result<std::optional<RecodeEngine::Input>> {
        if (at == msgs.size()) return std::optional<RecodeEngine::Input>{};
        RecodeEngine::Input in = input_of(msgs[at], at);
        ++at;
        return std::optional<RecodeEngine::Input>(std::move(in));
      },
      [&](std::uint64_t tag, std::span<const Bytes>) -> Status {
        written.push_back(static_cast<int>(tag));
        return {};
      },
      to);
  REQUIRE(!r);
  CHECK(r.error().context.rfind("message 3", 0) == 0);
  CHECK(written == std::vector<int>{0, 1, 2});
}

namespace {

// One output "file" for transcode_stream: messages appended in order,
// whole or written in place.
struct MemoryOutput {
  Buffer bytes;
  int in_place = 0;
  Status write(std::span<const Bytes> frames) {
    std::vector<std::uint64_t> lengths;
    for (const Bytes& f : frames) lengths.push_back(f.size());
    const Buffer prelude = encode_prelude(lengths);
    bytes.append(prelude.data(), prelude.size());
    for (const Bytes& f : frames) bytes.append(f.data(), f.size());
    return {};
  }
  Status write_in_place(const InPlaceBody& body) {
    class Sink final : public MessageSink {
     public:
      Sink(Buffer& b, std::uint64_t base) : b_(b), base_(base) {}
      Status write_at(std::uint64_t at, ByteSpan data) override {
        if (base_ + at + data.size() > b_.size()) b_.resize(static_cast<std::size_t>(base_ + at + data.size()), 0);
        std::memcpy(b_.data() + base_ + at, data.data(), data.size());
        return {};
      }
      Status move(std::uint64_t from, std::uint64_t to, std::uint64_t n) override {
        if (base_ + to + n > b_.size()) b_.resize(static_cast<std::size_t>(base_ + to + n), 0);
        std::memmove(b_.data() + base_ + to, b_.data() + base_ + from, static_cast<std::size_t>(n));
        return {};
      }

     private:
      Buffer& b_;
      std::uint64_t base_;
    } sink(bytes, bytes.size());
    const std::uint64_t base = bytes.size();
    auto n = body(sink);
    if (!n) return std::move(n).error();
    bytes.resize_uninitialised(static_cast<std::size_t>(base + *n));
    ++in_place;
    return {};
  }
};

// A message with a raw array of `n` bytes of a rounded walk (it compresses).
std::vector<Bytes> walk_message(int index, std::size_t n) {
  Buffer raw = Buffer::uninitialised(n);
  for (std::size_t i = 0; i < n; ++i) raw[i] = static_cast<std::uint8_t>((i / 64 + index) % 7);
  auto lz4 = compress(Codec::lz4, raw);
  REQUIRE(lz4);
  Value header = numpy_header("|u1", static_cast<std::int64_t>(n), 1, {str("lz4")});
  header.set("num-sub-frames", num(1));
  return frames_of({msgpack::encode(map({{"op", str("result")}, {"i", num(index)}, {"data", placeholder("__Serialized__", 1)}})),
                    msgpack::encode(header), std::move(*lz4)});
}

Result<TranscodeReport> run_stream(const std::vector<std::vector<Bytes>>& msgs, const TranscodeOptions& to,
                                   const EngineOptions& eo, MemoryOutput& out, bool in_place) {
  std::size_t at = 0;
  InPlaceFn place;
  if (in_place) place = [&](std::uint64_t, const InPlaceBody& body) { return out.write_in_place(body); };
  return transcode_stream(
      [&]() -> Result<std::optional<RecodeEngine::Input>> {
        if (at == msgs.size()) return std::optional<RecodeEngine::Input>{};
        RecodeEngine::Input in = input_of(msgs[at], at);
        ++at;
        return std::optional<RecodeEngine::Input>(std::move(in));
      },
      [&](std::uint64_t, std::span<const Bytes> frames) { return out.write(frames); }, to, eo, place);
}

}  // namespace

TEST_CASE("engine: transcode_stream recodes large messages in place, in order, to the engine's bytes") {
  std::vector<std::vector<Bytes>> msgs;
  for (int i = 0; i < 12; ++i) msgs.push_back(i % 4 == 1 ? walk_message(i, 3 << 20) : make_message(0, i, i % 3 ? 1000 : 0));
  for (Codec c : {Codec::zstd, Codec::none, Codec::snappy}) {
    TranscodeOptions to;
    to.codec = c;
    EngineOptions eo;
    eo.threads = 2;
    eo.in_place_bytes = 1 << 20;
    MemoryOutput whole, placed;
    auto a = run_stream(msgs, to, eo, whole, false);
    REQUIRE(a);
    auto b = run_stream(msgs, to, eo, placed, true);
    REQUIRE(b);
    CHECK(placed.in_place == 3);
    CHECK(whole.in_place == 0);
    CHECK(placed.bytes == whole.bytes);
    CHECK(b->frames_recompressed == a->frames_recompressed);
    CHECK(b->bytes_out == a->bytes_out);
    // Off: nothing in place.
    eo.in_place_bytes = 0;
    MemoryOutput off;
    REQUIRE(run_stream(msgs, to, eo, off, true));
    CHECK(off.in_place == 0);
    CHECK(off.bytes == whole.bytes);
  }
}

TEST_CASE("engine: an error in a message recoded in place stops the stream with its index") {
  std::vector<std::vector<Bytes>> msgs;
  for (int i = 0; i < 5; ++i) msgs.push_back(i == 3 ? walk_message(i, 3 << 20) : make_message(0, i, 1000));
  Buffer cut(msgs[3][2].data(), msgs[3][2].data() + msgs[3][2].size() - 50);
  msgs[3][2] = Bytes(std::move(cut));
  TranscodeOptions to;
  to.codec = Codec::zstd;
  EngineOptions eo;
  eo.in_place_bytes = 1 << 20;
  MemoryOutput out;
  auto r = run_stream(msgs, to, eo, out, true);
  REQUIRE(!r);
  CHECK(r.error().context.rfind("message 3: data: frame 2", 0) == 0);
}
