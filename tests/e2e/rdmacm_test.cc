// Unmodified librdmacm programs (Debian's rdmacm-utils) between two namespaces, each with an
// xroce device, over both port kinds: the CM in MADs on QP1 between the daemons, librdmacm's
// kernel interface served by libxroce-preload.so. Needs root; skips otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "fabric.h"
#include "pair.h"

namespace xroce::e2e {
namespace {

class RdmacmTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, device nodes)";
    if (!have("ip") || !have("rping")) GTEST_SKIP() << "needs iproute2 and rdmacm-utils";
  }
  static int next_subnet() {
    static int subnet = 10 + static_cast<int>((getpid() + 37) % 90);
    return subnet++ % 250 + 1;
  }
  std::string port() const { return GetParam(); }

  // `xroce cm show` of side `i` as JSON (empty object on failure).
  static nlohmann::json cm_show(const Pair& pair, int i) {
    auto r = pair.exec(i, {xroce_bin(), "cm", "show", pair.dev(i), "--json"});
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_object() ? j : nlohmann::json::object();
  }
  static nlohmann::json stat(const Pair& pair, int i) {
    auto r = pair.exec(i, {xroce_bin(), "stat", pair.dev(i), "--json"});
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    return j.is_object() ? j : nlohmann::json::object();
  }
  // Whether server process `pid` in namespace a listens on its rdma_cm id.
  static bool listening(const Pair& pair, pid_t pid) {
    return cm_listener(pair.exec(0, {xroce_bin(), "cm", "show", pair.dev(0), "--json"}).output,
                       pid);
  }

  // Server in namespace a (waits until its rdma_cm id listens), client in b; both outputs.
  static std::pair<RunResult, RunResult> server_client(const Pair& pair,
                                                       const std::vector<std::string>& server,
                                                       const std::vector<std::string>& client,
                                                       milliseconds deadline = seconds(120)) {
    Child s(pair.app(0, server));
    RunResult c;
    if (eventually([&] { return listening(pair, s.pid()); }, seconds(20))) {
      c = run(pair.app(1, client), deadline);
    } else {
      c.output = "the server never listened";
      c.status = -1;
    }
    RunResult out;
    for (std::string line = s.read_line(seconds(30)); !line.empty();
         line = s.read_line(seconds(30)))
      out.output += line + "\n";
    out.status = s.wait(seconds(20));
    return {out, c};
  }
};

// The pings an `rping -c -v` client got back. -v prints each (rping's CM thread may print into
// the middle of a line: count the ping texts); -V fails the run on a mismatch.
std::size_t rping_pings(const std::string& client_output) {
  std::size_t pings = 0;
  for (std::size_t at = client_output.find("rdma-ping-"); at != std::string::npos;
       at = client_output.find("rdma-ping-", at + 1))
    ++pings;
  return pings;
}

