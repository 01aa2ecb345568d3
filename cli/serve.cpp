// dask-caps serve [--listen ADDRESS]... [--count N] [--workers N] [--type T]
//   [--as PROBE] [--compression C] [--pickle-protocol N] [--python X.Y.Z]
//   [--gpu] [--codecs LIST] [--dask-version V]
//   [--listen-cert F --listen-key F [--listen-ca-file F]]
//
// Builds a server::Profile and runs core/net/net_server.h until SIGINT/SIGTERM.
//
// Where the capabilities come from, in order:
//   1. --as PROBE: its handshake, capabilities, Python and packages;
//   2. otherwise, unless --compression, --pickle-protocol and --python are
//      all given, this host's probe (like `dask-caps probe`), so a bare
//      `serve` answers like Dask on this host would;
//   3. each flag given then overrides its part: --compression sets the
//      handshake's codec ("none"/"null" -> None, "false" -> False),
//      --pickle-protocol and --python the handshake and the max protocol,
//      --gpu the GPU, --codecs the ordered codec list it decodes (default:
//      the advertised codec first, then every codec of this build),
//      --dask-version the dask and distributed of its versions reply.
//   A profile whose distributed is 2023.5.0 or later sends compression None
//   to a client on its own host (equal local and peer IP), as those
//   releases do (distributed PR #7768).
// Listeners: each --listen address (default tcp://127.0.0.1:0), --count
// times each (port 0 only), all of --type (default Scheduler); --workers N
// adds N Worker listeners on the first listen host, which a Scheduler lists
// in its identity, so `check --workers` can survey them. A tls:// listener
// (and its workers) uses --listen-cert/--listen-key; with --listen-ca-file
// every client must present a certificate that CA signed. One line
// "listening on ADDRESS" per listener, the first one first, flushed before
// serving. Exit 0 on SIGINT/SIGTERM.
#include <signal.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "daskcaps/caps/caps.h"
#include "daskcaps/net/address.h"
#include "daskcaps/net/net_server.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/caps/probe.h"

