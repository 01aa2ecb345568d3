#include "daskcaps/caps/link_choice.h"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tests/support/link_wire.h"
#include "tests/support/test_bytes.h"

using namespace daskcaps;
using link::ChooserOptions;
using link::CodecChoice;
using link::LinkChooser;

namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// Speeds of the synthetic machine (bytes per second): the choice is a
// function of them, the link's rate and the data, so tests give all three.
std::vector<std::pair<CodecChoice, link::CodecSpeed>> speeds() {
  return {{{Codec::lz4, 0}, {500e6, 2000e6}},
          {{Codec::snappy, 0}, {400e6, 1500e6}},
          {{Codec::zstd, 1}, {300e6, 1000e6}},
          {{Codec::zstd, 3}, {150e6, 900e6}},
          {{Codec::zlib, 0}, {30e6, 200e6}}};
}

ChooserOptions options(std::vector<Codec> receiver = {Codec::lz4, Codec::snappy, Codec::zstd, Codec::zlib}) {
  ChooserOptions o;
  o.receiver_codecs = std::move(receiver);
  o.speeds = speeds();
  return o;
}

LinkChooser chooser(ChooserOptions o) {
  auto c = LinkChooser::make(std::move(o));
  REQUIRE(c.ok());
  return std::move(*c);
}

// Measurements with a few significant digits, as float64 (compressible).
Buffer measurements(std::uint64_t bytes, std::uint32_t seed = 1) {
  Buffer out;
  out.reserve(static_cast<std::size_t>(bytes));
  std::uint32_t s = seed;
  for (std::uint64_t i = 0; i < bytes / 8; ++i) {
    s = s * 1664525u + 1013904223u;
    const double x = std::round((20.0 + 5.0 * std::sin(static_cast<double>(i) / 5000.0) +
                                 (static_cast<double>(s >> 8) / 16777216.0 - 0.5)) * 10.0) / 10.0;
    std::uint8_t b[8];
    std::memcpy(b, &x, 8);
    out.append(ByteSpan(b, 8));
  }
  return out;
}

using Wire = testsupport::LinkWire;

constexpr double k100Mbit = 12.5e6;
constexpr double k10Gbit = 1.25e9;

bool decodable(const std::optional<CodecChoice>& c, const std::vector<Codec>& receiver) {
  return c && (c->codec == Codec::none || std::find(receiver.begin(), receiver.end(), c->codec) != receiver.end());
}

}  // namespace

TEST_CASE("link choice: a slow link gets a codec for compressible data, a fast one none") {
  const Buffer data = measurements(2 * kMiB);
  auto slow = chooser(options());
  slow.observe(Wire{}.carry(k100Mbit));
  const auto c = slow.choose(data);
  REQUIRE(c);
  CHECK(c->codec != Codec::none);
  CHECK(slow.changed());
  REQUIRE(slow.last_change());
  CHECK_FALSE(slow.last_change()->from);
  CHECK(slow.last_change()->to == *c);
  CHECK(link::describe(*slow.last_change()).find("codec for this link: (Dask's) -> ") == 0);

  auto fast = chooser(options());
  fast.observe(Wire{}.carry(k10Gbit));
  const auto f = fast.choose(data);
  REQUIRE(f);
  CHECK(f->codec == Codec::none);
}

TEST_CASE("link choice: random bytes go raw even on a slow link") {
  const Buffer noise = testsupport::random_bytes(2 * kMiB);
  auto ch = chooser(options());
  ch.observe(Wire{}.carry(k100Mbit));
  for (int i = 0; i < 5; ++i) {
    const auto c = ch.choose(noise);
    REQUIRE(c);
    CHECK(c->codec == Codec::none);
  }
  CHECK_FALSE(ch.current());  // data that does not compress says nothing of the link: no vote
}

TEST_CASE("link choice: random frames between compressible ones go raw without changing the connection's choice") {
  const Buffer data = measurements(2 * kMiB);
  const Buffer noise = testsupport::random_bytes(2 * kMiB);
  auto ch = chooser(options());
  ch.observe(Wire{}.carry(k100Mbit));
  const auto first = ch.choose(data);
  REQUIRE(first);
  REQUIRE(first->codec != Codec::none);
  for (int i = 0; i < 10; ++i) {
    const auto r = ch.choose(noise);
    REQUIRE(r);
    CHECK(r->codec == Codec::none);
    CHECK(ch.choose(data) == first);
  }
  CHECK(ch.changes() == 1);
}

