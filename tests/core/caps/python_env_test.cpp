#include "core/caps/internal/python_env.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/scoped_env.h"

using namespace daskcaps;
using testsupport::ScopedEnv;

namespace {

// The one interpreter every machine of this project has, with Debian's
// python3-distributed (scripts/install-deps.sh).
constexpr const char* kPython = "/usr/bin/python3";

// Output as the script prints it for a Dask 2026.7.1 interpreter (one line).
constexpr const char* kNewOutput =
    R"({"dask-caps-probe": 1, "executable": "/opt/dask/bin/python3", "version": "3.12.4", )"
    R"("pickle-protocol": 5, "dask": "2026.7.1", "distributed": "2026.7.1", "compression-config": "auto", )"
    R"("compressions": ["lz4", "zlib", "zstd"], "compression": null, )"
    R"("handshake": {"compression": null, "python": [3, 12, 4], "pickle-protocol": 5}, )"
    R"("packages": {"numpy": "2.1.0", "cupy": null, "lz4": "4.3.3", "msgpack": "1.1.0"}})";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

Error parse_error(const std::string& output) {
  auto env = parse_python_probe(output);
  REQUIRE(!env);
  return env.error();
}

// What /usr/bin/python3 says about itself, asked directly (not through the
// probe script): the oracle for the probe of the real interpreter.
nlohmann::json ask_python(const std::string& code) {
  const std::string cmd = std::string(kPython) + " -c '" + code + "' 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  REQUIRE(::pclose(p) == 0);
  return nlohmann::json::parse(out);
}

// A folder for PYTHONPATH whose package `name` fails to import.
class HiddenPackage {
 public:
  explicit HiddenPackage(const std::string& name) {
    char tmpl[] = "/tmp/daskcaps-python-env-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    pkg_ = dir_ + "/" + name;
    REQUIRE(::mkdir(pkg_.c_str(), 0755) == 0);
    std::ofstream(pkg_ + "/__init__.py") << "raise ImportError(\"hidden by the test\")\n";
  }
  ~HiddenPackage() {
    std::remove((pkg_ + "/__init__.py").c_str());
    ::rmdir(pkg_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, pkg_;
};

}  // namespace

TEST_CASE("python_env: every field of the script's output is read") {
  auto env = parse_python_probe(kNewOutput);
  REQUIRE(env);
  CHECK(env->executable == "/opt/dask/bin/python3");
  CHECK(env->version == "3.12.4");
  CHECK(env->pickle_protocol == 5);
  CHECK(env->dask == "2026.7.1");
  CHECK(env->distributed == "2026.7.1");
  CHECK(env->compression_config == CompressionValue::named("auto"));
  // null is a value here (Dask 2026 resolves "auto" to no compression
  // without lz4 in its defaults), not an absent key.
  REQUIRE(env->compression);
  CHECK(*env->compression == CompressionValue::nil());
  CHECK(env->compressions == std::vector<std::string>{"lz4", "zlib", "zstd"});
  CHECK(env->packages.size() == 4);
  CHECK(env->packages.at("numpy") == "2.1.0");
  CHECK(env->packages.at("cupy") == std::nullopt);
  CHECK(env->packages.at("msgpack") == "1.1.0");
  REQUIRE(env->dask_handshake);
  CHECK(*env->dask_handshake->compression == CompressionValue::nil());
  CHECK(*env->dask_handshake->python == std::vector<std::int64_t>{3, 12, 4});
  CHECK(*env->dask_handshake->pickle_protocol == 5);
}

TEST_CASE("python_env: optional parts of the output may be missing") {
  // An interpreter whose compression could not be resolved: no
  // "compression", no "compression-config", no handshake, no packages.
  auto env = parse_python_probe(
      R"({"dask-caps-probe": 1, "version": "3.9.2", "pickle-protocol": 5, "dask": "2021.1.0",
          "distributed": "2021.1.0", "compression-error": "AttributeError: x", "handshake-error": "KeyError: y"})");
  REQUIRE(env);
  CHECK(env->executable.empty());
  CHECK(!env->compression);
  CHECK(env->compression_config == CompressionValue::named("auto"));
  CHECK(env->compressions.empty());
  CHECK(env->packages.empty());
  CHECK(!env->dask_handshake);
  // Without a configuration, the resolved value stands for it.
  auto derived = parse_python_probe(replaced(kNewOutput, R"("compression-config": "auto", )", ""));
  REQUIRE(derived);
  CHECK(derived->compression_config == CompressionValue::nil());
  auto off = parse_python_probe(replaced(kNewOutput, R"("compression-config": "auto")", R"("compression-config": false)"));
  REQUIRE(off);
  CHECK(off->compression_config == CompressionValue::none_false());
}

TEST_CASE("python_env: output that is not the script's is an error value, never a guess") {
  Error e = parse_error("Python 3.11.2\n");
  CHECK(e.code == Errc::bad_value);
  CHECK(e.what == "not a Python interpreter with the probe's JSON output (it printed \"Python 3.11.2.\")");
  e = parse_error("[1, 2]");
  CHECK(e.what == "not a Python interpreter with the probe's JSON output (it printed \"[1, 2]\")");
  e = parse_error(std::string(200, 'x'));
  CHECK(e.what == "not a Python interpreter with the probe's JSON output (it printed \"" + std::string(60, 'x') +
                      "...\")");
  // Cut short: the JSON does not end.
  e = parse_error(std::string(kNewOutput).substr(0, 40));
  CHECK(e.code == Errc::bad_value);
  CHECK(e.what.rfind("not a Python interpreter with the probe's JSON output (it printed \"{\"dask-caps-probe\": 1, ", 0) == 0);
}

TEST_CASE("python_env: wrong types and missing keys name the JSON pointer") {
  struct Case {
    std::string from, to, what;
  };
  const Case cases[] = {
      {R"("version": "3.12.4")", R"("version": 3.12)", "/version: expected a string, found a number"},
      {R"("pickle-protocol": 5, "dask")", R"("pickle-protocol": "5", "dask")",
       "/pickle-protocol: expected an integer, found a string"},
      {R"("version": "3.12.4", )", "", "/: missing required key \"version\""},
      {R"("pickle-protocol": 5, "dask")", R"("dask")", "/: missing required key \"pickle-protocol\""},
      {R"("dask": "2026.7.1")", R"("dask": 2026)", "/dask: expected a string, found an integer"},
      {R"("compressions": ["lz4", "zlib", "zstd"])", R"("compressions": "lz4")",
       "/compressions: expected an array of strings, found a string"},
      {R"("numpy": "2.1.0")", R"("numpy": 2)", "/packages/numpy: expected a string, found an integer"},
      {R"("python": [3, 12, 4])", R"("python": "3.12.4")",
       "/handshake/python: expected an array of integers, found a string"},
      {R"("python": [3, 12, 4])", R"("python": [3, "12", 4])", "/handshake/python/1: expected an integer, found a string"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Error e = parse_error(replaced(kNewOutput, c.from, c.to));
    CHECK(e.code == Errc::bad_value);
    CHECK(e.what == c.what);
  }
}

TEST_CASE("python_env: the script's own import error is not_found with its text") {
  Error e = parse_error(R"({"dask-caps-probe": 1, "version": "3.11.2", "pickle-protocol": 5, "dask": "2022.12.1",
                            "error": "cannot import distributed: ImportError: no"})");
  CHECK(e.code == Errc::not_found);
  CHECK(e.message() == "cannot import distributed: ImportError: no");
}

TEST_CASE("python_env: the real interpreter, against what it says about itself") {
  auto env = probe_python(kPython);
  REQUIRE_MESSAGE(env, (env ? "" : env.error().message()));
  const nlohmann::json truth = ask_python(
      "import json, sys, pickle, dask, distributed\n"
      "from distributed.comm.core import Comm\n"
      "h = Comm.handshake_info()\n"
      "print(json.dumps({\"executable\": sys.executable, \"version\": list(sys.version_info[:3]),\n"
      "  \"pickle\": pickle.HIGHEST_PROTOCOL, \"dask\": dask.__version__, \"distributed\": distributed.__version__,\n"
      "  \"compression\": h[\"compression\"], \"python\": list(h[\"python\"]), \"hs-pickle\": h[\"pickle-protocol\"]}))");
  CHECK(env->executable == truth["executable"].get<std::string>());
  const auto v = truth["version"];
  CHECK(env->version == std::to_string(v[0].get<int>()) + "." + std::to_string(v[1].get<int>()) + "." +
                            std::to_string(v[2].get<int>()));
  CHECK(env->pickle_protocol == truth["pickle"].get<int>());
  CHECK(env->dask == truth["dask"].get<std::string>());
  CHECK(env->distributed == truth["distributed"].get<std::string>());
  REQUIRE(env->dask_handshake);
  const auto& hc = truth["compression"];
  CHECK(*env->dask_handshake->compression ==
        (hc.is_null() ? CompressionValue::nil() : CompressionValue::named(hc.get<std::string>())));
  CHECK(*env->dask_handshake->python == truth["python"].get<std::vector<std::int64_t>>());
  CHECK(*env->dask_handshake->pickle_protocol == truth["hs-pickle"].get<int>());
  // distributed always offers zlib, whatever else is installed.
  CHECK(std::find(env->compressions.begin(), env->compressions.end(), "zlib") != env->compressions.end());
}

TEST_CASE("python_env: the caller's environment reaches the interpreter") {
  ScopedEnv vars;
  vars.set("DASK_DISTRIBUTED__COMM__COMPRESSION", "zlib");
  auto env = probe_python(kPython);
  REQUIRE_MESSAGE(env, (env ? "" : env.error().message()));
  CHECK(env->compression_config == CompressionValue::named("zlib"));
  CHECK(env->compression == CompressionValue::named("zlib"));
  REQUIRE(env->dask_handshake);
  CHECK(*env->dask_handshake->compression == CompressionValue::named("zlib"));
}

TEST_CASE("python_env: a real interpreter without dask or distributed is not_found, saying which") {
  for (const char* name : {"distributed", "dask"}) {
    CAPTURE(name);
    HiddenPackage hidden(name);
    ScopedEnv vars;
    vars.set("PYTHONPATH", hidden.dir().c_str());
    auto env = probe_python(kPython);
    REQUIRE(!env);
    CHECK(env.error().code == Errc::not_found);
    CHECK(env.error().message() ==
          std::string(kPython) + ": cannot import " + name + ": ImportError: hidden by the test");
  }
}
