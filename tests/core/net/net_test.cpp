#include "daskcaps/net/address.h"
#include "core/net/internal/socket.h"
#include "daskcaps/net/tls.h"

#include <doctest/doctest.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "daskcaps/caps/caps.h"
#include "daskcaps/net/net_server.h"
#include "daskcaps/net/rpc.h"
#include "support/dask_builder.h"
#include "support/net_support.h"
#include "core/net/internal/rpc_session.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

server::Profile profile(const char* type = "Scheduler", const char* compression = "lz4") {
  server::Profile p;
  p.type = type;
  Value hs = map({{"compression", str(compression)},
                  {"python", arr({num(3), num(11), num(2)})},
                  {"pickle-protocol", num(5)}});
  Capabilities caps;
  caps.codecs = {compression, "zlib"};
  hs.set("capabilities", capabilities_to_msgpack(caps));
  p.handshake = *handshake_from_msgpack(hs);
  p.capabilities = caps;
  p.versions = map({{"host", map({{"python", str("3.11.2.final.0")}})},
                    {"packages", map({{"python", str("3.11.2.final.0")}})}});
  return p;
}

/// A server running on its own thread for one test.
class RunningServer {
 public:
  explicit RunningServer(std::vector<server::ListenerSpec> specs) {
    auto s = server::Server::start(std::move(specs));
    REQUIRE(s.ok());
    server_ = std::move(*s);
    thread_ = std::thread([this] { status_ = server_->run(); });
  }
  ~RunningServer() {
    server_->request_stop();
    thread_.join();
  }
  std::vector<net::Address> addresses() const { return server_->addresses(); }
  server::Server& get() { return *server_; }

 private:
  std::unique_ptr<server::Server> server_;
  std::thread thread_;
  Status status_;
};

server::ListenerSpec spec(const char* type = "Scheduler", const char* compression = "lz4") {
  return {*net::parse_address("tcp://127.0.0.1:0"), profile(type, compression)};
}

rpc::QueryOptions query_options(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  rpc::QueryOptions q;
  q.session.ours = *handshake_from_msgpack(map({{"compression", Value::nil()},
                                                {"python", arr({num(3), num(11), num(2)})},
                                                {"pickle-protocol", num(5)}}));
  q.timeout = timeout;
  return q;
}

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

}  // namespace

TEST_CASE("net: addresses as Dask writes them") {
  auto a = net::parse_address("tcp://127.0.0.1:8786");
  REQUIRE(a.ok());
  CHECK(a->scheme == net::Scheme::tcp);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 8786);
  CHECK(a->to_string() == "tcp://127.0.0.1:8786");

  auto v6 = net::parse_address("tls://[::1]:8786");
  REQUIRE(v6.ok());
  CHECK(v6->scheme == net::Scheme::tls);
  CHECK(v6->host == "::1");
  CHECK(v6->to_string() == "tls://[::1]:8786");
  CHECK(v6->host_port() == "[::1]:8786");

  auto bare = net::parse_address("scheduler.example:8786");
  REQUIRE(bare.ok());
  CHECK(bare->scheme == net::Scheme::tcp);
  CHECK(bare->host == "scheduler.example");
  CHECK(net::parse_address("[::1]:1")->host == "::1");
  CHECK(net::parse_address("tcp://10.0.0.5:8786/")->port == 8786);
}

TEST_CASE("net: bad addresses are usage errors that say what is wrong") {
  const std::pair<const char*, const char*> cases[] = {
      {"ws://127.0.0.1:8786", "unsupported address scheme \"ws://\""},
      {"tcp://127.0.0.1", "missing port number"},
      {"127.0.0.1:70000", "bad port \"70000\""},
      {"127.0.0.1:x", "bad port \"x\""},
      {"tcp://::1:8786", "IPv6 address without brackets"},
      {"tcp://:8786", "missing host"},
      {"[::1", "unterminated \"[\""},
  };
  for (const auto& c : cases) {
    // Named copies: clang 14 cannot capture structured bindings (CAPTURE).
    const auto& text = c.first;
    const auto& expected = c.second;
    CAPTURE(text);
    auto a = net::parse_address(text);
    REQUIRE(!a);
    CHECK(a.error().code == Errc::usage);
    CHECK(a.error().what.find(expected) != std::string::npos);
  }
}

