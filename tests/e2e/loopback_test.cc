// Loopback inside the daemon with unmodified Debian programs, in one namespace: client and
// server on ONE device (ibv_rc/ud/srq_pingpong -c; perftest ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw), and two xroce devices on two netdevs of the namespace talking to
// each other; both port kinds, IPv4 and IPv6 GIDs. A capture on every interface of the
// namespace (the veth peers, where anything the devices' netdevs sent would arrive, and lo,
// where the kernel would loop a local datagram) proves that no RoCE frame left the daemon,
// while the device counters show every packet sent (sent_pkts, loopback_pkts) and received
// (rcvd_pkts). Needs root; skips otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/core.h>

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

// Every RoCE frame and ARP request on every interface of a namespace, from construction until
// count() (tcpdump -i any).
class Capture {
 public:
  explicit Capture(const Host& host)
      : file_(fmt::format("/tmp/xre2e-lo-{}-{}.pcap", getpid(), counter_++)),
        tcpdump_(host.in_netns({"tcpdump", "-i", "any", "-U", "-n", "-w", file_, "udp", "port",
                                "4791", "or", "arp"})) {
    for (int i = 0; i < 5 && !listening_; ++i)
      listening_ = tcpdump_.read_line(seconds(10)).find("listening on") != std::string::npos;
  }
  ~Capture() { ::unlink(file_.c_str()); }
  bool listening() const { return listening_; }
  // Stops the capture; the frames it holds that match `filter`.
  int count(const std::string& filter) {
    tcpdump_.wait(milliseconds(0));  // -U wrote every frame as it came
    const RunResult r =
        run({"sh", "-c", "tcpdump -n -r " + file_ + " '" + filter + "' 2>/dev/null | wc -l"});
    return r.status == 0 ? std::stoi(r.output) : -1;
  }

 private:
  static inline int counter_ = 0;
  std::string file_;
  Child tcpdump_;
  bool listening_ = false;
};

class LoopbackTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, device nodes)";
    if (!have("ip") || !have("ss") || !have("ibv_rc_pingpong") || !have("tcpdump")) {
      GTEST_SKIP() << "needs iproute2, ibverbs-utils and tcpdump";
    }
    static int subnet = 100 + static_cast<int>(getpid() % 50) * 2;
    subnet_ = subnet++ % 250 + 1;
    host_ = std::make_unique<Host>("xre2e-lo", subnet_);
  }
  const Param& param() const { return GetParam(); }

  // Adds device `dev` on `netdev` with the test's port kind; waits until it is ACTIVE.
  void add_device(const std::string& dev, const std::string& netdev) {
    const RunResult r = host_->add_device(dev, param().port, netdev);
    ASSERT_EQ(r.status, 0) << r.output;
    ASSERT_TRUE(eventually(
        [&] {
          const RunResult show = host_->exec({xroce_bin(), "link", "show", dev});
          return show.output.find("state ACTIVE") != std::string::npos;
        },
        seconds(10)));
  }
  // The GID index of `dev` for the test's family, for an interface holding `v4` and `v6`.
  int gid(const std::string& dev, const std::string& v4, const std::string& v6) {
    const int index = gid_index(host_->netns(), dev, param().v6 ? v6 : "::ffff:" + v4);
    EXPECT_GE(index, 0) << dev << " has no GID for " << (param().v6 ? v6 : v4);
    return index;
  }
  std::vector<std::string> app(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {xroce_bin(), "exec", "--"});
    return host_->in_netns(argv);
  }
  // Server and client in the namespace; the client connects over TCP to the host's address.
  std::pair<RunResult, RunResult> server_client(const std::vector<std::string>& server,
                                                std::vector<std::string> client) {
    client.push_back(host_->ipv4());
    return run_server_client(
        app(server),
        [&] {
          const RunResult r = host_->exec({"ss", "-ltnH", "sport", "= :18515"});
          return r.output.find("18515") != std::string::npos;
        },
        app(client));
  }
  void expect_pass(const std::pair<RunResult, RunResult>& r, const std::string& what,
                   const std::string& marker) {
    EXPECT_EQ(r.first.status, 0) << what << " server:\n" << r.first.output;
    EXPECT_EQ(r.second.status, 0) << what << " client:\n" << r.second.output;
    EXPECT_NE(r.second.output.find(marker), std::string::npos) << what << "\n" << r.second.output;
    for (const auto* out : {&r.first.output, &r.second.output})
      EXPECT_EQ(out->find("invalid data"), std::string::npos) << what << "\n" << *out;
  }
  long long counter(const std::string& dev, const std::string& name) const {
    return stat_counter(host_->exec({xroce_bin(), "stat", dev}).output, name);
  }
  // Every packet the devices sent was looped back and taken in: summed over `devs`,
  // loopback_pkts == sent_pkts == rcvd_pkts + rx_unknown_qp (the last ACKs of a program may
  // find its peer's QP already destroyed, as on a wire), and they moved by at least
  // `at_least`. Waits for the last packets to be counted.
  void expect_all_looped_back(const std::vector<std::string>& devs, long long at_least) {
    long long sent = 0, taken = 0, looped = 0;
    std::string stats;
    const bool balanced = eventually(
        [&] {
          sent = taken = looped = 0;
          stats.clear();
          for (const auto& dev : devs) {
            const std::string out = host_->exec({xroce_bin(), "stat", dev}).output;
            stats += out;
            sent += stat_counter(out, "sent_pkts");
            taken += stat_counter(out, "rcvd_pkts") + stat_counter(out, "rx_unknown_qp");
            looped += stat_counter(out, "loopback_pkts");
          }
          return sent == taken && sent == looped;
        },
        seconds(10));
    EXPECT_TRUE(balanced) << stats;
    EXPECT_GE(sent, at_least) << stats;
  }
  // Nothing RoCE on any interface of the namespace, while the capture did see the ARP requests
  // a ping to `absent_neighbour` (an unused address of a device's subnet) sends.
  void expect_nothing_on_the_wire(Capture& capture, const std::string& absent_neighbour) {
    host_->exec({"ping", "-c", "1", "-W", "1", absent_neighbour});
    EXPECT_EQ(capture.count("udp port 4791"), 0);
    EXPECT_GT(capture.count("arp"), 0) << "the capture saw nothing at all";
  }

  int subnet_ = 0;
  std::unique_ptr<Host> host_;
};

