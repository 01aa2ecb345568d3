// The bridge: a live proxy between Dask peers that do not match
// (docs/design.md §6). Each accepted connection gets its own upstream
// connection, a handshake done separately on each side, and its messages
// recoded for their receiver by the recode engine (core/recode/engine.h).
//
// One connection pair (a session):
//
//   Dask's connector reads the listener's handshake before it writes its
//   own. So the upstream is connected at once, and its handshake H_u (a
//   Dask listener writes it first) is answered on both legs with H_u itself
//   and "pickle-protocol": 5:
//   bridge ──► upstream: the cluster writes its own codec and its best
//              protocol;
//   bridge ──► client:   the client, which waits for it, writes in the
//              cluster's codec when it has that codec (Dask compresses only
//              when both name the same), else uncompressed, and in its own
//              pickle protocol (the lower of the two). Its handshake H_c is
//              read next.
//   Then, per direction, every message is recoded for its receiver:
//     toward the client    codec: the client's advertised codec, or none
//                          (BridgeOptions::codec overrides); frames already
//                          raw or in that codec keep their bytes; pickle
//                          protocol down to the client's; CuPy -> NumPy with
//                          layout_cpu;
//     toward the upstream  codec: the upstream's advertised codec, or none;
//                          pickle protocol down to the upstream's.
//   Messages that need nothing pass with their frames untouched. Large
//   messages whose codecs alone change (or nothing) are cut through: sent
//   on as they arrive, not held whole (core/bridge/detail/session.h). Both
//   framings are read (2022.12's full first length, 2023.11+'s short one);
//   the full length is always written.
//
// Codec per leg (BridgeOptions::link_choice; core/caps/internal/link_policy.h,
// docs/link-choice.md): each direction the bridge writes, to the client and
// to the upstream, has its own LinkChooser. Its receiver codecs are what
// that receiver reads as it arrives (Delivery::accept: a plain Dask peer's
// advertised codec, or its published ones); its peer is on the same host
// when it has the bridge's IP on that leg (then none, Dask's rule). The
// leg's socket is observed (TCP_INFO) after each large write and when its
// queue drains; each raw frame the codecs above leave raw is then written
// in the chooser's codec (Dask names each frame's codec in its sub-header,
// so a plain peer reads any codec it has), or raw. Frames already in a
// codec the receiver reads, and frames decoded for it, are not touched.
// While the link is unknown (no figures yet, or none: another OS), the
// bytes are today's exactly. While a leg's link may compress, its large
// messages are recoded whole instead of cut through. Each change of a leg's
// choice is logged, one line.
//
// Flow control: a side is read only while the engine takes its messages
// (its byte bound) and the other side's output queue is not full
// (net::Connection::output_full()); a slow receiver thus slows its sender.
// Idle sessions hold no read buffers (core/wire/internal/assembler.h releases them).
//
// Faults: a peer that breaks the protocol (a bad prelude, a limit, a
// first message that is not a handshake, a message that cannot be recoded)
// has its session closed with one log line; the others go on. When one
// side closes, what was already recoded for the other is flushed, then
// the other side is closed too; a partial message is never sent.
//
// Shutdown (SIGINT/SIGTERM: the caller calls shutdown()): the listener
// closes, every side stops reading, messages in flight are delivered and
// flushed, then the connections close; the loop quits when the last
// session is gone (or after BridgeOptions::shutdown_grace).
//
// Worker addresses: the scheduler tells the client its workers' real
// addresses. Gather and scatter through the scheduler (Dask's default for a
// client outside the cluster) work through the bridge alone; direct
// transfers connect to the workers past the bridge. The bridge cannot know
// what a client will do next: when a client sends an op that Dask clients
// send before a direct transfer ("who_has" before a direct gather,
// "ncores_running" before a direct scatter; client.who_has() sends it
// too), it logs that it saw it, as info, once per client connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/caps/link_choice.h"
#include "daskcaps/net/address.h"
#include "daskcaps/net/loop.h"
#include "daskcaps/net/tls.h"
#include "daskcaps/recode/engine.h"
#include "daskcaps/recode/transcode.h"

namespace daskcaps::net {
class Listener;  // the listening socket (core/net/internal/connection.h)
}  // namespace daskcaps::net

namespace daskcaps::bridge {

struct BridgeOptions {
  net::Address listen;    // tcp:// or tls:// (then listen_tls); port 0: any
  net::Address upstream;  // tcp:// or tls:// (then upstream_tls)
  std::shared_ptr<net::TlsServerContext> listen_tls;
  std::shared_ptr<net::TlsClientContext> upstream_tls;

  /// Toward the client, overriding what its handshake says.
  std::optional<Codec> codec;
  std::optional<int> pickle_protocol;
  bool layout_cpu = false;
  bool keep_unconvertible = false;
  /// Limits, compression rules, zstd level and shard size for both
  /// directions (its codec/protocol/layout/frame_codec fields are ignored).
  TranscodeOptions recode;
  /// The codec per link (see above, "Codec per leg"): each leg compresses
  /// the raw frames it would write raw when its measured link is slow
  /// enough for a codec its receiver reads to deliver them sooner. false:
  /// the codecs above alone.
  bool link_choice = true;
  /// With link_choice: this codec for every raw frame Dask would compress,
  /// on each leg whose receiver reads it (a leg whose receiver does not gets
  /// no codec per link, with one log line). Not on a same-host leg.
  std::optional<link::CodecChoice> pin_codec;
  EngineOptions engine;
  /// Messages up to this size are recoded on the loop thread (no hand-off).
  std::uint64_t inline_bytes = std::uint64_t{64} << 10;

