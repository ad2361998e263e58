#include "daemon/run_dir.h"

#include <sys/stat.h>

#include <cstdlib>

namespace xroce::daemon {

std::string run_root() {
  const char* env = std::getenv("XROCE_RUN_ROOT");
  return env != nullptr && env[0] == '/' ? env : "/run/xroce";
}

RunPaths run_paths_for_current_netns() {
  RunPaths paths;
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) != 0) return paths;
  paths.dir = run_root() + "/ns-" + std::to_string(st.st_ino);
  paths.control_socket = paths.dir + "/control.sock";
  paths.lock_file = paths.dir + "/xroced.lock";
  paths.log_file = paths.dir + "/xroced.log";
  paths.sysfs_root = paths.dir + "/sys";
  return paths;
}

}  // namespace xroce::daemon
