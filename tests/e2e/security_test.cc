// The attacks a multi-user host must survive, replayed against xroced in network namespaces
// (README.md "Security model"): each shows the attack fail, and where the daemon's resources are
// at stake, its descriptor count and RSS flat afterwards. The attacker is user nobody; the tests
// need root to set the stage (namespaces, devices, a setuid program, a re-used pid).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"

namespace xroce::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

const std::vector<std::string> kAsNobody = {"setpriv", "--reuid=65534", "--regid=65534",
                                            "--clear-groups", "--"};

std::string attack_bin() {
  return XROCE_ATTACK_PROBE;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// argv inside the namespace, with the environment `xroce exec` gives, as user nobody.
std::vector<std::string> as_nobody(const Host& host, const std::vector<std::string>& argv) {
  return host.in_netns(concat(concat({xroce_bin(), "exec", "--"}, kAsNobody), argv));
}
std::vector<std::string> as_root(const Host& host, const std::vector<std::string>& argv) {
  return host.in_netns(concat({xroce_bin(), "exec", "--"}, argv));
}

// Lines until every prefix has started one (true), or false at the deadline; all kept in `seen`.
bool read_until_all(Child& child, std::vector<std::string> prefixes, std::string& seen,
                    milliseconds deadline = seconds(20)) {
  while (!prefixes.empty()) {
    const std::string line = child.read_line(deadline);
    if (line.empty()) return false;
    seen += line + "\n";
    std::erase_if(prefixes, [&](const std::string& p) { return line.rfind(p, 0) == 0; });
  }
  return true;
}

// The value after "key " in the probe's output, or "".
std::string value_of(const std::string& output, const std::string& key) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("(^|\\n)" + key + " ([^\\n]*)")) ? m[2].str()
                                                                                  : std::string();
}

int open_fds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    (void)entry;
    ++n;
  }
  return n;
}

long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

nlohmann::json json_of(const RunResult& r) {
  return nlohmann::json::parse(r.output, nullptr, false);
}

// What the device holds, as root sees it.
nlohmann::json device_view(const Host& host) {
  const auto links = json_of(host.exec({xroce_bin(), "link", "show", "--json"}));
  return links.is_array() && links.size() == 1 ? links[0] : nlohmann::json();
}

bool device_holds_nothing(const Host& host) {
  const auto d = device_view(host);
  return d.is_object() && d["pds"] == 0 && d["mrs"] == 0 && d["contexts"] == 0;
}

// An attack's answer: refused (EPERM), or the daemon closed the connection (EIO). Never ok.
bool refused(const std::string& answer) {
  return answer == "EPERM" || answer == "EIO";
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, setuid programs, pids)";
    if (!have("ip") || !have("setpriv")) GTEST_SKIP() << "needs iproute2 and setpriv";
  }
  static int next_subnet() {
    static int subnet = 150 + static_cast<int>(getpid() % 50);
    return subnet++ % 250 + 1;
  }
};

// A private copy of /bin/sleep, setuid root: the program an attacker execs to have its old
// connection point at a privileged image. Removed when the test ends.
class SetuidSleep {
 public:
  SetuidSleep() : dir_("/tmp/xroce-sec-" + std::to_string(getpid())) {
    std::filesystem::create_directories(dir_);
    chmod(dir_.c_str(), 0755);
    std::filesystem::copy_file("/bin/sleep", path(),
                               std::filesystem::copy_options::overwrite_existing);
    chown(path().c_str(), 0, 0);
    chmod(path().c_str(), 04755);
  }
  ~SetuidSleep() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path() const { return dir_ + "/sleep"; }

 private:
  std::string dir_;
};

