#include "daskcaps/caps/link_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace daskcaps::link {

namespace {

constexpr double kInfinite = std::numeric_limits<double>::infinity();

CompressOptions compress_options(const CodecChoice& c) {
  CompressOptions o;
  if (c.codec == Codec::zstd && c.level > 0) o.zstd_level = c.level;
  return o;
}

// The best of a few runs of `f` (at least 3, until 2 ms have passed, at
// most 50), in seconds: the best run is the one least disturbed by others.
template <typename F>
double best_seconds(F&& f) {
  using clock = std::chrono::steady_clock;
  double best = kInfinite;
  const auto start = clock::now();
  for (int run = 0; run < 50; ++run) {
    const auto t0 = clock::now();
    if (!f()) return kInfinite;
    const auto t1 = clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    if (run >= 2 && t1 - start > std::chrono::milliseconds(2)) break;
  }
  return best;
}

CodecSpeed measure(const CodecChoice& c) {
  static const Buffer input = reference_frame(std::size_t{128} << 10);
  const double n = static_cast<double>(input.size());
  std::optional<Buffer> packed;
  const double tc = best_seconds([&] {
    auto r = compress(c.codec, input, compress_options(c));
    if (!r) return false;
    packed = std::move(*r);
    return true;
  });
  if (!packed) return {};  // cannot compress here: never chosen (speed 0)
  const double td = best_seconds([&] { return decompress(c.codec, *packed, input.size()).ok(); });
  // A timer too coarse for the buffer gives 0 s: take it as very fast.
  return {tc > 0 ? n / tc : kInfinite, td > 0 ? n / td : kInfinite};
}

// The process's memory of links (link_choice.h, "New connections").
class HostRates {
 public:
  static constexpr std::size_t kMaxHosts = 4096;
  static constexpr std::size_t kMaxHostBytes = 255;
  using Clock = std::chrono::steady_clock;

  // The best of the rates put within max_age_s (as a chooser keeps the
  // best of its window): a connection whose span understated the link (a
  // peer slow to read) does not replace what another measured.
  void put(const std::string& host, double rate, double max_age_s) {
    if (host.empty() || host.size() > kMaxHostBytes) return;
    const auto now = Clock::now();
    std::lock_guard lock(mutex_);
    auto it = rates_.find(host);
    if (it == rates_.end()) {
      if (rates_.size() >= kMaxHosts) {
        rates_.erase(std::min_element(rates_.begin(), rates_.end(),
                                      [](const auto& a, const auto& b) { return a.second.when < b.second.when; }));
      }
      it = rates_.emplace(host, Entry{rate, now}).first;
      return;
    }
    const bool fresh = std::chrono::duration<double>(now - it->second.when).count() <= max_age_s;
    if (!fresh || rate >= it->second.rate) it->second = Entry{rate, now};
  }

  std::optional<double> get(const std::string& host, double max_age_s) const {
    if (host.empty() || host.size() > kMaxHostBytes) return std::nullopt;
    std::lock_guard lock(mutex_);
    const auto it = rates_.find(host);
    if (it == rates_.end()) return std::nullopt;
    if (std::chrono::duration<double>(Clock::now() - it->second.when).count() > max_age_s) return std::nullopt;
    return it->second.rate;
  }

 private:
  struct Entry {
    double rate = 0.0;
    Clock::time_point when;
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> rates_;
};

HostRates& host_rates() {
  static HostRates rates;
  return rates;
}

std::uint64_t choice_key(const CodecChoice& c) {
  return (static_cast<std::uint64_t>(c.codec) << 8) | static_cast<std::uint64_t>(c.level & 0xff);
}

}  // namespace

Buffer reference_frame(std::size_t bytes) {
  const std::size_t values = bytes / sizeof(double);
  Buffer out;
  out.reserve(values * sizeof(double));
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i < values; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double noise = (static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5) * 2.0;
    const double x = std::round((20.0 + 5.0 * std::sin(static_cast<double>(i) / 500.0) + noise) * 10.0) / 10.0;
    std::uint8_t b[sizeof(double)];
    std::memcpy(b, &x, sizeof x);
    out.append(ByteSpan(b, sizeof b));
  }
  return out;
}

