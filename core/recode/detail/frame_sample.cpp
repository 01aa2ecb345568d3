// The sample test and the declared size of core/recode/detail/frame_sample.h.
#include "core/recode/detail/frame_sample.h"

#include <cstring>
#include <utility>

namespace daskcaps::detail {

Result<bool> sample_compresses(Codec target, const Sample& sample, const TranscodeOptions& opt) {
  if (sample.empty()) return true;
  auto small = compress(target, sample.bytes(), opt.compress);
  if (!small) return std::move(small).error();
  return !(static_cast<double>(small->size()) > opt.rules.ratio * static_cast<double>(sample.bytes().size()));
}

std::optional<std::uint64_t> declared_of(Codec c, FrameInput& input) {
  std::uint8_t head[18];
  std::size_t have = 0;
  while (have < sizeof head && have < input.size()) {
    auto p = input.read(have, sizeof head - have);
    if (!p || p->empty()) return std::nullopt;
    std::memcpy(head + have, p->data(), p->size());
    have += p->size();
  }
  return declared_size(c, ByteSpan(head, have));
}

}  // namespace daskcaps::detail
