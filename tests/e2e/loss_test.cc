// RC through a link that loses 2 % of the RoCE frames at random (xroce-switch --loss 0.02 between
// two namespaces), on both port kinds: ib_write_bw and ib_read_bw with 64 KiB messages complete
// on both sides with no retry-exceeded, and the switch did drop frames; and rping -V, whose
// client checks every byte of each ping after it went both ways by RDMA (the server READs the
// client's buffer, then WRITEs it back into another), with 64 KiB buffers. Completion and data,
// not speed (bench/README.md has the rates); perftest checks no data. Needs root, perftest and
// rdmacm-utils.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <regex>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"
#include "switched_peers.h"

namespace xroce::e2e {
namespace {

int next_subnet() {
  static int subnet = 110 + static_cast<int>(getpid() % 40);
  return subnet++ % 250 + 1;
}

// The RoCE frames the switch's loss dropped, both directions together.
long long dropped_by_loss(const nlohmann::json& stats) {
  long long n = 0;
  for (const auto& p : stats["ports"])
    n += p.value("dropped_impair", 0LL);
  return n;
}

class LossE2e : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, XDP)";
    if (!have("ib_write_bw") || !have("ib_read_bw")) GTEST_SKIP() << "needs perftest";
    peers_ = std::make_unique<SwitchedPeers>(
        next_subnet(), std::vector<std::string>{"--loss", "0.02", "--seed", "19"}, 1500, 1500,
        GetParam());
    ASSERT_TRUE(peers_->ready());
  }

  // A perftest server on side 0 and its client on side 1; both must exit 0 with a result row.
  void bandwidth(const std::string& program) {
    SCOPED_TRACE(program);
    const std::vector<std::string> args = {"-s", "65536", "-n", "300", "-x", "0"};
    std::vector<std::string> server = {program, "-d", peers_->dev(0)};
    std::vector<std::string> client = {program, "-d", peers_->dev(1)};
    server.insert(server.end(), args.begin(), args.end());
    client.insert(client.end(), args.begin(), args.end());
    client.push_back(peers_->ip(0));
    auto s =
        std::async(std::launch::async, [&] { return run(peers_->app(0, server), seconds(240)); });
    ASSERT_TRUE(eventually(
        [&] {
          return !peers_->exec(0, {"ss", "-Hltn", "sport", "=", ":18515"}).output.empty();
        },
        seconds(20)));
    const RunResult c = run(peers_->app(1, client), seconds(240));
    const RunResult sv = s.get();
    EXPECT_EQ(sv.status, 0) << sv.output;
    EXPECT_EQ(c.status, 0) << c.output;
    EXPECT_EQ(bandwidth_rows(c.output), 1) << c.output;
    EXPECT_EQ(c.output.find("RETRY_EXC"), std::string::npos) << c.output;
  }

  nlohmann::json device_counters(int side) {
    const RunResult r = peers_->exec(side, {xroce_bin(), "stat", peers_->dev(side), "--json"});
    const auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_object() ? j.value("counters", nlohmann::json::object()) : nlohmann::json::object();
  }
  bool listening(pid_t pid) {
    return cm_listener(
        peers_->exec(0, {xroce_bin(), "cm", "show", peers_->dev(0), "--json"}).output, pid);
  }

  std::unique_ptr<SwitchedPeers> peers_;
};

TEST_P(LossE2e, WriteAndReadBandwidthComplete) {
  bandwidth("ib_write_bw");
  bandwidth("ib_read_bw");
  EXPECT_GT(dropped_by_loss(peers_->switch_stats()), 0) << "the link lost nothing";
}

// rping -V: per ping the client fills its buffer with "rdma-ping-N: " and a rotating pattern,
// the server RDMA READs it and RDMA WRITEs what it read into the client's second buffer, and the
// client compares the two byte for byte (a mismatch ends it with an error). 64 KiB - 1 bytes
// (rping's largest), 64 packets each way at this link's 1024-byte path MTU.
TEST_P(LossE2e, RpingReadsAndWritesEveryByteIntact) {
  if (!have("rping")) GTEST_SKIP() << "needs rdmacm-utils";
  constexpr long long kPings = 200;
  constexpr long long kBytes = 65535;
  const long long dropped_before = dropped_by_loss(peers_->switch_stats());
  const long long sent_before = device_counters(0).value("tx_bytes", 0LL);
  const std::string count = std::to_string(kPings), size = std::to_string(kBytes);
  Child server(peers_->app(
      0, {"rping", "-s", "-V", "-S", size, "-C", count, "-a", peers_->ip(0), "-p", "7175"}));
  ASSERT_TRUE(eventually([&] { return listening(server.pid()); }, seconds(20)));
  const RunResult c = run(peers_->app(1, {"rping", "-c", "-V", "-S", size, "-C", count, "-a",
                                          peers_->ip(0), "-p", "7175"}),
                          seconds(300));
  std::string server_output;
  for (std::string line = server.read_line(seconds(30)); !line.empty();
       line = server.read_line(seconds(30)))
    server_output += line + "\n";
  EXPECT_EQ(server.wait(seconds(20)), 0) << server_output;
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_EQ(c.output.find("mismatch"), std::string::npos) << c.output;
  // Every ping's READ request and WRITE left the server (its buffer's worth each way at least),
  // and the link lost frames meanwhile.
  EXPECT_GE(device_counters(0).value("tx_bytes", 0LL) - sent_before, kPings * kBytes);
  // Tens of thousands of frames crossed the switch: at 2 % several hundred were dropped.
  const long long dropped = dropped_by_loss(peers_->switch_stats()) - dropped_before;
  std::printf("rping: %lld frames dropped by the switch\n", dropped);
  EXPECT_GT(dropped, 100) << "the link lost too little to test the repair";
}

std::string port_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}
INSTANTIATE_TEST_SUITE_P(Ports, LossE2e, ::testing::Values("udp", "afxdp"), port_name);

}  // namespace
}  // namespace xroce::e2e