TEST_CASE("link choice: hysteresis, a link that wavers around the break-even point does not flap") {
  const Buffer data = measurements(2 * kMiB);
  // Find the rate at which none and the best codec cost the same on this
  // data, then waver 5% around it (less than the 15% margin).
  double lo = 1e6, hi = 1e11;
  for (int i = 0; i < 60; ++i) {
    const double mid = std::sqrt(lo * hi);
    auto c = chooser(options());
    c.observe(Wire{}.carry(mid));
    const auto got = c.choose(data);
    REQUIRE(got);
    (got->codec == Codec::none ? hi : lo) = mid;
  }
  const double even = std::sqrt(lo * hi);
  ChooserOptions o = options();
  o.rate_window = 1;  // every sample is the rate at once
  auto ch = chooser(o);
  Wire w;
  std::optional<CodecChoice> first;
  for (int i = 0; i < 40; ++i) {
    ch.observe(w.carry(even * (i % 2 ? 1.05 : 0.95)));
    const auto c = ch.choose(data);
    REQUIRE(c);
    if (!first) first = c;
    CHECK(c == first);  // every frame, not only the connection's record
  }
  CHECK(ch.changes() == 1);  // the first choice only
}

TEST_CASE("link choice: a single odd frame does not change the choice; a lasting change does, within a few frames") {
  const Buffer data = measurements(2 * kMiB);
  ChooserOptions o = options();
  o.rate_window = 1;
  auto ch = chooser(o);
  Wire w;
  ch.observe(w.carry(k100Mbit));
  const auto slow_choice = ch.choose(data);
  REQUIRE(slow_choice);
  REQUIRE(slow_choice->codec != Codec::none);
  // Two fast frames (fewer than `votes`), then slow again: no change.
  for (int i = 0; i < 2; ++i) {
    ch.observe(w.carry(k10Gbit));
    CHECK(ch.choose(data) == slow_choice);
  }
  ch.observe(w.carry(k100Mbit));
  CHECK(ch.choose(data) == slow_choice);
  CHECK(ch.changes() == 1);
  // The link turns fast for good: none within `votes` frames.
  int frames = 0;
  while (ch.current() != CodecChoice{} && frames < 10) {
    ch.observe(w.carry(k10Gbit));
    (void)ch.choose(data);
    ++frames;
  }
  CHECK(frames == 3);
  CHECK(ch.changes() == 2);
  REQUIRE(ch.last_change());
  CHECK(ch.last_change()->from == slow_choice);
}

TEST_CASE("link choice: a link that slows down is followed within rate_window + votes large frames") {
  const Buffer data = measurements(2 * kMiB);
  auto ch = chooser(options());  // rate_window 4, votes 3
  Wire w;
  ch.observe(w.carry(k10Gbit));
  REQUIRE(ch.choose(data) == CodecChoice{});
  int frames = 0;
  while (ch.current() == CodecChoice{} && frames < 20) {
    ch.observe(w.carry(k100Mbit));
    (void)ch.choose(data);
    ++frames;
  }
  REQUIRE(ch.current());
  CHECK(ch.current()->codec != Codec::none);
  CHECK(frames <= 4 + 3);
  CHECK(frames >= 3);  // not before the votes
}

TEST_CASE("link choice: never a codec the receiver cannot decode") {
  const Buffer data = measurements(2 * kMiB);
  const std::vector<std::vector<Codec>> receivers = {
      {}, {Codec::zstd}, {Codec::zlib}, {Codec::snappy}, {Codec::lz4, Codec::zlib}};
  for (const auto& receiver : receivers) {
    for (double rate : {1e5, 1e6, k100Mbit, 1.25e8, k10Gbit}) {
      auto ch = chooser(options(receiver));
      ch.observe(Wire{}.carry(rate));
      for (int i = 0; i < 4; ++i) {
        const auto c = ch.choose(data);
        CHECK(decodable(c, receiver));
      }
    }
  }
  auto none = chooser(options({}));
  none.observe(Wire{}.carry(1e5));
  CHECK(none.choose(data) == CodecChoice{});
  CHECK(none.candidates().size() == 1);

  // zstd alone: the levels are the choices.
  auto zstd = chooser(options({Codec::zstd}));
  CHECK(zstd.candidates().size() == 3);

  ChooserOptions pinned = options({Codec::zstd});
  pinned.pin = CodecChoice{Codec::lz4, 0};
  auto bad = LinkChooser::make(pinned);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == Errc::usage);
}