TEST_CASE("net: a closed port is refused, distinctly") {
  net::Address a = *net::parse_address("tcp://127.0.0.1:" + std::to_string(closed_port()));
  auto r = rpc::query_endpoint(a, query_options());
  REQUIRE(!r);
  CHECK(r.error().code == Errc::refused);
  CHECK(r.error().what.starts_with("connection refused by 127.0.0.1:"));
}

TEST_CASE("net: a listener that accepts and never speaks times out with a clear message") {
  auto listener = net::listen_tcp(*net::parse_address("tcp://127.0.0.1:0"));
  REQUIRE(listener.ok());
  auto bound = net::bound_address(*listener, net::Scheme::tcp);
  REQUIRE(bound.ok());
  // The kernel completes the connection from the backlog; nobody answers.
  auto r = rpc::query_endpoint(*bound, query_options(std::chrono::milliseconds(300)));
  REQUIRE(!r);
  CHECK(r.error().code == Errc::timeout);
  CHECK(r.error().what.find("within 300 ms: it accepted the connection and sent nothing") != std::string::npos);
}

TEST_CASE("net: a name that does not resolve is a network error") {
  auto a = net::parse_address("tcp://no-such-host.invalid:8786");
  auto r = rpc::query_endpoint(*a, query_options(std::chrono::milliseconds(5000)));
  REQUIRE(!r);
  const bool dns = r.error().code == Errc::network &&
                   r.error().what.starts_with("cannot resolve host \"no-such-host.invalid\"");
  const bool slow_resolver = r.error().code == Errc::timeout;
  CHECK((dns || slow_resolver));
}

TEST_CASE("net: a tls:// address without TLS settings is a usage error") {
  auto r = rpc::query_endpoint(*net::parse_address("tls://127.0.0.1:1"), query_options());
  REQUIRE(!r);
  CHECK(r.error().code == Errc::usage);
}

TEST_CASE("net: TLS settings that cannot be loaded are named") {
  net::TlsOptions o;
  o.ca_file = "/nonexistent/ca.pem";
  auto ctx = net::TlsClientContext::create(o);
  REQUIRE(!ctx);
  CHECK(ctx.error().code == Errc::tls);
  CHECK(ctx.error().what.starts_with("cannot load the CA file \"/nonexistent/ca.pem\""));
  net::TlsOptions k;
  k.key_file = "/some/key";
  auto ctx2 = net::TlsClientContext::create(k);
  REQUIRE(!ctx2);
  CHECK(ctx2.error().code == Errc::usage);
}

TEST_CASE("net: a TLS client against a plain listener fails the TLS handshake, not the protocol") {
  RunningServer srv({spec()});
  auto ctx = net::TlsClientContext::create({});
  REQUIRE(ctx.ok());
  net::Address a = srv.addresses()[0];
  a.scheme = net::Scheme::tls;
  auto q = query_options(std::chrono::milliseconds(3000));
  q.tls = ctx->get();
  auto r = rpc::query_endpoint(a, q);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::tls);
}

