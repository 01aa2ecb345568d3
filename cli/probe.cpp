// dask-caps probe [--json] [--python EXE | --no-python] [-o FILE]
//
// Fills ProbeOptions, calls probe_host, renders. Policy for the Python part:
// without --python the first of /usr/bin/python3 and python3 (PATH) that
// imports distributed is used; when none does, "python" and "handshake" are
// null, "python-error" says why, and the exit code is 0 (the host was
// probed; it just has no Dask). An interpreter named with --python must
// work: when it cannot be run, is not Python, lacks distributed or times
// out, probe prints one error line and exits 3 (bad input).
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "daskcaps/base/atomic_file.h"
#include "daskcaps/caps/caps.h"
#include "daskcaps/caps/probe.h"
#include "daskcaps/wire/msgpack.h"

namespace daskcaps::cli {

namespace {

struct ProbeArgs {
  bool json = false;
  std::string python;
  bool no_python = false;
  std::string output;
  double python_timeout_s = 60;
};

// "0-5" for a contiguous run, else "0, 2, 5"; "none" when empty.
std::string protocol_range(const std::vector<int>& v) {
  if (v.empty()) return "none";
  bool contiguous = true;
  for (std::size_t i = 1; i < v.size(); ++i) contiguous = contiguous && v[i] == v[i - 1] + 1;
  if (contiguous && v.size() > 1) return std::to_string(v.front()) + "-" + std::to_string(v.back());
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out;
}

std::string gibibytes(std::uint64_t bytes) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0) << " GiB";
  return s.str();
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

void render_text(const HostProbe& p, std::ostream& out) {
  constexpr int kLabel = 18;
  auto label = [&out](std::string_view l) {
    out << l << std::string(l.size() < kLabel ? kLabel - l.size() : 1, ' ');
  };
  out << "dask-caps " << p.tool_version << " on " << (p.hostname.empty() ? "this host" : p.hostname)
      << "\n\n";

  out << "codecs (this build)\n";
  for (const CodecSupport& c : p.codecs) {
    std::string lib = c.library + " " + c.version;
    out << "  " << c.name << std::string(c.name.size() < 8 ? 8 - c.name.size() : 1, ' ') << lib
        << std::string(lib.size() < 20 ? 20 - lib.size() : 1, ' ') << (c.read ? "read" : "")
        << (c.read && c.write ? " " : "") << (c.write ? "write" : "") << '\n';
  }
  label("pickle protocols");
  out << "read " << protocol_range(p.pickle_protocols_read) << ", write "
      << protocol_range(p.pickle_protocols_write) << "\n\n";

  label("gpu");
  if (p.gpu.available) {
    out << "CUDA driver " << p.gpu.driver.value_or("?") << ", " << p.gpu.devices.size()
        << (p.gpu.devices.size() == 1 ? " device\n" : " devices\n");
    for (const GpuDevice& d : p.gpu.devices)
      out << "  " << d.index << "  " << d.name << "  compute " << d.compute_capability << "  "
          << gibibytes(d.memory_bytes) << '\n';
    if (p.gpu.error) out << "  warning: " << *p.gpu.error << '\n';
  } else {
    out << "none" << (p.gpu.error ? " (" + *p.gpu.error + ")" : std::string()) << '\n';
  }
  out << '\n';

  label("python");
  if (p.python) {
    const PythonEnv& py = *p.python;
    out << py.executable << " " << py.version << ", pickle protocol " << py.pickle_protocol << '\n';
    out << "  dask " << py.dask.value_or("-") << ", distributed " << py.distributed.value_or("-")
        << '\n';
    out << "  distributed.comm.compression: " << py.compression_config.to_string();
    if (py.compression) out << " -> " << py.compression->to_string();
    out << '\n';
    out << "  importable codecs: " << (py.compressions.empty() ? "none" : join(py.compressions, " "))
        << '\n';
    std::vector<std::string> packages;
    for (const auto& [name, version] : py.packages) packages.push_back(name + " " + version.value_or("-"));
    out << "  packages: " << join(packages, ", ") << '\n';
  } else if (p.python_error) {
    out << "none (" << *p.python_error << ")\n";
  } else {
    out << "not probed (--no-python)\n";
  }
  if (p.python && p.python_error) out << "  warning: " << *p.python_error << '\n';

  label("handshake");
  if (p.handshake) {
    out << msgpack::repr(p.handshake->to_msgpack()) << '\n';
    if (p.python && DaskRelease::from_version(p.python->distributed.value_or("")).uncompressed_to_same_host())
      out << "                  to peers on other hosts; to a peer on this host distributed "
          << p.python->distributed.value_or("") << " sends compression None (distributed PR #7768)\n";
  } else
    out << "none (no Dask here)\n";

  label("capabilities");
  out << "codecs " << (p.capabilities.codecs.empty() ? "none" : join(p.capabilities.codecs, " "))
      << "; max pickle protocol " << p.capabilities.max_pickle_protocol << "; gpu "
      << (p.capabilities.gpu ? "yes" : "no") << '\n';
}

int run_probe(const ProbeArgs& args) {
  ProbeOptions options;
  if (args.no_python) {
    options.python_mode = ProbeOptions::PythonMode::none;
  } else if (!args.python.empty()) {
    options.python_mode = ProbeOptions::PythonMode::named;
    options.python_executable = args.python;
  }
  options.python_timeout = std::chrono::milliseconds(static_cast<long long>(args.python_timeout_s * 1000));

  auto probe = probe_host(options);
  if (!probe) {
    // Only a named interpreter fails the probe: whatever the kind (even a
    // timeout), the user gave us an unusable input.
    report_error("--python", probe.error());
    return kExitBadInput;
  }
  const std::string json = probe_to_json_text(*probe);
  if (!args.output.empty()) {
    if (auto written = write_file_atomically(args.output, as_bytes(json)); !written)
      return report_error("-o", written.error());
  }
  if (args.json) {
    std::cout << json;
  } else {
    render_text(*probe, std::cout);
  }
  std::cout.flush();
  return kExitOk;
}

}  // namespace

void add_probe(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "probe", "What this host can do: codecs, pickle protocols, GPUs, the Python Dask environment, "
               "and the handshake Dask here sends");
  cmd->add_flag("--json", args->json, "print the probe file JSON (schema dask-caps.probe/1)");
  CLI::Option* python = cmd->add_option(
      "--python", args->python,
      "probe this interpreter (path or name on PATH); default: the first of /usr/bin/python3, "
      "python3 that imports distributed")
      ->type_name("EXE");
  CLI::Option* no_python =
      cmd->add_flag("--no-python", args->no_python, "do not look at Python (no handshake)");
  python->excludes(no_python);
  cmd->add_option("--python-timeout", args->python_timeout_s,
                  "seconds the interpreter may take before it is killed")
      ->type_name("S")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("-o,--output", args->output,
                  "also write the probe file JSON to FILE (atomically)")
      ->type_name("FILE");
  cmd->callback([args, &exit_code] { exit_code = run_probe(*args); });
}

}  // namespace daskcaps::cli
