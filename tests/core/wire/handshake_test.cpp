#include "daskcaps/wire/handshake.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/wire/internal/msgpack_view.h"

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
    CHECK(why.find("codec name 1 is 52428800 bytes, more than 64 (limit max_capability_name)") != std::string::npos);
  }
  SUBCASE("a 10 MiB role") {
    auto why = refused(read(key_with({"lz4"}, std::string(std::size_t{10} << 20, 'r'))));
    CHECK(why.find("\"role\" is 10485760 bytes") != std::string::npos);
  }
  SUBCASE("a 65-byte version") { refused(read(key_with({"lz4"}, "worker", std::string(65, 'v')))); }
  SUBCASE("a million codec names") {
    std::vector<std::string> names(1'000'000, "lz4");
    auto why = refused(read(key_with(std::move(names))));
    CHECK(why.find("\"codecs\" lists 1000000 names, more than 32 (limit max_capability_codecs)") != std::string::npos);
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

namespace {

/// A view of a value that is not there: a list that says it has `count`
/// names, or a string that says it has `size` bytes (all 'x', or a newline
/// at `bad`), recording what the reader asks of it.
struct Asked {
  std::uint64_t items = 0;       // item() calls
  std::uint64_t head_bytes = 0;  // the most head() was asked for
};

class Lazy final : public ValueView {
 public:
  enum class What : std::uint8_t { key, list, name };
  Lazy(What what, std::uint64_t n, Asked& asked, std::uint64_t bad = ~std::uint64_t{0})
      : what_(what), n_(n), bad_(bad), asked_(asked) {}

  Kind kind() const override { return what_ == What::key ? Kind::map : what_ == What::list ? Kind::list : Kind::string; }
  std::string type_text() const override { return "a lazy value"; }
  bool boolean() const override { return false; }
  std::optional<std::int64_t> integer() const override { return std::nullopt; }
  std::uint64_t size() const override { return what_ == What::key ? 1 : n_; }
  std::uint64_t printable_ascii_prefix() const override { return what_ == What::name ? std::min(bad_, n_) : 0; }
  std::string_view head(std::uint64_t n) const override {
    asked_.head_bytes = std::max(asked_.head_bytes, n);
    text_.assign(static_cast<std::size_t>(std::min(n, n_)), 'x');
    if (bad_ < text_.size()) text_[static_cast<std::size_t>(bad_)] = '\n';
    return text_;
  }
  std::unique_ptr<ValueView> item(std::uint64_t i) const override {
    ++asked_.items;
    if (what_ != What::list || i >= n_) return nullptr;
    return std::make_unique<Lazy>(What::name, 3, asked_);
  }
  std::unique_ptr<ValueView> member(std::string_view key) const override {
    if (what_ != What::key || key != "codecs") return nullptr;
    return std::make_unique<Lazy>(What::list, n_, asked_);
  }

 private:
  What what_;
  std::uint64_t n_, bad_;
  Asked& asked_;
  mutable std::string text_;
};

/// A holder {"capabilities": key}.
class Holder final : public ValueView {
 public:
  explicit Holder(std::unique_ptr<ValueView> key) : key_(std::move(key)) {}
  Kind kind() const override { return Kind::map; }
  std::string type_text() const override { return "a holder"; }
  bool boolean() const override { return false; }
  std::optional<std::int64_t> integer() const override { return std::nullopt; }
  std::uint64_t size() const override { return 1; }
  std::uint64_t printable_ascii_prefix() const override { return 0; }
  std::string_view head(std::uint64_t) const override { return {}; }
  std::unique_ptr<ValueView> item(std::uint64_t) const override { return nullptr; }
  std::unique_ptr<ValueView> member(std::string_view key) const override {
    if (key != "capabilities" || !key_) return nullptr;
    auto k = std::move(key_);  // handed out once, as the reader asks once
    return k;
  }

 private:
  mutable std::unique_ptr<ValueView> key_;
};

}  // namespace

TEST_CASE("read_capabilities through a view: nothing past a refused count or length is read") {
  Asked asked;
  SUBCASE("a million names: the count alone") {
    const auto k = read_capabilities(Holder(std::make_unique<Lazy>(Lazy::What::key, 1'000'000, asked)), Limits{});
    REQUIRE(k.state == CapabilitiesKey::State::refused);
    CHECK(asked.items == 0);
    CHECK(k.refusal.problem == CapabilitiesRefusal::Problem::too_many_codecs);
    CHECK(k.refusal.member == "codecs");
    CHECK(k.refusal.count == 1'000'000);
    CHECK(k.refusal.limit == 32);
    CHECK(k.refused == "its \"capabilities\" handshake key is refused: \"codecs\" lists 1000000 names, more than 32 "
                       "(limit max_capability_codecs); read as a plain Dask peer");
  }
  SUBCASE("32 names are read, and copied") {
    const auto k = read_capabilities(Holder(std::make_unique<Lazy>(Lazy::What::key, 32, asked)), Limits{});
    REQUIRE(k.state == CapabilitiesKey::State::published);
    CHECK(asked.items == 32);
    CHECK(k.capabilities.codecs == std::vector<std::string>(32, "xxx"));
  }
  SUBCASE("a 50 MiB name: its length alone; a bad byte: the bytes shown alone") {
    const Lazy name(Lazy::What::name, std::uint64_t{50} << 20, asked);
    CapabilitiesRefusal r;
    CHECK(capability_name_problem(name, Limits{}, &r) == "is 52428800 bytes, more than 64 (limit max_capability_name)");
    CHECK(asked.head_bytes == 0);
    CHECK(r.problem == CapabilitiesRefusal::Problem::too_long);
    CHECK(r.count == 52428800);
    const Lazy forged(Lazy::What::name, std::uint64_t{50} << 20, asked, 3);
    CHECK(capability_name_problem(forged, Limits{}, &r) ==
          "holds a byte that is not printable ASCII: \"xxx\\n" + std::string(60, 'x') + "...(+52428736 bytes)\"");
    CHECK(asked.head_bytes == 64);
    CHECK(r.problem == CapabilitiesRefusal::Problem::not_printable_ascii);
  }
}

TEST_CASE("read_capabilities: a refusal's figures say where, for a caller's own words") {
  Value k = key_with({"lz4", "zstd\t"});
  auto r = read(k).refusal;
  CHECK(r.problem == CapabilitiesRefusal::Problem::not_printable_ascii);
  CHECK(r.member == "codecs");
  CHECK(r.index == 1);
  k = key_with({"lz4"}, std::string(65, 'r'));
  r = read(k).refusal;
  CHECK(r.problem == CapabilitiesRefusal::Problem::too_long);
  CHECK(r.member == "role");
  CHECK(!r.index);
  CHECK(r.count == 65);
  CHECK(read(Value::integer(3)).refusal.problem == CapabilitiesRefusal::Problem::not_a_map);
  CHECK(read(Value::integer(3)).refused ==
        "its \"capabilities\" handshake key is refused: a msgpack int, not a map; read as a plain Dask peer");
  k = key_with({"lz4"});
  k.set("max-pickle-protocol", Value::integer(-1));
  CHECK(read(k).refusal.problem == CapabilitiesRefusal::Problem::bad_pickle_protocol);
  k = key_with({"lz4"});
  k.set("gpu", Value::nil());
  CHECK(read(k).refusal.problem == CapabilitiesRefusal::Problem::not_a_boolean);
}

TEST_CASE("publish_capabilities: the one writer of the key, read back by the one reader") {
  Handshake h;
  h.compression = CompressionValue::nil();
  h.python = std::vector<std::int64_t>{3, 11, 2};
  h.pickle_protocol = 4;
  h.raw = Value::map();
  h.raw.set("extra", Value::integer(1));  // kept, after Dask's three
  Capabilities c;
  c.codecs = {"zstd", "lz4"};
  c.max_pickle_protocol = 4;
  c.gpu = true;
  c.role = "client";
  publish_capabilities(h, c);
  // Dask's keys in Dask's order, raw's others, then the key.
  std::vector<std::string> keys;
  for (const auto& [name, value] : std::as_const(h.raw).as_map()) keys.push_back(name.as_str());
  CHECK(keys == std::vector<std::string>{"compression", "python", "pickle-protocol", "extra", "capabilities"});
  const CapabilitiesKey k = read_capabilities(h.raw, Limits{});
  REQUIRE(k.state == CapabilitiesKey::State::published);
  CHECK(k.capabilities.codecs == c.codecs);
  CHECK(k.capabilities.max_pickle_protocol == 4);
  CHECK(k.capabilities.gpu);
  CHECK(k.capabilities.role == "client");
  // Written again, the key is replaced, not repeated.
  c.codecs = {"lz4"};
  write_capabilities(h.raw, c);
  CHECK(std::as_const(h.raw).as_map().size() == 5);
  CHECK(read_capabilities(h.raw, Limits{}).capabilities.codecs == std::vector<std::string>{"lz4"});
  // The value alone reads as the key does; a value that is not a map is refused.
  const Value v = capabilities_to_msgpack(c);
  CHECK(read_capabilities_value(MsgpackView(v), Limits{}).state == CapabilitiesKey::State::published);
  CHECK(read_capabilities_value(MsgpackView(Value::integer(3)), Limits{}).state == CapabilitiesKey::State::refused);
}
