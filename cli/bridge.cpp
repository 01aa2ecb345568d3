// dask-caps bridge --listen ADDR --upstream ADDR [--codec C] [--pickle-protocol N]
//   [--layout keep|cpu] [--for PROBE] [--capture FILE.pcapng] [--stats-interval S]
//   [--link-choice on|off] [--pin-codec CODEC]
//   [--listen-cert F --listen-key F [--listen-ca-file F]] [--tls-ca-file F --tls-cert F --tls-key F]
//
// Runs core/bridge/bridge.h on one event loop until SIGINT/SIGTERM, then
// shuts down gracefully and exits 0. Prints "listening on ADDRESS" first
// (flushed), one log line per connection, counters every --stats-interval
// and at exit. --capture writes both legs of every session as pcapng
// (formats/capture_queue.h: by a thread of its own, bounded), committed at
// exit.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "daskcaps/wire/dask_release.h"
#include "daskcaps/base/line_log.h"
#include "daskcaps/bridge/bridge.h"
#include "daskcaps/caps/delivery.h"
#include "daskcaps/caps/endpoint.h"
#include "daskcaps/caps/link_choice.h"
#include "daskcaps/net/loop.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/formats/capture_queue.h"

namespace daskcaps::cli {

namespace {

struct BridgeArgs {
  std::string listen = "tcp://127.0.0.1:0";
  std::string upstream;
  std::string codec = "auto";
  std::string pickle_protocol = "auto";
  std::string layout = "keep";
  bool keep_unconvertible = false;
  std::string for_probe;
  std::string capture;
  double stats_interval_s = 0;
  double handshake_timeout_s = 10;
  double shutdown_grace_s = 10;
  unsigned threads = 0;
  std::uint64_t max_inflight_bytes = std::uint64_t{256} << 20;
  std::size_t max_output_bytes = std::size_t{8} << 20;
  std::uint64_t cut_through_bytes = std::uint64_t{1} << 20;
  std::size_t capture_queue_bytes = std::size_t{256} << 20;
  int zstd_level = 3;
  std::string dask_release = "2022.12";
  std::string link_choice = "on";
  std::string pin_codec;
  net::TlsServerOptions listen_tls;
  net::TlsOptions upstream_tls;
  Limits limits;
  bool codec_given = false, protocol_given = false, layout_given = false;
};

net::Loop::Remote g_loop;

extern "C" void on_bridge_stop_signal(int) { g_loop.request_stop(); }

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string stats_line(const bridge::BridgeStats& s) {
  using bridge::Flow;
  using bridge::Leg;
  auto side = [&](Leg leg, const char* name) {
    const int l = static_cast<int>(leg);
    return std::string(name) + " " + std::to_string(s.messages[l][0]) + " messages / " + std::to_string(s.bytes[l][0]) +
           " bytes in, " + std::to_string(s.messages[l][1]) + " / " + std::to_string(s.bytes[l][1]) + " out";
  };
  return "stats: connections " + std::to_string(s.connections) + " (" + std::to_string(s.open) + " open); " +
         side(Leg::client, "client side") + "; " + side(Leg::upstream, "upstream side") + "; passed " +
         std::to_string(s.passed) + ", recoded " + std::to_string(s.recoded) + " (frames recompressed " +
         std::to_string(s.frames_recompressed) + " (by link " + std::to_string(s.frames_link_coded) +
         "), pickles recoded " + std::to_string(s.pickles_recoded) +
         ", buffers inlined " + std::to_string(s.buffers_inlined) + ", arrays converted " +
         std::to_string(s.arrays_converted) + "); cut through " + std::to_string(s.cut_through) + "; errors " +
         std::to_string(s.errors);
}

// Log lines to stdout (by a thread of their own: a reader who stops
// reading never stalls the loop); the bytes of every leg to the capture
// when there is one, by a thread of its own too (formats/capture_queue.h).
class Observer final : public bridge::BridgeObserver {
 public:
  Observer(LineLog& log, formats::CaptureQueue* capture) : log_(log), capture_(capture) {}
  void on_log(const std::string& line) override { log_.write(line); }
  bool wants_bytes() const override { return capture_ != nullptr; }
  void on_session(std::uint64_t session, const std::string& client, const std::string& listen,
                  const std::string& local, const std::string& upstream) override {
    if (!capture_) return;
    Flows f;
    const double ts = now_seconds();
    f.client = capture_->open_flow(client, listen, ts);
    // The bridge's own port toward the upstream is not known here: one per
    // session, above the ephemeral range, keeps the flows apart.
    const std::string local_end = (local.find(':') != std::string::npos ? "[" + local + "]" : local) + ":" +
                                  std::to_string(60000 + session % 5000);
    f.upstream = capture_->open_flow(local_end, upstream, ts);
    flows_[session] = f;
    // Bytes of the session before this (its handshakes) come now.
    for (auto& e : early_[session]) {
      const Bytes one[1] = {std::move(e.bytes)};
      write(session, e.leg, e.flow, one, true, e.ts);
    }
    early_.erase(session);
  }
  void on_bytes(std::uint64_t session, bridge::Leg leg, bridge::Flow flow, std::span<const Bytes> pieces,
                bool message_start) override {
    if (!capture_) return;
    if (flows_.count(session) == 0) {
      // Before the session's addresses are known (the handshakes): copied
      // and kept until on_session.
      Buffer all;
      for (const Bytes& p : pieces) all.append(p.span());
      early_[session].push_back(Early{leg, flow, Bytes(std::move(all)), now_seconds()});
      return;
    }
    write(session, leg, flow, pieces, message_start, now_seconds());
  }
  void on_session_end(std::uint64_t session) override {
    early_.erase(session);
    auto it = flows_.find(session);
    if (it == flows_.end() || !capture_) return;
    const double ts = now_seconds();
    capture_->close_flow(it->second.client, ts);
    capture_->close_flow(it->second.upstream, ts);
    flows_.erase(it);
  }