TEST_CASE("net: query_endpoint against serve gives its handshake, identity and versions") {
  RunningServer srv({spec("Scheduler", "zstd"), spec("Worker", "lz4")});
  const auto addrs = srv.addresses();
  REQUIRE(addrs.size() == 2);
  auto r = rpc::query_endpoint(addrs[0], query_options());
  REQUIRE(r.ok());
  CHECK(r->exchange.handshake.compression == CompressionValue::named("zstd"));
  CHECK(r->peer_ip == "127.0.0.1");
  CHECK(r->local_ip == "127.0.0.1");
  REQUIRE(r->exchange.identity);
  const Value& id = r->exchange.identity->value;
  CHECK(id.find("type")->as_str() == "Scheduler");
  CHECK(id.find("address")->as_str() == addrs[0].to_string());
  // The scheduler lists the worker listener; the extended set is published.
  REQUIRE(id.find("workers")->find(addrs[1].to_string()));
  auto caps = capabilities_from_msgpack(*id.find("dask-caps")->find("capabilities"));
  REQUIRE(caps);
  CHECK(caps->codecs == std::vector<std::string>{"zstd", "zlib"});
  // versions: asked-for packages it does not know come back as nil.
  const Value* pkgs = r->exchange.versions->value.find("packages");
  REQUIRE(pkgs);
  CHECK(pkgs->find("zstandard")->is_nil());

  auto w = rpc::query_endpoint(addrs[1], query_options());
  REQUIRE(w.ok());
  CHECK(w->exchange.identity->value.find("type")->as_str() == "Worker");
  CHECK(w->exchange.identity->value.find("scheduler")->as_str() == addrs[0].to_string());
}

TEST_CASE("net: IPv6 loopback works when the host has it") {
  auto listener = net::listen_tcp(*net::parse_address("tcp://[::1]:0"));
  if (!listener) {
    MESSAGE("no IPv6 loopback here: " << listener.error().message());
    return;
  }
  listener->reset();
  RunningServer srv({{*net::parse_address("tcp://[::1]:0"), profile()}});
  const auto a = srv.addresses()[0];
  CHECK(a.to_string().starts_with("tcp://[::1]:"));
  auto r = rpc::query_endpoint(a, query_options());
  REQUIRE(r.ok());
  CHECK(r->peer_ip == "::1");
}

TEST_CASE("net: the survey checks many endpoints at once and keeps their order") {
  std::vector<server::ListenerSpec> specs;
  for (int i = 0; i < 60; ++i) specs.push_back(spec(i % 2 ? "Worker" : "Scheduler", i % 3 ? "lz4" : "zstd"));
  RunningServer srv(std::move(specs));
  std::vector<net::Address> addrs = srv.addresses();
  const net::Address refused = *net::parse_address("tcp://127.0.0.1:" + std::to_string(closed_port()));
  addrs.insert(addrs.begin() + 10, refused);

  survey::SurveyOptions o;
  o.session = query_options().session;
  o.max_in_flight = 7;  // fewer than the endpoints: exercises the queue
  auto results = survey::survey(addrs, o);
  REQUIRE(results.size() == addrs.size());
  for (std::size_t i = 0; i < addrs.size(); ++i) {
    CAPTURE(i);
    if (i == 10) {
      REQUIRE(!results[i]);
      CHECK(results[i].error().code == Errc::refused);
      continue;
    }
    REQUIRE(results[i].ok());
    const std::size_t k = i < 10 ? i : i - 1;
    CHECK(results[i]->exchange.handshake.compression ==
          CompressionValue::named(k % 3 ? "lz4" : "zstd"));
    CHECK(results[i]->exchange.identity->value.find("type")->as_str() ==
          (k % 2 ? "Worker" : "Scheduler"));
  }
  CHECK(srv.get().stats().accepted >= 60);
}

TEST_CASE("net: the survey times out silent endpoints, each with its own error") {
  auto listener = net::listen_tcp(*net::parse_address("tcp://127.0.0.1:0"));
  REQUIRE(listener.ok());
  RunningServer srv({spec()});
  std::vector<net::Address> addrs{*net::bound_address(*listener, net::Scheme::tcp), srv.addresses()[0]};
  survey::SurveyOptions o;
  o.session = query_options().session;
  o.per_endpoint_timeout = std::chrono::milliseconds(300);
  auto results = survey::survey(addrs, o);
  REQUIRE(!results[0]);
  CHECK(results[0].error().code == Errc::timeout);
  CHECK(results[0].error().what.find("sent nothing") != std::string::npos);
  CHECK(results[1].ok());
}

