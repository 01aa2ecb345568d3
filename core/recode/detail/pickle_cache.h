// The recoded small pickles of the object recoder (object_recoder.h):
// pickles without buffers of at most kMaxPickleBytes (a class reference in
// every type-serialized header comes again and again), by their bytes, the
// recode options and the pickle limits, which are all the pickle engine's
// output depends on. One cache per thread (no lock), emptied when full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "daskcaps/base/bytes.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/pickle/pickle.h"

namespace daskcaps::detail {

class PickleCache {
 public:
  static constexpr std::size_t kMaxPickleBytes = 4096;
  static constexpr std::size_t kMaxEntries = 1024;

  const Buffer* find(ByteSpan pickled, const pickle::RecodeOptions& ro, const Limits& limits) {
    key_of(pickled, ro, limits);
    auto it = entries_.find(key_);
    return it == entries_.end() ? nullptr : &it->second;
  }
  void put(ByteSpan pickled, const pickle::RecodeOptions& ro, const Limits& limits, const Buffer& out) {
    if (entries_.size() >= kMaxEntries) entries_.clear();
    key_of(pickled, ro, limits);
    entries_.emplace(key_, out);
  }

 private:
  void key_of(ByteSpan pickled, const pickle::RecodeOptions& ro, const Limits& limits) {
    key_.assign(as_chars(pickled));
    key_.push_back(static_cast<char>(ro.target_protocol));
    key_.push_back(ro.inline_buffers ? 1 : 0);
    const std::uint64_t bounds[] = {limits.max_pickle_depth, limits.max_pickle_memo, limits.max_pickle_stack,
                                    limits.max_pickle_output_bytes};
    key_.append(reinterpret_cast<const char*>(bounds), sizeof bounds);
  }
  std::unordered_map<std::string, Buffer> entries_;
  std::string key_;
};

/// This thread's cache.
PickleCache& pickle_cache();

}  // namespace daskcaps::detail
