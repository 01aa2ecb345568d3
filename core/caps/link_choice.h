// The codec each link deserves: per connection, per frame, the codec that
// delivers a frame soonest (docs/link-choice.md: the model and why its
// inputs are the ones that can be trusted).
//
// Contract. One LinkChooser per connection and direction (the sender's
// side), used by one thread at a time. Its owner tells it what it learns
// of the link (observe(): TCP_INFO figures, core/net/link_figures.h;
// observe_write(): how long a large write took) and asks, per frame to be
// sent, choose(frame):
//   - nullopt: the link is unknown (no figures yet, or the socket gives
//     none: TLS through a wrapper, inproc, UCX, a kernel without the
//     fields). The caller keeps the choice it makes today (Dask's setting,
//     the plugin's or bridge's negotiated codec);
//   - a CodecChoice: the codec (and zstd level) to write this frame in;
//     Codec::none means raw.
// The choice is only ever none or a codec in ChooserOptions::receiver_codecs
// (what the receiver decodes: its published codecs, or a plain Dask peer's
// advertised one), so a receiver is never sent what it cannot read.
//
// Rules, in order (Dask's own first):
//   1. pinned (ChooserOptions::pin): the pin, for frames Dask would
//      compress; same host (a peer with the same IP): none, always (Dask's
//      rule); frames below rules.min_size or above rules.max_size: none.
//   2. unknown link: nullopt.
//   3. the time to deliver n bytes with choice c, whose sample ratio is r:
//        T(c) = n / compress_speed(c) + r * n / rate + n / decompress_speed(c)
//      (T(none) = n / rate). Speeds are measured once per process on a
//      calibration buffer (calibrated_speed()), never written down here,
//      and divided by the slowdown this connection's own compression
//      showed (observe_compress(): real frames, on cores that are busy
//      with the rest of the process and, on one host, with the link).
//      When none beats every codec even at r = 0, no sample is taken (a fast
//      link costs nothing per frame). Otherwise the frame's sample (as
//      Dask's maybe_compress samples it: frame_sample()) is compressed with
//      every candidate, giving r per candidate, and the best is the one
//      with the smallest T.
//   4. hysteresis, per connection: the connection has a current choice.
//      Frames that say nothing of the link do not vote: those whose sample
//      no candidate shrinks below Dask's ratio (random bytes). The first
//      frame of at least vote_bytes that votes sets it: its best, where
//      that is none or beats none by `margin`, else none (a codec close to
//      break-even costs CPU for little: none until it wins by the margin
//      on `votes` frames, as any change does). Afterwards a
//      different best replaces it only after `votes` consecutive frames of
//      at least vote_bytes on which that same best beat the current one by
//      `margin` (T(current) > (1 + margin) * T(best)); any other frame of
//      that size resets the count. Smaller frames neither vote nor reset.
//   5. per frame, the data decides within the connection's choice: a frame
//      whose sample the current codec shrinks less than Dask's ratio
//      (random bytes) goes raw; this is what maybe_compress does too, and it
//      is not a change of the connection's choice. The link's figures move
//      the choice only through the hysteresis, never frame by frame.
// Every change of the connection's choice is recorded (last_change(),
// changes()) so that the caller can log one line (describe()).
//
// The link rate (rate()): the best of the last `rate_window` samples of
// two kinds, both from TCP_INFO (net/link_figures.h):
//   - spans. TCP_INFO counts, from the connection's start, the bytes
//     acknowledged and the time the connection was busy (data in flight or
//     queued). A span runs from the connection's start, later from the
//     reading that closed the previous span, to a reading; once its busy
//     time reaches `span_seconds` and ten times the connection's lowest
//     RTT, it closes and gives a sample: bytes over busy seconds. A shorter
//     span is not a sample, and the next reading extends it. Idle time is
//     not in a span; a token-bucket shaper's burst (after an idle pause, or
//     a new connection's first flight) is a small part of one that long;
//     the kernel's 4 ms clock and a round trip per busy period are too.
//     A span understates the link wherever the link idled while the
//     connection was busy (a receiver or a sender slow on busy cores).
//     An idle reading (nothing in flight or unsent) restarts a span that
//     has carried less than vote_bytes: small messages (a handshake, its
//     delayed ACK) tell nothing of the rate and would only dilute it;
//   - the kernel's own sample of the last ACK (tcpi_delivery_rate, BBR's
//     figure), which reads the link's peak, but only when it is not
//     application-limited, holds an ACK since the previous reading (the
//     kernel keeps its sample until an ACK delivers data), and lies within
//     `peak_factor` of the latest span: a shaper's burst reads 50 to 300
//     times the link, a span's understatement was 2 at most
//     (docs/link-choice.md). Before a span has closed, none counts.
//   - the open span's floor: once the open span has carried floor_bytes,
//     its bytes over its busy time plus one tick of the kernel's clock
//     (busy_tick_s): a rate the link has certainly reached. It is not a
//     sample: it counts while its span is open and never lowers the rate.
//     While no sample has been taken it counts only to choose none, when
//     none is the frame's best even at this floor, with the ratio its
//     sample shrinks to (then none wins at the true rate, which is
//     higher): a fast link need not wait span_seconds of busy time, and a
//     link that is still unknown keeps today's choice otherwise.
// The best, not the latest (BBR's bottleneck filter): a slow moment does
// not lower the rate, and a link that slowed down is followed within
// `rate_window` samples. Readings may come as often as the caller likes
// (before a large frame is chosen, and after it was written). Counters
// lower than the span's start (another socket's figures) restart the span
// there, and no kernel sample counts until it closes again.
// New connections. A connection learns its link only once a span closes,
// so a new one would send its first large messages as today (Dask's
// setting), however well this process knows the host. With
// ChooserOptions::host, every span sample of a connection that carried at
// least vote_bytes also goes to a memory of this process, per host, which
// keeps the best put within remembered_seconds; a chooser made for that
// host within remembered_seconds starts with that rate as its one sample
// (rate_source() "host" until it takes its own), and its own samples
// replace it as the window turns, as any sample's. Such a borrowed rate
// decides as the floor does: none where none is best, a codec only where it
// wins by borrowed_margin (a slow link), else today's choice stays and the
// frame does not vote. take_host_rate() takes
// it later, for a chooser that had none when it was made. The memory holds
// at most 4096 hosts (the oldest goes); one mutex guards it.
// Only where the socket gives no TCP_INFO at all (observe_socket() never
// succeeded), the best of the last `rate_window` large writes (bytes over
// the seconds the write took) stands in: a write's time includes the
// application's own work (serialising, the event loop), so on a fast link
// it understates the rate, and a socket that has TCP_INFO is better left
// unknown until the kernel has a sample.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daskcaps/wire/dask_release.h"
#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/net/link_figures.h"
#include "daskcaps/wire/codec.h"

