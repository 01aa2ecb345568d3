#include "daskcaps/net/rpc.h"

#include <doctest/doctest.h>

#include "daskcaps/wire/frames.h"
#include "core/base/internal/byte_writer.h"
#include "support/dask_builder.h"
#include "support/prefixes.h"
#include "support/scripted_transport.h"
#include "core/net/internal/rpc_session.h"

using namespace daskcaps;
using namespace testsupport;
using rpc::ClientSession;

namespace {

Handshake handshake_of(Value v) { return *handshake_from_msgpack(v); }

Value dask_handshake(const char* compression = "lz4", std::int64_t pickle = 5) {
  return map({{"compression", compression ? str(compression) : Value::nil()},
              {"python", arr({num(3), num(11), num(2)})},
              {"pickle-protocol", num(pickle)}});
}

Buffer message(const Value& v) { return rpc::encode_msgpack_message(v); }

Buffer concat(std::initializer_list<Buffer> parts) {
  Buffer out;
  for (const auto& p : parts) out.append(p);
  return out;
}

Value identity_reply() {
  return map({{"type", str("Scheduler")},
              {"id", str("Scheduler-1")},
              {"address", str("tcp://127.0.0.1:8786")},
              {"workers", map({{"tcp://127.0.0.1:40001", map({{"type", str("Worker")}})}})}});
}

Value versions_reply() {
  return map({{"host", map({{"python", str("3.11.2.final.0")}})},
              {"packages", map({{"python", str("3.11.2.final.0")},
                                {"distributed", str("2022.12.1+ds.1")},
                                {"lz4", str("4.0.2+dfsg")},
                                {"zstandard", Value::nil()}})}});
}

/// A whole 2022.12 scheduler side of the conversation.
Buffer peer_bytes() {
  return concat({message(dask_handshake()), message(identity_reply()), message(versions_reply())});
}

rpc::SessionOptions options() {
  rpc::SessionOptions o;
  o.ours = handshake_of(dask_handshake(nullptr));
  return o;
}

const auto kFar = net::Clock::now() + std::chrono::hours(1);

Status run(ScriptedTransport& t, ClientSession& s) { return rpc::run_session(t, s, kFar, "2 s"); }

}  // namespace

TEST_CASE("rpc: our handshake is the 66 bytes a real scheduler accepted (spec 2.8)") {
  rpc::SessionOptions o = options();
  o.ask_identity = false;
  o.ask_versions = false;
  o.polite_close = false;
  ClientSession s(o);
  const Buffer expected{0x3a, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x2a, 0, 0, 0, 0, 0, 0, 0,
                        0x83, 0xab, 'c', 'o', 'm', 'p', 'r', 'e', 's', 's', 'i', 'o', 'n', 0xc0, 0xa6,
                        'p', 'y', 't', 'h', 'o', 'n', 0x93, 0x03, 0x0b, 0x02, 0xaf, 'p', 'i', 'c', 'k',
                        'l', 'e', '-', 'p', 'r', 'o', 't', 'o', 'c', 'o', 'l', 0x05};
  CHECK(Buffer(s.pending_output().begin(), s.pending_output().end()) == expected);
}

TEST_CASE("rpc: requests are the bytes of spec 7.2") {
  const Buffer identity = rpc::encode_request("identity", true);
  const Buffer expected{0x24, 0, 0, 0, 0, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x14, 0, 0, 0, 0, 0, 0, 0,
                        0x82, 0xa2, 'o', 'p', 0xa8, 'i', 'd', 'e', 'n', 't', 'i', 't', 'y',
                        0xa5, 'r', 'e', 'p', 'l', 'y', 0xc3};
  CHECK(identity == expected);
  const Buffer close = rpc::encode_request("close", false);
  CHECK(close.size() == 0x21 + 8);
  CHECK(close.back() == 0xc2);
}

TEST_CASE("rpc: the conversation completes when the peer answers one byte at a time") {
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{4096}}) {
    CAPTURE(chunk);
    ScriptedTransport t;
    t.add_split(peer_bytes(), chunk);
    ClientSession s(options());
    REQUIRE(run(t, s).ok());
    const auto& x = s.exchange();
    CHECK(x.handshake.compression == CompressionValue::named("lz4"));
    CHECK(x.handshake.python_version() == "3.11.2");
    CHECK(*x.handshake.pickle_protocol == 5);
    REQUIRE(x.identity);
    CHECK(x.identity->ok());
    CHECK(x.identity->value.find("type")->as_str() == "Scheduler");
    REQUIRE(x.versions);
    CHECK(x.versions->value.find("packages")->find("lz4")->as_str() == "4.0.2+dfsg");
  }
}

