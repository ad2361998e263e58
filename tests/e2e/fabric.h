// Test hosts for the e2e tests: a network namespace with a veth pair and addresses from the
// benchmarking ranges (198.18.0.0/15, 2001:2::/48), an xroce device on it, and helpers to run
// programs there with deadlines. Everything is removed by name or pid when the Host goes away,
// also when the test fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "common/eventually.h"

namespace xroce::e2e {

struct RunResult {
  int status = -1;     // exit status, or 128 + signal
  std::string output;  // stdout and stderr
};

// Runs argv with a deadline (killed at the deadline; status then 124 or 128+9).
RunResult run(const std::vector<std::string>& argv,
              std::chrono::milliseconds deadline = std::chrono::seconds(30));

// What run() appends to a program's output when the program reaches its deadline, taken
// before it is killed (its QPs still exist): the state of the devices it used, so that a hang
// in a CI log says where it stood. Any thread; run() called from the report adds none of its
// own. Empty (the default): nothing. DeadlineReport sets one for its lifetime.
void set_deadline_report(std::function<std::string()> report);
class DeadlineReport {
 public:
  explicit DeadlineReport(std::function<std::string()> report) {
    set_deadline_report(std::move(report));
  }
  ~DeadlineReport() { set_deadline_report({}); }
  DeadlineReport(const DeadlineReport&) = delete;
  DeadlineReport& operator=(const DeadlineReport&) = delete;
};

// A child whose output is read line by line, each read with a deadline; its stdin is /dev/null,
// or a pipe the test writes lines into.
class Child {
 public:
  enum class Input { kNone, kPipe };
  explicit Child(const std::vector<std::string>& argv, Input input = Input::kNone);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The next line, or empty when the child closed its output or the deadline passed.
  std::string read_line(std::chrono::milliseconds deadline);
  // Waits for exit up to the deadline (then kills it); returns the status as run() does.
  int wait(std::chrono::milliseconds deadline);
  pid_t pid() const { return pid_; }
  // Whether it has exited (it is not reaped: wait() still gives its status).
  bool exited() const;
  // Input::kPipe: writes `line` and a newline to its stdin; false if nobody reads it any more.
  bool write_line(const std::string& line);
  // Input::kPipe: closes its stdin (it reads end-of-file).
  void close_input();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;
  std::string pending_;
};

// Lines of `child` until one starts with `prefix` (returned), or "" when a read reaches the
// deadline or the child closes its output; every line read is appended to `seen`.
std::string read_until(Child& child, const std::string& prefix, std::string& seen,
                       std::chrono::milliseconds deadline = std::chrono::seconds(20));

class Host {
 public:
  // Creates namespace "<prefix>-<pid>-<n>", veth xr0a/xr0b in it, xr0a with
  // 198.18.<subnet>.1/24 and 2001:2:0:<subnet>::1/64, both ends up.
  Host(const std::string& prefix, int subnet);
  ~Host();
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  const std::string& netns() const { return netns_; }
  std::string ipv4() const;
  std::string ipv6() const;
  // argv run inside the namespace (ip netns exec).
  RunResult exec(std::vector<std::string> argv,
                 std::chrono::milliseconds deadline = std::chrono::seconds(30)) const;
  std::vector<std::string> in_netns(std::vector<std::string> argv) const;
  // `xroce link add <dev> netdev <netdev> [port <port>] [more...]`; remembers the daemon so
  // the destructor stops it.
  RunResult add_device(const std::string& dev, const std::string& port = "",
                       const std::string& netdev = "xr0a",
                       const std::vector<std::string>& more = {});
  // The pid in the namespace's daemon lock file (the running daemon's, or a past one's).
  pid_t daemon_pid() const;
  const std::string& lock_file() const { return lock_file_; }
  // True once the process is gone (or a zombie nobody reaps), waiting up to the deadline.
  static bool wait_gone(pid_t pid, std::chrono::milliseconds deadline);

 private:
  std::string netns_;
  int subnet_;
  std::vector<std::string> devices_;
  std::string lock_file_;
  pid_t daemon_pid_ = 0;
};

std::string xroce_bin();
std::string probe_bin();
// Whether process `pid` is an xroced (by its name).
bool is_xroced(pid_t pid);
// The inode number of network namespace `netns` ("4026532001"), which names its daemon's run
// directory, run_dir_of(netns): /run/xroce/ns-<inode> (include/xroce/run_dir.h).
std::string netns_inode(const std::string& netns);
std::string run_dir_of(const std::string& netns);
// Stops the daemon serving `netns` (the pid in its lock file, only if that is an xroced: SIGTERM,
// then SIGKILL after 5 s) and removes its run directory. For a test's cleanup.
void stop_daemon_of(const std::string& netns);
// Polls `probe` until it returns true or the deadline passes (common/eventually.h), pausing
// 20 ms between checks: a check here usually runs a program.
inline bool eventually(const std::function<bool()>& probe, std::chrono::milliseconds deadline) {
  return test::eventually(probe, deadline, std::chrono::milliseconds(20));
}

// The index of the GID `gid` (as ibv_devinfo prints it: "::ffff:198.18.1.1", "2001:2::1") in
// device `dev`'s table, read with `ibv_devinfo -v` inside namespace `netns`; -1 if absent.
int gid_index(const std::string& netns, const std::string& dev, const std::string& gid);
// The value of counter `name` in `xroce stat` output ("link DEV/1 name value ..."), or -1.
long long stat_counter(const std::string& stat_output, const std::string& name);
// Whether `cm_show_json` (`xroce cm show DEV --json`) lists a listening rdma_cm id owned by
// process `pid` (0: by any process). A test that starts a server and waits for it to listen
// must ask for the server's own listener: the daemon drops an exited process's ids when it
// sees its file close, a moment after the process is reaped, so the listener of the server
// before can still show, and a client started on it is refused (REJ, invalid service ID).
bool cm_listener(const std::string& cm_show_json, pid_t pid = 0);

// The parameter of the tests run on each port kind over each address family.
struct PortFamily {
  std::string port;  // afxdp | udp
  bool v6;           // IPv6 GIDs (else IPv4-mapped ones)
};
// "udp ipv6" in GoogleTest's messages; "udp_ipv6" as the test's name
// (INSTANTIATE_TEST_SUITE_P(..., [](const auto& info) { return port_family_name(info.param); })).
void PrintTo(const PortFamily& p, std::ostream* os);
std::string port_family_name(const PortFamily& p);

}  // namespace xroce::e2e
