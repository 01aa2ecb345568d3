// link::LinkPolicy (core/caps/internal/link_policy.h): one leg's LinkChooser behind
// the recode's FrameCodecPolicy.
#include "core/caps/internal/link_policy.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/support/link_wire.h"
#include "tests/support/test_bytes.h"

using namespace daskcaps;
using link::LinkPolicy;
using Wire = testsupport::LinkWire;

namespace {

Delivery reads(std::vector<Codec> accept) {
  Delivery d;
  if (!accept.empty()) d.codec = std::string(codec_name(accept.front()));
  d.accept = std::move(accept);
  return d;
}

std::shared_ptr<LinkPolicy> policy(std::vector<Codec> accept, bool same_host = false,
                                   std::optional<link::CodecChoice> pin = std::nullopt) {
  auto p = LinkPolicy::for_delivery(reads(std::move(accept)), same_host, pin, DaskRelease::newest().maybe_compress_rules());
  REQUIRE(p);
  return *p;
}

constexpr double kSlow = 1e6;     // 8 Mbit/s: every codec of this machine beats none
constexpr double kFast = 1e12;    // faster than any codec

}  // namespace

TEST_CASE("link policy: a receiver that reads no codec gets none (nothing to choose)") {
  CHECK(policy({}) == nullptr);
  CHECK(policy({Codec::none}) == nullptr);
  CHECK(policy({Codec::lz4}) != nullptr);
}

TEST_CASE("link policy: a pin the receiver does not read is refused") {
  auto p = LinkPolicy::for_delivery(reads({Codec::lz4}), false, link::CodecChoice{Codec::zstd, 1},
                                    DaskRelease::newest().maybe_compress_rules());
  REQUIRE_FALSE(p);
  CHECK(p.error().code == Errc::usage);
}

TEST_CASE("link policy: unknown link: no answer, nothing may compress, no change") {
  auto p = policy({Codec::lz4, Codec::zstd});
  const Buffer frame = link::reference_frame(std::size_t{2} << 20);
  CHECK_FALSE(p->may_compress());
  CHECK_FALSE(p->choose(frame).has_value());
  CHECK(p->take_changes().empty());
  CHECK(p->current().empty());
}

TEST_CASE("link policy: a slow link codes compressible frames, random ones stay raw, one change logged") {
  auto p = policy({Codec::lz4, Codec::zstd});
  p->observe(Wire{}.carry(kSlow));
  CHECK(p->may_compress());
  const Buffer frame = link::reference_frame(std::size_t{2} << 20);
  auto c = p->choose(frame);
  REQUIRE(c);
  CHECK(c->codec != Codec::none);
  auto lines = p->take_changes();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("codec for this link: (Dask's) -> ") == 0);
  CHECK(p->take_changes().empty());
  const auto random = testsupport::random_bytes(std::size_t{2} << 20, 3);
  auto r = p->choose(random);
  REQUIRE(r);
  CHECK(r->codec == Codec::none);
  CHECK(p->take_changes().empty());  // random data does not vote
}

TEST_CASE("link policy: a fast link and a same-host peer choose none and may not compress") {
  const Buffer frame = link::reference_frame(std::size_t{2} << 20);
  auto fast = policy({Codec::lz4});
  fast->observe(Wire{}.carry(kFast));
  CHECK_FALSE(fast->may_compress());
  auto c = fast->choose(frame);
  REQUIRE(c);
  CHECK(c->codec == Codec::none);

  auto same = policy({Codec::lz4}, /*same_host=*/true, link::CodecChoice{Codec::lz4, 0});
  same->observe(Wire{}.carry(kSlow));
  CHECK_FALSE(same->may_compress());
  auto s = same->choose(frame);
  REQUIRE(s);
  CHECK(s->codec == Codec::none);
}

TEST_CASE("link policy: a pin codes every frame Dask would compress, before the link is known") {
  auto p = policy({Codec::lz4, Codec::zstd}, false, link::CodecChoice{Codec::zstd, 3});
  CHECK(p->may_compress());
  auto c = p->choose(link::reference_frame(std::size_t{1} << 20));
  REQUIRE(c);
  CHECK(c->codec == Codec::zstd);
  CHECK(c->zstd_level == 3);
}

TEST_CASE("link policy: changes waiting to be logged are bounded") {
  // A link that keeps changing: fast (one sample: the rate is the best of
  // the last 4), then slow (4 samples), each for 3 large frames (the votes).
  auto p = policy({Codec::lz4});
  const Buffer frame = link::reference_frame(std::size_t{1} << 20);
  Wire w;
  for (int cycle = 0; cycle < 20; ++cycle) {
    for (int k = 0; k < 4; ++k) p->observe(w.carry(kSlow));
    for (int i = 0; i < 3; ++i) (void)p->choose(frame);
    p->observe(w.carry(kFast));
    for (int i = 0; i < 3; ++i) (void)p->choose(frame);
  }
  const auto lines = p->take_changes();
  REQUIRE(lines.size() == LinkPolicy::kMaxPending + 1);
  CHECK(lines[0] == "24 earlier changes of the codec for this link not shown");
  CHECK(lines.back().find("lz4 -> none") != std::string::npos);
}

TEST_CASE("link policy: recode threads may ask at once") {
  auto p = policy({Codec::lz4, Codec::zstd});
  p->observe(Wire{}.carry(kSlow));
  const Buffer frame = link::reference_frame(std::size_t{1} << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        auto c = p->choose(frame);
        CHECK(c.has_value());
        (void)p->may_compress();
      }
    });
  for (auto& t : threads) t.join();
  CHECK(p->take_changes().size() == 1);
}
