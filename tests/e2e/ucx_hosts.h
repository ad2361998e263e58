// Where the UCX and Open MPI tests run: two network namespaces joined by a veth, each with an
// xroce device, or one namespace whose one device both processes share (then the device
// reaches its own GID: loopback). The devices have one name on both sides, because UCX sends
// its device name to the peer (ucx_perftest's UCT tests) and mpirun exports UCX_NET_DEVICES to
// every rank. Everything is removed when the object goes away (Pair, Host).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fabric.h"
#include "pair.h"

namespace xroce::e2e {

class UcxHosts {
 public:
  static constexpr const char* kDevice = "xucx0";

  UcxHosts(bool one_host, const std::string& port, int subnet) : one_host_(one_host) {
    if (one_host) {
      host_ = std::make_unique<Host>("xre2e-verbs-ucx1", subnet);
      added_ = host_->add_device(kDevice, port).status == 0;
    } else {
      pair_ = std::make_unique<Pair>("xre2e-verbs-ucx2", subnet, port, true, kDevice);
    }
  }

  // The devices exist and their ports are ACTIVE.
  bool ready() const {
    if (pair_ != nullptr) return pair_->ready();
    return added_ && eventually(
                         [&] {
                           return exec(0, {xroce_bin(), "link", "show", kDevice})
                                      .output.find("state ACTIVE") != std::string::npos;
                         },
                         std::chrono::seconds(20));
  }

  bool one_host() const { return one_host_; }
  int side(int i) const { return one_host_ ? 0 : i; }
  const std::string& netns(int i) const {
    return one_host_ ? host_->netns() : pair_->netns(side(i));
  }
  // The address side i is reached at (the netdev's IPv4 address).
  std::string ip(int i) const { return one_host_ ? host_->ipv4() : pair_->ip(side(i)); }
  // Side i's IPv6 address (a GID of its device).
  std::string ipv6(int i) const { return one_host_ ? host_->ipv6() : pair_->ip6(side(i)); }

  RunResult exec(int i, std::vector<std::string> argv,
                 std::chrono::milliseconds deadline = std::chrono::seconds(30)) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", netns(i)});
    return run(argv, deadline);
  }
  // argv as an application of side i: in its namespace, inside `xroce exec`.
  std::vector<std::string> app(int i, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", netns(i), xroce_bin(), "exec", "--"});
    return argv;
  }

  // `xroce stat` of side i's device: RoCE packets received so far (0 when unreadable).
  std::uint64_t received_packets(int i) const {
    const auto j = nlohmann::json::parse(exec(i, {xroce_bin(), "stat", kDevice, "--json"}).output,
                                         nullptr, false);
    if (!j.is_object() || !j.contains("counters")) return 0;
    return j["counters"].value("rcvd_pkts", std::uint64_t{0});
  }

  // A server on side 0, then (once it listens on tcp_port) a client on side 1 given the
  // server's address last; both outputs.
  std::pair<RunResult, RunResult> server_client(const std::vector<std::string>& server_argv,
                                                std::vector<std::string> client_argv,
                                                const std::string& tcp_port) const {
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
  bool one_host_;
  bool added_ = false;
  std::unique_ptr<Host> host_;
  std::unique_ptr<Pair> pair_;
};

}  // namespace xroce::e2e