  /// Messages from this size on are cut through when only codecs change
  /// (core/bridge/detail/session.h); 0: never. A capture records their
  /// pieces as they pass.
  std::uint64_t cut_through_bytes = std::uint64_t{1} << 20;

  /// A side's output queue is full at this size (back-pressure).
  std::size_t max_output_bytes = std::size_t{8} << 20;
  /// Connect, TLS and the Dask handshake of both sides must finish within it.
  std::chrono::milliseconds handshake_timeout{10000};
  /// Shutdown waits at most this long for messages in flight.
  std::chrono::milliseconds shutdown_grace{10000};
};

/// The two legs of a session and the direction of a message on one.
enum class Leg : std::uint8_t { client, upstream };
enum class Flow : std::uint8_t { to_bridge, from_bridge };

/// Counters (since start).
struct BridgeStats {
  std::uint64_t connections = 0;       // sessions accepted
  std::uint64_t open = 0;              // sessions open now
  std::uint64_t messages[2][2] = {};   // [Leg][Flow], handshakes included
  std::uint64_t bytes[2][2] = {};      // wire bytes, [Leg][Flow]
  std::uint64_t passed = 0;            // messages forwarded untouched
  std::uint64_t recoded = 0;           // messages that changed
  std::uint64_t cut_through = 0;       // of those two, messages forwarded as they arrived
  std::uint64_t frames_recompressed = 0;
  std::uint64_t frames_link_coded = 0;  // of those, raw frames compressed by a leg's codec per link
  std::uint64_t pickles_recoded = 0;
  std::uint64_t buffers_inlined = 0;
  std::uint64_t arrays_converted = 0;
  std::uint64_t errors = 0;            // sessions ended by an error
};

/// What the bridge tells its owner: log lines and, for a capture, the bytes
/// of every leg as they crossed it.
class BridgeObserver {
 public:
  virtual ~BridgeObserver() = default;
  virtual void on_log(const std::string& line) = 0;
  /// A session's connections are known (for a capture's addresses):
  /// client peer, the bridge's address as the client sees it, the bridge's
  /// local address toward the upstream, the upstream peer ("ip:port").
  virtual void on_session(std::uint64_t /*session*/, const std::string& /*client*/,
                          const std::string& /*listen*/, const std::string& /*local*/,
                          const std::string& /*upstream*/) {}
  /// Bytes of a leg as the bridge read or wrote them, in order per leg and
  /// flow, handshakes included: a whole message (its prelude, with the full
  /// L, then its frames), or a piece of a message cut through, as it
  /// arrived or went out. `message_start`: the first piece begins a
  /// message. Called on the loop thread; the bytes stay as they are while
  /// the observer holds them (the bridge gives the recoder no pages to
  /// discard while wants_bytes()), but it must not block.
  virtual void on_bytes(std::uint64_t /*session*/, Leg, Flow, std::span<const Bytes> /*pieces*/,
                        bool /*message_start*/) {}
  virtual void on_session_end(std::uint64_t /*session*/) {}
  /// Whether on_bytes wants the bytes (a capture is being written).
  virtual bool wants_bytes() const { return false; }
};

class Session;

class Bridge {
 public:
  /// Listens and starts accepting. Errors: Errc::network (address in use,
  /// cannot bind), Errc::usage (tls:// without TLS context).
  static Result<std::unique_ptr<Bridge>> start(net::Loop& loop, const BridgeOptions& options,
                                               BridgeObserver& observer);
  ~Bridge();
  Bridge(const Bridge&) = delete;
  Bridge& operator=(const Bridge&) = delete;

  /// The listening address, with the real port.
  const net::Address& address() const;
  const BridgeStats& stats() const { return stats_; }
  /// Starts a graceful shutdown (see above); the loop quits when it is done.
  void shutdown();
  bool shutting_down() const { return shutting_down_; }

 private:
  friend class Session;
  Bridge(net::Loop& loop, const BridgeOptions& options, BridgeObserver& observer);
  void on_accept(net::Socket socket);
  void on_engine_ready();
  void drain_engine();
  void session_done(std::uint64_t id);
  void maybe_quit();

  net::Loop& loop_;
  BridgeOptions options_;
  BridgeObserver& observer_;
  std::unique_ptr<net::Listener> listener_;
  std::unique_ptr<RecodeEngine> engine_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Session>> sessions_;
  std::unordered_map<RecodeEngine::StreamId, Session*> by_stream_;
  std::vector<std::uint64_t> engine_waiters_;  // sessions with a message the engine had no room for
  std::uint64_t next_session_ = 1;
  BridgeStats stats_;
  bool shutting_down_ = false;
  bool draining_ = false;
  net::Timer grace_timer_;
  std::vector<std::unique_ptr<Session>> finished_;  // destroyed after the current callback
};

}  // namespace daskcaps::bridge
