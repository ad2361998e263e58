// Two test hosts with xroce-switch between them (tools/switch/README.md): the fabric for tests
// that need a congestion point or impairment (ECN bleaching, a smaller MTU hop, random loss)
// on the path of unmodified verbs programs.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"

namespace xroce::e2e {

inline std::string slurp_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// a -- [m: xroce-switch ma<->mb] -- b, 198.18.S.1 and .2, an xroce device on each end ("xva",
// "xvb", on an `port` kind port: afxdp or udp). The netdevs run at `mtu` except the switch's
// port toward b, which runs at `mb_mtu`. Everything is removed by name or pid when it goes away,
// also when the test fails.
class SwitchedPeers {
 public:
  SwitchedPeers(int subnet, const std::vector<std::string>& switch_flags, int mtu, int mb_mtu,
                const std::string& port = "afxdp")
      : subnet_(subnet) {
    const std::string base = "xrsw-" + std::to_string(getpid()) + "-" + std::to_string(subnet);
    for (const char* n : {"a", "m", "b"})
      ns_.push_back(base + "-" + n);
    for (const auto& ns : ns_) {
      run({"ip", "netns", "add", ns});
      run({"ip", "-n", ns, "link", "set", "lo", "up"});
    }
    run({"ip", "link", "add", "va", "netns", ns_[0], "type", "veth", "peer", "name", "ma", "netns",
         ns_[1]});
    run({"ip", "link", "add", "mb", "netns", ns_[1], "type", "veth", "peer", "name", "vb", "netns",
         ns_[2]});
    const auto set = [&](int ns, const char* dev, int m) {
      run({"ip", "-n", ns_[ns], "link", "set", "dev", dev, "mtu", std::to_string(m), "up"});
    };
    set(0, "va", mtu);
    set(1, "ma", mtu);
    set(1, "mb", mb_mtu);
    set(2, "vb", mtu);
    run({"ip", "-n", ns_[0], "addr", "add", ip(0) + "/24", "dev", "va"});
    run({"ip", "-n", ns_[2], "addr", "add", ip(1) + "/24", "dev", "vb"});
    std::vector<std::string> argv = {"ip",        "netns", "exec",   ns_[1], XROCE_SWITCH_BIN,
                                     "--port",    "ma",    "--port", "mb",   "--stats-json",
                                     stats_path()};
    argv.insert(argv.end(), switch_flags.begin(), switch_flags.end());
    switch_ = std::make_unique<Child>(argv);
    switch_ready_ = switch_->read_line(seconds(10)) == "ready";
    for (int side = 0; side < 2; ++side) {
      added_[side] = exec(side, {xroce_bin(), "link", "add", side == 0 ? "xva" : "xvb", "netdev",
                                 side == 0 ? "va" : "vb", "port", port, "queues", "1"})
                         .status == 0;
    }
  }
  ~SwitchedPeers() {
    for (int side = 0; side < 2; ++side)
      if (added_[side]) exec(side, {xroce_bin(), "link", "del", side == 0 ? "xva" : "xvb"});
    if (switch_) {
      kill(switch_->pid(), SIGTERM);
      switch_->wait(seconds(10));
    }
    std::filesystem::remove(stats_path());
    for (const auto& ns : ns_)
      run({"ip", "netns", "del", ns});
  }
  SwitchedPeers(const SwitchedPeers&) = delete;
  SwitchedPeers& operator=(const SwitchedPeers&) = delete;

  bool ready() const {
    return switch_ready_ && added_[0] && added_[1] &&
           eventually(
               [&] {
                 for (int s = 0; s < 2; ++s) {
                   const auto r = exec(s, {xroce_bin(), "link", "show"});
                   if (r.output.find("state ACTIVE") == std::string::npos) return false;
                 }
                 return true;
               },
               seconds(15));
  }
  std::string ip(int side) const {
    return "198.18." + std::to_string(subnet_) + "." + std::to_string(side + 1);
  }
  RunResult exec(int side, std::vector<std::string> argv,
                 milliseconds deadline = seconds(30)) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[side == 0 ? 0 : 2]});
    return run(argv, deadline);
  }
  std::vector<std::string> in(int side, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[side == 0 ? 0 : 2]});
    return argv;
  }
  // argv inside side's namespace, run by `xroce exec --` (the device's environment).
  std::vector<std::string> app(int side, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {xroce_bin(), "exec", "--"});
    return in(side, std::move(argv));
  }
  std::string dev(int side) const { return side == 0 ? "xva" : "xvb"; }
  // The switch's statistics as of now: it writes them on SIGUSR1, and a file written before the
  // signal (an older "sequence") is not the answer.
  nlohmann::json switch_stats() {
    kill(switch_->pid(), SIGUSR1);
    nlohmann::json j;
    eventually(
        [&] {
          j = nlohmann::json::parse(slurp_file(stats_path()), nullptr, false);
          return j.is_object() && j.value("sequence", 0LL) > stats_sequence_;
        },
        seconds(5));
    if (j.is_object()) stats_sequence_ = j.value("sequence", 0LL);
    return j;
  }

 private:
  std::string stats_path() const {
    return "/tmp/xrsw-" + std::to_string(getpid()) + "-" + std::to_string(subnet_) + ".json";
  }
  int subnet_;
  std::vector<std::string> ns_;
  std::unique_ptr<Child> switch_;
  bool switch_ready_ = false;
  long long stats_sequence_ = 0;  // of the last statistics switch_stats() returned
  bool added_[2] = {false, false};
};

}  // namespace xroce::e2e
