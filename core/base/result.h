// Errors and results: the Error values of the daskcaps library, and
// Result<T>, which every fallible function returns.
//
// The library never prints, throws across its API or exits: every fallible
// function returns a Result<T> (below) whose error is an Error.
// Errc is a closed list with stable names (to_string); tests compare the
// enum, users read `what`. An Error may carry the absolute byte offset in the
// input where the problem was found (kNoOffset when it has none, e.g. a
// network failure).
//
// Result<T>: a value or an Error, the return type of every
// fallible library function. It is [[nodiscard]]: a caller must look at it.
//
//   Result<std::uint32_t> n = r.u32_be();
//   if (!n) return n.error();   // propagate; the error already has the offset
//   use(*n);
//
// Status is Result<void>: ok() or an Error.
#pragma once

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace daskcaps {

enum class Errc : std::uint8_t {
  truncated,            // input ended before a complete item
  bad_magic,            // not the expected format at all
  unsupported_version,  // known format, version we do not read
  length_out_of_range,  // a declared length or index points outside its container
  limit_exceeded,       // a configured limit (core/base/limits.h) was crossed
  too_deep,             // nesting deeper than the configured limit
  bad_opcode,           // unknown opcode or type byte
  bad_value,            // well-formed bytes with a value that is not allowed
  codec_failed,         // compressed data did not decode, or a codec refused input
  unknown_codec,        // codec name this build cannot decode
  unsupported,          // valid input we cannot process (named in `what`)
  io,                   // file system
  network,              // connect/read/write failed on a socket
  refused,              // connection refused
  timeout,              // a deadline passed
  tls,                  // TLS handshake or verification failed
  protocol,             // the peer broke the Dask protocol
  usage,                // invalid arguments given by the caller
  not_found,            // a named thing does not exist
  internal,             // a bug in dask-caps
};

/// Stable lower-case name of an error kind, e.g. "truncated".
std::string_view to_string(Errc code);

inline constexpr std::uint64_t kNoOffset = ~std::uint64_t{0};

struct Error {
  Errc code = Errc::internal;
  std::uint64_t offset = kNoOffset;  // absolute byte offset in the input, if known
  std::string what;                  // lower-case, no final period
  std::string context;               // where, outermost first: "message 3: frame 2"

  bool has_offset() const { return offset != kNoOffset; }

  /// Adds an outer context, e.g. "message 3" around "frame 2", unless the
  /// context is `outer` already or a path inside it ("data['x'][0]" inside
  /// "data['x']"). Returns *this.
  Error& add_context(std::string_view outer);

  /// "message 3: frame 2 @0x3a0: <what>"; parts that are unknown are left out.
  std::string message() const;
};

Error make_error(Errc code, std::string what, std::uint64_t offset = kNoOffset);

/// An error found inside an embedded item (a pickle in a frame, say) whose
/// offsets count from the item's start: with the item's absolute offset
/// `base` known, the offset becomes absolute; otherwise it moves into the
/// text ("at byte 0x66 of it") so that no relative offset reads as a file
/// offset.
Error rebase_error(Error e, std::uint64_t base);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : v_(std::in_place_index<0>, value) {}
  Result(T&& value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Error> &&
                                                    !std::is_same_v<std::decay_t<U>, Result>>>
  Result(U&& value) : v_(std::in_place_index<0>, T(std::forward<U>(value))) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { assert(!ok()); return std::get<1>(v_); }
  Error&& error() && { assert(!ok()); return std::get<1>(std::move(v_)); }
  Error& error() & { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), ok_(false) {}

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& { assert(!ok_); return err_; }
  Error& error() & { assert(!ok_); return err_; }
  Error&& error() && { assert(!ok_); return std::move(err_); }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

inline Status ok_status() { return {}; }

}  // namespace daskcaps