LinkView view_link(const net::LinkFigures& figures, std::vector<Codec> receiver_codecs, bool same_host) {
  ChooserOptions o;
  o.receiver_codecs = std::move(receiver_codecs);
  o.same_host = same_host;
  auto chooser = LinkChooser::make(std::move(o));
  LinkView v;
  if (!chooser) return v;  // cannot happen without a pin or levels
  chooser->observe(figures);
  static const Buffer frame = reference_frame(std::size_t{4} << 20);
  v.codec = chooser->choose(frame);
  v.rate_source = chooser->rate_source();
  // "tcp floor": no sample, the floor it chose by.
  v.rate = v.rate_source == "tcp floor" ? chooser->floor_rate() : chooser->rate();
  return v;
}

std::string choice_name(const CodecChoice& c) {
  std::string name(codec_name(c.codec));
  if (c.codec == Codec::zstd && c.level > 0) {
    name += '-';  // appended, not "-" + to_string(): GCC 12 -O3 -Wrestrict misfires
    name += std::to_string(c.level);
  }
  return name;
}

std::optional<CodecChoice> parse_choice(std::string_view text) {
  std::string_view name = text;
  int level = 0;
  if (const auto dash = text.find('-'); dash != std::string_view::npos) {
    name = text.substr(0, dash);
    const std::string_view digits = text.substr(dash + 1);
    if (name != "zstd" || digits.empty() || digits.size() > 2 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos)
      return std::nullopt;
    for (char d : digits) level = level * 10 + (d - '0');
    if (level < 1 || level > 22) return std::nullopt;
  }
  // Only the names choice_name() writes ("none", not "", "false", "null").
  if (name == codec_name(Codec::none)) return CodecChoice{Codec::none, 0};
  for (Codec c : kAllCodecs)
    if (codec_name(c) == name) return CodecChoice{c, level};
  return std::nullopt;
}

CodecSpeed calibrated_speed(const CodecChoice& c) {
  if (c.codec == Codec::none) return {kInfinite, kInfinite};
  static std::mutex mutex;
  static std::map<std::uint64_t, CodecSpeed> measured;
  std::lock_guard lock(mutex);
  const auto key = choice_key(c);
  if (auto it = measured.find(key); it != measured.end()) return it->second;
  const CodecSpeed s = measure(c);
  measured.emplace(key, s);
  return s;
}

std::string describe(const ChoiceChange& change) {
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.3g MB/s", change.rate / 1e6);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2f", change.ratio);
  return "codec for this link: " + (change.from ? choice_name(*change.from) : std::string("(Dask's)")) + " -> " +
         choice_name(change.to) + " (link " + rate + ", sample ratio " + ratio + ", frame " +
         std::to_string(change.frame_bytes) + " bytes, change " + std::to_string(change.number) + ")";
}

