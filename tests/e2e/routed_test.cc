// Routed RoCE with unmodified Debian programs: devices in two subnets joined by a router
// namespace (IP forwarding on) reach each other through the gateway, IPv4 and IPv6 GIDs, both
// port kinds: ibv_rc_pingpong -c, ibv_ud_pingpong -c, ib_write_bw and rping (rdma_cm). Then a long
// ibv_rc_pingpong -c survives a MAC change of the gateway's interface in mid-run (the router
// announces it, as a router does when its address moves: gratuitous ARP / unsolicited neighbour
// advertisement); on the afxdp port the device's resolver follows it (neighbour_changes).
// Needs root; skips otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/core.h>

#include <array>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"

namespace xroce::e2e {
namespace {

using Param = PortFamily;

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  return port_family_name(info.param);
}

int instance = 0;

// Namespaces xre2e-rt{a,r,b}-<pid>-<n>. a (xr0: 198.18.S.2/24, 2001:2:0:S::2/64) and b (xr0:
// 198.19.S.2/24, 2001:2:0:1S::2/64, S in hex) route everything through r (ra: .1 / ::1 on a's
// side, rb: .1 / ::1 on b's side), which forwards. A device xra on a's xr0, xrb on b's.
// Everything is removed by name when the object goes away.
class Routed {
 public:
  Routed(int subnet, const std::string& port) : subnet_(subnet) {
    const std::string tag = fmt::format("{}-{}", getpid(), instance++);
    ns_ = {"xre2e-rta-" + tag, "xre2e-rtr-" + tag, "xre2e-rtb-" + tag};
    for (const auto& ns : ns_)
      ok_ &= run({"ip", "netns", "add", ns}).status == 0;
    ok_ &= run({"ip", "link", "add", "ra", "netns", ns_[1], "type", "veth", "peer", "name", "xr0",
                "netns", ns_[0]})
               .status == 0;
    ok_ &= run({"ip", "link", "add", "rb", "netns", ns_[1], "type", "veth", "peer", "name", "xr0",
                "netns", ns_[2]})
               .status == 0;
    ok_ &= sh(1,
              "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 "
              "net.ipv4.conf.all.arp_notify=1 net.ipv6.conf.all.ndisc_notify=1");
    for (int side = 0; side < 2; ++side) {
      const std::string rif = side == 0 ? "ra" : "rb";
      const int host = side == 0 ? 0 : 2;
      ok_ &= sh(1, fmt::format("ip addr add {}/24 dev {} && ip addr add {}/64 dev {} nodad && "
                               "ip link set {} up",
                               gateway_v4(side), rif, gateway_v6(side), rif, rif));
      ok_ &= sh(host, fmt::format("ip link set lo up && ip addr add {}/24 dev xr0 && "
                                  "ip addr add {}/64 dev xr0 nodad && ip link set xr0 up && "
                                  "ip route add default via {} && "
                                  "ip -6 route add default via {}",
                                  v4(side), v6(side), gateway_v4(side), gateway_v6(side)));
    }
    for (int side = 0; side < 2; ++side) {
      const int host = side == 0 ? 0 : 2;
      added_[side] = exec(host, {xroce_bin(), "link", "add", dev(side), "netdev", "xr0", "port",
                                 port, "queues", "1"})
                         .status == 0;
    }
  }
  ~Routed() {
    for (int side = 0; side < 2; ++side)
      if (added_[side]) exec(side == 0 ? 0 : 2, {xroce_bin(), "link", "del", dev(side)});
    for (const auto& ns : ns_)
      run({"ip", "netns", "del", ns});
  }
  Routed(const Routed&) = delete;
  Routed& operator=(const Routed&) = delete;

