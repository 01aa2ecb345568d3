#include "daskcaps/caps/probe.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "daskcaps/caps/caps.h"
#include "core/caps/internal/probe_json.h"
#include "support/prefixes.h"

using namespace daskcaps;

namespace {

// A probe with every part filled, as on a GPU host with Dask.
HostProbe full_probe() {
  HostProbe p;
  p.tool_version = "0.1.0";
  p.hostname = "node-1";
  p.codecs = build_codecs();
  p.pickle_protocols_read = pickle_protocols_read();
  p.pickle_protocols_write = {4, 5};
  p.gpu.available = true;
  p.gpu.driver = "13.0";
  p.gpu.devices = {{0, "NVIDIA H200", "9.0", 150109880320ull}, {1, "NVIDIA A10", "8.6", 23609475072ull}};
  PythonEnv py;
  py.executable = "/usr/bin/python3";
  py.version = "3.11.2";
  py.pickle_protocol = 5;
  py.dask = "2022.12.1";
  py.distributed = "2022.12.1";
  py.compression_config = CompressionValue::none_false();
  py.compression = CompressionValue::none_false();
  py.compressions = {"lz4", "zlib"};
  py.packages = {{"numpy", "1.24.2"}, {"cupy", std::nullopt}, {"lz4", "4.0.2"}};
  p.python = py;
  p.handshake = *dask_handshake(py);
  p.capabilities = capabilities_of(p);
  return p;
}

Error parse_error(std::string_view text) {
  auto r = parse_probe_file(text);
  REQUIRE(!r);
  return r.error();
}

std::string with_schema(const std::string& body) {
  return R"({"schema": "dask-caps.probe/1")" + (body.empty() ? "" : ", " + body) + "}";
}

}  // namespace

TEST_CASE("probe_file: keys are exactly docs/cli.md §2's, schema first") {
  const OrderedJson j = probe_to_json(full_probe());
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"schema", "dask-caps-version", "hostname", "codecs",
                                         "pickle-protocols", "gpu", "python", "python-error",
                                         "handshake", "capabilities"});
  CHECK(j["schema"] == "dask-caps.probe/1");
  CHECK(j["gpu"].dump() ==
        R"({"available":true,"driver":"13.0","devices":[{"index":0,"name":"NVIDIA H200",)"
        R"("compute-capability":"9.0","memory-bytes":150109880320},{"index":1,"name":"NVIDIA A10",)"
        R"("compute-capability":"8.6","memory-bytes":23609475072}],"error":null})");
  CHECK(j["handshake"].dump() == R"({"compression":false,"python":[3,11,2],"pickle-protocol":5})");
  CHECK(j["python"].dump() ==
        R"({"executable":"/usr/bin/python3","version":"3.11.2","pickle-protocol":5,)"
        R"("dask":"2022.12.1","distributed":"2022.12.1","compression-config":false,)"
        R"("compression":false,"compressions":["lz4","zlib"],)"
        R"("packages":{"cupy":null,"lz4":"4.0.2","numpy":"1.24.2"}})");
  CHECK(j["capabilities"].dump() == R"({"codecs":["lz4","zlib"],"max-pickle-protocol":5,"gpu":true})");
  CHECK(j["pickle-protocols"].dump() == R"({"read":[0,1,2,3,4,5],"write":[4,5]})");
  CHECK(j["codecs"][0].dump().find(R"({"name":"lz4","library":"liblz4","version":")") == 0);
}

TEST_CASE("probe_file: a probe survives the round trip") {
  const HostProbe p = full_probe();
  const std::string text = probe_to_json_text(p);
  CHECK(text.back() == '\n');
  auto back = parse_probe_file(text);
  REQUIRE(back);
  CHECK(probe_to_json_text(*back) == text);
  CHECK(back->hostname == "node-1");
  CHECK(back->gpu.devices[1].memory_bytes == 23609475072ull);
  CHECK(back->python->compression_config == CompressionValue::none_false());
  CHECK(*back->handshake->compression == CompressionValue::none_false());
  CHECK(back->capabilities.codecs == std::vector<std::string>{"lz4", "zlib"});
}

TEST_CASE("probe_file: a probe without Python survives the round trip") {
  HostProbe p = full_probe();
  p.python.reset();
  p.handshake.reset();
  p.python_error = "no Python with distributed found";
  p.gpu = GpuInfo{};
  p.gpu.error = "libcuda.so.1: cannot open shared object file: No such file or directory";
  p.capabilities = capabilities_of(p);
  const std::string text = probe_to_json_text(p);
  auto back = parse_probe_file(text);
  REQUIRE(back);
  CHECK(probe_to_json_text(*back) == text);
  CHECK(!back->python);
  CHECK(!back->handshake);
  CHECK(*back->python_error == "no Python with distributed found");
  CHECK(!back->gpu.available);
}