namespace daskcaps::link {

/// A codec and, for zstd, its level (0 for the others).
struct CodecChoice {
  Codec codec = Codec::none;
  int level = 0;
  friend bool operator==(const CodecChoice&, const CodecChoice&) = default;
};

/// "none", "lz4", "zstd-1", ...
std::string choice_name(const CodecChoice& c);
/// choice_name() read back: a codec of this build's names, or "zstd-N"
/// (N 1 to 22); "zstd" is level 0 (the writer's own level). nullopt for
/// anything else.
std::optional<CodecChoice> parse_choice(std::string_view text);

/// Bytes per second of raw input, compressing and decompressing.
struct CodecSpeed {
  double compress = 0.0;
  double decompress = 0.0;
};

/// The speed of one choice on this machine, measured the first time it is
/// asked for in this process (a calibration buffer of measurement-like
/// floats, the best of a few runs) and kept; thread-safe. none: infinite.
CodecSpeed calibrated_speed(const CodecChoice& c);

struct ChooserOptions {
  /// The codecs the receiver decodes (none need not be named; unknown and
  /// duplicate entries are ignored).
  std::vector<Codec> receiver_codecs;
  /// The peer has this host's IP: Dask's rule, no compression.
  bool same_host = false;
  /// A codec the user pinned: chosen for every frame Dask would compress.
  std::optional<CodecChoice> pin;
  /// zstd levels that count as choices (1 to 22).
  std::vector<int> zstd_levels = {1, 3};
  /// Dask's min_size, max_size and sampling; ratio: a frame whose sample
  /// shrinks less than this goes raw.
  MaybeCompressRules rules = DaskRelease::newest().maybe_compress_rules();
  /// Frames from this size on are the "large" ones that vote.
  std::uint64_t vote_bytes = std::uint64_t{1} << 20;
  /// How much faster a new choice must be, and on how many consecutive
  /// large frames, before it replaces the current one.
  double margin = 0.15;
  std::uint32_t votes = 3;
  /// Rate samples kept (the estimate is their best).
  std::uint32_t rate_window = 4;
  /// A span of TCP_INFO readings gives a rate sample once the connection
  /// was busy this long in it (and ten times its lowest RTT): long enough
  /// that a shaper's burst, the kernel's 4 ms clock and a round trip are a
  /// small part of it (docs/link-choice.md).
  double span_seconds = 0.1;
  /// An open span that has carried this much gives a floor of the rate
  /// (bytes over busy time plus busy_tick_s): a shaper's burst (256 KB in
  /// the bench, docs/link-choice.md) is a small part of it.
  std::uint64_t floor_bytes = std::uint64_t{4} << 20;
  /// The longest tick of the kernel's busy-time clock: jiffies, 1 to 10 ms
  /// (HZ 1000 to 100); the floor assumes the longest.
  double busy_tick_s = 0.01;
  /// The kernel's sample of the last ACK counts only up to this many times
  /// the latest span's rate.
  double peak_factor = 4.0;
  /// Writes smaller than this say nothing of the link (they fit the
  /// socket's buffer) and are ignored by observe_write().
  std::uint64_t min_write_bytes = std::uint64_t{1} << 20;
  /// Speeds per choice; empty: calibrated_speed() (tests give their own).
  std::vector<std::pair<CodecChoice, CodecSpeed>> speeds;
  /// The peer's host (its IP), for this process's memory of links (see
  /// "New connections" above); empty: this connection neither takes a
  /// rate from it nor gives one. Longer than 255 bytes: the same.
  std::string host;
  /// A rate remembered longer than this is not taken.
  double remembered_seconds = 300.0;
  /// While the only rate is the host's (rate_source() "host"), a codec is
  /// chosen only where it beats none by this much (T(none) > (1 +
  /// borrowed_margin) T(codec)); a closer call keeps today's choice until
  /// the connection's own span closes. Another connection's rate is a
  /// figure of the host, not of this connection's path through busy cores.
  double borrowed_margin = 1.0;
};

/// A change of a connection's choice.
struct ChoiceChange {
  std::optional<CodecChoice> from;  // nullopt: the first choice
  CodecChoice to;
  double rate = 0.0;                // bytes per second the choice was made for
  double ratio = 1.0;               // the sample's ratio with `to` (1: none)
  std::uint64_t frame_bytes = 0;    // the frame that decided it
  std::uint64_t number = 0;         // 1 for the first change, ...
};

/// One line for a log: "codec for this link: none -> lz4 (link 12.5 MB/s,
/// sample ratio 0.41, frame 16777216 bytes)".
std::string describe(const ChoiceChange& change);

class LinkChooser {
 public:
  /// Errors (Errc::usage): a pin the receiver does not decode, a zstd level
  /// outside 1-22, votes or rate_window of 0, a negative margin,
  /// borrowed_margin or span_seconds, a peak_factor below 1, a busy_tick_s
  /// not above 0.
  static Result<LinkChooser> make(ChooserOptions options);

