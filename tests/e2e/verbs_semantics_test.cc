// End-to-end: what rdma-core's pyverbs suite expects of a provider (the suite itself runs in
// tests/conformance/pyverbs), one behaviour per test, each through a verbs_probe mode
// (verbs_probe_semantics.cc) against a device of each port kind in its own namespace.
// Needs root (namespaces, XDP); skips otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "fabric.h"

namespace xroce::e2e {
namespace {

using std::chrono::seconds;

constexpr const char* kDevice = "xvs0";

class VerbsSemantics : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    static int subnet = 60 + static_cast<int>(getpid() % 50);
    host_ = std::make_unique<Host>("xre2e-verbs", subnet++ % 250 + 1);
    auto add = host_->add_device(kDevice, GetParam());
    ASSERT_EQ(add.status, 0) << add.output;
    ASSERT_TRUE(eventually(
        [&] {
          return host_->exec({xroce_bin(), "link", "show", kDevice}).output.find("state ACTIVE") !=
                 std::string::npos;
        },
        seconds(20)))
        << "port not ACTIVE";
  }

  // Runs one verbs_probe mode as an application (inside `xroce exec`); its "check NAME ok"
  // lines must all pass.
  void expect_probe_passes(const std::string& mode) {
    auto r = host_->exec({xroce_bin(), "exec", "--", probe_bin(), kDevice, mode}, seconds(90));
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(" ok\n"), std::string::npos) << r.output;
    std::printf("%s", r.output.c_str());
  }

  std::unique_ptr<Host> host_;
};

// EOPNOTSUPP at the first call for memory-window and ODP access, UC and raw-packet QPs, QP
// creation flags and ibv_import_device; creation flags 0 accepted; phys_port_cnt_ex.
TEST_P(VerbsSemantics, WhatTheDeviceLacksFailsAtTheFirstCall) {
  expect_probe_passes("refusals");
}

// ibv_post_recv and ibv_post_srq_recv take max_recv_wr / max_wr WQEs and then ENOMEM, also
// once the daemon has read them from the ring; a reset QP takes a full queue again.
TEST_P(VerbsSemantics, ReceiveQueuesTakeExactlyTheirDepth) {
  expect_probe_passes("recv_depth");
}

// ibv_create_cq_ex with a completion channel takes one reference: after the CQ is destroyed
// ibv_destroy_comp_channel succeeds and closes the fd.
TEST_P(VerbsSemantics, ExtendedCqReleasesItsCompletionChannel) {
  expect_probe_passes("channel_cq_ex");
}

// class/infiniband/<dev>/device/net/<ifname> in the tree libibverbs reads ($SYSFS_PATH) links
// to the netdev's own sysfs directory, as the kernel shows an RDMA device's netdev.
TEST_P(VerbsSemantics, SysfsTreeLinksTheNetdev) {
  const std::string dir = "$SYSFS_PATH/class/infiniband/" + std::string(kDevice) + "/device/net";
  auto r =
      host_->exec({xroce_bin(), "exec", "--", "sh", "-c",
                   "ls " + dir + " && cat " + dir + "/xr0a/ifindex /sys/class/net/xr0a/ifindex"});
  ASSERT_EQ(r.status, 0) << r.output;
  unsigned listed_ifindex = 0, netdev_ifindex = 0;
  char name[32] = {};
  ASSERT_EQ(std::sscanf(r.output.c_str(), "%31s %u %u", name, &listed_ifindex, &netdev_ifindex), 3)
      << r.output;
  EXPECT_STREQ(name, "xr0a");
  EXPECT_EQ(listed_ifindex, netdev_ifindex);
}