TEST_CASE("rpc: we send handshake, identity, versions with packages, then close, all at once") {
  ScriptedTransport t;
  t.add_chunk(peer_bytes());
  ClientSession s(options());
  REQUIRE(run(t, s).ok());
  // Read back what we wrote: four messages.
  rpc::MessageReader r(Limits{});
  r.push(t.written());
  std::vector<Value> sent;
  for (;;) {
    auto m = r.next();
    REQUIRE(m.ok());
    if (!*m) break;
    sent.push_back(*msgpack::decode_all((**m)[0]));
  }
  REQUIRE(sent.size() == 4);
  CHECK(sent[0].find("pickle-protocol"));
  CHECK(sent[1] == map({{"op", str("identity")}, {"reply", Value::boolean(true)}}));
  CHECK(sent[2].find("op")->as_str() == "versions");
  CHECK(sent[2].find("packages")->as_array().front().as_str() == "zstandard");
  CHECK(sent[3] == map({{"op", str("close")}, {"reply", Value::boolean(false)}}));
  CHECK(r.buffered() == 0);
}

TEST_CASE("rpc: nil and uncaught-error replies are told apart (spec 7.2, 7.5)") {
  ScriptedTransport t;
  const Value error = map({{"status", str("uncaught-error")},
                           {"exception", placeholder("__Serialized__", 1)},
                           {"exception_text", str("TypeError(\"unexpected keyword argument 'packages'\")")},
                           {"traceback_text", str("  File ...")}});
  t.add_chunk(concat({message(dask_handshake()), message(Value::nil()), message(error)}));
  ClientSession s(options());
  REQUIRE(run(t, s).ok());
  CHECK(s.exchange().identity->kind == rpc::Reply::Kind::no_handler);
  CHECK(s.exchange().identity->describe("identity") == "the peer has no handler for op \"identity\"");
  CHECK(s.exchange().versions->kind == rpc::Reply::Kind::error);
  CHECK(s.exchange().versions->error == "TypeError(\"unexpected keyword argument 'packages'\")");
}

TEST_CASE("rpc: garbage is a protocol error, not a hang") {
  ScriptedTransport t;
  const std::string http = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
  t.add_chunk(as_bytes(http));
  t.stall_at_end();
  ClientSession s(options());
  auto st = run(t, s);
  REQUIRE(!st);
  CHECK(st.error().code == Errc::protocol);
  CHECK(st.error().what.starts_with("not a Dask message: "));
}

TEST_CASE("rpc: a length of 2^60 is refused from the prelude, before any allocation") {
  Buffer prelude;
  ByteWriter w(prelude);
  w.u64_le(8 + 8 + (std::uint64_t{1} << 60));
  w.u64_le(1);
  w.u64_le(std::uint64_t{1} << 60);
  ScriptedTransport t;
  t.add_split(prelude, 1);
  t.stall_at_end();
  ClientSession s(options());
  auto st = run(t, s);
  REQUIRE(!st);
  CHECK(st.error().code == Errc::protocol);
  CHECK(st.error().what.find("limit max_message_bytes") != std::string::npos);
  CHECK(st.error().offset == 16);
}

TEST_CASE("rpc: the peer closing gives a distinct error at each stage") {
  const Buffer hs = message(dask_handshake());
  SUBCASE("before any byte") {
    ScriptedTransport t;
    ClientSession s(options());
    auto st = run(t, s);
    REQUIRE(!st);
    CHECK(st.error().code == Errc::protocol);
    CHECK(st.error().what.starts_with("the peer closed the connection without sending a handshake"));
  }
  SUBCASE("in the middle of the handshake") {
    ScriptedTransport t;
    t.add_chunk(ByteSpan(hs).first(30));
    ClientSession s(options());
    auto st = run(t, s);
    REQUIRE(!st);
    CHECK(st.error().what == "the peer closed the connection in the middle of a message (got 30 bytes of " +
                                 std::to_string(hs.size()) + ", while waiting for the peer's handshake)");
    // Inside the prelude the total is not known yet, and not claimed.
    ScriptedTransport t2;
    t2.add_chunk(ByteSpan(hs).first(20));
    ClientSession s2(options());
    auto st2 = run(t2, s2);
    REQUIRE(!st2);
    CHECK(st2.error().what == "the peer closed the connection in the middle of a message (got 20 bytes, "
                              "while waiting for the peer's handshake)");
  }
  SUBCASE("after the handshake") {
    ScriptedTransport t;
    t.add_chunk(hs);
    ClientSession s(options());
    auto st = run(t, s);
    REQUIRE(!st);
    CHECK(st.error().what ==
          "the peer closed the connection after its handshake, before the reply to identity");
  }
}

