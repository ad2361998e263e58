// End-to-end: Open MPI (Debian's openmpi-bin, 4.1) over UCX over xroce, two ranks running
// mpi_check.c (a ping-pong from 1 B to 4 MiB and allreduces, every byte checked), built here
// with Debian's mpicc. Between two namespaces and with both ranks on one host (one device:
// loopback), on both port kinds. What the user chooses:
//   --mca pml ucx            Open MPI over UCX at all: its pml_ucx_devices default ("mlx*") makes
//                            UCX step back for ob1 on any other device
//                            (opal_common_ucx_support_level)
//   UCX_NET_DEVICES=<dev>:1  the device, exported to every rank (-x)
//   --allow-run-as-root      the tests run as root
// and, across namespaces, how mpirun reaches the other one: its ssh-less launch agent
// (--mca plm_rsh_agent) is mpi_netns_agent.sh, which starts orted in the namespace the host
// address maps to (ip netns exec, inside xroce exec); orted connects back to mpirun over TCP
// between the namespaces. Once with UCX's defaults (between namespaces of one machine UCX moves
// much of the data over shared memory; the device still carries its rc_verbs lane), once with
// UCX_TLS=self,rc_verbs,ud_verbs so that every byte crosses the device, and that again over the
// devices' IPv6 GIDs (UCX_IB_GID_INDEX). Needs root; skips
// without it or without mpicc/mpirun.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <tuple>

#include "ucx_hosts.h"

namespace xroce::e2e {
namespace {

using std::chrono::seconds;

// Built once per test process, from the source beside this file. ctest runs each test in a
// process of its own, two at a time: each builds under a name of its own and renames the result
// into place, so that no mpirun ever finds the binary half written by another test's mpicc (it
// did: "could not access or execute an executable"); a program already started keeps the file
// it opened.
std::string mpi_check_binary() {
  static const std::string binary = [] {
    const std::string dir = std::string(XROCE_TEST_WORK_DIR) + "/mpi";
    std::filesystem::create_directories(dir);
    const std::string out = dir + "/mpi_check";
    const std::string building = out + "." + std::to_string(getpid());
    auto r = run({"mpicc", "-O2", "-Wall", "-Werror", "-o", building, XROCE_MPI_CHECK_SOURCE},
                 seconds(120));
    if (r.status != 0) {
      std::printf("mpicc failed:\n%s\n", r.output.c_str());
      return std::string();
    }
    std::error_code ec;
    std::filesystem::rename(building, out, ec);
    if (ec) {
      std::printf("rename %s: %s\n", building.c_str(), ec.message().c_str());
      return std::string();
    }
    return out;
  }();
  return binary;
}

class OpenMpi : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    if (!have("mpicc") || !have("mpirun")) GTEST_SKIP() << "needs openmpi-bin, libopenmpi-dev";
    binary_ = mpi_check_binary();
    ASSERT_FALSE(binary_.empty()) << "mpicc could not build mpi_check.c";
    static int subnet = 200 + static_cast<int>(getpid() % 40);
    hosts_ = std::make_unique<UcxHosts>(std::get<1>(GetParam()), std::get<0>(GetParam()),
                                        subnet++ % 250 + 1);
    ASSERT_TRUE(hosts_->ready()) << "devices not ACTIVE";
    work_ = std::string(XROCE_TEST_WORK_DIR) + "/mpi/" + hosts_->netns(0);
    std::filesystem::create_directories(work_);
  }

  void TearDown() override {
    std::error_code ec;
    if (!work_.empty()) std::filesystem::remove_all(work_, ec);
  }

