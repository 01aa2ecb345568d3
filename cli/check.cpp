// dask-caps check ENDPOINT [ENDPOINT...] [--json | --format text|json|sarif]
//   [--fail-on info|warning|error] [--policy FILE|strict|default|relaxed]
//   [--baseline FILE] [--sarif-location FILE] [-o FILE] [--sarif-output FILE]
//   [--timeout S] [--workers]
//   [--as PROBE] [--tls-ca-file F --tls-cert F --tls-key F]
//
// Wires options into core: probe files are read (core/caps/probe.h), live
// endpoints queried (core/net/rpc.h: query_endpoint(), and survey() for --workers), the
// report built (core/caps/caps_report.h), judged by the policy and compared with
// the baseline (core/caps/gate.h), and rendered (cli/render_check.h,
// cli/render_sarif.h).
//
// Policy:
//   - ENDPOINT is a probe file when such a file exists, else an address.
//   - This host takes part when one endpoint is given, or when --as names
//     a probe to stand for it; it is probed like `dask-caps probe` (the
//     first /usr/bin/python3, python3 that has distributed). The handshake
//     we send is this host's Dask dict plus our "capabilities".
//   - An endpoint named on the command line that cannot be checked (DNS,
//     refused, timeout, TLS, broken protocol, incomplete handshake) prints
//     one error line each and exits 4, after the report (which shows it).
//     A worker found by --workers that cannot be checked is an
//     `unreachable` finding instead: a survey reports, it does not stop.
//   - Otherwise: exit 1 when a finding is at or above --fail-on (with
//     --baseline: a new finding), else 0.
//   - The policy and the baseline are read before any endpoint is touched;
//     a bad one exits 3 (a name that is no profile and no file too).
//   - SARIF results point at --sarif-location, else the policy file, else
//     the baseline, else the first probe file given; with none of these
//     --format sarif (or --sarif-output) is a usage error (exit 2).
//   - -o and --sarif-output write the JSON document and the SARIF log to
//     files (atomically) besides what stdout shows: one run, for a CI job
//     that logs the text, keeps the JSON as its next baseline and uploads
//     the SARIF. A file that cannot be written exits 3 after the report.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <set>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/render_check.h"
#include "cli/render_sarif.h"
#include "daskcaps/caps/caps.h"
#include "daskcaps/caps/caps_report.h"
#include "daskcaps/caps/gate.h"
#include "daskcaps/caps/probe.h"
#include "daskcaps/net/address.h"
#include "daskcaps/net/rpc.h"
#include "daskcaps/net/tls.h"

