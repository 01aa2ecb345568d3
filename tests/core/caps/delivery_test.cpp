// The one policy (core/caps/delivery.h): what a receiver gets from a
// sender, for each caller's way of asking (check, --for, the bridge, the
// plugin through the Python module), and the Dask release type it uses.
#include "daskcaps/caps/delivery.h"

#include <doctest/doctest.h>

#include "daskcaps/caps/caps.h"
#include "support/dask_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

Peer published(std::vector<std::string> codecs, std::int64_t pickle = 5, std::optional<bool> gpu = std::nullopt,
               std::string role = "") {
  Peer p;
  p.name = "peer";
  p.codecs = std::move(codecs);
  p.max_pickle_protocol = pickle;
  p.gpu = gpu;
  p.role = std::move(role);
  p.published = true;
  return p;
}

Handshake plain_handshake(Value compression, std::int64_t pickle) {
  Value m = map({{"compression", std::move(compression)}});
  m.set("python", arr({num(3), num(11), num(2)}));
  m.set("pickle-protocol", num(pickle));
  return *handshake_from_msgpack(m);
}

}  // namespace

TEST_CASE("delivery: the sender's order, the receiver's order") {
  const Peer sender = published({"zstd", "lz4"});
  const Peer receiver = published({"lz4", "snappy", "zstd"});
  auto d = deliver(sender, receiver);
  REQUIRE(d);
  CHECK(d->codec == "zstd");
  DeliveryOptions theirs;
  theirs.order = DeliveryOptions::Order::receiver;
  d = deliver(sender, receiver, theirs);
  REQUIRE(d);
  CHECK(d->codec == "lz4");
  // dask-caps itself writes every codec and takes the receiver's order.
  d = deliver(this_build(), receiver, theirs);
  REQUIRE(d);
  CHECK(d->codec == "lz4");
  CHECK(d->accept == std::vector<Codec>{Codec::lz4, Codec::snappy, Codec::zstd});
  CHECK(d->recodes_frames());  // zlib is not accepted
  // Nothing in common: uncompressed.
  d = deliver(published({"zlib"}), published({"lz4"}));
  REQUIRE(d);
  CHECK(!d->codec);
  CHECK(d->written() == Codec::none);
}

TEST_CASE("delivery: a codec the receiver lacks is recoded to what it gets, or raw") {
  DeliveryOptions theirs;
  theirs.order = DeliveryOptions::Order::receiver;
  auto d = deliver(this_build(), published({"lz4"}), theirs);
  REQUIRE(d);
  TranscodeOptions t = d->recode_options(TranscodeOptions{});
  REQUIRE(t.codec);
  CHECK(*t.codec == Codec::lz4);
  CHECK(t.accept_codecs == std::vector<Codec>{Codec::lz4});
  CHECK(!t.pickle_protocol);
  CHECK(!t.layout_cpu);
  // A receiver that decodes every codec of this build: nothing to recode.
  d = deliver(this_build(), published({"zlib", "zstd", "snappy", "lz4"}), theirs);
  REQUIRE(d);
  CHECK(!d->recodes_frames());
  CHECK(d->recode_options(TranscodeOptions{}).is_identity());
  // One that decodes none: raw.
  d = deliver(this_build(), published({}), theirs);
  REQUIRE(d);
  t = d->recode_options(TranscodeOptions{});
  REQUIRE(t.codec);
  CHECK(*t.codec == Codec::none);
  CHECK(t.accept_codecs.empty());
}

TEST_CASE("delivery: the user's codec, protocol and layout win") {
  DeliveryOptions o;
  o.order = DeliveryOptions::Order::receiver;
  o.codec = Codec::zstd;
  o.pickle_protocol = 4;
  o.cpu_layout = true;
  auto d = deliver(this_build(), published({"lz4", "zstd"}, 5, true), o);
  REQUIRE(d);
  CHECK(d->codec == "zstd");
  CHECK(d->accept == std::vector<Codec>{Codec::zstd});
  CHECK(d->pickle_protocol == 4);
  CHECK(d->cpu_layout == true);
  const TranscodeOptions t = d->recode_options(TranscodeOptions{});
  CHECK(t.codec == Codec::zstd);
  CHECK(t.pickle_protocol == 4);
  CHECK(t.layout_cpu);
  o.pickle_protocol = 6;
  auto bad = deliver(this_build(), published({"lz4"}), o);
  REQUIRE(!bad);
  CHECK(bad.error().code == Errc::usage);
  CHECK(bad.error().message() == "pickle protocol 6: the engine writes protocols 0 to 5");
}

