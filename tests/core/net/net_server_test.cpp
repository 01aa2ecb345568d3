#include "daskcaps/net/net_server.h"

#include <doctest/doctest.h>

#include "daskcaps/caps/caps.h"
#include "core/base/internal/byte_writer.h"
#include "support/dask_builder.h"
#include "core/net/internal/rpc_session.h"
#include "core/net/internal/server_session.h"

using namespace daskcaps;
using namespace testsupport;
using server::ServerSession;

namespace {

std::vector<server::Endpoint> endpoints() {
  server::Endpoint e;
  e.address = *net::parse_address("tcp://127.0.0.1:8786");
  e.profile.type = "Scheduler";
  e.profile.handshake = *handshake_from_msgpack(map({{"compression", str("lz4")},
                                                     {"python", arr({num(3), num(7), num(9)})},
                                                     {"pickle-protocol", num(4)}}));
  e.profile.capabilities.codecs = {"lz4", "zlib"};
  e.profile.capabilities.max_pickle_protocol = 4;
  e.profile.versions = map({{"packages", map({{"python", str("3.7.9.final.0")}})}});
  server::Endpoint w = e;
  w.address = *net::parse_address("tcp://127.0.0.1:9000");
  w.profile.type = "Worker";
  std::vector<server::Endpoint> all{e, w};
  server::prepare_replies(all, 1.5);
  return all;
}

Buffer message(const Value& v) { return rpc::encode_msgpack_message(v); }

Value client_handshake() {
  return map({{"compression", Value::nil()}, {"python", arr({num(3), num(11), num(2)})}, {"pickle-protocol", num(5)}});
}

/// Every reply the session has queued, decoded.
std::vector<Value> drain(ServerSession& s) {
  rpc::MessageReader r(Limits{});
  r.push(s.pending_output());
  s.wrote(s.pending_output().size());
  std::vector<Value> out;
  for (;;) {
    auto m = r.next();
    REQUIRE(m.ok());
    if (!*m) break;
    out.push_back(*msgpack::decode_all((**m)[0]));
  }
  return out;
}

Value request(const char* op, bool reply = true) {
  return map({{"op", str(op)}, {"reply", Value::boolean(reply)}});
}

}  // namespace

TEST_CASE("net_server: the handshake is written before the client says anything") {
  const auto all = endpoints();
  ServerSession s(all[0], Limits{});
  const auto out = drain(s);
  REQUIRE(out.size() == 1);
  CHECK(out[0].find("pickle-protocol")->as_int().u == 4);
  CHECK(out[0].find("python")->as_array()[1].as_int().u == 7);
}

TEST_CASE("net_server: a profile of distributed 2023.5+ sends None to a client on its own host") {
  auto all = endpoints();
  all[0].profile.none_to_same_host = true;
  server::prepare_replies(all, 1.5);
  ServerSession same(all[0], Limits{}, true);
  auto got = drain(same);
  REQUIRE(got.size() == 1);
  CHECK(got[0].find("compression")->is_nil());
  CHECK(got[0].find("pickle-protocol")->as_int().u == 4);
  ServerSession other(all[0], Limits{}, false);
  CHECK(drain(other)[0].find("compression")->as_str() == "lz4");
  // A profile of 2022.12 advertises its codec to everyone.
  ServerSession old(all[1], Limits{}, true);
  CHECK(drain(old)[0].find("compression")->as_str() == "lz4");
}

TEST_CASE("net_server: identity, versions, unknown ops, reply false, close") {
  const auto all = endpoints();
  ServerSession s(all[0], Limits{});
  drain(s);
  Buffer in = message(client_handshake());
  for (const Value& r : {request("identity"), request("versions"), request("no-such-op"),
                         request("identity", false), request("close")}) {
    const Buffer m = message(r);
    in.append(m);
  }
  // Byte by byte: the session must not care how the bytes arrive.
  for (std::uint8_t b : in) REQUIRE(s.received(ByteSpan(&b, 1)).ok());
  const auto out = drain(s);
  REQUIRE(out.size() == 4);  // identity, versions, nil, "OK"; nothing for reply=false
  CHECK(out[0].find("type")->as_str() == "Scheduler");
  CHECK(out[0].find("workers")->find("tcp://127.0.0.1:9000"));
  CHECK(out[1].find("packages")->find("python")->as_str() == "3.7.9.final.0");
  CHECK(out[2].is_nil());
  CHECK(out[3] == str("OK"));
  CHECK(s.closing());
  REQUIRE(s.client_handshake());
  CHECK(s.client_handshake()->python_version() == "3.11.2");
  CHECK(s.requests() == 5);
}

