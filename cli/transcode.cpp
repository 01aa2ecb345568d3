// dask-caps transcode IN -o OUT [--codec ...] [--pickle-protocol ...]
//                               [--layout keep|cpu] [--threads N]
// Recodes captured Dask traffic for a recipient. Thin: the input is opened
// by formats/message_source.h, recoded by the engine (core/recode/engine.h)
// and written by formats/stream_outputs.h; cli/render_transcode prints the
// summary.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/render_transcode.h"
#include "daskcaps/wire/dask_release.h"
#include "daskcaps/caps/delivery.h"
#include "daskcaps/caps/endpoint.h"
#include "daskcaps/recode/engine.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/formats/message_source.h"
#include "daskcaps/formats/stream_outputs.h"

namespace daskcaps::cli {

namespace {

struct TranscodeCliOptions {
  std::string input;
  std::string output;
  std::string codec = "keep";
  std::string pickle_protocol = "keep";
  std::string layout = "keep";
  bool inline_buffers = false;
  bool keep_unconvertible = false;
  int zstd_level = 3;
  std::string dask_release = "2022.12";
  std::uint64_t shard_bytes = std::uint64_t{64} << 20;
  unsigned threads = 0;
  // Two messages of 4-6 MiB on the wire (8 MiB arrays, lz4) in flight, one
  // per core of a 2-core host (bench/stream_bench.py), not three.
  std::uint64_t max_inflight_bytes = std::uint64_t{12} << 20;
  std::uint64_t in_place_bytes = std::uint64_t{16} << 20;
  bool json = false;
  std::optional<std::size_t> connection;
  std::string direction;
  std::vector<std::uint16_t> ports;
  std::string for_endpoint;
  double timeout_s = 10;
  net::TlsOptions tls;
  bool codec_given = false, protocol_given = false, layout_given = false;
  Limits limits;
};

// The temporary outputs, removed if a signal ends the run (async-signal-safe:
// the handler only reads this fixed table and calls unlink and _exit).
constexpr int kGuardedTemps = 64;
char g_temp_paths[kGuardedTemps][1024];
volatile std::sig_atomic_t g_temp_count = 0;
volatile std::sig_atomic_t g_temp_active = 0;

extern "C" void on_signal(int sig) {
  if (g_temp_active)
    for (int i = 0; i < g_temp_count; ++i) ::unlink(g_temp_paths[i]);
  ::_exit(128 + sig);
}

constexpr int kGuardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

sigset_t guarded_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kGuardedSignals) sigaddset(&set, sig);
  return set;
}

// Before a temporary output is created: the handler in place, and the
// signals held until the file is in the table (guard_temp), so that no
// signal finds a file the handler does not know.
void before_temp() {
  if (g_temp_count == 0) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : kGuardedSignals) sigaction(sig, &sa, nullptr);
    // Past a file size limit, let write() fail with EFBIG (an error we
    // report and clean up after) rather than be killed by SIGXFSZ.
    std::signal(SIGXFSZ, SIG_IGN);
  }
  const sigset_t set = guarded_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void guard_temp(const std::string& temp) {
  if (!temp.empty() && g_temp_count < kGuardedTemps && temp.size() < sizeof g_temp_paths[0]) {
    std::memcpy(g_temp_paths[g_temp_count], temp.c_str(), temp.size() + 1);
    g_temp_count = g_temp_count + 1;
    g_temp_active = 1;
  }
  const sigset_t set = guarded_signals();
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);  // a signal held meanwhile arrives now
}