  // mpirun in side 0's namespace (inside xroce exec), two ranks; `env` adds to the ranks'
  // environment. Returns the packets side 0's device received during the run.
  std::uint64_t run_mpi(const std::vector<std::string>& env) {
    std::vector<std::string> argv{"env",
                                  std::string("UCX_NET_DEVICES=") + UcxHosts::kDevice + ":1"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {"mpirun", "--allow-run-as-root", "-np", "2", "--mca", "pml", "ucx",
                             "-x", "UCX_NET_DEVICES"});
    for (const auto& kv : env)
      argv.insert(argv.end(), {"-x", kv.substr(0, kv.find('='))});
    if (hosts_->one_host()) {
      argv.push_back("--oversubscribe");  // two ranks whatever the core count
    } else {
      const std::string hostfile = work_ + "/hosts";
      std::FILE* f = std::fopen(hostfile.c_str(), "w");
      std::fprintf(f, "%s slots=1\n%s slots=1\n", hosts_->ip(0).c_str(), hosts_->ip(1).c_str());
      std::fclose(f);
      // The agent's map from host address to namespace, and the xroce it runs orted under.
      argv.insert(argv.begin() + 1, {"XROCE_BIN=" + xroce_bin(),
                                     "XROCE_MPI_NETNS=" + hosts_->ip(0) + "=" + hosts_->netns(0) +
                                         " " + hosts_->ip(1) + "=" + hosts_->netns(1)});
      argv.insert(argv.end(),
                  {"--hostfile", hostfile, "--mca", "plm_rsh_agent", XROCE_MPI_NETNS_AGENT});
    }
    argv.push_back(binary_);
    const std::uint64_t before = hosts_->received_packets(0);
    auto r = run(hosts_->app(0, argv), seconds(240));
    const std::uint64_t received = hosts_->received_packets(0) - before;
    std::printf("%s\ndevice received %llu packets\n", r.output.c_str(),
                static_cast<unsigned long long>(received));
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("mpi_check passed: 2 ranks, 0 bad"), std::string::npos) << r.output;
    // Every size reported, each checked on both ranks.
    const std::regex pingpong("pingpong (\\d+) ok");
    int sizes = 0;
    for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), pingpong);
         it != std::sregex_iterator(); ++it) {
      ++sizes;
    }
    EXPECT_EQ(sizes, 23) << "1 B to 4 MiB";  // 2^0 .. 2^22
    EXPECT_NE(r.output.find("allreduce 1048576 ok"), std::string::npos) << r.output;
    return received;
  }

  std::string binary_;
  std::string work_;
  std::unique_ptr<UcxHosts> hosts_;
};

TEST_P(OpenMpi, PingPongAndAllreduceWithUcxDefaults) {
  EXPECT_GT(run_mpi({}), 0u);  // the device took part (wire-up, its rc_verbs lane)
}

// With only the device's transports every byte crosses it: side 0 receives the 4 MiB pong
// alone 4 times, at least 4 x 4 MiB / 4 KiB packets whatever the MTU.
TEST_P(OpenMpi, PingPongAndAllreduceOverTheDeviceOnly) {
  EXPECT_GE(run_mpi({"UCX_TLS=self,rc_verbs,ud_verbs"}), 4u * 1024u);
}

// The same over the devices' IPv6 GIDs: one UCX_IB_GID_INDEX for every rank, so both sides'
// IPv6 GIDs must have the same index (they do: each device lists its IPv4 address first).
TEST_P(OpenMpi, PingPongAndAllreduceOverTheDeviceOnIpv6Gids) {
  const int index = gid_index(hosts_->netns(0), UcxHosts::kDevice, hosts_->ipv6(0));
  ASSERT_GE(index, 0) << "no GID for " << hosts_->ipv6(0);
  ASSERT_EQ(gid_index(hosts_->netns(1), UcxHosts::kDevice, hosts_->ipv6(1)), index);
  EXPECT_GE(
      run_mpi({"UCX_TLS=self,rc_verbs,ud_verbs", "UCX_IB_GID_INDEX=" + std::to_string(index)}),
      4u * 1024u);
}

INSTANTIATE_TEST_SUITE_P(Ports, OpenMpi,
                         ::testing::Combine(::testing::Values("afxdp", "udp"),
                                            ::testing::Values(false, true)),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_one_host" : "_two_namespaces");
                         });

}  // namespace
}  // namespace xroce::e2e
