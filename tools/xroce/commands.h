// Subcommand registration: each area of the CLI lives in its own cmd_*.cc and adds itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace xroce::cli {

// Exit status a subcommand asks main() to return, set from its callback.
struct ExitStatus {
  int code = 0;
};

void register_wire(CLI::App& app, ExitStatus& status);  // cmd_wire.cc

}  // namespace xroce::cli
