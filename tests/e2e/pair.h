// Two test hosts for the tests that run unmodified verbs programs across a veth pair: network
// namespaces "<prefix>-<pid>-<n>-a" and "-b" joined by veth xpv0 <-> xpv1 (198.18.<subnet>.1
// and .2, 2001:2:0:<subnet>::1 and ::2), an xroce device on each end ("xpa", "xpb"), and the ways
// to run programs there (inside `xroce exec`, with deadlines). Every test that needs two hosts
// with a device each uses this one; everything is removed by name or pid when the Pair goes
// away, also when the test fails.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fabric.h"

namespace xroce::e2e {

using std::chrono::milliseconds;
using std::chrono::seconds;

inline bool have(const std::string& program) {
  return run({"sh", "-c", "command -v " + program}).status == 0;
}

// perftest's bandwidth result rows: "<bytes> <iterations> <peak> <average> <msg rate>".
inline int bandwidth_rows(const std::string& output) {
  static const std::regex row(R"(^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$)");
  int rows = 0;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    rows += std::regex_match(line, row) ? 1 : 0;
  return rows;
}

// Runs a verbs server and its client (full argvs, each already inside its namespace): the
// client starts once `listening` says the server's TCP port is open (within 10 s); both
// outputs, the server's read until it exits. `deadline`: how long the client may run, and the
// server stay silent, before it counts as hung and is killed.
inline std::pair<RunResult, RunResult> run_server_client(
    const std::vector<std::string>& server_argv, const std::function<bool()>& listening,
    const std::vector<std::string>& client_argv, seconds deadline = seconds(60)) {
  Child server(server_argv);
  RunResult client;
  if (eventually(listening, seconds(10))) client = run(client_argv, deadline);
  RunResult s;
  for (std::string line = server.read_line(deadline); !line.empty();
       line = server.read_line(deadline)) {
    s.output += line + "\n";
  }
  s.status = server.wait(seconds(10));
  return {s, client};
}

struct PairOptions {
  std::string port = "afxdp";  // afxdp or udp
  int queues = 1;              // workers per device, and the veth's queues each way
  int mtu = 0;                 // the veth's MTU; 0 keeps the default (1500)
  bool device_on_b = true;     // false: b is a plain host, e.g. for a scripted AF_PACKET peer
  // Both devices get this name when set: middleware that sends its own device name to the
  // peer, as ucx_perftest's UCT tests and UCX_NET_DEVICES exported to every MPI rank do, needs
  // one name on both hosts. Empty: "xpa" and "xpb".
  std::string device;
};

class Pair {
 public:
  Pair(const std::string& prefix, int subnet, PairOptions options = {})
      : subnet_(subnet), device_(options.device) {
    static std::atomic<int> counter{0};
    const std::string base =
        prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    ns_[0] = base + "-a";
    ns_[1] = base + "-b";
    for (const auto& ns : ns_)
      run({"ip", "netns", "add", ns});
    // A queue a worker: a device with more than one worker needs a veth with as many queues.
    const std::string q = std::to_string(std::max(1, options.queues));
    run({"ip",      "link",        "add",  netdev(0),     "netns", ns_[0],        "numtxqueues",
         q,         "numrxqueues", q,      "type",        "veth",  "peer",        "name",
         netdev(1), "netns",       ns_[1], "numtxqueues", q,       "numrxqueues", q});
    for (int i = 0; i < 2; ++i) {
      exec(i, {"ip", "addr", "add", ip(i) + "/24", "dev", netdev(i)});
      exec(i, {"ip", "addr", "add", ip6(i) + "/64", "dev", netdev(i), "nodad"});
      if (options.mtu > 0) {
        exec(i, {"ip", "link", "set", netdev(i), "mtu", std::to_string(options.mtu)});
      }
      exec(i, {"ip", "link", "set", "lo", "up"});
      exec(i, {"ip", "link", "set", netdev(i), "up"});
    }
    // Both ends are up before either device is added: a veth has carrier only with its peer
    // up, and `xroce link add` returns once the port is ACTIVE.
    for (int i = 0; i < 2; ++i) {
      wanted_[i] = i == 0 || options.device_on_b;
      if (!wanted_[i]) continue;
      added_[i] = exec(i,
                       {xroce_bin(), "link", "add", dev(i), "netdev", netdev(i), "port",
                        options.port, "queues", std::to_string(options.queues)},
                       seconds(60));
      daemon_pid_[i] = daemon_pid(i);
    }
    report_ = std::make_unique<DeadlineReport>([this] { return state(); });
  }
  Pair(const std::string& prefix, int subnet, const std::string& port, bool device_on_b = true,
       const std::string& device = "")
      : Pair(prefix, subnet,
             PairOptions{.port = port, .device_on_b = device_on_b, .device = device}) {}
  ~Pair() {
    report_.reset();
    for (int i = 0; i < 2; ++i) {
      // `link del` of the last device returns once the daemon has exited; the wait is for a
      // daemon whose `link add` failed half way.
      if (wanted_[i] && added_[i].status == 0) exec(i, {xroce_bin(), "link", "del", dev(i)});
      if (daemon_pid_[i] > 0) Host::wait_gone(daemon_pid_[i], seconds(5));
      run({"ip", "netns", "del", ns_[i]});
    }
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  // The wanted devices added with their ports ACTIVE (`link add` waits for that, with a
  // deadline).
  bool ready() const {
    for (int i = 0; i < 2; ++i) {
      if (wanted_[i] && added_[i].status != 0) return false;
    }
    return true;
  }
  std::string why_not() const { return added_[0].output + added_[1].output; }

  std::string ip(int i) const {
    return "198.18." + std::to_string(subnet_) + "." + std::to_string(i + 1);
  }
  std::string ip6(int i) const {
    return "2001:2:0:" + std::to_string(subnet_) + "::" + std::to_string(i + 1);
  }
  std::string dev(int i) const {
    if (!device_.empty()) return device_;
    return i == 0 ? "xpa" : "xpb";
  }
  std::string netdev(int i) const { return i == 0 ? "xpv0" : "xpv1"; }
  const std::string& netns(int i) const { return ns_[i]; }

  // argv inside namespace i.
  std::vector<std::string> in(int i, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[i]});
    return argv;
  }
  RunResult exec(int i, std::vector<std::string> argv, milliseconds deadline = seconds(30)) const {
    return run(in(i, std::move(argv)), deadline);
  }
  // argv inside namespace i, run by `xroce exec --` (the device's environment).
  std::vector<std::string> app(int i, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {xroce_bin(), "exec", "--"});
    return in(i, std::move(argv));
  }
  RunResult verbs(int i, std::vector<std::string> argv,
                  milliseconds deadline = seconds(120)) const {
    return run(app(i, std::move(argv)), deadline);
  }
  bool listening(int i, int tcp_port) const {
    return !exec(i, {"ss", "-Hltn", "sport", "=", ":" + std::to_string(tcp_port)}).output.empty();
  }

  // Server in namespace a (waits until its TCP port listens), then the client in b with a's
  // address appended; both outputs.
  std::pair<RunResult, RunResult> server_client(std::vector<std::string> server_argv,
                                                std::vector<std::string> client_argv,
                                                const std::string& tcp_port,
                                                seconds deadline = seconds(60)) {
    client_argv.push_back(ip(0));
    return run_server_client(
        app(0, server_argv), [&] { return listening(0, std::stoi(tcp_port)); }, app(1, client_argv),
        deadline);
  }

  // Both devices' QPs and counters (`xroce qp show`, `xroce stat`), as text for a log.
  std::string state() const {
    std::string text;
    for (int i = 0; i < 2; ++i) {
      if (!wanted_[i]) continue;
      for (std::vector<std::string> command : {std::vector<std::string>{"qp", "show", dev(i)},
                                               std::vector<std::string>{"stat", dev(i)}}) {
        text += ns_[i] + "$ xroce";
        for (const auto& word : command)
          text += " " + word;
        command.insert(command.begin(), xroce_bin());
        text += "\n" + exec(i, command, seconds(10)).output;
      }
    }
    return text;
  }

  // The daemon's run directory of namespace i (run_dir.h).
  std::string run_dir(int i) const {
    const auto ino = exec(i, {"stat", "-L", "-c", "%i", "/proc/self/ns/net"}).output;
    return "/run/xroce/ns-" + ino.substr(0, ino.find('\n'));
  }
  // ports/1/hw_counters/<name> of device i in its daemon's sysfs-shaped tree, or -1.
  long long hw_counter(int i, const std::string& name) const {
    std::ifstream file(run_dir(i) + "/sys/class/infiniband/" + dev(i) + "/ports/1/hw_counters/" +
                       name);
    long long v = -1;
    file >> v;
    return v;
  }

 private:
  pid_t daemon_pid(int i) const {
    std::ifstream lock(run_dir(i) + "/xroced.lock");
    pid_t pid = 0;
    lock >> pid;
    return pid;
  }

  int subnet_;
  std::string device_;
  std::string ns_[2];
  RunResult added_[2];
  bool wanted_[2] = {true, true};
  pid_t daemon_pid_[2] = {0, 0};
  std::unique_ptr<DeadlineReport> report_;  // state() for a program that hangs
};

}  // namespace xroce::e2e
