// Two rails: two xroce devices on two netdevs of one host, used at once (needs root). Namespaces
// a and b are joined by two veth pairs (rail 0: 198.18.S.0/24, rail 1: 198.18.S+1.0/24); one
// daemon per namespace serves both of its devices. Two perftest pairs and two checked
// ibv_rc_pingpongs run on the two rails at the same time, and UCX's ucx_perftest with both
// devices in UCX_NET_DEVICES spreads one transfer over both; each device's counters must show
// its own rail's traffic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"

namespace xroce::e2e {
namespace {

constexpr int kBwIterations = 400;
constexpr int kBwBytes = 65536;

class Rails {
 public:
  explicit Rails(int subnet) : subnet_(subnet) {
    const std::string base = "xrops-" + std::to_string(getpid()) + "-rails";
    ns_[0] = base + "-a";
    ns_[1] = base + "-b";
    for (const auto& ns : ns_)
      run({"ip", "netns", "add", ns});
    for (int rail = 0; rail < 2; ++rail) {
      run({"ip", "link", "add", ifname(0, rail), "netns", ns_[0], "type", "veth", "peer", "name",
           ifname(1, rail), "netns", ns_[1]});
      for (int side = 0; side < 2; ++side) {
        exec(side, {"ip", "addr", "add", ip(side, rail) + "/24", "dev", ifname(side, rail)});
        exec(side, {"ip", "link", "set", "dev", ifname(side, rail), "up"});
      }
    }
    for (int side = 0; side < 2; ++side) {
      exec(side, {"ip", "link", "set", "lo", "up"});
      for (int rail = 0; rail < 2; ++rail) {
        added_[side][rail] = exec(side, {xroce_bin(), "link", "add", dev(side, rail), "netdev",
                                         ifname(side, rail), "port", "afxdp", "queues", "1"})
                                 .status == 0;
      }
    }
  }
  ~Rails() {
    for (int side = 0; side < 2; ++side) {
      for (int rail = 0; rail < 2; ++rail)
        if (added_[side][rail]) exec(side, {xroce_bin(), "link", "del", dev(side, rail)});
      run({"ip", "netns", "del", ns_[side]});
    }
  }
  Rails(const Rails&) = delete;
  Rails& operator=(const Rails&) = delete;

  bool ready() const {
    for (int side = 0; side < 2; ++side)
      for (int rail = 0; rail < 2; ++rail)
        if (!added_[side][rail]) return false;
    return eventually(
        [&] {
          for (int side = 0; side < 2; ++side) {
            const auto r = exec(side, {xroce_bin(), "link", "show"});
            std::size_t active = 0;
            for (auto at = r.output.find("state ACTIVE"); at != std::string::npos;
                 at = r.output.find("state ACTIVE", at + 1))
              ++active;
            if (active != 2) return false;
          }
          return true;
        },
        seconds(15));
  }
  std::string ifname(int side, int rail) const {
    return std::string(side == 0 ? "ra" : "rb") + std::to_string(rail);
  }
  std::string dev(int side, int rail) const {
    return std::string(side == 0 ? "xa" : "xb") + std::to_string(rail);
  }
  std::string ip(int side, int rail) const {
    return "198.18." + std::to_string(subnet_ + rail) + "." + std::to_string(side + 1);
  }
  RunResult exec(int side, std::vector<std::string> argv,
                 milliseconds deadline = seconds(30)) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[side]});
    return run(argv, deadline);
  }
  std::vector<std::string> app(int side, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[side], xroce_bin(), "exec", "--"});
    return argv;
  }
  bool listening(int side, int tcp_port) const {
    return eventually(
        [&] {
          const auto r = exec(side, {"ss", "-ltnH", "sport", "= :" + std::to_string(tcp_port)});
          return r.output.find(std::to_string(tcp_port)) != std::string::npos;
        },
        seconds(15));
  }
  // A device's counters from `xroce stat --json`.
  nlohmann::json counters(int side, int rail) const {
    const auto r = exec(side, {xroce_bin(), "stat", dev(side, rail), "--json"});
    const auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_object() ? j["counters"] : nlohmann::json::object();
  }

 private:
  int subnet_;
  std::string ns_[2];
  bool added_[2][2] = {{false, false}, {false, false}};
};

class RailsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    if (!have("ib_write_bw") || !have("ibv_rc_pingpong")) GTEST_SKIP() << "needs perftest";
  }
  static int subnet() { return 170 + static_cast<int>(getpid() % 40) * 2; }
};

std::uint64_t counter(const nlohmann::json& c, const char* name) {
  return c.value(name, std::uint64_t{0});
}

