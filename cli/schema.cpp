// dask-caps schema NAME: prints the JSON Schema (draft 2020-12) of a
// document: probe, check, inspect, transcode (what --json prints), baseline
// (what check --baseline reads) and policy (check --policy files).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/schemas.h"

namespace daskcaps::cli {

void add_schema(CLI::App& app, int& exit_code) {
  auto name = std::make_shared<std::string>();
  std::vector<std::string> names;
  for (const auto& s : embedded_schemas()) names.emplace_back(s.name);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  CLI::App* cmd = app.add_subcommand("schema", "print the JSON Schema (draft 2020-12) of a document: " + list);
  cmd->add_option("name", *name, "the document: " + list)->required()->check(CLI::IsMember(names))->type_name("NAME");
  cmd->callback([name, &exit_code] {
    for (const auto& s : embedded_schemas())
      if (s.name == *name) {
        std::cout << s.text;
        std::cout.flush();
        exit_code = std::cout ? kExitOk : kExitBadInput;
        return;
      }
  });
}

}  // namespace daskcaps::cli