Result<LinkChooser> LinkChooser::make(ChooserOptions options) {
  if (options.votes == 0) return make_error(Errc::usage, "link choice: votes must be at least 1");
  if (options.rate_window == 0) return make_error(Errc::usage, "link choice: rate_window must be at least 1");
  if (!(options.margin >= 0.0)) return make_error(Errc::usage, "link choice: margin must not be negative");
  if (!(options.span_seconds >= 0.0))
    return make_error(Errc::usage, "link choice: span_seconds must not be negative");
  if (!(options.peak_factor >= 1.0)) return make_error(Errc::usage, "link choice: peak_factor must be at least 1");
  if (!(options.busy_tick_s > 0.0)) return make_error(Errc::usage, "link choice: busy_tick_s must be positive");
  if (!(options.borrowed_margin >= 0.0))
    return make_error(Errc::usage, "link choice: borrowed_margin must not be negative");
  for (int level : options.zstd_levels) {
    if (level < 1 || level > 22)
      return make_error(Errc::usage, "link choice: zstd level " + std::to_string(level) + ": zstd levels are 1 to 22");
  }
  std::sort(options.zstd_levels.begin(), options.zstd_levels.end());
  options.zstd_levels.erase(std::unique(options.zstd_levels.begin(), options.zstd_levels.end()),
                            options.zstd_levels.end());
  LinkChooser chooser(std::move(options));
  const ChooserOptions& o = chooser.options_;
  chooser.candidates_.push_back({Codec::none, 0});
  // In Dask's order of preference (kAllCodecs), each codec once.
  for (Codec c : kAllCodecs) {
    if (std::find(o.receiver_codecs.begin(), o.receiver_codecs.end(), c) == o.receiver_codecs.end()) continue;
    if (c == Codec::zstd) {
      for (int level : o.zstd_levels) chooser.candidates_.push_back({c, level});
    } else {
      chooser.candidates_.push_back({c, 0});
    }
  }
  if (o.pin && o.pin->codec != Codec::none &&
      std::find(o.receiver_codecs.begin(), o.receiver_codecs.end(), o.pin->codec) == o.receiver_codecs.end())
    return make_error(Errc::usage, "link choice: the pinned codec " + choice_name(*o.pin) +
                                       " is not one the receiver decodes");
  if (o.pin && o.pin->codec == Codec::zstd && o.pin->level != 0 && (o.pin->level < 1 || o.pin->level > 22))
    return make_error(Errc::usage, "link choice: zstd level " + std::to_string(o.pin->level) +
                                       ": zstd levels are 1 to 22");
  // A pin is the connection's choice from the start (same host: Dask's
  // rule, none, is, and the connection has no choice of its own).
  if (o.pin && !o.same_host) chooser.current_ = *o.pin;
  chooser.take_host_rate();
  return chooser;
}

bool LinkChooser::take_host_rate() {
  if (!tcp_rates_.empty()) return false;
  const auto remembered = host_rates().get(options_.host, options_.remembered_seconds);
  if (!remembered) return false;
  seeded_only_ = add_sample(tcp_rates_, *remembered);
  return seeded_only_;
}

bool LinkChooser::add_sample(std::vector<double>& window, double value) {
  if (!(value > 0.0) || !std::isfinite(value)) return false;
  window.push_back(value);
  if (window.size() > options_.rate_window) window.erase(window.begin());
  return true;
}

void LinkChooser::add_tcp_sample(double value, bool remember) {
  if (!add_sample(tcp_rates_, value)) return;
  seeded_only_ = false;
  if (remember) host_rates().put(options_.host, value, options_.remembered_seconds);
}

void LinkChooser::observe(const net::LinkFigures& figures) {
  socket_figures_ = true;
  if (figures.rtt_s > 0.0) rtt_ = figures.rtt_s;
  // Nothing acknowledged since the last reading: the kernel's sample is the
  // one already weighed.
  const bool fresh = !last_delivered_ || *last_delivered_ != figures.delivered_bytes;
  last_delivered_ = figures.delivered_bytes;
  auto restart_span = [&] {
    span_bytes_ = figures.delivered_bytes;
    span_busy_ = figures.busy_s;
    floor_.reset();
  };
  if (figures.delivered_bytes < span_bytes_ || figures.busy_s < span_busy_) {
    restart_span();  // not the socket the span began on
    span_rate_.reset();
    return;
  }
  const double busy = figures.busy_s - span_busy_;
  const std::uint64_t carried = figures.delivered_bytes - span_bytes_;
  if (busy >= options_.span_seconds && busy >= 10.0 * figures.min_rtt_s && busy > 0.0) {
    span_rate_ = static_cast<double>(carried) / busy;
    // Only a span that carried a large frame's worth is the host's link: a
    // connection of small messages (Dask's batched stream) can be busy for
    // 0.1 s on a few KB when its peer is slow to read.
    add_tcp_sample(*span_rate_, carried >= options_.vote_bytes);
    restart_span();
  } else if (figures.idle && carried < options_.vote_bytes) {
    restart_span();  // small messages only: their busy time is round trips
  } else if (carried >= options_.floor_bytes) {
    floor_ = static_cast<double>(carried) / (busy + options_.busy_tick_s);
  }
  if (fresh && !figures.app_limited && span_rate_ && figures.delivery_rate <= options_.peak_factor * *span_rate_)
    add_tcp_sample(figures.delivery_rate, false);
}

