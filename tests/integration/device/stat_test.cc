// `xroce stat` and `xroce qp show` against live devices: two namespaces joined by veth, a device
// in each (udp port), an unmodified ibv_rc_pingpong between them, then the counters must count
// what it sent, agree with ports/1/hw_counters, and list the regions it registered.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/pair.h"

namespace xroce::device {
namespace {

using namespace std::chrono_literals;
using e2e::eventually;
using e2e::run;
using e2e::RunResult;
using e2e::xroce_bin;

constexpr int kIters = 50;

class StatPair : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, devices)";
    pair_ = std::make_unique<e2e::Pair>("xg3st", 203, "udp");
    ASSERT_TRUE(pair_->ready()) << pair_->why_not();
  }

  std::string ip(int i) const { return pair_->ip(i); }
  std::string name(int i) const { return pair_->dev(i); }
  RunResult exec(int i, std::vector<std::string> argv) const {
    return pair_->exec(i, std::move(argv), 60s);
  }
  RunResult verbs(int i, std::vector<std::string> argv) const {
    return pair_->verbs(i, std::move(argv), 60s);
  }
  nlohmann::json stat(int i) const {
    const RunResult r = exec(i, {xroce_bin(), "stat", name(i), "--json"});
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.output, nullptr, false);
  }

  std::unique_ptr<e2e::Pair> pair_;
};

TEST_F(StatPair, CountersCountAPingpongAndMatchHwCounters) {
  const auto before = stat(0);
  ASSERT_TRUE(before.is_object());
  EXPECT_EQ(before["counters"]["sent_pkts"], 0);
  const std::vector<std::string> pingpong = {"ibv_rc_pingpong",     "-g", "0", "-c", "-n",
                                             std::to_string(kIters)};
  auto server = std::async(std::launch::async, [&] {
    auto argv = pingpong;
    argv.insert(argv.end(), {"-d", name(0)});
    return verbs(0, argv);
  });
  ASSERT_TRUE(eventually(
      [&] {
        return !exec(0, {"ss", "-Hltn", "sport", "=", ":18515"}).output.empty();
      },
      20s));
  auto argv = pingpong;
  argv.insert(argv.end(), {"-d", name(1), ip(0)});
  const RunResult client = verbs(1, argv);
  const RunResult served = server.get();
  ASSERT_EQ(client.status, 0) << client.output;
  ASSERT_EQ(served.status, 0) << served.output;

  const auto after = stat(0);
  const auto& counters = after["counters"];
  // Every rxe hw_counters name is there; the pingpong's messages were sent and received.
  for (const char* n : {"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
                        "rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred",
                        "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
                        "send_err", "link_downed", "rdma_sends", "rdma_recvs"})
    EXPECT_TRUE(counters.contains(n)) << n;
  EXPECT_GE(counters["sent_pkts"].get<std::uint64_t>(), static_cast<std::uint64_t>(kIters));
  EXPECT_GE(counters["rcvd_pkts"].get<std::uint64_t>(), static_cast<std::uint64_t>(kIters));
  EXPECT_EQ(counters["rx_icrc_errors"], 0);

  // The same values in the sysfs-shaped tree, where rxe keeps them.
  const std::string ino = exec(0, {"stat", "-L", "-c", "%i", "/proc/self/ns/net"}).output;
  const std::string dir = "/run/xroce/ns-" + ino.substr(0, ino.find('\n')) +
                          "/sys/class/infiniband/" + name(0) + "/ports/1/hw_counters/";
  std::ifstream sent(dir + "sent_pkts");
  std::uint64_t file_value = 0;
  ASSERT_TRUE(sent >> file_value) << dir;
  EXPECT_EQ(file_value, counters["sent_pkts"].get<std::uint64_t>());
  std::ifstream lifespan(dir + "lifespan");
  int ms = 0;
  ASSERT_TRUE(lifespan >> ms);
  EXPECT_EQ(ms, 10);

  // The pingpong is gone: no QPs, no regions left.
  const RunResult qps = exec(0, {xroce_bin(), "qp", "show", name(0), "--json"});
  ASSERT_EQ(qps.status, 0) << qps.output;
  EXPECT_EQ(nlohmann::json::parse(qps.output, nullptr, false), nlohmann::json::array());
  EXPECT_TRUE(after["memory_regions"].empty());
}

TEST_F(StatPair, UnknownDeviceIsAnError) {
  EXPECT_NE(exec(0, {xroce_bin(), "stat", "nosuchdev"}).status, 0);
  EXPECT_NE(exec(0, {xroce_bin(), "qp", "show", "nosuchdev"}).status, 0);
}

}  // namespace
}  // namespace xroce::device