TEST_CASE("probe_file: a hand-written handshake is enough") {
  auto p = parse_probe_file(with_schema(
      R"("hostname": "laptop", "handshake": {"compression": "lz4", "python": [3, 10, 4], "pickle-protocol": 5})"));
  REQUIRE(p);
  CHECK(p->hostname == "laptop");
  CHECK(p->codecs.empty());
  CHECK(!p->python);
  CHECK(!p->gpu.available);
  CHECK(p->handshake->python_version() == "3.10.4");
  CHECK(p->capabilities.codecs == std::vector<std::string>{"lz4"});
  CHECK(p->capabilities.max_pickle_protocol == 5);
  CHECK(!p->capabilities.gpu);
}

TEST_CASE("probe_file: the Dask plugin's key in the handshake survives the round trip") {
  // What probe writes where a client on the host loads dask_caps.plugin.
  const std::string body =
      R"("hostname": "laptop", "handshake": {"compression": null, "python": [3, 11, 2], "pickle-protocol": 5, )"
      R"("capabilities": {"codecs": ["lz4", "snappy", "zstd", "zlib"], "max-pickle-protocol": 5, "gpu": false, )"
      R"("dask-caps": "0.1.0"}})";
  auto p = parse_probe_file(with_schema(body));
  REQUIRE(p);
  const auto* key = p->handshake->raw.find("capabilities");
  REQUIRE(key);
  auto caps = capabilities_from_msgpack(*key);
  REQUIRE(caps);
  CHECK(caps->codecs.size() == 4);
  CHECK(caps->dask_caps == "0.1.0");
  auto back = parse_probe_file(probe_to_json_text(*p));
  REQUIRE(back);
  CHECK(probe_to_json_text(*back) == probe_to_json_text(*p));
  CHECK(probe_to_json_text(*p).find(R"("dask-caps": "0.1.0")") != std::string::npos);
  CHECK(peer_from_probe(*p, "laptop.json", "file").published_by == "0.1.0");
  // Without the key nothing is said of a publisher.
  auto plain = parse_probe_file(with_schema(R"("handshake": {"compression": null, "pickle-protocol": 5})"));
  REQUIRE(plain);
  CHECK(probe_to_json_text(*plain).find("dask-caps\"") == std::string::npos);
  CHECK(peer_from_probe(*plain, "x.json", "file").published_by.empty());
  auto missing = parse_probe_file(with_schema(R"("handshake": {"compression": null, "capabilities": {"gpu": true}})"));
  REQUIRE(!missing);
  CHECK(missing.error().message().find("/handshake/capabilities") != std::string::npos);
}

TEST_CASE("probe_file: an incomplete handshake is kept as written") {
  auto p = parse_probe_file(with_schema(R"("handshake": {"compression": null, "python": [3, 7, 9]})"));
  REQUIRE(p);
  CHECK(p->handshake->missing_keys() == std::vector<std::string>{"pickle-protocol"});
  CHECK(*p->handshake->compression == CompressionValue::nil());
}

TEST_CASE("probe_file: a hand-written python part gives Dask's handshake and capabilities") {
  auto p = parse_probe_file(with_schema(
      R"("python": {"version": "3.11.2", "pickle-protocol": 5, "distributed": "2022.12.1",)"
      R"( "compressions": ["snappy", "zlib", "zstd"]}, "gpu": {"devices": [{"name": "A100"}]})"));
  REQUIRE(p);
  CHECK(p->python->compression_config == CompressionValue::named("auto"));
  REQUIRE(p->handshake);
  CHECK(*p->handshake->compression == CompressionValue::named("snappy"));
  CHECK(*p->handshake->python == std::vector<std::int64_t>{3, 11, 2});
  CHECK(*p->handshake->pickle_protocol == 5);
  CHECK(p->capabilities.codecs == std::vector<std::string>{"snappy", "zstd", "zlib"});
  CHECK(p->gpu.available);
  CHECK(p->gpu.devices[0].index == 0);
  CHECK(p->capabilities.gpu);
}