bool LinkChooser::observe_socket(int fd) {
  const auto figures = net::read_link_figures(fd);
  if (!figures) return false;
  observe(*figures);
  return true;
}

void LinkChooser::observe_write(std::uint64_t bytes, double seconds) {
  if (bytes < options_.min_write_bytes || !(seconds > 0.0)) return;
  add_sample(write_rates_, static_cast<double>(bytes) / seconds);
}

std::optional<double> LinkChooser::rate() const {
  const auto& w = !tcp_rates_.empty() || socket_figures_ ? tcp_rates_ : write_rates_;
  if (w.empty()) return std::nullopt;
  const double best = *std::max_element(w.begin(), w.end());
  return floor_ && *floor_ > best ? *floor_ : best;
}

const char* LinkChooser::rate_source() const {
  if (!tcp_rates_.empty()) return seeded_only_ ? "host" : "tcp";
  if (floor_ && (chose_at_floor_ || !codes_at(*floor_))) return "tcp floor";
  if (!socket_figures_ && !write_rates_.empty()) return "writes";
  return "unknown";
}

CodecSpeed LinkChooser::base_speed(const CodecChoice& c) const {
  if (c.codec == Codec::none) return {kInfinite, kInfinite};
  for (const auto& [choice, s] : options_.speeds) {
    if (choice == c) return s;
  }
  return calibrated_speed(c);
}

CodecSpeed LinkChooser::speed(const CodecChoice& c) const {
  CodecSpeed s = base_speed(c);
  const double k = slowdown();
  s.compress /= k;
  s.decompress /= k;
  return s;
}

void LinkChooser::observe_compress(const CodecChoice& c, std::uint64_t bytes, double seconds) {
  if (c.codec == Codec::none || bytes == 0 || bytes < options_.vote_bytes || !(seconds > 0.0)) return;
  const CodecSpeed base = base_speed(c);
  if (!(base.compress > 0.0) || !std::isfinite(base.compress)) return;
  const double measured = static_cast<double>(bytes) / seconds;
  const double k = std::clamp(base.compress / measured, 0.25, 16.0);
  slowdowns_.push_back(k);
  if (slowdowns_.size() > options_.rate_window) slowdowns_.erase(slowdowns_.begin());
}

double LinkChooser::slowdown() const {
  if (slowdowns_.empty()) return 1.0;
  return *std::min_element(slowdowns_.begin(), slowdowns_.end());
}

double LinkChooser::delivery_seconds(const CodecChoice& c, std::uint64_t bytes, double ratio, double rate) const {
  const double n = static_cast<double>(bytes);
  if (c.codec == Codec::none) return n / rate;
  const CodecSpeed s = speed(c);
  if (!(s.compress > 0.0) || !(s.decompress > 0.0)) return kInfinite;
  return n / s.compress + ratio * n / rate + n / s.decompress;
}

LinkChooser::Verdict LinkChooser::judge(ByteSpan frame, double rate) const {
  Verdict v;
  const std::uint64_t n = frame.size();
  v.none_seconds = delivery_seconds({}, n, 1.0, rate);
  v.best = {};
  v.best_seconds = v.none_seconds;
  // Candidates that could beat none at all (at a ratio of 0), and the
  // current one, whose time the hysteresis compares.
  std::vector<CodecChoice> sampled;
  for (const CodecChoice& c : candidates_) {
    if (c.codec == Codec::none) continue;
    if (delivery_seconds(c, n, 0.0, rate) < v.none_seconds || (current_ && *current_ == c)) sampled.push_back(c);
  }
  v.current_seconds = v.none_seconds;
  if (current_ && current_->codec != Codec::none) v.current_seconds = kInfinite;
  if (sampled.empty()) return v;
  const Buffer sample = frame_sample(frame, options_.rules);
  if (sample.empty()) return v;
  v.votes = false;
  for (const CodecChoice& c : sampled) {
    auto packed = compress(c.codec, sample, compress_options(c));
    if (!packed) continue;  // the format cannot hold it: not a choice here
    const double ratio = static_cast<double>(packed->size()) / static_cast<double>(sample.size());
    // A frame whose sample shrinks less than Dask's ratio goes raw anyway.
    if (ratio > options_.rules.ratio) continue;
    v.votes = true;
    const double t = delivery_seconds(c, n, ratio, rate);
    if (current_ && *current_ == c) {
      v.current_seconds = t;
      v.current_fits = true;
    }
    if (t < v.best_seconds) {
      v.best = c;
      v.best_seconds = t;
      v.best_ratio = ratio;
    }
  }
  return v;
}