TEST_CASE("link choice: Dask's rules first: small frames, same host and a pin") {
  const Buffer data = measurements(2 * kMiB);
  const Buffer small = measurements(8000);
  auto ch = chooser(options());
  ch.observe(Wire{}.carry(1e5));
  CHECK(ch.choose(small) == CodecChoice{});
  CHECK_FALSE(ch.current());  // a small frame is no vote

  ChooserOptions same = options();
  same.same_host = true;
  auto local = chooser(same);
  local.observe(Wire{}.carry(1e5));
  CHECK(local.choose(data) == CodecChoice{});

  ChooserOptions pinned = options();
  pinned.pin = CodecChoice{Codec::zstd, 3};
  auto pin = chooser(pinned);
  REQUIRE(pin.current());  // the pin is the connection's choice from the start
  CHECK(*pin.current() == CodecChoice{Codec::zstd, 3});
  CHECK(pin.choose(data) == CodecChoice{Codec::zstd, 3});  // even before the link is known
  CHECK(pin.changes() == 0);
  pinned.same_host = true;  // Dask's rule: none, and no choice of the connection's own
  CHECK_FALSE(chooser(pinned).current());
  CHECK(pin.choose(small) == CodecChoice{});

  ChooserOptions levels = options();
  levels.zstd_levels = {0};
  CHECK_FALSE(LinkChooser::make(levels).ok());
}

TEST_CASE("link choice: the link's rate, from what is reliable") {
  const Buffer data = measurements(2 * kMiB);
  auto ch = chooser(options());
  CHECK_FALSE(ch.rate());
  CHECK_FALSE(ch.choose(data));  // unknown: the caller keeps its choice
  CHECK(std::string(ch.rate_source()) == "unknown");

  // Large writes stand in where the socket gives no TCP_INFO.
  ch.observe_write(1000, 0.001);  // below min_write_bytes: fits the buffer
  CHECK_FALSE(ch.rate());
  ch.observe_write(4 * kMiB, 0.5);
  REQUIRE(ch.rate());
  CHECK(*ch.rate() == doctest::Approx(4.0 * kMiB / 0.5));
  CHECK(std::string(ch.rate_source()) == "writes");

  // Once the socket gives TCP_INFO, only its samples count, and a span
  // shorter than span_seconds is none yet.
  Wire w;
  ch.observe(w.carry(1e5, 0.01));
  CHECK_FALSE(ch.rate());
  CHECK(std::string(ch.rate_source()) == "unknown");
  CHECK(ch.rtt() == doctest::Approx(0.002));
  ch.observe(w.carry(k100Mbit));
  REQUIRE(ch.rate());
  CHECK(std::string(ch.rate_source()) == "tcp");
  // The span ran from the connection's start: 0.21 s busy.
  CHECK(*ch.rate() == doctest::Approx((1e5 * 0.01 + k100Mbit * 0.2) / 0.21));
  ch.observe_write(64 * kMiB, 0.001);
  CHECK(*ch.rate() == doctest::Approx((1e5 * 0.01 + k100Mbit * 0.2) / 0.21));

  auto neg = options();
  neg.span_seconds = -1.0;
  CHECK_FALSE(LinkChooser::make(neg).ok());
}

TEST_CASE("link choice: a span closes at span_seconds busy, and at ten lowest RTTs") {
  auto ch = chooser(options());
  Wire w;
  ch.observe(w.carry(k100Mbit, 0.099));
  CHECK_FALSE(ch.rate());
  ch.observe(w.carry(k100Mbit, 0.001));
  REQUIRE(ch.rate());
  CHECK(*ch.rate() == doctest::Approx(k100Mbit));

  // A long round trip: busy time holds one that carries nothing per busy
  // period, so the span waits for ten of them.
  auto far = chooser(options());
  Wire wan;
  auto f = wan.carry(k100Mbit, 0.3);
  f.min_rtt_s = 0.05;
  far.observe(f);
  CHECK_FALSE(far.rate());
  f = wan.carry(k100Mbit, 0.2);
  f.min_rtt_s = 0.05;
  far.observe(f);
  REQUIRE(far.rate());
  CHECK(*far.rate() == doctest::Approx(k100Mbit));
}

TEST_CASE("link choice: a shaper's burst is a small part of a span, not a sample (first flight, after idle)") {
  // A new connection's first flight passes a token bucket's 256 KB at the
  // wire's speed: a reading then has 4 ms of busy time, no sample.
  auto ch = chooser(options());
  Wire w;
  constexpr double kBurst = 64e6;  // 256 KB in 4 ms
  ch.observe(w.carry(kBurst, 0.004));
  CHECK_FALSE(ch.rate());
  CHECK_FALSE(ch.choose(measurements(4 * kMiB)));
  // The message goes on at the link's rate; the span that closes holds the
  // burst as the small part it is.
  ch.observe(w.carry(k100Mbit, 0.3));
  REQUIRE(ch.rate());
  CHECK(*ch.rate() < 1.1 * k100Mbit);
  CHECK(*ch.rate() > k100Mbit);
  // After an idle pause (no busy time, the bucket refilled) the next
  // message bursts again: read right after its write, nothing is counted;
  // read once it has gone on, the span is the link's rate again.
  ch.observe(w.carry(kBurst, 0.004));
  ch.observe(w.carry(k100Mbit, 0.004));
  CHECK(*ch.rate() < 1.1 * k100Mbit);
  ch.observe(w.carry(k100Mbit, 1.0));
  CHECK(*ch.rate() < 1.1 * k100Mbit);
}

