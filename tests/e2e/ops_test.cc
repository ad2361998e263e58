// The operator's commands against running daemons (needs root): `xroce up`/`down` in a fresh
// namespace with a default route and in a loopback-only one (where the device it makes carries
// an unmodified ibv_rc_pingpong -c between client and server on that one device), `xroce top`
// driven in tmux during traffic, and `xroce exporter` scraped with curl.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"
#include "xroce/cpu_list.h"

namespace xroce::e2e {
namespace {

int next_subnet() {
  static int subnet = 100 + static_cast<int>(getpid() % 60);
  return subnet++ % 250 + 1;
}

std::string unique(const std::string& what) {
  return "xrops-" + std::to_string(getpid()) + "-" + what;
}

// A network namespace with nothing but lo (up): a container started without a network.
class LoopbackOnlyNamespace {
 public:
  LoopbackOnlyNamespace() : name_(unique("lo")) {
    run({"ip", "netns", "add", name_});
    run({"ip", "-n", name_, "link", "set", "lo", "up"});
  }
  ~LoopbackOnlyNamespace() {
    stop_daemon_of(name_);
    run({"ip", "netns", "del", name_});
  }
  LoopbackOnlyNamespace(const LoopbackOnlyNamespace&) = delete;
  LoopbackOnlyNamespace& operator=(const LoopbackOnlyNamespace&) = delete;
  const std::string& name() const { return name_; }
  std::vector<std::string> in(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", name_});
    return argv;
  }

 private:
  std::string name_;
};

// The variables of `export K='V'` lines.
std::map<std::string, std::string> parse_exports(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream lines(text);
  const std::regex line_re("^export ([A-Z_]+)='([^']*)'$");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) env[m[1]] = m[2];
  }
  return env;
}

// NAME=VALUE lines (the --github-env file).
std::map<std::string, std::string> parse_assignments(const std::string& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

// argv prefixed with `env K=V ...`: the program sees exactly the variables up gave.
std::vector<std::string> with_env(const std::map<std::string, std::string>& env,
                                  std::vector<std::string> argv) {
  std::vector<std::string> out = {"env"};
  for (const auto& [k, v] : env)
    out.push_back(k + "=" + v);
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

class OpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    if (!have("ip") || !have("ibv_devinfo") || !have("ibv_rc_pingpong")) {
      GTEST_SKIP() << "needs iproute2 and ibverbs-utils";
    }
  }
};

TEST_F(OpsTest, UpPicksTheDefaultRouteInterfaceAndDownRemovesEverything) {
  Host host(unique("up"), next_subnet());
  const std::string gateway = host.ipv4().substr(0, host.ipv4().rfind('.')) + ".254";
  ASSERT_EQ(host.exec({"ip", "route", "add", "default", "via", gateway, "dev", "xr0a"}).status, 0);
  struct Stop {
    const Host& h;
    ~Stop() { stop_daemon_of(h.netns()); }
  } stop{host};

  // A --cpus that is not a CPU list is a usage error, before anything is added.
  const auto bad = host.exec({xroce_bin(), "up", "--cpus", "2-1"});
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--cpus: '2-1' is not a CPU list"), std::string::npos) << bad.output;
  EXPECT_EQ(host.daemon_pid(), 0) << "a refused up started xroced";

  const std::string cpu = std::to_string(allowed_cpus().back());
  const auto up = host.exec({xroce_bin(), "up", "--cpus", cpu}, seconds(60));
  ASSERT_EQ(up.status, 0) << up.output;
  const auto env = parse_exports(up.output);
  ASSERT_EQ(env.count("XROCE_DEVICE"), 1u) << up.output;
  EXPECT_EQ(env.at("XROCE_DEVICE"), "xroce_xr0a");
  EXPECT_EQ(env.at("SYSFS_PATH"), run_dir_of(host.netns()) + "/sys");
  EXPECT_NE(env.count("LD_PRELOAD"), 0u);
  const auto show = host.exec({xroce_bin(), "link", "show", "xroce_xr0a", "--json"});
  const auto links = nlohmann::json::parse(show.output, nullptr, false);
  ASSERT_TRUE(links.is_array() && links.size() == 1) << show.output;
  EXPECT_EQ(links[0]["state"], "ACTIVE");
  EXPECT_EQ(links[0]["port_kind"], "afxdp");
  EXPECT_EQ(links[0]["cpus"], cpu) << show.output;

  // Again, as a GitHub Actions step: the device is reused, the variables appended to a file,
  // and an unmodified program sees the device with exactly those variables.
  const std::string github_env = "/tmp/" + unique("github-env");
  { std::ofstream(github_env) << "EARLIER=kept\n"; }
  const auto again = host.exec({xroce_bin(), "up", "--github-env", github_env});
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("already serves xr0a"), std::string::npos) << again.output;
  auto file_env = parse_assignments(github_env);
  std::remove(github_env.c_str());
  EXPECT_EQ(file_env["EARLIER"], "kept");
  EXPECT_EQ(file_env["XROCE_DEVICE"], "xroce_xr0a");
  EXPECT_EQ(file_env["SYSFS_PATH"], env.at("SYSFS_PATH"));
  file_env.erase("EARLIER");
  const auto info =
      host.exec(with_env(file_env, {"ibv_devinfo", "-d", file_env["XROCE_DEVICE"], "-v"}));
  EXPECT_EQ(info.status, 0) << info.output;
  EXPECT_NE(info.output.find("PORT_ACTIVE"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("::ffff:" + host.ipv4()), std::string::npos) << info.output;

  const pid_t daemon = host.daemon_pid();
  ASSERT_GT(daemon, 0);
  const auto down = host.exec({xroce_bin(), "down"});
  EXPECT_EQ(down.status, 0) << down.output;
  EXPECT_TRUE(Host::wait_gone(daemon, seconds(10))) << "xroced outlived its last device";
  EXPECT_TRUE(
      eventually([&] { return access(run_dir_of(host.netns()).c_str(), F_OK) != 0; }, seconds(5)));
  const auto xdp = host.exec({"ip", "-d", "link", "show", "dev", "xr0a"});
  EXPECT_EQ(xdp.output.find("xdp"), std::string::npos) << xdp.output;
  // Nothing left to take down: a clear error, not a crash.
  const auto twice = host.exec({xroce_bin(), "down", "xr0a"});
  EXPECT_EQ(twice.status, 1);
  EXPECT_NE(twice.output.find("no xroce device on or named 'xr0a'"), std::string::npos)
      << twice.output;
}

