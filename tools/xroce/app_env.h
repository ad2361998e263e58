// The environment an unmodified verbs program needs to see this namespace's xroce devices
// (cmd_env.cc explains each variable); shared by `xroce env`, `exec`, `up` and `validate`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace xroce::cli {

using Environment = std::vector<std::pair<std::string, std::string>>;

// SYSFS_PATH, and RDMAV_DRIVERS / LD_PRELOAD where they are needed, in that order.
Environment app_environment();
// `s` in single quotes for a POSIX shell.
std::string shell_quote(const std::string& s);
// Sets every variable of `env` in this process (for a child it will run).
void apply_environment(const Environment& env);

}  // namespace xroce::cli
