// The per-thread cache of recoded small pickles (core/recode/detail/pickle_cache.h).
#include "core/recode/detail/pickle_cache.h"

namespace daskcaps::detail {

PickleCache& pickle_cache() {
  thread_local PickleCache cache;
  return cache;
}

}  // namespace daskcaps::detail
