// Congestion control against a running xroced (needs root): `xroce cc show|set|profile`
// round trips (every ConnectX roce_rp/roce_np name with its default, changes visible, bad input
// refused with a non-zero exit and nothing changed), and ECT on the wire: the RDMA WRITEs of an
// unmodified ib_write_bw leave ECT(0) while rp_enable is on and Not-ECT once it is off, captured
// with tcpdump in the sender's namespace and decoded with tshark.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "pair.h"

namespace xroce::e2e {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

json cc_show(const Host& h, const std::string& dev) {
  const RunResult r = h.exec({xroce_bin(), "cc", "show", dev, "--json"});
  EXPECT_EQ(r.status, 0) << r.output;
  return json::parse(r.output, nullptr, false);
}

// docs/protocol.md §5.5: the ConnectX firmware defaults, under their names.
const std::map<std::string, int> kConnectxDefaults = {
    {"rpg_time_reset", 300},
    {"rpg_byte_reset", 32767},
    {"rpg_threshold", 1},
    {"rpg_max_rate", 0},
    {"rpg_ai_rate", 5},
    {"rpg_hai_rate", 50},
    {"rpg_gd", 11},
    {"rpg_min_dec_fac", 50},
    {"rpg_min_rate", 1},
    {"rate_to_set_on_first_cnp", 0},
    {"dce_tcp_g", 1019},
    {"dce_tcp_rtt", 1},
    {"rate_reduce_monitor_period", 4},
    {"initial_alpha_value", 1023},
    {"clamp_tgt_rate", 0},
    {"clamp_tgt_rate_ati", 1},
    {"min_time_between_cnps", 4},
    {"cnp_dscp", 48},
    {"cnp_802p_prio", 6},
};

class CcControl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces)";
    host_ = std::make_unique<Host>("xrcc", 171);
    const RunResult added = host_->add_device(kDev);
    ASSERT_EQ(added.status, 0) << added.output;
  }
  static constexpr const char* kDev = "xrcc0";
  std::unique_ptr<Host> host_;
};