TEST_CASE("net: the total deadline of a survey stops endpoints not yet started") {
  auto listener = net::listen_tcp(*net::parse_address("tcp://127.0.0.1:0"));
  REQUIRE(listener.ok());
  const auto silent = *net::bound_address(*listener, net::Scheme::tcp);
  std::vector<net::Address> addrs(5, silent);
  survey::SurveyOptions o;
  o.session = query_options().session;
  o.max_in_flight = 1;
  o.per_endpoint_timeout = std::chrono::milliseconds(200);
  o.total_timeout = std::chrono::milliseconds(300);
  auto results = survey::survey(addrs, o);
  std::size_t not_started = 0;
  for (const auto& r : results) {
    REQUIRE(!r);
    CHECK(r.error().code == Errc::timeout);
    if (r.error().what.find("total deadline") != std::string::npos) ++not_started;
  }
  CHECK(not_started >= 2);
}

TEST_CASE("net: garbage and silent clients do not hold up a served client") {
  RunningServer srv({spec()});
  const net::Address a = srv.addresses()[0];
  // A client that never speaks, and one that sends garbage.
  auto silent = net::connect(a, net::Clock::now() + std::chrono::seconds(5), nullptr);
  REQUIRE(silent.ok());
  auto garbage = net::connect(a, net::Clock::now() + std::chrono::seconds(5), nullptr);
  REQUIRE(garbage.ok());
  const std::string junk(100, 'x');
  REQUIRE((*garbage)->write_all(as_bytes(junk), net::Clock::now() + std::chrono::seconds(5)).ok());
  // The server drops the garbage client: it reads our handshake, then EOF.
  std::array<std::uint8_t, 4096> buf;
  std::size_t total = 0;
  for (;;) {
    auto n = (*garbage)->read_some(buf, net::Clock::now() + std::chrono::seconds(5));
    REQUIRE(n.ok());
    if (*n == 0) break;
    total += *n;
  }
  CHECK(total > 0);
  auto r = rpc::query_endpoint(a, query_options());
  CHECK(r.ok());
}


TEST_CASE("net_server: 1,000 idle clients cost the server little heap each") {
#if DASKCAPS_TEST_ASAN
  MESSAGE("not measured under AddressSanitizer (its allocator is not malloc's)");
  return;
#endif
  const std::size_t count = testsupport::pairs_the_fd_limit_allows(1000);
  RunningServer srv({spec()});
  const net::Address a = srv.addresses()[0];
  Buffer hello = rpc::encode_msgpack_message(query_options().session.ours.to_msgpack());
  const Buffer identity = rpc::encode_request("identity", true);
  hello.append(identity);

  // A plain blocking client (no heap of its own): handshake and identity,
  // then it sits idle holding the connection.
  auto client = [&] {
    net::Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(a.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    timeval tv{10, 0};
    setsockopt(s.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    REQUIRE(::send(s.fd(), hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
    rpc::MessageReader reader{Limits{}};
    std::array<std::uint8_t, 4096> buf;
    int messages = 0;
    while (messages < 2) {
      const ssize_t n = ::recv(s.fd(), buf.data(), buf.size(), 0);
      REQUIRE(n > 0);
      reader.push(ByteSpan(buf.data(), static_cast<std::size_t>(n)));
      for (;;) {
        auto m = reader.next();
        REQUIRE(m.ok());
        if (!*m) break;
        ++messages;
      }
    }
    return s;
  };
  std::vector<net::Socket> idle;
  idle.reserve(count + 10);
  for (int i = 0; i < 10; ++i) idle.push_back(client());  // the server's one-time state first
  malloc_trim(0);
  const std::size_t before = testsupport::heap_in_use();
  for (std::size_t i = 0; i < count; ++i) idle.push_back(client());
  const std::size_t after = testsupport::heap_in_use();
  REQUIRE(after > before);
  const std::size_t per_client = (after - before) / count;
  MESSAGE("serve: " << count << " idle clients, " << per_client << " bytes of heap each");
  CHECK(per_client <= 64 * 1024);
  CHECK(srv.get().stats().accepted >= count + 10);
}