// Attack 1: a process of nobody opens a context, forks, and execs a setuid program keeping the
// connection; the child (and, in the second round, the new image itself) try to register over
// the new image. The daemon honours only the opener's requests, and only while the image the
// context was opened for runs: all are refused, and the daemon closes the connection and
// releases what the context held.
TEST_F(SecurityTest, SetuidExecLeavesTheConnectionUseless) {
  Host host("xrsec-setuid", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  SetuidSleep setuid;
  std::string seen;
  {
    Child attacker(
        as_nobody(host, {attack_bin(), "inherit-after-exec", "xre0", setuid.path(), "30"}));
    ASSERT_FALSE(read_until(attacker, "done", seen).empty()) << seen;
  }
  EXPECT_EQ(value_of(seen, "parent_execd"), "yes") << seen;
  EXPECT_TRUE(refused(value_of(seen, "child_reg_mr"))) << seen;
  EXPECT_TRUE(refused(value_of(seen, "child_alloc_pd"))) << seen;
  EXPECT_TRUE(refused(value_of(seen, "child_hello"))) << seen;
  EXPECT_TRUE(eventually([&] { return device_holds_nothing(host); }, seconds(10)))
      << device_view(host).dump();

  // The same with a new image of the attacker's own: the image changed, the connection is dead.
  seen.clear();
  {
    Child attacker(as_nobody(host, {attack_bin(), "inherit-after-exec", "xre0", attack_bin(),
                                    "use-inherited", "FD", "xre0"}));
    ASSERT_TRUE(read_until_all(attacker, {"done", "new_image_hello"}, seen)) << seen;
  }
  EXPECT_TRUE(refused(value_of(seen, "new_image_reg_mr"))) << seen;
  EXPECT_TRUE(refused(value_of(seen, "new_image_alloc_pd"))) << seen;
  EXPECT_TRUE(refused(value_of(seen, "new_image_hello"))) << seen;
}

// A process with the given pid, made by root with clone3's set_tid; it waits to be killed.
// -1 if that pid could not be had (taken again already).
pid_t spawn_with_pid(pid_t pid) {
  pid_t tids[1] = {pid};
  clone_args args{};
  args.exit_signal = SIGCHLD;
  args.set_tid = reinterpret_cast<uint64_t>(tids);
  args.set_tid_size = 1;
  const long r = syscall(SYS_clone3, &args, sizeof args);
  if (r == 0) {
    for (;;)
      pause();
  }
  return static_cast<pid_t>(r);
}

// Attack 2: the opener exits, a root process takes its pid, and a child that kept the
// connection asks on it. The connection belongs to the process that opened it, not to a number:
// the daemon dropped the session when its opener exited, so every request fails, and nothing
// stays registered. (On Linux 6.x the pid cannot even be had while the child holds the
// connection: its peer socket pins the opener's struct pid. The test takes it when it can.)
TEST_F(SecurityTest, AReusedPidGetsNothing) {
  Host host("xrsec-pid", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  std::string seen;
  Child attacker(as_nobody(host, {attack_bin(), "orphan", "xre0"}), Child::Input::kPipe);
  const std::string opener = read_until(attacker, "opener ", seen);
  ASSERT_FALSE(opener.empty()) << seen;
  ASSERT_EQ(value_of(seen, "opener_reg_mr"), "ok") << seen;
  ASSERT_EQ(read_until(attacker, "orphaned", seen), "orphaned yes") << seen;
  const pid_t old_pid = std::stoi(opener.substr(7));
  EXPECT_EQ(attacker.wait(seconds(10)), 0);  // reaps the opener: its pid is free
  // Root takes the pid.
  pid_t root_process = -1;
  int clone_error = 0;
  eventually(
      [&] {
        root_process = spawn_with_pid(old_pid);
        clone_error = errno;
        return root_process == old_pid;
      },
      seconds(5));
  attacker.write_line("go");
  ASSERT_FALSE(read_until(attacker, "done", seen).empty()) << seen;
  if (root_process > 0) {
    kill(root_process, SIGKILL);
    waitpid(root_process, nullptr, 0);
  }
  EXPECT_TRUE(refused(value_of(seen, "orphan_alloc_pd"))) << seen;
  EXPECT_TRUE(refused(value_of(seen, "orphan_reg_mr"))) << seen;
  EXPECT_TRUE(refused(value_of(seen, "orphan_hello"))) << seen;
  EXPECT_TRUE(eventually([&] { return device_holds_nothing(host); }, seconds(10)))
      << device_view(host).dump();
  if (root_process != old_pid) {
    GTEST_LOG_(INFO) << "pid " << old_pid << " could not be had: " << std::strerror(clone_error)
                     << " (pinned while the connection lives)";
  }
}

// Attack 3: a child that dropped to nobody probes its root parent's address space through the
// parent's context. Mapped or not, it gets the same answer; only the opener gets the real check.
TEST_F(SecurityTest, AFailedRegistrationRevealsNoMapping) {
  Host host("xrsec-maps", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  const auto r = run(as_root(host, {attack_bin(), "drop-privileges", "xre0"}));
  ASSERT_NE(r.output.find("done"), std::string::npos) << r.output;
  EXPECT_EQ(value_of(r.output, "owner_mapped"), "ok") << r.output;
  EXPECT_EQ(value_of(r.output, "owner_unmapped"), "EFAULT") << r.output;
  EXPECT_EQ(value_of(r.output, "nobody_mapped"), "EPERM") << r.output;
  EXPECT_EQ(value_of(r.output, "nobody_unmapped"), "EPERM") << r.output;
}

// Attack 4: descriptors in every kind of wrong message. The daemon closes all it does not keep:
// its descriptor count and RSS are what they were once the attacker has gone.
TEST_F(SecurityTest, DescriptorLeakingMessagesLeaveTheDaemonFlat) {
  Host host("xrsec-fds", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  const pid_t daemon = host.daemon_pid();
  ASSERT_GT(daemon, 0);
  host.exec({xroce_bin(), "link", "show"});  // the daemon's buffers are warm
  const int fds_before = open_fds(daemon);
  const long rss_before = rss_kib(daemon);
  const auto r = run(as_nobody(host, {attack_bin(), "fd-flood", "xre0", "4000"}), seconds(120));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(value_of(r.output, "sent"), "4000") << r.output;
  EXPECT_EQ(value_of(r.output, "link_show_after"), "ok") << r.output;
  // 4000 messages of 8 kinds: 500 of each; bad magic and bad version answer EPROTO, the short
  // ones drop the connection, the rest are refused for their descriptors or their context.
  EXPECT_EQ(value_of(r.output, "answer EPROTO"), "1000") << r.output;
  EXPECT_EQ(value_of(r.output, "answer dropped"), "500") << r.output;
  EXPECT_EQ(value_of(r.output, "answer EOPNOTSUPP"), "500") << r.output;
  EXPECT_EQ(value_of(r.output, "answer EINVAL"), "1000") << r.output;
  EXPECT_EQ(value_of(r.output, "answer ENODEV"), "1000") << r.output;
  EXPECT_EQ(value_of(r.output, "answer ok"), "") << r.output;  // nothing wrong was accepted
  EXPECT_TRUE(eventually([&] { return open_fds(daemon) == fds_before; }, seconds(10)))
      << open_fds(daemon) << " descriptors, " << fds_before << " before";
  EXPECT_LE(rss_kib(daemon), rss_before + 4096) << "RSS grew from " << rss_before << " KiB";
}

// Attack 5: one client creates QPs until the device refuses, with the common 1024-descriptor
// limit. It reaches exactly what query_device advertised, then gets ENOMEM; neither side holds a
// descriptor per QP; other clients keep working; the daemon is flat once it has gone.
TEST_F(SecurityTest, AQpFloodStopsAtTheAdvertisedQuotaWithoutDescriptors) {
  Host host("xrsec-flood", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  const pid_t daemon = host.daemon_pid();
  host.exec({xroce_bin(), "link", "show"});
  const int fds_before = open_fds(daemon);
  const long rss_before = rss_kib(daemon);
  std::string seen;
  {
    Child flood(as_nobody(host, {attack_bin(), "qps", "xre0", "-1"}), Child::Input::kPipe);
    ASSERT_FALSE(read_until(flood, "ready", seen, seconds(240)).empty()) << seen;
    const int max_qp = std::stoi(value_of(seen, "max_qp"));
    EXPECT_GE(max_qp, 4096);
    EXPECT_EQ(std::stoi(value_of(seen, "created")), max_qp) << seen;
    EXPECT_EQ(value_of(seen, "error"), "ENOMEM") << seen;
    EXPECT_LT(std::stoi(value_of(seen, "open_fds")), 32) << seen;
    EXPECT_LT(open_fds(daemon), fds_before + 16);
    // Another client of the device still works meanwhile.
    const auto other = run(as_root(host, {probe_bin(), "xre0", "objects"}), seconds(60));
    EXPECT_EQ(other.status, 0) << other.output;
  }
  EXPECT_TRUE(eventually([&] { return open_fds(daemon) == fds_before; }, seconds(20)))
      << open_fds(daemon) << " descriptors, " << fds_before << " before";
  EXPECT_TRUE(eventually([&] { return rss_kib(daemon) <= rss_before + 8192; }, seconds(20)))
      << "RSS " << rss_kib(daemon) << " KiB, " << rss_before << " before";
}

// Attacks 6 and 7: a WRITE forged from an address that is not the QP's peer, and rkeys guessed
// as they used to be issued (each PD's first key 0x1, then 0x101, 0x201...). The first never
// executes (rx_peer_mismatch); each guess is refused with a NAK that kills its QP, raises
// IBV_EVENT_QP_ACCESS_ERR and counts resp_remote_access_errors; the region stays as it was. The
// same forging from the peer with the right key does land: the forging is right.
TEST_F(SecurityTest, ForgedWritesFromANonPeerOrWithGuessedKeysNeverLand) {
  Pair pair("xrsec-forge", next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  const std::string attacker_ip = pair.ip(1).substr(0, pair.ip(1).rfind('.')) + ".3";
  ASSERT_EQ(pair.exec(1, {"ip", "addr", "add", attacker_ip + "/24", "dev", pair.netdev(1)}).status,
            0);
  constexpr int kQps = 8;
  Child target(pair.app(0, {attack_bin(), "target", "xpa", pair.ip(1), std::to_string(kQps)}),
               Child::Input::kPipe);
  std::string seen;
  ASSERT_FALSE(read_until(target, "ready", seen).empty()) << seen;
  std::istringstream mr(value_of(seen, "mr"));
  std::string addr, rkey, length;
  mr >> addr >> rkey >> length;
  std::vector<std::pair<std::string, std::string>> qps;  // qpn, psn
  std::istringstream lines(seen);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream l(line);
    std::string tag, qpn, psn;
    if (l >> tag >> qpn >> psn && tag == "qp") qps.emplace_back(qpn, psn);
  }
  ASSERT_EQ(qps.size(), static_cast<std::size_t>(kQps));
  const uint32_t key = std::stoul(rkey, nullptr, 16);
  for (uint32_t i = 0; i < 256; ++i)
    EXPECT_NE(key, i << 8 | 1) << "a key of the old, predictable kind";
  auto forge = [&](const std::string& from, int qp, const std::string& use_key, uint64_t offset) {
    const auto r = pair.exec(
        1, {attack_bin(), "forge", from, pair.ip(0), "50000", qps[qp].first, qps[qp].second,
            use_key, std::to_string(std::stoull(addr) + offset), "64", "0x5c"});
    EXPECT_EQ(r.status, 0) << r.output;
  };
  auto region = [&] {
    target.write_line("dump");
    return target.read_line(seconds(10));
  };
  auto counter = [&](const std::string& name) {
    const auto j = json_of(pair.exec(0, {xroce_bin(), "stat", "xpa", "--json"}));
    return j.is_object() ? j["counters"].value(name, -1) : -1;
  };
  // The peer, the right key: lands (the forging is right).
  forge(pair.ip(1), 0, rkey, 4096);
  EXPECT_TRUE(
      eventually([&] { return region() == "region changed at 4096 byte 0x5c"; }, seconds(10)));
  // Not the peer, the right key: dropped and counted.
  forge(attacker_ip, 1, rkey, 0);
  EXPECT_TRUE(eventually([&] { return counter("rx_peer_mismatch") >= 1; }, seconds(10)));
  EXPECT_EQ(region(), "region changed at 4096 byte 0x5c");
  // The peer, guessed keys: each refused.
  for (int qp = 2; qp < kQps; ++qp) {
    char guess[16];
    std::snprintf(guess, sizeof guess, "0x%x", (qp - 2) << 8 | 1);
    forge(pair.ip(1), qp, guess, 0);
  }
  EXPECT_TRUE(
      eventually([&] { return counter("resp_remote_access_errors") >= kQps - 2; }, seconds(10)));
  for (int qp = 2; qp < kQps; ++qp) {
    std::string event = read_until(target, "event", seen, seconds(10));
    EXPECT_NE(event.find("access"), std::string::npos) << event;
  }
  EXPECT_EQ(region(), "region changed at 4096 byte 0x5c");
}

// The provider of a context whose daemon is killed: IBV_EVENT_DEVICE_FATAL, and every
// outstanding receive and send completed with IBV_WC_WR_FLUSH_ERR, within a second; work posted
// afterwards flushed at once; destroying objects succeeds.
TEST_F(SecurityTest, AKilledDaemonFlushesOutstandingWorkWithinASecond) {
  Host host("xrsec-death", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  const pid_t daemon = host.daemon_pid();
  ASSERT_GT(daemon, 0);
  const std::string absent_peer = host.ipv4().substr(0, host.ipv4().rfind('.')) + ".99";
  Child app(as_root(host, {attack_bin(), "flush", "xre0", absent_peer}));
  std::string seen;
  ASSERT_EQ(read_until(app, "posted", seen), "posted 24") << seen;
  const uint64_t killed_ns = monotonic_ns();
  ASSERT_EQ(kill(daemon, SIGKILL), 0);
  ASSERT_FALSE(read_until(app, "destroy", seen, seconds(30)).empty()) << seen;
  std::istringstream in("completions " + value_of(seen, "completions"));
  std::string word;
  int completions = 0, flushed = 0;
  uint64_t last_ns = 0;
  in >> word >> completions >> word >> flushed >> word >> last_ns;
  EXPECT_EQ(completions, 24) << seen;
  EXPECT_EQ(flushed, 24) << seen;
  EXPECT_LT(last_ns - killed_ns, 1'000'000'000u)
      << "the last flush came " << last_ns - killed_ns << " ns after the kill";
  const std::string fatal = value_of(seen, "event");
  ASSERT_EQ(fatal.rfind("local catastrophic error", 0), 0u) << seen;
  const std::string at = fatal.substr(fatal.rfind(' ') + 1);
  EXPECT_LT(std::stoull(at) - killed_ns, 1'000'000'000u) << fatal;
  EXPECT_EQ(value_of(seen, "after_death"), "post 0 wc 3000 Work Request Flushed Error") << seen;
  EXPECT_EQ(value_of(seen, "destroy"), "0 0 0 0") << seen;
  EXPECT_TRUE(Host::wait_gone(daemon, seconds(10)));
}

// `xroce qp show` of 5,000 QPs (two contexts of one process): every one listed once, in pages.
TEST_F(SecurityTest, QpShowListsFiveThousandQps) {
  Host host("xrsec-show", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  Child many(as_root(host, {attack_bin(), "qps", "xre0", "5000", "2"}), Child::Input::kPipe);
  std::string seen;
  ASSERT_FALSE(read_until(many, "ready", seen, seconds(240)).empty()) << seen;
  ASSERT_EQ(value_of(seen, "created"), "5000") << seen;
  const auto start = std::chrono::steady_clock::now();
  const auto r = host.exec({xroce_bin(), "qp", "show", "xre0", "--json"}, seconds(120));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.status, 0) << r.output.substr(0, 2000);
  const auto shown = json_of(r);
  ASSERT_TRUE(shown.is_array()) << r.output.substr(0, 2000);
  EXPECT_EQ(shown.size(), 5000u);
  std::set<int> qpns;
  for (const auto& qp : shown)
    qpns.insert(qp.value("qpn", -1));
  EXPECT_EQ(qpns.size(), 5000u);
  EXPECT_GT(r.output.size(), std::size_t{64 * 1024});  // more than one datagram could carry
  GTEST_LOG_(INFO) << "qp show of 5000 QPs: " << r.output.size() << " bytes in "
                   << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
}

// A user other than root sees its own regions and QPs only, in every view.
TEST_F(SecurityTest, AUserSeesOnlyItsOwnObjects) {
  Host host("xrsec-views", next_subnet());
  ASSERT_EQ(host.add_device("xre0").status, 0);
  Child roots(as_root(host, {attack_bin(), "target", "xre0", "198.18.0.9", "2"}),
              Child::Input::kPipe);
  std::string seen;
  ASSERT_FALSE(read_until(roots, "ready", seen).empty()) << seen;
  Child nobodys(as_nobody(host, {attack_bin(), "qps", "xre0", "3"}), Child::Input::kPipe);
  ASSERT_FALSE(read_until(nobodys, "ready", seen).empty()) << seen;

  auto view = [&](bool nobody, const std::vector<std::string>& argv) {
    return json_of(host.exec(nobody ? concat(kAsNobody, argv) : argv));
  };
  const auto root_links = view(false, {xroce_bin(), "link", "show", "--json"});
  const auto nobody_links = view(true, {xroce_bin(), "link", "show", "--json"});
  ASSERT_TRUE(root_links.is_array() && nobody_links.is_array());
  EXPECT_EQ(root_links[0]["mrs"], 1);
  EXPECT_EQ(root_links[0]["contexts"], 2);
  EXPECT_EQ(nobody_links[0]["mrs"], 0);
  EXPECT_EQ(nobody_links[0]["memory_regions"].size(), 0u);
  EXPECT_EQ(nobody_links[0]["contexts"], 1);  // its own
  const auto nobody_stat = view(true, {xroce_bin(), "stat", "xre0", "--json"});
  ASSERT_TRUE(nobody_stat.is_object());
  EXPECT_EQ(nobody_stat["memory_regions"].size(), 0u);
  EXPECT_TRUE(nobody_stat["counters"].is_object());  // device counters are for everyone
  EXPECT_EQ(view(false, {xroce_bin(), "qp", "show", "xre0", "--json"}).size(), 5u);
  EXPECT_EQ(view(true, {xroce_bin(), "qp", "show", "xre0", "--json"}).size(), 3u);
}

// The 2,000-QP client beside an unmodified ibv_rc_pingpong between two namespaces: the pingpong
// still works; and it works as user nobody on devices root created.
TEST_F(SecurityTest, PingpongAsNobodyBesideATwoThousandQpClient) {
  if (!have("ibv_rc_pingpong")) GTEST_SKIP() << "needs ibverbs-utils";
  Pair pair("xrsec-pp", next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  Child crowd(pair.app(0, concat(kAsNobody, {attack_bin(), "qps", "xpa", "2000"})),
              Child::Input::kPipe);
  std::string seen;
  ASSERT_FALSE(read_until(crowd, "ready", seen, seconds(240)).empty()) << seen;
  ASSERT_EQ(value_of(seen, "created"), "2000") << seen;
  auto [server, client] = pair.server_client(
      concat(kAsNobody, {"ibv_rc_pingpong", "-d", "xpa", "-g", "0", "-n", "200"}),
      concat(kAsNobody, {"ibv_rc_pingpong", "-d", "xpb", "-g", "0", "-n", "200"}), "18515");
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_EQ(server.status, 0) << server.output;
  EXPECT_NE(client.output.find("200 iters"), std::string::npos) << client.output;
}

}  // namespace
}  // namespace xroce::e2e
