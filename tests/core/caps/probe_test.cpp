#include "daskcaps/caps/probe.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/caps/internal/gpu.h"
#include "daskcaps/wire/msgpack.h"
#include "core/caps/internal/python_env.h"
#include "daskcaps/version.h"
#include "support/scoped_env.h"

using namespace daskcaps;
using testsupport::ScopedEnv;

namespace {

// What the embedded script prints under Debian's python3-distributed
// 2022.12.1 with lz4, snappy and zstandard installed (one line in reality).
constexpr const char* kDebianOutput = R"({"dask-caps-probe": 1,
  "executable": "/usr/bin/python3", "version": "3.11.2", "pickle-protocol": 5,
  "dask": "2022.12.1+dfsg", "distributed": "2022.12.1+ds.1",
  "compression-config": "auto", "compressions": ["lz4", "snappy", "zlib", "zstd"],
  "compression": "lz4",
  "handshake": {"compression": "lz4", "python": [3, 11, 2], "pickle-protocol": 5},
  "packages": {"numpy": "1.24.2", "cupy": null, "lz4": "4.0.2", "zstandard": "0.20.0",
               "snappy": "unknown", "msgpack": "1.0.3", "cloudpickle": "2.2.0"}})";

// A directory of executables standing in for interpreters; removed at the end.
class FakeInterpreters {
 public:
  FakeInterpreters() {
    char tmpl[] = "/tmp/daskcaps-probe-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
  }
  ~FakeInterpreters() {
    for (const std::string& f : files_) ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  // A shell script named `name` with `body` after the #! line.
  std::string script(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    REQUIRE(::chmod(path.c_str(), 0755) == 0);
    files_.push_back(path);
    return path;
  }
  // A plain file holding `content`.
  std::string data(const std::string& name, const std::string& content) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    files_.push_back(path);
    return path;
  }
  // An interpreter that ignores its arguments and prints `output`.
  std::string printing(const std::string& name, const std::string& output) {
    return script(name, "cat '" + data(name + ".out", output) + "'");
  }

 private:
  std::string dir_;
  std::vector<std::string> files_;
};

PythonEnv env_with(CompressionValue config, std::vector<std::string> compressions,
                   std::string distributed = "2022.12.1") {
  PythonEnv p;
  p.version = "3.11.2";
  p.pickle_protocol = 5;
  p.distributed = std::move(distributed);
  p.compression_config = std::move(config);
  p.compressions = std::move(compressions);
  return p;
}

}  // namespace

TEST_CASE("probe: this build's codecs, each with its library version") {
  const auto codecs = build_codecs();
  REQUIRE(codecs.size() == 4);
  const char* names[] = {"lz4", "snappy", "zstd", "zlib"};
  const char* libraries[] = {"liblz4", "libsnappy", "libzstd", "zlib"};
  for (std::size_t i = 0; i < codecs.size(); ++i) {
    CAPTURE(i);
    CHECK(codecs[i].name == names[i]);
    CHECK(codecs[i].library == libraries[i]);
    CHECK(codecs[i].version == codec_library_version(*codec_from_name(names[i])));
    CHECK(!codecs[i].version.empty());
    CHECK(codecs[i].read);
    CHECK(codecs[i].write);
  }
}