TEST_F(RailsTest, TwoPerftestPairsAndTwoCheckedPingpongsAtOnce) {
  Rails rails(subnet());
  ASSERT_TRUE(rails.ready());
  std::uint64_t before[2];
  for (int rail = 0; rail < 2; ++rail)
    before[rail] = counter(rails.counters(1, rail), "tx_bytes");

  std::vector<std::unique_ptr<Child>> servers;
  for (int rail = 0; rail < 2; ++rail) {
    servers.push_back(std::make_unique<Child>(rails.app(
        0,
        {"ib_write_bw", "-d", rails.dev(0, rail), "-x", "0", "-F", "-s", std::to_string(kBwBytes),
         "-n", std::to_string(kBwIterations), "-p", std::to_string(18515 + rail)})));
    servers.push_back(std::make_unique<Child>(
        rails.app(0, {"ibv_rc_pingpong", "-d", rails.dev(0, rail), "-g", "0", "-c", "-s", "65536",
                      "-n", "100", "-p", std::to_string(18525 + rail)})));
  }
  for (int port : {18515, 18516, 18525, 18526})
    ASSERT_TRUE(rails.listening(0, port)) << port;
  std::vector<std::unique_ptr<Child>> clients;
  for (int rail = 0; rail < 2; ++rail) {
    clients.push_back(std::make_unique<Child>(
        rails.app(1, {"ib_write_bw", "-d", rails.dev(1, rail), "-x", "0", "-F", "-s",
                      std::to_string(kBwBytes), "-n", std::to_string(kBwIterations), "-p",
                      std::to_string(18515 + rail), rails.ip(0, rail)})));
    clients.push_back(std::make_unique<Child>(
        rails.app(1, {"ibv_rc_pingpong", "-d", rails.dev(1, rail), "-g", "0", "-c", "-s", "65536",
                      "-n", "100", "-p", std::to_string(18525 + rail), rails.ip(0, rail)})));
  }
  // All four client programs run at once; each must finish with its full report.
  for (auto& c : clients) {
    std::string out;
    for (std::string line = c->read_line(seconds(120)); !line.empty();
         line = c->read_line(seconds(120)))
      out += line + "\n";
    EXPECT_EQ(c->wait(seconds(10)), 0) << out;
    const bool bw = out.find("#bytes") != std::string::npos;
    EXPECT_TRUE(bw ? out.find(std::to_string(kBwBytes) + "      " +
                              std::to_string(kBwIterations)) != std::string::npos
                   : out.find("100 iters in") != std::string::npos)
        << out;
  }
  for (auto& s : servers)
    EXPECT_EQ(s->wait(seconds(30)), 0);
  // Each rail carried its own pair: at least the WRITE payload of its perftest and pingpong.
  for (int rail = 0; rail < 2; ++rail) {
    const std::uint64_t sent = counter(rails.counters(1, rail), "tx_bytes") - before[rail];
    EXPECT_GE(sent, std::uint64_t{kBwIterations} * kBwBytes + 100ull * 65536) << "rail " << rail;
  }
}

TEST_F(RailsTest, UcxSpreadsOneTransferOverBothDevices) {
  if (!have("ucx_perftest")) GTEST_SKIP() << "needs ucx-utils";
  Rails rails(subnet());
  ASSERT_TRUE(rails.ready());
  // RC over verbs (UD for UCX's connection setup) on the given devices, and the rendezvous
  // protocol over two rails. The rails are two subnets with no route between them, so UCX must
  // pair each device only with the peer's device on its own subnet: UCX_IB_ROCE_LOCAL_SUBNET=y,
  // as on any RoCE NIC (by default UCX takes every remote address as reachable from every port,
  // and a device then sends to the other rail's address, which its link does not reach). UCX
  // learns each GID's netdev from /sys/class/infiniband/D/ports/1/gid_attrs/ndevs/I, which the
  // preload serves from the daemon's tree.
  const auto ucx = [&](int side, const std::string& devices, std::vector<std::string> argv) {
    std::vector<std::string> env = {"env",
                                    "UCX_NET_DEVICES=" + devices,
                                    "UCX_TLS=rc_verbs,ud_verbs,self",
                                    "UCX_MAX_RNDV_RAILS=2",
                                    "UCX_IB_GID_INDEX=0",
                                    "UCX_IB_ROCE_LOCAL_SUBNET=y"};
    env.insert(env.end(), argv.begin(), argv.end());
    return rails.app(side, env);
  };
  const auto transfer = [&](const std::string& server_devices, const std::string& client_devices,
                            const std::string& port, const std::string& bytes) {
    Child server(ucx(0, server_devices, {"ucx_perftest", "-p", port}));
    RunResult client;
    if (rails.listening(0, std::stoi(port))) {
      client = run(ucx(1, client_devices,
                       {"ucx_perftest", rails.ip(0, 0), "-p", port, "-t", "tag_bw", "-s", bytes,
                        "-n", "100"}),
                   seconds(180));
    }
    server.wait(seconds(30));
    return client;
  };
  // UCX on one xroce device first: two rails mean nothing until one works.
  const auto one = transfer(rails.dev(0, 0) + ":1", rails.dev(1, 0) + ":1", "13336", "65536");
  if (one.status != 0) {
    GTEST_SKIP() << "UCX does not run over one xroce device in this build, so two rails cannot "
                    "be tested; ucx_perftest said:\n"
                 << one.output.substr(0, 3000);
  }
  std::uint64_t before[2];
  for (int rail = 0; rail < 2; ++rail)
    before[rail] = counter(rails.counters(1, rail), "tx_bytes");
  const auto client =
      transfer(rails.dev(0, 0) + ":1," + rails.dev(0, 1) + ":1",
               rails.dev(1, 0) + ":1," + rails.dev(1, 1) + ":1", "13337", "4194304");
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_NE(client.output.find("Final:"), std::string::npos) << client.output;
  // 100 x 4 MiB left b; each rail carried a real share of it.
  const std::uint64_t total = 100ull * 4194304;
  std::uint64_t sent[2];
  for (int rail = 0; rail < 2; ++rail) {
    sent[rail] = counter(rails.counters(1, rail), "tx_bytes") - before[rail];
    EXPECT_GE(sent[rail], total / 10) << "rail " << rail << " carried too little:\n"
                                      << client.output;
  }
  EXPECT_GE(sent[0] + sent[1], total);
}

}  // namespace
}  // namespace xroce::e2e