  /// TCP_INFO figures of the connection's socket.
  void observe(const net::LinkFigures& figures);
  /// Reads TCP_INFO of `fd` and observes it; false when the socket gives
  /// no figures (the chooser is unchanged). Any moment will do: before a
  /// large frame is chosen, after a large write.
  bool observe_socket(int fd);
  /// A write of `bytes` took `seconds` (to the kernel's acceptance of its
  /// last byte). Ignored below min_write_bytes or for seconds <= 0.
  void observe_write(std::uint64_t bytes, double seconds);

  /// Compressing `bytes` with `c` took `seconds`, just now, in this
  /// process (a frame compressed by this chooser's choice or by the
  /// caller's own codec): how much slower than calibrated this process
  /// compresses at present. Every speed, compressing and decompressing
  /// (the receiver's stand-in), is divided by that slowdown: the least of
  /// the last rate_window, kept within [1/4, 16]. Ignored for none, below
  /// vote_bytes, for seconds <= 0 and for a codec this build cannot time.
  void observe_compress(const CodecChoice& c, std::uint64_t bytes, double seconds);
  /// The slowdown above; 1 before any observation.
  double slowdown() const;

  /// The link's rate in bytes per second: the best sample, or the open
  /// span's floor where that is higher; nullopt: no sample yet.
  std::optional<double> rate() const;
  /// The open span's floor (see above); nullopt: the open span has not
  /// carried floor_bytes.
  std::optional<double> floor_rate() const { return floor_; }
  /// The last RTT TCP_INFO gave (seconds); nullopt: none seen.
  std::optional<double> rtt() const { return rtt_; }
  /// Where rate() comes from: "tcp", "writes" or "unknown" ("tcp floor":
  /// no sample yet, but the floor is fast enough that none is certain:
  /// for every frame, or for the one the last choose() was given; "host":
  /// only the rate another connection to the host left, see above).
  const char* rate_source() const;

