// End-to-end: UCX (Debian's ucx-utils, 1.13) over xroce with its defaults, choosing only the
// device: UCP tag_bw with UCX_NET_DEVICES=<dev>:1 (UCX picks its transports: between two
// namespaces of one machine it sends the data over shared memory and cma, and wires up and
// keeps an rc_verbs lane on the device), and the UCT tests that name the transport on the
// device: put_lat over rc_verbs, am_lat over ud_verbs (also over the devices' IPv6 GIDs,
// UCX_IB_GID_INDEX). Between two namespaces and with both
// sides on one host (one device: loopback), on both port kinds. Each run must end with
// ucx_perftest's final line for every iteration, and the device must have received the run's
// packets (xroce stat). Needs root; skips without it or without ucx_perftest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <tuple>

#include "ucx_hosts.h"

namespace xroce::e2e {
namespace {

using std::chrono::seconds;

constexpr const char* kPerftest = "ucx_perftest";
constexpr int kIterations = 1000;

class UcxPerftest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    if (!have(kPerftest)) GTEST_SKIP() << "needs ucx_perftest (ucx-utils)";
    static int subnet = 150 + static_cast<int>(getpid() % 50);
    hosts_ = std::make_unique<UcxHosts>(std::get<1>(GetParam()), std::get<0>(GetParam()),
                                        subnet++ % 250 + 1);
    ASSERT_TRUE(hosts_->ready()) << "devices not ACTIVE";
  }

  // Runs one ucx_perftest test (server on side 0, client on side 1) with `extra` options on
  // both sides, and `server_env` / `client_env` (NAME=VALUE) in their environments; returns the
  // packets side 0's device received meanwhile.
  std::uint64_t run_perftest(const std::vector<std::string>& server_extra,
                             const std::vector<std::string>& client_extra,
                             const std::string& server_env = "",
                             const std::string& client_env = "") {
    const std::string port = "13337";
    std::vector<std::string> server{"env", device_env(), kPerftest, "-p", port};
    if (!server_env.empty()) server.insert(server.begin() + 2, server_env);
    server.insert(server.end(), server_extra.begin(), server_extra.end());
    std::vector<std::string> client{
        "env", device_env(), kPerftest, "-p", port, "-n", std::to_string(kIterations)};
    if (!client_env.empty()) client.insert(client.begin() + 2, client_env);
    client.insert(client.end(), client_extra.begin(), client_extra.end());
    const std::uint64_t before = hosts_->received_packets(0);
    auto [s, c] = hosts_->server_client(server, client, port);
    const std::uint64_t received = hosts_->received_packets(0) - before;
    std::printf("client:\n%s\nserver:\n%s\ndevice received %llu packets\n", c.output.c_str(),
                s.output.c_str(), static_cast<unsigned long long>(received));
    EXPECT_EQ(c.status, 0) << c.output;
    EXPECT_EQ(s.status, 0) << s.output;
    // "Final:   1000   <latency or overhead columns>": every iteration ran.
    EXPECT_TRUE(
        std::regex_search(c.output, std::regex("Final:\\s+" + std::to_string(kIterations) + "\\s")))
        << c.output;
    return received;
  }

  static std::string device_env() {
    return std::string("UCX_NET_DEVICES=") + UcxHosts::kDevice + ":1";
  }
  static std::string device() { return std::string(UcxHosts::kDevice) + ":1"; }

  std::unique_ptr<UcxHosts> hosts_;
};

// UCP with UCX's own choice of transports; the device takes part (wire-up and its rc_verbs
// lane: ucp_worker prints "ep_cfg[0]: tag(sysv/memory cma/memory rc_verbs/<dev>:1)").
TEST_P(UcxPerftest, TagBwWithDefaults) {
  const auto received = run_perftest({}, {"-t", "tag_bw", "-s", "65536"});
  EXPECT_GT(received, 0u);
}

// Every put is an RDMA WRITE to the peer: at least one packet per iteration each way.
TEST_P(UcxPerftest, PutLatOverRcVerbs) {
  const auto received = run_perftest({"-d", device(), "-x", "rc_verbs"},
                                     {"-d", device(), "-x", "rc_verbs", "-t", "put_lat"});
  EXPECT_GE(received, static_cast<std::uint64_t>(kIterations));
}

// Active messages over UD: UCX's ud_verbs checks each datagram's destination GID with the
// network header type of wc.sl (uct_ud_iface_check_grh), and drops a wrong one.
TEST_P(UcxPerftest, AmLatOverUdVerbs) {
  const auto received = run_perftest({"-d", device(), "-x", "ud_verbs"},
                                     {"-d", device(), "-x", "ud_verbs", "-t", "am_lat"});
  EXPECT_GE(received, static_cast<std::uint64_t>(kIterations));
}

// Both over the devices' IPv6 GIDs (UCX_IB_GID_INDEX): RDMA WRITEs with IPv6 headers, and
// ud_verbs' GRH check against the network header type an IPv6 datagram's completion reports.
TEST_P(UcxPerftest, PutLatAndAmLatOverIpv6Gids) {
  std::string gid_env[2];
  for (int i = 0; i < 2; ++i) {
    const int index = gid_index(hosts_->netns(i), UcxHosts::kDevice, hosts_->ipv6(i));
    ASSERT_GE(index, 0) << "no GID for " << hosts_->ipv6(i);
    gid_env[i] = "UCX_IB_GID_INDEX=" + std::to_string(index);
  }
  for (const std::string transport : {"rc_verbs", "ud_verbs"}) {
    SCOPED_TRACE(transport);
    const auto received = run_perftest(
        {"-d", device(), "-x", transport},
        {"-d", device(), "-x", transport, "-t", transport == "rc_verbs" ? "put_lat" : "am_lat"},
        gid_env[0], gid_env[1]);
    EXPECT_GE(received, static_cast<std::uint64_t>(kIterations));
  }
}

INSTANTIATE_TEST_SUITE_P(Ports, UcxPerftest,
                         ::testing::Combine(::testing::Values("afxdp", "udp"),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_one_host" : "_two_namespaces");
                         });

}  // namespace
}  // namespace xroce::e2e
