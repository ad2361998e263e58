// xroced: the xroce NIC for one network namespace (docs/ARCHITECTURE.md decision 1).
//
// Usage: xroced (no arguments). Serves the control socket of the namespace it runs in
// (see run_dir.h); `xroce link add` starts it when none runs. Exits on SIGTERM/SIGINT, or when
// its last device is deleted, removing its sysfs tree and device nodes; one the CLI started
// also exits when it is left with no device and no client (a failed add; see Lifetime in
// lifetime.h). Tells systemd when it serves (NOTIFY_SOCKET), for a Type=notify unit.
#include <fmt/core.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
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

// Under systemd (Type=notify: the packaged xroced.service) NOTIFY_SOCKET names the datagram
// socket that wants "READY=1" once the control socket serves (sd_notify(3)'s protocol).
void tell_service_manager(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || (path[0] != '/' && path[0] != '@')) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::size_t len = std::strlen(path);
  if (len >= sizeof addr.sun_path) return;
  std::memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)!sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  close(fd);
}

// A daemon the CLI started writes its output to the run directory's log, opened only now that
// it holds the directory's lock: an exiting predecessor unlinks everything in the directory
// before it lets go of the lock, so this log is never one about to be unlinked.
void log_to_run_dir(const xroce::control::RunPaths& paths) {
  const int fd = open(paths.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
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
  // XROCE_READY_FD: started by the CLI for one request (ControlServer's Lifetime).
  const bool on_demand = std::getenv("XROCE_READY_FD") != nullptr;
  xroce::daemon::ControlServer server(
      paths, on_demand ? xroce::daemon::Lifetime::kOnDemand : xroce::daemon::Lifetime::kService);
  if (const int err = server.start()) {
    fmt::print(stderr, "xroced: cannot serve {}: {}\n", paths.dir, std::strerror(err));
    tell_launcher(fmt::format("error: {}", std::strerror(err)));
    return err == EEXIST ? 2 : 1;
  }
  if (on_demand) log_to_run_dir(paths);
  fmt::print("xroced: pid {} serving {}\n", getpid(), paths.control_socket);
  std::fflush(stdout);
  tell_launcher("ok");
  tell_service_manager("READY=1");
  return server.run();
}