TEST_CASE("rpc: every strict prefix of a good conversation fails cleanly") {
  const Buffer good = peer_bytes();
  for_each_strict_prefix(good, [](ByteSpan prefix) {
    ScriptedTransport t;
    t.add_split(prefix, 5);
    ClientSession s(options());
    auto st = run(t, s);
    REQUIRE(!st);
    CHECK(st.error().code == Errc::protocol);
  });
}

TEST_CASE("rpc: a silent peer times out with a message saying it sent nothing") {
  ScriptedTransport t;
  t.stall_at_end();
  ClientSession s(options());
  auto st = run(t, s);
  REQUIRE(!st);
  CHECK(st.error().code == Errc::timeout);
  CHECK(st.error().what ==
        "no handshake from 127.0.0.1:8786 within 2 s: it accepted the connection and sent nothing");

  ScriptedTransport t2;
  t2.add_chunk(message(dask_handshake()));
  t2.stall_at_end();
  ClientSession s2(options());
  auto st2 = run(t2, s2);
  REQUIRE(!st2);
  CHECK(st2.error().what == "timed out after 2 s waiting for the reply to identity from 127.0.0.1:8786");
}

TEST_CASE("rpc: a handshake without keys is recorded, not refused, by the session") {
  ScriptedTransport t;
  t.add_chunk(concat({message(map({{"compression", str("lz4")}})), message(identity_reply()),
                      message(versions_reply())}));
  ClientSession s(options());
  REQUIRE(run(t, s).ok());
  CHECK(s.exchange().handshake.missing_keys() == std::vector<std::string>{"pickle-protocol"});
}

TEST_CASE("rpc: a first message that is a request or not a map is a protocol error") {
  for (const Value& first : {map({{"op", str("identity")}, {"reply", Value::boolean(true)}}),
                             arr({num(1)}), str("hello")}) {
    ScriptedTransport t;
    t.add_chunk(message(first));
    ClientSession s(options());
    auto st = run(t, s);
    REQUIRE(!st);
    CHECK(st.error().code == Errc::protocol);
    CHECK(st.error().what.starts_with("expected the peer's handshake"));
  }
}

TEST_CASE("rpc: frame 0 that is not msgpack is named") {
  const Buffer junk{0xc1, 0xc1};
  const std::array<ByteSpan, 1> frames{ByteSpan(junk)};
  ScriptedTransport t;
  t.add_chunk(encode_message(frames));
  ClientSession s(options());
  auto st = run(t, s);
  REQUIRE(!st);
  CHECK(st.error().code == Errc::protocol);
  CHECK(st.error().what.starts_with("frame 0 of the handshake is not msgpack"));
}

TEST_CASE("rpc: message reader cuts several messages out of one chunk and keeps the tail") {
  rpc::MessageReader r(Limits{});
  const Buffer two = concat({message(num(1)), message(num(2))});
  Buffer with_tail = two;
  with_tail.append(Buffer{0x11, 0x00});
  r.push(with_tail);
  auto a = r.next();
  REQUIRE(a.ok());
  REQUIRE(a->has_value());
  CHECK((**a)[0].span()[0] == 0x01);
  auto b = r.next();
  REQUIRE(b->has_value());
  CHECK((**b)[0].span()[0] == 0x02);
  auto c = r.next();
  REQUIRE(c.ok());
  CHECK(!c->has_value());
  CHECK(r.buffered() == 2);
  CHECK(r.offset() == two.size());
}

TEST_CASE("rpc: duration text") {
  CHECK(rpc::duration_text(std::chrono::milliseconds(2000)) == "2 s");
  CHECK(rpc::duration_text(std::chrono::milliseconds(150)) == "150 ms");
  CHECK(rpc::duration_text(std::chrono::milliseconds(1500)) == "1.5 s");
}
