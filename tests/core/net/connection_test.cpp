#include "core/net/internal/resolve.h"
#include "core/net/internal/connection.h"

#include <doctest/doctest.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "daskcaps/net/loop.h"
#include "daskcaps/net/rpc.h"
#include "daskcaps/net/tls.h"
#include "support/dask_builder.h"
#include "support/net_support.h"
#include "support/tls_files.h"
#include "core/net/internal/rpc_session.h"

using namespace daskcaps;
using namespace testsupport;
using net::Connection;
using net::Loop;

namespace {

template <typename Pred>
void run_until(Loop& loop, Pred done, int rounds = 20000) {
  testsupport::run_until(loop, done, rounds, std::chrono::milliseconds(200));
}

/// A handler that records everything; hooks change what it does.
struct Recorder : Connection::Handler {
  Buffer got;
  bool opened = false;
  bool eof = false;
  std::optional<Status> closed;
  int drained = 0;
  std::size_t chunk = 64 * 1024;        // read_buffer size
  std::function<std::size_t()> next_chunk;  // overrides chunk when set
  bool hold = false;                    // read_buffer empty: pause
  bool echo = false;                    // send back what arrives
  bool finish_on_eof = true;
  std::function<void(Connection&, ByteSpan)> on_data;
  Buffer buf;

  void on_open(Connection&) override { opened = true; }
  std::span<std::uint8_t> read_buffer(Connection&) override {
    if (hold) return {};
    const std::size_t n = next_chunk ? next_chunk() : chunk;
    buf.resize_uninitialised(n);
    return {buf.data(), n};
  }
  void on_read(Connection& c, ByteSpan data) override {
    got.append(data);
    if (echo) c.send_copy(data);
    if (on_data) on_data(c, data);
  }
  void on_read_eof(Connection& c) override {
    eof = true;
    if (finish_on_eof) c.finish();
  }
  void on_drained(Connection&) override { ++drained; }
  void on_closed(Connection&, const Status& why) override { closed = why; }
};

/// A listener whose accepted connections get their own Recorder.
struct Server {
  Loop& loop;
  std::unique_ptr<net::Listener> listener;
  std::vector<std::unique_ptr<Recorder>> handlers;
  std::vector<std::unique_ptr<Connection>> conns;
  net::ConnectionOptions options;
  const net::TlsServerContext* tls = nullptr;
  std::function<void(Recorder&)> setup;