TEST_F(OpsTest, UpInALoopbackOnlyNamespaceServesAPingpongOnOneDevice) {
  LoopbackOnlyNamespace ns;
  const auto up = run(ns.in({xroce_bin(), "up"}), seconds(60));
  ASSERT_EQ(up.status, 0) << up.output;
  const auto env = parse_exports(up.output);
  ASSERT_EQ(env.count("XROCE_DEVICE"), 1u) << up.output;
  EXPECT_EQ(env.at("XROCE_DEVICE"), "xroce_lo");
  const auto show = run(ns.in({xroce_bin(), "link", "show", "xroce_lo", "--json"}));
  const auto links = nlohmann::json::parse(show.output, nullptr, false);
  ASSERT_TRUE(links.is_array() && links.size() == 1) << show.output;
  EXPECT_EQ(links[0]["port_kind"], "udp");
  EXPECT_EQ(links[0]["state"], "ACTIVE");
  int gid_index = -1;
  for (const auto& g : links[0]["gids"])
    if (g["gid"] == "::ffff:127.0.0.1") gid_index = g["index"];
  ASSERT_GE(gid_index, 0) << show.output;

  // Server and client of an unmodified ibv_rc_pingpong -c (buffers checked) on the one device.
  const std::vector<std::string> pingpong = {"ibv_rc_pingpong",
                                             "-d",
                                             "xroce_lo",
                                             "-g",
                                             std::to_string(gid_index),
                                             "-c",
                                             "-n",
                                             "50",
                                             "-s",
                                             "4096"};
  Child server(ns.in(with_env(env, pingpong)));
  ASSERT_TRUE(eventually(
      [&] {
        const auto r = run(ns.in({"ss", "-ltnH", "sport", "= :18515"}));
        return r.output.find("18515") != std::string::npos;
      },
      seconds(10)));
  auto client_argv = pingpong;
  client_argv.push_back("127.0.0.1");
  const auto client = run(ns.in(with_env(env, client_argv)), seconds(60));
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_NE(client.output.find("50 iters in"), std::string::npos) << client.output;
  EXPECT_EQ(server.wait(seconds(30)), 0);

  const auto down = run(ns.in({xroce_bin(), "down"}));
  EXPECT_EQ(down.status, 0) << down.output;
  EXPECT_TRUE(
      eventually([&] { return access(run_dir_of(ns.name()).c_str(), F_OK) != 0; }, seconds(10)))
      << "the daemon did not exit with its last device";
}