namespace daskcaps::cli {

namespace {

struct ServeArgs {
  std::vector<std::string> listen;
  std::size_t count = 1;
  std::size_t workers = 0;
  std::string type = "Scheduler";
  std::string as;
  std::optional<std::string> compression;
  std::optional<std::int64_t> pickle_protocol;
  std::optional<std::string> python;
  bool gpu = false;
  std::optional<std::string> codecs;
  std::optional<std::string> dask_version;
  double idle_timeout_s = 300;
  std::size_t max_clients = 8192;
  net::TlsServerOptions tls;
};

std::atomic<server::Server*> g_server{nullptr};

extern "C" void on_stop_signal(int) {
  if (server::Server* s = g_server.load()) s->request_stop();
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<CompressionValue> parse_compression(const std::string& s) {
  if (s == "none" || s == "null" || s == "None") return CompressionValue::nil();
  if (s == "false" || s == "False") return CompressionValue::none_false();
  if (!codec_from_name(s))
    return make_error(Errc::usage, "--compression: unknown codec \"" + s + "\" (lz4, zstd, snappy, zlib, none, false)");
  return CompressionValue::named(s);
}

Result<std::vector<std::int64_t>> parse_python(const std::string& s) {
  std::vector<std::int64_t> out;
  for (const auto& part : [&] {
         std::vector<std::string> parts;
         std::size_t start = 0;
         for (;;) {
           const std::size_t dot = s.find('.', start);
           parts.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
           if (dot == std::string::npos) break;
           start = dot + 1;
         }
         return parts;
       }()) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 6)
      return make_error(Errc::usage, "--python: \"" + s + "\" is not a version like 3.11.2");
    out.push_back(std::stoll(part));
  }
  if (out.size() != 3) return make_error(Errc::usage, "--python: \"" + s + "\" is not a version like 3.11.2");
  return out;
}

/// Dask's `versions` reply (docs/protocol.md §7.4) for a profile.
msgpack::Value versions_reply(const std::string& python, const std::map<std::string, std::optional<std::string>>& packages) {
  using msgpack::Value;
  utsname u{};
  uname(&u);
  const std::string full = python.empty() ? std::string() : python + ".final.0";
  Value host = Value::map();
  host.set("python", full.empty() ? Value::nil() : Value::str(full));
  host.set("python-bits", Value::integer(64));
  host.set("OS", Value::str(u.sysname));
  host.set("OS-release", Value::str(u.release));
  host.set("machine", Value::str(u.machine));
  host.set("processor", Value::str(""));
  host.set("byteorder", Value::str("little"));
  host.set("LC_ALL", Value::str("None"));
  host.set("LANG", Value::str("None"));
  Value pkgs = Value::map();
  pkgs.set("python", full.empty() ? Value::nil() : Value::str(full));
  for (const auto& [name, version] : packages)
    if (name != "python") pkgs.set(name, version ? Value::str(*version) : Value::nil());
  Value v = Value::map();
  v.set("host", std::move(host));
  v.set("packages", std::move(pkgs));
  return v;
}

Result<server::Profile> build_profile(const ServeArgs& args) {
  std::optional<HostProbe> base;
  if (!args.as.empty()) {
    auto p = read_probe_file(args.as);
    if (!p) return std::move(p).error().add_context("--as");
    base = std::move(*p);
  } else if (!(args.compression && args.pickle_protocol && args.python)) {
    auto p = probe_host(ProbeOptions{});
    if (!p) return std::move(p).error().add_context("probing this host");
    base = std::move(*p);
  }

  Handshake h;
  Capabilities caps;
  std::string python;
  std::map<std::string, std::optional<std::string>> packages;
  if (base) {
    if (base->handshake) h = *base->handshake;
    caps = base->capabilities;
    if (base->python) {
      python = base->python->version;
      packages = base->python->packages;
      packages["dask"] = base->python->dask;
      packages["distributed"] = base->python->distributed;
    } else if (base->handshake) {
      python = base->handshake->python_version();
    }
  }
  if (!h.compression) {
    // No Dask in the base: advertise the first codec this build has.
    h.compression = caps.codecs.empty() ? CompressionValue::nil() : CompressionValue::named(caps.codecs.front());
  }
  if (!h.pickle_protocol) h.pickle_protocol = caps.max_pickle_protocol;

  if (args.compression) {
    auto c = parse_compression(*args.compression);
    if (!c) return std::move(c).error();
    h.compression = *c;
  }
  if (args.pickle_protocol) {
    if (*args.pickle_protocol < 0 || *args.pickle_protocol > 255)
      return make_error(Errc::usage, "--pickle-protocol must be between 0 and 255");
    h.pickle_protocol = *args.pickle_protocol;
    caps.max_pickle_protocol = *args.pickle_protocol;
  }
  if (args.python) {
    auto v = parse_python(*args.python);
    if (!v) return std::move(v).error();
    h.python = *v;
    python = *args.python;
  }
  if (args.gpu) caps.gpu = true;
  if (args.codecs) {
    caps.codecs = split_list(*args.codecs);
    for (const auto& c : caps.codecs)
      if (!codec_from_name(c) || c == "none")
        return make_error(Errc::usage, "--codecs: unknown codec \"" + c + "\"");
  } else if (!base || args.compression) {
    std::vector<std::string> list;
    if (h.compression->compresses()) list.push_back(h.compression->name);
    const auto& from = base ? caps.codecs : std::vector<std::string>{};
    for (const auto& c : from)
      if (std::find(list.begin(), list.end(), c) == list.end()) list.push_back(c);
    if (!base)
      for (Codec c : kAllCodecs)
        if (std::find(list.begin(), list.end(), codec_name(c)) == list.end()) list.emplace_back(codec_name(c));
    caps.codecs = std::move(list);
  }
  if (h.compression->compresses() &&
      std::find(caps.codecs.begin(), caps.codecs.end(), h.compression->name) == caps.codecs.end())
    return make_error(Errc::usage, "the advertised codec \"" + h.compression->name +
                                       "\" is not among the codecs it decodes (--codecs)");
  if (args.dask_version) {
    packages["dask"] = *args.dask_version;
    packages["distributed"] = *args.dask_version;
  }

  publish_capabilities(h, caps);

  server::Profile profile;
  profile.type = args.type;
  profile.handshake = std::move(h);
  profile.capabilities = caps;
  profile.versions = versions_reply(python, packages);
  // A Dask of 2023.5 or later sends None to a client on its own host.
  const auto distributed = packages.find("distributed");
  profile.none_to_same_host = distributed != packages.end() && distributed->second &&
                              DaskRelease::from_version(*distributed->second).uncompressed_to_same_host();
  return profile;
}

void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int run_serve(const ServeArgs& args) {
  auto profile = build_profile(args);
  if (!profile) return report_error("", profile.error());

  std::vector<server::ListenerSpec> specs;
  const std::vector<std::string> listen = args.listen.empty() ? std::vector<std::string>{"tcp://127.0.0.1:0"}
                                                              : args.listen;
  std::optional<net::Address> first;
  bool any_tls = false;
  for (const auto& text : listen) {
    auto a = net::parse_address(text);
    if (!a) return report_error("--listen", a.error());
    if (a->scheme == net::Scheme::tls) {
      any_tls = true;
      if (args.tls.cert_file.empty())
        return report_error("--listen", make_error(Errc::usage, text + " needs --listen-cert and --listen-key"));
    }
    if (args.count > 1 && a->port != 0)
      return report_error("--count", make_error(Errc::usage, "several listeners need port 0 in " + text));
    if (!first) first = *a;
    for (std::size_t i = 0; i < args.count; ++i) specs.push_back({*a, *profile});
  }
  if (args.workers > 0) {
    server::Profile worker = *profile;
    worker.type = "Worker";
    net::Address wa = *first;
    wa.port = 0;
    for (std::size_t i = 0; i < args.workers; ++i) specs.push_back({wa, worker});
  }

  server::ServerOptions options;
  if (!any_tls && (!args.tls.cert_file.empty() || !args.tls.key_file.empty() || !args.tls.ca_file.empty()))
    return report_error("--listen-cert", make_error(Errc::usage, "the TLS flags need a tls:// --listen address"));
  if (any_tls) {
    auto ctx = net::TlsServerContext::create(args.tls);
    if (!ctx) return report_error("--listen-cert", ctx.error());
    options.tls = std::move(*ctx);
  }

  raise_fd_limit();
  options.idle_timeout = std::chrono::seconds(static_cast<long long>(args.idle_timeout_s));
  options.max_clients = args.max_clients;
  auto server = server::Server::start(std::move(specs), options);
  if (!server) return report_error("serve", server.error());

  // Signals only ask the loop to stop; SIGPIPE never kills us.
  g_server.store(server->get());
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string lines;
  for (const auto& a : (*server)->addresses()) lines += "listening on " + a.to_string() + "\n";
  std::fwrite(lines.data(), 1, lines.size(), stdout);
  std::fflush(stdout);

  auto st = (*server)->run();
  g_server.store(nullptr);
  if (!st) return report_error("serve", st.error());
  return kExitOk;
}

}  // namespace

