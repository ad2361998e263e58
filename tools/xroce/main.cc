// xroce: the command-line front of the software RoCEv2 NIC.
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>

#include "commands.h"

namespace {

constexpr const char* kVersion = "0.1.0";

void register_version(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the xroce version");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([json] {
    if (*json) {
      fmt::print("{}\n", nlohmann::json{{"version", kVersion}}.dump());
    } else {
      fmt::print("xroce {}\n", kVersion);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xroce: a software RoCEv2 NIC in user space"};
  app.require_subcommand(1);
  xroce::cli::ExitStatus status;
  register_version(app);
  xroce::cli::register_wire(app, status);
  xroce::cli::register_sim(app, status);
  xroce::cli::register_conform(app, status);
#ifdef XROCE_HAVE_DEVICE
  xroce::cli::register_link(app, status);
  xroce::cli::register_env(app, status);
  xroce::cli::register_exec(app, status);
  xroce::cli::register_stat(app, status);
  xroce::cli::register_qp(app, status);
  xroce::cli::register_cc(app, status);
  xroce::cli::register_impair(app, status);
  xroce::cli::register_up(app, status);
  xroce::cli::register_down(app, status);
  xroce::cli::register_top(app, status);
  xroce::cli::register_exporter(app, status);
  xroce::cli::register_validate(app, status);
  xroce::cli::register_cm(app, status);
#endif
#ifdef XROCE_HAVE_PORTS
  xroce::cli::register_bench(app, status);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return status.code;
}
