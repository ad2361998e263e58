#include "daemon_launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

#include "xroce/cpu_list.h"

namespace xroce::cli {

namespace {

constexpr int kControlTimeoutMs = 10000;
constexpr int kStartDeadlineMs = 10000;
constexpr int kExitDeadlineMs = 10000;  // for a daemon that is removing its run directory

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

// What became of a daemon that did not say "ok": its exit status, if it exited.
std::string exit_text(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return "it did not answer in time";
  if (WIFEXITED(status)) return fmt::format("it exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("it was killed by signal {}", WTERMSIG(status));
  return "it stopped";
}

// Starts xroced detached (own session) and waits for the line it writes to XROCE_READY_FD once
// it serves, or for it to exit. The daemon opens its log (paths.log_file) itself once it holds
// the run directory's lock: a log opened here could be the one an exiting daemon is about to
// unlink. Until then its output goes nowhere; a failure comes back on the ready pipe.
// EEXIST: another daemon still holds the run directory.
int start_daemon(const control::RunPaths& paths, pid_t& started, std::string& error) {
  std::error_code ec;
  std::filesystem::create_directories(paths.dir, ec);
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return errno;
  const std::string exe = find_xroced();
  const pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid == 0) {
    setsid();
    const int null_fd = open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(null_fd, 1);
      dup2(null_fd, 2);
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
    char buf[128];
    const ssize_t n = read(ready[0], buf, sizeof(buf));
    if (n <= 0) break;
    said.append(buf, static_cast<std::size_t>(n));
    if (said.find('\n') != std::string::npos) break;
  }
  close(ready[0]);
  if (said.rfind("ok", 0) == 0) {
    started = pid;
    return 0;
  }
  said = said.substr(0, said.find('\n'));
  if (said == "error: " + std::string(std::strerror(EEXIST))) {
    waitpid(pid, nullptr, 0);  // it exits at once
    return EEXIST;
  }
  error = fmt::format(
      "xroced ({}) did not start: {}{}", exe, said.empty() ? exit_text(pid) : said,
      std::filesystem::exists(paths.log_file)
          ? fmt::format("; its log {} says:\n{}", paths.log_file, log_tail(paths.log_file))
          : "");
  return EIO;
}

}  // namespace

pid_t daemon_pid(const control::RunPaths& paths) {
  std::ifstream in(paths.lock_file);
  long pid = 0;
  in >> pid;
  return pid > 0 ? static_cast<pid_t>(pid) : 0;
}

bool wait_process_gone(pid_t pid, int deadline_ms) {
  if (pid <= 0) return true;
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // gone already (or never was)
  pollfd p{fd, POLLIN, 0};            // a pidfd is readable once the process has exited
  const bool gone = poll(&p, 1, deadline_ms) > 0;
  close(fd);
  return gone;
}

std::string self_dir() {
  char buf[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, static_cast<std::size_t>(n)))
      .parent_path()
      .string();
}

int connect_daemon(control::ControlClient& client, bool start_if_missing, std::string& error,
                   pid_t* started) {
  pid_t ours = 0;
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
  err = start_daemon(paths, ours, error);
  if (err == EEXIST) {
    // A daemon holds the run directory without serving: it is on its way out (its last device
    // was deleted, or the add that started it failed). Once it is gone, start ours.
    const pid_t old = daemon_pid(paths);
    if (!wait_process_gone(old, kExitDeadlineMs)) {
      error = fmt::format("the xroced of this namespace (pid {}) holds {} but does not serve", old,
                          paths.dir);
      return EBUSY;
    }
    err = start_daemon(paths, ours, error);
    if (err == EEXIST) error = fmt::format("another xroced holds {}", paths.dir);
  }
  // Another launcher may have won the race to start it: then it serves all the same.
  const int again = client.connect(paths.control_socket, kControlTimeoutMs);
  if (err != 0 && again != 0) return err;
  err = again;
  if (err != 0) error = fmt::format("cannot reach the xroced just started: {}", std::strerror(err));
  if (err == 0 && started != nullptr) *started = ours;
  return err;
}

int add_device(control::ControlClient& client, const control::LinkAddRequest& request,
               bool& reached, std::string& error) {
  pid_t started = 0;
  reached = false;
  if (const int err = connect_daemon(client, true, error, &started)) return err;
  reached = true;
  const int err = client.call(control::Op::link_add, &request, sizeof(request), nullptr, 0);
  if (err != 0 && started > 0) {
    client.shutdown();
    // Our child: reaped here, or it would stay a zombie while this process runs on.
    if (wait_process_gone(started, kExitDeadlineMs)) waitpid(started, nullptr, WNOHANG);
  }
  return err;
}

std::string set_worker_cpus(const std::string& list, control::LinkAddRequest& request) {
  std::string error;
  const auto cpus = parse_cpu_list(list, error);
  if (cpus.empty()) return "cpus: " + error;
  if (const int c = first_cpu_not_allowed(cpus); c >= 0) {
    return fmt::format("cpus: CPU {} is not one xroce may run on here (those are {})", c,
                       format_cpu_list(allowed_cpus()));
  }
  const std::string written = format_cpu_list(cpus);
  if (written.size() >= sizeof(request.cpus)) return "cpus: the list is too long";
  std::snprintf(request.cpus, sizeof(request.cpus), "%s", written.c_str());
  return "";
}

}  // namespace xroce::cli
