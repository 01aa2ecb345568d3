#include "daskcaps/caps/caps_report.h"

#include <doctest/doctest.h>

#include "support/dask_builder.h"

using namespace daskcaps;
using namespace testsupport;
using report::EndpointInfo;
using report::kLocal;

namespace {

Handshake hs(const char* compression, std::int64_t pickle = 5) {
  return *handshake_from_msgpack(map({{"compression", compression ? str(compression) : Value::nil()},
                                      {"python", arr({num(3), num(11), num(2)})},
                                      {"pickle-protocol", num(pickle)}}));
}

rpc::Reply value_reply(Value v) {
  rpc::Reply r;
  r.value = std::move(v);
  return r;
}

EndpointInfo live(std::string address, std::string type, const char* compression, std::string ip,
                  std::string scheduler = "") {
  EndpointInfo e;
  e.address = std::move(address);
  e.type = std::move(type);
  e.handshake = hs(compression);
  e.identity = value_reply(map({{"type", str(e.type)}}));
  e.versions = value_reply(map({{"packages", map({{"distributed", str("2022.12.1")},
                                                   {"lz4", str("4.0.2")},
                                                   {"zstandard", str("0.20.0")}})}}));
  e.peer_ip = std::move(ip);
  e.local_ip = "10.0.0.100";
  e.rtt_ms = 1.0;
  if (!scheduler.empty()) {
    e.given = false;
    e.discovered_by = std::move(scheduler);
  }
  return e;
}

Peer local_peer(std::vector<std::string> codecs, const char* compression) {
  Peer p;
  p.name = "this host (laptop)";
  p.role = "client";
  p.host = "laptop";
  p.handshake = hs(compression);
  p.codecs = std::move(codecs);
  p.published = true;
  p.gpu = false;
  p.python = "3.11.2";
  return p;
}

std::size_t count_code(const report::Report& r, std::string_view code) {
  std::size_t n = 0;
  for (const auto& p : r.pairs)
    for (const auto& f : p.report.findings) n += f.code == code;
  for (const auto& f : r.summary.findings) n += f.code == code;
  return n;
}

}  // namespace

TEST_CASE("caps_report: one endpoint is checked against this host") {
  std::vector<EndpointInfo> eps{live("tcp://10.0.0.1:8786", "Scheduler", "zstd", "10.0.0.1")};
  auto r = report::build_report(local_peer({"lz4", "zlib"}, "lz4"), std::move(eps));
  REQUIRE(r.pairs.size() == 1);
  CHECK(r.pairs[0].a == kLocal);
  CHECK(report::side_name(r, r.pairs[0].a) == "this host (laptop)");
  CHECK(r.pairs[0].report.dask->compression == CompressionValue::nil());
  CHECK(r.summary.worst == Severity::warning);
  CHECK(r.summary.degraded.size() == 1);
}

TEST_CASE("caps_report: several endpoints give every pair") {
  std::vector<EndpointInfo> eps{live("tcp://10.0.0.1:1", "Worker", "lz4", "10.0.0.1"),
                                live("tcp://10.0.0.2:1", "Worker", "lz4", "10.0.0.2"),
                                live("tcp://10.0.0.3:1", "Worker", "zstd", "10.0.0.3")};
  auto r = report::build_report(std::nullopt, std::move(eps));
  CHECK(r.pairs.size() == 3);
  CHECK(count_code(r, finding_code::kCompressionMismatch) == 2);
}

TEST_CASE("caps_report: a thousand identical workers make one group; the odd one is an outlier") {
  std::vector<EndpointInfo> eps{live("tcp://10.0.0.1:8786", "Scheduler", "lz4", "10.0.0.1")};
  for (int i = 0; i < 1000; ++i)
    eps.push_back(live("tcp://10.1.0." + std::to_string(i) + ":4000", "Worker", "lz4",
                       "10.1.0." + std::to_string(i), "tcp://10.0.0.1:8786"));
  eps.push_back(live("tcp://10.2.0.1:4000", "Worker", "zstd", "10.2.0.1", "tcp://10.0.0.1:8786"));
  EndpointInfo dead;
  dead.address = "tcp://10.3.0.1:4000";
  dead.given = false;
  dead.discovered_by = "tcp://10.0.0.1:8786";
  dead.error = make_error(Errc::refused, "connection refused by 10.3.0.1:4000 (nothing listens there)");
  eps.push_back(dead);

  auto r = report::build_report(local_peer({"lz4", "zlib"}, "lz4"), std::move(eps));
  REQUIRE(r.summary.groups.size() == 2);
  CHECK(r.summary.groups[0].members.size() == 1000);
  CHECK(r.summary.groups[1].members.size() == 1);
  REQUIRE(r.summary.outliers.size() == 1);
  CHECK(r.endpoints[r.summary.outliers[0]].address == "tcp://10.2.0.1:4000");
  // local-scheduler, and per group: local, scheduler; plus group-group.
  CHECK(r.pairs.size() == 1 + 2 * 2 + 1);
  std::size_t group_pairs = 0;
  for (const auto& p : r.pairs)
    if (p.a_group && p.b_group) {
      ++group_pairs;
      CHECK(*p.a_group == 0u);
      CHECK(*p.b_group == 1u);
    }
  CHECK(group_pairs == 1);
  // The dead worker is a cluster finding, not a pair.
  REQUIRE(r.summary.findings.size() == 1);
  CHECK(r.summary.findings[0].code == finding_code::kUnreachable);
  CHECK(r.summary.findings[0].message.starts_with("1 of the 1002 workers of tcp://10.0.0.1:8786"));
  CHECK(r.summary.unreachable == 1);
  CHECK(r.summary.reachable == 1002);
}

