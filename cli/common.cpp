#include "cli/common.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "daskcaps/base/atomic_file.h"

namespace daskcaps::cli {

int exit_code_for(Errc code) {
  switch (code) {
    case Errc::network:
    case Errc::refused:
    case Errc::timeout:
    case Errc::tls:
    case Errc::protocol:
      return kExitNetwork;
    case Errc::usage:
      return kExitUsage;
    default:
      return kExitBadInput;
  }
}

void print_error_line(std::string_view text) {
  std::fflush(stdout);
  std::cerr << "dask-caps: " << text << '\n';
}

int report_error(std::string_view subject, const Error& error) {
  std::string line;
  if (!subject.empty()) {
    line += subject;
    line += ": ";
  }
  line += error.message();
  print_error_line(line);
  return exit_code_for(error.code);
}

Json json_document(std::string_view schema) {
  Json doc = Json::object();
  doc["schema"] = schema;
  return doc;
}

Json json_value(const std::string& text) { return Json::parse(text); }

std::string json_text(const Json& doc) { return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n"; }

void print_json(const Json& doc) { std::cout << json_text(doc); }

int write_json_file(const std::string& path, const Json& doc) {
  if (auto st = write_file_atomically(path, as_bytes(json_text(doc))); !st) return report_error("", st.error());
  return kExitOk;
}

std::string flag_spelling(std::string_view field, OptionKind) {
  std::string flag = "--";
  for (char c : field) flag += c == '_' ? '-' : c;
  return flag;
}

void add_limit_flags(CLI::App& cmd, Limits& limits) {
  cmd.add_option("--max-message-bytes", limits.max_message_bytes,
                 "largest Dask message accepted, prelude and frames")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-frames", limits.max_frames, "most frames in one message")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-decompressed-bytes", limits.max_decompressed_bytes,
                 "largest output of decompressing one frame")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-msgpack-depth", limits.max_msgpack_depth, "deepest msgpack nesting")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-msgpack-container", limits.max_msgpack_container,
                 "most elements in one msgpack array or map")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-depth", limits.max_pickle_depth, "deepest pickle nesting")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-memo", limits.max_pickle_memo, "most pickle memo entries")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-stack", limits.max_pickle_stack, "deepest pickle machine stack")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-pickle-output-bytes", limits.max_pickle_output_bytes,
                 "largest pickle written")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-capability-codecs", limits.max_capability_codecs,
                 "most codec names a peer's \"capabilities\" handshake key may list")
      ->capture_default_str()->group("Limits");
  cmd.add_option("--max-capability-name", limits.max_capability_name,
                 "longest codec name, role or version in a peer's \"capabilities\" key")
      ->capture_default_str()->group("Limits");
}

}  // namespace daskcaps::cli
