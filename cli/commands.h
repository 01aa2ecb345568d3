// The command table: one thin file per command, each adding its subcommand
// to the app. `exit_code` receives the command's outcome.
#pragma once

namespace CLI {
class App;
}

namespace daskcaps::cli {

void add_inspect(CLI::App& app, int& exit_code);
void add_probe(CLI::App& app, int& exit_code);
void add_check(CLI::App& app, int& exit_code);
void add_serve(CLI::App& app, int& exit_code);
void add_transcode(CLI::App& app, int& exit_code);
void add_bridge(CLI::App& app, int& exit_code);
void add_schema(CLI::App& app, int& exit_code);
void add_completion(CLI::App& app, int& exit_code);

}  // namespace daskcaps::cli