TEST_P(LoopbackTest, PingpongsOnOneDevice) {
  add_device("xlo", "xr0a");
  const int g = gid("xlo", host_->ipv4(), host_->ipv6());
  ASSERT_GE(g, 0);
  Capture capture(*host_);
  ASSERT_TRUE(capture.listening());
  const std::string gs = std::to_string(g);
  for (const auto& [program, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"ibv_rc_pingpong", {"-s", "4097"}},
           {"ibv_ud_pingpong", {}},
           {"ibv_srq_pingpong", {"-s", "4097"}}}) {
    std::vector<std::string> argv = {program, "-d", "xlo", "-g", gs, "-c", "-e", "-n", "200"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    expect_pass(server_client(argv, argv), program, "iters in");
  }
  // 200 iterations each way, three programs: at least 1200 packets.
  expect_all_looped_back({"xlo"}, 1200);
  EXPECT_EQ(counter("xlo", "neighbour_failures"), 0);
  expect_nothing_on_the_wire(capture, fmt::format("198.18.{}.77", subnet_));
}

TEST_P(LoopbackTest, PerftestOnOneDevice) {
  if (!have("ib_write_bw")) GTEST_SKIP() << "needs perftest";
  add_device("xlo", "xr0a");
  const int g = gid("xlo", host_->ipv4(), host_->ipv6());
  ASSERT_GE(g, 0);
  Capture capture(*host_);
  ASSERT_TRUE(capture.listening());
  for (const std::string program : {"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"}) {
    const std::vector<std::string> argv = {program,           "-d", "xlo", "-x",
                                           std::to_string(g), "-F", "-n",  "200"};
    expect_pass(server_client(argv, argv), program, "#bytes");
  }
  expect_all_looped_back({"xlo"}, 800);
  expect_nothing_on_the_wire(capture, fmt::format("198.18.{}.77", subnet_));
}

TEST_P(LoopbackTest, TwoDevicesOnTwoNetdevs) {
  // A second veth pair in the same namespace, its own subnet.
  const std::string v4b = fmt::format("198.19.{}.1", subnet_);
  const std::string v6b = fmt::format("2001:2:0:{:x}::1", subnet_);
  for (const auto& argv : std::vector<std::vector<std::string>>{
           {"ip", "link", "add", "xr1a", "type", "veth", "peer", "name", "xr1b"},
           {"ip", "addr", "add", v4b + "/24", "dev", "xr1a"},
           {"ip", "addr", "add", v6b + "/64", "dev", "xr1a", "nodad"},
           {"ip", "link", "set", "xr1a", "up"},
           {"ip", "link", "set", "xr1b", "up"}}) {
    const RunResult r = host_->exec(argv);
    ASSERT_EQ(r.status, 0) << r.output;
  }
  add_device("xla", "xr0a");
  add_device("xlb", "xr1a");
  const int ga = gid("xla", host_->ipv4(), host_->ipv6());
  const int gb = gid("xlb", v4b, v6b);
  ASSERT_GE(ga, 0);
  ASSERT_GE(gb, 0);
  Capture capture(*host_);
  ASSERT_TRUE(capture.listening());
  auto on = [](std::vector<std::string> argv, const std::string& dev, int g, const char* gflag) {
    argv.insert(argv.begin() + 1, {"-d", dev, gflag, std::to_string(g)});
    return argv;
  };
  const std::vector<std::string> rc = {"ibv_rc_pingpong", "-c", "-e", "-n", "200", "-s", "8192"};
  expect_pass(server_client(on(rc, "xla", ga, "-g"), on(rc, "xlb", gb, "-g")), "rc", "iters in");
  const std::vector<std::string> ud = {"ibv_ud_pingpong", "-c", "-e", "-n", "200"};
  expect_pass(server_client(on(ud, "xla", ga, "-g"), on(ud, "xlb", gb, "-g")), "ud", "iters in");
  if (have("ib_write_bw")) {
    const std::vector<std::string> bw = {"ib_write_bw", "-F", "-n", "200"};
    expect_pass(server_client(on(bw, "xla", ga, "-x"), on(bw, "xlb", gb, "-x")), "write", "#bytes");
  }
  // Each device sent and received: the other one's packets.
  for (const std::string dev : {"xla", "xlb"}) {
    EXPECT_GT(counter(dev, "sent_pkts"), 400) << dev;
    EXPECT_GT(counter(dev, "rcvd_pkts"), 400) << dev;
  }
  expect_all_looped_back({"xla", "xlb"}, 1600);
  expect_nothing_on_the_wire(capture, fmt::format("198.19.{}.77", subnet_));
}

INSTANTIATE_TEST_SUITE_P(Ports, LoopbackTest,
                         ::testing::Values(Param{"afxdp", false}, Param{"afxdp", true},
                                           Param{"udp", false}, Param{"udp", true}),
                         name_of);

}  // namespace
}  // namespace xroce::e2e