// The packaged xroced.service is Type=notify: the daemon tells systemd "READY=1" on the socket
// NOTIFY_SOCKET names once it serves (sd_notify's protocol), here a socket of the test's own.
TEST_F(OpsTest, XrocedTellsTheServiceManagerWhenItServes) {
  LoopbackOnlyNamespace ns;
  const std::string path = "/tmp/" + unique("notify");
  unlink(path.c_str());
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  struct Close {
    int fd;
    std::string path;
    ~Close() {
      close(fd);
      unlink(path.c_str());
    }
  } closer{fd, path};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  Child daemon(ns.in({"env", "NOTIFY_SOCKET=" + path, XROCED_BIN}));
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 15000), 1) << "no notification from xroced";
  char buf[256] = {};
  ASSERT_GT(recv(fd, buf, sizeof buf - 1, 0), 0);
  EXPECT_STREQ(buf, "READY=1");
  // Ready means serving: the CLI reaches it at once.
  const auto show = run(ns.in({xroce_bin(), "link", "show", "--json"}));
  EXPECT_EQ(show.status, 0) << show.output;
  EXPECT_EQ(show.output, "[]\n");
  kill(daemon.pid(), SIGTERM);
  EXPECT_EQ(daemon.wait(seconds(10)), 0);
}

// The xroced processes in network namespace `netns` (zombies have no namespace left: not one).
std::vector<pid_t> daemons_in(const std::string& netns) {
  const std::string want = "net:[" + netns_inode(netns) + "]";
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (is_xroced(pid) && std::filesystem::read_symlink(entry.path() / "ns" / "net", ec) == want)
      pids.push_back(pid);
  }
  return pids;
}

// A `link add` that fails in the daemon it started leaves no daemon behind: that daemon, with
// nothing to serve, exits, and the CLI returns once it has, so the namespace may be deleted next
// and the next add starts afresh. A daemon that serves a device stays through a failed add.
TEST_F(OpsTest, AFailedLinkAddLeavesNoDaemonBehind) {
  LoopbackOnlyNamespace ns;
  const auto failed = run(ns.in({xroce_bin(), "link", "add", "xre0", "netdev", "nosuch0"}));
  EXPECT_EQ(failed.status, 1) << failed.output;
  EXPECT_NE(failed.output.find("No such device"), std::string::npos) << failed.output;
  EXPECT_EQ(daemons_in(ns.name()), std::vector<pid_t>{}) << "the failed add's daemon still runs";
  EXPECT_FALSE(std::filesystem::exists(run_dir_of(ns.name())));

  const auto added =
      run(ns.in({xroce_bin(), "link", "add", "xre0", "netdev", "lo", "port", "udp"}));
  ASSERT_EQ(added.status, 0) << added.output;
  const auto serving = daemons_in(ns.name());
  ASSERT_EQ(serving.size(), 1u);
  const auto failed_again = run(ns.in({xroce_bin(), "link", "add", "xre1", "netdev", "nosuch0"}));
  EXPECT_EQ(failed_again.status, 1) << failed_again.output;
  EXPECT_EQ(daemons_in(ns.name()), serving);
  const auto show = run(ns.in({xroce_bin(), "link", "show", "--json"}));
  const auto links = nlohmann::json::parse(show.output, nullptr, false);
  ASSERT_TRUE(links.is_array() && links.size() == 1u) << show.output;
  EXPECT_EQ(links[0].value("ifname", ""), "xre0");
}

// A daemon started as the CLI starts one (XROCE_READY_FD: here fd 3, on /dev/null) whose
// launcher never connects exits after LifetimeRule::kFirstClientMs (15 s), removing its run
// directory; it does not exit before, while a launcher could still be on its way.
TEST_F(OpsTest, AnOnDemandDaemonNoClientReachesExits) {
  LoopbackOnlyNamespace ns;
  const auto begun = std::chrono::steady_clock::now();
  Child daemon(
      ns.in({"sh", "-c", std::string("exec 3>/dev/null; XROCE_READY_FD=3 exec ") + XROCED_BIN}));
  EXPECT_EQ(daemon.wait(seconds(45)), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - begun, seconds(15));
  EXPECT_FALSE(std::filesystem::exists(run_dir_of(ns.name())));
}