TEST_CASE("probe: pickle protocols 0 to 5, read and write") {
  CHECK(pickle_protocols_read() == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(pickle_protocols_write() == std::vector<int>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("probe: advertised compression follows docs/protocol.md §2.3") {
  using CV = CompressionValue;
  const std::vector<std::string> all{"lz4", "snappy", "zlib", "zstd"};
  CHECK(*advertised_compression(env_with(CV::named("auto"), all)) == CV::named("lz4"));
  CHECK(*advertised_compression(env_with(CV::named("auto"), {"snappy", "zlib", "zstd"})) ==
        CV::named("snappy"));
  // zlib and zstd are never picked by "auto".
  CHECK(*advertised_compression(env_with(CV::named("auto"), {"zlib", "zstd"})) == CV::nil());
  CHECK(*advertised_compression(env_with(CV::named("zstd"), all)) == CV::named("zstd"));
  CHECK(*advertised_compression(env_with(CV::nil(), all)) == CV::nil());
  // false is sent as false by 2022.12, as nil from 2023.5.0 on.
  CHECK(*advertised_compression(env_with(CV::none_false(), all)) == CV::none_false());
  CHECK(*advertised_compression(env_with(CV::none_false(), all, "2023.4.1")) == CV::none_false());
  CHECK(*advertised_compression(env_with(CV::none_false(), all, "2023.5.0")) == CV::nil());
  CHECK(*advertised_compression(env_with(CV::none_false(), all, "2026.7.1")) == CV::nil());

  auto missing = advertised_compression(env_with(CV::named("zstd"), {"lz4", "zlib"}));
  REQUIRE(!missing);
  CHECK(missing.error().code == Errc::unknown_codec);
  CHECK(missing.error().message() ==
        "distributed.comm.compression is \"zstd\", which distributed cannot import here (Dask "
        "fails to start)");
}

TEST_CASE("probe: the derived handshake has Dask's bytes (docs/protocol.md §2.8)") {
  auto h = dask_handshake(env_with(CompressionValue::named("auto"), {"lz4", "snappy"}));
  REQUIRE(h);
  CHECK(h->python == std::vector<std::int64_t>{3, 11, 2});
  CHECK(h->pickle_protocol == 5);
  const Buffer got = msgpack::encode(h->to_msgpack());
  // 83 ab "compression" a3 "lz4" a6 "python" 93 03 0b 02 af "pickle-protocol" 05
  Buffer want{0x83, 0xab};
  for (char c : std::string("compression")) want.push_back(static_cast<std::uint8_t>(c));
  want.push_back(0xa3);
  for (char c : std::string("lz4")) want.push_back(static_cast<std::uint8_t>(c));
  want.push_back(0xa6);
  for (char c : std::string("python")) want.push_back(static_cast<std::uint8_t>(c));
  for (std::uint8_t b : {0x93, 0x03, 0x0b, 0x02, 0xaf}) want.push_back(b);
  for (char c : std::string("pickle-protocol")) want.push_back(static_cast<std::uint8_t>(c));
  want.push_back(0x05);
  CHECK(got.size() == 45);
  CHECK(got == want);
}

TEST_CASE("probe: Dask's own handshake_info wins over the rule") {
  PythonEnv p = env_with(CompressionValue::named("auto"), {"lz4"});
  Handshake own;
  own.compression = CompressionValue::named("snappy");
  own.python = std::vector<std::int64_t>{3, 12, 0};
  own.pickle_protocol = 4;
  p.dask_handshake = own;
  auto h = dask_handshake(p);
  REQUIRE(h);
  CHECK(*h->compression == CompressionValue::named("snappy"));
  CHECK(*h->python == std::vector<std::int64_t>{3, 12, 0});
  CHECK(*h->pickle_protocol == 4);
}

TEST_CASE("probe: Dask that cannot make its handshake says why (2023.5 and later)") {
  std::string out = kDebianOutput;
  const auto at = out.find("\"handshake\": {");
  const auto end = out.find('}', at) + 1;
  out.replace(at, end - at,
              "\"handshake-error\": \"ValueError: Invalid compression setting "
              "distributed.comm.compression=brotli.\"");
  auto env = parse_python_probe(out);
  REQUIRE(env);
  CHECK(!env->dask_handshake);
  auto h = dask_handshake(*env);
  REQUIRE(!h);
  CHECK(h.error().code == Errc::unknown_codec);
  CHECK(h.error().message() ==
        "Dask cannot make its handshake: ValueError: Invalid compression setting "
        "distributed.comm.compression=brotli.");
}

TEST_CASE("probe: capabilities put the advertised codec first and keep what both know") {
  HostProbe p;
  p.codecs = build_codecs();
  p.python = env_with(CompressionValue::named("zstd"), {"blosc", "lz4", "snappy", "zlib", "zstd"});
  p.handshake = *dask_handshake(*p.python);
  p.gpu.available = true;
  Capabilities c = capabilities_of(p);
  CHECK(c.codecs == std::vector<std::string>{"zstd", "lz4", "snappy", "zlib"});
  CHECK(c.max_pickle_protocol == 5);
  CHECK(c.gpu);

  p.python->compressions = {"zlib"};
  p.python->compression_config = CompressionValue::named("auto");
  p.python->pickle_protocol = 4;
  p.handshake = *dask_handshake(*p.python);
  p.gpu.available = false;
  c = capabilities_of(p);
  CHECK(c.codecs == std::vector<std::string>{"zlib"});
  CHECK(c.max_pickle_protocol == 4);
  CHECK(!c.gpu);
}

TEST_CASE("probe: without Python the capabilities are this build's") {
  HostProbe p;
  p.codecs = build_codecs();
  p.pickle_protocols_read = pickle_protocols_read();
  const Capabilities c = capabilities_of(p);
  CHECK(c.codecs == std::vector<std::string>{"lz4", "snappy", "zstd", "zlib"});
  CHECK(c.max_pickle_protocol == 5);
}

TEST_CASE("probe: parse the script's output") {
  auto env = parse_python_probe(kDebianOutput);
  REQUIRE(env);
  CHECK(env->executable == "/usr/bin/python3");
  CHECK(env->version == "3.11.2");
  CHECK(env->pickle_protocol == 5);
  CHECK(*env->dask == "2022.12.1+dfsg");
  CHECK(*env->distributed == "2022.12.1+ds.1");
  CHECK(env->compression_config == CompressionValue::named("auto"));
  CHECK(*env->compression == CompressionValue::named("lz4"));
  CHECK(env->compressions == std::vector<std::string>{"lz4", "snappy", "zlib", "zstd"});
  CHECK(env->packages.at("numpy") == "1.24.2");
  CHECK(!env->packages.at("cupy"));
  CHECK(env->packages.at("snappy") == "unknown");
  REQUIRE(env->dask_handshake);
  CHECK(*env->dask_handshake->compression == CompressionValue::named("lz4"));
}

TEST_CASE("probe: false and null configurations survive the script's JSON") {
  std::string out = kDebianOutput;
  const auto replace = [&out](const std::string& from, const std::string& to) {
    out.replace(out.find(from), from.size(), to);
  };
  replace(R"("compression-config": "auto")", R"("compression-config": false)");
  replace(R"("compression": "lz4",)", R"("compression": false,)");
  auto env = parse_python_probe(out);
  REQUIRE(env);
  CHECK(env->compression_config == CompressionValue::none_false());
  CHECK(*env->compression == CompressionValue::none_false());
}

TEST_CASE("probe: script output that is not the probe's is refused") {
  auto empty = parse_python_probe("");
  REQUIRE(!empty);
  CHECK(empty.error().code == Errc::bad_value);
  CHECK(empty.error().message() ==
        "not a Python interpreter with the probe's JSON output (it printed nothing)");
  auto other = parse_python_probe("{\"a\": 1}");
  REQUIRE(!other);
  CHECK(other.error().message() ==
        "not a Python interpreter with the probe's JSON output (it printed \"{\"a\": 1}\")");
  auto no_dist = parse_python_probe(
      R"({"dask-caps-probe": 1, "version": "3.11.7", "pickle-protocol": 5,
          "error": "cannot import distributed: ModuleNotFoundError: No module named 'distributed'"})");
  REQUIRE(!no_dist);
  CHECK(no_dist.error().code == Errc::not_found);
  CHECK(no_dist.error().message() ==
        "cannot import distributed: ModuleNotFoundError: No module named 'distributed'");
}

TEST_CASE("probe: an interpreter that cannot be run says so") {
  auto r = probe_python("/nonexistent/python3");
  REQUIRE(!r);
  CHECK(r.error().code == Errc::not_found);
  CHECK(r.error().message() == "/nonexistent/python3: cannot run: No such file or directory");
  auto on_path = probe_python("daskcaps-no-such-python");
  REQUIRE(!on_path);
  CHECK(on_path.error().message() == "daskcaps-no-such-python: cannot run: No such file or directory");
}

TEST_CASE("probe: a program that is not Python is refused") {
  FakeInterpreters fake;
  auto silent = probe_python(fake.script("silent", "exit 0"));
  REQUIRE(!silent);
  CHECK(silent.error().code == Errc::bad_value);
  CHECK(silent.error().what == "not a Python interpreter with the probe's JSON output (it printed nothing)");

  auto failing = probe_python(fake.script("failing", "echo 'line one' >&2\necho 'boom: no' >&2\nexit 7"));
  REQUIRE(!failing);
  CHECK(failing.error().code == Errc::bad_value);
  CHECK(failing.error().what == "exited with status 7: boom: no");

  auto killed = probe_python(fake.script("killed", "kill -9 $$"));
  REQUIRE(!killed);
  CHECK(killed.error().what == "killed by signal 9");
}

TEST_CASE("probe: an interpreter that hangs is killed at the timeout") {
  FakeInterpreters fake;
  PythonRunOptions options;
  options.timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  auto r = probe_python(fake.script("hang", "exec sleep 30"), options);
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(!r);
  CHECK(r.error().code == Errc::timeout);
  CHECK(r.error().what == "did not finish within 300 ms; killed");
  CHECK(took < std::chrono::seconds(5));
}

TEST_CASE("probe: an interpreter that floods stdout is stopped at the limit") {
  FakeInterpreters fake;
  PythonRunOptions options;
  options.max_output_bytes = 1000;
  auto r = probe_python(fake.script("flood", "exec yes"), options);
  REQUIRE(!r);
  CHECK(r.error().code == Errc::limit_exceeded);
  CHECK(r.error().what == "printed more than 1000 bytes; killed");
}

TEST_CASE("probe: the script is passed with -c and its output parsed") {
  FakeInterpreters fake;
  // Fails unless called exactly as `EXE -c SCRIPT`, with the embedded script.
  const std::string script_file = fake.data("expected-script", std::string(python_probe_script()));
  const std::string out_file = fake.data("canned", kDebianOutput);
  const std::string exe = fake.script(
      "python", "[ \"$1\" = -c ] || exit 9\n[ \"$#\" = 2 ] || exit 10\n"
                "printf '%s' \"$2\" | cmp -s - '" + script_file + "' || exit 11\ncat '" + out_file + "'");
  auto env = probe_python(exe);
  REQUIRE(env);
  CHECK(env->version == "3.11.2");
  CHECK(*env->compression == CompressionValue::named("lz4"));
}

TEST_CASE("probe: host probe without Python, with the stand-in driver") {
  ScopedEnv env;
  env.set("FAKE_CUDA_INIT_RESULT", nullptr).set("FAKE_CUDA_DEVICE_COUNT", nullptr);
  ProbeOptions options;
  options.python_mode = ProbeOptions::PythonMode::none;
  options.cuda_driver = DASKCAPS_FAKE_CUDA;
  auto p = probe_host(options);
  REQUIRE(p);
  CHECK(p->tool_version == DASKCAPS_VERSION_STRING);
  CHECK(!p->hostname.empty());
  CHECK(p->codecs.size() == 4);
  CHECK(p->gpu.available);
  CHECK(p->gpu.devices.size() == 2);
  CHECK(!p->python);
  CHECK(!p->python_error);
  CHECK(!p->handshake);
  CHECK(p->capabilities.codecs == std::vector<std::string>{"lz4", "snappy", "zstd", "zlib"});
  CHECK(p->capabilities.gpu);
}

TEST_CASE("probe: automatic mode takes the first candidate that imports distributed") {
  FakeInterpreters fake;
  const std::string without = fake.printing(
      "without", R"({"dask-caps-probe": 1, "version": "3.11.7", "pickle-protocol": 5,
                     "error": "cannot import distributed: ModuleNotFoundError: nope"})");
  const std::string with = fake.printing("with", kDebianOutput);
  ProbeOptions options;
  options.cuda_driver = "/nonexistent/libcuda.so.1";
  options.python_candidates = {"/nonexistent/python3", without, with};
  auto p = probe_host(options);
  REQUIRE(p);
  REQUIRE(p->python);
  CHECK(!p->python_error);
  // The interpreter as run, not the sys.executable it printed: a wrapper
  // (Dask 2026's python3 in ../shared) runs /usr/bin/python3.
  CHECK(p->python->executable == with);
  REQUIRE(p->handshake);
  CHECK(*p->handshake->compression == CompressionValue::named("lz4"));
  CHECK(p->capabilities.codecs == std::vector<std::string>{"lz4", "snappy", "zstd", "zlib"});
  CHECK(!p->gpu.available);

  options.python_candidates = {"/nonexistent/python3", without};
  auto none = probe_host(options);
  REQUIRE(none);
  CHECK(!none->python);
  CHECK(!none->handshake);
  REQUIRE(none->python_error);
  CHECK(*none->python_error ==
        "no Python with distributed found (/nonexistent/python3: cannot run: No such file or "
        "directory; " + without + ": cannot import distributed: ModuleNotFoundError: nope)");
}

TEST_CASE("probe: a named interpreter that fails fails the probe") {
  FakeInterpreters fake;
  ProbeOptions options;
  options.cuda_driver = "/nonexistent/libcuda.so.1";
  options.python_mode = ProbeOptions::PythonMode::named;
  options.python_executable = fake.script("true", "exit 0");
  auto p = probe_host(options);
  REQUIRE(!p);
  CHECK(p.error().code == Errc::bad_value);
  CHECK(p.error().message() == options.python_executable +
                                   ": not a Python interpreter with the probe's JSON output (it "
                                   "printed nothing)");
}
