// Registered memory through both DMA paths (docs/ARCHITECTURE.md decision 5), end to end: the
// provider re-backs whole pages of anonymous memory with a memfd the daemon maps ("shared"), any
// other buffer is reached by cross-memory attach ("cma"); `xroce stat` says which; deregistration
// and a killed client leave no mapping or descriptor in xroced. Also: an address added to the
// netdev while the device runs is steered to the AF_XDP sockets. Needs root; skips otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"
#include "xroce/proc_maps.h"

namespace xroce::e2e {
namespace {

int next_subnet() {
  static int subnet = 100 + static_cast<int>(getpid() % 50);
  return subnet++ % 250 + 1;
}

// What /proc/<xroced> shows of registered memory: mappings of the provider's memfds, and fds.
struct DaemonView {
  int region_mappings = 0;
  int fds = 0;
};

DaemonView look_at(pid_t daemon) {
  DaemonView v;
  std::string maps;
  (void)xroce::proc::read_all(("/proc/" + std::to_string(daemon) + "/maps").c_str(), maps);
  xroce::proc::for_each(maps, [&v](const xroce::proc::Mapping& m) {
    v.region_mappings += m.path.starts_with("/memfd:xroce-mr") ? 1 : 0;
    return true;
  });
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(daemon) + "/fd", ec)) {
    (void)entry;
    ++v.fds;
  }
  return v;
}

class DmaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, device nodes)";
    if (!have("ip") || !have("ss") || !have("ibv_rc_pingpong")) {
      GTEST_SKIP() << "needs iproute2 and ibverbs-utils";
    }
  }

  static pid_t daemon_of(const Pair& pair, int i) {
    auto r = pair.exec(
        i, {"sh", "-c", "cat /run/xroce/ns-$(stat -L -c %i /proc/self/ns/net)/xroced.lock"});
    return r.status == 0 && !r.output.empty() ? std::stoi(r.output) : 0;
  }

  // The "dma" `xroce stat --json` gives each region, by address.
  static std::map<std::uint64_t, std::string> dma_by_addr(const Pair& pair, int i) {
    std::map<std::uint64_t, std::string> out;
    auto r = pair.exec(i, {xroce_bin(), "stat", pair.dev(i), "--json"});
    const auto j = nlohmann::json::parse(r.output, nullptr, false);
    if (j.is_discarded() || !j.contains("memory_regions")) return out;
    for (const auto& mr : j["memory_regions"])
      out[mr.value("addr", std::uint64_t{0})] = mr.value("dma", "");
    return out;
  }

  // Reads the probe's "mr KIND ADDR LENGTH" lines up to "ready".
  static std::vector<std::pair<std::string, std::uint64_t>> read_regions(Child& probe,
                                                                         std::string& output) {
    std::vector<std::pair<std::string, std::uint64_t>> regions;
    for (std::string line = probe.read_line(seconds(30)); !line.empty() && line != "ready";
         line = probe.read_line(seconds(30))) {
      output += line + "\n";
      std::istringstream in(line);
      std::string word;
      std::string kind;
      std::uint64_t addr = 0;
      if (in >> word >> kind >> addr && word == "mr") regions.emplace_back(kind, addr);
    }
    return regions;
  }
};

