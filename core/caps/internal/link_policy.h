// The codec per link of one direction a process writes (the bridge's two
// legs): a LinkChooser (core/caps/link_choice.h) behind the recode's
// FrameCodecPolicy (core/recode/internal/frame_codec.h), so that the recode asks the
// core's one choice for each raw frame, never a rule of the caller's.
//
// Contract.
//   - The receiver's codecs are what the delivery says it reads as it
//     arrives (Delivery::accept: its published codecs, a plain Dask peer's
//     advertised one, or the user's codec), so a receiver is never sent a
//     codec it cannot read. A receiver that reads none gets no policy:
//     nothing to choose, every frame goes as today.
//   - The owner (one thread: the bridge's loop) tells it what the socket
//     says, observe(), best right after a large write was handed to the
//     kernel (link_choice.h says why), and takes the changes of choice to log
//     them, take_changes(). The recode threads ask choose() concurrently;
//     one mutex guards the chooser. may_compress() takes no lock (an atomic
//     set by observe()).
//   - choose() is the chooser's answer: nullopt (the link is unknown, no
//     figures yet or none at all) keeps today's choice, byte for byte;
//     none keeps the frame raw; a codec compresses it (the recode applies
//     Dask's maybe_compress rule to it).
//   - Changes are kept for take_changes() up to kMaxPending; older ones
//     are dropped and counted (a peer cannot make them grow: each needs
//     `votes` large frames).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daskcaps/base/result.h"
#include "daskcaps/caps/delivery.h"
#include "daskcaps/caps/link_choice.h"
#include "daskcaps/net/link_figures.h"
#include "core/recode/internal/frame_codec.h"

namespace daskcaps::link {

class LinkPolicy final : public FrameCodecPolicy {
 public:
  static constexpr std::size_t kMaxPending = 16;

  /// A policy for a sender that writes `delivery`: receiver_codecs from
  /// its accept list, `same_host` (the peer has this host's IP: Dask's rule,
  /// none), `pin` (every frame Dask would compress), `rules` (the
  /// maybe_compress rules the recode applies), `host` (the peer's IP:
  /// ChooserOptions::host, the process's memory of links). Null when the
  /// receiver reads no codec. Errors: LinkChooser::make's (Errc::usage: a
  /// pin the receiver does not decode).
  static Result<std::shared_ptr<LinkPolicy>> for_delivery(const Delivery& delivery, bool same_host,
                                                          std::optional<CodecChoice> pin,
                                                          const MaybeCompressRules& rules, std::string host = {});
  explicit LinkPolicy(LinkChooser chooser) : chooser_(std::move(chooser)) {}

  std::optional<FrameCodec> choose(ByteSpan raw) override;
  bool may_compress() const override;
  void compressed(const FrameCodec& codec, std::uint64_t bytes, double seconds) override;

  void observe(const net::LinkFigures& figures);
  /// One line per change of choice since the last call (describe()), and a
  /// line saying how many were dropped when more than kMaxPending waited.
  std::vector<std::string> take_changes();
  /// The current choice's name ("none", "zstd-1"); "" before the first.
  std::string current() const;

 private:
  mutable std::mutex mutex_;
  LinkChooser chooser_;
  // may_code() as of the last observe(): only the rate moves it. Read
  // without the lock, so that the loop thread's cut-through plan never
  // waits for a recode thread's sampling.
  std::atomic<bool> may_{false};
  std::vector<ChoiceChange> pending_;
  std::uint64_t dropped_ = 0;
};

}  // namespace daskcaps::link
