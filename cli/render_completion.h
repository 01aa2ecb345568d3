// Shell completion scripts from a description of the command line.
// cli/completion.cpp fills the description by walking the CLI11 app, so the
// scripts hold exactly the commands, options and value sets the parser
// accepts; this file only writes them in each shell's language.
#pragma once

#include <string>
#include <vector>

namespace daskcaps::cli {

/// What a value of an option or positional can be.
struct CompletionValues {
  std::vector<std::string> words;  // allowed values (CLI::IsMember sets)
  bool files = false;              // also file names
  bool directories = false;        // directory names
  std::string hint;                // what to type when nothing is offered ("S", "ADDRESS")
};

struct CompletionOption {
  std::vector<std::string> short_names;  // without "-"
  std::vector<std::string> long_names;   // without "--"
  std::string help;
  bool takes_value = false;
  bool repeatable = false;
  CompletionValues values;
};

struct CompletionPositional {
  std::string name;
  bool repeatable = false;
  CompletionValues values;
};

struct CompletionCommand {
  std::string name;
  std::string help;
  std::vector<CompletionOption> options;
  std::vector<CompletionPositional> positionals;
};

struct CompletionSpec {
  std::string program;                    // "dask-caps"
  std::vector<CompletionOption> options;  // of the program itself (--help, --version)
  std::vector<CompletionCommand> commands;
};

/// The script for `shell` ("bash", "zsh" or "fish"); empty for another name.
std::string completion_script(const CompletionSpec& spec, const std::string& shell);

}  // namespace daskcaps::cli
