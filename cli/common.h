// Shared pieces of the thin command layer: exit codes, the one-line error
// format, JSON output with the schema key first. (Output files are written
// atomically by core/base/atomic_file.h.)
// Only cli/ prints or decides exit codes (docs/design.md §8.1).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "daskcaps/base/diagnostic.h"
#include "daskcaps/base/result.h"
#include "daskcaps/base/limits.h"
#include "daskcaps/base/option_name.h"
#include "daskcaps/wire/msgpack.h"
#include "daskcaps/recode/describe.h"

namespace CLI {
class App;
}

namespace daskcaps::cli {

using Json = nlohmann::ordered_json;

enum ExitCode : int {
  kExitOk = 0,
  kExitFindings = 1,
  kExitUsage = 2,
  kExitBadInput = 3,
  kExitNetwork = 4,
};

/// The exit code docs/cli.md §10 assigns to an error kind: network kinds 4, usage 2,
/// everything about input data 3.
int exit_code_for(Errc code);

/// Prints "dask-caps: <subject>: <error message>" to stderr and returns the
/// exit code for the error. `subject` may be empty.
int report_error(std::string_view subject, const Error& error);

/// Prints "dask-caps: <text>" to stderr.
void print_error_line(std::string_view text);

/// Starts a JSON document whose first key is "schema".
Json json_document(std::string_view schema);
/// A piece of JSON the library handed over as text (it shows no JSON
/// library in its headers), to put into a document.
Json json_value(const std::string& text);

// msgpack_to_json() and diagnostics_json() are daskcaps/recode/describe.h
// (JSON text: json_value() reads it).

/// A JSON document as printed: two-space indent and a final newline.
std::string json_text(const Json& doc);
/// Prints a JSON document and a newline to stdout.
void print_json(const Json& doc);
/// Writes json_text(doc) to `path` atomically; on failure prints the error
/// line and returns its exit code (else kExitOk).
int write_json_file(const std::string& path, const Json& doc);

/// Binds the input limits of core/base/limits.h as flags on a command.
void add_limit_flags(CLI::App& cmd, Limits& limits);

/// The flag of a library field, for the core's messages
/// (core/base/option_name.h): max_frames is --max-frames, and every option
/// a message names is a flag of the same name (--keep-unconvertible,
/// --max-packet-bytes). main() sets it as the process's speller.
std::string flag_spelling(std::string_view field, OptionKind kind);

}  // namespace daskcaps::cli
