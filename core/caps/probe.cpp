#include "daskcaps/caps/probe.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>

#include "core/caps/internal/gpu.h"
#include "daskcaps/pickle/pickle.h"
#include "core/caps/internal/python_env.h"
#include "daskcaps/version.h"

namespace daskcaps {

namespace {

// The pickle engine (core/pickle/pickle.h) reads and writes every protocol
// from 0 to its highest.
constexpr int kPickleProtocolLowest = 0;
constexpr int kPickleProtocolHighest = pickle::kHighestProtocol;

std::string_view codec_library(Codec c) {
  switch (c) {
    case Codec::none: return "";
    case Codec::lz4: return "liblz4";
    case Codec::zstd: return "libzstd";
    case Codec::snappy: return "libsnappy";
    case Codec::zlib: return "zlib";
  }
  return "";
}

// Leading "YYYY.M" of a distributed version ("2022.12.1+ds.1" -> 2022, 12);
// {0, 0} when it does not start with two dotted numbers.
std::pair<int, int> calendar_version(std::string_view v) {
  int major = 0;
  int minor = 0;
  const char* p = v.data();
  const char* end = v.data() + v.size();
  auto r = std::from_chars(p, end, major);
  if (r.ec != std::errc{} || r.ptr == end || *r.ptr != '.') return {0, 0};
  r = std::from_chars(r.ptr + 1, end, minor);
  if (r.ec != std::errc{}) return {0, 0};
  return {major, minor};
}

bool has(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// [3, 11, 2] from "3.11.2"; parts that are not numbers stop the list.
std::vector<std::int64_t> version_parts(std::string_view v) {
  std::vector<std::int64_t> out;
  const char* p = v.data();
  const char* end = v.data() + v.size();
  while (p < end) {
    std::int64_t n = 0;
    auto r = std::from_chars(p, end, n);
    if (r.ec != std::errc{}) break;
    out.push_back(n);
    if (r.ptr == end || *r.ptr != '.') break;
    p = r.ptr + 1;
  }
  return out;
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// Codec names in preference order: `first` (when it is among them), then
// kAllCodecs order; names dask-caps does not know are dropped.
std::vector<std::string> preference_order(const std::vector<std::string>& available,
                                          const std::optional<std::string>& first) {
  std::vector<std::string> out;
  if (first && has(available, *first) && codec_from_name(*first)) out.push_back(*first);
  for (Codec c : kAllCodecs) {
    const std::string name(codec_name(c));
    if (has(available, name) && !has(out, name)) out.push_back(name);
  }
  return out;
}

}  // namespace

std::vector<CodecSupport> build_codecs() {
  std::vector<CodecSupport> out;
  for (Codec c : kAllCodecs) {
    CodecSupport s;
    s.name = std::string(codec_name(c));
    s.library = std::string(codec_library(c));
    s.version = codec_library_version(c);
    s.read = true;
    s.write = true;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<int> pickle_protocols_read() {
  std::vector<int> out;
  for (int p = kPickleProtocolLowest; p <= kPickleProtocolHighest; ++p) out.push_back(p);
  return out;
}

std::vector<int> pickle_protocols_write() { return pickle_protocols_read(); }

Result<CompressionValue> advertised_compression(const PythonEnv& python) {
  const CompressionValue& config = python.compression_config;
  switch (config.kind) {
    case CompressionValue::Kind::nil:
      return CompressionValue::nil();
    case CompressionValue::Kind::false_: {
      // 2023.5.0 (PR #7768) made false the default and stopped sending it.
      const auto [year, month] = calendar_version(python.distributed.value_or(""));
      if (year > 2023 || (year == 2023 && month >= 5)) return CompressionValue::nil();
      return CompressionValue::none_false();
    }
    case CompressionValue::Kind::name:
      break;
  }
  if (config.name == "auto") {
    if (has(python.compressions, "lz4")) return CompressionValue::named("lz4");
    if (has(python.compressions, "snappy")) return CompressionValue::named("snappy");
    return CompressionValue::nil();
  }
  if (!has(python.compressions, config.name))
    return make_error(Errc::unknown_codec,
                      "distributed.comm.compression is \"" + config.name +
                          "\", which distributed cannot import here (Dask fails to start)");
  return config;
}

Result<Handshake> dask_handshake(const PythonEnv& python) {
  if (python.dask_handshake) return *python.dask_handshake;
  if (python.handshake_error)
    return make_error(Errc::unknown_codec, "Dask cannot make its handshake: " + *python.handshake_error);
  auto compression = advertised_compression(python);
  if (!compression) return std::move(compression).error();
  Handshake h;
  h.compression = std::move(*compression);
  h.python = version_parts(python.version);
  h.pickle_protocol = python.pickle_protocol;
  h.raw = h.to_msgpack();
  return h;
}

Capabilities capabilities_of(const HostProbe& probe) {
  Capabilities c;
  std::optional<std::string> advertised;
  if (probe.handshake && probe.handshake->compression && probe.handshake->compression->compresses())
    advertised = probe.handshake->compression->name;

  if (probe.python) {
    c.codecs = preference_order(probe.python->compressions, advertised);
    c.max_pickle_protocol = probe.python->pickle_protocol;
  } else {
    std::vector<std::string> readable;
    for (const CodecSupport& s : probe.codecs)
      if (s.read) readable.push_back(s.name);
    if (readable.empty() && advertised) readable.push_back(*advertised);
    c.codecs = preference_order(readable, advertised);
    if (probe.handshake && probe.handshake->pickle_protocol)
      c.max_pickle_protocol = *probe.handshake->pickle_protocol;
    else if (!probe.pickle_protocols_read.empty())
      c.max_pickle_protocol = *std::max_element(probe.pickle_protocols_read.begin(),
                                                probe.pickle_protocols_read.end());
  }
  c.gpu = probe.gpu.available;
  return c;
}

Result<HostProbe> probe_host(const ProbeOptions& options) {
  HostProbe p;
  p.tool_version = DASKCAPS_VERSION_STRING;
  p.hostname = host_name();
  p.codecs = build_codecs();
  p.pickle_protocols_read = pickle_protocols_read();
  p.pickle_protocols_write = pickle_protocols_write();
  p.gpu = probe_gpus(options.cuda_driver.empty() ? default_cuda_driver_path() : options.cuda_driver);

  PythonRunOptions run;
  run.timeout = options.python_timeout;
  switch (options.python_mode) {
    case ProbeOptions::PythonMode::none:
      break;
    case ProbeOptions::PythonMode::named: {
      auto env = probe_python(options.python_executable, run);
      if (!env) return std::move(env).error();
      p.python = std::move(*env);
      break;
    }
    case ProbeOptions::PythonMode::automatic: {
      std::string reasons;
      for (const std::string& candidate : options.python_candidates) {
        auto env = probe_python(candidate, run);
        if (env) {
          p.python = std::move(*env);
          break;
        }
        if (!reasons.empty()) reasons += "; ";
        reasons += env.error().message();
      }
      if (!p.python)
        p.python_error = "no Python with distributed found" +
                         (reasons.empty() ? std::string() : " (" + reasons + ")");
      break;
    }
  }

  if (p.python) {
    auto h = dask_handshake(*p.python);
    if (!h) {
      // Only a configured codec distributed does not have gets here: Dask
      // itself refuses to start with it (2022.12) or fails on its first
      // connection (2023.5 and later).
      if (options.python_mode == ProbeOptions::PythonMode::named)
        return std::move(h.error().add_context(p.python->executable));
      p.python_error = h.error().message();
    } else {
      p.handshake = std::move(*h);
    }
  }
  p.capabilities = capabilities_of(p);
  return p;
}

}  // namespace daskcaps
