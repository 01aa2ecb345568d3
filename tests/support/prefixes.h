// Test helper: feed every strict prefix of a valid sample to a parser
// (docs/design.md §9.2). The callback must see an error or NeedMore, never a crash.
#pragma once

#include <functional>

#include "core/wire/internal/frame_decoder.h"
#include "daskcaps/base/bytes.h"

namespace testsupport {

inline void for_each_strict_prefix(daskcaps::ByteSpan sample,
                                   const std::function<void(daskcaps::ByteSpan)>& fn) {
  for (std::size_t n = 0; n < sample.size(); ++n) fn(sample.first(n));
}

}  // namespace testsupport
