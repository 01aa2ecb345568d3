// How messages name the option a user can change: the library speaks of
// its own fields (Limits::max_frames, TranscodeOptions::keep_unconvertible),
// and a program that exposes them under other names (a command's flags, a
// Python keyword) says once, at its start, how to spell them. So a refusal
// such as "frame count 3 exceeds limit 2 (limit max_frames)" reads
// "(--max-frames)" in the command and "(limits['max_frames'])" in Python,
// and the library names no program's options itself.
#pragma once

#include <string>
#include <string_view>

namespace daskcaps {

enum class OptionKind : unsigned char {
  limit,   // a field of Limits (core/base/limits.h) or a reader's size limit
  option,  // a field of an options struct, e.g. keep_unconvertible
};

/// Spells `field` (a struct field's name, e.g. "max_frames") for users.
using OptionSpeller = std::string (*)(std::string_view field, OptionKind kind);

/// Sets the speller for the whole process (nullptr: the library's own,
/// "limit max_frames" and "keep_unconvertible"). Call it at the start,
/// before other threads use the library; reading it is thread-safe.
void set_option_speller(OptionSpeller speller);

/// `field` as the process's speller spells it.
std::string option_name(std::string_view field, OptionKind kind = OptionKind::limit);

}  // namespace daskcaps