  // Both devices ACTIVE, and each host reaches the other through the router.
  bool ready() const {
    if (!ok_ || !added_[0] || !added_[1]) return false;
    return eventually(
        [&] {
          for (int host : {0, 2}) {
            const RunResult r = exec(host, {xroce_bin(), "link", "show"});
            if (r.output.find("state ACTIVE") == std::string::npos) return false;
          }
          // No address still in duplicate address detection: a router whose link-local
          // address is tentative cannot send a neighbour solicitation (ndisc_send_ns needs a
          // non-tentative source), so after a MAC change flushed its table it could not resolve
          // a host again until DAD ended, 1-2 s after link up, longer than a QP's retries.
          for (int ns : {0, 1, 2}) {
            if (!exec(ns, {"ip", "-6", "addr", "show", "tentative"}).output.empty()) return false;
          }
          return exec(0, {"ping", "-c", "1", "-W", "1", v4(1)}).status == 0 &&
                 exec(0, {"ping", "-6", "-c", "1", "-W", "1", v6(1)}).status == 0;
        },
        seconds(20));
  }
  // Side 0 is a, side 1 is b.
  std::string v4(int side) const { return fmt::format("198.{}.{}.2", 18 + side, subnet_); }
  std::string v6(int side) const { return fmt::format("2001:2:0:{:x}::2", subnet_ + side * 0x100); }
  std::string gateway_v4(int side) const { return fmt::format("198.{}.{}.1", 18 + side, subnet_); }
  std::string gateway_v6(int side) const {
    return fmt::format("2001:2:0:{:x}::1", subnet_ + side * 0x100);
  }
  std::string dev(int side) const { return side == 0 ? "xra" : "xrb"; }
  const std::string& netns(int side) const { return ns_[side == 0 ? 0 : 2]; }
  // Namespace 0 is a, 1 the router, 2 b.
  RunResult exec(int ns, std::vector<std::string> argv, milliseconds deadline = seconds(30)) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns_[ns]});
    return run(argv, deadline);
  }
  bool sh(int ns, const std::string& command) const {
    const RunResult r = exec(ns, {"sh", "-c", command});
    if (r.status != 0) ADD_FAILURE() << command << ": " << r.output;
    return r.status == 0;
  }
  std::vector<std::string> app(int side, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", netns(side), xroce_bin(), "exec", "--"});
    return argv;
  }
  long long counter(int side, const std::string& name) const {
    return stat_counter(exec(side == 0 ? 0 : 2, {xroce_bin(), "stat", dev(side)}).output, name);
  }

 private:
  int subnet_;
  std::array<std::string, 3> ns_;
  bool ok_ = true;
  bool added_[2] = {false, false};
};

class RoutedTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, device nodes)";
    if (!have("ip") || !have("ss") || !have("ibv_rc_pingpong")) {
      GTEST_SKIP() << "needs iproute2 and ibverbs-utils";
    }
    static int subnet = 150 + static_cast<int>(getpid() % 40) * 2;
    net_ = std::make_unique<Routed>(subnet++ % 250 + 1, GetParam().port);
    ASSERT_TRUE(net_->ready());
    for (int side = 0; side < 2; ++side) {
      const std::string gid = GetParam().v6 ? net_->v6(side) : "::ffff:" + net_->v4(side);
      gid_[side] = gid_index(net_->netns(side), net_->dev(side), gid);
      ASSERT_GE(gid_[side], 0) << net_->dev(side) << " has no GID " << gid;
    }
  }
  // `argv` with the side's device and GID index (`gid_flag`: -g for the pingpongs, -x for
  // perftest) after the program name.
  std::vector<std::string> on(int side, std::vector<std::string> argv,
                              const std::string& gid_flag = "-g") const {
    argv.insert(argv.begin() + 1, {"-d", net_->dev(side), gid_flag, std::to_string(gid_[side])});
    return argv;
  }
  // Server on a, client on b connecting to a's address through the router.
  std::pair<RunResult, RunResult> server_client(const std::vector<std::string>& server,
                                                std::vector<std::string> client) {
    client.push_back(net_->v4(0));
    return run_server_client(
        net_->app(0, server),
        [&] {
          const RunResult r = net_->exec(0, {"ss", "-ltnH", "sport", "= :18515"});
          return r.output.find("18515") != std::string::npos;
        },
        net_->app(1, client));
  }
  static void expect_pass(const std::pair<RunResult, RunResult>& r, const std::string& what,
                          const std::string& marker) {
    EXPECT_EQ(r.first.status, 0) << what << " server:\n" << r.first.output;
    EXPECT_EQ(r.second.status, 0) << what << " client:\n" << r.second.output;
    EXPECT_NE(r.second.output.find(marker), std::string::npos) << what << "\n" << r.second.output;
    for (const auto* out : {&r.first.output, &r.second.output})
      EXPECT_EQ(out->find("invalid data"), std::string::npos) << what << "\n" << *out;
  }

  std::unique_ptr<Routed> net_;
  int gid_[2] = {-1, -1};
};

TEST_P(RoutedTest, PingpongsAndWriteBandwidthThroughTheGateway) {
  const std::vector<std::string> rc = {"ibv_rc_pingpong", "-c", "-e", "-n", "100", "-s", "4096"};
  expect_pass(server_client(on(0, rc), on(1, rc)), "rc", "iters in");
  const std::vector<std::string> ud = {"ibv_ud_pingpong", "-c", "-e", "-n", "100"};
  expect_pass(server_client(on(0, ud), on(1, ud)), "ud", "iters in");
  if (have("ib_write_bw")) {
    const std::vector<std::string> bw = {"ib_write_bw", "-F", "-s", "65536", "-n", "200"};
    expect_pass(server_client(on(0, bw, "-x"), on(1, bw, "-x")), "ib_write_bw", "65536      200");
  }
  for (int side = 0; side < 2; ++side) {
    EXPECT_GT(net_->counter(side, "rcvd_pkts"), 400) << side;
    EXPECT_EQ(net_->counter(side, "loopback_pkts"), 0) << side;  // all through the router
  }
  if (GetParam().port == "afxdp") {
    // The resolver found the gateway: no frame waited in vain.
    EXPECT_EQ(net_->counter(0, "neighbour_failures"), 0);
    EXPECT_EQ(net_->counter(1, "neighbour_failures"), 0);
  }
}

