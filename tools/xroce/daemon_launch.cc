#include "daemon_launch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace xroce::cli {

namespace {

constexpr int kControlTimeoutMs = 10000;
constexpr int kStartDeadlineMs = 10000;

std::string find_xroced() {
  const std::string dir = self_dir();
  for (const std::string& candidate : {dir + "/xroced", dir + "/../sbin/xroced"}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "xroced";  // from PATH
}

std::string log_tail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

// Starts xroced detached (own session, output to its log) and waits for the line it writes to
// XROCE_READY_FD once it serves, or for it to exit.
int start_daemon(const control::RunPaths& paths, std::string& error) {
  std::error_code ec;
  std::filesystem::create_directories(paths.dir, ec);
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return errno;
  const std::string exe = find_xroced();
  const pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid == 0) {
    setsid();
    const int null_fd = open("/dev/null", O_RDONLY);
    const int log_fd = open(paths.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    const int ready_fd = dup(ready[1]);  // without O_CLOEXEC: the daemon inherits it
    setenv("XROCE_READY_FD", std::to_string(ready_fd).c_str(), 1);
    execlp(exe.c_str(), exe.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(ready[1]);
  std::string said;
  pollfd p{ready[0], POLLIN, 0};
  while (poll(&p, 1, kStartDeadlineMs) > 0) {
    char buf[64];
    const ssize_t n = read(ready[0], buf, sizeof(buf));
    if (n <= 0) break;
    said.append(buf, static_cast<std::size_t>(n));
    if (said.find('\n') != std::string::npos) break;
  }
  close(ready[0]);
  if (said.rfind("ok", 0) == 0) return 0;
  error = fmt::format("xroced ({}) did not start; its log {} says:\n{}", exe, paths.log_file,
                      log_tail(paths.log_file));
  return EIO;
}

}  // namespace

std::string self_dir() {
  char buf[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, static_cast<std::size_t>(n)))
      .parent_path()
      .string();
}

int connect_daemon(control::ControlClient& client, bool start_if_missing, std::string& error) {
  const auto paths = control::run_paths_for_current_netns();
  if (paths.dir.empty()) {
    error = "cannot tell which network namespace this is";
    return EIO;
  }
  int err = client.connect(paths.control_socket, kControlTimeoutMs);
  if (err == 0) return 0;
  if (!start_if_missing || (err != ENOENT && err != ECONNREFUSED)) {
    error = fmt::format("no xroced serves this network namespace ({}: {})", paths.control_socket,
                        std::strerror(err));
    return err;
  }
  err = start_daemon(paths, error);
  // Another launcher may have won the race to start it: then it serves all the same.
  const int again = client.connect(paths.control_socket, kControlTimeoutMs);
  if (err != 0 && again != 0) return err;
  err = again;
  if (err != 0) error = fmt::format("cannot reach the xroced just started: {}", std::strerror(err));
  return err;
}

}  // namespace xroce::cli