  explicit Server(Loop& l, const char* address = "tcp://127.0.0.1:0") : loop(l) {
    auto s = net::Listener::start(loop, *net::parse_address(address), [this](net::Socket sock) {
      handlers.push_back(std::make_unique<Recorder>());
      if (setup) setup(*handlers.back());
      conns.push_back(Connection::accepted(loop, std::move(sock), *handlers.back(), options, tls));
    });
    REQUIRE(s.ok());
    listener = std::move(*s);
  }
  net::Address address() const { return listener->address(); }
};

/// A port nothing listens on: bound, then closed.
std::uint16_t closed_port() {
  net::Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s.fd(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s.fd(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

Buffer pattern(std::size_t n, std::uint32_t seed = 7) {
  std::mt19937 rng(seed);
  Buffer b = daskcaps::Buffer::uninitialised(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rng());
  return b;
}

struct Pki {
  TlsFiles files;
  std::shared_ptr<net::TlsServerContext> server;
  std::shared_ptr<net::TlsClientContext> client;
  Pki(bool verify_clients = true) {
    net::TlsServerOptions so;
    so.cert_file = files.path("server.pem");
    so.key_file = files.path("server.key");
    if (verify_clients) so.ca_file = files.path("ca.pem");
    auto s = net::TlsServerContext::create(so);
    REQUIRE(s.ok());
    server = *s;
    client = make_client("ca.pem", "client");
  }
  std::shared_ptr<net::TlsClientContext> make_client(const char* ca, const char* cert) {
    net::TlsOptions co;
    co.ca_file = files.path(ca);
    if (cert) {
      co.cert_file = files.path(std::string(cert) + ".pem");
      co.key_file = files.path(std::string(cert) + ".key");
    }
    auto c = net::TlsClientContext::create(co);
    REQUIRE(c.ok());
    return *c;
  }
};

}  // namespace

TEST_CASE("connection: a connect to a closed port is refused, as a value, later") {
  auto loop = make_loop();
  Recorder r;
  net::Address a = *net::parse_address("tcp://127.0.0.1:" + std::to_string(closed_port()));
  auto c = Connection::connect(*loop, a, r);
  CHECK(!r.closed);  // never from inside the factory
  CHECK(c->stage() == Connection::Stage::resolving);
  run_until(*loop, [&] { return r.closed.has_value(); });
  REQUIRE(r.closed);
  REQUIRE(!*r.closed);
  CHECK(r.closed->error().code == Errc::refused);
  CHECK(r.closed->error().what.starts_with("connection refused by 127.0.0.1:"));
  CHECK(!r.opened);
  CHECK(c->stage() == Connection::Stage::closed);
  CHECK(!c->send(Buffer{1, 2, 3}));
}

TEST_CASE("connection: a tls:// address without TLS settings is a usage error through on_closed") {
  auto loop = make_loop();
  Recorder r;
  auto c = Connection::connect(*loop, *net::parse_address("tls://127.0.0.1:1"), r);
  run_until(*loop, [&] { return r.closed.has_value(); });
  REQUIRE(r.closed);
  CHECK(r.closed->error().code == Errc::usage);
}

TEST_CASE("connection: bytes both ways, then each side half-closes and both close cleanly") {
  auto loop = make_loop();
  Server srv(*loop);
  srv.setup = [](Recorder& h) { h.echo = true; };
  Recorder client;
  auto c = Connection::connect(*loop, srv.address(), client);
  const Buffer payload = pattern(300 * 1024);
  // Queued before open: it waits for the connection.
  CHECK(c->send(Bytes::copy_of(ByteSpan(payload).first(1000))));
  CHECK(c->send(Bytes::copy_of(ByteSpan(payload).subspan(1000))));
  c->finish();
  CHECK(!c->send(Buffer{1}));  // finishing: nothing more is taken
  run_until(*loop, [&] { return client.closed && !srv.handlers.empty() && srv.handlers[0]->closed; });
  REQUIRE(client.closed);
  CHECK(client.closed->ok());
  CHECK(client.opened);
  CHECK(client.eof);
  CHECK(client.got == payload);
  REQUIRE(srv.handlers.size() == 1);
  CHECK(srv.handlers[0]->got == payload);
  REQUIRE(srv.handlers[0]->closed);
  CHECK(srv.handlers[0]->closed->ok());
  CHECK(c->bytes_written() == payload.size());
  CHECK(c->bytes_read() == payload.size());
}

TEST_CASE("connection: a full output queue is back-pressure; on_drained says when it has eased") {
  auto loop = make_loop();
  Server srv(*loop);
  srv.setup = [](Recorder& h) { h.hold = true; };  // the receiver reads nothing for now
  Recorder client;
  net::ConnectionOptions o;
  o.max_output_bytes = 256 * 1024;
  auto c = Connection::connect(*loop, srv.address(), client, o);
  run_until(*loop, [&] { return client.opened && !srv.handlers.empty(); });
  REQUIRE(client.opened);

  // A producer that respects output_full(): the kernel's buffers fill first,
  // then the queue reaches its bound, and the producer stops.
  constexpr std::size_t kChunk = 16 * 1024;
  std::uint32_t seed = 0;
  std::size_t sent = 0;
  std::size_t peak = 0;
  for (int i = 0; i < 100000 && !c->output_full(); ++i) {
    REQUIRE(c->send(pattern(kChunk, seed++)));
    sent += kChunk;
    peak = std::max(peak, c->queued_bytes());
    REQUIRE(loop->run_once(std::chrono::milliseconds(0)).ok());
  }
  REQUIRE(c->output_full());
  CHECK(peak < o.max_output_bytes + kChunk);  // never more than one send beyond the bound
  CHECK(client.drained == 0);
  // Nothing moves while the receiver holds: the queue stays full.
  for (int i = 0; i < 5; ++i) REQUIRE(loop->run_once(std::chrono::milliseconds(10)).ok());
  CHECK(c->output_full());

  Recorder& server = *srv.handlers[0];
  server.hold = false;
  srv.conns[0]->resume_reading();
  run_until(*loop, [&] { return client.drained > 0; });
  CHECK(client.drained == 1);
  CHECK(c->queued_bytes() <= o.max_output_bytes / 2);
  c->finish();
  run_until(*loop, [&] { return server.closed.has_value(); });
  REQUIRE(server.got.size() == sent);
  Buffer expected;
  for (std::uint32_t s = 0; s < seed; ++s) {
    const Buffer p = pattern(kChunk, s);
    expected.append(p);
  }
  CHECK(server.got == expected);  // nothing lost, duplicated or reordered
}

namespace {

/// Assembles Dask messages with rpc::MessageReader (what serve and the
/// survey do), recording each message's frame 0 and the first error.
struct Assembler : Recorder {
  rpc::MessageReader reader{Limits{}};
  std::vector<Buffer> frames0;
  std::vector<std::size_t> frame_counts;
  std::optional<Error> error;
  std::size_t partial_at_eof = 0;

  void on_read(Connection& c, ByteSpan data) override {
    reader.push(data);
    for (;;) {
      auto m = reader.next();
      if (!m) {
        error = m.error();
        c.close_when_flushed();
        return;
      }
      if (!*m) return;
      frames0.emplace_back((**m)[0].span().begin(), (**m)[0].span().end());
      frame_counts.push_back((*m)->size());
    }
  }
  void on_read_eof(Connection& c) override {
    eof = true;
    partial_at_eof = reader.buffered();
    c.finish();
  }
};

}  // namespace

TEST_CASE("connection: a peer that sends garbage is closed by the assembler; one that stops mid-message is seen") {
  auto loop = make_loop();
  std::vector<std::unique_ptr<Assembler>> handlers;
  std::vector<std::unique_ptr<Connection>> conns;
  auto l = net::Listener::start(*loop, *net::parse_address("tcp://127.0.0.1:0"), [&](net::Socket s) {
    handlers.push_back(std::make_unique<Assembler>());
    conns.push_back(Connection::accepted(*loop, std::move(s), *handlers.back()));
  });
  REQUIRE(l.ok());

  SUBCASE("garbage") {
    Recorder client;
    auto c = Connection::connect(*loop, (*l)->address(), client);
    c->send(Buffer(100, 0xff));
    run_until(*loop, [&] { return client.closed.has_value(); });
    REQUIRE(handlers.size() == 1);
    REQUIRE(handlers[0]->error);
    CHECK(handlers[0]->error->code == Errc::protocol);
    CHECK(handlers[0]->frames0.empty());
    // The client sees a clean end of the stream from the server.
    CHECK(client.eof);
    REQUIRE(client.closed);
    CHECK(client.closed->ok());
  }
  SUBCASE("mid-message") {
    const Buffer whole = rpc::encode_msgpack_message(map({{"op", str("identity")}, {"reply", Value::boolean(true)}}));
    Recorder client;
    auto c = Connection::connect(*loop, (*l)->address(), client);
    c->send(Bytes::copy_of(whole));  // one whole message
    c->send(Bytes::copy_of(ByteSpan(whole).first(whole.size() - 3)));
    c->finish();
    run_until(*loop, [&] { return client.closed.has_value() && !handlers.empty() && handlers[0]->closed; });
    REQUIRE(handlers.size() == 1);
    CHECK(handlers[0]->frames0.size() == 1);
    CHECK(!handlers[0]->error);
    CHECK(handlers[0]->eof);
    CHECK(handlers[0]->partial_at_eof == whole.size() - 3);
  }
}

TEST_CASE("connection: a byte stream in random small pieces, read in random small buffers, changes nothing") {
  // The messages: small ones, one with several frames, one large.
  std::vector<Buffer> messages;
  for (int i = 0; i < 40; ++i)
    messages.push_back(rpc::encode_msgpack_message(map({{"op", str("echo")}, {"i", num(i)}})));
  const Buffer big = pattern(200 * 1024, 3);
  const Buffer head = msgpack::encode(map({{"op", str("put")}}));
  const std::array<ByteSpan, 3> frames{ByteSpan(head), ByteSpan(big).first(5), ByteSpan(big)};
  messages.push_back(encode_message(frames));
  Buffer stream;
  for (const auto& m : messages) stream.append(m);

  for (const bool tls : {false, true}) {
    CAPTURE(tls);
    std::optional<Pki> pki;
    if (tls) pki.emplace();
    auto loop = make_loop();
    std::mt19937 rng(tls ? 11 : 5);
    std::vector<std::unique_ptr<Assembler>> handlers;
    std::vector<std::unique_ptr<Connection>> conns;
    auto l = net::Listener::start(*loop, *net::parse_address(tls ? "tls://127.0.0.1:0" : "tcp://127.0.0.1:0"),
                                  [&](net::Socket s) {
                                    handlers.push_back(std::make_unique<Assembler>());
                                    handlers.back()->next_chunk = [&rng] { return 1 + rng() % 17; };
                                    conns.push_back(Connection::accepted(*loop, std::move(s), *handlers.back(), {},
                                                                         tls ? pki->server.get() : nullptr));
                                  });
    REQUIRE(l.ok());
    Recorder client;
    auto c = Connection::connect(*loop, (*l)->address(), client, {}, tls ? pki->client.get() : nullptr);
    run_until(*loop, [&] { return client.opened; });
    REQUIRE(client.opened);
    // Each piece goes out on its own (a separate segment, or TLS record):
    // tiny pieces over the small messages, pieces of up to 4 KiB over the
    // large one, with the loop run at random points in between.
    std::size_t at = 0;
    while (at < stream.size()) {
      const std::size_t most = at < 20000 ? 9 : 4096;
      const std::size_t n = std::min<std::size_t>(stream.size() - at, 1 + rng() % most);
      c->send(Bytes::copy_of(ByteSpan(stream).subspan(at, n)));
      at += n;
      if (rng() % 4 == 0) REQUIRE(loop->run_once(std::chrono::milliseconds(0)).ok());
    }
    c->finish();
    run_until(*loop, [&] { return !handlers.empty() && handlers[0]->closed.has_value(); }, 200000);
    REQUIRE(handlers.size() == 1);
    const Assembler& h = *handlers[0];
    CHECK(!h.error);
    REQUIRE(h.frames0.size() == messages.size());
    for (int i = 0; i < 40; ++i) {
      auto v = msgpack::decode_all(h.frames0[static_cast<std::size_t>(i)]);
      REQUIRE(v.ok());
      CHECK(v->find("i")->as_int().u == static_cast<std::uint64_t>(i));
    }
    CHECK(h.frame_counts.back() == 3);
    CHECK(h.partial_at_eof == 0);
  }
}

TEST_CASE("connection: TLS with client certificates, both ways") {
  Pki pki;
  auto loop = make_loop();
  Server srv(*loop, "tls://127.0.0.1:0");
  srv.tls = pki.server.get();
  srv.setup = [](Recorder& h) { h.echo = true; };
  CHECK(srv.address().to_string().starts_with("tls://127.0.0.1:"));
  Recorder client;
  auto c = Connection::connect(*loop, srv.address(), client, {}, pki.client.get());
  const Buffer payload = pattern(100 * 1024);
  c->send(Bytes::copy_of(payload));
  c->finish();
  run_until(*loop, [&] { return client.closed.has_value(); });
  REQUIRE(client.closed);
  CHECK(client.closed->ok());
  CHECK(client.got == payload);
  CHECK(c->peer_ip().empty());  // closed: the stream is gone
  REQUIRE(srv.handlers.size() == 1);
  CHECK(srv.handlers[0]->got == payload);
}

TEST_CASE("connection: TLS handshake failures are errors on both sides, with the flag to check") {
  Pki pki;
  auto loop = make_loop();
  Server srv(*loop, "tls://127.0.0.1:0");
  srv.tls = pki.server.get();

  auto attempt = [&](std::shared_ptr<net::TlsClientContext> ctx) {
    Recorder client;
    auto c = Connection::connect(*loop, srv.address(), client, {}, ctx.get());
    c->send(Buffer{1, 2, 3});
    const std::size_t before = srv.handlers.size();
    run_until(*loop, [&] {
      return client.closed.has_value() && srv.handlers.size() > before && srv.handlers.back()->closed.has_value();
    });
    REQUIRE(client.closed);
    REQUIRE(srv.handlers.size() == before + 1);
    return std::make_pair(*client.closed, *srv.handlers.back()->closed);
  };

  SUBCASE("the client trusts another CA") {
    auto [cl, sv] = attempt(pki.make_client("other-ca.pem", "client"));
    REQUIRE(!cl);
    CHECK(cl.error().code == Errc::tls);
    CHECK(cl.error().what.find("certificate verification failed") != std::string::npos);
    CHECK(cl.error().what.find("--tls-ca-file") != std::string::npos);
    CHECK(!sv);
  }
  SUBCASE("the client has no certificate") {
    auto [cl, sv] = attempt(pki.make_client("ca.pem", nullptr));
    REQUIRE(!sv);
    CHECK(sv.error().code == Errc::tls);
    CHECK(sv.error().what.find("--listen-ca-file") != std::string::npos);
    REQUIRE(!cl);
    CHECK((cl.error().code == Errc::tls || cl.error().code == Errc::network));
  }
  SUBCASE("the client's certificate is signed by another CA") {
    auto [cl, sv] = attempt(pki.make_client("ca.pem", "rogue"));
    REQUIRE(!sv);
    CHECK(sv.error().code == Errc::tls);
    CHECK(sv.error().what.find("client certificate verification failed") != std::string::npos);
    CHECK(!cl);
  }
  SUBCASE("a plain client at a TLS listener") {
    Recorder client;
    auto c = Connection::connect(*loop, *net::parse_address("tcp://" + srv.address().host_port()), client);
    c->send(rpc::encode_msgpack_message(map({{"op", str("identity")}})));
    const std::size_t before = srv.handlers.size();
    run_until(*loop, [&] { return srv.handlers.size() > before && srv.handlers.back()->closed.has_value(); });
    REQUIRE(srv.handlers.size() == before + 1);
    const Status sv = *srv.handlers.back()->closed;
    REQUIRE(!sv);
    CHECK(sv.error().code == Errc::tls);
  }
}

TEST_CASE("connection: a TLS handshake that never comes times out; so does an idle connection") {
  Pki pki;
  auto loop = make_loop();
  Server srv(*loop, "tls://127.0.0.1:0");
  srv.tls = pki.server.get();
  srv.options.handshake_timeout = std::chrono::milliseconds(100);
  srv.options.idle_timeout = std::chrono::milliseconds(150);

  // A TCP connection that says nothing.
  Recorder silent;
  auto s = Connection::connect(*loop, *net::parse_address("tcp://" + srv.address().host_port()), silent);
  run_until(*loop, [&] { return !srv.handlers.empty() && srv.handlers[0]->closed.has_value(); });
  REQUIRE(!srv.handlers.empty());
  REQUIRE(srv.handlers[0]->closed);
  REQUIRE(!*srv.handlers[0]->closed);
  CHECK(srv.handlers[0]->closed->error().code == Errc::timeout);
  CHECK(srv.handlers[0]->closed->error().what.find("TLS handshake") != std::string::npos);

  // A TLS client that completes the handshake, then goes quiet.
  Recorder idle;
  auto i = Connection::connect(*loop, srv.address(), idle, {}, pki.client.get());
  run_until(*loop, [&] { return srv.handlers.size() == 2 && srv.handlers[1]->closed.has_value(); });
  REQUIRE(srv.handlers.size() == 2);
  CHECK(srv.handlers[1]->opened);
  REQUIRE(srv.handlers[1]->closed);
  CHECK(srv.handlers[1]->closed->error().code == Errc::timeout);
  CHECK(srv.handlers[1]->closed->error().what.starts_with("no bytes from or to "));
  run_until(*loop, [&] { return idle.closed.has_value(); });
  CHECK(idle.eof);  // the client sees the server's side end
}

TEST_CASE("connection: a handler may destroy its connection from inside a callback") {
  auto loop = make_loop();
  Server srv(*loop);
  srv.setup = [](Recorder& h) { h.echo = true; };
  Recorder client;
  std::unique_ptr<Connection> c;
  client.on_data = [&](Connection&, ByteSpan) { c.reset(); };
  c = Connection::connect(*loop, srv.address(), client);
  c->send(Buffer(10000, 7));
  run_until(*loop, [&] { return !c; });
  CHECK(!c);
  CHECK(!client.closed);  // destroyed by its owner: no callback
  run_until(*loop, [&] { return !srv.handlers.empty() && srv.handlers[0]->closed.has_value(); });
  REQUIRE(!srv.handlers.empty());
  REQUIRE(srv.handlers[0]->closed);
}


TEST_CASE("connection: memory per idle connection, with 1,000 of them") {
#if DASKCAPS_TEST_ASAN
  MESSAGE("not measured under AddressSanitizer (its allocator is not malloc's)");
  return;
#endif
  const std::size_t count = pairs_the_fd_limit_allows(1000);
  for (const bool tls : {false, true}) {
    CAPTURE(tls);
    std::optional<Pki> pki;
    if (tls) pki.emplace();
    auto loop = make_loop();
    Server srv(*loop, tls ? "tls://127.0.0.1:0" : "tcp://127.0.0.1:0");
    if (tls) srv.tls = pki->server.get();
    srv.setup = [](Recorder& h) { h.chunk = 128; };
    srv.handlers.reserve(count);
    srv.conns.reserve(count);
    std::vector<std::unique_ptr<Recorder>> handlers;
    std::vector<std::unique_ptr<Connection>> clients;
    handlers.reserve(count);
    clients.reserve(count);
    // Warm up the allocator and OpenSSL's one-time state with one pair.
    {
      Recorder r;
      auto c = Connection::connect(*loop, srv.address(), r, {}, tls ? pki->client.get() : nullptr);
      c->send(Buffer(100, 1));
      run_until(*loop, [&] { return !srv.handlers.empty() && srv.handlers[0]->got.size() == 100; });
    }
    malloc_trim(0);
    const std::size_t before = heap_in_use();
    for (std::size_t i = 0; i < count; ++i) {
      handlers.push_back(std::make_unique<Recorder>());
      handlers.back()->chunk = 128;
      clients.push_back(Connection::connect(*loop, srv.address(), *handlers.back(), {},
                                            tls ? pki->client.get() : nullptr));
      // Each says one small thing, so both ends are past the handshake.
      clients.back()->send(Buffer(100, 2));
      if (i % 50 == 49) REQUIRE(loop->run_once(std::chrono::milliseconds(0)).ok());
    }
    auto all_idle = [&] {
      if (srv.handlers.size() < count + 1) return false;
      for (std::size_t i = 1; i <= count; ++i)
        if (srv.handlers[i]->got.size() != 100) return false;
      for (const auto& c : clients)
        if (!c->is_open() || c->queued_bytes() != 0) return false;
      return true;
    };
    run_until(*loop, all_idle, 200000);
    REQUIRE(all_idle());
    // The Recorders' 64 KiB read buffers are the test's, not the layer's.
    std::size_t test_buffers = 0;
    for (const auto& h : srv.handlers) test_buffers += h->buf.capacity() + h->got.capacity() + sizeof(Recorder);
    for (const auto& h : handlers) test_buffers += h->buf.capacity() + h->got.capacity() + sizeof(Recorder);
    const std::size_t after = heap_in_use();
    const std::size_t used = after > before + test_buffers ? after - before - test_buffers : 0;
    const std::size_t per_connection = used / (2 * count);  // both ends are in this process
    MESSAGE((tls ? "TLS" : "TCP") << ": " << count << " idle connection pairs, " << used / 1024
                                   << " KiB of heap, " << per_connection << " bytes per connection");
    CHECK(used > 0);  // a measurement that sees nothing is broken, not good news
    CHECK(per_connection <= 64 * 1024);
  }
}

TEST_CASE("connection: a host name is resolved off the loop, each address tried in turn") {
  auto loop = make_loop();
  Server srv(*loop);  // on 127.0.0.1; "localhost" may resolve to ::1 first
  srv.setup = [](Recorder& h) { h.echo = true; };
  Recorder client;
  net::Address a = srv.address();
  a.host = "localhost";
  auto c = Connection::connect(*loop, a, client);
  CHECK(c->stage() == Connection::Stage::resolving);
  c->send(Buffer{1, 2, 3});
  c->finish();
  run_until(*loop, [&] { return client.closed.has_value(); });
  REQUIRE(client.closed);
  if (!*client.closed) {
    // A host without a "localhost" entry: then it is a resolution error.
    CHECK(client.closed->error().code == Errc::network);
    MESSAGE("localhost did not resolve here: " << client.closed->error().what);
    return;
  }
  CHECK(client.got == Buffer{1, 2, 3});
  CHECK(c->peer() == "localhost:" + std::to_string(a.port));
}

TEST_CASE("resolve_async: a cancelled request never calls back; a bad name is a network error") {
  auto loop = make_loop();
  int called = 0;
  {
    auto req = net::resolve_async(*loop, *net::parse_address("tcp://localhost:1"), [&](auto) { ++called; });
    CHECK(req.pending());
    req.cancel();
    CHECK(!req.pending());
  }
  std::optional<Result<std::vector<sockaddr_storage>>> bad;
  auto req = net::resolve_async(*loop, *net::parse_address("tcp://no-such-host.invalid:1"),
                                [&](auto r) { bad.emplace(std::move(r)); });
  std::optional<Result<std::vector<sockaddr_storage>>> numeric;
  auto req2 = net::resolve_async(*loop, *net::parse_address("tcp://[::1]:8786"),
                                 [&](auto r) { numeric.emplace(std::move(r)); });
  CHECK(!numeric);  // not from inside the call, even for a numeric host
  run_until(*loop, [&] { return bad.has_value() && numeric.has_value(); }, 100);
  REQUIRE(numeric);
  REQUIRE(numeric->ok());
  CHECK(net::sockaddr_text((*numeric)->front()) == "[::1]:8786");
  CHECK(called == 0);
  if (bad) {
    REQUIRE(!*bad);
    CHECK(bad->error().code == Errc::network);
    CHECK(bad->error().what.starts_with("cannot resolve host \"no-such-host.invalid\""));
  } else {
    MESSAGE("the resolver is slow here: no answer for no-such-host.invalid within the test's wait");
  }
  CHECK(!req.pending() == bad.has_value());
}