  /// A chooser without a TCP sample yet takes the rate its host's memory
  /// holds now, as make() does ("New connections" above): for a caller
  /// that has just read the host's other connections. True when it took
  /// one.
  bool take_host_rate();

  /// The codec for this frame (see the rules above).
  std::optional<CodecChoice> choose(ByteSpan frame);
  /// Whether choose() could name a codec other than none now, without a
  /// frame: a pin (not on the same host), or a known rate at which some
  /// candidate beats none at a sample ratio of 0 (rule 3). False: every
  /// frame goes as the caller would send it anyway (raw, or unknown).
  bool may_code() const;
  /// The connection's current choice; nullopt before the first. A pin is
  /// the choice from the start (not on the same host).
  const std::optional<CodecChoice>& current() const { return current_; }
  /// Whether the last choose() changed the connection's choice.
  bool changed() const { return changed_; }
  /// The last change; nullopt when there was none.
  const std::optional<ChoiceChange>& last_change() const { return last_change_; }
  std::uint64_t changes() const { return changes_; }

  /// The candidates, none first, in the order ties are broken.
  const std::vector<CodecChoice>& candidates() const { return candidates_; }
  /// T(c) for `bytes` at `ratio` on a link of `rate` bytes per second.
  double delivery_seconds(const CodecChoice& c, std::uint64_t bytes, double ratio, double rate) const;

 private:
  explicit LinkChooser(ChooserOptions options) : options_(std::move(options)) {}
  CodecSpeed base_speed(const CodecChoice& c) const;  // given or calibrated
  CodecSpeed speed(const CodecChoice& c) const;       // divided by slowdown()
  struct Verdict {
    CodecChoice best;
    double best_ratio = 1.0;
    double current_seconds = 0.0;  // T(current) on this frame (0 without a current)
    double best_seconds = 0.0;
    double none_seconds = 0.0;
    bool current_fits = false;  // the current codec shrinks this frame's sample enough (Dask's ratio)
    bool votes = true;  // false: the data does not compress, the frame says nothing of the link
  };
  Verdict judge(ByteSpan frame, double rate) const;
  // The best, where it is none or beats none by the margin; else none.
  CodecChoice first_choice(const Verdict& v) const;
  // Whether some candidate beats none at `rate` with a sample ratio of 0.
  bool codes_at(double rate) const;
  bool add_sample(std::vector<double>& window, double value);  // false: not a rate
  // A TCP sample: to the window, and where `remember`, to the host's memory.
  void add_tcp_sample(double value, bool remember);

  ChooserOptions options_;
  std::vector<CodecChoice> candidates_;
  std::vector<double> tcp_rates_;    // the window, oldest first
  bool seeded_only_ = false;         // tcp_rates_ holds only the host's remembered rate
  std::vector<double> write_rates_;
  std::vector<double> slowdowns_;    // observe_compress(), oldest first
  std::optional<double> rtt_;
  // Where the open span began: bytes acknowledged and busy seconds.
  std::uint64_t span_bytes_ = 0;
  double span_busy_ = 0.0;
  std::optional<double> span_rate_;  // the latest closed span's rate
  std::optional<double> floor_;      // the open span's floor
  bool chose_at_floor_ = false;      // the last choose() made none certain at the floor
  std::optional<std::uint64_t> last_delivered_;  // tcpi_bytes_acked of the last reading
  bool socket_figures_ = false;  // observe() was called: writes are not used
  std::optional<CodecChoice> current_;
  std::optional<CodecChoice> challenger_;
  std::uint32_t streak_ = 0;
  bool changed_ = false;
  std::optional<ChoiceChange> last_change_;
  std::uint64_t changes_ = 0;
};

/// What `dask-caps check` says of one link: the rate the chooser takes from
/// one reading of TCP_INFO, and the codec it would choose there for a
/// large frame of measurement-like data (reference_frame()); codec nullopt:
/// the link is unknown (the connection was busy less than span_seconds in
/// its life, as after a handshake alone), Dask's choice stays.
struct LinkView {
  std::optional<double> rate;
  std::string rate_source;  // "tcp", "tcp floor" or "unknown"
  std::optional<CodecChoice> codec;
};
LinkView view_link(const net::LinkFigures& figures, std::vector<Codec> receiver_codecs, bool same_host);

/// `bytes` of measurement-like float64 values (a slow drift and noise, one
/// decimal), the same in every process: compressible data a choice is
/// about. The calibration buffer is 128 KiB of it.
Buffer reference_frame(std::size_t bytes);

}  // namespace daskcaps::link
