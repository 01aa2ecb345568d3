// What recode_frame() and transcode_message_in_place()
// (daskcaps/recode/stream_recode.h; core/recode/internal/stream_recode.cpp, and
// core/recode/message_in_place.cpp with core/recode/detail/inline_frame.cpp)
// both need to judge a frame by Dask's maybe_compress rule as its decoded
// windows pass: the sample, its test, and the decoded size a compressed
// frame declares, read through its input.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/result.h"
#include "daskcaps/recode/transcode.h"
#include "daskcaps/wire/codec.h"
#include "core/wire/internal/frame_input.h"

namespace daskcaps::detail {

// The sample maybe_compress() takes (core/wire/codec.cpp): sample_count
// slices of min(sample_size, size) bytes, evenly spread over the frame, the
// last one ending at its end. Taken from the decoded windows as they pass.
class Sample {
 public:
  Sample(std::uint64_t size, const MaybeCompressRules& rules) {
    len_ = std::min<std::uint64_t>(rules.sample_size, size);
    if (len_ == 0 || rules.sample_count == 0) return;
    const std::uint64_t max_start = size - len_;
    for (std::uint32_t i = 0; i < rules.sample_count; ++i)
      starts_.push_back(rules.sample_count == 1 ? 0 : max_start * i / (rules.sample_count - 1));
    bytes_.resize_uninitialised(static_cast<std::size_t>(len_ * starts_.size()));
  }
  bool empty() const { return starts_.empty(); }
  ByteSpan bytes() const { return bytes_; }
  const std::vector<std::uint64_t>& starts() const { return starts_; }
  std::uint64_t slice_bytes() const { return len_; }

  /// The decoded bytes [at, at + w.size()).
  void take(std::uint64_t at, ByteSpan w) {
    for (std::size_t i = 0; i < starts_.size(); ++i) {
      const std::uint64_t from = std::max(at, starts_[i]);
      const std::uint64_t to = std::min(at + w.size(), starts_[i] + len_);
      if (from >= to) continue;
      std::memcpy(bytes_.data() + i * len_ + (from - starts_[i]), w.data() + (from - at),
                  static_cast<std::size_t>(to - from));
    }
  }

 private:
  std::uint64_t len_ = 0;
  std::vector<std::uint64_t> starts_;
  Buffer bytes_;
};

// maybe_compress()'s first test: does the sample shrink to `ratio`?
Result<bool> sample_compresses(Codec target, const Sample& sample, const TranscodeOptions& opt);

// The size a compressed frame declares in its header, read through the input.
std::optional<std::uint64_t> declared_of(Codec c, FrameInput& input);

}  // namespace daskcaps::detail
