#include "daskcaps/wire/dask_release.h"

#include <charconv>

namespace daskcaps {

namespace {
/// The first two dotted integers of a version: "2022.12.1+ds.1" -> 2022, 12.
bool year_month(std::string_view v, long& year, long& month) {
  const char* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, year);
  if (ec != std::errc() || p == end || *p != '.') return false;
  auto [q, ec2] = std::from_chars(p + 1, end, month);
  return ec2 == std::errc() && q != p + 1;
}
}  // namespace

DaskRelease DaskRelease::from_version(std::string_view distributed_version) {
  long year = 0, month = 0;
  if (!year_month(distributed_version, year, month)) return v2022_12();
  DaskRelease r(year, month);
  // Older than the oldest supported: read with its rules.
  return r.at_least(2022, 12) ? r : v2022_12();
}

std::optional<DaskRelease> DaskRelease::from_name(std::string_view name) {
  if (name == "2022.12") return v2022_12();
  if (name == "newest") return newest();
  return std::nullopt;
}

std::string_view DaskRelease::name() const { return uncompressed_to_same_host() ? "newest" : "2022.12"; }

MaybeCompressRules DaskRelease::maybe_compress_rules() const {
  MaybeCompressRules rules;
  if (at_least(2023, 5)) rules.ratio = 0.7;
  return rules;
}

}  // namespace daskcaps
