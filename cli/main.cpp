// dask-caps: wires the commands together, parses, dispatches, and maps the
// outcome to the exit codes of docs/cli.md §10. No protocol logic lives here.
#include <malloc.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "daskcaps/base/option_name.h"
#include "daskcaps/version.h"

int main(int argc, char** argv) {
  using namespace daskcaps::cli;
  // Memory follows the data: a freed large buffer (a decoded frame) goes
  // back to the kernel at once. glibc would otherwise raise its mmap
  // threshold after the first such free and keep up to 32 MiB per thread
  // arena in its heaps.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // The core's messages name the options a user can change by their flags.
  daskcaps::set_option_speller(flag_spelling);
  CLI::App app{
      "dask-caps: probe, check and repair what Dask processes negotiate when they connect"};
  app.name("dask-caps");
  app.set_version_flag("--version", std::string("dask-caps ") + DASKCAPS_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough();

  int exit_code = kExitOk;
  using Adder = void (*)(CLI::App&, int&);
  static constexpr Adder kCommands[] = {add_probe, add_check, add_inspect, add_transcode, add_serve, add_bridge,
                                        add_schema, add_completion};
  for (Adder add : kCommands) add(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, version or the usage error
    return rc == 0 ? kExitOk : kExitUsage;
  }
  return exit_code;
}
