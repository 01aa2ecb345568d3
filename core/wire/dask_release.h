// Which Dask release a peer runs, as the one type every rule that differs
// between releases asks (docs/protocol.md §7, the table of differences).
//
// A release is made from distributed's version ("2026.7.1",
// "2022.12.1+ds.1"); an unreadable version is taken for the oldest release
// this project supports, 2022.12. Two names stand for the two behaviours
// the command line and the Python module let a user pick (--dask-release,
// dask_release=): "2022.12" (every release before 2023.5.0) and "newest"
// (2023.5.0 on). What differs:
//   - 2023.5.0 (distributed PR #7768): compression None advertised to a peer
//     on the same host, and maybe_compress keeps a frame compressed below
//     a ratio of 0.7 instead of 0.9 (docs/protocol.md §2.3, §4.2);
//   - 2025.4.0 (distributed PR #9048): the `versions` reply reads package
//     metadata, so python-snappy answers for snappy.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>

#include "daskcaps/wire/codec.h"

namespace daskcaps {

class DaskRelease {
 public:
  /// 2022.12's behaviour (the default: the oldest release supported).
  constexpr DaskRelease() = default;
  /// From distributed's version; unreadable: 2022.12.
  static DaskRelease from_version(std::string_view distributed_version);
  /// "2022.12" or "newest" (the names of --dask-release); nullopt for any
  /// other text, versions included, so that a typo is not silently 2022.12.
  static std::optional<DaskRelease> from_name(std::string_view name);
  static constexpr DaskRelease v2022_12() { return DaskRelease(2022, 12); }
  static constexpr DaskRelease newest() { return DaskRelease(2023, 5); }

  /// "2022.12" or "newest": the behaviour, as from_name reads it back.
  std::string_view name() const;
  /// 2023.5.0 on: compression None to a peer on the same host.
  bool uncompressed_to_same_host() const { return at_least(2023, 5); }
  /// 2025.4.0 on: `versions` names python-snappy when it is installed.
  bool versions_name_distributions() const { return at_least(2025, 4); }
  /// maybe_compress's thresholds: ratio 0.9 before 2023.5.0, 0.7 from it.
  MaybeCompressRules maybe_compress_rules() const;

  friend constexpr bool operator==(const DaskRelease&, const DaskRelease&) = default;

 private:
  constexpr DaskRelease(long year, long month) : year_(year), month_(month) {}
  constexpr bool at_least(long year, long month) const {
    return year_ > year || (year_ == year && month_ >= month);
  }
  long year_ = 2022;
  long month_ = 12;
};

}  // namespace daskcaps
