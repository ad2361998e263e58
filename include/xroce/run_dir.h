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

namespace xroce::control {

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

// The daemon's side. A daemon holds an flock on its lock file for as long as it runs, and on a
// clean exit removes its whole directory, unlinking the lock file last while still holding it;
// so whoever locks a lock file re-checks that it is still the file at the path.
//
// Creates the directory and takes the lock: the locked fd (the caller keeps it open), -EEXIST
// when a live daemon holds it, or another negative errno.
int lock_run_dir(const RunPaths& paths);
// Clean exit, lock still held: removes the directory and everything in it.
void remove_run_dir(const RunPaths& paths);
// Removes the run directories left by daemons that died (SIGKILL, a crash) in namespaces that
// no longer exist: those of a namespace no process is in and no /run/netns entry names, with a
// lock file nobody holds. Returns how many were removed.
int reclaim_stale_run_dirs(const RunPaths& own);

}  // namespace xroce::control
