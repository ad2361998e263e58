// End-to-end: unmodified Debian verbs programs (ibverbs-utils) and a small verbs program linked
// against the system's libibverbs see an xroce device served by xroced in a network namespace.
// Needs root (namespaces, /dev/infiniband nodes); skips otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>

#include "fabric.h"
#include "xroce/cpu_list.h"
#include "xroce/sched_attr.h"

namespace xroce::e2e {
namespace {

using std::chrono::seconds;

bool have(const std::string& program) {
  return run({"sh", "-c", "command -v " + program}).status == 0;
}

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, device nodes)";
    if (!have("ip") || !have("ibv_devinfo")) GTEST_SKIP() << "needs iproute2 and ibverbs-utils";
  }

  // Each test its own namespace and subnet.
  static int next_subnet() {
    static int subnet = 100 + static_cast<int>(getpid() % 100);
    return subnet++ % 250 + 1;
  }

  RunResult app(const Host& host, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {xroce_bin(), "exec", "--"});
    return host.exec(argv);
  }

  // `verbs_probe xre0 MODE` on `host` with environment variable `name` set to `setting` (left
  // unset when empty).
  RunResult probe_with_setting(const Host& host, const std::string& mode, const std::string& name,
                               const std::string& setting) {
    std::vector<std::string> argv = {probe_bin(), "xre0", mode};
    if (!setting.empty()) argv.insert(argv.begin(), {"env", name + "=" + setting});
    return app(host, argv);
  }

  nlohmann::json link_show(const Host& host) {
    auto r = host.exec({xroce_bin(), "link", "show", "--json"});
    return nlohmann::json::parse(r.output, nullptr, false);
  }
};

// "30a0:9eff:febf:2121" from the netdev's MAC 32:a0:9e:bf:21:21 (EUI-64, U/L bit flipped).
std::string expected_guid(const Host& host) {
  auto r = host.exec({"cat", "/sys/class/net/xr0a/address"});
  unsigned m[6] = {};
  std::sscanf(r.output.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]);
  char text[32];
  std::snprintf(text, sizeof(text), "%02x%02x:%02xff:fe%02x:%02x%02x", m[0] ^ 2u, m[1], m[2], m[3],
                m[4], m[5]);
  return text;
}

TEST_F(DeviceTest, IbvDevicesListsTheDeviceWithItsGuid) {
  Host host("xre2e-devices", next_subnet());
  auto add = host.add_device("xre0");
  ASSERT_EQ(add.status, 0) << add.output;
  auto r = app(host, {"ibv_devices"});
  ASSERT_EQ(r.status, 0) << r.output;
  std::string guid = expected_guid(host);
  guid.erase(std::remove(guid.begin(), guid.end(), ':'), guid.end());
  EXPECT_TRUE(std::regex_search(r.output, std::regex("xre0\\s+" + guid))) << r.output;
}