TEST_CASE("delivery: pickle protocol and layout from what the receiver reads and has") {
  auto d = deliver(this_build(), published({"lz4"}, 4, false));
  REQUIRE(d);
  CHECK(d->pickle_protocol == 4);
  CHECK(d->cpu_layout == true);
  CHECK(d->recode_options(TranscodeOptions{}).pickle_protocol == 4);
  CHECK(d->recode_options(TranscodeOptions{}).layout_cpu);
  d = deliver(this_build(), published({"lz4"}, 5, true));
  REQUIRE(d);
  CHECK(d->cpu_layout == false);
  d = deliver(this_build(), published({"lz4"}));
  REQUIRE(d);
  CHECK(!d->cpu_layout);
  // A scheduler relays: its layout is kept when asked.
  DeliveryOptions relay;
  relay.keep_layout_for_schedulers = true;
  d = deliver(this_build(), published({"lz4"}, 5, false, "scheduler"), relay);
  REQUIRE(d);
  CHECK(!d->cpu_layout);
  d = deliver(this_build(), published({"lz4"}, 5, false, "worker"), relay);
  REQUIRE(d);
  CHECK(d->cpu_layout == true);
  // A protocol below 0 (a forged peer) is 0.
  d = deliver(this_build(), published({}, -3));
  REQUIRE(d);
  CHECK(d->pickle_protocol == 0);
}

TEST_CASE("delivery: a plain Dask peer gets the codec it advertises, in protocol it reads") {
  const Peer lz4 = peer_from_handshake("client", plain_handshake(str("lz4"), 4));
  CHECK(!lz4.published);
  CHECK(lz4.codecs == std::vector<std::string>{"lz4"});
  DeliveryOptions theirs;
  theirs.order = DeliveryOptions::Order::receiver;
  auto d = deliver(this_build(), lz4, theirs);
  REQUIRE(d);
  CHECK(d->codec == "lz4");
  TranscodeOptions t = d->recode_options(TranscodeOptions{});
  CHECK(t.codec == Codec::lz4);
  CHECK(t.accept_codecs == std::vector<Codec>{Codec::lz4});
  CHECK(t.pickle_protocol == 4);
  // None, or a codec this build does not have: uncompressed.
  for (Value c : {Value::nil(), Value::boolean(false), str("blosc")}) {
    d = deliver(this_build(), peer_from_handshake("client", plain_handshake(c, 5)), theirs);
    REQUIRE(d);
    t = d->recode_options(TranscodeOptions{});
    CHECK(t.codec == Codec::none);
    CHECK(!t.pickle_protocol);
  }
}

TEST_CASE("delivery: a published handshake is read by the core, a malformed one refused") {
  Value m = map({{"compression", str("lz4")}});
  m.set("python", arr({num(3), num(11), num(2)}));
  m.set("pickle-protocol", num(5));
  Value caps = map({{"codecs", arr({str("zstd"), str("lz4")})}});
  caps.set("max-pickle-protocol", num(4));
  caps.set("gpu", Value::boolean(false));
  caps.set("role", str("worker"));
  caps.set("dask-caps", str("0.1.0"));
  m.set("capabilities", caps);
  const Peer p = peer_from_handshake("w", *handshake_from_msgpack(m));
  CHECK(p.published);
  CHECK(p.codecs == std::vector<std::string>{"zstd", "lz4"});
  CHECK(p.max_pickle_protocol == 4);
  CHECK(p.gpu == false);
  CHECK(p.role == "worker");
  CHECK(p.published_by == "0.1.0");

  m.set("capabilities", map({{"codecs", str("lz4")}}));
  const Peer refused = peer_from_handshake("w", *handshake_from_msgpack(m));
  CHECK(!refused.published);
  CHECK(!refused.capabilities_refused.empty());
  CHECK(refused.codecs == std::vector<std::string>{"lz4"});
}

