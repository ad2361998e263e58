// xroced: the xroce NIC for one network namespace (ARCHITECTURE.md decision 1).
//
// Usage: xroced (no arguments). Serves the control socket of the namespace it runs in
// (see run_dir.h); `xroce link add` starts it when none runs. Exits on SIGTERM/SIGINT, or when
// its last device is deleted, removing its sysfs tree and device nodes.
#include <fmt/core.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "daemon/control_server.h"
#include "xroce/run_dir.h"

namespace {

// `xroce link add` starts us with XROCE_READY_FD set: we write one line there, "ok" once the
// control socket serves or the reason we cannot, and close it.
void tell_launcher(const std::string& line) {
  const char* env = std::getenv("XROCE_READY_FD");
  if (env == nullptr) return;
  const int fd = std::atoi(env);
  unsetenv("XROCE_READY_FD");
  if (fd <= 2) return;
  const std::string text = line + "\n";
  (void)!write(fd, text.data(), text.size());
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  const auto paths = xroce::control::run_paths_for_current_netns();
  if (paths.dir.empty()) {
    fmt::print(stderr, "xroced: cannot tell which network namespace this is\n");
    tell_launcher("error: no network namespace");
    return 1;
  }
  xroce::daemon::ControlServer server(paths);
  if (const int err = server.start()) {
    fmt::print(stderr, "xroced: cannot serve {}: {}\n", paths.dir, std::strerror(err));
    tell_launcher(fmt::format("error: {}", std::strerror(err)));
    return err == EEXIST ? 2 : 1;
  }
  fmt::print("xroced: serving {}\n", paths.control_socket);
  std::fflush(stdout);
  tell_launcher("ok");
  return server.run();
}