TEST_CASE("probe_file: given capabilities override the derived ones key by key") {
  auto p = parse_probe_file(with_schema(
      R"("handshake": {"compression": "lz4", "python": [3, 11, 2], "pickle-protocol": 5},)"
      R"( "capabilities": {"codecs": ["zstd", "lz4"]})"));
  REQUIRE(p);
  CHECK(p->capabilities.codecs == std::vector<std::string>{"zstd", "lz4"});
  CHECK(p->capabilities.max_pickle_protocol == 5);
}

TEST_CASE("probe_file: not JSON, wrong kind, wrong version") {
  Error e = parse_error("hello");
  CHECK(e.code == Errc::bad_magic);
  CHECK(e.offset == 0);
  CHECK(e.message() ==
        "@0x0: not a JSON document: parse error at line 1, column 1: syntax error while parsing "
        "value - invalid literal; last read: 'h'");

  e = parse_error("[1, 2]");
  CHECK(e.code == Errc::bad_magic);
  CHECK(e.message() == "not a probe file: the JSON document is an array, not an object");

  e = parse_error(R"({"handshake": {}})");
  CHECK(e.code == Errc::bad_magic);
  CHECK(e.message() == "not a probe file: no \"schema\" key (expected \"dask-caps.probe/1\")");

  e = parse_error(R"({"schema": "dask-caps.check/1"})");
  CHECK(e.code == Errc::bad_magic);
  CHECK(e.message() ==
        "not a probe file: schema is \"dask-caps.check/1\", expected \"dask-caps.probe/1\"");

  e = parse_error(R"({"schema": 1})");
  CHECK(e.code == Errc::bad_magic);
  CHECK(e.message() == "not a probe file: \"schema\" is an integer");

  e = parse_error(R"({"schema": "dask-caps.probe/2", "handshake": {}})");
  CHECK(e.code == Errc::unsupported_version);
  CHECK(e.message() ==
        "probe file schema \"dask-caps.probe/2\" is not supported (this build reads "
        "\"dask-caps.probe/1\")");
}

TEST_CASE("probe_file: missing required keys are named") {
  Error e = parse_error(with_schema(R"("python": null, "handshake": null, "gpu": {})"));
  CHECK(e.code == Errc::bad_value);
  CHECK(e.message() ==
        "probe file describes nothing: it needs at least one of \"handshake\", \"python\" or "
        "\"capabilities\"");

  e = parse_error(with_schema(R"("python": {"pickle-protocol": 5})"));
  CHECK(e.code == Errc::bad_value);
  CHECK(e.message() == "/python: missing required key \"version\"");

  e = parse_error(with_schema(R"("python": {"version": "3.11.2"})"));
  CHECK(e.message() == "/python: missing required key \"pickle-protocol\"");

  e = parse_error(with_schema(R"("capabilities": {}, "codecs": [{"name": "lz4"}, {"library": "x"}])"));
  CHECK(e.message() == "/codecs/1: missing required key \"name\"");
}

TEST_CASE("probe_file: wrong types are named with their JSON pointer") {
  struct Case {
    std::string body;
    std::string message;
  };
  const Case cases[] = {
      {R"("python": {"version": "3.11.2", "pickle-protocol": "5"})",
       "/python/pickle-protocol: expected an integer, found a string"},
      {R"("handshake": {"compression": true})",
       "/handshake/compression: expected a codec name, null or false, found a boolean"},
      {R"("handshake": {"python": [3, "11"]})",
       "/handshake/python/1: expected an integer, found a string"},
      {R"("handshake": [])", "/handshake: expected an object, found an array"},
      {R"("handshake": {"compression": "lz4", "capabilities": {"codecs": ["lz4"], "dask-caps": 1}})",
       "/handshake/capabilities/dask-caps: expected a string, found an integer"},
      {R"("handshake": {"compression": "lz4", "capabilities": []})",
       "/handshake/capabilities: expected an object, found an array"},
      {R"("capabilities": {"gpu": "yes"})", "/capabilities/gpu: expected a boolean, found a string"},
      {R"("capabilities": {}, "gpu": {"devices": [{"memory-bytes": -1}]})",
       "/gpu/devices/0/memory-bytes: expected a non-negative integer, found -1"},
      {R"("capabilities": {}, "pickle-protocols": {"read": [0, 1.5]})",
       "/pickle-protocols/read/1: expected an integer, found a number"},
      {R"("capabilities": {}, "hostname": 7)", "/hostname: expected a string, found an integer"},
      {R"("python": {"version": "3", "pickle-protocol": 5, "packages": {"a/b": 1}})",
       "/python/packages/a~1b: expected a string, found an integer"},
      {R"("python": {"version": "3", "pickle-protocol": 18446744073709551615})",
       "/python/pickle-protocol: integer 18446744073709551615 is too large"},
      {R"("python": {"version": "3", "pickle-protocol": 99999999999999999999})",
       "/python/pickle-protocol: expected an integer, found a number"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.body);
    Error e = parse_error(with_schema(c.body));
    CHECK(e.code == Errc::bad_value);
    CHECK(e.message() == c.message);
  }
}