TEST_CASE("caps_report: between groups of one, the one unlike its scheduler is the outlier") {
  std::vector<EndpointInfo> eps{live("tcp://10.0.0.1:8786", "Scheduler", "lz4", "10.0.0.1"),
                                live("tcp://10.1.0.1:4000", "Worker", "zstd", "10.1.0.1", "tcp://10.0.0.1:8786"),
                                live("tcp://10.1.0.2:4000", "Worker", "lz4", "10.1.0.2", "tcp://10.0.0.1:8786")};
  auto r = report::build_report(std::nullopt, std::move(eps));
  REQUIRE(r.summary.outliers.size() == 1);
  CHECK(r.endpoints[r.summary.outliers[0]].address == "tcp://10.1.0.1:4000");
}

TEST_CASE("caps_report: relay findings land on the client-scheduler pair") {
  std::vector<EndpointInfo> eps{live("tcp://10.0.0.1:8786", "Scheduler", "lz4", "10.0.0.1")};
  for (int i = 0; i < 3; ++i)
    eps.push_back(live("tcp://10.1.0." + std::to_string(i) + ":4000", "Worker", "lz4",
                       "10.1.0." + std::to_string(i), "tcp://10.0.0.1:8786"));
  auto r = report::build_report(local_peer({"zstd", "zlib"}, nullptr), std::move(eps));
  REQUIRE(!r.pairs.empty());
  const auto& first = r.pairs[0];
  CHECK(first.a == kLocal);
  bool relay = false;
  for (const auto& f : first.report.findings)
    relay = relay || (f.code == finding_code::kCodecUnavailable && f.severity == Severity::error);
  CHECK(relay);
  CHECK(r.summary.relay.size() == 3);
  CHECK(r.summary.worst == Severity::error);
}

TEST_CASE("caps_report: a live endpoint with an incomplete handshake is an error and a finding") {
  EndpointInfo e = live("tcp://10.0.0.1:8786", "Scheduler", "lz4", "10.0.0.1");
  e.handshake = *handshake_from_msgpack(map({{"compression", str("lz4")}}));
  auto r = report::build_report(local_peer({"lz4"}, "lz4"), {e});
  REQUIRE(r.endpoints[0].error);
  CHECK(r.endpoints[0].error->code == Errc::protocol);
  CHECK(count_code(r, finding_code::kHandshakeIncomplete) == 1);
}

TEST_CASE("caps_report: same host is decided by the IPs we reached") {
  // Both endpoints on one host, newest rules: Dask sends nothing compressed.
  EndpointInfo a = live("tcp://10.0.0.1:1", "Worker", "lz4", "10.0.0.1");
  EndpointInfo b = live("tcp://10.0.0.1:2", "Worker", "lz4", "10.0.0.1");
  for (auto* e : {&a, &b})
    e->versions = value_reply(map({{"packages", map({{"distributed", str("2024.1.0")}})}}));
  auto r = report::build_report(std::nullopt, {a, b});
  REQUIRE(r.pairs.size() == 1);
  CHECK(r.pairs[0].report.dask->compression == CompressionValue::nil());
  b.peer_ip = "10.0.0.2";
  auto r2 = report::build_report(std::nullopt, {a, b});
  CHECK(r2.pairs[0].report.dask->compression == CompressionValue::named("lz4"));
}

TEST_CASE("caps_report: workers_of lists the identity's worker addresses") {
  const Value id = map({{"type", str("Scheduler")},
                        {"workers", map({{"tcp://10.0.0.2:1", map({})}, {"tcp://10.0.0.3:1", map({})}})}});
  CHECK(report::workers_of(id) == std::vector<std::string>{"tcp://10.0.0.2:1", "tcp://10.0.0.3:1"});
  CHECK(report::workers_of(map({})).empty());
}