Result<TranscodeOptions> core_options(const TranscodeCliOptions& o) {
  TranscodeOptions t;
  t.limits = o.limits;
  t.compress.zstd_level = o.zstd_level;
  t.rules = DaskRelease::from_name(o.dask_release).value_or(DaskRelease{}).maybe_compress_rules();
  t.shard_bytes = o.shard_bytes;
  t.inline_buffers = o.inline_buffers;
  t.keep_unconvertible = o.keep_unconvertible;
  t.layout_cpu = o.layout == "cpu";
  if (o.codec != "keep") {
    auto c = codec_from_name(o.codec);
    if (!c) return make_error(Errc::usage, "--codec " + o.codec + ": not a codec this build writes");
    t.codec = *c;
  }
  if (o.pickle_protocol != "keep") t.pickle_protocol = std::stoi(o.pickle_protocol);
  return t;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// --for: the recipient's plan fills what the user did not set explicitly.
Status apply_recipient(const TranscodeCliOptions& o, TranscodeOptions& t, TranscodeSummary::Recipient& recipient) {
  EndpointOptions eo;
  eo.timeout = std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000));
  eo.tls = o.tls;
  eo.limits = o.limits;
  auto peer = peer_for_endpoint(o.for_endpoint, eo);
  if (!peer) return std::move(peer).error().add_context("--for");
  DeliveryOptions to_file;
  to_file.order = DeliveryOptions::Order::receiver;
  auto plan = deliver(this_build(), *peer, to_file);
  if (!plan) return std::move(plan).error().add_context("--for");
  plan->fill_unset(t.codec, t.pickle_protocol, t.layout_cpu, {o.codec_given, o.protocol_given, o.layout_given});
  recipient = {o.for_endpoint,
               peer->name,
               t.codec ? std::string(codec_name(*t.codec)) : "keep",
               t.pickle_protocol ? std::to_string(*t.pickle_protocol) : "keep",
               t.layout_cpu ? "cpu" : "keep",
               plan->cpu_layout.has_value()};
  return {};
}

int run_transcode(TranscodeCliOptions o) {
  TranscodeSummary summary;
  summary.input = o.input;
  summary.output = o.output;
  auto topt = core_options(o);
  if (!topt) return report_error("", topt.error());
  if (!o.for_endpoint.empty()) {
    TranscodeSummary::Recipient recipient;
    if (auto st = apply_recipient(o, *topt, recipient); !st) return report_error("", st.error());
    summary.recipient = std::move(recipient);
  }
  if (same_file(o.input, o.output))
    return report_error(o.output, make_error(Errc::usage, "is the input; the input is never modified"));

  formats::SourceOptions sopt;
  sopt.capture.ports = o.ports;
  // Large messages of a raw stream stay in the file but for their headers;
  // they are recoded from there, in place.
  sopt.store_bytes = o.in_place_bytes;
  sopt.capture.reassembly.only_connection = o.connection;
  if (!o.direction.empty()) {
    auto d = formats::parse_direction(o.direction);
    if (!d)
      return report_error("", make_error(Errc::usage, "--direction " + o.direction +
                                                          ": use client-to-server, server-to-client, c2s or s2c"));
    sopt.capture.reassembly.only_direction = *d;
  }
  auto source = formats::MessageSource::open(o.input, o.limits, sopt);
  if (!source) return report_error(o.input, source.error());
  formats::MessageSource& src = **source;
  summary.capture = src.is_capture();
  if (!summary.capture && (o.connection || !o.direction.empty()))
    return report_error("", make_error(Errc::usage, "--connection and --direction apply to pcap input"));

  // A capture goes to one file per connection and direction, unless one of
  // them is chosen.
  const bool split = summary.capture && !(o.connection && !o.direction.empty());
  auto outputs = formats::StreamOutputs::create(o.output, split, {before_temp, guard_temp});
  if (!outputs) return report_error("", outputs.error());
  formats::StreamOutputs& out = **outputs;

  // The tag of each message is its output file.
  auto next = [&]() -> Result<std::optional<RecodeEngine::Input>> {
    auto m = src.next();
    if (!m) return std::move(m).error();
    if (!*m) return std::optional<RecodeEngine::Input>{};
    auto slot = out.route(**m, src.connections());
    if (!slot) return std::move(slot).error();
    ++summary.messages;
    RecodeEngine::Input in;
    in.tag = *slot;
    in.raw = std::move((*m)->raw);
    return std::optional<RecodeEngine::Input>(std::move(in));
  };
  auto write = [&](std::uint64_t slot, std::span<const Bytes> frames) { return out.write(slot, frames); };
  auto in_place = [&](std::uint64_t slot, const InPlaceBody& body) { return out.write_in_place(slot, body); };

  EngineOptions eopt;
  eopt.threads = o.threads;
  eopt.max_inflight_bytes = o.max_inflight_bytes;
  eopt.in_place_bytes = o.in_place_bytes;
  auto report = transcode_stream(next, write, *topt, eopt, in_place);
  if (!report) {
    out.abort();
    g_temp_active = 0;
    return report_error(o.input, report.error());
  }
  if (auto st = out.commit(); !st) {
    out.abort();
    g_temp_active = 0;
    return report_error("", st.error());
  }
  g_temp_active = 0;
  summary.report = std::move(*report);
  summary.files = out.files();
  summary.warnings = src.warnings();
  if (o.json)
    print_json(transcode_summary_json(summary));
  else
    render_transcode_text(summary, std::cout);
  return kExitOk;
}

}  // namespace