TEST_CASE("net_server: echo returns the data and the frames it points to") {
  const auto all = endpoints();
  ServerSession s(all[0], Limits{});
  drain(s);
  REQUIRE(s.received(message(client_handshake())).ok());
  const Value req = map({{"op", str("echo")}, {"reply", Value::boolean(true)},
                         {"data", placeholder("__Serialized__", 1)}});
  const Buffer f0 = msgpack::encode(req);
  const Buffer header = msgpack::encode(map({{"serializer", str("pickle")}}));
  const Buffer payload{1, 2, 3, 4};
  const std::array<ByteSpan, 3> frames{ByteSpan(f0), ByteSpan(header), ByteSpan(payload)};
  REQUIRE(s.received(encode_message(frames)).ok());
  rpc::MessageReader r(Limits{});
  r.push(s.pending_output());
  auto m = r.next();
  REQUIRE(m.ok());
  REQUIRE(m->has_value());
  const auto& got = **m;
  REQUIRE(got.size() == 3);
  CHECK(*msgpack::decode_all(got[0]) == placeholder("__Serialized__", 1));
  CHECK(got[2] == Bytes::copy_of(payload));
}

TEST_CASE("net_server: requests before a handshake, non-maps and garbage close the connection") {
  const auto all = endpoints();
  {
    ServerSession s(all[0], Limits{});
    auto st = s.received(message(request("identity")));
    REQUIRE(!st);
    CHECK(st.error().what == "the client's first message is not a handshake");
  }
  {
    ServerSession s(all[0], Limits{});
    REQUIRE(s.received(message(client_handshake())).ok());
    auto st = s.received(message(arr({num(1)})));
    REQUIRE(!st);
    CHECK(st.error().what == "a request that is not a map");
    ServerSession t(all[0], Limits{});
    REQUIRE(t.received(message(client_handshake())).ok());
    CHECK(!t.received(message(map({{"reply", Value::boolean(true)}}))));
  }
  {
    ServerSession s(all[0], Limits{});
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    auto st = s.received(as_bytes(junk));
    REQUIRE(!st);
    CHECK(st.error().code == Errc::protocol);
  }
  {
    ServerSession s(all[0], Limits{});
    auto st = s.received(message(map({{"compression", str("lz4")}})));
    REQUIRE(!st);
    CHECK(st.error().what == "the client's handshake lacks \"pickle-protocol\"");
  }
}

TEST_CASE("net_server: a message over the limit is refused from its prelude") {
  const auto all = endpoints();
  Limits small;
  small.max_message_bytes = 1024;
  ServerSession s(all[0], small);
  REQUIRE(s.received(message(client_handshake())).ok());
  Buffer big_prelude;
  ByteWriter w(big_prelude);
  w.u64_le(16 + 4096);
  w.u64_le(1);
  w.u64_le(4096);
  auto st = s.received(big_prelude);
  REQUIRE(!st);
  CHECK(st.error().code == Errc::protocol);
}

TEST_CASE("net_server: a worker names the scheduler listener in its identity") {
  const auto all = endpoints();
  const Value id = server::identity_of(1, all, 0.0);
  CHECK(id.find("type")->as_str() == "Worker");
  CHECK(id.find("scheduler")->as_str() == "tcp://127.0.0.1:8786");
  auto caps = capabilities_from_msgpack(*id.find("dask-caps")->find("capabilities"));
  REQUIRE(caps);
  CHECK(caps->max_pickle_protocol == 4);
}