void add_serve(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "A small Dask-protocol endpoint that answers the handshake, identity and versions "
               "with chosen capabilities (for rehearsing CI gates and for tests)");
  cmd->add_option("--listen", args->listen, "address to listen on (repeatable; default tcp://127.0.0.1:0)")
      ->type_name("ADDRESS");
  cmd->add_option("--count", args->count, "listeners per --listen address (port 0)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--workers", args->workers,
                  "also start N Worker listeners that a Scheduler listener lists in its identity")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--type", args->type, "identity type of the --listen listeners")
      ->check(CLI::IsMember({"Scheduler", "Worker", "Nanny"}))
      ->capture_default_str();
  cmd->add_option("--as", args->as, "answer with the capabilities of this probe file")
      ->type_name("PROBE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--compression", args->compression,
                  "codec advertised in the handshake: lz4, zstd, snappy, zlib, none, false")
      ->type_name("C");
  cmd->add_option("--pickle-protocol", args->pickle_protocol, "highest pickle protocol it reads")
      ->type_name("N");
  cmd->add_option("--python", args->python, "Python version it reports, e.g. 3.7.9")->type_name("X.Y.Z");
  cmd->add_flag("--gpu", args->gpu, "publish a GPU");
  cmd->add_option("--codecs", args->codecs,
                  "codecs it decodes, in preference order (comma-separated)")
      ->type_name("LIST");
  cmd->add_option("--dask-version", args->dask_version,
                  "dask and distributed version its versions reply reports")
      ->type_name("V");
  cmd->add_option("--idle-timeout", args->idle_timeout_s, "seconds before a silent client is closed")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-clients", args->max_clients, "clients served at once; more are closed at once")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--listen-cert", args->tls.cert_file,
                  "certificate chain of the tls:// listeners (PEM; may hold the key too)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--listen-key", args->tls.key_file, "private key of --listen-cert (PEM)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--listen-ca-file", args->tls.ca_file,
                  "CA that must have signed every client's certificate (clients without one are refused)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  cmd->callback([args, &exit_code] { exit_code = run_serve(*args); });
}

}  // namespace daskcaps::cli