TEST_F(CcControl, ShowListsEveryParameterWithItsConnectxDefault) {
  const json cc = cc_show(*host_, kDev);
  ASSERT_TRUE(cc.is_object());
  EXPECT_EQ(cc["device"], kDev);
  EXPECT_EQ(cc["profile"], "connectx");
  EXPECT_EQ(cc["rp_enable"], json::array({1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(cc["np_enable"], json::array({0, 0, 0, 0, 0, 0, 0, 0}));  // docs/protocol.md §6
  for (const auto& [name, value] : kConnectxDefaults)
    EXPECT_EQ(cc["params"][name], value) << name;
  for (int p = 0; p < 8; ++p) {
    EXPECT_EQ(cc["params"]["rp_enable." + std::to_string(p)], 1);
    EXPECT_EQ(cc["params"]["np_enable." + std::to_string(p)], 0);
  }
  // The text form names them too.
  const RunResult text = host_->exec({xroce_bin(), "cc", "show", kDev});
  ASSERT_EQ(text.status, 0) << text.output;
  for (const auto& [name, value] : kConnectxDefaults)
    EXPECT_NE(text.output.find(name + " " + std::to_string(value)), std::string::npos) << name;
}

TEST_F(CcControl, SetRoundTripsAndBadInputChangesNothing) {
  RunResult r = host_->exec({xroce_bin(), "cc", "set", kDev, "np_enable=1", "rp_enable.5=0",
                             "min_time_between_cnps=50", "rpg_ai_rate=40", "cnp_dscp=46"});
  ASSERT_EQ(r.status, 0) << r.output;
  json cc = cc_show(*host_, kDev);
  EXPECT_EQ(cc["np_enable"], json::array({1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(cc["rp_enable"], json::array({1, 1, 1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(cc["params"]["min_time_between_cnps"], 50);
  EXPECT_EQ(cc["params"]["rpg_ai_rate"], 40);
  EXPECT_EQ(cc["params"]["cnp_dscp"], 46);
  EXPECT_EQ(cc["profile"], "connectx+custom");
  const json before = cc;

  const std::vector<std::vector<std::string>> bad = {
      {"no_such_param=1"},              // unknown name
      {"cnp_dscp=64"},                  // out of range (0..63)
      {"rpg_threshold=0"},              // out of range (1..31)
      {"rp_enable.8=1"},                // no priority 8
      {"np_enable=2"},                  // not a bool
      {"rpg_ai_rate=fast"},             // not a number
      {"rpg_ai_rate"},                  // not NAME=VALUE
      {"rpg_ai_rate=7", "cnp_dscp=99"}  // one bad assignment: neither applies
  };
  for (const auto& args : bad) {
    std::vector<std::string> argv = {xroce_bin(), "cc", "set", kDev};
    argv.insert(argv.end(), args.begin(), args.end());
    r = host_->exec(argv);
    EXPECT_NE(r.status, 0) << args.front();
    EXPECT_NE(r.output.find("xroce cc set: "), std::string::npos) << r.output;
    EXPECT_EQ(cc_show(*host_, kDev), before) << args.front();
  }
  r = host_->exec({xroce_bin(), "cc", "set", kDev, "cnp_dscp=64"});
  EXPECT_NE(r.output.find("[0, 63]"), std::string::npos) << "says what is allowed: " << r.output;
  EXPECT_NE(host_->exec({xroce_bin(), "cc", "set", "nosuchdev", "np_enable=1"}).status, 0);
  EXPECT_NE(host_->exec({xroce_bin(), "cc", "show", "nosuchdev"}).status, 0);
}

TEST_F(CcControl, ProfileSwitchKeepsTheEnables) {
  ASSERT_EQ(host_->exec({xroce_bin(), "cc", "set", kDev, "np_enable.3=1"}).status, 0);
  RunResult r = host_->exec({xroce_bin(), "cc", "profile", kDev, "paper"});
  ASSERT_EQ(r.status, 0) << r.output;
  json cc = cc_show(*host_, kDev);
  EXPECT_EQ(cc["profile"], "paper");
  // docs/protocol.md §5.5 / engine/cc/README.md: the paper's values.
  EXPECT_EQ(cc["params"]["rpg_time_reset"], 55);
  EXPECT_EQ(cc["params"]["rpg_threshold"], 5);
  EXPECT_EQ(cc["params"]["rpg_ai_rate"], 40);
  EXPECT_EQ(cc["params"]["dce_tcp_rtt"], 55);
  EXPECT_EQ(cc["params"]["min_time_between_cnps"], 50);
  EXPECT_EQ(cc["np_enable"], json::array({0, 0, 0, 1, 0, 0, 0, 0}));

  r = host_->exec({xroce_bin(), "cc", "profile", kDev, "fast"});
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(cc_show(*host_, kDev), cc);

  ASSERT_EQ(host_->exec({xroce_bin(), "cc", "profile", kDev, "connectx"}).status, 0);
  cc = cc_show(*host_, kDev);
  EXPECT_EQ(cc["profile"], "connectx");
  for (const auto& [name, value] : kConnectxDefaults)
    EXPECT_EQ(cc["params"][name], value) << name;
}

// ---- ECT on the wire ---------------------------------------------------------------------

struct Packet {
  int ecn = -1;
  int dscp = -1;
  int opcode = -1;
  int ttl = -1;
};

// Every RoCEv2 packet in a capture: IP ECN, DSCP, BTH opcode and TTL, as tshark decodes them.
std::vector<Packet> decode_capture(const std::string& pcap) {
  const RunResult r = run({"tshark", "-r", pcap, "-d", "udp.port==4791,infiniband", "-T", "fields",
                           "-e", "ip.dsfield.ecn", "-e", "ip.dsfield.dscp", "-e",
                           "infiniband.bth.opcode", "-e", "ip.ttl", "udp.dstport==4791"},
                          60s);
  EXPECT_EQ(r.status, 0) << r.output;
  std::vector<Packet> out;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    Packet p;
    if (fields >> p.ecn >> p.dscp >> p.opcode >> p.ttl) out.push_back(p);
  }
  return out;
}

class CcWire : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces)";
    // The udp port: its frames pass the kernel's packet taps, where tcpdump sees them.
    pair_ = std::make_unique<Pair>("xrccw", 172, "udp");
    ASSERT_TRUE(pair_->ready()) << pair_->why_not();
    pcap_ = "/tmp/xroce-cc-ect-" + std::to_string(getpid()) + ".pcap";
  }
  void TearDown() override { unlink(pcap_.c_str()); }

  // ib_write_bw from namespace b (the client writes) to a, captured on b's veth. Returns the
  // RDMA WRITE packets (opcodes 6..11) seen leaving b.
  std::vector<Packet> writes_on_the_wire(const std::vector<std::string>& extra = {}) {
    unlink(pcap_.c_str());
    Child capture(pair_->in(1, {"tcpdump", "-i", pair_->netdev(1), "-U", "-n", "-w", pcap_, "udp",
                                "and", "dst", "port", "4791"}));
    bool listening = false;
    for (int i = 0; i < 5 && !listening; ++i)
      listening = capture.read_line(10s).find("listening on") != std::string::npos;
    EXPECT_TRUE(listening) << "tcpdump did not start";
    std::vector<std::string> common = {"ib_write_bw", "-x", "0", "-n", "200", "-s", "8192"};
    common.insert(common.end(), extra.begin(), extra.end());
    std::vector<std::string> server = common, client = common;
    server.insert(server.begin() + 1, {"-d", pair_->dev(0)});
    client.insert(client.begin() + 1, {"-d", pair_->dev(1)});
    auto s = std::async(std::launch::async, [&] { return pair_->verbs(0, server); });
    eventually([&] { return pair_->listening(0, 18515); }, 20s);
    client.push_back(pair_->ip(0));
    const RunResult c = pair_->verbs(1, client);
    const RunResult sr = s.get();
    EXPECT_EQ(c.status, 0) << c.output;
    EXPECT_EQ(sr.status, 0) << sr.output;
    capture.wait(0ms);  // stops tcpdump; -U wrote every packet as it came
    std::vector<Packet> writes;
    for (const Packet& p : decode_capture(pcap_))
      if (p.opcode >= 6 && p.opcode <= 11) writes.push_back(p);
    return writes;
  }

  std::unique_ptr<Pair> pair_;
  std::string pcap_;
};

TEST_F(CcWire, DataIsEct0WhileRpIsEnabledAndNotEctOnceOff) {
  std::vector<Packet> writes = writes_on_the_wire();
  ASSERT_GE(writes.size(), 200u) << "200 writes of 8 KiB are at least 200 packets";
  for (const Packet& p : writes) {
    EXPECT_EQ(p.ecn, 2) << "ECT(0)";
    EXPECT_EQ(p.dscp, 0);  // perftest's traffic class 0
    // The route's hop limit (the namespace's ip_default_ttl), not the address vector's, as the
    // kernel's verbs core sets it for RoCE v2 (rxe sends 64 too).
    EXPECT_EQ(p.ttl, 64);
  }

  // The sender's reaction point off for every priority: no ECT (cc set applies at run time).
  const RunResult off = pair_->exec(1, {xroce_bin(), "cc", "set", pair_->dev(1), "rp_enable=0"});
  ASSERT_EQ(off.status, 0) << off.output;
  writes = writes_on_the_wire();
  ASSERT_GE(writes.size(), 200u);
  for (const Packet& p : writes)
    EXPECT_EQ(p.ecn, 0) << "Not-ECT";

  // On again, only for priority 3 (DSCP 24..31): traffic class 104 = DSCP 26 gets ECT(0).
  ASSERT_EQ(pair_->exec(1, {xroce_bin(), "cc", "set", pair_->dev(1), "rp_enable.3=1"}).status, 0);
  writes = writes_on_the_wire({"--tclass=104"});
  ASSERT_GE(writes.size(), 200u);
  for (const Packet& p : writes) {
    EXPECT_EQ(p.ecn, 2) << "ECT(0)";
    EXPECT_EQ(p.dscp, 26);
  }
  // The hw_counters files follow without `xroce stat` (the daemon rewrites them every second).
  EXPECT_TRUE(eventually([&] { return pair_->hw_counter(0, "rcvd_pkts") >= 600; }, 10s))
      << pair_->hw_counter(0, "rcvd_pkts");
  // No CNPs: the notification point is off by default.
  const RunResult stat = pair_->exec(0, {xroce_bin(), "stat", pair_->dev(0), "--json"});
  ASSERT_EQ(stat.status, 0) << stat.output;
  const json counters = json::parse(stat.output)["counters"];
  EXPECT_EQ(counters["np_cnp_sent"], 0);
  EXPECT_GE(counters["rcvd_pkts"].get<std::uint64_t>(), 600u);
}

// perftest's bandwidth row: "<bytes> <iterations> <BW peak> <BW average> <MsgRate>" in MB/s
// (2^20 bytes). Returns the average, or a negative number if there is no row.
double bw_average_mib(const std::string& output) {
  static const std::regex row(R"(^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+).*$)");
  std::istringstream lines(output);
  std::string line;
  double avg = -1;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_match(line, m, row)) avg = std::stod(m[4]);
  }
  return avg;
}

// rpg_max_rate below the line rate: the sender's pacer holds ib_write_bw to it, and `qp show`
// reports the QP's rate.
TEST_F(CcWire, MaxRateCapsIbWriteBwAndQpShowReportsIt) {
  constexpr int kCapMbps = 40;
  ASSERT_EQ(pair_
                ->exec(1, {xroce_bin(), "cc", "set", pair_->dev(1),
                           "rpg_max_rate=" + std::to_string(kCapMbps)})
                .status,
            0);
  const std::vector<std::string> common = {"ib_write_bw", "-x", "0", "-s", "65536", "-D", "3"};
  std::vector<std::string> server = common, client = common;
  server.insert(server.begin() + 1, {"-d", pair_->dev(0)});
  client.insert(client.begin() + 1, {"-d", pair_->dev(1)});
  auto s = std::async(std::launch::async, [&] { return pair_->verbs(0, server); });
  eventually([&] { return pair_->listening(0, 18515); }, 20s);
  client.push_back(pair_->ip(0));
  auto c = std::async(std::launch::async, [&] { return pair_->verbs(1, client); });

  json qp;
  const bool seen = eventually(
      [&] {
        const RunResult r = pair_->exec(1, {xroce_bin(), "qp", "show", pair_->dev(1), "--json"});
        const json qps = json::parse(r.output, nullptr, false);
        if (!qps.is_array()) return false;
        for (const auto& q : qps)
          if (q.value("type", "") == "RC" && q.value("state", "") == "RTS") qp = q;
        return !qp.is_null();
      },
      20s);
  const RunResult cr = c.get();
  const RunResult sr = s.get();
  ASSERT_EQ(cr.status, 0) << cr.output;
  ASSERT_EQ(sr.status, 0) << sr.output;
  ASSERT_TRUE(seen) << "no RC QP in RTS in xroce qp show";
  EXPECT_EQ(qp["rate_mbps"], kCapMbps);
  EXPECT_EQ(qp["target_rate_mbps"], kCapMbps);
  EXPECT_EQ(qp["cc_stage"], "unlimited");  // no CNP: the cap is the ceiling, not a cut
  EXPECT_EQ(qp["cc_active"], true);
  EXPECT_TRUE(qp["alpha"].is_number());  // set by the first CNP; none came

  // The pacer counts payload + 58 bytes of headers per 1024-byte packet against the cap.
  const double cap_mib = kCapMbps * 1e6 / 8 / (1 << 20) * 1024 / (1024 + 58);
  const double avg = bw_average_mib(cr.output);
  ASSERT_GT(avg, 0) << cr.output;
  EXPECT_LE(avg, cap_mib * 1.05) << cr.output;
  // Paced, not stalled. The pacer gives no credit for a late wake-up (engine/cc/pacer.h, burst
  // 0), so on a loaded 2-core host the average falls well below the cap (measured 28-50 %); a
  // release deadline the worker missed would sleep 100 ms per packet, ~100 times lower.
  EXPECT_GE(avg, cap_mib * 0.1) << "paced, not stalled: " << cr.output;
  std::printf("ib_write_bw with rpg_max_rate=%d: %.2f MiB/s (cap %.2f MiB/s of payload)\n",
              kCapMbps, avg, cap_mib);
}

}  // namespace
}  // namespace xroce::e2e