TEST_CASE("link choice: the kernel's sample of the last ACK counts within peak_factor of a span") {
  auto ch = chooser(options());
  Wire w;
  // Before a span has closed, no kernel sample counts (a first flight).
  auto first = w.carry(64e6, 0.004);  // 256 KB of a full bucket
  first.delivery_rate = 1e9;
  first.app_limited = false;
  ch.observe(first);
  CHECK_FALSE(ch.rate());
  // A 1 Gbit/s link whose span reads 60 MB/s (the link idled while the
  // connection was busy: slow receivers on busy cores).
  ch.observe(w.carry(60e6, 0.3));
  REQUIRE(ch.rate());
  const double span = *ch.rate();
  CHECK(span < 70e6);
  // The link's peak, 118 MB/s: within 4 times the span, so it counts.
  auto peak = w.carry(118e6, 0.01);
  peak.delivery_rate = 118e6;
  peak.app_limited = false;
  ch.observe(peak);
  CHECK(*ch.rate() == doctest::Approx(118e6));
  // A burst through a shaper's bucket (3.9 GB/s), an application-limited
  // sample, and the same sample read again once nothing more was
  // acknowledged: none counts.
  auto burst = w.carry(60e6, 0.01);
  burst.delivery_rate = 3.9e9;
  burst.app_limited = false;
  ch.observe(burst);
  auto limited = w.carry(60e6, 0.01);
  limited.delivery_rate = 200e6;
  ch.observe(limited);
  auto again = limited;
  again.delivery_rate = 200e6;
  again.app_limited = false;
  ch.observe(again);
  CHECK(*ch.rate() == doctest::Approx(118e6));
  // The bound is an option, at least 1.
  auto o = options();
  o.peak_factor = 0.5;
  CHECK_FALSE(LinkChooser::make(o).ok());
}

TEST_CASE("link choice: readings inside a span add nothing; counters that go back restart it") {
  auto ch = chooser(options());
  Wire w;
  const auto first = w.carry(k100Mbit, 1.0);
  ch.observe(first);
  REQUIRE(ch.rate());
  // The same reading again, as often as a caller likes: no second sample,
  // even where the RTT reads differently.
  auto again = first;
  again.rtt_s = 0.004;
  for (int i = 0; i < 4; ++i) ch.observe(again);
  CHECK(*ch.rate() == doctest::Approx(k100Mbit));
  CHECK(ch.rtt() == doctest::Approx(0.004));  // the RTT is still taken
  // Another socket's figures (lower counters): the span restarts there,
  // and the jump down to them is no sample.
  Wire other;
  ch.observe(other.carry(10 * k100Mbit));
  CHECK(*ch.rate() == doctest::Approx(k100Mbit));
  ch.observe(other.carry(10 * k100Mbit));
  CHECK(*ch.rate() == doctest::Approx(10 * k100Mbit));
  // The best of the last four samples: four slower spans replace it.
  for (int i = 0; i < 3; ++i) ch.observe(other.carry(k100Mbit));
  CHECK(*ch.rate() == doctest::Approx(10 * k100Mbit));
  ch.observe(other.carry(k100Mbit));
  CHECK(*ch.rate() == doctest::Approx(k100Mbit));
}

