#include "daskcaps/caps/caps.h"

#include <doctest/doctest.h>

#include "support/dask_builder.h"

using namespace daskcaps;
using namespace testsupport;

namespace {

Value compression_value(const char* c) {
  if (c == nullptr) return Value::nil();
  if (std::string_view(c) == "false") return Value::boolean(false);
  return str(c);
}

Handshake hs(const char* compression, std::int64_t pickle = 5, std::string python = "3.11.2") {
  Value m = map({{"compression", compression_value(compression)}});
  std::vector<Value> parts;
  std::size_t start = 0;
  while (start <= python.size()) {
    const auto dot = python.find('.', start);
    parts.push_back(num(std::stoll(python.substr(start, dot - start))));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  m.set("python", arr(parts));
  m.set("pickle-protocol", num(pickle));
  return *handshake_from_msgpack(m);
}

/// A Python Dask peer as a probe file describes it.
Peer peer(std::string name, const char* compression, std::vector<std::string> codecs,
          std::int64_t pickle = 5, std::string python = "3.11.2", std::string role = "Worker") {
  Peer p;
  p.name = std::move(name);
  p.role = std::move(role);
  p.host = "10.0.0." + std::to_string(p.name.size());
  p.handshake = hs(compression, pickle, python);
  p.codecs = std::move(codecs);
  p.max_pickle_protocol = pickle;
  p.python = python;
  p.published = true;
  p.gpu = false;
  p.packages = {{"dask", "2022.12.1"}, {"distributed", "2022.12.1"}, {"numpy", "1.24.2"}};
  return p;
}

bool has(const std::vector<Finding>& fs, std::string_view code, Severity s) {
  for (const auto& f : fs)
    if (f.code == code && f.severity == s) return true;
  return false;
}

const Finding& find(const std::vector<Finding>& fs, std::string_view code) {
  for (const auto& f : fs)
    if (f.code == code) return f;
  FAIL("no finding " << code);
  return fs.front();
}

}  // namespace

TEST_CASE("caps: Dask's negotiation table (spec 2.4), Python equality included") {
  struct Row {
    const char* a;
    const char* b;
    std::int64_t pa, pb;
    CompressionValue compression;
    std::int64_t pickle;
  };
  const Row rows[] = {
      {"lz4", "lz4", 5, 5, CompressionValue::named("lz4"), 5},
      {"lz4", "zstd", 5, 5, CompressionValue::nil(), 5},
      {"zstd", "lz4", 5, 4, CompressionValue::nil(), 4},
      {nullptr, nullptr, 5, 5, CompressionValue::nil(), 5},
      {"false", "false", 5, 5, CompressionValue::none_false(), 5},  // False == False
      {nullptr, "false", 5, 5, CompressionValue::nil(), 5},         // None != False
      {"lz4", nullptr, 4, 5, CompressionValue::nil(), 4},
      {"lz4", "lz4", 9, 5, CompressionValue::named("lz4"), 5},      // no range check
  };
  for (const auto& r : rows) {
    CAPTURE(r.a ? r.a : "None");
    CAPTURE(r.b ? r.b : "None");
    const auto d = dask_negotiate(hs(r.a, r.pa), hs(r.b, r.pb));
    CHECK(d.ok);
    CHECK(d.compression == r.compression);
    CHECK(d.pickle_protocol == r.pickle);
    // Both sides compute the same thing.
    const auto e = dask_negotiate(hs(r.b, r.pb), hs(r.a, r.pa));
    CHECK(e.compression == d.compression);
    CHECK(e.pickle_protocol == d.pickle_protocol);
  }
}

TEST_CASE("caps: a handshake without a key fails as Dask fails (spec 2.5)") {
  const Handshake full = hs("lz4");
  const Handshake no_pickle = *handshake_from_msgpack(map({{"compression", str("lz4")}}));
  const Handshake no_compression = *handshake_from_msgpack(map({{"pickle-protocol", num(5)}}));
  const Handshake empty = *handshake_from_msgpack(map({}));
  auto a = dask_negotiate(full, no_pickle);
  CHECK(!a.ok);
  CHECK(a.failure.starts_with("ValueError: Your Dask versions may not be in sync"));
  auto b = dask_negotiate(no_compression, full);
  CHECK(!b.ok);
  CHECK(b.failure == "KeyError: 'compression'");
  // The pickle lookup comes first: with both missing it is the ValueError.
  CHECK(dask_negotiate(full, empty).failure.starts_with("ValueError"));
  // A missing "python" is fine.
  CHECK(dask_negotiate(full, *handshake_from_msgpack(map({{"compression", str("lz4")}, {"pickle-protocol", num(5)}}))).ok);
}

TEST_CASE("caps: newest releases advertise None to a peer on the same host") {
  CHECK(DaskRelease::from_version("2022.12.1+ds.1").name() == "2022.12");
  CHECK(DaskRelease::from_version("2023.4.1").name() == "2022.12");
  CHECK(DaskRelease::from_version("2023.5.0").name() == "newest");
  CHECK(DaskRelease::from_version("2026.7.1").name() == "newest");
  CHECK(DaskRelease::from_version("").name() == "2022.12");
  CHECK(DaskRelease::from_version("garbage").name() == "2022.12");

  Peer a = peer("a", "lz4", {"lz4"});
  Peer b = peer("b", "lz4", {"lz4"});
  CHECK(advertised_to(a, true).compression == CompressionValue::named("lz4"));
  a.release = b.release = DaskRelease::newest();
  CHECK(advertised_to(a, true).compression == CompressionValue::nil());
  CHECK(advertised_to(a, false).compression == CompressionValue::named("lz4"));
  // Same host, newest: no compression, and that is not a mismatch.
  auto same = evaluate_pair(a, b, true);
  REQUIRE(same.dask);
  CHECK(same.dask->compression == CompressionValue::nil());
  REQUIRE(same.findings.size() == 1);
  CHECK(same.findings[0].severity == Severity::info);
  CHECK(same.findings[0].message.find("same-host and uncompressed") != std::string::npos);
  CHECK(!same.recommended.a_to_b.codec);
  CHECK(!same.recommended.b_to_a.codec);
  auto other = evaluate_pair(a, b, false);
  CHECK(other.dask->compression == CompressionValue::named("lz4"));
  CHECK(other.findings.empty());
  CHECK(other.recommended.a_to_b.codec == "lz4");
}

TEST_CASE("caps: a same-host link with one newest peer is uncompressed by design, not a mismatch") {
  // This host runs 2022.12 with lz4; the newest peer on it sent us None.
  Peer here = peer("this host", "lz4", {"lz4", "zstd", "zlib"}, 5, "3.11.2", "client");
  Peer live = peer("tcp://127.0.0.1:8786", nullptr, {"lz4", "zstd", "zlib"}, 5, "3.11.2", "Scheduler");
  live.release = DaskRelease::newest();
  live.packages["distributed"] = "2026.7.1";
  live.compression_hidden = true;
  CHECK(uncompressed_by_design(here, live, true));
  CHECK(!uncompressed_by_design(here, live, false));
  auto r = evaluate_pair(here, live, true);
  REQUIRE(r.dask);
  CHECK(r.dask->compression == CompressionValue::nil());
  CHECK(!has(r.findings, finding_code::kCompressionMismatch, Severity::warning));
  const Finding& f = find(r.findings, finding_code::kCompressionMismatch);
  CHECK(f.severity == Severity::info);
  CHECK(f.message.find("distributed 2026.7.1") != std::string::npos);
  CHECK(f.message.find("PR #7768") != std::string::npos);
  CHECK(f.message.find("cannot be seen from this host") != std::string::npos);
  CHECK(f.hint.find("DASK_DISTRIBUTED__COMM__COMPRESSION") == std::string::npos);
  CHECK(!r.recommended.a_to_b.codec);
  CHECK(!r.recommended.b_to_a.codec);
  // Two 2022.12 peers on one host: Dask compresses there, so it is a mismatch.
  Peer old = peer("b", "zstd", {"zstd", "zlib"});
  auto m = evaluate_pair(here, old, true);
  CHECK(has(m.findings, finding_code::kCompressionMismatch, Severity::warning));
  CHECK(m.recommended.a_to_b.codec == "zstd");
}

TEST_CASE("caps: a peer reached on its own host does not show its codec to other hosts") {
  Peer sched = peer("tcp://127.0.0.1:8786", nullptr, {"lz4", "zlib"}, 5, "3.11.2", "Scheduler");
  sched.release = DaskRelease::newest();
  sched.compression_hidden = true;
  Peer worker = peer("tcp://10.0.0.9:4000", "lz4", {"lz4", "zlib"});
  worker.release = DaskRelease::newest();
  auto r = evaluate_pair(sched, worker, false);
  CHECK(!has(r.findings, finding_code::kCompressionMismatch, Severity::warning));
  const Finding& f = find(r.findings, finding_code::kCompressionMismatch);
  CHECK(f.severity == Severity::info);
  CHECK(f.message.find("cannot be seen from this host") != std::string::npos);
}

TEST_CASE("caps: the recommended rule, per direction") {
  // The sender's preference decides each direction.
  Peer a = peer("a", "lz4", {"lz4", "zstd", "zlib"});
  Peer b = peer("b", "zstd", {"zstd", "lz4", "zlib"});
  auto r = recommend(a, b);
  CHECK(r.a_to_b.codec == "lz4");
  CHECK(r.b_to_a.codec == "zstd");
  CHECK(r.pickle_protocol == 5);
  // A receiver without the sender's favourite falls down the list.
  Peer c = peer("c", nullptr, {"zlib"});
  CHECK(recommend(a, c).a_to_b.codec == "zlib");
  // Nothing in common: none.
  Peer d = peer("d", "snappy", {"snappy"});
  CHECK(!recommend(d, c).a_to_b.codec);
  // Highest protocol both read; cpu for a receiver without a GPU.
  Peer old = peer("old", "lz4", {"lz4"}, 4, "3.7.9");
  a.gpu = true;
  auto r2 = recommend(a, old);
  CHECK(r2.pickle_protocol == 4);
  CHECK(r2.a_to_b.layout == "cpu");
  CHECK(r2.b_to_a.layout == "gpu");
}

TEST_CASE("caps: compression mismatch names the setting, both hosts, and a codec both have") {
  Peer a = peer("tcp://10.0.0.1:8786", "lz4", {"lz4", "zstd", "zlib"}, 5, "3.11.2", "Scheduler");
  Peer b = peer("tcp://10.0.0.2:40000", "zstd", {"zstd", "lz4", "zlib"});
  auto r = evaluate_pair(a, b, false);
  REQUIRE(r.dask);
  CHECK(r.dask->compression == CompressionValue::nil());
  REQUIRE(r.scheduler_initiated);
  CHECK(r.scheduler_initiated->pickle_protocol == 4);  // spec 2.7
  const Finding& f = find(r.findings, finding_code::kCompressionMismatch);
  CHECK(f.severity == Severity::warning);
  CHECK(f.message.find("\"lz4\"") != std::string::npos);
  CHECK(f.message.find("\"zstd\"") != std::string::npos);
  CHECK(f.hint.find("distributed.comm.compression: lz4") != std::string::npos);
  CHECK(f.hint.find("DASK_DISTRIBUTED__COMM__COMPRESSION=lz4") != std::string::npos);
  CHECK(f.hint.find(a.host) != std::string::npos);
  CHECK(f.hint.find(b.host) != std::string::npos);
  // Nothing else is wrong with this pair.
  CHECK(r.findings.size() == 1);
}

TEST_CASE("caps: a peer without the codec gets codec-unavailable with an install hint") {
  Peer a = peer("tcp://10.0.0.1:8786", "lz4", {"lz4", "zlib"});
  Peer b = peer("tcp://10.0.0.2:9", nullptr, {"zlib"});
  auto r = evaluate_pair(a, b, false);
  CHECK(has(r.findings, finding_code::kCompressionMismatch, Severity::warning));
  const Finding& u = find(r.findings, finding_code::kCodecUnavailable);
  CHECK(u.severity == Severity::info);
  CHECK(u.hint.find("pip install lz4") != std::string::npos);
  CHECK(u.hint.find("conda install lz4") != std::string::npos);
  CHECK(u.hint.find(b.host) != std::string::npos);
  const Finding& m = find(r.findings, finding_code::kCompressionMismatch);
  CHECK(m.hint.find("distributed.comm.compression: zlib") != std::string::npos);
  CHECK(m.hint.find("to keep lz4") != std::string::npos);
}

TEST_CASE("caps: nil against False is no finding: neither wants compression") {
  auto r = evaluate_pair(peer("a", nullptr, {"zlib"}), peer("b", "false", {"zlib"}), false);
  CHECK(r.findings.empty());
}

TEST_CASE("caps: a protocol-4 peer fails on what Dask always writes with protocol 5") {
  Peer a = peer("tcp://10.0.0.1:8786", "lz4", {"lz4"}, 5, "3.11.2");
  Peer old = peer("tcp://10.0.0.9:7", "lz4", {"lz4"}, 4, "3.7.9");
  auto r = evaluate_pair(a, old, false);
  CHECK(r.dask->pickle_protocol == 4);
  const Finding& p = find(r.findings, finding_code::kPickleProtocolDowngrade);
  CHECK(p.severity == Severity::error);
  CHECK(p.message.find("type-serialized") != std::string::npos);
  CHECK(p.message.find("ToPickle") != std::string::npos);
  CHECK(p.message.find("unsupported pickle protocol: 5") != std::string::npos);
  CHECK(p.hint.find("dask-caps transcode") != std::string::npos);
  CHECK(p.hint.find("--pickle-protocol 4") != std::string::npos);
  const Finding& py = find(r.findings, finding_code::kPythonVersionMismatch);
  CHECK(py.severity == Severity::warning);
  CHECK(py.message.find("3.7.9") != std::string::npos);
}

TEST_CASE("caps: Python versions: major error, minor warning, micro info") {
  auto sev = [](std::string x, std::string y) {
    auto r = evaluate_pair(peer("a", "lz4", {"lz4"}, 5, x), peer("b", "lz4", {"lz4"}, 5, y), false);
    return find(r.findings, finding_code::kPythonVersionMismatch).severity;
  };
  CHECK(sev("3.11.2", "3.10.12") == Severity::warning);
  CHECK(sev("3.11.2", "3.11.7") == Severity::info);
  CHECK(sev("2.7.18", "3.11.2") == Severity::error);
  auto same = evaluate_pair(peer("a", "lz4", {"lz4"}), peer("b", "lz4", {"lz4"}), false);
  CHECK(same.findings.empty());
}

TEST_CASE("caps: dask or distributed versions differing is an error, the rest info") {
  Peer a = peer("a", "lz4", {"lz4"});
  Peer b = peer("b", "lz4", {"lz4"});
  b.packages["numpy"] = "1.26.0";
  b.packages["tornado"] = "6.3";  // asked of one side only: not compared
  auto r = evaluate_pair(a, b, false);
  const Finding& f = find(r.findings, finding_code::kPackageMismatch);
  CHECK(f.severity == Severity::info);
  CHECK(f.message.find("numpy 1.24.2 vs 1.26.0") != std::string::npos);
  CHECK(f.message.find("tornado") == std::string::npos);

  b.packages["distributed"] = "2023.1.0";
  auto r2 = evaluate_pair(a, b, false);
  CHECK(has(r2.findings, finding_code::kPackageMismatch, Severity::error));
  // A Debian suffix alone is not a different release.
  b.packages["distributed"] = "2022.12.1+ds.1";
  b.packages["dask"] = "2022.12.1+dfsg";
  auto r3 = evaluate_pair(a, b, false);
  CHECK(!has(r3.findings, finding_code::kPackageMismatch, Severity::error));
  // numpy 1 against 2 is a warning.
  b.packages["numpy"] = "2.1.0";
  auto r4 = evaluate_pair(a, b, false);
  CHECK(has(r4.findings, finding_code::kPackageMismatch, Severity::warning));
}

TEST_CASE("caps: GPU to a CPU-only peer") {
  Peer gpu = peer("gpu", "lz4", {"lz4"});
  gpu.gpu = true;
  Peer cpu = peer("cpu", "lz4", {"lz4"});
  auto r = evaluate_pair(gpu, cpu, false);
  const Finding& f = find(r.findings, finding_code::kGpuToCpu);
  CHECK(f.severity == Severity::warning);
  CHECK(f.hint.find("--layout cpu") != std::string::npos);
  CHECK(r.recommended.a_to_b.layout == "cpu");
  // Unknown GPU on the receiver: no claim.
  cpu.gpu.reset();
  CHECK(evaluate_pair(gpu, cpu, false).findings.empty());
}

TEST_CASE("caps: handshake-incomplete, and no Dask negotiation without a handshake") {
  Peer a = peer("a", "lz4", {"lz4"});
  Peer b = peer("b", "lz4", {"lz4"});
  b.handshake = *handshake_from_msgpack(map({{"compression", str("lz4")}}));
  auto r = evaluate_pair(a, b, false);
  REQUIRE(r.dask);
  CHECK(!r.dask->ok);
  const Finding& f = find(r.findings, finding_code::kHandshakeIncomplete);
  CHECK(f.severity == Severity::error);
  CHECK(f.message.find("\"pickle-protocol\"") != std::string::npos);
  CHECK(f.message.find("Your Dask versions may not be in sync") != std::string::npos);

  b.handshake.reset();
  auto r2 = evaluate_pair(a, b, false);
  CHECK(!r2.dask);
  CHECK(has(r2.findings, finding_code::kPackageMismatch, Severity::info));
}

TEST_CASE("caps: a live Dask peer's codecs are inferred from its handshake and versions") {
  const Value versions = map({{"host", map({{"python", str("3.11.2.final.0")}})},
                              {"packages", map({{"distributed", str("2022.12.1+ds.1")},
                                                {"lz4", Value::nil()},
                                                {"zstandard", str("0.20.0")},
                                                {"snappy", Value::nil()}})}});
  Peer p = peer_from_live("tcp://127.0.0.1:1", "Worker", "127.0.0.1", hs("zstd"), &versions, nullptr);
  CHECK(p.codecs == std::vector<std::string>{"zstd", "zlib"});
  CHECK(p.lacks("lz4"));
  CHECK(!p.lacks("snappy"));  // python-snappy reports no version: unknown
  CHECK(!p.gpu);
  CHECK(p.python == "3.11.2");
  CHECK(p.release.name() == "2022.12");
  CHECK(!p.published);

  // Without a versions reply, only the advertised codec and zlib are known.
  Peer q = peer_from_live("tcp://127.0.0.1:2", "", "127.0.0.1", hs("lz4"), nullptr, nullptr);
  CHECK(q.codecs == std::vector<std::string>{"lz4", "zlib"});
  CHECK(!q.lacks("zstd"));

  // 2022.12 imports a module for each name: python-snappy is always nil.
  Value old = versions;
  old.find("packages")->set("python-snappy", Value::nil());
  Peer o = peer_from_live("tcp://127.0.0.1:3", "Worker", "127.0.0.1", hs("zstd"), &old, nullptr);
  CHECK(!o.lacks("snappy"));
  CHECK(!o.decodes("snappy"));
}

TEST_CASE("caps: from 2025.4 the versions reply tells snappy (distribution metadata)") {
  const auto reply = [](const Value& snappy) {
    return map({{"packages", map({{"distributed", str("2026.7.1")}, {"lz4", str("4.0.2+dfsg")},
                                  {"zstandard", str("0.20.0")}, {"python-snappy", snappy}})}});
  };
  const Value with = reply(str("0.5.3"));
  Peer p = peer_from_live("tcp://127.0.0.2:1", "Worker", "127.0.0.2", hs(nullptr), &with, nullptr);
  CHECK(p.release.name() == "newest");
  CHECK(p.codecs == std::vector<std::string>{"lz4", "snappy", "zstd", "zlib"});
  CHECK(p.codecs_unknown.empty());
  const Value without = reply(Value::nil());
  Peer q = peer_from_live("tcp://127.0.0.2:2", "Worker", "127.0.0.2", hs(nullptr), &without, nullptr);
  CHECK(q.lacks("snappy"));
  // Not a package difference worth naming: the codec findings say it.
  Peer a = peer("a", "lz4", {"lz4"});
  a.packages = p.packages;
  Peer b = peer("b", "lz4", {"lz4"});
  b.packages = q.packages;
  for (const auto& f : evaluate_pair(a, b, false).findings)
    CHECK(f.message.find("python-snappy") == std::string::npos);
}

TEST_CASE("caps: a dask-caps peer publishes its capabilities in the handshake") {
  Capabilities c;
  c.codecs = {"zstd", "zlib"};
  c.max_pickle_protocol = 4;
  c.gpu = true;
  Value m = hs("zstd", 4).to_msgpack();
  m.set("capabilities", capabilities_to_msgpack(c));
  const Handshake h = *handshake_from_msgpack(m);
  Peer p = peer_from_live("tcp://127.0.0.1:1", "Scheduler", "127.0.0.1", h, nullptr, nullptr);
  CHECK(p.published);
  CHECK(p.codecs == c.codecs);
  CHECK(p.max_pickle_protocol == 4);
  CHECK(p.gpu == true);
  CHECK(p.lacks("lz4"));
  auto back = capabilities_from_msgpack(capabilities_to_msgpack(c));
  REQUIRE(back);
  CHECK(back->codecs == c.codecs);
  CHECK(!capabilities_from_msgpack(map({{"codecs", num(1)}})));
  CHECK(p.published_by.empty());
}

TEST_CASE("caps: the Dask plugin's capabilities key: its version and role, and what makes it malformed") {
  // As dask_caps.plugin publishes it (docs/protocol.md §2.9).
  Value key = map({{"codecs", arr({str("zstd"), str("lz4"), str("snappy"), str("zlib")})},
                   {"max-pickle-protocol", num(5)},
                   {"gpu", Value::boolean(false)},
                   {"dask-caps", str("0.1.0")},
                   {"role", str("worker")},
                   {"a-later-member", num(7)}});
  auto c = capabilities_from_msgpack(key);
  REQUIRE(c);
  CHECK(c->codecs == std::vector<std::string>{"zstd", "lz4", "snappy", "zlib"});
  CHECK(c->dask_caps == "0.1.0");
  CHECK(c->role == "worker");
  auto back = capabilities_from_msgpack(capabilities_to_msgpack(*c));
  REQUIRE(back);
  CHECK(back->dask_caps == "0.1.0");
  CHECK(back->role == "worker");
  CHECK(!capabilities_to_msgpack(Capabilities{}).find("dask-caps"));

  Value m = hs("zstd").to_msgpack();
  m.set("capabilities", key);
  Peer p = peer_from_live("tcp://127.0.0.3:1", "Worker", "127.0.0.3", *handshake_from_msgpack(m), nullptr, nullptr);
  CHECK(p.published);
  CHECK(p.published_by == "0.1.0");
  CHECK(p.codecs.front() == "zstd");

  // Malformed: the peer is read as a plain Dask peer (its advertised codec).
  // (No structured binding: clang 14 does not capture one in CAPTURE's lambda.)
  for (const auto& entry : std::vector<std::pair<const char*, Value>>{
           {"dask-caps", num(1)}, {"role", Value::boolean(true)}, {"max-pickle-protocol", num(-1)},
           {"gpu", str("no")}}) {
    const char* member = entry.first;
    const Value& bad = entry.second;
    CAPTURE(member);
    Value k = key;
    k.set(member, bad);
    CHECK(!capabilities_from_msgpack(k));
    Value hm = hs("zstd").to_msgpack();
    hm.set("capabilities", k);
    Peer plain = peer_from_live("tcp://127.0.0.3:1", "Worker", "127.0.0.3", *handshake_from_msgpack(hm), nullptr,
                                nullptr);
    CHECK(!plain.published);
    CHECK(plain.published_by.empty());
    CHECK(plain.codecs == std::vector<std::string>{"zstd", "zlib"});
  }
}

TEST_CASE("caps: relay through the scheduler names the client that cannot decode (dask/distributed#7774)") {
  Peer client = peer("this host", nullptr, {"zstd", "zlib"}, 5, "3.11.2", "client");
  Peer sched = peer("tcp://10.0.0.1:8786", "lz4", {"lz4", "zlib"}, 5, "3.11.2", "Scheduler");
  Peer w1 = peer("tcp://10.0.0.2:1", "lz4", {"lz4", "zlib"});
  Peer w2 = peer("tcp://10.0.0.3:1", "lz4", {"lz4", "zlib"});
  const auto no_same_host = [](const Peer&, const Peer&) { return false; };

  const Peer* ws[] = {&w1, &w2};
  auto r = evaluate_relay(client, sched, ws, no_same_host);
  REQUIRE(r.findings.size() == 1);
  const Finding& f = r.findings[0];
  CHECK(f.code == finding_code::kCodecUnavailable);
  CHECK(f.severity == Severity::error);
  CHECK(f.message.starts_with("this host will receive data that 2 workers"));
  CHECK(f.message.find("KeyError('lz4')") != std::string::npos);
  CHECK(f.hint.find("pip install lz4") != std::string::npos);
  REQUIRE(r.broken.size() == 2);
  CHECK(r.broken[0].to == "this host");
  CHECK(r.broken[0].codec == "lz4");
  CHECK(!r.broken[0].predicted);

  // No workers seen: predicted from the scheduler's own codec, a warning.
  auto p = evaluate_relay(client, sched, {}, no_same_host);
  REQUIRE(p.findings.size() == 1);
  CHECK(p.findings[0].severity == Severity::warning);
  CHECK(p.broken[0].predicted);

  // Workers that negotiate nothing with the scheduler relay nothing.
  Peer w3 = peer("tcp://10.0.0.4:1", "zstd", {"zstd"});
  const Peer* only_w3[] = {&w3};
  CHECK(evaluate_relay(client, sched, only_w3, no_same_host).findings.empty());

  // client -> scheduler -> worker: what the client compresses reaches a
  // worker without that codec.
  Peer c2 = peer("laptop.json", "lz4", {"lz4", "zlib"}, 5, "3.11.2", "file");
  Peer lacking = peer("tcp://10.0.0.5:1", "zstd", {"zstd"});
  const Peer* w_lacking[] = {&lacking};
  auto s = evaluate_relay(c2, sched, w_lacking, no_same_host);
  REQUIRE(s.findings.size() == 1);
  CHECK(s.findings[0].message.find("forwarded unchanged to worker tcp://10.0.0.5:1") != std::string::npos);
}

TEST_CASE("caps: identical peers share a signature, any difference splits them") {
  Peer a = peer("tcp://10.0.0.2:1", "lz4", {"lz4"});
  Peer b = peer("tcp://10.0.0.3:1", "lz4", {"lz4"});
  CHECK(capability_signature(a) == capability_signature(b));
  b.packages["numpy"] = "1.26.0";
  CHECK(capability_signature(a) != capability_signature(b));
  Peer c = peer("tcp://10.0.0.4:1", "zstd", {"lz4"});
  CHECK(capability_signature(a) != capability_signature(c));
}

TEST_CASE("caps: severities parse and order") {
  CHECK(severity_from_string("warning") == Severity::warning);
  CHECK(!severity_from_string("fatal"));
  CHECK(to_string(Severity::error) == "error");
  std::vector<Finding> fs{{Severity::info, "a", "", "", {}, ""}, {Severity::warning, "b", "", "", {}, ""}};
  CHECK(worst_severity(fs) == Severity::warning);
  CHECK(!worst_severity({}));
  CHECK(python_version_from_string("3.11.2.final.0") == "3.11.2");
  CHECK(python_version_from_string("x") == "");
}

TEST_CASE("caps: a capabilities key past the limits makes a plain peer that says why") {
  Capabilities c;
  c.codecs = {"zstd", "zlib"};
  c.role = std::string(std::size_t{10} << 20, 'r');
  Value m = hs("zstd", 4).to_msgpack();
  m.set("capabilities", capabilities_to_msgpack(c));
  // Read off the wire: the key is taken out, the refusal kept.
  const Handshake h = *handshake_from_peer(m, Limits{});
  Peer p = peer_from_live("tcp://127.0.0.1:1", "Scheduler", "127.0.0.1", h, nullptr, nullptr);
  CHECK(!p.published);
  CHECK(p.published_by.empty());
  CHECK(p.codecs.front() == "zstd");  // inferred from the advertised codec
  CHECK(p.max_pickle_protocol == 4);
  CHECK(p.capabilities_refused.find("\"role\" is 10485760 bytes, more than 64") != std::string::npos);
  CHECK(p.capabilities_refused.size() < 512);
  // Read from a handshake that still holds it: the same.
  Peer q = peer_from_live("tcp://127.0.0.1:1", "Scheduler", "127.0.0.1", *handshake_from_msgpack(m), nullptr, nullptr);
  CHECK(!q.published);
  CHECK(q.capabilities_refused == p.capabilities_refused);
  // Wider limits (the commands' flags) take it.
  Limits wide;
  wide.max_capability_name = std::size_t{10} << 20;
  CHECK(peer_from_live("tcp://127.0.0.1:1", "Scheduler", "127.0.0.1", *handshake_from_msgpack(m), nullptr, nullptr,
                       wide)
            .published);
  // The identity's key is read the same way.
  Capabilities many;
  many.codecs.assign(33, "lz4");
  Value identity = Value::map();
  Value entry = Value::map();
  entry.set("capabilities", capabilities_to_msgpack(many));
  identity.set("dask-caps", entry);
  Peer r = peer_from_live("tcp://127.0.0.1:1", "Scheduler", "127.0.0.1", hs("zstd"), nullptr, &identity);
  CHECK(!r.published);
  CHECK(r.capabilities_refused.find("\"codecs\" lists 33 names") != std::string::npos);
}