TEST_CASE("probe_file: a capabilities key is bounded as a peer's key is") {
  // The key is read by read_capabilities, the reader of a peer's handshake
  // key, with the default Limits (32 names, 64 bytes, printable ASCII).
  std::string many = R"("capabilities": {"codecs": [)";
  for (int i = 0; i < 33; ++i) many += std::string(i ? "," : "") + "\"c" + std::to_string(i) + "\"";
  many += "]}";
  Error e = parse_error(with_schema(many));
  CHECK(e.code == Errc::limit_exceeded);
  CHECK(e.message() == "/capabilities/codecs: 33 codec names, more than 32");

  e = parse_error(with_schema(R"("capabilities": {"codecs": ["lz4", ")" + std::string(65, 'z') + R"("]})"));
  CHECK(e.code == Errc::limit_exceeded);
  CHECK(e.message() == "/capabilities/codecs/1: a string of 65 bytes, more than 64");

  e = parse_error(with_schema(R"("handshake": {"compression": "lz4", "capabilities": {"codecs": [], "role": "a\u001bb"}})"));
  CHECK(e.code == Errc::bad_value);
  CHECK(e.message() == R"(/handshake/capabilities/role: holds a byte that is not printable ASCII: "a\x1bb")");

  e = parse_error(with_schema(R"("capabilities": {"max-pickle-protocol": -1})"));
  CHECK(e.code == Errc::bad_value);
  CHECK(e.message() == "/capabilities/max-pickle-protocol: integer -1 is below 0");

  // At the bounds, and with members left out: those come from the rest.
  std::string at_bound = R"("capabilities": {"codecs": [)";
  for (int i = 0; i < 32; ++i) at_bound += std::string(i ? "," : "") + "\"" + std::string(64, char('a' + i % 26)) + "\"";
  at_bound += R"(], "gpu": true})";
  auto p = parse_probe_file(with_schema(at_bound));
  REQUIRE(p);
  CHECK(p->capabilities.codecs.size() == 32);
  CHECK(p->capabilities.gpu);
  CHECK(p->capabilities.max_pickle_protocol == 5);
}

TEST_CASE("probe_file: a python part naming a codec it lacks is refused") {
  Error e = parse_error(with_schema(
      R"("python": {"version": "3.11.2", "pickle-protocol": 5, "compression-config": "zstd", "compressions": ["lz4"]})"));
  CHECK(e.code == Errc::unknown_codec);
  CHECK(e.message() ==
        "/python: distributed.comm.compression is \"zstd\", which distributed cannot import here "
        "(Dask fails to start)");
}

TEST_CASE("probe_file: every strict prefix of a probe file is an error") {
  const std::string text = probe_to_json_text(full_probe());
  testsupport::for_each_strict_prefix(as_bytes(text), [&text](ByteSpan prefix) {
    auto r = parse_probe_file(as_chars(prefix));
    if (prefix.size() == text.size() - 1) {  // all but the final newline: complete
      CHECK(r.ok());
      return;
    }
    REQUIRE(!r);
    CHECK(r.error().code == Errc::bad_magic);
  });
}

TEST_CASE("probe_file: reading files names the path") {
  auto missing = read_probe_file("/nonexistent/probe.json");
  REQUIRE(!missing);
  CHECK(missing.error().code == Errc::not_found);
  CHECK(missing.error().message() == "/nonexistent/probe.json: cannot open: No such file or directory");

  char path[] = "/tmp/daskcaps-probe-file-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << R"({"schema": "dask-caps.probe/1", "python": {"version": 3}})";
  auto bad = read_probe_file(path);
  REQUIRE(!bad);
  CHECK(bad.error().message() == std::string(path) + ": /python/version: expected a string, found an integer");

  std::ofstream(path) << probe_to_json_text(full_probe());
  auto good = read_probe_file(path);
  REQUIRE(good);
  CHECK(good->hostname == "node-1");

  std::ofstream(path) << std::string(kMaxProbeFileBytes + 1, ' ');
  auto big = read_probe_file(path);
  REQUIRE(!big);
  CHECK(big.error().code == Errc::limit_exceeded);
  ::unlink(path);
}
