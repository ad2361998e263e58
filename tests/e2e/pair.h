// Two namespaces for the e2e tests that run unmodified verbs programs across a veth pair: an
// xroce device in each, helpers to run programs there (inside `xroce exec`) and to run a
// server/client pair. Everything is removed by name when the Pair goes away.
#pragma once

#include <unistd.h>

#include <functional>
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

// Runs a verbs server and its client (full argvs, each already inside its namespace): the
// client starts once `listening` says the server's TCP port is open (within 10 s); both
// outputs, the server's read until it exits.
inline std::pair<RunResult, RunResult> run_server_client(
    const std::vector<std::string>& server_argv, const std::function<bool()>& listening,
    const std::vector<std::string>& client_argv) {
  Child server(server_argv);
  RunResult client;
  if (eventually(listening, seconds(10))) client = run(client_argv, seconds(60));
  RunResult s;
  for (std::string line = server.read_line(seconds(60)); !line.empty();
       line = server.read_line(seconds(60))) {
    s.output += line + "\n";
  }
  s.status = server.wait(seconds(10));
  return {s, client};
}

// Two namespaces "<prefix>-<pid>-{a,b}" with veth g1a/g1b between them, 198.18.<subnet>.1 and
// .2, a device "xpa"/"xpb" on each end with the given port kind (on a only when device_on_b
// is false: b is then a plain host, e.g. for a scripted peer on an AF_PACKET socket).
class Pair {
 public:
  Pair(const std::string& prefix, int subnet, const std::string& port, bool device_on_b = true)
      : subnet_(subnet) {
    const std::string base = prefix + "-" + std::to_string(getpid());
    ns_[0] = base + "-a";
    ns_[1] = base + "-b";
    for (const auto& ns : ns_)
      run({"ip", "netns", "add", ns});
    run({"ip", "link", "add", "g1a", "netns", ns_[0], "type", "veth", "peer", "name", "g1b",
         "netns", ns_[1]});
    const char* ifs[2] = {"g1a", "g1b"};
    for (int i = 0; i < 2; ++i) {
      run({"ip", "-n", ns_[i], "addr", "add", ip(i) + "/24", "dev", ifs[i]});
      run({"ip", "-n", ns_[i], "link", "set", ifs[i], "up"});
      run({"ip", "-n", ns_[i], "link", "set", "lo", "up"});
      wanted_[i] = i == 0 || device_on_b;
      if (!wanted_[i]) continue;
      added_[i] = exec(i, {xroce_bin(), "link", "add", dev(i), "netdev", ifs[i], "port", port,
                           "queues", "1"})
                      .status == 0;
    }
  }
  ~Pair() {
    for (int i = 0; i < 2; ++i) {
      if (added_[i]) exec(i, {xroce_bin(), "link", "del", dev(i)});
      run({"ip", "netns", "del", ns_[i]});
    }
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  bool ready() const {
    if (added_[0] != wanted_[0] || added_[1] != wanted_[1]) return false;
    // A veth end reports carrier a moment after both ends are up.
    return eventually(
        [&] {
          for (int i = 0; i < 2; ++i) {
            if (!wanted_[i]) continue;
            auto r = exec(i, {xroce_bin(), "link", "show"});
            if (r.output.find("state ACTIVE") == std::string::npos) return false;
          }
          return true;
        },
        seconds(10));
  }
  std::string ip(int i) const {
    return "198.18." + std::to_string(subnet_) + "." + std::to_string(i + 1);
  }
  std::string dev(int i) const { return i == 0 ? "xpa" : "xpb"; }
  RunResult exec(int i, std::vector<std::string> argv, milliseconds deadline = seconds(30)) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[i]});
    return run(argv, deadline);
  }
  std::vector<std::string> app(int i, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[i], xroce_bin(), "exec", "--"});
    return argv;
  }
  // Server in namespace a (waits until its TCP port listens), client in b; both outputs.
  std::pair<RunResult, RunResult> server_client(std::vector<std::string> server_argv,
                                                std::vector<std::string> client_argv,
                                                const std::string& tcp_port) {
    client_argv.push_back(ip(0));
    return run_server_client(
        app(0, server_argv),
        [&] {
          auto r = exec(0, {"ss", "-ltnH", "sport", "= :" + tcp_port});
          return r.output.find(tcp_port) != std::string::npos;
        },
        app(1, client_argv));
  }

 private:
  int subnet_;
  std::string ns_[2];
  bool added_[2] = {false, false};
  bool wanted_[2] = {true, true};
};

}  // namespace xroce::e2e