namespace daskcaps::cli {

namespace {

struct CheckArgs {
  std::vector<std::string> endpoints;
  bool json = false;
  std::string format;  // text, json, sarif; empty: text (json with --json)
  std::string policy;
  std::string baseline;
  std::string sarif_location;
  std::string output;        // -o: the JSON document, also
  std::string sarif_output;  // the SARIF log, also
  std::string fail_on = "error";
  double timeout_s = 10;
  double survey_timeout_s = 0;  // 0: max(30 s, 3 x --timeout)
  std::size_t max_in_flight = 256;
  bool workers = false;
  std::string as;
  net::TlsOptions tls;
  Limits limits = [] {
    Limits l;
    // A scheduler's identity lists every worker: allow big replies, but not
    // the 8 GiB a capture reader accepts.
    l.max_message_bytes = std::uint64_t{256} << 20;
    return l;
  }();
};

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

/// The handshake we send: this host's Dask dict, or dask-caps' own (no
/// compression, pickle protocol 5), plus our capability set.
Handshake our_handshake(const std::optional<HostProbe>& local) {
  Handshake h;
  Capabilities caps;
  if (local && local->handshake) {
    h = *local->handshake;
    caps = local->capabilities;
  } else {
    h.compression = CompressionValue::nil();
    h.pickle_protocol = 5;
    for (Codec c : kAllCodecs) caps.codecs.emplace_back(codec_name(c));
    caps.max_pickle_protocol = 5;
    if (local) caps.gpu = local->capabilities.gpu;
  }
  publish_capabilities(h, caps);
  return h;
}

int run_check(const CheckArgs& args) {
  const Severity fail_on = *severity_from_string(args.fail_on);
  if (args.json && !args.format.empty() && args.format != "json")
    return report_error("", make_error(Errc::usage, "--json and --format " + args.format + " contradict each other"));
  const std::string format = args.format.empty() ? (args.json ? "json" : "text") : args.format;

  gate::Gate gate;
  if (!args.policy.empty()) {
    auto p = policy::load_policy(args.policy);
    if (!p) return report_error("--policy", p.error());
    gate.policy = std::move(*p);
  }
  if (!args.baseline.empty()) {
    auto b = baseline::read_baseline_file(args.baseline);
    if (!b) return report_error("--baseline", b.error());
    gate.baseline = std::move(*b);
  }

  // Classify the endpoints before touching the network.
  struct Given {
    std::string text;
    std::optional<net::Address> address;
    std::optional<HostProbe> probe;
  };
  std::vector<Given> given;
  bool any_tls = false;
  for (const auto& text : args.endpoints) {
    Given g;
    g.text = text;
    if (is_regular_file(text)) {
      auto probe = read_probe_file(text);
      if (!probe) return report_error("", probe.error());
      g.probe = std::move(*probe);
    } else {
      auto a = net::parse_address(text);
      if (!a) {
        const bool looks_like_file = text.find("://") == std::string::npos &&
                                     (text.find('/') != std::string::npos || text.ends_with(".json"));
        if (looks_like_file)
          return report_error(text, make_error(Errc::not_found, "no such probe file"));
        return report_error("", a.error());
      }
      any_tls = any_tls || a->scheme == net::Scheme::tls;
      g.address = *a;
    }
    given.push_back(std::move(g));
  }

  std::string sarif_location = args.sarif_location;
  if (sarif_location.empty() && gate.policy) sarif_location = gate.policy->path;
  if (sarif_location.empty() && gate.baseline) sarif_location = gate.baseline->path;
  for (const auto& g : given)
    if (sarif_location.empty() && g.probe) sarif_location = g.text;
  if ((format == "sarif" || !args.sarif_output.empty()) && sarif_location.empty())
    return report_error("", make_error(Errc::usage, "--format sarif needs a file for the results to point at: "
                                                    "--sarif-location FILE, a policy file, a baseline or a probe file"));

  std::shared_ptr<net::TlsClientContext> tls;
  if (any_tls || !args.tls.ca_file.empty() || !args.tls.cert_file.empty()) {
    auto ctx = net::TlsClientContext::create(args.tls);
    if (!ctx) return report_error("TLS settings", ctx.error());
    tls = std::move(*ctx);
  }

  // This host, or the probe that stands for it.
  const bool local_takes_part = given.size() == 1 || !args.as.empty();
  std::optional<HostProbe> local_probe;
  std::optional<Peer> local;
  if (!args.as.empty()) {
    auto probe = read_probe_file(args.as);
    if (!probe) return report_error("--as", probe.error());
    local_probe = std::move(*probe);
    local = peer_from_probe(*local_probe, args.as, "client");
  } else if (local_takes_part) {
    auto probe = probe_host(ProbeOptions{});
    if (!probe) return report_error("probing this host", probe.error());
    local_probe = std::move(*probe);
    local = peer_from_probe(*local_probe,
                            "this host" + (local_probe->hostname.empty() ? std::string()
                                                                         : " (" + local_probe->hostname + ")"),
                            "client");
  }

  rpc::QueryOptions query;
  query.session.ours = our_handshake(local_probe);
  query.session.limits = args.limits;
  query.timeout = millis(args.timeout_s);
  query.tls = tls.get();

  std::vector<report::EndpointInfo> endpoints;
  std::set<std::string> seen;
  for (const auto& g : given) {
    if (g.probe) {
      endpoints.push_back(report::endpoint_from_probe(g.text, *g.probe));
      continue;
    }
    const std::string address = g.address->to_string();
    endpoints.push_back(report::endpoint_from_query(address, rpc::query_endpoint(*g.address, query)));
    seen.insert(address);
  }

  if (args.workers) {
    std::vector<net::Address> addrs;
    std::vector<std::pair<std::string, std::string>> found;  // address, scheduler
    std::vector<report::EndpointInfo> bad;
    for (const auto& e : endpoints) {
      if (e.type != "Scheduler" || !e.identity || !e.identity->ok()) continue;
      for (const auto& w : report::workers_of(e.identity->value)) {
        auto a = net::parse_address(w);
        if (!a) {
          report::EndpointInfo info;
          info.address = w;
          info.given = false;
          info.discovered_by = e.address;
          info.error = a.error();
          bad.push_back(std::move(info));
          continue;
        }
        const std::string norm = a->to_string();
        if (!seen.insert(norm).second) continue;
        addrs.push_back(*a);
        found.emplace_back(norm, e.address);
      }
    }
    survey::SurveyOptions so;
    so.session = query.session;
    so.per_endpoint_timeout = query.timeout;
    so.total_timeout = args.survey_timeout_s > 0 ? millis(args.survey_timeout_s)
                                                 : std::max(millis(30), 3 * query.timeout);
    so.max_in_flight = args.max_in_flight;
    so.tls = tls.get();
    auto results = survey::survey(addrs, so);
    endpoints.reserve(endpoints.size() + results.size() + bad.size());
    for (std::size_t i = 0; i < results.size(); ++i) {
      auto info = report::endpoint_from_query(found[i].first, std::move(results[i]));
      info.given = false;
      info.discovered_by = found[i].second;
      endpoints.push_back(std::move(info));
    }
    for (auto& b : bad) endpoints.push_back(std::move(b));
  }

  report::ReportOptions report_options = gate::report_options(gate);
  report_options.limits = args.limits;
  report::Report rep =
      report::build_report(local_takes_part ? local : std::nullopt, std::move(endpoints), report_options);
  gate::judge(rep, gate);

  // Text: nothing to show when no endpoint could be checked (the error
  // lines below say why). JSON: always the whole document.
  bool any_checked = false;
  for (const auto& e : rep.endpoints) any_checked = any_checked || (e.peer && !e.error);
  if (format == "json")
    print_json(check_report_json(rep, gate));
  else if (format == "sarif")
    print_json(check_report_sarif(rep, gate, sarif_location));
  else if (any_checked || !rep.pairs.empty())
    render_check_text(rep, std::cout, gate);
  std::cout.flush();
  if (!args.output.empty())
    if (int rc = write_json_file(args.output, check_report_json(rep, gate)); rc != kExitOk) return rc;
  if (!args.sarif_output.empty())
    if (int rc = write_json_file(args.sarif_output, check_report_sarif(rep, gate, sarif_location)); rc != kExitOk)
      return rc;

  int failed = kExitOk;
  for (const auto& e : rep.endpoints)
    if (e.given && e.error) failed = report_error(e.address, *e.error);
  if (failed != kExitOk) return failed;
  const std::optional<Severity> worst = gate.deciding(rep);
  if (worst && *worst >= fail_on) return kExitFindings;
  return kExitOk;
}

}  // namespace

void add_check(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Handshake with live Dask endpoints or read probe files, and report what Dask "
               "negotiates between them, what it should negotiate, and why");
  cmd->add_option("endpoints", args->endpoints,
                  "tcp://host:port, tls://host:port, host:port, or a probe file")
      ->required()
      ->type_name("ENDPOINT");
  cmd->add_flag("--json", args->json, "print one JSON document (schema dask-caps.check/1): --format json");
  cmd->add_option("--format", args->format, "text, json (schema dask-caps.check/1) or sarif (SARIF 2.1.0)")
      ->check(CLI::IsMember({"text", "json", "sarif"}))
      ->type_name("FORMAT");
  cmd->add_option("--fail-on", args->fail_on,
                  "exit 1 when a finding (with --baseline: a new one) is at least this severe")
      ->check(CLI::IsMember({"info", "warning", "error"}))
      ->capture_default_str();
  cmd->add_option("--policy", args->policy,
                  "judge findings by a policy: a profile (default, strict, relaxed) or a policy file "
                  "(schema dask-caps.policy/1)")
      ->type_name("FILE|PROFILE");
  cmd->add_option("--baseline", args->baseline,
                  "an earlier check --json: mark findings new or unchanged, list the vanished, "
                  "and fail on new ones only")
      ->type_name("FILE");
  cmd->add_option("--sarif-location", args->sarif_location,
                  "the file SARIF results point at (default: the policy file, the baseline, or the first "
                  "probe file)")
      ->type_name("FILE");
  cmd->add_option("-o,--output", args->output, "also write the JSON document to FILE (atomically)")
      ->type_name("FILE");
  cmd->add_option("--sarif-output", args->sarif_output, "also write the SARIF log to FILE (atomically)")
      ->type_name("FILE");
  cmd->add_option("--timeout", args->timeout_s,
                  "seconds for each endpoint: connect, TLS, handshake and replies")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--workers", args->workers,
                "also check every worker a scheduler endpoint lists, concurrently");
  cmd->add_option("--survey-timeout", args->survey_timeout_s,
                  "total seconds for the --workers survey (default: max(30, 3 x --timeout))")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-in-flight", args->max_in_flight,
                  "connections the --workers survey keeps open at once")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->add_option("--as", args->as, "a probe file that stands for this host")
      ->type_name("PROBE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-ca-file", args->tls.ca_file,
                  "CA certificate(s) that verify tls:// peers (default: the system store)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-cert", args->tls.cert_file, "our client certificate (PEM)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tls-key", args->tls.key_file, "the key of --tls-cert (default: inside it)")
      ->type_name("FILE")
      ->check(CLI::ExistingFile);
  add_limit_flags(*cmd, args->limits);
  cmd->callback([args, &exit_code] { exit_code = run_check(*args); });
}

}  // namespace daskcaps::cli
