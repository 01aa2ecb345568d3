#include "core/caps/internal/link_policy.h"

#include <utility>

namespace daskcaps::link {

Result<std::shared_ptr<LinkPolicy>> LinkPolicy::for_delivery(const Delivery& delivery, bool same_host,
                                                             std::optional<CodecChoice> pin,
                                                             const MaybeCompressRules& rules, std::string host) {
  ChooserOptions o;
  for (Codec c : delivery.accept)
    if (c != Codec::none) o.receiver_codecs.push_back(c);
  if (o.receiver_codecs.empty()) return std::shared_ptr<LinkPolicy>();
  o.same_host = same_host;
  o.pin = pin;
  o.rules = rules;
  o.host = std::move(host);
  auto chooser = LinkChooser::make(std::move(o));
  if (!chooser) return std::move(chooser).error();
  auto policy = std::make_shared<LinkPolicy>(std::move(*chooser));
  policy->may_.store(policy->chooser_.may_code());  // a pin: before any figure
  return policy;
}

std::optional<FrameCodec> LinkPolicy::choose(ByteSpan raw) {
  std::lock_guard lock(mutex_);
  const std::optional<CodecChoice> c = chooser_.choose(raw);
  if (chooser_.changed() && chooser_.last_change()) {
    if (pending_.size() >= kMaxPending) {
      pending_.erase(pending_.begin());
      ++dropped_;
    }
    pending_.push_back(*chooser_.last_change());
  }
  if (!c) return std::nullopt;
  return FrameCodec{c->codec, c->level};
}

bool LinkPolicy::may_compress() const { return may_.load(std::memory_order_relaxed); }

void LinkPolicy::compressed(const FrameCodec& codec, std::uint64_t bytes, double seconds) {
  std::lock_guard lock(mutex_);
  chooser_.observe_compress(CodecChoice{codec.codec, codec.zstd_level}, bytes, seconds);
  may_.store(chooser_.may_code(), std::memory_order_relaxed);  // speeds move it too
}

void LinkPolicy::observe(const net::LinkFigures& figures) {
  std::lock_guard lock(mutex_);
  chooser_.observe(figures);
  may_.store(chooser_.may_code(), std::memory_order_relaxed);
}

std::vector<std::string> LinkPolicy::take_changes() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> lines;
  if (dropped_ > 0) lines.push_back(std::to_string(dropped_) + " earlier changes of the codec for this link not shown");
  for (const ChoiceChange& c : pending_) lines.push_back(describe(c));
  pending_.clear();
  dropped_ = 0;
  return lines;
}

std::string LinkPolicy::current() const {
  std::lock_guard lock(mutex_);
  return chooser_.current() ? choice_name(*chooser_.current()) : std::string();
}

}  // namespace daskcaps::link
