// `xroce validate` against a peer running `xroce validate --serve` (needs root): a healthy peer
// across a veth passes every check (exit 0, JSON report, SVG); a peer behind xroce-switch
// --bleach-ecn fails the ecn check, and one behind a hop with a smaller MTU fails path_mtu,
// each failure named with its reason in the report and the exit status 1.
#include <gtest/gtest.h>
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
#include "switched_peers.h"

namespace xroce::e2e {
namespace {

constexpr const char* kServePort = "18600";

int next_subnet() {
  static int subnet = 60 + static_cast<int>(getpid() % 50);
  return subnet++ % 250 + 1;
}

std::string tmp_path(const std::string& what) {
  return "/tmp/xrops-" + std::to_string(getpid()) + "-" + what;
}

struct Outcome {
  RunResult run;
  nlohmann::json report;
};

// `xroce validate --serve` on side 1 for as long as the validation from side 0 runs.
template <typename Peers>
Outcome validate(const Peers& peers, const std::vector<std::string>& extra) {
  Child serve(peers.in(1, {xroce_bin(), "validate", "--serve", "--serve-port", kServePort}));
  Outcome out;
  if (serve.read_line(seconds(10)).find("serving") == std::string::npos) return out;
  const std::string json = tmp_path("validate.json");
  const std::string svg = tmp_path("validate.svg");
  std::vector<std::string> argv = {xroce_bin(), "validate", peers.ip(1), "--serve-port",
                                   kServePort,  "--json",   json,        "--svg",
                                   svg,         "--quick"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  out.run = peers.exec(0, argv, seconds(400));
  out.report = nlohmann::json::parse(slurp_file(json), nullptr, false);
  const std::string chart = slurp_file(svg);
  if (out.report.is_object()) out.report["svg"] = chart;
  std::filesystem::remove(json);
  std::filesystem::remove(svg);
  kill(serve.pid(), SIGTERM);
  serve.wait(seconds(10));
  return out;
}

std::string check_result(const nlohmann::json& report, const std::string& name) {
  for (const auto& c : report["checks"])
    if (c["name"] == name)
      return c["result"].get<std::string>() + ": " + c["detail"].get<std::string>();
  return "absent";
}

class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    if (!have("ib_write_bw") || !have("ibv_rc_pingpong")) GTEST_SKIP() << "needs perftest";
  }
};

// A Pair's two sides with the interface validate needs.
struct PairPeers {
  Pair& pair;
  std::string ip(int side) const { return pair.ip(side); }
  RunResult exec(int side, std::vector<std::string> argv, milliseconds d) const {
    return pair.exec(side, std::move(argv), d);
  }
  std::vector<std::string> in(int side, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", netns(side)});
    return argv;
  }
  std::string netns(int side) const {
    const std::string out = pair.exec(side, {"ip", "netns", "identify"}).output;
    return out.substr(0, out.find('\n'));
  }
};

// The same pair named by its IPv6 addresses: the path checks and the QPs over the IPv6 GIDs,
// the test programs' own TCP exchange (IPv4 only in Debian's ibv_rc_pingpong and perftest) to
// the peer device's IPv4 address.
struct PairPeers6 : PairPeers {
  std::string ip(int side) const { return pair.ip6(side); }
};

TEST_F(ValidateTest, AnIpv6PeerPassesThePathAndDataChecks) {
  Pair pair("xrops-val6", next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  const auto v = validate(PairPeers6{{pair}}, {"--skip-perftest"});
  EXPECT_EQ(v.run.status, 0) << v.run.output;
  ASSERT_TRUE(v.report.is_object()) << v.run.output;
  EXPECT_EQ(v.report["passed"], true) << v.report.dump(1);
  for (const auto& c : v.report["checks"])
    EXPECT_EQ(c["result"], "pass") << c.dump();
  EXPECT_NE(check_result(v.report, "data").find("buffers checked"), std::string::npos);
  const int peer_gid = gid_index(pair.netns(1), pair.dev(1), pair.ip6(1));
  EXPECT_EQ(v.report["peer_device"].value("gid", ""),
            pair.ip6(1) + " [" + std::to_string(peer_gid) + "]")
      << v.report.dump(1);
}

TEST_F(ValidateTest, AHealthyPeerPassesEveryCheck) {
  Pair pair("xrops-val", next_subnet(), "afxdp");
  ASSERT_TRUE(pair.ready());
  const auto v = validate(PairPeers{pair}, {});
  EXPECT_EQ(v.run.status, 0) << v.run.output;
  ASSERT_TRUE(v.report.is_object()) << v.run.output;
  EXPECT_EQ(v.report["passed"], true) << v.report.dump(1);
  std::vector<std::string> names;
  for (const auto& c : v.report["checks"]) {
    names.push_back(c["name"]);
    EXPECT_EQ(c["result"], "pass") << c.dump();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"peer", "gid", "port", "mtu", "path_mtu", "ecn",
                                             "data", "perftest"}));
  EXPECT_EQ(v.report["roce_mtu"], 1024);  // veths at 1500 bytes
  ASSERT_EQ(v.report["perftest"].size(), 10u);
  for (const auto& p : v.report["perftest"]) {
    EXPECT_EQ(p["ok"], true) << p.dump();
    const bool latency = p["test"].get<std::string>().ends_with("_lat");
    EXPECT_GT(latency ? p.value("t_typical_us", 0.0) : p.value("bw_avg_gbps", 0.0), 0.0)
        << p.dump();
  }
  EXPECT_NE(v.run.output.find("PASSED"), std::string::npos) << v.run.output;
  const std::string svg = v.report.value("svg", "");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("atomic_cs_lat"), std::string::npos);
}