// ib_write_bw from b to a for `seconds_long`, started in the background.
struct Traffic {
  Traffic(Pair& pair, int seconds_long)
      : server(pair.app(0, {"ib_write_bw", "-d", "xpa", "-x", "0", "-F", "-s", "65536", "-D",
                            std::to_string(seconds_long)})) {
    listening = eventually(
        [&] {
          const auto r = pair.exec(0, {"ss", "-ltnH", "sport", "= :18515"});
          return r.output.find("18515") != std::string::npos;
        },
        seconds(10));
    if (listening) {
      client = std::make_unique<Child>(
          pair.app(1, {"ib_write_bw", "-d", "xpb", "-x", "0", "-F", "-s", "65536", "-D",
                       std::to_string(seconds_long), pair.ip(0)}));
    }
  }
  Child server;
  std::unique_ptr<Child> client;
  bool listening = false;
};

// The RC QPs of a device that carry traffic (packets sent), by QPN.
std::vector<unsigned> busy_qpns(const Pair& pair, int side, const std::string& dev) {
  std::vector<unsigned> out;
  const auto r = pair.exec(side, {xroce_bin(), "qp", "show", dev, "--json"});
  const auto qps = nlohmann::json::parse(r.output, nullptr, false);
  if (!qps.is_array()) return out;
  for (const auto& q : qps)
    if (q["type"] == "RC" && q.value("packets_sent", 0) > 10) out.push_back(q["qpn"]);
  return out;
}

// The name of the namespace of side `i` of a Pair.
std::string netns_name(const Pair& pair, int side) {
  const std::string out = pair.exec(side, {"ip", "netns", "identify"}).output;
  return out.substr(0, out.find('\n'));
}

// A tmux server of its own (-L), killed when the test ends.
class Tmux {
 public:
  Tmux() : socket_(unique("tmux")) {}
  ~Tmux() { run({"tmux", "-L", socket_, "kill-server"}); }
  Tmux(const Tmux&) = delete;
  Tmux& operator=(const Tmux&) = delete;
  RunResult start(const std::string& command) {
    return run({"tmux", "-L", socket_, "new-session", "-d", "-s", "top", "-x", "200", "-y", "40",
                command});
  }
  std::string screen() {
    return run({"tmux", "-L", socket_, "capture-pane", "-p", "-t", "top"}).output;
  }
  void keys(const std::string& k) { run({"tmux", "-L", socket_, "send-keys", "-t", "top", k}); }
  bool alive() { return run({"tmux", "-L", socket_, "has-session", "-t", "top"}).status == 0; }

 private:
  std::string socket_;
};

// The TX-Mb/s column of the row of `qpn` on a top screen, or -1 if the row is not there.
double tx_rate_on_screen(const std::string& screen, unsigned qpn) {
  std::istringstream lines(screen);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string first, type, state, peer, tx;
    fields >> first >> type >> state >> peer >> tx;
    if (first == std::to_string(qpn) && type == "RC") return std::stod(tx);
  }
  return -1;
}

TEST_F(OpsTest, TopInTmuxShowsTheQpsAndMovingRates) {
  if (!have("tmux") || !have("ib_write_bw")) GTEST_SKIP() << "needs tmux and perftest";
  Pair pair(unique("top"), next_subnet(), "afxdp");
  ASSERT_TRUE(pair.ready());
  Traffic traffic(pair, 30);
  ASSERT_TRUE(traffic.listening);
  std::vector<unsigned> qpns;
  ASSERT_TRUE(eventually([&] { return !(qpns = busy_qpns(pair, 1, "xpb")).empty(); }, seconds(20)));

  Tmux tmux;
  ASSERT_EQ(
      tmux.start("ip netns exec " + netns_name(pair, 1) + " " + xroce_bin() + " top xpb").status,
      0);
  // Two screens at least a refresh apart, each with the sender's QP moving data.
  std::string first_screen;
  double first_rate = -1;
  ASSERT_TRUE(eventually(
      [&] {
        first_screen = tmux.screen();
        first_rate = tx_rate_on_screen(first_screen, qpns[0]);
        return first_rate > 0;
      },
      seconds(15)))
      << first_screen;
  EXPECT_NE(first_screen.find("xroce top - xpb on xpv1"), std::string::npos) << first_screen;
  EXPECT_NE(first_screen.find("RTT-us"), std::string::npos) << first_screen;
  std::string second_screen;
  ASSERT_TRUE(eventually(
      [&] {
        second_screen = tmux.screen();
        const double rate = tx_rate_on_screen(second_screen, qpns[0]);
        return rate > 0 && rate != first_rate;
      },
      seconds(10)))
      << first_screen << "\n---\n"
      << second_screen;
  // The RTT of the sending QP is measured (not "-").
  const std::regex row(
      "\\n\\s*" + std::to_string(qpns[0]) +
      " RC\\s+RTS\\s+\\S+\\s+[0-9.]+\\s+[0-9.]+\\s+[0-9.]+\\s+[0-9.]+\\s+([0-9.]+)");
  EXPECT_TRUE(std::regex_search(second_screen, row)) << second_screen;
  // Sort by RTT, then quit with q.
  tmux.keys("t");
  EXPECT_TRUE(eventually([&] { return tmux.screen().find("sorted by rtt") != std::string::npos; },
                         seconds(5)));
  tmux.keys("q");
  EXPECT_TRUE(eventually([&] { return !tmux.alive(); }, seconds(5))) << "q did not quit top";
}