TEST_F(DmaTest, StatShowsEachRegionsPathAndDeregistrationUnmapsIt) {
  Pair pair("xrdma-stat", next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  const pid_t daemon = daemon_of(pair, 0);
  ASSERT_GT(daemon, 0);
  const DaemonView before = look_at(daemon);
  EXPECT_EQ(before.region_mappings, 0);

  Child probe(pair.app(0, {probe_bin(), pair.dev(0), "dma_regions"}));
  std::string output;
  const auto regions = read_regions(probe, output);
  ASSERT_EQ(regions.size(), 2u) << output;
  ASSERT_EQ(regions[0].first, "shared") << output;
  ASSERT_EQ(regions[1].first, "cma") << output;

  const auto dma = dma_by_addr(pair, 0);
  EXPECT_EQ(dma.count(regions[0].second) ? dma.at(regions[0].second) : "", "shared");
  EXPECT_EQ(dma.count(regions[1].second) ? dma.at(regions[1].second) : "", "cma");
  const auto text = pair.exec(0, {xroce_bin(), "stat", pair.dev(0)}).output;
  EXPECT_NE(text.find("dma shared"), std::string::npos) << text;
  EXPECT_NE(text.find("dma cma"), std::string::npos) << text;
  // The shared region is mapped in the daemon, once; its memfd is not kept open there.
  EXPECT_EQ(look_at(daemon).region_mappings, 1);

  kill(probe.pid(), SIGUSR1);  // deregister, check, register again, exit
  for (std::string line = probe.read_line(seconds(30)); !line.empty();
       line = probe.read_line(seconds(30))) {
    output += line + "\n";
  }
  EXPECT_EQ(probe.wait(seconds(30)), 0) << output;
  EXPECT_EQ(output.find("FAILED"), std::string::npos) << output;
  EXPECT_NE(output.find("done"), std::string::npos) << output;
  EXPECT_TRUE(eventually(
      [&] {
        const DaemonView now = look_at(daemon);
        return now.region_mappings == 0 && now.fds == before.fds;
      },
      seconds(10)))
      << "mappings " << look_at(daemon).region_mappings << ", fds " << look_at(daemon).fds
      << " (before: " << before.fds << ")";
}

TEST_F(DmaTest, AKilledClientLeavesNoMappingOrDescriptorInTheDaemon) {
  Pair pair("xrdma-kill", next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  const pid_t daemon = daemon_of(pair, 0);
  ASSERT_GT(daemon, 0);
  const DaemonView before = look_at(daemon);
  Child probe(pair.app(0, {probe_bin(), pair.dev(0), "dma_hold"}));
  std::string output;
  ASSERT_EQ(read_regions(probe, output).size(), 2u) << output;
  EXPECT_EQ(look_at(daemon).region_mappings, 1);
  EXPECT_GT(look_at(daemon).fds, before.fds);  // the client's connection, event socket
  kill(probe.pid(), SIGKILL);
  probe.wait(seconds(10));
  EXPECT_TRUE(eventually(
      [&] {
        const DaemonView now = look_at(daemon);
        return now.region_mappings == 0 && now.fds == before.fds;
      },
      seconds(10)))
      << "mappings " << look_at(daemon).region_mappings << ", fds " << look_at(daemon).fds
      << " (before: " << before.fds << ")";
  EXPECT_TRUE(dma_by_addr(pair, 0).empty());
}

// RDMA WRITE, READ and fetch-and-add between two QPs of one device, on a region reached each
// way. Through the shared mapping the device's atomics and the application's CPU atomics on one
// word lose nothing; through cross-memory attach only the device's own are checked (dma.h).
TEST_F(DmaTest, DataAndAtomicsThroughBothPaths) {
  Pair pair("xrdma-loop", next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  for (const std::string dma : {"shared", "cma"}) {
    auto r = pair.exec(0,
                       {xroce_bin(), "exec", "--", "env", "XROCE_MR_DMA=" + dma, probe_bin(),
                        pair.dev(0), "dma_loopback", "300"},
                       seconds(60));
    EXPECT_EQ(r.status, 0) << dma << ":\n" << r.output;
    EXPECT_NE(r.output.find("dma " + dma), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
    std::cout << "[ dma " << dma << " ] " << r.output.substr(r.output.find("atomic_total"));
  }
}

// The bandwidth in MB/s a perftest client printed on its result row for `bytes`.
double average_mbps(const std::string& output, const std::string& bytes) {
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string size;
    std::string iters;
    double peak = 0;
    double average = 0;
    if (row >> size >> iters >> peak >> average && size == bytes) return average;
  }
  return 0;
}

// Unmodified perftest and ibv_rc_pingpong -c over regions reached either way (the provider's
// XROCE_MR_DMA=cma turns sharing off), with the bandwidths of both in one run.
TEST_F(DmaTest, PerftestAndPingpongThroughBothPaths) {
  if (!have("ib_write_bw")) GTEST_SKIP() << "needs perftest";
  Pair pair("xrdma-perf", next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  const std::vector<std::vector<std::string>> runs = {
      {"ib_write_bw", "-s", "65536", "-n", "2000"},
      {"ib_read_bw", "-s", "65536", "-n", "2000"},
      {"ib_atomic_bw", "-n", "500"},
  };
  for (const std::string dma : {"shared", "cma"}) {
    const std::vector<std::string> env = {"env", "XROCE_MR_DMA=" + dma};
    for (const auto& args : runs) {
      std::vector<std::string> server = env;
      server.insert(server.end(), {args[0], "-d", pair.dev(0), "-x", "0", "-F"});
      server.insert(server.end(), args.begin() + 1, args.end());
      std::vector<std::string> client = server;
      client[4] = pair.dev(1);
      auto r = pair.server_client(server, client, "18515");
      const std::string what = dma + " " + args[0];
      EXPECT_EQ(r.first.status, 0) << what << " server:\n" << r.first.output;
      EXPECT_EQ(r.second.status, 0) << what << " client:\n" << r.second.output;
      const std::string bytes = args[0] == "ib_atomic_bw" ? "8" : "65536";
      const double mbps = average_mbps(r.second.output, bytes);
      EXPECT_GT(mbps, 0) << what << "\n" << r.second.output;
      std::cout << "[ " << dma << " ] " << args[0] << " " << bytes << " B: " << mbps
                << " MB/s average\n";
    }
    // The pingpong checks every byte it receives (-c).
    for (const char* size : {"65536", "4097"}) {
      std::vector<std::string> server = env;
      server.insert(server.end(), {"ibv_rc_pingpong", "-d", pair.dev(0), "-g", "0", "-c", "-n",
                                   "20", "-s", size});
      std::vector<std::string> client = server;
      client[4] = pair.dev(1);
      auto r = pair.server_client(server, client, "18515");
      EXPECT_EQ(r.first.status, 0) << dma << " " << size << " server:\n" << r.first.output;
      EXPECT_EQ(r.second.status, 0) << dma << " " << size << " client:\n" << r.second.output;
      EXPECT_NE(r.second.output.find("iters in"), std::string::npos) << r.second.output;
    }
  }
}

// An address added to the netdev after `link add` becomes a GID, and frames to it reach the
// device's AF_XDP sockets (the steering map follows the addresses).
TEST_F(DmaTest, AnAddressAddedWhileRunningIsSteered) {
  Pair pair("xrdma-gid", next_subnet(), "afxdp");
  ASSERT_TRUE(pair.ready());
  const std::string added = pair.ip(0).substr(0, pair.ip(0).rfind('.')) + ".11";
  ASSERT_EQ(pair.exec(0, {"ip", "addr", "add", added + "/24", "dev", pair.netdev(0)}).status, 0);
  int index = -1;
  ASSERT_TRUE(eventually(
      [&] {
        auto r = pair.exec(0, {xroce_bin(), "link", "show", "--json"});
        const auto j = nlohmann::json::parse(r.output, nullptr, false);
        if (j.is_discarded() || !j.is_array() || j.empty()) return false;
        for (const auto& gid : j[0]["gids"]) {
          if (gid.value("gid", "") == "::ffff:" + added) index = gid.value("index", -1);
        }
        return index >= 0;
      },
      seconds(10)));
  // The server's QP uses the new GID: every RoCE frame the client sends goes to the new address.
  auto r = pair.server_client(
      {"ibv_rc_pingpong", "-d", pair.dev(0), "-g", std::to_string(index), "-c", "-n", "20"},
      {"ibv_rc_pingpong", "-d", pair.dev(1), "-g", "0", "-c", "-n", "20"}, "18515");
  EXPECT_EQ(r.first.status, 0) << "server:\n" << r.first.output;
  EXPECT_EQ(r.second.status, 0) << "client:\n" << r.second.output;
  EXPECT_NE(r.second.output.find("iters in"), std::string::npos) << r.second.output;
  // The server prints the client's GID and its own: its own is the new address.
  EXPECT_NE(r.first.output.find("::ffff:" + added), std::string::npos) << r.first.output;
}

}  // namespace
}  // namespace xroce::e2e