TEST_F(DeviceTest, IbvDevinfoShowsActivePortAndRoceV2Gids) {
  Host host("xre2e-devinfo", next_subnet());
  auto add = host.add_device("xre0");
  ASSERT_EQ(add.status, 0) << add.output;
  auto r = app(host, {"ibv_devinfo", "-v", "-d", "xre0"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("hca_id:\txre0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node_guid:\t\t\t" + expected_guid(host)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("state:\t\t\tPORT_ACTIVE (4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("link_layer:\t\tEthernet"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("phys_state:\t\tLINK_UP (5)"), std::string::npos) << r.output;
  // veth MTU 1500 leaves room for 1024-byte payloads (docs/protocol.md §3.10).
  EXPECT_NE(r.output.find("active_mtu:\t\t1024 (3)"), std::string::npos) << r.output;
  // veth says 10000 Mb/s: 1X FDR10, as the kernel's ib_get_eth_speed() maps it.
  EXPECT_NE(r.output.find("active_width:\t\t1X (1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("active_speed:\t\t10.0 Gbps (8)"), std::string::npos) << r.output;
  auto env = host.exec({xroce_bin(), "env"});
  const auto at = env.output.find("SYSFS_PATH='");
  ASSERT_NE(at, std::string::npos) << env.output;
  const std::string sysfs = env.output.substr(at + 12, env.output.find('\'', at + 12) - at - 12);
  auto rate = run({"cat", sysfs + "/class/infiniband/xre0/ports/1/rate"});
  EXPECT_EQ(rate.output, "10 Gb/sec (1X FDR10)\n");
  EXPECT_TRUE(std::regex_search(
      r.output,
      std::regex("GID\\[ *\\d+\\]:\\s+::ffff:" +
                 std::regex_replace(host.ipv4(), std::regex("\\."), "\\.") + ", RoCE v2")))
      << r.output;
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex("GID\\[ *\\d+\\]:\\s+" + host.ipv6() + ", RoCE v2")))
      << r.output;
}

TEST_F(DeviceTest, PortFollowsTheNetdev) {
  Host host("xre2e-port", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0a", "mtu", "9000"}).status, 0);
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0b", "mtu", "9000"}).status, 0);
  auto devinfo = [&] { return app(host, {"ibv_devinfo", "-d", "xre0"}).output; };
  EXPECT_TRUE(eventually(
      [&] { return devinfo().find("active_mtu:\t\t4096 (5)") != std::string::npos; }, seconds(10)))
      << devinfo();
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0a", "down"}).status, 0);
  EXPECT_TRUE(
      eventually([&] { return devinfo().find("PORT_DOWN (1)") != std::string::npos; }, seconds(10)))
      << devinfo();
}

TEST_F(DeviceTest, GidTableFollowsAddressesAndKeepsIndices) {
  Host host("xre2e-gids", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto gids = [&] {
    std::map<std::string, int> out;
    auto links = link_show(host);
    if (!links.is_array() || links.empty()) return out;
    for (const auto& g : links[0]["gids"])
      out[g["gid"]] = g["index"];
    return out;
  };
  const auto before = gids();
  const std::string v4 = "::ffff:" + host.ipv4();
  ASSERT_EQ(before.count(v4), 1u);
  ASSERT_EQ(before.count(host.ipv6()), 1u);

  ASSERT_EQ(host.exec({"ip", "addr", "add", "198.19.77.7/24", "dev", "xr0a"}).status, 0);
  EXPECT_TRUE(eventually([&] { return gids().count("::ffff:198.19.77.7") == 1; }, seconds(10)));
  ASSERT_EQ(host.exec({"ip", "addr", "del", host.ipv4() + "/24", "dev", "xr0a"}).status, 0);
  EXPECT_TRUE(eventually([&] { return gids().count(v4) == 0; }, seconds(10)));
  const auto after = gids();
  EXPECT_EQ(after.at(host.ipv6()), before.at(host.ipv6())) << "a GID kept its address: same index";
  // ...and unmodified libibverbs reads the new table through the sysfs tree.
  auto r = app(host, {"ibv_devinfo", "-v", "-d", "xre0"});
  EXPECT_NE(r.output.find("::ffff:198.19.77.7, RoCE v2"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(v4 + ","), std::string::npos) << r.output;
}

TEST_F(DeviceTest, XroceEnvGivesAShellWhatItNeeds) {
  Host host("xre2e-env", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto r = host.exec({"sh", "-c", "eval \"$(" + xroce_bin() + " env)\" && ibv_devices"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("xre0"), std::string::npos) << r.output;
  // Without it, libibverbs looks at the real /sys and finds nothing of ours.
  auto bare = host.exec({"ibv_devices"});
  EXPECT_EQ(bare.output.find("xre0"), std::string::npos) << bare.output;
}

TEST_F(DeviceTest, EachNamespaceSeesOnlyItsOwnDevices) {
  Host a("xre2e-nsa", next_subnet());
  Host b("xre2e-nsb", next_subnet());
  ASSERT_EQ(a.add_device("xre0").status, 0);
  ASSERT_EQ(b.add_device("xre0").status, 0);  // same name, other namespace, other daemon
  ASSERT_NE(a.daemon_pid(), b.daemon_pid());
  auto ra = app(a, {"ibv_devinfo", "-v"});
  auto rb = app(b, {"ibv_devinfo", "-v"});
  ASSERT_EQ(ra.status, 0) << ra.output;
  ASSERT_EQ(rb.status, 0) << rb.output;
  EXPECT_NE(ra.output.find("::ffff:" + a.ipv4() + ","), std::string::npos) << ra.output;
  EXPECT_EQ(ra.output.find("::ffff:" + b.ipv4() + ","), std::string::npos) << ra.output;
  EXPECT_NE(rb.output.find("::ffff:" + b.ipv4() + ","), std::string::npos) << rb.output;
  EXPECT_EQ(rb.output.find("::ffff:" + a.ipv4() + ","), std::string::npos) << rb.output;
  // Both devices open and work at once.
  EXPECT_EQ(app(a, {probe_bin(), "xre0", "pdmr"}).status, 0);
  EXPECT_EQ(app(b, {probe_bin(), "xre0", "pdmr"}).status, 0);
}

TEST_F(DeviceTest, LinkCommandsRejectBadRequests) {
  Host host("xre2e-linkerr", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto dup = host.exec({xroce_bin(), "link", "add", "xre0", "netdev", "xr0b"});
  EXPECT_NE(dup.status, 0);
  EXPECT_NE(dup.output.find("File exists"), std::string::npos) << dup.output;
  auto busy = host.exec({xroce_bin(), "link", "add", "xre1", "netdev", "xr0a"});
  EXPECT_NE(busy.output.find("busy"), std::string::npos) << busy.output;
  auto missing = host.exec({xroce_bin(), "link", "add", "xre1", "netdev", "nosuch0"});
  EXPECT_NE(missing.output.find("No such device"), std::string::npos) << missing.output;
  auto syntax = host.exec({xroce_bin(), "link", "add", "xre1", "netdev", "xr0b", "port", "rdma"});
  EXPECT_EQ(syntax.status, 2) << syntax.output;
  auto shown = link_show(host);
  ASSERT_TRUE(shown.is_array());
  EXPECT_EQ(shown.size(), 1u) << shown.dump();
}

// `link add ... cpus LIST` binds each worker (a thread named xroced-wN) to a CPU of the list
// and `link show` gives the list; a list that is not one, or names a CPU xroce may not run on,
// is refused with the reason (usage: exit 2) and adds nothing.
// The /proc task directory of each xroced-wN thread of `pid`, with N (the worker's queue;
// devices of one daemon number theirs alike).
std::vector<std::pair<int, std::filesystem::path>> worker_tasks(pid_t pid) {
  std::vector<std::pair<int, std::filesystem::path>> workers;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("xroced-w", 0) == 0)
      workers.emplace_back(std::stoi(name.substr(8)), task.path());
  }
  return workers;
}

// Each worker of `pid` as N and its Cpus_allowed_list, sorted.
std::vector<std::pair<int, std::string>> worker_cpus(pid_t pid) {
  std::vector<std::pair<int, std::string>> workers;
  for (const auto& [index, task] : worker_tasks(pid)) {
    std::ifstream status(task / "status");
    std::string line;
    std::string cpus_allowed;
    while (std::getline(status, line))
      if (line.rfind("Cpus_allowed_list:", 0) == 0) cpus_allowed = line.substr(line.find('\t') + 1);
    workers.emplace_back(index, cpus_allowed);
  }
  std::sort(workers.begin(), workers.end());
  return workers;
}

TEST_F(DeviceTest, LinkAddCpusBindsTheWorkersToThoseCpus) {
  Host host("xre2e-cpus", next_subnet());
  const std::vector<std::uint32_t> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const std::string first = std::to_string(allowed.front());
  const std::string last = std::to_string(allowed.back());

  auto r = host.exec({xroce_bin(), "link", "add", "xre0", "netdev", "xr0a", "cpus", "1-0"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("cpus: '1-0' is not a CPU list"), std::string::npos) << r.output;
  // A udp port has one worker: more queues are refused with the reason, not a bare errno.
  r = host.exec(
      {xroce_bin(), "link", "add", "xre0", "netdev", "xr0a", "port", "udp", "queues", "2"});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("queues 2: a udp port has one queue and one worker"), std::string::npos)
      << r.output;
  const std::uint32_t absent = CPU_SETSIZE - 1;
  if (!std::binary_search(allowed.begin(), allowed.end(), absent)) {
    r = host.exec({xroce_bin(), "link", "add", "xre0", "netdev", "xr0a", "cpus", "1023"});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("CPU 1023 is not one xroce may run on here (those are " +
                            format_cpu_list(allowed) + ")"),
              std::string::npos)
        << r.output;
  }

  ASSERT_EQ(host.add_device("xre0", "", "xr0a", {"cpus", last}).status, 0);
  auto shown = link_show(host);
  ASSERT_TRUE(shown.is_array() && shown.size() == 1u) << shown.dump();
  EXPECT_EQ(shown[0]["cpus"], last) << shown.dump();
  const auto text = host.exec({xroce_bin(), "link", "show"});
  EXPECT_NE(text.output.find(" cpus " + last + "\n"), std::string::npos) << text.output;
  using Workers = std::vector<std::pair<int, std::string>>;
  EXPECT_EQ(worker_cpus(host.daemon_pid()), (Workers{{0, last}}));

  // Two queues (a veth with two of each), two CPUs: worker i on the i-th CPU of the list.
  ASSERT_EQ(host.exec({"ip", "link", "add", "xq0", "numtxqueues", "2", "numrxqueues", "2", "type",
                       "veth", "peer", "name", "xq1", "numtxqueues", "2", "numrxqueues", "2"})
                .status,
            0);
  ASSERT_EQ(host.exec({"ip", "link", "set", "xq0", "up"}).status, 0);
  ASSERT_EQ(host.exec({"ip", "link", "set", "xq1", "up"}).status, 0);
  // Given out of order, shown ascending: worker 0 on the first CPU, worker 1 on the last.
  ASSERT_EQ(host.add_device("xre1", "", "xq0", {"queues", "2", "cpus", last + "," + first}).status,
            0);
  shown = link_show(host);
  ASSERT_TRUE(shown.is_array() && shown.size() == 2u) << shown.dump();
  for (const auto& link : shown) {
    if (link["ifname"] != "xre1") continue;
    EXPECT_EQ(link["cpus"],
              (allowed.size() == 1 ? last : format_cpu_list({allowed.front(), allowed.back()})))
        << link;
    EXPECT_EQ(link["workers"], 2) << link;
  }
  Workers expected{{0, last}, {0, first}, {1, last}};  // xre0's worker 0, then xre1's two
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(worker_cpus(host.daemon_pid()), expected);
}

// A NIC's packet work does not wait behind applications for a core: each worker runs at nice
// -10 with a 100 us EEVDF slice (daemon/worker_uring.h), and the daemon's autogroup at nice -10
// too, since across sessions the kernel weighs groups, not threads (without it a woken worker
// waited out a busy-polling ib_write_lat's turn, 1.8-2.7 ms). Each is checked where this kernel
// has it: the slice from 6.12 on, the autogroup where /proc/PID/autogroup exists.
TEST_F(DeviceTest, WorkersAndTheDaemonsAutogroupRunAheadOfApplications) {
  Host host("xre2e-prio", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  const pid_t pid = host.daemon_pid();
  // Each worker thread's scheduling attributes, by tid.
  const auto workers = [&] {
    std::vector<std::pair<pid_t, SchedAttr>> out;
    for (const auto& [index, task] : worker_tasks(pid)) {
      const pid_t tid = std::stoi(task.filename().string());
      SchedAttr attr;
      if (syscall(SYS_sched_getattr, tid, &attr, sizeof attr, 0) == 0) out.emplace_back(tid, attr);
    }
    return out;
  };
  ASSERT_TRUE(eventually(
      [&] {
        const auto w = workers();
        return !w.empty() && std::all_of(w.begin(), w.end(),
                                         [](const auto& t) { return t.second.sched_nice == -10; });
      },
      std::chrono::seconds(5)))
      << "no worker, or one not at nice -10";
  // Whether this kernel keeps a SCHED_OTHER slice (6.12+): tried on this thread and put back.
  SchedAttr mine;
  ASSERT_TRUE(get_sched_attr(mine));
  SchedAttr probe = mine;
  probe.sched_runtime = 200'000;
  const bool slices =
      set_sched_attr(probe) && get_sched_attr(probe) && probe.sched_runtime == 200'000;
  ASSERT_TRUE(set_sched_attr(mine));
  if (slices) {
    for (const auto& [tid, attr] : workers())
      EXPECT_EQ(attr.sched_runtime, 100'000u) << "worker " << tid;
  }
  std::ifstream autogroup("/proc/" + std::to_string(pid) + "/autogroup");
  if (autogroup) {
    std::string line;  // "/autogroup-123 nice -10"
    std::getline(autogroup, line);
    EXPECT_NE(line.find(" nice -10"), std::string::npos) << line;
  }
}

// `link add` returns once the port is ACTIVE: a verbs program started right after finds it so.
// When the port cannot come up, it says why within --wait-s and exits non-zero.
TEST_F(DeviceTest, LinkAddReturnsOnceActiveOrSaysWhyNot) {
  Host host("xre2e-active", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  const auto shown = link_show(host);  // at once, no waiting
  ASSERT_TRUE(shown.is_array() && shown.size() == 1u) << shown.dump();
  EXPECT_EQ(shown[0]["state"], "ACTIVE") << shown.dump();
  EXPECT_EQ(host.exec({xroce_bin(), "link", "del", "xre0"}).status, 0);

  // xr0a without carrier: its veth peer is down.
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0b", "down"}).status, 0);
  auto r = host.exec({xroce_bin(), "link", "add", "xre0", "netdev", "xr0a", "--wait-s", "1"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("port not ACTIVE after 1 s: netdev xr0a has no carrier"),
            std::string::npos)
      << r.output;
  // The device stays, DOWN, and follows the netdev once the peer comes up.
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0b", "up"}).status, 0);
  EXPECT_TRUE(eventually(
      [&] {
        const auto links = link_show(host);
        return links.is_array() && links.size() == 1u && links[0]["state"] == "ACTIVE";
      },
      seconds(10)));

  // An administratively down netdev says so.
  ASSERT_EQ(host.exec({xroce_bin(), "link", "del", "xre0"}).status, 0);
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0a", "down"}).status, 0);
  r = host.exec({xroce_bin(), "link", "add", "xre0", "netdev", "xr0a", "--wait-s", "0.5"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("netdev xr0a is down"), std::string::npos) << r.output;
  EXPECT_EQ(host.exec({xroce_bin(), "link", "del", "xre0"}).status, 0);
}

// `link del` of the last device, then `link add` at once, five times: each time a new daemon
// serves, with its output going to the run directory's log (not to a file an exiting daemon
// unlinked), and the old daemon is gone.
TEST_F(DeviceTest, LinkDelThenLinkAddRestartsCleanly) {
  Host host("xre2e-restart", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  const std::string log = std::filesystem::path(host.lock_file()).parent_path() / "xroced.log";
  pid_t previous = host.daemon_pid();
  ASSERT_GT(previous, 0);
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    const auto del = host.exec({xroce_bin(), "link", "del", "xre0"});
    ASSERT_EQ(del.status, 0) << del.output;
    EXPECT_TRUE(Host::wait_gone(previous, seconds(0)))
        << "link del returned before the daemon exited";
    const auto add = host.exec({xroce_bin(), "link", "add", "xre0", "netdev", "xr0a"});
    ASSERT_EQ(add.status, 0) << add.output;
    const pid_t now = host.daemon_pid();
    ASSERT_GT(now, 0);
    EXPECT_NE(now, previous);
    std::error_code ec;
    const auto out = std::filesystem::read_symlink("/proc/" + std::to_string(now) + "/fd/2", ec);
    EXPECT_EQ(out.string(), log) << "the daemon's stderr";
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("pid " + std::to_string(now) + " serving"), std::string::npos) << text;
    const auto shown = link_show(host);
    ASSERT_TRUE(shown.is_array() && shown.size() == 1u) << shown.dump();
    EXPECT_EQ(shown[0]["state"], "ACTIVE");
    previous = now;
  }
}

TEST_F(DeviceTest, VerbsProgramAllocatesPdAndRegistersMemory) {
  Host host("xre2e-pdmr", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto r = app(host, {probe_bin(), "xre0", "pdmr"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("mr_a lkey 0x[0-9a-f]+ rkey 0x[0-9a-f]+")))
      << r.output;
}

TEST_F(DeviceTest, UnsupportedVerbsFailAsOnARealDevice) {
  Host host("xre2e-unsup", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto r = app(host, {probe_bin(), "xre0", "unsup"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
}

// Memory windows, ATOMIC_WRITE, UC, rereg_mr, iova, ODP, XRC, completion timestamps and
// extended-CQ poll batches between two QPs of one device (looped back inside the daemon,
// through its requester and responder); every check in verbs_probe_transport.cc is on the data or
// the completion status.
TEST_F(DeviceTest, TransportVerbsMoveDataAndEnforceAccess) {
  Host host("xre2e-transport", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto r = app(host, {probe_bin(), "xre0", "transport"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
  for (const char* name :
       {"write_through_window_data", "write_after_local_inv_rem_access_err",
        "write_beyond_window_rem_access_err", "recv_with_inv_names_the_key",
        "write_after_send_with_inv_rem_access_err", "write_through_type1_window_data",
        "atomic_write_data", "uc_recv_data_and_imm", "uc_write_data",
        "write_after_rereg_lands_in_new_buffer", "write_by_iova_data", "odp_write_data",
        "xrc_send_data", "open_qp", "completion_timestamp_in_range",
        "ex_poll_end_keeps_what_it_did_not_see"}) {
    EXPECT_NE(r.output.find(std::string("check ") + name + " ok"), std::string::npos)
        << name << "\n"
        << r.output;
  }
}

// The text of `output` from the first `line` on ("" when there is none: sscanf then matches
// nothing).
const char* from_line(const std::string& output, const char* line) {
  const auto at = output.find(line);
  return at == std::string::npos ? "" : output.c_str() + at;
}

// A thread polling an empty CQ asks for a 100 us scheduler slice when it first yields its core
// (provider/cq.cc: with the default slice each yield hands a nice-19 busy loop a whole slice);
// XROCE_POLL_SLICE_US sets it, 0 leaves the thread alone, and a SCHED_BATCH thread is never
// changed. errno is what the application left there.
TEST_F(DeviceTest, APollingThreadAsksForAShortSchedulerSlice) {
  Host host("xre2e-slice", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  for (const std::string setting : {"", "0", "250"}) {
    const auto r = probe_with_setting(host, "poll_slice", "XROCE_POLL_SLICE_US", setting);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
    unsigned long long before = 0, after = 0, batch_before = 0, batch_after = 0;
    ASSERT_EQ(std::sscanf(from_line(r.output, "poll_slice other"),
                          "poll_slice other %llu %llu batch %llu %llu", &before, &after,
                          &batch_before, &batch_after),
              4)
        << r.output;
    if (before == 0) GTEST_SKIP() << "the kernel reports no EEVDF slice (before Linux 6.12)";
    const unsigned long long wanted_us = setting.empty() ? 100 : std::stoull(setting);
    const unsigned long long expected =
        wanted_us == 0 ? before : std::min(before, wanted_us * 1000);
    EXPECT_EQ(after, expected) << "XROCE_POLL_SLICE_US=" << setting << "\n" << r.output;
    EXPECT_EQ(batch_after, batch_before) << "a SCHED_BATCH thread keeps its slice\n" << r.output;
  }
}

// A thread polling an empty CQ sleeps at its yield points while 1 MiB or more of sends is queued
// on the QPs completing into that CQ, and only then (provider/cq.cc, note_poll): with
// XROCE_POLL_SLEEP_US=20 or unset (the default: a sleep as long as the queue allows), 2 MiB of
// SENDs on a loopback pair make the poller sleep, 64 rounds of one 64-byte SEND never do. At 0 it
// never sleeps. The data arrives in every case.
TEST_F(DeviceTest, APollerSleepsOnlyWithAMegabyteOfSendsQueued) {
  Host host("xre2e-psleep", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  for (const std::string setting : {"20", "", "0"}) {
    const auto r = probe_with_setting(host, "poll_sleep", "XROCE_POLL_SLEEP_US", setting);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
    long deep = -1, shallow = -1;
    ASSERT_EQ(std::sscanf(from_line(r.output, "poll_sleep deep"), "poll_sleep deep %ld shallow %ld",
                          &deep, &shallow),
              2)
        << r.output;
    if (setting != "0")
      EXPECT_GT(deep, 0) << "2 MiB queued: the poller sleeps\n" << r.output;
    else
      EXPECT_EQ(deep, 0) << "XROCE_POLL_SLEEP_US=" << setting << ": never\n" << r.output;
    EXPECT_EQ(shallow, 0) << "64 bytes queued: the poller only yields\n" << r.output;
  }
}

TEST_F(DeviceTest, CompletionChannelsComeFromThePreloadLibrary) {
  Host host("xre2e-channel", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto with = app(host, {probe_bin(), "xre0", "channel"});
  EXPECT_EQ(with.status, 0) << with.output;
  EXPECT_EQ(with.output.find("FAILED"), std::string::npos) << with.output;
  // The same program without LD_PRELOAD (env -u): libibverbs' own path must fail cleanly.
  auto without = app(host, {"env", "-u", "LD_PRELOAD", probe_bin(), "xre0", "nochannel"});
  EXPECT_EQ(without.status, 0) << without.output;
  EXPECT_EQ(without.output.find("FAILED"), std::string::npos) << without.output;
  // An unmodified binary gets past channel, CQ and QP creation to waiting for its peer.
  auto pingpong = app(host, {"timeout", "3", "ibv_rc_pingpong", "-e", "-d", "xre0", "-g", "0"});
  EXPECT_EQ(pingpong.status, 124) << pingpong.output;  // still waiting when timeout stops it
  EXPECT_EQ(pingpong.output.find("Couldn't"), std::string::npos) << pingpong.output;
}

TEST_F(DeviceTest, DataPathObjectsBehaveAsOnARealDevice) {
  Host host("xre2e-objects", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  auto r = app(host, {probe_bin(), "xre0", "objects"});
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("check rtr_to_rts ok"), std::string::npos) << r.output;
}

TEST_F(DeviceTest, PortAndGidChangesArriveAsAsyncEvents) {
  Host host("xre2e-events", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  Child child(host.in_netns({xroce_bin(), "exec", "--", probe_bin(), "xre0", "events"}));
  ASSERT_EQ(child.read_line(seconds(20)), "ready");
  auto wait_for = [&](const std::string& wanted) {
    for (std::string line = child.read_line(seconds(10)); !line.empty();
         line = child.read_line(seconds(10))) {
      if (line == wanted) return true;
    }
    return false;
  };
  ASSERT_EQ(host.exec({"ip", "addr", "add", "198.19.88.8/24", "dev", "xr0a"}).status, 0);
  EXPECT_TRUE(wait_for("async_event GID table change"));
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0a", "down"}).status, 0);
  EXPECT_TRUE(wait_for("async_event port error"));
  ASSERT_EQ(host.exec({"ip", "link", "set", "xr0a", "up"}).status, 0);
  EXPECT_TRUE(wait_for("async_event port active"));
  ASSERT_EQ(host.exec({xroce_bin(), "link", "del", "xre0"}).status, 0);
  EXPECT_TRUE(wait_for("async_event local catastrophic error"));
  EXPECT_EQ(child.wait(seconds(10)), 0);
}

TEST_F(DeviceTest, AProcessThatDiesReleasesItsObjects) {
  Host host("xre2e-release", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  {
    Child child(host.in_netns({xroce_bin(), "exec", "--", probe_bin(), "xre0", "hold"}));
    std::string line;
    while ((line = child.read_line(seconds(20))) != "ready" && !line.empty()) {
    }
    ASSERT_EQ(line, "ready");
    auto links = link_show(host);
    ASSERT_TRUE(links.is_array() && links.size() == 1) << links.dump();
    EXPECT_EQ(links[0]["pds"], 1);
    EXPECT_EQ(links[0]["mrs"], 1);
    EXPECT_EQ(links[0]["contexts"], 1);
    // The daemon recorded who registered what (ip netns exec and xroce exec both exec, so the
    // probe kept the child's pid).
    ASSERT_EQ(links[0]["memory_regions"].size(), 1u) << links.dump();
    const auto& region = links[0]["memory_regions"][0];
    EXPECT_EQ(region["pid"], child.pid());
    EXPECT_EQ(region["length"], 8192);
    EXPECT_EQ(region["access"], 1);  // IBV_ACCESS_LOCAL_WRITE
    EXPECT_NE(region["lkey"], 0);
    // Child's destructor kills the probe (SIGKILL at a zero deadline).
  }
  EXPECT_TRUE(eventually(
      [&] {
        auto links = link_show(host);
        return links.is_array() && links.size() == 1 && links[0]["pds"] == 0 &&
               links[0]["mrs"] == 0 && links[0]["contexts"] == 0;
      },
      seconds(10)))
      << link_show(host).dump();
}

// A daemon removes its run directory when it exits cleanly, and at start removes the ones dead
// daemons left (a lock file nobody holds), never one whose lock is held.
TEST_F(DeviceTest, RunDirectoriesAreRemovedAtExitAndReclaimedWhenStale) {
  namespace fs = std::filesystem;
  // Made-up namespace inodes (real ones are above 0xf0000000), unique to this test process.
  const fs::path stale = "/run/xroce/ns-" + std::to_string(1000000000 + getpid());
  const fs::path held = "/run/xroce/ns-" + std::to_string(1100000000 + getpid());
  std::error_code ec;
  for (const auto& dir : {stale, held}) {
    fs::create_directories(dir / "sys" / "class", ec);
    std::ofstream(dir / "xroced.lock") << "999999\n";
    std::ofstream(dir / "xroced.log") << "old\n";
  }
  const int held_fd = open((held / "xroced.lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held_fd, 0);
  ASSERT_EQ(flock(held_fd, LOCK_EX | LOCK_NB), 0);

  Host host("xre2e-rundir", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);  // starts the namespace's daemon
  const auto inode = host.exec({"stat", "-L", "-c", "%i", "/proc/self/ns/net"}).output;
  const fs::path own = "/run/xroce/ns-" + inode.substr(0, inode.find('\n'));
  EXPECT_TRUE(fs::exists(own / "control.sock"));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(held / "xroced.lock"));

  const pid_t daemon = host.daemon_pid();
  ASSERT_GT(daemon, 0);
  ASSERT_EQ(host.exec({xroce_bin(), "link", "del", "xre0"}).status, 0);  // its last device
  EXPECT_TRUE(Host::wait_gone(daemon, seconds(10)));
  EXPECT_FALSE(fs::exists(own)) << own;
  close(held_fd);
  fs::remove_all(held, ec);
  fs::remove_all(stale, ec);
}

// The daemon going away (stopped, or killed) must not hang a client: its provider raises
// IBV_EVENT_DEVICE_FATAL either way, as a NIC's driver does for a dead device, and verbs fail
// from then on.
void daemon_stop_does_not_hang(DeviceTest& test, Host& host, int signal_number,
                               const std::string& expected_event) {
  (void)test;
  ASSERT_EQ(host.add_device("xre0").status, 0);
  Child child(host.in_netns({xroce_bin(), "exec", "--", probe_bin(), "xre0", "hold"}));
  std::string line;
  while ((line = child.read_line(seconds(20))) != "ready" && !line.empty()) {
  }
  ASSERT_EQ(line, "ready");
  const pid_t daemon = host.daemon_pid();
  ASSERT_GT(daemon, 0);
  ASSERT_EQ(kill(daemon, signal_number), 0);
  EXPECT_EQ(child.read_line(seconds(10)), "async_event " + expected_event);
  EXPECT_EQ(child.read_line(seconds(10)), "alloc_pd_after Input/output error");
  EXPECT_EQ(child.wait(seconds(10)), 0);
  EXPECT_TRUE(Host::wait_gone(daemon, seconds(10)));
}

TEST_F(DeviceTest, DaemonStoppingGivesClientsDeviceFatalNotAHang) {
  Host host("xre2e-stop", next_subnet());
  daemon_stop_does_not_hang(*this, host, SIGTERM, "local catastrophic error");
}

TEST_F(DeviceTest, DaemonKilledGivesClientsDeviceFatalNotAHang) {
  Host host("xre2e-kill", next_subnet());
  daemon_stop_does_not_hang(*this, host, SIGKILL, "local catastrophic error");
}

}  // namespace
}  // namespace xroce::e2e