// "name{labels} value" lines of an exposition, keyed by "name{labels}".
std::map<std::string, double> parse_metrics(const std::string& text, std::string& bad_line) {
  std::map<std::string, double> out;
  std::istringstream lines(text);
  const std::regex sample_re("^([a-zA-Z_:][a-zA-Z0-9_:]*\\{[^}]*\\}) (\\S+)$");
  const std::regex comment_re("^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, sample_re)) {
      out[m[1]] = std::stod(m[2]);
    } else if (!std::regex_match(line, comment_re) && bad_line.empty()) {
      bad_line = line;
    }
  }
  return out;
}

TEST_F(OpsTest, ExporterServesEveryStatCounterWithMovingValues) {
  if (!have("curl") || !have("ib_write_bw")) GTEST_SKIP() << "needs curl and perftest";
  Pair pair(unique("exp"), next_subnet(), "udp");
  ASSERT_TRUE(pair.ready());
  const std::string port = std::to_string(19000 + getpid() % 1000);
  Child exporter({"ip", "netns", "exec", netns_name(pair, 1), xroce_bin(), "exporter", "--listen",
                  "127.0.0.1:" + port});
  ASSERT_NE(exporter.read_line(seconds(10)).find("serving"), std::string::npos);
  Traffic traffic(pair, 30);
  ASSERT_TRUE(traffic.listening);
  std::vector<unsigned> qpns;
  ASSERT_TRUE(eventually([&] { return !(qpns = busy_qpns(pair, 1, "xpb")).empty(); }, seconds(20)));

  const auto scrape = [&] {
    const auto r = pair.exec(1, {"curl", "-sS", "-i", "http://127.0.0.1:" + port + "/metrics"});
    return r.output;
  };
  const std::string first = scrape();
  ASSERT_NE(first.find("HTTP/1.1 200 OK"), std::string::npos) << first;
  EXPECT_NE(first.find("Content-Type: text/plain; version=0.0.4"), std::string::npos) << first;
  const std::string body1 = first.substr(first.find("\r\n\r\n") + 4);
  std::string bad;
  const auto m1 = parse_metrics(body1, bad);
  EXPECT_TRUE(bad.empty()) << "not in the text format: " << bad;

  const auto stat = nlohmann::json::parse(
      pair.exec(1, {xroce_bin(), "stat", "xpb", "--json"}).output, nullptr, false);
  ASSERT_TRUE(stat.is_object());
  ASSERT_GT(stat["counters"].size(), 20u);
  for (const auto& [name, value] : stat["counters"].items()) {
    const std::string key = "xroce_" + name + "_total{device=\"xpb\",port=\"1\"}";
    EXPECT_EQ(m1.count(key), 1u) << key << " missing";
    EXPECT_NE(body1.find("# TYPE xroce_" + name + "_total counter"), std::string::npos) << name;
  }
  // The ports' own statistics: in `xroce stat` and, each of them, in the exporter.
  const auto& port_stats = stat["port"];
  ASSERT_TRUE(port_stats.is_object()) << stat.dump();
  EXPECT_EQ(port_stats.value("mode", ""), "udp-socket");
  EXPECT_GE(port_stats.value("queues", 0), 1);
  for (const char* name : {"rx_packets",           "rx_bytes",      "rx_drops",
                           "tx_packets",           "tx_bytes",      "tx_drops",
                           "tx_rejected",          "tx_pending",    "rx_joined_in_place",
                           "rx_reassembled",       "tx_gso_sends",  "rx_gro_datagrams",
                           "rx_gro_copied",        "tx_kicks",      "rx_reads",
                           "rx_empty_reads",       "worker_sleeps", "receive_frames",
                           "inflight_budget_psns", "inflight_psns"}) {
    ASSERT_TRUE(port_stats.contains(name)) << name << " missing from " << port_stats.dump();
    const std::string_view n(name);
    const bool gauge = n == "tx_pending" || n == "receive_frames" || n == "inflight_budget_psns" ||
                       n == "inflight_psns";
    const std::string metric = std::string("xroce_port_") + name + (gauge ? "" : "_total");
    EXPECT_EQ(m1.count(metric + "{device=\"xpb\",port=\"1\"}"), 1u) << metric << " missing";
    EXPECT_NE(body1.find("# TYPE " + metric + (gauge ? " gauge" : " counter")), std::string::npos)
        << metric;
  }
  // The udp port's socket holds 2,048 full frames; the budget is a quarter of that.
  EXPECT_EQ(port_stats.value("receive_frames", 0), 2048);
  EXPECT_EQ(port_stats.value("inflight_budget_psns", 0), 512);
  const std::string qp_labels = "{device=\"xpb\",qpn=\"" + std::to_string(qpns[0]) +
                                "\",type=\"RC\",peer=\"" + pair.ip(0) + "\"}";
  const std::string qp_bytes = "xroce_qp_payload_bytes_sent_total" + qp_labels;
  ASSERT_EQ(m1.count(qp_bytes), 1u) << body1;
  // How the QP repaired losses, per QP as `xroce qp show` has it.
  for (const char* name : {"adaptive_retransmits", "resend_timeouts", "tail_probes",
                           "replay_gap_retries", "replays_reordered", "loss_window_reductions"}) {
    EXPECT_EQ(m1.count(std::string("xroce_qp_") + name + "_total" + qp_labels), 1u) << name;
  }
  const std::string window_key = "xroce_qp_loss_window_psns" + qp_labels;
  ASSERT_EQ(m1.count(window_key), 1u);
  EXPECT_GE(m1.at(window_key), 32.0);  // the loss window's floor

  // Values move between scrapes while the traffic runs.
  std::map<std::string, double> m2;
  ASSERT_TRUE(eventually(
      [&] {
        const std::string again = scrape();
        std::string ignored;
        m2 = parse_metrics(again.substr(again.find("\r\n\r\n") + 4), ignored);
        return m2[qp_bytes] > m1.at(qp_bytes);
      },
      seconds(10)));
  for (const char* moving : {"sent_pkts", "rcvd_pkts", "tx_bytes", "rx_bytes"}) {
    const std::string key = std::string("xroce_") + moving + "_total{device=\"xpb\",port=\"1\"}";
    EXPECT_GT(m2[key], m1.at(key)) << key;
  }
  // The writer's port sends 64 KiB WRITEs several frames per send (segmentation offload).
  for (const char* moving : {"tx_packets", "tx_bytes", "rx_packets", "tx_gso_sends"}) {
    const std::string key =
        std::string("xroce_port_") + moving + "_total{device=\"xpb\",port=\"1\"}";
    EXPECT_GT(m2[key], m1.at(key)) << key;
  }
  EXPECT_EQ(m2.count("xroce_port_active{device=\"xpb\",port=\"1\",netdev=\"xpv1\"}"), 1u);
  // The target's port receives them several frames per datagram (receive offload), each frame
  // counted in rx_packets; ib_write_bw's receive side has none to copy (one segment length).
  const auto target = nlohmann::json::parse(
      pair.exec(0, {xroce_bin(), "stat", "xpa", "--json"}).output, nullptr, false);
  ASSERT_TRUE(target.is_object());
  const auto& target_port = target["port"];
  EXPECT_GT(target_port.value("rx_gro_datagrams", 0u), 0u) << target_port.dump();
  EXPECT_GT(target_port.value("rx_packets", 0u), 2 * target_port.value("rx_gro_datagrams", 0u))
      << target_port.dump();
  const auto text = pair.exec(0, {xroce_bin(), "stat", "xpa"}).output;
  EXPECT_NE(text.find("\n    port mode udp-socket queues "), std::string::npos) << text;
  const std::string rtt_key = "xroce_qp_rtt_seconds" + qp_labels;
  ASSERT_EQ(m2.count(rtt_key), 1u);
  EXPECT_GT(m2[rtt_key], 0.0);
  EXPECT_LT(m2[rtt_key], 1.0);
  const auto missing = pair.exec(1, {"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                     "http://127.0.0.1:" + port + "/other"});
  EXPECT_EQ(missing.output, "404");
}

}  // namespace
}  // namespace xroce::e2e
