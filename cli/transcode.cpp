// dask-caps transcode IN -o OUT [--codec ...] [--pickle-protocol ...]
//                               [--layout keep|cpu] [--threads N]
// Recodes captured Dask traffic for a recipient. Thin: reading is in
// formats/, recoding in core/recode/transcode.h, the output in core/base/atomic_file.h.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <map>
#include <cstring>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/base/atomic_file.h"
#include "core/caps/endpoint.h"
#include "core/wire/frames.h"
#include "core/recode/transcode.h"
#include "formats/capture.h"
#include "formats/raw_stream.h"

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

void guard_temp(const std::string& temp) {
  if (g_temp_count == 0) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(sig, &sa, nullptr);
    // Past a file size limit, let write() fail with EFBIG (an error we
    // report and clean up after) rather than be killed by SIGXFSZ.
    std::signal(SIGXFSZ, SIG_IGN);
  }
  if (g_temp_count >= kGuardedTemps || temp.size() >= sizeof g_temp_paths[0]) return;
  std::memcpy(g_temp_paths[g_temp_count], temp.c_str(), temp.size() + 1);
  g_temp_count = g_temp_count + 1;
  g_temp_active = 1;
}

Result<TranscodeOptions> core_options(const TranscodeCliOptions& o) {
  TranscodeOptions t;
  t.limits = o.limits;
  t.compress.zstd_level = o.zstd_level;
  t.rules = maybe_compress_rules_for(o.dask_release);
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

// One output raw stream: the whole output of a raw input, or one direction
// of one connection of a capture.
struct Output {
  std::unique_ptr<AtomicFile> file;
  std::size_t messages = 0;
};

Status write_message(AtomicFile& file, const std::vector<Bytes>& frames) {
  std::vector<std::uint64_t> lengths;
  lengths.reserve(frames.size());
  for (const Bytes& f : frames) lengths.push_back(f.size());
  if (auto st = file.write(encode_prelude(lengths)); !st) return st;
  for (const Bytes& f : frames)
    if (auto st = file.write(f.span()); !st) return st;
  return {};
}

std::string safe_name(std::string s) {
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-')) c = '_';
  return s;
}

// --for: the recipient's plan fills what the user did not set explicitly.
Status apply_recipient(TranscodeCliOptions& o, std::string& note) {
  EndpointOptions eo;
  eo.timeout = std::chrono::milliseconds(static_cast<long long>(o.timeout_s * 1000));
  eo.tls = o.tls;
  eo.limits = o.limits;
  auto peer = peer_for_endpoint(o.for_endpoint, eo);
  if (!peer) return std::move(peer).error().add_context("--for");
  const RecipientPlan plan = plan_for_recipient(*peer);
  if (!o.codec_given) o.codec = std::string(codec_name(plan.codec));
  if (!o.protocol_given) o.pickle_protocol = std::to_string(plan.pickle_protocol);
  if (!o.layout_given && plan.cpu_layout) o.layout = *plan.cpu_layout ? "cpu" : "keep";
  note = "for " + peer->name + ": codec " + o.codec + ", pickle protocol " + o.pickle_protocol +
         ", layout " + o.layout +
         (plan.cpu_layout ? "" : " (whether it has a GPU is not known)");
  return {};
}

int run_transcode(TranscodeCliOptions o) {
  std::string recipient_note;
  if (!o.for_endpoint.empty()) {
    if (auto st = apply_recipient(o, recipient_note); !st) return report_error("", st.error());
  }
  auto topt = core_options(o);
  if (!topt) return report_error("", topt.error());
  if (same_file(o.input, o.output))
    return report_error(o.output, make_error(Errc::usage, "is the input; the input is never modified"));

  Buffer head(64);
  if (std::FILE* f = std::fopen(o.input.c_str(), "rb")) {
    head.resize(std::fread(head.data(), 1, head.size(), f));
    std::fclose(f);
  } else {
    return report_error(o.input, make_error(Errc::io, std::strerror(errno)));
  }
  const bool is_pcap = formats::PcapMessageReader::sniff(head);
  if (!is_pcap && (o.connection || !o.direction.empty()))
    return report_error("", make_error(Errc::usage, "--connection and --direction apply to pcap input"));

  // Where each message goes: raw input -> the one output; pcap -> one output
  // per (connection, direction), or only the chosen one.
  std::map<std::pair<std::size_t, int>, Output> outputs;
  std::map<std::size_t, std::pair<std::size_t, int>> route;  // message index -> stream
  std::string out_dir;
  const bool one_stream = !is_pcap || (o.connection && !o.direction.empty());
  std::unique_ptr<formats::RawStreamReader> raw;
  std::unique_ptr<formats::PcapMessageReader> pcap;
  MessageSourceFn next;
  std::size_t count = 0;

  if (!is_pcap) {
    auto r = formats::RawStreamReader::open(o.input, o.limits);
    if (!r) return report_error(o.input, r.error());
    raw = std::move(*r);
    next = [&]() -> Result<std::optional<SourceMessage>> {
      const std::size_t index = raw->next_index();
      auto m = raw->next();
      if (!m) return std::move(m).error();
      if (!*m) return std::optional<SourceMessage>{};
      route[index] = {0, 0};
      ++count;
      return std::optional<SourceMessage>(SourceMessage{index, (*m)->offset, std::move((*m)->frames)});
    };
  } else {
    formats::CaptureOptions copt;
    copt.ports = o.ports;
    copt.reassembly.only_connection = o.connection;
    if (!o.direction.empty()) {
      auto d = formats::parse_direction(o.direction);
      if (!d) return report_error("", make_error(Errc::usage, "--direction " + o.direction +
                                                                  ": use client-to-server, server-to-client, c2s or s2c"));
      copt.reassembly.only_direction = *d;
    }
    auto r = formats::PcapMessageReader::open(o.input, o.limits, copt);
    if (!r) return report_error(o.input, r.error());
    pcap = std::move(*r);
    if (!one_stream) {
      out_dir = o.output;
      if (::mkdir(out_dir.c_str(), 0777) != 0 && errno != EEXIST)
        return report_error(out_dir, make_error(Errc::io, std::strerror(errno)));
    }
    next = [&, index = std::size_t{0}]() mutable -> Result<std::optional<SourceMessage>> {
      auto m = pcap->next();
      if (!m) return std::move(m).error();
      if (!*m) return std::optional<SourceMessage>{};
      const std::size_t i = index++;
      route[i] = {(*m)->connection, static_cast<int>((*m)->direction)};
      ++count;
      return std::optional<SourceMessage>(SourceMessage{i, (*m)->message.offset, std::move((*m)->message.frames)});
    };
  }

  std::optional<Error> open_error;
  auto output_for = [&](std::pair<std::size_t, int> key) -> Result<Output*> {
    auto it = outputs.find(key);
    if (it != outputs.end()) return &it->second;
    std::string path = o.output;
    if (!one_stream) {
      const auto& conns = pcap->connections();
      std::string name = "conn" + std::to_string(key.first);
      if (key.first < conns.size()) {
        const auto& c = conns[key.first];
        name += key.second == 0 ? "-" + safe_name(c.client) + "-to-" + safe_name(c.server)
                                : "-" + safe_name(c.server) + "-to-" + safe_name(c.client);
      }
      path = out_dir + "/" + name + ".stream";
    }
    auto f = AtomicFile::create(path);
    if (!f) return std::move(f).error();
    guard_temp((*f)->temp_path());
    Output& out = outputs[key];
    out.file = std::move(*f);
    return &out;
  };
  if (one_stream) {
    // The single output exists even when no message reaches it.
    auto first = output_for({o.connection.value_or(0), 0});
    if (!first) return report_error("", first.error());
  }
  auto write = [&](std::size_t index, const std::vector<Bytes>& frames) -> Status {
    auto key = route.at(index);
    route.erase(index);
    if (one_stream) key = outputs.begin()->first;
    auto out = output_for(key);
    if (!out) return std::move(out).error();
    ++(*out)->messages;
    return write_message(*(*out)->file, frames);
  };

  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  auto report = transcode_stream(next, write, *topt, threads);
  if (!report) {
    outputs.clear();  // removes every temporary file
    g_temp_active = 0;
    return report_error(o.input, report.error());
  }
  for (auto& [key, out] : outputs) {
    if (auto st = out.file->commit(); !st) {
      outputs.clear();
      g_temp_active = 0;
      return report_error("", st.error());
    }
  }
  g_temp_active = 0;

  if (o.json) {
    Json doc = json_document("dask-caps.transcode/1");
    doc["input"] = o.input;
    doc["output"] = o.output;
    Json files = Json::array();
    for (const auto& [key, out] : outputs) {
      Json f;
      f["path"] = out.file->path();
      f["messages"] = out.messages;
      f["bytes"] = out.file->size();
      if (is_pcap) {
        f["connection"] = key.first;
        f["direction"] = std::string(formats::to_string(static_cast<formats::Direction>(key.second)));
      }
      files.push_back(std::move(f));
    }
    doc["outputs"] = std::move(files);
    doc["messages"] = count;
    doc["bytes-in"] = report->bytes_in;
    doc["bytes-out"] = report->bytes_out;
    doc["frames-recompressed"] = report->frames_recompressed;
    doc["pickles-recoded"] = report->pickles_recoded;
    doc["buffers-inlined"] = report->buffers_inlined;
    doc["arrays-converted"] = report->arrays_converted;
    doc["unconvertible"] = report->unconvertible;
    if (pcap) doc["warnings"] = pcap->warnings();
    if (!o.for_endpoint.empty())
      doc["for"] = {{"endpoint", o.for_endpoint}, {"codec", o.codec},
                    {"pickle-protocol", o.pickle_protocol}, {"layout", o.layout}};
    print_json(doc);
  } else {
    if (!recipient_note.empty()) std::cout << recipient_note << '\n';
    for (const auto& [key, out] : outputs)
      std::cout << out.file->path() << ": " << out.messages << " messages, " << out.file->size() << " bytes\n";
    std::cout << count << " messages, " << report->bytes_in << " -> " << report->bytes_out
              << " bytes of frames; " << report->frames_recompressed << " frames compressed, "
              << report->pickles_recoded << " pickles recoded, " << report->buffers_inlined
              << " buffers inlined, " << report->arrays_converted << " GPU arrays converted\n";
    for (const std::string& u : report->unconvertible) std::cout << "  left as it is: " << u << '\n';
    if (pcap)
      for (const std::string& w : pcap->warnings()) std::cout << "warning: " << w << '\n';
  }
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
