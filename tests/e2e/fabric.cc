#include "fabric.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

namespace xroce::e2e {

namespace {

using Clock = std::chrono::steady_clock;
std::atomic<int> host_counter{0};

// Starts argv with its output on a pipe (out_fd); its stdin is a pipe too when in_fd is given.
pid_t spawn(const std::vector<std::string>& argv, int& out_fd, int* in_fd = nullptr) {
  int pipe_fds[2];
  int input[2] = {-1, -1};
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return -1;
  if (in_fd != nullptr && pipe2(input, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    const int in = in_fd != nullptr ? input[0] : open("/dev/null", O_RDONLY);
    dup2(in, 0);
    setpgid(0, 0);  // its own group: a deadline kill reaches what it started in the foreground
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  out_fd = pipe_fds[0];
  if (in_fd != nullptr) {
    close(input[0]);
    *in_fd = input[1];
  }
  return pid;
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int wait_with_deadline(pid_t pid, std::chrono::milliseconds deadline) {
  const auto until = Clock::now() + deadline;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return decode_status(status);
    if (r < 0) return -1;
    if (Clock::now() >= until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return 128 + SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::mutex deadline_report_mutex;
std::function<std::string()> deadline_report;  // guarded by deadline_report_mutex
thread_local bool in_deadline_report = false;

std::string report_at_deadline() {
  std::function<std::string()> report;
  {
    std::lock_guard lock(deadline_report_mutex);
    report = deadline_report;
  }
  if (!report || in_deadline_report) return {};
  in_deadline_report = true;
  std::string text = "\n--- the program reached its deadline; the devices then:\n" + report();
  in_deadline_report = false;
  return text;
}
}  // namespace

void set_deadline_report(std::function<std::string()> report) {
  std::lock_guard lock(deadline_report_mutex);
  deadline_report = std::move(report);
}

RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds deadline) {
  RunResult result;
  int fd = -1;
  const pid_t pid = spawn(argv, fd);
  if (pid < 0) return result;
  const auto until = Clock::now() + deadline;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    result.output.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  if (left.count() <= 0) result.output += report_at_deadline();
  result.status = wait_with_deadline(pid, std::max(left, std::chrono::milliseconds(0)));
  return result;
}

Child::Child(const std::vector<std::string>& argv, Input input) {
  pid_ = spawn(argv, out_fd_, input == Input::kPipe ? &in_fd_ : nullptr);
}

Child::~Child() {
  close_input();
  if (pid_ > 0) wait(std::chrono::milliseconds(0));
  if (out_fd_ >= 0) close(out_fd_);
}

bool Child::write_line(const std::string& line) {
  static const bool no_sigpipe = [] {
    signal(SIGPIPE, SIG_IGN);  // a child that went away is a false return, not a dead test
    return true;
  }();
  (void)no_sigpipe;
  const std::string text = line + "\n";
  return in_fd_ >= 0 &&
         ::write(in_fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

void Child::close_input() {
  if (in_fd_ >= 0) close(in_fd_);
  in_fd_ = -1;
}

std::string Child::read_line(std::chrono::milliseconds deadline) {
  const auto until = Clock::now() + deadline;
  for (;;) {
    const auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0 || out_fd_ < 0) return {};
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return {};
    char buf[1024];
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return std::exchange(pending_, {});
    pending_.append(buf, static_cast<std::size_t>(n));
  }
}

bool Child::exited() const {
  if (pid_ <= 0) return true;
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid_;
}

int Child::wait(std::chrono::milliseconds deadline) {
  if (pid_ <= 0) return -1;
  const int status = wait_with_deadline(pid_, deadline);
  pid_ = -1;
  return status;
}

std::string read_until(Child& child, const std::string& prefix, std::string& seen,
                       std::chrono::milliseconds deadline) {
  for (std::string line = child.read_line(deadline); !line.empty();
       line = child.read_line(deadline)) {
    seen += line + "\n";
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return {};
}

std::string xroce_bin() {
  return XROCE_BIN;
}
std::string probe_bin() {
  return XROCE_VERBS_PROBE;
}

bool is_xroced(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  comm >> name;
  return name == "xroced";
}

std::string netns_inode(const std::string& netns) {
  const auto ino =
      run({"ip", "netns", "exec", netns, "stat", "-L", "-c", "%i", "/proc/self/ns/net"});
  return ino.output.substr(0, ino.output.find('\n'));
}

std::string run_dir_of(const std::string& netns) {
  return "/run/xroce/ns-" + netns_inode(netns);
}

void stop_daemon_of(const std::string& netns) {
  const std::string dir = run_dir_of(netns);
  std::ifstream lock(dir + "/xroced.lock");
  pid_t pid = 0;
  lock >> pid;
  if (pid > 0 && is_xroced(pid)) {
    kill(pid, SIGTERM);
    if (!Host::wait_gone(pid, std::chrono::seconds(5)) && is_xroced(pid)) kill(pid, SIGKILL);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

namespace {

// A test process killed mid-test (a ctest timeout) leaves its namespaces behind; the first
// Host of a later run removes those of e2e processes that no longer exist.
void sweep_dead_runs() {
  static std::atomic<bool> swept{false};
  if (swept.exchange(true)) return;
  const auto list = run({"ip", "netns", "list"});
  std::istringstream lines(list.output);
  std::string line;
  const std::regex ours("^(xre2e-[a-z0-9-]*?)-([0-9]+)-([0-9]+)( .*)?$");
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, ours)) continue;
    const pid_t owner = static_cast<pid_t>(std::stol(m[2].str()));
    if (owner == getpid() || kill(owner, 0) == 0 || errno != ESRCH) continue;
    const std::string netns = line.substr(0, line.find(' '));
    stop_daemon_of(netns);
    run({"ip", "netns", "del", netns});
  }
}

}  // namespace

int gid_index(const std::string& netns, const std::string& dev, const std::string& gid) {
  const RunResult r = run(
      {"ip", "netns", "exec", netns, xroce_bin(), "exec", "--", "ibv_devinfo", "-v", "-d", dev});
  // "\t\t\tGID[  1]:\t\t::ffff:198.18.1.1, RoCE v2"
  const std::regex line("GID\\[ *([0-9]+)\\]:\\s*([0-9a-fA-F:.]+), RoCE v2");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it) {
    if ((*it)[2].str() == gid) return std::stoi((*it)[1].str());
  }
  return -1;
}

long long stat_counter(const std::string& stat_output, const std::string& name) {
  const std::string key = " " + name + " ";
  const auto at = stat_output.find(key);
  if (at == std::string::npos) return -1;
  return std::stoll(stat_output.substr(at + key.size()));
}

bool cm_listener(const std::string& cm_show_json, pid_t pid) {
  const auto j = nlohmann::json::parse(cm_show_json, nullptr, false);
  if (!j.is_object()) return false;
  for (const auto& id : j.value("ids", nlohmann::json::array())) {
    if (id.value("role", "") == "listener" && (pid == 0 || id.value("pid", 0) == pid)) return true;
  }
  return false;
}

Host::Host(const std::string& prefix, int subnet) : subnet_(subnet) {
  sweep_dead_runs();
  netns_ = prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(host_counter++);
  run({"ip", "netns", "add", netns_});
  exec({"ip", "link", "add", "xr0a", "type", "veth", "peer", "name", "xr0b"});
  exec({"ip", "addr", "add", ipv4() + "/24", "dev", "xr0a"});
  exec({"ip", "addr", "add", ipv6() + "/64", "dev", "xr0a", "nodad"});
  exec({"ip", "link", "set", "xr0a", "up"});
  exec({"ip", "link", "set", "xr0b", "up"});
  exec({"ip", "link", "set", "lo", "up"});
  // The daemon's lock file holds its pid; its path depends on the namespace's inode.
  auto ino = exec({"stat", "-L", "-c", "%i", "/proc/self/ns/net"});
  std::string inode = ino.output.substr(0, ino.output.find('\n'));
  lock_file_ = "/run/xroce/ns-" + inode + "/xroced.lock";
}

Host::~Host() {
  for (const auto& dev : devices_)
    exec({xroce_bin(), "link", "del", dev});
  // Only the daemon this host started, and only while it still is an xroced.
  if (daemon_pid_ > 0 && !wait_gone(daemon_pid_, std::chrono::seconds(5))) {
    std::ifstream comm("/proc/" + std::to_string(daemon_pid_) + "/comm");
    std::string name;
    comm >> name;
    if (name == "xroced") kill(daemon_pid_, SIGKILL);
    wait_gone(daemon_pid_, std::chrono::seconds(5));
  }
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(lock_file_).parent_path(), ec);
  // A daemon that was killed could not remove its device nodes: remove the ones it owned.
  for (const auto& entry : std::filesystem::directory_iterator("/run/xroce/nodes", ec)) {
    std::ifstream owner(entry.path());
    pid_t pid = 0;
    owner >> pid;
    if (daemon_pid_ > 0 && pid == daemon_pid_ && wait_gone(pid, std::chrono::seconds(0))) {
      unlink(("/dev/infiniband/" + entry.path().filename().string()).c_str());
      std::filesystem::remove(entry.path(), ec);
    }
  }
  run({"ip", "netns", "del", netns_});
}

std::string Host::ipv4() const {
  return "198.18." + std::to_string(subnet_) + ".1";
}
std::string Host::ipv6() const {
  return "2001:2:0:" + std::to_string(subnet_) + "::1";
}

std::vector<std::string> Host::in_netns(std::vector<std::string> argv) const {
  argv.insert(argv.begin(), {"ip", "netns", "exec", netns_});
  return argv;
}

RunResult Host::exec(std::vector<std::string> argv, std::chrono::milliseconds deadline) const {
  return run(in_netns(std::move(argv)), deadline);
}

RunResult Host::add_device(const std::string& dev, const std::string& port,
                           const std::string& netdev, const std::vector<std::string>& more) {
  devices_.push_back(dev);
  std::vector<std::string> argv = {xroce_bin(), "link", "add", dev, "netdev", netdev};
  if (!port.empty()) argv.insert(argv.end(), {"port", port});
  argv.insert(argv.end(), more.begin(), more.end());
  RunResult result = exec(argv);
  if (daemon_pid_ <= 0) daemon_pid_ = daemon_pid();
  return result;
}

pid_t Host::daemon_pid() const {
  std::ifstream in(lock_file_);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

bool Host::wait_gone(pid_t pid, std::chrono::milliseconds deadline) {
  return eventually(
      [pid] {
        if (kill(pid, 0) != 0) return errno == ESRCH;
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string skip;
        char state = 0;
        stat >> skip >> skip >> state;
        return state == 'Z';
      },
      deadline);
}

void PrintTo(const PortFamily& p, std::ostream* os) {
  *os << p.port << (p.v6 ? " ipv6" : " ipv4");
}

std::string port_family_name(const PortFamily& p) {
  return p.port + (p.v6 ? "_ipv6" : "_ipv4");
}

}  // namespace xroce::e2e
