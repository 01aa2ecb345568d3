#include "daskcaps/caps/negotiate.h"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "daskcaps/caps/probe.h"
#include "core/caps/internal/probe_json.h"

using namespace daskcaps;

namespace {

OrderedJson example(const std::string& name) {
  std::ifstream f(std::string(DASKCAPS_SOURCE_DIR) + "/examples/" + name);
  std::stringstream s;
  s << f.rdbuf();
  return OrderedJson::parse(s.str());
}

NegotiateSide side(const OrderedJson& doc, std::string name) { return NegotiateSide{doc.dump(), std::move(name), {}, {}}; }

// negotiate(), its JSON text read back.
Result<OrderedJson> negotiated(const NegotiateSide& local, const NegotiateSide& remote) {
  auto r = negotiate(local, remote);
  if (!r) return std::move(r).error();
  return OrderedJson::parse(*r);
}

const OrderedJson kLz4 = {{"compression", "lz4"}, {"python", {3, 11, 2}}, {"pickle-protocol", 5}};
const OrderedJson kZstd = {{"compression", "zstd"}, {"python", {3, 11, 2}}, {"pickle-protocol", 4}};

}  // namespace

TEST_CASE("negotiate: two probe documents give evaluate_pair's pair, with each direction's plan") {
  const OrderedJson gpu = example("gpu-worker.probe.json");
  const OrderedJson laptop = example("laptop.probe.json");
  auto r = negotiated(side(gpu, "gpu"), side(laptop, "laptop"));
  REQUIRE(r);
  auto a = probe_from_json(gpu);
  auto b = probe_from_json(laptop);
  REQUIRE(a);
  REQUIRE(b);
  const PairReport want = evaluate_pair(peer_from_probe(*a, "gpu", "client"), peer_from_probe(*b, "laptop", "file"),
                                        !a->hostname.empty() && a->hostname == b->hostname);
  OrderedJson expected = OrderedJson::parse(pair_json("gpu", "laptop", want));
  for (const char* k : {"a", "b", "dask", "recommended", "findings"}) CHECK((*r)[k] == expected[k]);
  // The GPU worker writes to a laptop without a GPU in the CPU layout.
  CHECK((*r)["local-to-remote"]["layout"] == "cpu");
  CHECK((*r)["local-to-remote"]["pickle-protocol"] == want.recommended.pickle_protocol);
}

TEST_CASE("negotiate: handshake dicts, published capabilities and the plan per direction") {
  auto plain = negotiated(side(kLz4, "l"), side(kZstd, "r"));
  REQUIRE(plain);
  CHECK((*plain)["dask"] == OrderedJson{{"compression", nullptr}, {"pickle-protocol", 4}});

  NegotiateSide local = side(kLz4, "l");
  local.capabilities = OrderedJson{{"codecs", {"lz4", "zstd"}}, {"gpu", true}}.dump();
  NegotiateSide remote = side(kZstd, "r");
  remote.capabilities = OrderedJson{{"codecs", {"zstd", "lz4"}}, {"gpu", false}}.dump();
  auto r = negotiated(local, remote);
  REQUIRE(r);
  CHECK((*r)["local-to-remote"] == OrderedJson{{"compression", "lz4"}, {"pickle-protocol", 4}, {"layout", "cpu"}});
  CHECK((*r)["remote-to-local"] == OrderedJson{{"compression", "zstd"}, {"pickle-protocol", 4}, {"layout", "gpu"}});

  // The same capabilities inside the handshake dict.
  OrderedJson with = kZstd;
  with["capabilities"] = {{"codecs", {"zstd", "lz4"}}, {"max-pickle-protocol", 4}, {"gpu", false}};
  auto in = negotiated(local, side(with, "r"));
  REQUIRE(in);
  CHECK((*in)["local-to-remote"] == (*r)["local-to-remote"]);
  CHECK((*in)["remote-to-local"] == (*r)["remote-to-local"]);
}

TEST_CASE("negotiate: a side that is no document is bad_value, named by its pointer") {
  auto arr = negotiated(side(OrderedJson::array(), "l"), side(kLz4, "r"));
  REQUIRE(!arr);
  CHECK(arr.error().code == Errc::bad_value);
  CHECK(arr.error().message().starts_with("/local: "));
  auto key = negotiated(side(kLz4, "l"), side(OrderedJson{{"pickle-protocol", "5"}}, "r"));
  REQUIRE(!key);
  CHECK(key.error().message().starts_with("/remote/pickle-protocol: "));
  auto schema = negotiated(side(OrderedJson{{"schema", "dask-caps.probe/7"}}, "l"), side(kLz4, "r"));
  REQUIRE(!schema);
  CHECK(schema.error().code == Errc::unsupported_version);
  NegotiateSide caps = side(kLz4, "l");
  caps.capabilities = OrderedJson{{"gpu", "no"}}.dump();
  auto bad_caps = negotiated(caps, side(kLz4, "r"));
  REQUIRE(!bad_caps);
  CHECK(bad_caps.error().code == Errc::bad_value);
}
