#include "daskcaps/base/bytes.h"

#include <cstdio>

namespace daskcaps {

std::string hex_offset(std::uint64_t offset) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(offset));
  return buf;
}

}  // namespace daskcaps