void add_transcode(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TranscodeCliOptions>();
  CLI::App* cmd = app.add_subcommand("transcode", "recode captured Dask traffic for a recipient");
  cmd->add_option("IN", o->input, "raw stream or pcap/pcapng capture to read (never modified)")
      ->required();
  cmd->add_option("-o,--output", o->output,
                  "raw stream to write (atomically); for a capture without --connection and "
                  "--direction, a directory that gets one stream per connection and direction")
      ->required();
  cmd->add_option("--connection", o->connection, "pcap: only this connection (as inspect numbers them)");
  cmd->add_option("--direction", o->direction, "pcap: client-to-server or server-to-client");
  cmd->add_option("--port", o->ports, "pcap: only TCP segments to or from these ports");
  CLI::Option* codec = cmd->add_option("--codec", o->codec, "codec of the output frames")
      ->check(CLI::IsMember({"keep", "none", "lz4", "zstd", "snappy", "zlib"}))
      ->capture_default_str();
  cmd->add_option("--zstd-level", o->zstd_level, "zstd level (distributed.comm.zstd.level)")
      ->check(CLI::Range(1, 22))->capture_default_str();
  CLI::Option* protocol =
      cmd->add_option("--pickle-protocol", o->pickle_protocol, "protocol of every pickle in the output")
          ->check(CLI::IsMember({"keep", "0", "1", "2", "3", "4", "5"}))
          ->capture_default_str();
  cmd->add_flag("--inline-buffers", o->inline_buffers,
                "at protocol 5, inline out-of-band buffers too");
  CLI::Option* layout = cmd->add_option("--layout", o->layout, "cpu: GPU arrays become NumPy arrays")
                            ->check(CLI::IsMember({"keep", "cpu"}))
                            ->capture_default_str();
  cmd->add_option("--for", o->for_endpoint,
                  "pick codec, pickle protocol and layout for this recipient: a probe file or "
                  "a live address (explicit --codec/--pickle-protocol/--layout win)");
  cmd->add_option("--timeout", o->timeout_s, "seconds for a live --for endpoint")->capture_default_str();
  cmd->add_option("--tls-ca-file", o->tls.ca_file, "CA that verifies a tls:// --for endpoint");
  cmd->add_option("--tls-cert", o->tls.cert_file, "our client certificate (PEM)");
  cmd->add_option("--tls-key", o->tls.key_file, "the key of --tls-cert (default: inside it)");
  cmd->add_flag("--keep-unconvertible", o->keep_unconvertible,
                "leave GPU objects that have no CPU form as they are (reported)");
  cmd->add_option("--dask-release", o->dask_release,
                  "compression rule of this release: 2022.12 (ratio 0.9) or newest (0.7)")
      ->check(CLI::IsMember({"2022.12", "newest"}))->capture_default_str();
  cmd->add_option("--shard-bytes", o->shard_bytes,
                  "largest shard of a rebuilt frame (distributed.comm.shard)")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "worker threads (default: all cores)");
  cmd->add_option("--max-inflight-bytes", o->max_inflight_bytes,
                  "wire bytes of messages being recoded at once (one message always passes)")
      ->capture_default_str();
  cmd->add_option("--in-place-bytes", o->in_place_bytes,
                  "messages of this size and more are recoded frame by frame, "
                  "window by window, into the output (0: never)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print a JSON summary (schema dask-caps.transcode/1)");
  add_limit_flags(*cmd, o->limits);
  cmd->callback([o, codec, protocol, layout, &exit_code] {
    o->codec_given = codec->count() > 0;
    o->protocol_given = protocol->count() > 0;
    o->layout_given = layout->count() > 0;
    exit_code = run_transcode(*o);
  });
}

}  // namespace daskcaps::cli
