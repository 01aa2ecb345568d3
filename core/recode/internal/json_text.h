// JSON values handed to programs as text. No installed header shows a JSON
// library (docs/design.md §2): the layers build their documents with
// nlohmann/json and give programs the text, which they parse with theirs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace daskcaps {

/// Compact, UTF-8, with every byte of a string that is not valid UTF-8
/// replaced by U+FFFD (as the command writes its documents), so it never
/// throws.
inline std::string json_text(const nlohmann::ordered_json& v) {
  return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace daskcaps
