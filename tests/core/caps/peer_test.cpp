#include "daskcaps/caps/peer.h"

#include <doctest/doctest.h>

#include <string>

#include "core/wire/internal/msgpack_view.h"

using namespace daskcaps;
using msgpack::Value;

namespace {

Value handshake(Value compression, std::int64_t pickle) {
  Value m = Value::map();
  m.set("compression", std::move(compression));
  m.set("python", Value::array({Value::integer(3), Value::integer(11), Value::integer(2)}));
  m.set("pickle-protocol", Value::integer(pickle));
  return m;
}

/// Both readings of one handshake: the Handshake the core decoded, and the
/// view of a handshake Dask decoded (here: the same value).
std::pair<Peer, Peer> both(const Value& m) {
  const Peer decoded = peer_from_handshake("p", *handshake_from_peer(m, Limits{}));
  const MsgpackView view(m);
  const Peer viewed = peer_from_handshake("p", view, read_capabilities(view, Limits{}), Limits{});
  return {decoded, viewed};
}

}  // namespace

TEST_CASE("peer_from_handshake of a view: a published key as from a decoded handshake") {
  Value m = handshake(Value::str("lz4"), 5);
  Value key = Value::map();
  key.set("codecs", Value::array({Value::str("zstd"), Value::str("lz4")}));
  key.set("max-pickle-protocol", Value::integer(4));
  key.set("gpu", Value::boolean(true));
  key.set("dask-caps", Value::str("0.1.0"));
  key.set("role", Value::str("worker"));
  m.set("capabilities", key);
  const auto [decoded, viewed] = both(m);
  CHECK(viewed.published);
  CHECK(viewed.codecs == decoded.codecs);
  CHECK(viewed.max_pickle_protocol == 4);
  CHECK(viewed.gpu == decoded.gpu);
  CHECK(viewed.role == "worker");
  CHECK(viewed.published_by == decoded.published_by);
}

TEST_CASE("peer_from_handshake of a view: a plain peer, its codec within the key's name bound") {
  auto [decoded, viewed] = both(handshake(Value::str("lz4"), 4));
  CHECK(!viewed.published);
  CHECK(viewed.codecs == std::vector<std::string>{"lz4"});
  CHECK(viewed.max_pickle_protocol == 4);
  CHECK(!viewed.gpu);
  CHECK(viewed.codecs == decoded.codecs);

  CHECK(both(handshake(Value::nil(), 5)).second.codecs.empty());
  CHECK(both(handshake(Value::boolean(false), 5)).second.codecs.empty());
  // Dask takes any string there; the view's reader names no codec it could not log.
  CHECK(both(handshake(Value::str(std::string(65, 'c')), 5)).second.codecs.empty());
  CHECK(both(handshake(Value::str("lz4\n"), 5)).second.codecs.empty());

  // A refused key: plain, with the same words as the decoded reading.
  Value m = handshake(Value::str("lz4"), 5);
  m.set("capabilities", Value::str("all"));
  std::tie(decoded, viewed) = both(m);
  CHECK(!viewed.published);
  CHECK(viewed.codecs == std::vector<std::string>{"lz4"});
  CHECK(viewed.capabilities_refused == decoded.capabilities_refused);
  CHECK(viewed.capabilities_refused.find("a msgpack str, not a map") != std::string::npos);
}
