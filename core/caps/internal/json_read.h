// Reading JSON documents that users write or keep (probe files, policies,
// baselines): nlohmann/json parses, these helpers check every value's type
// before use and name a bad one by its JSON pointer (RFC 6901), e.g.
// "/python/pickle-protocol: expected an integer, found a string".
//
// Errors: Errc::bad_value for a missing key or a wrong type; parse_json
// gives Errc::bad_magic with the byte offset of the syntax error; read_text
// gives not_found / io / limit_exceeded with the path as context.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/result.h"

namespace daskcaps::json {

using Json = nlohmann::ordered_json;

/// "null", "an object", "an array", "a string", "a boolean", "an integer", "a number".
std::string describe_type(const Json& v);

/// A JSON pointer one level down ("/a" + "b~c" -> "/a/b~0c").
std::string child(std::string_view where, std::string_view key);
std::string child(std::string_view where, std::size_t index);
/// The pointer as shown in messages: "/" for the root.
std::string shown(std::string_view where);

Error wrong_type(std::string_view where, std::string_view expected, const Json& v);
Error missing_key(std::string_view where, std::string_view key);

/// The member `key` of an object, or nullptr when absent.
const Json* member(const Json& obj, std::string_view key);
/// The member `key`, or nullptr when absent or null.
const Json* present(const Json& obj, std::string_view key);

Result<std::string> as_string(const Json& v, std::string_view where);
Result<std::int64_t> as_int64(const Json& v, std::string_view where);
Result<std::uint64_t> as_uint64(const Json& v, std::string_view where);
Result<int> as_int(const Json& v, std::string_view where);
Result<bool> as_bool(const Json& v, std::string_view where);
/// An optional string member: absent or null -> nullopt.
Result<std::optional<std::string>> optional_string_member(const Json& obj, std::string_view key,
                                                          std::string_view where);
Result<std::vector<std::string>> string_list(const Json& v, std::string_view where);

/// Rejects members of `obj` (at `where`) not named in `allowed`, for
/// documents where a misspelt key must not pass silently (policies).
Status only_keys(const Json& obj, std::string_view where, std::initializer_list<std::string_view> allowed);

/// Parses a whole document. Errc::bad_magic "not a JSON document: ..." with
/// the offset of the first bad byte.
Result<Json> parse(std::string_view text);

/// The contents of a file of at most `max_bytes`; `what` names the kind of
/// file in the size error ("a probe file").
Result<std::string> read_text(const std::string& path, std::uint64_t max_bytes, std::string_view what);

}  // namespace daskcaps::json
