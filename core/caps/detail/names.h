// Small helpers that the peer (peer.cpp) and the findings (caps.cpp) share:
// dotted version numbers and lists of codec names.
#pragma once

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

namespace daskcaps::detail {

/// Leading integers of a dotted version: "2022.12.1+ds.1" -> {2022, 12, 1}.
inline std::vector<long> version_numbers(std::string_view v) {
  std::vector<long> out;
  std::size_t i = 0;
  while (i < v.size()) {
    long n = 0;
    auto [p, ec] = std::from_chars(v.data() + i, v.data() + v.size(), n);
    if (ec != std::errc()) break;
    out.push_back(n);
    i = static_cast<std::size_t>(p - v.data());
    if (i >= v.size() || v[i] != '.') break;
    ++i;
  }
  return out;
}

inline bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace daskcaps::detail
