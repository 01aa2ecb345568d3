#include "daskcaps/wire/handshake.h"

#include <doctest/doctest.h>

#include <string>

using namespace daskcaps;
using msgpack::Value;

namespace {

Value key_with(std::vector<std::string> codecs, std::string role = "worker", std::string version = "0.1.0") {
  msgpack::Array list;
  list.reserve(codecs.size());
  for (auto& c : codecs) list.push_back(Value::str(std::move(c)));
  Value k = Value::map();
  k.set("codecs", Value::array(std::move(list)));
  k.set("max-pickle-protocol", Value::integer(5));
  k.set("gpu", Value::boolean(false));
  k.set("dask-caps", Value::str(std::move(version)));
  k.set("role", Value::str(std::move(role)));
  return k;
}

Value handshake_with(Value key) {
  Value m = Value::map();
  m.set("compression", Value::str("lz4"));
  m.set("python", Value::array({Value::integer(3), Value::integer(11), Value::integer(2)}));
  m.set("pickle-protocol", Value::integer(5));
  m.set("capabilities", std::move(key));
  return m;
}

CapabilitiesKey read(Value key, const Limits& limits = Limits{}) {
  return read_capabilities(handshake_with(std::move(key)), limits);
}

}  // namespace

TEST_CASE("read_capabilities: the plugin's key within the limits is published") {
  auto k = read(key_with({"zstd", "lz4", "snappy", "zlib"}));
  REQUIRE(k.state == CapabilitiesKey::State::published);
  CHECK(k.capabilities.codecs == std::vector<std::string>{"zstd", "lz4", "snappy", "zlib"});
  CHECK(k.capabilities.role == "worker");
  CHECK(k.capabilities.dask_caps == "0.1.0");
  CHECK(k.refused.empty());
  // At the limits exactly: 32 names of 64 characters.
  std::vector<std::string> many(32, std::string(64, 'z'));
  CHECK(read(key_with(many, std::string(64, 'r'), std::string(64, 'v'))).state == CapabilitiesKey::State::published);
  // No key: absent, not refused.
  Value m = handshake_with(Value::nil());
  m.erase("capabilities");
  CHECK(read_capabilities(m, Limits{}).state == CapabilitiesKey::State::absent);
}

TEST_CASE("read_capabilities: past the limits, the key is refused with one bounded, escaped line") {
  const auto refused = [](const CapabilitiesKey& k) {
    CHECK(k.state == CapabilitiesKey::State::refused);
    CHECK(k.capabilities.codecs.empty());
    CHECK(k.refused.find('\n') == std::string::npos);
    CHECK(k.refused.find('\0') == std::string::npos);
    CHECK(k.refused.size() < 512);
    CHECK(k.refused.find("read as a plain Dask peer") != std::string::npos);
    return k.refused;
  };
  SUBCASE("a newline that would forge a log line") {
    auto why = refused(read(key_with({"lz4\n2026-12-03 13:00:00,000 - distributed.scheduler - CRITICAL - forged"})));
    CHECK(why.find("not printable ASCII") != std::string::npos);
    CHECK(why.find("lz4\\n2026") != std::string::npos);
  }
  SUBCASE("a NUL") { refused(read(key_with({std::string("lz4\0", 4)}))); }
  SUBCASE("a byte past ASCII") { refused(read(key_with({"lz\xc3\xa9"}))); }
  SUBCASE("a 50 MiB codec name") {
    auto why = refused(read(key_with({"lz4", std::string(std::size_t{50} << 20, 'x')})));
    CHECK(why.find("codec name 1 is 52428800 bytes, more than 64 (--max-capability-name)") != std::string::npos);
  }
  SUBCASE("a 10 MiB role") {
    auto why = refused(read(key_with({"lz4"}, std::string(std::size_t{10} << 20, 'r'))));
    CHECK(why.find("\"role\" is 10485760 bytes") != std::string::npos);
  }
  SUBCASE("a 65-byte version") { refused(read(key_with({"lz4"}, "worker", std::string(65, 'v')))); }
  SUBCASE("a million codec names") {
    std::vector<std::string> names(1'000'000, "lz4");
    auto why = refused(read(key_with(std::move(names))));
    CHECK(why.find("\"codecs\" lists 1000000 names, more than 32 (--max-capability-codecs)") != std::string::npos);
  }
  SUBCASE("33 codec names") { refused(read(key_with(std::vector<std::string>(33, "lz4")))); }
  SUBCASE("a key of the wrong shape") {
    refused(read(Value::str("lz4")));
    Value k = key_with({"lz4"});
    k.set("gpu", Value::str("no"));
    refused(read(k));
  }
}

TEST_CASE("read_capabilities: the limits are the caller's (the commands' flags)") {
  Limits wide;
  wide.max_capability_codecs = 40;
  wide.max_capability_name = 100;
  CHECK(read(key_with(std::vector<std::string>(40, std::string(100, 'c'))), wide).state ==
        CapabilitiesKey::State::published);
  Limits narrow;
  narrow.max_capability_codecs = 1;
  CHECK(read(key_with({"lz4", "zstd"}), narrow).state == CapabilitiesKey::State::refused);
}

TEST_CASE("handshake_from_peer: a refused key is taken out of the handshake, nothing of it kept") {
  const Value m = handshake_with(key_with({"lz4"}, std::string(std::size_t{10} << 20, 'r')));
  auto h = handshake_from_peer(m, Limits{});
  REQUIRE(h);
  CHECK(h->raw.find("capabilities") == nullptr);
  CHECK(msgpack::encode(h->raw).size() < 256);
  CHECK(h->capabilities_refused.find("\"role\" is 10485760 bytes") != std::string::npos);
  // Dask's own keys are as they came.
  CHECK(h->compression->name == "lz4");
  CHECK(h->pickle_protocol == 5);
  CHECK(h->python_version() == "3.11.2");

  // A key within the limits stays, and nothing is said.
  auto ok = handshake_from_peer(handshake_with(key_with({"lz4"})), Limits{});
  REQUIRE(ok);
  CHECK(ok->raw.find("capabilities") != nullptr);
  CHECK(ok->capabilities_refused.empty());
}