// A device's hw_counters exist, at zero, as soon as `xroce link add` returns, as sysfs has
// them with the device: a reader does not wait for the daemon's next refresh.
TEST_P(VerbsSemantics, HwCountersExistWithTheDevice) {
  const std::string x = xroce_bin(), dev = kDevice;
  const std::string counters = "/sys/class/infiniband/" + dev + "/ports/1/hw_counters/";
  auto r = host_->exec({"sh", "-c",
                        x + " link del " + dev + " && " + x + " link add " + dev +
                            " netdev xr0a port " + GetParam() + " && " + x + " exec -- cat " +
                            counters + "rcvd_pkts " + counters + "retry_exceeded_err"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output, "0\n0\n");
}

// A program that reads /sys/class/infiniband itself (UCX, pyverbs' rdmacm tests), not through
// $SYSFS_PATH as libibverbs does, gets the daemon's tree inside `xroce exec`: the GID's netdev
// and type, and its GID; a path the tree lacks still fails as it would without the preload.
TEST_P(VerbsSemantics, SysClassInfinibandIsTheDevicesTreeForEveryProgram) {
  const std::string port = "/sys/class/infiniband/" + std::string(kDevice) + "/ports/1/";
  auto r = host_->exec({xroce_bin(), "exec", "--", "/usr/bin/python3", "-c",
                        "import sys\n"
                        "p = sys.argv[1]\n"
                        "print(open(p + 'gid_attrs/ndevs/0').read().strip(),"
                        " open(p + 'gid_attrs/types/0').read().strip().replace(' ', '_'),"
                        " open(p + 'gids/0').read().strip())\n"
                        "try:\n"
                        "    open(p + 'no_such_file')\n"
                        "except FileNotFoundError:\n"
                        "    print('absent')\n",
                        port});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("xr0a RoCE_v2 0000:0000:0000:0000:0000:ffff:"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("absent"), std::string::npos) << r.output;

  // Directories, links and metadata too: pyverbs lists device/net with `ls` (glibc's opendir),
  // Python with os.listdir, and both test paths with stat.
  const std::string dev = "/sys/class/infiniband/" + std::string(kDevice) + "/";
  auto ls = host_->exec({xroce_bin(), "exec", "--", "ls", dev + "device/net/"});
  EXPECT_EQ(ls.output, "xr0a\n");
  auto py = host_->exec({xroce_bin(), "exec", "--", "/usr/bin/python3", "-c",
                         "import os, sys\n"
                         "d = sys.argv[1]\n"
                         "print(os.path.isdir(d + 'device/net'), os.listdir(d + 'device/net'),"
                         " os.readlink(d + 'device/net/xr0a'), os.access(d + 'ports', os.R_OK),"
                         " os.path.exists(d + 'no_such_file'))\n",
                         dev});
  EXPECT_EQ(py.output, "True ['xr0a'] /sys/class/net/xr0a True False\n");
}

// Two QPs of one device connected to each other (the device reaches its own GID): every
// receive accepted serves a SEND with rnr_retry 0; ibv_query_qp gives the current PSNs; UD
// completions carry the network header type in wc.sl for IPv4 and IPv6.
TEST_P(VerbsSemantics, LoopbackTrafficUsesEveryReceiveAndReportsCurrentState) {
  expect_probe_passes("loopback_semantics");
}

// A receive posted while the worker sleeps (include/xroce/queues.h "Doorbells") is used by the
// SEND that follows on a healthy QP (rnr_retry 0), and flushed at once, not when the worker's
// sleep ends, on a QP in the error state. The workers must have slept during the probe's idle
// times for it to test that.
TEST_P(VerbsSemantics, AReceivePostedWhileTheWorkerSleepsIsUsedOrFlushedAtOnce) {
  const auto sleeps = [&] {
    const auto stat = nlohmann::json::parse(
        host_->exec({xroce_bin(), "stat", kDevice, "--json"}).output, nullptr, false);
    if (!stat.is_object() || !stat.contains("port") || !stat["port"].is_object())
      return std::uint64_t{0};
    return stat["port"].value("worker_sleeps", std::uint64_t{0});
  };
  const std::uint64_t before = sleeps();
  expect_probe_passes("recv_doorbell");
  // 16 idle times: at least one sleep each (a failed read gives 0, which fails too).
  EXPECT_GE(sleeps(), before + 16) << "the workers did not sleep in the idle times";
}

INSTANTIATE_TEST_SUITE_P(Ports, VerbsSemantics, ::testing::Values("afxdp", "udp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace xroce::e2e