TEST_CASE("link choice: the open span's floor chooses none on a fast link before a span closes") {
  // A 2022.12.1 worker's connection on two busy cores (traced,
  // docs/link-choice.md): the handshake's few bytes wait for a delayed ACK,
  // 48 ms busy, then a 32 MiB message is acknowledged after 28 ms busy.
  // No span reaches span_seconds in such a rechunk.
  constexpr double kMessage = 32.0 * kMiB;
  auto handshake = [](Wire& w, bool idle) {
    auto f = w.carry(461 / 0.048, 0.048);
    f.idle = idle;
    return f;
  };
  auto ch = chooser(options());
  Wire w;
  ch.observe(handshake(w, true));  // idle, under vote_bytes: the span restarts
  CHECK_FALSE(ch.floor_rate());
  ch.observe(w.carry(kMessage / 0.028, 0.028));
  CHECK_FALSE(ch.rate());  // no sample yet
  REQUIRE(ch.floor_rate());
  CHECK(*ch.floor_rate() == doctest::Approx(kMessage / (0.028 + 0.01)));
  // At 883 MB/s none beats lz4 (500 and 2000 MB/s here) even if lz4 made
  // the frame vanish: none is certain, and it is the connection's choice.
  CHECK(std::string(ch.rate_source()) == "tcp floor");
  const auto c = ch.choose(measurements(8 * kMiB));
  REQUIRE(c);
  CHECK(c->codec == Codec::none);
  REQUIRE(ch.current());
  CHECK(ch.current()->codec == Codec::none);

  // Without the restart, the handshake's 48 ms stay in the span: its floor
  // (390 MB/s) leaves lz4 possible for a frame that all but vanishes, so
  // the link stays unknown for such a frame.
  auto kept = chooser(options());
  Wire k;
  kept.observe(handshake(k, false));
  kept.observe(k.carry(kMessage / 0.028, 0.028));
  REQUIRE(kept.floor_rate());
  CHECK(*kept.floor_rate() < 400e6);
  CHECK(std::string(kept.rate_source()) == "unknown");
  const Buffer zeros(8 * kMiB, 0);
  CHECK_FALSE(kept.choose(zeros));
  CHECK_FALSE(kept.current());
}

TEST_CASE("link choice: at the floor, none is certain for a frame it beats with the frame's own ratio") {
  // A 390 MB/s floor (8 MiB in 10 ms busy, plus the tick): lz4 (500 and
  // 2000 MB/s here) would beat none only for a frame that shrinks to 2 %.
  auto ch = chooser(options());
  Wire w;
  ch.observe(w.carry(8.0 * kMiB / 0.0115, 0.0115));
  REQUIRE(ch.floor_rate());
  CHECK_FALSE(ch.rate());
  // Measurements shrink far less than that: at the floor none wins, so at
  // the link's true rate, which is higher, it wins by more.
  CHECK(std::string(ch.rate_source()) == "unknown");
  const auto c = ch.choose(measurements(8 * kMiB));
  REQUIRE(c);
  CHECK(c->codec == Codec::none);
  CHECK(std::string(ch.rate_source()) == "tcp floor");
  REQUIRE(ch.current());
  CHECK(ch.current()->codec == Codec::none);
  // A frame that all but vanishes could go faster with lz4 at the floor,
  // but the floor is not the rate: the connection's none stays, and the
  // frame does not vote.
  const Buffer zeros(8 * kMiB, 0);
  for (int i = 0; i < 4; ++i) {
    const auto z = ch.choose(zeros);
    REQUIRE(z);
    CHECK(z->codec == Codec::none);
  }
  CHECK(ch.changes() == 1);
}

TEST_CASE("link choice: the floor neither decides a slow link nor lowers a known rate") {
  // Below floor_bytes, no floor: a shaper's burst (256 KB in 4 ms) is none.
  auto ch = chooser(options());
  Wire w;
  ch.observe(w.carry(64e6, 0.004));
  CHECK_FALSE(ch.floor_rate());
  // 4 MiB and more in 40 ms at 1 Gbit/s: a floor of 100 MB/s, at which lz4
  // may still win: the link stays unknown, today's choice.
  ch.observe(w.carry(125e6, 0.04));
  REQUIRE(ch.floor_rate());
  CHECK_FALSE(ch.rate());
  CHECK_FALSE(ch.choose(measurements(8 * kMiB)));
  // Once a span has closed, a floor above the samples raises the rate and
  // one below leaves it.
  auto known = chooser(options());
  Wire k;
  known.observe(k.carry(k100Mbit, 0.2));
  REQUIRE(known.rate());
  CHECK(*known.rate() == doctest::Approx(k100Mbit));
  known.observe(k.carry(125e6, 0.05));  // 6.25 MB in 50 ms
  REQUIRE(known.floor_rate());
  CHECK(*known.rate() == doctest::Approx(125e6 * 0.05 / 0.06));
  known.observe(k.carry(k100Mbit, 0.1));  // the span closes: its own rate
  CHECK_FALSE(known.floor_rate());
  CHECK(*known.rate() == doctest::Approx((125e6 * 0.05 + k100Mbit * 0.1) / 0.15));
  // An idle reading restarts only a span that carried less than vote_bytes.
  auto busy = chooser(options());
  Wire b;
  busy.observe(b.carry(40e6, 0.05));  // 2 MB, then idle
  auto idle = b.carry(40e6, 0.01);
  idle.idle = true;
  busy.observe(idle);
  busy.observe(b.carry(40e6, 0.05));
  REQUIRE(busy.rate());  // 0.11 s busy since the start: one span
  CHECK(*busy.rate() == doctest::Approx(40e6));
  // The tick is an option, above 0.
  auto o = options();
  o.busy_tick_s = 0.0;
  CHECK_FALSE(LinkChooser::make(o).ok());
}

