// Subcommand registration: each area of the CLI lives in its own cmd_*.cc and adds itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace xroce::cli {

// Exit status a subcommand asks main() to return, set from its callback.
struct ExitStatus {
  int code = 0;
};

void register_wire(CLI::App& app, ExitStatus& status);     // cmd_wire.cc
void register_sim(CLI::App& app, ExitStatus& status);      // cmd_sim.cc: sim, sim --incast
void register_conform(CLI::App& app, ExitStatus& status);  // cmd_conform.cc
#ifdef XROCE_HAVE_DEVICE
void register_link(CLI::App& app, ExitStatus& status);      // cmd_link.cc
void register_env(CLI::App& app, ExitStatus& status);       // cmd_env.cc
void register_exec(CLI::App& app, ExitStatus& status);      // cmd_env.cc
void register_stat(CLI::App& app, ExitStatus& status);      // cmd_stat.cc
void register_qp(CLI::App& app, ExitStatus& status);        // cmd_qp.cc
void register_cc(CLI::App& app, ExitStatus& status);        // cmd_cc.cc: cc show|set|profile
void register_impair(CLI::App& app, ExitStatus& status);    // cmd_cc.cc: impair show|set
void register_up(CLI::App& app, ExitStatus& status);        // cmd_up.cc
void register_down(CLI::App& app, ExitStatus& status);      // cmd_up.cc
void register_top(CLI::App& app, ExitStatus& status);       // cmd_top.cc
void register_exporter(CLI::App& app, ExitStatus& status);  // cmd_exporter.cc
void register_validate(CLI::App& app, ExitStatus& status);  // cmd_validate.cc
void register_cm(CLI::App& app, ExitStatus& status);        // cmd_cm.cc: cm show
#endif
#ifdef XROCE_HAVE_PORTS
void register_bench(CLI::App& app, ExitStatus& status);  // cmd_bench.cc
#endif

}  // namespace xroce::cli