 private:
  struct Flows {
    formats::CaptureQueue::FlowId client = 0, upstream = 0;
  };
  struct Early {
    bridge::Leg leg;
    bridge::Flow flow;
    Bytes bytes;
    double ts;
  };
  void write(std::uint64_t session, bridge::Leg leg, bridge::Flow flow, std::span<const Bytes> pieces,
             bool message_start, double ts) {
    const Flows& f = flows_[session];
    // Client leg: the client is the flow's client; upstream leg: the bridge is.
    const bool from_client_end = leg == bridge::Leg::client ? flow == bridge::Flow::to_bridge
                                                              : flow == bridge::Flow::from_bridge;
    const auto id = leg == bridge::Leg::client ? f.client : f.upstream;
    capture_->write(id, from_client_end, pieces, message_start, ts);
    if (auto notice = capture_->take_notice()) log_.write(*notice);
  }
  LineLog& log_;
  formats::CaptureQueue* capture_;
  std::map<std::uint64_t, Flows> flows_;
  std::map<std::uint64_t, std::vector<Early>> early_;
};

int run_bridge(BridgeArgs a) {
  bridge::BridgeOptions o;
  auto listen = net::parse_address(a.listen);
  if (!listen) return report_error("--listen", listen.error());
  auto upstream = net::parse_address(a.upstream);
  if (!upstream) return report_error("--upstream", upstream.error());
  o.listen = *listen;
  o.upstream = *upstream;
  if (o.listen.scheme == net::Scheme::tls) {
    if (a.listen_tls.cert_file.empty())
      return report_error("--listen", make_error(Errc::usage, a.listen + " needs --listen-cert and --listen-key"));
    auto ctx = net::TlsServerContext::create(a.listen_tls);
    if (!ctx) return report_error("--listen-cert", ctx.error());
    o.listen_tls = std::move(*ctx);
  } else if (!a.listen_tls.cert_file.empty() || !a.listen_tls.ca_file.empty()) {
    return report_error("--listen-cert", make_error(Errc::usage, "the --listen-* TLS flags need a tls:// --listen address"));
  }
  if (o.upstream.scheme == net::Scheme::tls) {
    auto ctx = net::TlsClientContext::create(a.upstream_tls);
    if (!ctx) return report_error("--tls-cert", ctx.error());
    o.upstream_tls = std::move(*ctx);
  }

  if (a.codec != "auto") {
    auto c = codec_from_name(a.codec);
    if (!c) return report_error("--codec", make_error(Errc::usage, a.codec + ": not a codec this build writes"));
    o.codec = *c;
  }
  if (a.pickle_protocol != "auto") o.pickle_protocol = std::stoi(a.pickle_protocol);
  o.layout_cpu = a.layout == "cpu";
  // --for: the client's host sets what the flags did not.
  if (!a.for_probe.empty()) {
    EndpointOptions eo;
    eo.limits = a.limits;
    auto peer = peer_for_endpoint(a.for_probe, eo);
    if (!peer) return report_error("--for", peer.error());
    DeliveryOptions to_client;
    to_client.order = DeliveryOptions::Order::receiver;
    auto plan = deliver(this_build(), *peer, to_client);
    if (!plan) return report_error("--for", plan.error());
    plan->fill_unset(o.codec, o.pickle_protocol, o.layout_cpu, {a.codec_given, a.protocol_given, a.layout_given});
  }
  o.keep_unconvertible = a.keep_unconvertible;
  o.recode.limits = a.limits;
  o.recode.compress.zstd_level = a.zstd_level;
  o.recode.rules = DaskRelease::from_name(a.dask_release).value_or(DaskRelease{}).maybe_compress_rules();
  o.link_choice = a.link_choice == "on";
  if (!a.pin_codec.empty()) {
    auto pin = link::parse_choice(a.pin_codec);
    if (!pin || pin->codec == Codec::none)
      return report_error("--pin-codec", make_error(Errc::usage, a.pin_codec + ": not a codec this build writes "
                                                                 "(lz4, snappy, zstd, zstd-N, zlib)"));
    if (!o.link_choice)
      return report_error("--pin-codec", make_error(Errc::usage, "--pin-codec needs --link-choice on"));
    o.pin_codec = *pin;
  }
  o.engine.threads = a.threads;
  o.engine.max_inflight_bytes = a.max_inflight_bytes;
  o.max_output_bytes = a.max_output_bytes;
  o.cut_through_bytes = a.cut_through_bytes;
  o.handshake_timeout = std::chrono::milliseconds(static_cast<long long>(a.handshake_timeout_s * 1000));
  o.shutdown_grace = std::chrono::milliseconds(static_cast<long long>(a.shutdown_grace_s * 1000));

  std::unique_ptr<formats::CaptureQueue> capture;
  if (!a.capture.empty()) {
    formats::CaptureQueue::Options co;
    co.max_queued_bytes = a.capture_queue_bytes;
    auto w = formats::CaptureQueue::create(a.capture, co);
    if (!w) return report_error("--capture", w.error());
    capture = std::move(*w);
  }

  auto loop = net::Loop::create();
  if (!loop) return report_error("", loop.error());
  LineLog log(STDOUT_FILENO);
  Observer observer(log, capture.get());
  auto b = bridge::Bridge::start(**loop, o, observer);
  if (!b) return report_error(a.listen, b.error());
  std::cout << "listening on " << (*b)->address().to_string() << '\n' << std::flush;

  g_loop = (*loop)->remote();
  struct sigaction sa {};
  sa.sa_handler = on_bridge_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  bridge::Bridge* bp = b->get();
  (*loop)->set_stop_handler([bp] { bp->shutdown(); });

  net::Timer stats_timer;
  std::function<void()> tick;
  if (a.stats_interval_s > 0) {
    const auto every = std::chrono::milliseconds(static_cast<long long>(a.stats_interval_s * 1000));
    tick = [&] {
      log.write(stats_line(bp->stats()));
      stats_timer = (*loop)->add_timer(every, tick);
    };
    stats_timer = (*loop)->add_timer(every, tick);
  }

  auto st = (*loop)->run();
  (*loop)->cancel_timer(stats_timer);
  log.write(stats_line(bp->stats()));
  b->reset();
  if (!st) return report_error("", st.error());
  if (capture) {
    const auto dropped = capture->dropped();
    auto cs = capture->finish(now_seconds());
    if (dropped.bytes > 0)
      log.write("capture: " + std::to_string(dropped.bytes) + " bytes in " + std::to_string(dropped.pieces) +
                " pieces were not written (the capture file fell behind" + (cs ? "" : ", or failed") +
                "); they show as gaps");
    if (!cs) return report_error("--capture", cs.error());
  }
  return kExitOk;
}

}  // namespace

void add_bridge(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<BridgeArgs>();
  CLI::App* cmd = app.add_subcommand("bridge", "a live proxy that recodes each message for its receiver");
  cmd->add_option("--listen", a->listen, "address to accept clients on (tcp:// or tls://; port 0: any)")
      ->capture_default_str();
  cmd->add_option("--upstream", a->upstream, "the scheduler (or worker) to connect each client to")->required();
  CLI::Option* codec = cmd->add_option("--codec", a->codec,
                                       "codec toward the client (default: the one it advertised, else none)")
                           ->check(CLI::IsMember({"auto", "none", "lz4", "zstd", "snappy", "zlib"}))
                           ->capture_default_str();
  CLI::Option* protocol = cmd->add_option("--pickle-protocol", a->pickle_protocol,
                                          "highest pickle protocol toward the client (default: its own)")
                              ->check(CLI::IsMember({"auto", "0", "1", "2", "3", "4", "5"}))
                              ->capture_default_str();
  CLI::Option* layout = cmd->add_option("--layout", a->layout, "cpu: GPU arrays become NumPy arrays for the client")
                            ->check(CLI::IsMember({"keep", "cpu"}))
                            ->capture_default_str();
  cmd->add_flag("--keep-unconvertible", a->keep_unconvertible,
                "leave GPU objects that have no CPU form as they are");
  cmd->add_option("--for", a->for_probe,
                  "the client's host (a probe file): sets codec, pickle protocol and layout not given");
  cmd->add_option("--capture", a->capture, "write both legs of every session to this pcapng file (at exit)");
  cmd->add_option("--capture-queue-bytes", a->capture_queue_bytes,
                  "bytes waiting for the capture file before it drops what comes (it never slows the bridge)")
      ->capture_default_str();
  cmd->add_option("--stats-interval", a->stats_interval_s, "print the counters every S seconds (0: only at exit)")
      ->capture_default_str();
  cmd->add_option("--handshake-timeout", a->handshake_timeout_s,
                  "seconds for connect, TLS and the Dask handshakes of a session")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace", a->shutdown_grace_s,
                  "seconds SIGINT/SIGTERM waits for messages in flight")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "recoding threads (default: all cores)");
  cmd->add_option("--max-inflight-bytes", a->max_inflight_bytes,
                  "wire bytes being recoded at once, all sessions together")
      ->capture_default_str();
  cmd->add_option("--cut-through-bytes", a->cut_through_bytes,
                  "messages from this size on are forwarded as they arrive when only codecs change (0: never)")
      ->capture_default_str();
  cmd->add_option("--max-output-bytes", a->max_output_bytes,
                  "a side's unsent bytes before its sender is no longer read")
      ->capture_default_str();
  cmd->add_option("--zstd-level", a->zstd_level, "zstd level when compressing")->check(CLI::Range(1, 22))
      ->capture_default_str();
  cmd->add_option("--dask-release", a->dask_release,
                  "compression rule of this release: 2022.12 (ratio 0.9) or newest (0.7)")
      ->check(CLI::IsMember({"2022.12", "newest"}))->capture_default_str();
  cmd->add_option("--link-choice", a->link_choice,
                  "on: each leg compresses the raw frames it writes when its measured link is slow enough")
      ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
  cmd->add_option("--pin-codec", a->pin_codec,
                  "with --link-choice on: this codec (lz4, zstd, zstd-N, ...) for every raw frame Dask would "
                  "compress, on legs whose receiver reads it");
  cmd->add_option("--listen-cert", a->listen_tls.cert_file, "certificate of a tls:// listener (PEM)");
  cmd->add_option("--listen-key", a->listen_tls.key_file, "private key of --listen-cert (PEM)");
  cmd->add_option("--listen-ca-file", a->listen_tls.ca_file, "CA that client certificates must be signed by");
  cmd->add_option("--tls-ca-file", a->upstream_tls.ca_file, "CA that verifies a tls:// upstream");
  cmd->add_option("--tls-cert", a->upstream_tls.cert_file, "our certificate toward the upstream (PEM)");
  cmd->add_option("--tls-key", a->upstream_tls.key_file, "the key of --tls-cert (default: inside it)");
  add_limit_flags(*cmd, a->limits);
  cmd->callback([a, codec, protocol, layout, &exit_code] {
    a->codec_given = codec->count() > 0;
    a->protocol_given = protocol->count() > 0;
    a->layout_given = layout->count() > 0;
    exit_code = run_bridge(*a);
  });
}

}  // namespace daskcaps::cli