CodecChoice LinkChooser::first_choice(const Verdict& v) const {
  // As if the connection had chosen none, but without the votes: a codec
  // must win by the margin (docs/link-choice.md, "Stability").
  if (v.best.codec == Codec::none || v.none_seconds > (1.0 + options_.margin) * v.best_seconds) return v.best;
  return CodecChoice{};
}

bool LinkChooser::may_code() const {
  if (options_.same_host) return false;
  if (options_.pin) return options_.pin->codec != Codec::none;
  const auto r = rate();
  return r && codes_at(*r);
}

bool LinkChooser::codes_at(double rate) const {
  // T(c) at a ratio of 0 against T(none): linear in the frame's size, so
  // any size answers for all.
  const std::uint64_t n = options_.vote_bytes > 0 ? options_.vote_bytes : 1;
  const double none_seconds = delivery_seconds({}, n, 1.0, rate);
  for (const CodecChoice& c : candidates_)
    if (c.codec != Codec::none && delivery_seconds(c, n, 0.0, rate) < none_seconds) return true;
  return false;
}

std::optional<CodecChoice> LinkChooser::choose(ByteSpan frame) {
  changed_ = false;
  const std::uint64_t n = frame.size();
  if (n < options_.rules.min_size || n > options_.rules.max_size) return CodecChoice{};
  if (options_.same_host) return CodecChoice{};
  if (options_.pin) return *options_.pin;
  // No sample yet: the open span's floor decides only what it makes
  // certain. T(none) - T(c) shrinks as the rate grows, so where none is
  // this frame's best at the floor, it is at the link's true rate too. A
  // codec that wins at the floor may not win there: today's choice stays
  // (or the connection's, once it has one), and nothing votes.
  auto r = rate();
  const bool at_floor = !r && floor_;
  if (at_floor) r = floor_;
  chose_at_floor_ = false;
  if (!r) return std::nullopt;
  const Verdict v = judge(frame, *r);
  // A rate borrowed from the host's memory decides none, or a codec that
  // wins by borrowed_margin; a closer call waits for this connection's own
  // span ("New connections").
  const bool proves = v.best.codec == Codec::none ||
                      (!at_floor && (!seeded_only_ || v.none_seconds > (1.0 + options_.borrowed_margin) * v.best_seconds));
  if (!proves && !current_) return std::nullopt;
  chose_at_floor_ = at_floor && proves;

  if (proves && n >= options_.vote_bytes && v.votes) {
    auto change_to = [&](const CodecChoice& to) {
      ChoiceChange change;
      change.from = current_;
      change.to = to;
      change.rate = *r;
      change.ratio = v.best_ratio;
      change.frame_bytes = n;
      change.number = ++changes_;
      last_change_ = change;
      current_ = to;
      changed_ = true;
      challenger_.reset();
      streak_ = 0;
    };
    if (!current_) {
      change_to(first_choice(v));
    } else if (v.best != *current_ && v.current_seconds > (1.0 + options_.margin) * v.best_seconds) {
      if (challenger_ && *challenger_ == v.best) {
        ++streak_;
      } else {
        challenger_ = v.best;
        streak_ = 1;
      }
      if (streak_ >= options_.votes) change_to(v.best);
    } else {
      challenger_.reset();
      streak_ = 0;
    }
  }

  if (!current_) return first_choice(v);  // no large frame yet: this frame's
  if (changed_) return *current_;  // this frame's best
  if (current_->codec == Codec::none) return CodecChoice{};
  // The data decides within the connection's choice (rule 5); the link
  // does not, frame by frame: that is the hysteresis' job.
  return v.current_fits ? *current_ : CodecChoice{};
}

}  // namespace daskcaps::link