TEST_P(RdmacmTest, RpingVerifiesAThousandPings) {
  Pair pair("xrcm-rping", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  auto [server, client] =
      server_client(pair, {"rping", "-s", "-V", "-C", "1000", "-a", pair.ip(0), "-p", "7174"},
                    {"rping", "-c", "-V", "-v", "-C", "1000", "-a", pair.ip(0), "-p", "7174"});
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_EQ(server.status, 0) << server.output;
  EXPECT_NE(client.output.find("rdma-ping-999: "), std::string::npos);
  EXPECT_EQ(rping_pings(client.output), 1000u) << client.output.substr(0, 2000);
  EXPECT_EQ(client.output.find("mismatch"), std::string::npos);
  // Both processes are gone: nothing of them stays in the daemons.
  EXPECT_TRUE(eventually(
      [&] { return cm_show(pair, 0).value("ids", nlohmann::json::array()).empty(); }, seconds(10)));
  EXPECT_TRUE(cm_show(pair, 1).value("ids", nlohmann::json::array()).empty());
  const auto cm = stat(pair, 0).value("cm", nlohmann::json::object());
  EXPECT_GE(cm.value("mads_received", 0), 3);  // REQ, RTU, DREQ or DREP
  EXPECT_EQ(cm.value("mads_dropped", 0), 0);
}

// Side i's link-local address once it has passed DAD (a tentative one is no GID yet), or "".
std::string link_local(const Pair& pair, int i) {
  std::string address;
  eventually(
      [&] {
        const RunResult r = pair.exec(i, {"ip", "-6", "-o", "addr", "show", "dev", pair.netdev(i),
                                          "scope", "link", "-tentative"});
        std::smatch m;
        if (std::regex_search(r.output, m, std::regex(R"(inet6 (fe80:[0-9a-f:]+)/)")))
          address = m[1].str();
        return !address.empty();
      },
      seconds(10));
  return address;
}

// rdma_cm over IPv6 addresses: the route, the neighbour (right after the devices came up, while
// the link-local addresses may still be in DAD: engine/net/neighbour.h rule 4) and the CM's
// IPv6 GIDs, with data checked ping by ping; then over the link-local addresses, which name
// their interface (fe80::...%xpv0: sin6_scope_id), as the kernel's rdma_cm takes them.
TEST_P(RdmacmTest, RpingOverIpv6Addresses) {
  Pair pair("xrcm-rping6", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  // Both ends' link-local addresses must have passed DAD: the client's is the source of its
  // connection, and a tentative one is no GID of its device yet.
  const std::string server_ll = link_local(pair, 0);
  ASSERT_FALSE(server_ll.empty());
  ASSERT_FALSE(link_local(pair, 1).empty()) << "the client's link-local address stayed tentative";
  const std::vector<std::pair<std::string, std::string>> addresses = {
      {pair.ip6(0), pair.ip6(0)},
      {server_ll + "%" + pair.netdev(0), server_ll + "%" + pair.netdev(1)}};
  int connections = 0;
  for (const auto& [listen, connect] : addresses) {
    SCOPED_TRACE(connect);
    auto [server, client] =
        server_client(pair, {"rping", "-s", "-V", "-C", "200", "-a", listen, "-p", "7176"},
                      {"rping", "-c", "-V", "-v", "-C", "200", "-a", connect, "-p", "7176"});
    EXPECT_EQ(client.status, 0) << client.output;
    EXPECT_EQ(server.status, 0) << server.output;
    EXPECT_EQ(rping_pings(client.output), 200u) << client.output.substr(0, 2000);
    EXPECT_EQ(client.output.find("mismatch"), std::string::npos);
    ++connections;
    // Each connection's REQ, RTU and DREQ/DREP reached the server's daemon, none dropped.
    const auto cm = stat(pair, 0).value("cm", nlohmann::json::object());
    EXPECT_GE(cm.value("mads_received", 0), 3 * connections);
    EXPECT_EQ(cm.value("mads_dropped", 0), 0);
  }
}

TEST_P(RdmacmTest, ConnectToAPortNobodyListensOnIsRejected) {
  Pair pair("xrcm-rej", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  auto r =
      run(pair.app(1, {"rping", "-c", "-C", "1", "-a", pair.ip(0), "-p", "7999"}), seconds(60));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("REJECTED"), std::string::npos) << r.output;
  const auto cm = stat(pair, 0).value("cm", nlohmann::json::object());
  EXPECT_EQ(cm.value("rej_sent", nlohmann::json::object()).value("invalid_service_id", 0), 1)
      << cm.dump();
  const auto client = stat(pair, 1).value("cm", nlohmann::json::object());
  EXPECT_EQ(client.value("rej_received", nlohmann::json::object()).value("invalid_service_id", 0),
            1)
      << client.dump();
}

TEST_P(RdmacmTest, UcmatoseEightConnections) {
  if (!have("ucmatose")) GTEST_SKIP() << "needs rdmacm-utils";
  Pair pair("xrcm-ucma", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  auto [server, client] = server_client(pair, {"ucmatose", "-c", "8", "-C", "10"},
                                        {"ucmatose", "-s", pair.ip(0), "-c", "8", "-C", "10"});
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_EQ(server.status, 0) << server.output;
  EXPECT_NE(client.output.find("test complete"), std::string::npos) << client.output;
}

TEST_P(RdmacmTest, CmtimeHundredConnections) {
  if (!have("cmtime")) GTEST_SKIP() << "needs rdmacm-utils";
  Pair pair("xrcm-cmtime", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  // The cmtime server serves until it is killed; the client measures and checks.
  auto [server, client] = server_client(pair, {"cmtime", "-c", "100"},
                                        {"cmtime", "-s", pair.ip(0), "-c", "100"}, seconds(180));
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_NE(client.output.find("connect      :"), std::string::npos) << client.output;
  EXPECT_NE(client.output.find("disconnect   :"), std::string::npos) << client.output;
  EXPECT_EQ(server.output.find("fail"), std::string::npos) << server.output;
  EXPECT_EQ(client.output.find("fail"), std::string::npos) << client.output;
}

TEST_P(RdmacmTest, UdaddyOverTheUdpPortSpace) {
  if (!have("udaddy")) GTEST_SKIP() << "needs rdmacm-utils";
  Pair pair("xrcm-udaddy", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  auto [server, client] = server_client(pair, {"udaddy"}, {"udaddy", "-s", pair.ip(0)});
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_EQ(server.status, 0) << server.output;
  EXPECT_NE(client.output.find("test complete"), std::string::npos) << client.output;
  EXPECT_NE(server.output.find("test complete"), std::string::npos) << server.output;
}

// A process killed with its connection open: its daemon sends the DREQ for it, the peer's
// rping sees DISCONNECTED, and neither daemon keeps anything of the dead process.
TEST_P(RdmacmTest, KilledProcessDisconnectsItsPeer) {
  Pair pair("xrcm-kill", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  Child server(pair.app(0, {"rping", "-s", "-C", "0", "-a", pair.ip(0), "-p", "7174"}));
  ASSERT_TRUE(eventually([&] { return listening(pair, server.pid()); }, seconds(20)));
  Child client(pair.app(1, {"rping", "-c", "-C", "0", "-a", pair.ip(0), "-p", "7174"}));
  auto established = [&] {
    for (const auto& id : cm_show(pair, 1).value("ids", nlohmann::json::array())) {
      if (id.value("cm_state", "") == "established") return true;
    }
    return false;
  };
  ASSERT_TRUE(eventually(established, seconds(30)));
  kill(client.pid(), SIGKILL);
  client.wait(seconds(10));
  // The peer learns it from the DREQ the dead process's daemon sends (DISCONNECTED), unless its
  // next RDMA operation reaches the dead process's memory first: the daemon released it with
  // the process, so that operation completes in error (as with the kernel, where the process's
  // files close in no set order). Either way rping stops at once.
  std::string out;
  const bool noticed = eventually(
      [&] {
        out += server.read_line(milliseconds(200));
        return out.find("DISCONNECT EVENT") != std::string::npos ||
               out.find("cq completion failed") != std::string::npos;
      },
      seconds(30));
  EXPECT_TRUE(noticed) << out;
  EXPECT_TRUE(eventually(
      [&] { return cm_show(pair, 1).value("ids", nlohmann::json::array()).empty(); }, seconds(10)));
  server.wait(seconds(10));
  EXPECT_TRUE(eventually(
      [&] { return cm_show(pair, 0).value("ids", nlohmann::json::array()).empty(); }, seconds(10)));
}

// rsockets (librdmacm's sockets over RDMA: rdma_cm ids, RDMA WRITE WITH IMM into credits the
// peer advertises, completion channels polled like sockets) in its three modes. rstream's two
// sides must run the same test, so both get the same options; -T v checks every byte.
TEST_P(RdmacmTest, RsocketsStreamBlockingNonblockingAndVerified) {
  if (!have("rstream") || !have("riostream")) GTEST_SKIP() << "needs rdmacm-utils";
  Pair pair("xrcm-rs", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  const std::vector<std::vector<std::string>> runs = {
      {"rstream", "-T", "b", "-S", "16384", "-C", "100"},
      {"rstream", "-T", "n", "-S", "1024", "-C", "1000"},
      {"rstream", "-T", "v", "-S", "100000", "-C", "20"},
      {"riostream", "-S", "100000", "-C", "10"},
  };
  for (const auto& argv : runs) {
    SCOPED_TRACE(argv[0] + " " + argv[2]);
    auto client_argv = argv;
    client_argv.insert(client_argv.begin() + 1, {"-s", pair.ip(0)});
    auto [server, client] = server_client(pair, argv, client_argv);
    EXPECT_EQ(client.status, 0) << client.output;
    EXPECT_EQ(server.status, 0) << server.output;
    // One result row: name, bytes, xfers, iterations, total, time, Gb/sec, usec/xfer.
    EXPECT_NE(client.output.find("custom"), std::string::npos) << client.output;
  }
}

// rcopy sends a file over an rsocket; the copy must be the file, byte for byte.
TEST_P(RdmacmTest, RcopyCopiesAFileExactly) {
  if (!have("rcopy")) GTEST_SKIP() << "needs rdmacm-utils";
  Pair pair("xrcm-rcopy", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  const std::string dir = "/tmp/xrcm-rcopy-" + std::to_string(getpid()) + "-" + port();
  ASSERT_EQ(run({"mkdir", "-p", dir}).status, 0);
  ASSERT_EQ(run({"sh", "-c", "head -c 3000017 /dev/urandom > " + dir + "/src"}).status, 0);
  Child server(pair.app(0, {"rcopy"}));  // serves until killed
  ASSERT_TRUE(eventually([&] { return listening(pair, server.pid()); }, seconds(20)));
  auto client =
      run(pair.app(1, {"rcopy", dir + "/src", pair.ip(0) + ":" + dir + "/copy"}), seconds(60));
  kill(server.pid(), SIGTERM);
  server.wait(seconds(10));
  EXPECT_EQ(client.status, 0) << client.output;
  EXPECT_NE(client.output.find("3000017 bytes"), std::string::npos) << client.output;
  EXPECT_EQ(run({"cmp", dir + "/src", dir + "/copy"}).status, 0);
  run({"rm", "-rf", dir});
}

// perftest connects its QPs through rdma_cm with -R. It makes two connections: a control
// connection, then the test's own. Its server listens for the second only after it accepted the
// first and destroyed that listener (perftest_communication.c: rdma_server_connect, then
// rdma_cm_server_connection's new listen id), so a client quick enough gets a REJ for a service
// nobody listens on yet (invalid service ID), with the kernel's CM as with ours. perftest's client
// then retries, but Debian 12's perftest (4.5-0.17) crashes in that retry (fixed upstream by
// 3d9d8d0, "Fix crashes and logical flaws in RDMA CM connection retry"): each program gets three
// tries, and only that REJ is forgiven.
TEST_P(RdmacmTest, PerftestOverRdmaCm) {
  if (!have("ib_send_bw")) GTEST_SKIP() << "needs perftest";
  Pair pair("xrcm-perf", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  int port = 18560;
  for (const char* program : {"ib_send_bw", "ib_write_bw", "ib_read_lat"}) {
    SCOPED_TRACE(program);
    RunResult server, client;
    for (int attempt = 0; attempt < 3; ++attempt) {
      // A port of its own each time: a killed server's listener is not yet gone when the next
      // one starts (the daemon drops it once it sees the process's connection close).
      const std::vector<std::string> args = {program, "-R", "-n",
                                             "200",   "-p", std::to_string(port++)};
      auto client_argv = args;
      client_argv.push_back(pair.ip(0));
      Child s(pair.app(0, args));
      if (!eventually([&] { return listening(pair, s.pid()) || s.exited(); }, seconds(20)) ||
          !listening(pair, s.pid())) {
        kill(s.pid(), SIGKILL);
        std::string out;
        for (std::string line = s.read_line(seconds(2)); !line.empty();
             line = s.read_line(seconds(2)))
          out += line + "\n";
        FAIL() << "the server never listened (attempt " << attempt << "):\n"
               << out << pair.exec(0, {xroce_bin(), "cm", "show", pair.dev(0)}).output;
      }
      client = run(pair.app(1, client_argv), seconds(120));
      if (attempt < 2 &&
          client.output.find("RDMA_CM_EVENT_REJECTED; error: 8.") != std::string::npos) {
        kill(s.pid(), SIGKILL);  // it waits for the connection the client gave up
        s.wait(seconds(10));
        continue;
      }
      server.output.clear();
      for (std::string line = s.read_line(seconds(30)); !line.empty();
           line = s.read_line(seconds(30)))
        server.output += line + "\n";
      server.status = s.wait(seconds(20));
      break;
    }
    EXPECT_EQ(client.status, 0) << client.output;
    EXPECT_EQ(server.status, 0) << server.output;
    EXPECT_NE(client.output.find("rdma_cm QPs\t : ON"), std::string::npos) << client.output;
  }
}

// qperf -cm1 sets its RC connections up through rdma_cm. (qperf 0.4.11's UD tests ignore -cm1 and
// build an address handle without a GRH, which a RoCE device refuses with EINVAL, as the
// kernel's rdma_check_ah_attr does for rxe and ConnectX: they are not run here.)
// qperf's server sends its rdma_cm port to the client before it calls rdma_listen
// (cm_open_server), so a client quick enough gets a REJ for a service nobody listens on yet, with
// the kernel's CM as with ours: each test gets ten tries, and only that REJ is forgiven. (On a
// loaded host the server loses that race often: three tries were once all rejected.)
TEST_P(RdmacmTest, QperfOverRdmaCm) {
  if (!have("qperf")) GTEST_SKIP() << "needs qperf";
  Pair pair("xrcm-qperf", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  Child server(pair.app(0, {"qperf", "-lp", "19766"}));  // serves until killed
  ASSERT_TRUE(eventually([&] { return pair.listening(0, 19766); }, seconds(20)));
  for (const char* test : {"rc_bw", "rc_lat", "rc_rdma_write_bw", "rc_rdma_read_lat"}) {
    RunResult client;
    for (int attempt = 0; attempt < 10; ++attempt) {
      client = run(pair.app(1, {"qperf", "-lp", "19766", "-cm1", "-t", "1", pair.ip(0), test}),
                   seconds(60));
      if (client.output.find("unexpected event from RDMA CM: Event rejected") == std::string::npos)
        break;
    }
    EXPECT_EQ(client.status, 0) << test << ": " << client.output;
    EXPECT_NE(client.output.find(std::string(test) + ":"), std::string::npos) << client.output;
    EXPECT_EQ(client.output.find("failed"), std::string::npos) << client.output;
  }
  kill(server.pid(), SIGTERM);
  server.wait(seconds(10));
}

// libfabric's verbs provider: RDM endpoints (ofi_rxm over verbs MSG endpoints, connected
// through rdma_cm) and DGRAM endpoints (UD), each with fi_pingpong's data check. (MSG endpoints
// directly: libfabric 1.17 binds fi_pingpong's passive endpoint to "localhost", which no RoCE
// device's GID matches, so the kernel's rdma_bind_addr refuses it too.)
TEST_P(RdmacmTest, LibfabricVerbsRdmAndDgram) {
  if (!have("fi_pingpong")) GTEST_SKIP() << "needs libfabric-bin";
  Pair pair("xrcm-ofi", next_subnet(), port());
  ASSERT_TRUE(pair.ready());
  for (const char* ep : {"rdm", "dgram"}) {
    SCOPED_TRACE(ep);
    const std::vector<std::string> args = {"fi_pingpong", "-p", "verbs", "-e", ep,
                                           "-c",          "-I", "100",   "-S", "1024"};
    // The server's control port is -B, the client's destination -P; the client's own source
    // port stays ephemeral (a fixed one would still be in TIME_WAIT for the next run).
    auto server_args = args;
    server_args.insert(server_args.end(), {"-B", "47600"});
    auto client_args = args;
    client_args.insert(client_args.end(), {"-P", "47600"});
    auto [server, client] = pair.server_client(server_args, client_args, "47600");
    EXPECT_EQ(client.status, 0) << client.output << server.output;
    EXPECT_EQ(server.status, 0) << server.output;
    EXPECT_NE(client.output.find("=100"), std::string::npos) << client.output;  // #ack
  }
}

// One namespace with both ends of a veth, a device on each: rping on one device (the MADs
// and the data loop back inside the daemon) and between the two devices of one host.
struct OneHost {
  std::string ns;
  explicit OneHost(const std::string& port) : ns("xrcm-lo-" + std::to_string(getpid())) {
    run({"ip", "netns", "add", ns});
    run({"ip", "-n", ns, "link", "add", "lv0", "type", "veth", "peer", "name", "lv1"});
    run({"ip", "-n", ns, "addr", "add", "198.18.250.1/24", "dev", "lv0"});
    run({"ip", "-n", ns, "addr", "add", "198.18.250.2/24", "dev", "lv1"});
    for (const char* dev : {"lo", "lv0", "lv1"})
      run({"ip", "-n", ns, "link", "set", dev, "up"});
    exec({xroce_bin(), "link", "add", "xlo0", "netdev", "lv0", "port", port, "queues", "1"});
    exec({xroce_bin(), "link", "add", "xlo1", "netdev", "lv1", "port", port, "queues", "1"});
  }
  ~OneHost() {
    exec({xroce_bin(), "link", "del", "xlo1"});
    exec({xroce_bin(), "link", "del", "xlo0"});
    run({"ip", "netns", "del", ns});
  }
  RunResult exec(std::vector<std::string> argv, milliseconds deadline = seconds(30)) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns});
    return run(argv, deadline);
  }
  std::vector<std::string> app(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", ns, xroce_bin(), "exec", "--"});
    return argv;
  }
  std::uint64_t mads_sent(const std::string& dev) const {
    auto j =
        nlohmann::json::parse(exec({xroce_bin(), "stat", dev, "--json"}).output, nullptr, false);
    return j.is_object() ? j.value("cm", nlohmann::json::object()).value("mads_sent", 0) : 0;
  }
};

TEST_P(RdmacmTest, RpingOnOneDeviceAndBetweenTwoDevicesOfOneHost) {
  OneHost host(port());
  ASSERT_TRUE(eventually(
      [&] {
        auto r = host.exec({xroce_bin(), "link", "show"});
        std::size_t active = 0;
        for (auto at = r.output.find("state ACTIVE"); at != std::string::npos;
             at = r.output.find("state ACTIVE", at + 1))
          ++active;
        return active == 2;
      },
      seconds(10)));
  for (const char* source : {"198.18.250.1", "198.18.250.2"}) {
    Child server(host.app({"rping", "-s", "-V", "-C", "100", "-a", "198.18.250.1", "-p", "7176"}));
    ASSERT_TRUE(eventually(
        [&] {
          return cm_listener(host.exec({xroce_bin(), "cm", "show", "xlo0", "--json"}).output,
                             server.pid());
        },
        seconds(20)));
    auto client = run(host.app({"rping", "-c", "-V", "-v", "-C", "100", "-I", source, "-a",
                                "198.18.250.1", "-p", "7176"}),
                      seconds(60));
    // On a failure, what both sides and both devices saw (this test failed once in CI without
    // a reason; the client's output alone did not say which side gave up).
    auto both_sides = [&] {
      std::string server_output;
      for (std::string line = server.read_line(milliseconds(200)); !line.empty();
           line = server.read_line(milliseconds(200)))
        server_output += line + "\n";
      return "server said:\n" + server_output +
             "xlo0: " + host.exec({xroce_bin(), "stat", "xlo0", "--json"}).output +
             "\nxlo1: " + host.exec({xroce_bin(), "stat", "xlo1", "--json"}).output;
    };
    EXPECT_EQ(client.status, 0) << source << ": " << client.output << both_sides();
    EXPECT_NE(client.output.find("rdma-ping-99: "), std::string::npos) << client.output;
    EXPECT_EQ(server.wait(seconds(20)), 0) << source << ": " << both_sides();
  }
  EXPECT_GE(host.mads_sent("xlo1"), 3u);  // the second client's REQ, RTU and DREQ or DREP
}

INSTANTIATE_TEST_SUITE_P(Ports, RdmacmTest, ::testing::Values("udp", "afxdp"));

}  // namespace
}  // namespace xroce::e2e
