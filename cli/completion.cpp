// dask-caps completion bash|zsh|fish [-o FILE]
// Prints a shell completion script made from the command definitions
// themselves: it walks the CLI11 app (subcommands, options, positionals) and
// takes each option's allowed values from its validators (the sets given
// to CLI::IsMember), so the script offers exactly what the parser accepts.
// Values without a set complete file names where they may be paths.
#include <CLI/CLI.hpp>
#include <cctype>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/render_completion.h"
#include "daskcaps/base/atomic_file.h"

namespace daskcaps::cli {

namespace {

// CLI11 2.1 keeps a validator's set only in its description, "{a,b,c}",
// which get_type_name() appends to the type ("TEXT:{a,b,c}"); an OR of
// validators reads "({a,b}) OR (FILE)".
std::vector<std::string> sets_in(const std::string& type_name) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = type_name.find('{', at)) != std::string::npos) {
    const std::size_t end = type_name.find('}', at);
    if (end == std::string::npos) break;
    std::size_t start = at + 1;
    for (;;) {
      const std::size_t comma = type_name.find(',', start);
      const std::size_t stop = comma == std::string::npos || comma > end ? end : comma;
      if (stop > start) out.push_back(type_name.substr(start, stop - start));
      if (stop == end) break;
      start = stop + 1;
    }
    at = end + 1;
  }
  return out;
}

bool has_word(const std::string& text, const std::string& word) {
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]));
    const std::size_t after = at + word.size();
    const bool right = after == text.size() || !std::isalnum(static_cast<unsigned char>(text[after]));
    if (left && right) return true;
  }
  return false;
}

CompletionValues values_of(const CLI::Option& opt) {
  CompletionValues v;
  const std::string type = opt.get_type_name();
  const std::string base = type.substr(0, type.find(':'));
  v.words = sets_in(type);
  v.directories = has_word(type, "DIR");
  v.files = has_word(type, "FILE") || has_word(type, "PATH") || has_word(type, "EXE");
  // Without a set, plain text and positionals (a capture, an endpoint that
  // may be a probe file) complete file names, as a shell does for any
  // argument; numbers and values with a type name of their own ("ADDRESS",
  // "X.Y.Z") complete nothing.
  bool numeric = false;
  for (const char* n : {"INT", "UINT", "FLOAT", "NUMBER", "POSITIVE", "NONNEGATIVE", "BOOLEAN"})
    numeric |= has_word(type, n);
  if (v.words.empty() && !v.directories && !numeric && (base == "TEXT" || opt.get_positional()))
    v.files = true;
  v.hint = base;
  return v;
}

CompletionOption option_of(const CLI::Option& opt) {
  CompletionOption o;
  o.short_names = opt.get_snames();
  o.long_names = opt.get_lnames();
  o.help = opt.get_description();
  o.takes_value = opt.get_items_expected_max() > 0;  // flags expect no value
  o.repeatable = opt.get_expected_max() > 1;
  if (o.takes_value) o.values = values_of(opt);
  return o;
}

std::vector<CompletionOption> options_of(const CLI::App& app) {
  std::vector<CompletionOption> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->nonpositional() || opt->get_group().empty()) continue;  // positional or hidden
    out.push_back(option_of(*opt));
  }
  return out;
}

CompletionSpec spec_of(const CLI::App& app) {
  CompletionSpec spec;
  spec.program = app.get_name();
  spec.options = options_of(app);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) {
         return !s->get_disabled() && !s->get_group().empty();
       })) {
    CompletionCommand c;
    c.name = sub->get_name();
    c.help = sub->get_description();
    c.options = options_of(*sub);
    for (const CLI::Option* opt : sub->get_options()) {
      if (!opt->get_positional() || opt->nonpositional()) continue;
      CompletionPositional p;
      p.name = opt->get_name();
      p.repeatable = opt->get_expected_max() > 1;
      p.values = values_of(*opt);
      c.positionals.push_back(std::move(p));
    }
    spec.commands.push_back(std::move(c));
  }
  return spec;
}

struct CompletionArgs {
  std::string shell;
  std::string output;
};

int run_completion(const CLI::App& app, const CompletionArgs& args) {
  const std::string script = completion_script(spec_of(app), args.shell);
  if (!args.output.empty()) {
    if (auto written = write_file_atomically(args.output, as_bytes(script)); !written)
      return report_error("-o", written.error());
    return kExitOk;
  }
  std::cout << script;
  std::cout.flush();
  return kExitOk;
}

}  // namespace

void add_completion(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CompletionArgs>();
  CLI::App* cmd = app.add_subcommand("completion", "print a shell completion script (bash, zsh or fish)");
  cmd->add_option("SHELL", args->shell, "the shell to complete for")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  cmd->add_option("-o,--output", args->output, "write the script to this file (atomically) instead");
  CLI::App* root = &app;
  cmd->callback([root, args, &exit_code] { exit_code = run_completion(*root, *args); });
}

}  // namespace daskcaps::cli
