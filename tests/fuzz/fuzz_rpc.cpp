// fuzz_rpc: what dask-caps reads from a live peer (core/net/rpc.h): the sans-I/O
// ClientSession of `check` (the peer's handshake, then the identity and
// versions replies), handshake_from_msgpack and rpc::parse_reply on every
// decoded frame 0; and the other way round, the ServerSession of `serve`
// (core/net/net_server.h) fed the same bytes as what a client sends.
//
// Input: byte 0 seeds the chunk sizes (fuzz_common.h Chunker), byte 1:
// bit 0 skip the identity request, bit 1 skip versions, bit 2 end with a
// reset instead of a clean close; the rest is the byte stream the peer
// sends.
//
// Properties:
//  1. the client session never reads past a failure: once received() fails,
//     it is not fed again; when it reports done, the exchange holds what
//     was asked for;
//  2. everything the server session queues for its client is a sequence of
//     whole Dask messages whose frame 0 is msgpack.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "daskcaps/wire/handshake.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/net/net_server.h"
#include "daskcaps/net/rpc.h"
#include "fuzz_common.h"
#include "core/net/internal/rpc_session.h"
#include "core/net/internal/server_session.h"

using namespace daskcaps;
namespace mp = daskcaps::msgpack;

namespace {

mp::Value str(const char* s) { return mp::Value::str(s); }

Handshake our_handshake() {
  mp::Map m;
  m.emplace_back(str("compression"), str("lz4"));
  m.emplace_back(str("python"), mp::Value::array({mp::Value::integer(3), mp::Value::integer(11),
                                                  mp::Value::integer(2)}));
  m.emplace_back(str("pickle-protocol"), mp::Value::integer(5));
  return *handshake_from_msgpack(mp::Value::map(std::move(m)));
}

void client_side(ByteSpan stream, std::uint8_t seed, std::uint8_t flags, const Limits& limits) {
  rpc::SessionOptions options;
  options.ours = our_handshake();
  options.ask_identity = (flags & 1) == 0;
  options.ask_versions = (flags & 2) == 0;
  options.limits = limits;
  rpc::ClientSession session(options);
  FUZZ_CHECK(!session.pending_output().empty());
  session.wrote(session.pending_output().size());

  fuzzsupport::Chunker chunks(seed);
  std::size_t pos = 0;
  bool failed = false;
  while (pos < stream.size() && !failed) {
    const std::size_t n = std::min(chunks.next(), stream.size() - pos);
    auto st = session.received(stream.subspan(pos, n));
    pos += n;
    (void)session.waiting_for();
    if (!st) {
      (void)st.error().message();
      failed = true;
    }
  }
  if (!failed) {
    auto st = session.received_eof((flags & 4) != 0);
    if (!st) (void)st.error().message();
    if (session.done()) {
      FUZZ_CHECK(st.ok());
      const rpc::Exchange& ex = session.exchange();
      FUZZ_CHECK(ex.identity.has_value() == options.ask_identity);
      FUZZ_CHECK(ex.versions.has_value() == options.ask_versions);
      if (ex.identity) (void)ex.identity->describe("identity");
      if (ex.versions) (void)ex.versions->describe("versions");
      (void)ex.handshake.missing_keys();
      (void)ex.handshake.python_version();
    }
  }
  (void)rpc::timeout_error(session, "tcp://fuzz:1", "1 s");
}

/// Every message of the stream, through the parsers the session uses.
void parsers(ByteSpan stream, const Limits& limits) {
  rpc::MessageReader reader(limits);
  reader.push(stream);
  for (;;) {
    auto m = reader.next();
    if (!m || !*m) break;
    auto frame0 = mp::decode_all((**m)[0], limits);
    if (!frame0) continue;
    if (auto hs = handshake_from_msgpack(*frame0)) {
      (void)hs->missing_keys();
      (void)hs->python_version();
      const mp::Value back = hs->to_msgpack();
      FUZZ_CHECK(back.is_map());
    }
    const rpc::Reply reply = rpc::parse_reply(*frame0);
    (void)reply.describe("versions");
  }
}

std::vector<server::Endpoint> endpoints() {
  server::Endpoint e;
  e.address = *net::parse_address("tcp://127.0.0.1:8786");
  e.profile.type = "Scheduler";
  e.profile.handshake = our_handshake();
  e.profile.capabilities.codecs = {"lz4", "zlib"};
  mp::Map pk;
  pk.emplace_back(str("python"), str("3.11.2.final.0"));
  mp::Map v;
  v.emplace_back(str("packages"), mp::Value::map(std::move(pk)));
  e.profile.versions = mp::Value::map(std::move(v));
  server::Endpoint w = e;
  w.address = *net::parse_address("tcp://127.0.0.1:9000");
  w.profile.type = "Worker";
  std::vector<server::Endpoint> all{e, w};
  server::prepare_replies(all, 1.5);
  return all;
}

void server_side(ByteSpan stream, std::uint8_t seed, const Limits& limits) {
  static const std::vector<server::Endpoint> all = endpoints();
  server::ServerSession session(all[0], limits);
  rpc::MessageReader replies(Limits{});
  auto drain_output = [&] {
    const ByteSpan out = session.pending_output();
    replies.push(out);
    session.wrote(out.size());
    for (;;) {
      auto m = replies.next();
      FUZZ_CHECK(m.ok());  // 2. whole messages
      if (!*m) break;
      FUZZ_CHECK(mp::decode_all((**m)[0]).ok());
    }
  };
  fuzzsupport::Chunker chunks(seed);
  std::size_t pos = 0;
  while (pos < stream.size()) {
    const std::size_t n = std::min(chunks.next(), stream.size() - pos);
    auto st = session.received(stream.subspan(pos, n));
    pos += n;
    drain_output();
    if (!st || session.closing()) break;
  }
  FUZZ_CHECK(replies.buffered() == 0);
  (void)session.requests();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzzsupport::Control ctl(data, size, 2);
  const ByteSpan stream = ctl.rest();
  Limits limits = fuzzsupport::fuzz_limits();
  client_side(stream, ctl.byte(0), ctl.byte(1), limits);
  parsers(stream, limits);
  server_side(stream, static_cast<std::uint8_t>(ctl.byte(0) ^ 0x33), limits);
  return 0;
}
