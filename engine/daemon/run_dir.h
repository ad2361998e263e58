// Where a daemon keeps its state: one run directory per network namespace.
//
//   <root>/ns-<inode of /proc/self/ns/net>/
//     control.sock     the control socket (include/xroce/control.h)
//     xroced.lock      flock()ed by the running daemon; holds its pid
//     xroced.log       the daemon's stdout/stderr when the CLI started it
//     sys/             the sysfs-shaped tree apps see through SYSFS_PATH
// <root> is /run/xroce unless XROCE_RUN_ROOT says otherwise. The daemon, the CLI and the tests
// compute the same paths from the namespace they run in.
#pragma once

#include <string>

namespace xroce::daemon {

struct RunPaths {
  std::string dir;
  std::string control_socket;
  std::string lock_file;
  std::string log_file;
  std::string sysfs_root;
};

std::string run_root();
// Paths for the network namespace the calling thread is in; empty dir if it cannot tell.
RunPaths run_paths_for_current_netns();

}  // namespace xroce::daemon