// rdma_cm through the gateway: the route to a's address leads through r, the CM's MADs and
// rping's data go to the gateway's MAC, on both families.
TEST_P(RoutedTest, RpingThroughTheGateway) {
  if (!have("rping")) GTEST_SKIP() << "needs rdmacm-utils";
  const std::string address = GetParam().v6 ? net_->v6(0) : net_->v4(0);
  Child server(net_->app(0, {"rping", "-s", "-V", "-C", "100", "-a", address, "-p", "7180"}));
  ASSERT_TRUE(eventually(
      [&] {
        return cm_listener(
            net_->exec(0, {xroce_bin(), "cm", "show", net_->dev(0), "--json"}).output,
            server.pid());
      },
      seconds(20)));
  const RunResult client =
      run(net_->app(1, {"rping", "-c", "-V", "-v", "-C", "100", "-a", address, "-p", "7180"}),
          seconds(60));
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_NE(client.output.find("rdma-ping-99: "), std::string::npos) << client.output;
  EXPECT_EQ(client.output.find("mismatch"), std::string::npos) << client.output;
  EXPECT_EQ(server.wait(seconds(20)), 0);
  for (int side = 0; side < 2; ++side)
    EXPECT_EQ(net_->counter(side, "loopback_pkts"), 0) << side;  // all through the router
}

TEST_P(RoutedTest, AGatewayMacChangeInMidRunIsFollowed) {
  // Long enough that the change lands mid-run on a loaded host: 5,000 iterations took well under
  // a second and once ended before the test's own `ip link set` had run.
  const std::vector<std::string> rc = {"ibv_rc_pingpong", "-c", "-e", "-n", "40000", "-s", "4096"};
  auto server_argv = net_->app(0, on(0, rc));
  Child server(server_argv);
  ASSERT_TRUE(eventually(
      [&] {
        const RunResult r = net_->exec(0, {"ss", "-ltnH", "sport", "= :18515"});
        return r.output.find("18515") != std::string::npos;
      },
      seconds(10)));
  auto client_argv = on(1, rc);
  client_argv.push_back(net_->v4(0));
  Child client(net_->app(1, client_argv));
  // Mid-run: a few thousand iterations done.
  ASSERT_TRUE(eventually([&] { return net_->counter(0, "rcvd_pkts") > 3000; }, seconds(60)));
  const long long changes_before = net_->counter(0, "neighbour_changes");
  // Both of the router's interfaces get new MACs: each device's gateway moves.
  ASSERT_TRUE(net_->sh(1,
                       "ip link set ra address 02:00:5e:00:53:a1 && "
                       "ip link set rb address 02:00:5e:00:53:b1"));
  const long long at_change = net_->counter(0, "rcvd_pkts");
  std::string out;
  for (std::string line = client.read_line(seconds(120)); !line.empty();
       line = client.read_line(seconds(120)))
    out += line + "\n";
  const int client_status = client.wait(seconds(10));
  std::string state;  // what each namespace's neighbour table and device said, for a failure
  if (client_status != 0) {
    for (int ns : {0, 1, 2}) {
      state += fmt::format("namespace {}: {}", ns, net_->exec(ns, {"ip", "neigh", "show"}).output);
      state += net_->exec(ns, {"ip", "-6", "neigh", "show"}).output;
    }
    for (int side = 0; side < 2; ++side) {
      for (const char* c : {"neighbour_changes", "neighbour_failures", "rcvd_pkts", "sent_pkts"})
        state += fmt::format("{} {} {}\n", net_->dev(side), c, net_->counter(side, c));
    }
  }
  EXPECT_EQ(client_status, 0) << out << state;
  EXPECT_EQ(server.wait(seconds(30)), 0);
  EXPECT_NE(out.find("40000 iters in"), std::string::npos) << out;
  EXPECT_EQ(out.find("invalid data"), std::string::npos) << out;
  // Traffic went on after the change, to the new MAC (the old one no longer exists).
  EXPECT_GT(net_->counter(0, "rcvd_pkts"), at_change + 1000);
  if (GetParam().port == "afxdp") {
    for (int side = 0; side < 2; ++side) {
      EXPECT_GT(net_->counter(side, "neighbour_changes"), side == 0 ? changes_before : 0)
          << net_->dev(side) << ": the resolver did not follow the gateway";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ports, RoutedTest,
                         ::testing::Values(Param{"afxdp", false}, Param{"afxdp", true},
                                           Param{"udp", false}, Param{"udp", true}),
                         name_of);

}  // namespace
}  // namespace xroce::e2e
