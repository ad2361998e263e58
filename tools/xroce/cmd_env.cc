// `xroce env` and `xroce exec -- CMD`: the environment an unmodified verbs program needs to
// see this namespace's xroce devices (docs/ARCHITECTURE.md decision 2).
//
//   SYSFS_PATH     the daemon's sysfs-shaped tree (libibverbs reads devices from there when
//                  the kernel has no RDMA netlink)
//   RDMAV_DRIVERS  the provider, when running from a build tree (an installed provider is found
//                  through /etc/libibverbs.d/xroce.driver)
//   LD_PRELOAD     libxroce-preload.so added in front: completion channels for xroce devices
//                  (the entry point libibverbs does not route through providers; decision 3)
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "app_env.h"
#include "commands.h"
#include "daemon_launch.h"
#include "xroce/run_dir.h"

namespace xroce::cli {

namespace {

// libibverbs appends this to a driver path given in RDMAV_DRIVERS.
constexpr const char* kProviderSuffix = "-rdmav34.so";
constexpr const char* kPreload = "libxroce-preload.so";

// The preload library: bin/../lib in a build tree, bin/../<libdir> in an installed prefix
// (/usr/bin -> /usr/lib/x86_64-linux-gnu on Debian). Empty if neither has it.
std::string find_preload() {
  for (const std::string& dir : {std::string("lib"), std::string(XROCE_INSTALL_LIBDIR)}) {
    std::error_code ec;
    const auto path =
        std::filesystem::weakly_canonical(self_dir() + "/../" + dir + "/" + kPreload, ec);
    if (!ec && std::filesystem::exists(path, ec)) return path.string();
  }
  return {};
}

}  // namespace

Environment app_environment() {
  Environment env;
  const auto paths = control::run_paths_for_current_netns();
  env.emplace_back("SYSFS_PATH", paths.sysfs_root);
  // A provider beside this executable (a build tree: bin/ and lib/) wins over an installed
  // one: libibverbs loads RDMAV_DRIVERS first, and the first provider to register matches.
  std::error_code ec;
  const auto lib = std::filesystem::weakly_canonical(self_dir() + "/../lib/libxroce", ec);
  if (!ec && std::filesystem::exists(lib.string() + kProviderSuffix)) {
    env.emplace_back("RDMAV_DRIVERS", lib.string());
  }
  if (std::string value = find_preload(); !value.empty()) {
    const char* current = std::getenv("LD_PRELOAD");
    if (current != nullptr && current[0] != '\0') {
      if (std::string(current).find(value) != std::string::npos) {
        value = current;
      } else {
        value += ":" + std::string(current);
      }
    }
    env.emplace_back("LD_PRELOAD", value);
  }
  return env;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void apply_environment(const Environment& env) {
  for (const auto& [key, value] : env)
    setenv(key.c_str(), value.c_str(), 1);
}

void register_env(CLI::App& app, ExitStatus& status) {
  (void)status;
  auto* cmd = app.add_subcommand("env", "Print the environment verbs programs need (eval-able)");
  cmd->callback([] {
    for (const auto& [key, value] : app_environment()) {
      fmt::print("export {}={}\n", key, shell_quote(value));
    }
  });
}

void register_exec(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand("exec", "Run a command with that environment: xroce exec -- CMD");
  auto argv = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *argv, "The command and its arguments")->required();
  cmd->callback([argv, &status] {
    apply_environment(app_environment());
    std::vector<char*> args;
    for (auto& a : *argv)
      args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    fmt::print(stderr, "xroce exec: {}: {}\n", (*argv)[0], std::strerror(errno));
    status.code = 127;
  });
}

}  // namespace xroce::cli