TEST_CASE("link choice: codecs are weighed at the speed this process compresses now") {
  // 1 Gbit/s: lz4 (500 and 2000 MB/s here) wins on measurements.
  constexpr double k1Gbit = 125e6;
  auto ch = chooser(options({Codec::lz4}));
  Wire w;
  ch.observe(w.carry(k1Gbit, 0.2));
  const Buffer frame = measurements(2 * kMiB);
  CHECK(ch.slowdown() == doctest::Approx(1.0));
  auto c = ch.choose(frame);
  REQUIRE(c);
  CHECK(c->codec == Codec::lz4);
  // Ignored: none, frames below vote_bytes, no time.
  ch.observe_compress({}, 8 * kMiB, 1.0);
  ch.observe_compress({Codec::lz4, 0}, kMiB / 2, 1.0);
  ch.observe_compress({Codec::lz4, 0}, 8 * kMiB, 0.0);
  CHECK(ch.slowdown() == doctest::Approx(1.0));
  // Compressing ran 20 times slower than calibrated (cores busy with the
  // link itself, or the frame out of cache): kept at 16 times, lz4 costs
  // more than the 125 MB/s link saves, and after `votes` frames none wins.
  const double slow = 500e6 / 20.0;
  ch.observe_compress({Codec::lz4, 0}, 8 * kMiB, 8.0 * kMiB / slow);
  CHECK(ch.slowdown() == doctest::Approx(16.0));  // kept within 16
  CHECK(ch.delivery_seconds({Codec::lz4, 0}, kMiB, 0.0, k1Gbit) ==
        doctest::Approx(kMiB * 16.0 / 500e6 + kMiB * 16.0 / 2000e6));
  for (int i = 0; i < 3; ++i) {
    c = ch.choose(frame);
    REQUIRE(c);
  }
  CHECK(c->codec == Codec::none);
  REQUIRE(ch.current());
  CHECK(ch.current()->codec == Codec::none);
  // The least slowdown of the last rate_window counts: one fast frame is
  // enough to say the process can compress that fast.
  ch.observe_compress({Codec::lz4, 0}, 8 * kMiB, 8.0 * kMiB / 1000e6);
  CHECK(ch.slowdown() == doctest::Approx(0.5));
}