TEST_F(ValidateTest, APeerBehindASwitchThatBleachesEcnFailsTheEcnCheck) {
  SwitchedPeers peers(next_subnet(), {"--bleach-ecn"}, 1500, 1500);
  ASSERT_TRUE(peers.ready());
  const auto v = validate(peers, {"--skip-perftest"});
  EXPECT_EQ(v.run.status, 1) << v.run.output;
  ASSERT_TRUE(v.report.is_object()) << v.run.output;
  EXPECT_EQ(v.report["passed"], false);
  const std::string ecn = check_result(v.report, "ecn");
  EXPECT_EQ(ecn.rfind("FAIL", 0), 0u) << ecn;
  EXPECT_NE(ecn.find("ECT(0) sent to the peer arrived as Not-ECT"), std::string::npos) << ecn;
  EXPECT_NE(ecn.find("ECT(0) sent by the peer arrived as Not-ECT"), std::string::npos) << ecn;
  EXPECT_NE(ecn.find("CE sent to the peer arrived as Not-ECT"), std::string::npos) << ecn;
  // Everything else works through that switch.
  for (const char* other : {"gid", "port", "mtu", "path_mtu", "data"})
    EXPECT_EQ(check_result(v.report, other).rfind("pass", 0), 0u) << check_result(v.report, other);
  EXPECT_NE(v.run.output.find("xroce validate: ecn failed: "), std::string::npos) << v.run.output;
  const auto stats = peers.switch_stats();
  std::uint64_t bleached = 0;
  for (const auto& p : stats["ports"])
    bleached += p.value("bleached", std::uint64_t{0});
  EXPECT_GT(bleached, 0u) << stats.dump();
}

TEST_F(ValidateTest, APeerBehindASmallerMtuHopFailsThePathMtuCheck) {
  // Both ends run 9000-byte netdevs (RoCE MTU 4096); the switch's port toward b carries 1500.
  SwitchedPeers peers(next_subnet(), {}, 9000, 1500);
  ASSERT_TRUE(peers.ready());
  const auto v = validate(peers, {});
  EXPECT_EQ(v.run.status, 1) << v.run.output;
  ASSERT_TRUE(v.report.is_object()) << v.run.output;
  EXPECT_EQ(v.report["roce_mtu"], 4096);
  const std::string path = check_result(v.report, "path_mtu");
  EXPECT_EQ(path.rfind("FAIL", 0), 0u) << path;
  EXPECT_NE(path.find("4160-byte packets"), std::string::npos) << path;
  EXPECT_NE(path.find("the largest that does is 1500 bytes (RoCE MTU 1024 would fit)"),
            std::string::npos)
      << path;
  EXPECT_EQ(check_result(v.report, "ecn").rfind("pass", 0), 0u) << check_result(v.report, "ecn");
  EXPECT_EQ(check_result(v.report, "data").rfind("skip", 0), 0u);
  EXPECT_EQ(check_result(v.report, "perftest").rfind("skip", 0), 0u);
  EXPECT_NE(v.run.output.find("xroce validate: path_mtu failed: "), std::string::npos)
      << v.run.output;
  // With the MTU the report suggests, the same path passes.
  const auto again = validate(peers, {"--mtu", "1024", "--skip-perftest"});
  EXPECT_EQ(again.run.status, 0) << again.run.output;
}

}  // namespace
}  // namespace xroce::e2e