TEST_CASE("delivery: check's recommendation is deliver() both ways") {
  const Peer a = published({"lz4", "zstd"}, 5, true);
  const Peer b = published({"zstd"}, 4, false);
  const Recommendation r = recommend(a, b);
  CHECK(r.a_to_b.codec == "zstd");
  CHECK(r.b_to_a.codec == "zstd");
  CHECK(r.a_to_b.layout == "cpu");
  CHECK(r.b_to_a.layout == "gpu");
  CHECK(r.pickle_protocol == 4);
}

TEST_CASE("dask release: one type, from a version or a name") {
  CHECK(DaskRelease::from_version("2022.12.1+ds.1") == DaskRelease::v2022_12());
  CHECK(DaskRelease::from_version("2023.4.1").name() == "2022.12");
  CHECK(DaskRelease::from_version("2023.5.0").name() == "newest");
  CHECK(DaskRelease::from_version("2026.7.1").uncompressed_to_same_host());
  CHECK(!DaskRelease::from_version("2025.3.0").versions_name_distributions());
  CHECK(DaskRelease::from_version("2025.4.0").versions_name_distributions());
  CHECK(DaskRelease::from_version("2.23.0") == DaskRelease::v2022_12());
  CHECK(DaskRelease::from_version("").name() == "2022.12");
  CHECK(DaskRelease::from_version("2023").name() == "2022.12");
  CHECK(DaskRelease::from_name("newest") == DaskRelease::newest());
  CHECK(DaskRelease::from_name("2022.12") == DaskRelease::v2022_12());
  CHECK(!DaskRelease::from_name("2024.1"));
  CHECK(DaskRelease::v2022_12().maybe_compress_rules().ratio == doctest::Approx(0.9));
  CHECK(DaskRelease::newest().maybe_compress_rules().ratio == doctest::Approx(0.7));
  CHECK(DaskRelease::from_version("2026.7.1").maybe_compress_rules().ratio == doctest::Approx(0.7));
}

TEST_CASE("options: validated once, in the core") {
  TranscodeOptions t;
  CHECK(validate(t));
  t.compress.zstd_level = 23;
  CHECK(validate(t).error().message() == "zstd level 23: zstd levels are 1 to 22");
  t.compress.zstd_level = 3;
  t.compress.zlib_level = 10;
  CHECK(validate(t).error().code == Errc::usage);
  t.compress.zlib_level = -1;
  t.compress.zstd_workers = -1;
  CHECK(validate(t).error().message() == "zstd threads must not be negative");
  t.compress.zstd_workers = 0;
  t.pickle_protocol = 6;
  CHECK(validate(t).error().message() == "pickle protocol 6: the engine writes protocols 0 to 5");
  t.pickle_protocol = 0;
  t.shard_bytes = 0;
  CHECK(validate(t).error().code == Errc::usage);
}

TEST_CASE("delivery: --for fills what the user did not set, and nothing else") {
  DeliveryOptions theirs;
  theirs.order = DeliveryOptions::Order::receiver;
  auto d = deliver(this_build(), published({"snappy", "lz4"}, 4, false), theirs);
  REQUIRE(d);
  // Nothing set: every choice is the receiver's.
  std::optional<Codec> codec;
  std::optional<int> protocol;
  bool cpu = false;
  d->fill_unset(codec, protocol, cpu, {});
  REQUIRE(codec);
  CHECK(*codec == Codec::snappy);
  REQUIRE(protocol);
  CHECK(*protocol == 4);
  CHECK(cpu);  // the receiver said it has no GPU
  // What the user set stays, "keep" (nullopt) included.
  std::optional<Codec> kept;
  std::optional<int> five = 5;
  bool keep_layout = false;
  d->fill_unset(kept, five, keep_layout, {true, true, true});
  CHECK(!kept);
  CHECK(five == 5);
  CHECK(!keep_layout);
  // A receiver whose GPU is unknown leaves the layout as it is.
  d = deliver(this_build(), published({}), theirs);
  REQUIRE(d);
  bool layout = true;
  d->fill_unset(codec, protocol, layout, {});
  CHECK(codec == Codec::none);
  CHECK(protocol == 5);
  CHECK(layout);
}