TEST_CASE("link figures: TCP_INFO of a TCP socket; none of another socket") {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  CHECK_FALSE(net::read_link_figures(fds[0]));
  ::close(fds[0]);
  ::close(fds[1]);
  CHECK_FALSE(net::read_link_figures(-1));

  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const int server = ::accept(listener, nullptr, nullptr);
  REQUIRE(server >= 0);
  const auto fresh = net::read_link_figures(client);
  REQUIRE(fresh);
  CHECK(fresh->idle);  // connected, nothing sent
  const Buffer payload = measurements(4 * kMiB);
  std::size_t sent = 0, got = 0;
  std::vector<std::uint8_t> sink(1 << 16);
  while (got < payload.size()) {
    if (sent < payload.size()) {
      const ssize_t n = ::send(client, payload.data() + sent, std::min<std::size_t>(payload.size() - sent, 1 << 16),
                               MSG_DONTWAIT);
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    const ssize_t r = ::recv(server, sink.data(), sink.size(), MSG_DONTWAIT);
    if (r > 0) got += static_cast<std::size_t>(r);
  }
  const auto f = net::read_link_figures(client);
  REQUIRE(f);
  CHECK(f->rtt_s > 0.0);
  CHECK(f->delivered_bytes > 0);
  // Everything arrived: once the last ACK is in, nothing is in flight.
  bool idle = f->idle;
  for (int i = 0; i < 1000 && !idle; ++i) {
    ::usleep(1000);
    const auto later = net::read_link_figures(client);
    idle = later && later->idle;
  }
  CHECK(idle);
  auto ch = chooser(options());
  CHECK(ch.observe_socket(client));
  CHECK(ch.rtt());
  ::close(server);
  ::close(client);
  ::close(listener);
}

TEST_CASE("link choice: speeds are measured on this machine") {
  const auto lz4 = link::calibrated_speed({Codec::lz4, 0});
  CHECK(lz4.compress > 0.0);
  CHECK(lz4.decompress > 0.0);
  const auto none = link::calibrated_speed({});
  CHECK(std::isinf(none.compress));
  // Without test speeds, a chooser uses the measured ones.
  ChooserOptions o;
  o.receiver_codecs = {Codec::lz4};
  auto ch = chooser(o);
  CHECK(ch.delivery_seconds({Codec::lz4, 0}, kMiB, 0.5, k100Mbit) > 0.5 * kMiB / k100Mbit);
}

TEST_CASE("link choice: parse_choice reads choice_name back") {
  for (const CodecChoice& c : {CodecChoice{Codec::lz4, 0}, CodecChoice{Codec::zstd, 0}, CodecChoice{Codec::zstd, 1},
                               CodecChoice{Codec::zstd, 22}, CodecChoice{Codec::none, 0}, CodecChoice{Codec::zlib, 0}}) {
    auto back = link::parse_choice(link::choice_name(c));
    REQUIRE(back);
    CHECK(*back == c);
  }
  for (const char* bad : {"", "zstd-", "zstd-0", "zstd-23", "zstd-123", "lz4-1", "zstd-x", "brotli", "zstd--1"})
    CHECK_FALSE(link::parse_choice(bad).has_value());
}

TEST_CASE("link choice: may_code is what choose() could answer without a frame") {
  auto unknown = chooser(options());
  CHECK_FALSE(unknown.may_code());
  auto slow = chooser(options());
  slow.observe(Wire{}.carry(k100Mbit));
  CHECK(slow.may_code());
  auto fast = chooser(options());
  fast.observe(Wire{}.carry(k10Gbit));
  CHECK_FALSE(fast.may_code());
  auto o = options();
  o.same_host = true;
  auto same = chooser(o);
  same.observe(Wire{}.carry(k100Mbit));
  CHECK_FALSE(same.may_code());
  o = options();
  o.pin = CodecChoice{Codec::lz4, 0};
  CHECK(chooser(o).may_code());
}

TEST_CASE("link choice: a first choice near break-even is none; a codec must win by the margin") {
  // lz4 alone, at 500 and 2000 MB/s: on a frame of zeros (its sample
  // shrinks to well under 1 %) lz4 breaks even with none near 398 MB/s and
  // beats it by 15 % (margin) only below about 346 MB/s.
  const Buffer zeros(4 * kMiB, 0);
  auto near = chooser(options({Codec::lz4}));
  Wire w;
  near.observe(w.carry(370e6));
  const auto first = near.choose(zeros);
  REQUIRE(first);
  CHECK(first->codec == Codec::none);  // lz4 is faster by about 7 % here
  REQUIRE(near.current());
  CHECK(near.current()->codec == Codec::none);
  // Where lz4 wins by more than the margin, the first choice is lz4.
  auto slow = chooser(options({Codec::lz4}));
  Wire s;
  slow.observe(s.carry(300e6));
  const auto coded = slow.choose(zeros);
  REQUIRE(coded);
  CHECK(coded->codec == Codec::lz4);
  // The near-even connection codes once the link slows enough, after the
  // votes every change takes.
  for (int i = 0; i < 4; ++i) near.observe(w.carry(100e6));
  CHECK(*near.rate() == doctest::Approx(100e6));
  for (int i = 0; i < 2; ++i) CHECK(near.choose(zeros)->codec == Codec::none);
  CHECK(near.choose(zeros)->codec == Codec::lz4);
  CHECK(near.changes() == 2);
}

TEST_CASE("link choice: a new connection starts from the rate another connection to its host measured") {
  const Buffer data = measurements(2 * kMiB);
  // Hosts of this test alone: the memory is the process's.
  ChooserOptions o = options();
  o.host = "link-choice-test.host-a";

  // The first connection to the host knows nothing; its samples are kept.
  auto first = chooser(o);
  CHECK_FALSE(first.choose(data));
  CHECK(std::string(first.rate_source()) == "unknown");
  first.observe(Wire{}.carry(k100Mbit));
  REQUIRE(first.rate());

  // A second one to the same host chooses its first large frame by that
  // rate, as the first does now.
  auto second = chooser(o);
  REQUIRE(second.rate());
  CHECK(*second.rate() == doctest::Approx(*first.rate()));
  CHECK(std::string(second.rate_source()) == "host");
  const auto c = second.choose(data);
  REQUIRE(c);
  CHECK(c->codec != Codec::none);
  CHECK(*c == *first.choose(data));

  // Its own samples replace the remembered one as the window turns: a
  // link that got fast is followed (rate_window samples of its own).
  Wire w;
  for (std::uint32_t i = 0; i < o.rate_window; ++i) second.observe(w.carry(k10Gbit));
  CHECK(std::string(second.rate_source()) == "tcp");
  CHECK(*second.rate() == doctest::Approx(k10Gbit).epsilon(0.05));
  // ... and what it measured is what the next connection starts from.
  auto third = chooser(o);
  REQUIRE(third.rate());
  CHECK(*third.rate() == doctest::Approx(k10Gbit).epsilon(0.05));

  // A connection of small messages busy for 0.2 s on 20 KB (a peer slow to
  // read) is no figure of the host's link: not remembered. Nor does a
  // slower span replace the host's best of the last remembered_seconds.
  ChooserOptions e = o;
  e.host = "link-choice-test.host-e";
  auto batched = chooser(e);
  batched.observe(Wire{}.carry(1e5));
  REQUIRE(batched.rate());
  CHECK_FALSE(chooser(e).rate());
  auto bulk = chooser(e);
  bulk.observe(Wire{}.carry(k100Mbit));
  auto slower = chooser(e);
  slower.observe(Wire{}.carry(k100Mbit / 2));
  REQUIRE(chooser(e).rate());
  CHECK(*chooser(e).rate() == doctest::Approx(k100Mbit));

  // A chooser made before the host was known takes the rate later, once
  // (a caller that read the host's other connections); one with samples
  // of its own keeps them.
  ChooserOptions d = o;
  d.host = "link-choice-test.host-d";
  auto early = chooser(d);
  CHECK_FALSE(early.take_host_rate());
  auto measured = chooser(d);
  measured.observe(Wire{}.carry(k100Mbit));
  CHECK(early.take_host_rate());
  CHECK(std::string(early.rate_source()) == "host");
  CHECK(*early.rate() == doctest::Approx(*measured.rate()));
  CHECK_FALSE(early.take_host_rate());
  CHECK_FALSE(measured.take_host_rate());

  // Another host, no host, or a memory too old: nothing is taken.
  ChooserOptions other = options();
  other.host = "link-choice-test.host-b";
  CHECK_FALSE(chooser(other).rate());
  CHECK_FALSE(chooser(options()).rate());
  ChooserOptions stale = o;
  stale.remembered_seconds = 0.0;
  CHECK_FALSE(chooser(stale).rate());
  // A connection without a host gives nothing to the memory either.
  auto anonymous = chooser(options());
  anonymous.observe(Wire{}.carry(k100Mbit));
  ChooserOptions empty = options();
  empty.host = "";
  CHECK_FALSE(chooser(empty).rate());
}

TEST_CASE("link choice: a borrowed rate decides none, or a codec only where it wins by borrowed_margin") {
  const Buffer data = measurements(2 * kMiB);
  ChooserOptions o = options();
  int close_calls = 0;
  for (double rate : {12.5e6, 50e6, 100e6, 150e6, 200e6, 300e6, 500e6, 1e9, 5e9}) {
    CAPTURE(rate);
    o.host = "link-choice-test.borrowed-" + std::to_string(static_cast<long long>(rate));
    auto own = chooser(o);
    own.observe(Wire{}.carry(rate));
    const auto mine = own.choose(data);
    REQUIRE(mine);
    auto borrowing = chooser(o);
    REQUIRE(std::string(borrowing.rate_source()) == "host");
    const auto borrowed = borrowing.choose(data);
    if (!borrowed) {
      // A close call: the connection's own figures will decide.
      CHECK(mine->codec != Codec::none);
      CHECK_FALSE(borrowing.current());
      ++close_calls;
      continue;
    }
    CHECK(*borrowed == *mine);
    if (borrowed->codec != Codec::none) {
      const double none = borrowing.delivery_seconds({}, data.size(), 1.0, rate);
      const double coded = borrowing.delivery_seconds(*borrowed, data.size(), borrowing.last_change()->ratio, rate);
      CHECK(none > (1.0 + o.borrowed_margin) * coded);
    }
  }
  CHECK(close_calls > 0);
  // The slow link is decided at once, the fast one too.
  o.host = "link-choice-test.borrowed-12500000";
  const auto slow = chooser(o).choose(data);
  REQUIRE(slow);
  CHECK(slow->codec != Codec::none);
  o.host = "link-choice-test.borrowed-5000000000";
  const auto fast = chooser(o).choose(data);
  REQUIRE(fast);
  CHECK(fast->codec == Codec::none);
  o.borrowed_margin = -1.0;
  CHECK_FALSE(LinkChooser::make(o).ok());
}
