// `xroce impair` against running xroceds (needs root): show and set round trip, bad input is
// refused with a non-zero exit and changes nothing; and with loss=0.02 set on both devices of a
// pair joined by a plain veth (no switch), ib_write_bw and ib_read_bw with 64 KiB messages
// complete on both sides with no retry-exceeded while both devices count the packets they
// dropped (rx_impair_drops), on both port kinds, over IPv4-mapped and over IPv6 GIDs (the
// IPv6 ICRC masks other header fields, and the udp port receives through the IPv6 socket path
// without an IPv4 identification to solve); loss=0 stops the drops. Completion and data counts,
// not speed (bench/bench-loss.sh measures the rates).
#include <gtest/gtest.h>
#include <unistd.h>

#include <future>
#include <nlohmann/json.hpp>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fabric.h"
#include "pair.h"

namespace xroce::e2e {
namespace {

using nlohmann::json;

json impair_show(const Pair& p, int side) {
  const RunResult r = p.exec(side, {xroce_bin(), "impair", "show", p.dev(side), "--json"});
  EXPECT_EQ(r.status, 0) << r.output;
  return json::parse(r.output, nullptr, false);
}

long long counter(const Pair& p, int side, const std::string& name) {
  const RunResult r = p.exec(side, {xroce_bin(), "stat", p.dev(side), "--json"});
  const auto j = json::parse(r.output, nullptr, false);
  if (!j.is_object()) return -1;
  return j.value("counters", json::object()).value(name, -1LL);
}

TEST(ImpairControl, SetRoundTripsAndBadInputChangesNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces)";
  Pair p("xrimc", 173, "udp", /*device_on_b=*/false);
  ASSERT_TRUE(p.ready()) << p.why_not();
  json shown = impair_show(p, 0);
  EXPECT_EQ(shown["device"], p.dev(0));
  EXPECT_EQ(shown["loss"], 0.0);  // off until set
  RunResult r = p.exec(0, {xroce_bin(), "impair", "set", p.dev(0), "loss=0.125", "seed=42"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("loss 0.125 seed 42"), std::string::npos) << r.output;
  shown = impair_show(p, 0);
  EXPECT_EQ(shown["loss"], 0.125);
  EXPECT_EQ(shown["seed"], 42);
  const std::vector<std::vector<std::string>> bad = {
      {"loss=1"},             // certain loss is no link
      {"loss=-0.1"},          // not a probability
      {"loss=lots"},          // not a number
      {"loss=nan"},           // not a number either
      {"seed=-1"},            // not unsigned
      {"delay=5"},            // unknown parameter
      {"loss"},               // not NAME=VALUE
      {"seed=7", "loss=2"}};  // one bad assignment: neither applies
  for (const auto& args : bad) {
    std::vector<std::string> argv = {xroce_bin(), "impair", "set", p.dev(0)};
    argv.insert(argv.end(), args.begin(), args.end());
    r = p.exec(0, argv);
    EXPECT_NE(r.status, 0) << args.back();
    EXPECT_NE(r.output.find("xroce impair set: "), std::string::npos) << r.output;
    EXPECT_EQ(impair_show(p, 0), shown) << args.back();
  }
  r = p.exec(0, {xroce_bin(), "impair", "set", p.dev(0), "loss=1"});
  EXPECT_NE(r.output.find("[0, 1)"), std::string::npos) << "says what is allowed: " << r.output;
  EXPECT_NE(p.exec(0, {xroce_bin(), "impair", "set", "nosuchdev", "loss=0.1"}).status, 0);
  EXPECT_NE(p.exec(0, {xroce_bin(), "impair", "show", "nosuchdev"}).status, 0);
  // Setting is root's: another user may look but not change it.
  r = p.exec(0, {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", xroce_bin(),
                 "impair", "set", p.dev(0), "loss=0"});
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("xroce impair set: Operation not permitted"), std::string::npos)
      << r.output;
  EXPECT_EQ(impair_show(p, 0)["loss"], 0.125);
}

using Param = PortFamily;

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  return port_family_name(info.param);
}

// perftest prints each side's GID as 16 decimal bytes ("GID: 32:01:00:02:..."); the IPv6 GID
// 2001:2:0:S::N leads with these.
constexpr const char* kIpv6GidPrefix = "GID: 32:01:00:02:";

class ImpairE2e : public ::testing::TestWithParam<Param> {};

TEST_P(ImpairE2e, WriteAndReadCompleteAtTwoPercentLossEachWay) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, XDP)";
  if (!have("ib_write_bw") || !have("ib_read_bw")) GTEST_SKIP() << "needs perftest";
  const Param& param = GetParam();
  const bool udp = param.port == "udp";
  Pair p(std::string(udp ? "xrimu" : "xrima") + (param.v6 ? "6" : ""),
         (udp ? 174 : 175) + (param.v6 ? 2 : 0), param.port);
  ASSERT_TRUE(p.ready()) << p.why_not();
  // Each side's GID index of the family under test (perftest's -x).
  std::string gid[2];
  for (int side = 0; side < 2; ++side) {
    const int index =
        gid_index(p.netns(side), p.dev(side), param.v6 ? p.ip6(side) : "::ffff:" + p.ip(side));
    ASSERT_GE(index, 0) << "no GID for side " << side;
    gid[side] = std::to_string(index);
  }
  for (int side = 0; side < 2; ++side) {
    const RunResult r = p.exec(side, {xroce_bin(), "impair", "set", p.dev(side), "loss=0.02",
                                      "seed=" + std::to_string(side + 1)});
    ASSERT_EQ(r.status, 0) << r.output;
  }
  for (const std::string program : {"ib_write_bw", "ib_read_bw"}) {
    SCOPED_TRACE(program);
    const std::vector<std::string> args = {"-s", "65536", "-n", "300"};
    std::vector<std::string> server = {program, "-d", p.dev(0), "-x", gid[0]};
    std::vector<std::string> client = {program, "-d", p.dev(1), "-x", gid[1]};
    server.insert(server.end(), args.begin(), args.end());
    client.insert(client.end(), args.begin(), args.end());
    client.push_back(p.ip(0));  // perftest's own TCP exchange stays on IPv4
    auto s = std::async(std::launch::async, [&] { return run(p.app(0, server), seconds(240)); });
    ASSERT_TRUE(eventually([&] { return p.listening(0, 18515); }, seconds(20)));
    const RunResult c = run(p.app(1, client), seconds(240));
    const RunResult sv = s.get();
    EXPECT_EQ(sv.status, 0) << sv.output;
    EXPECT_EQ(c.status, 0) << c.output;
    EXPECT_EQ(bandwidth_rows(c.output), 1) << c.output;
    EXPECT_EQ(c.output.find("RETRY_EXC"), std::string::npos) << c.output;
    // The QPs' paths are of the family under test: both GIDs perftest exchanged.
    std::size_t ipv6_gids = 0;
    for (auto at = c.output.find(kIpv6GidPrefix); at != std::string::npos;
         at = c.output.find(kIpv6GidPrefix, at + 1)) {
      ++ipv6_gids;
    }
    EXPECT_EQ(ipv6_gids, param.v6 ? 2u : 0u) << c.output;
  }
  // 600 messages of 16+ packets each way: both devices dropped some, and repaired them.
  for (int side = 0; side < 2; ++side) {
    EXPECT_GT(counter(p, side, "rx_impair_drops"), 20) << side;
  }
  EXPECT_GT(counter(p, 0, "rcvd_seq_err") + counter(p, 1, "rcvd_seq_err") +
                counter(p, 0, "completer_retry_err") + counter(p, 1, "completer_retry_err") +
                counter(p, 0, "adaptive_retransmits") + counter(p, 1, "adaptive_retransmits") +
                counter(p, 0, "tail_probes") + counter(p, 1, "tail_probes"),
            0)
      << "losses repaired by nothing";
  // The WRITEs' go-back-Ns sent their first packet twice (transport/requester.h retry).
  EXPECT_GT(counter(p, 0, "resend_repeats") + counter(p, 1, "resend_repeats"), 0);
  // The READs kept the responses after each gap and asked only for the missing ranges
  // (transport/read_repair.h): one range asked per run of lost responses, never more than were
  // placed ahead of the gaps.
  const long long ahead =
      counter(p, 0, "read_responses_ahead") + counter(p, 1, "read_responses_ahead");
  const long long asked = counter(p, 0, "read_ranges_asked") + counter(p, 1, "read_ranges_asked");
  EXPECT_GT(ahead, 0);
  EXPECT_GT(asked, 0);
  EXPECT_LE(asked, ahead);
  // Off again: a clean run drops nothing more.
  for (int side = 0; side < 2; ++side)
    ASSERT_EQ(p.exec(side, {xroce_bin(), "impair", "set", p.dev(side), "loss=0"}).status, 0);
  const long long drops = counter(p, 0, "rx_impair_drops") + counter(p, 1, "rx_impair_drops");
  const auto [sv, c] = p.server_client(
      {"ib_write_bw", "-d", p.dev(0), "-s", "4096", "-n", "200", "-x", gid[0]},
      {"ib_write_bw", "-d", p.dev(1), "-s", "4096", "-n", "200", "-x", gid[1]}, "18515");
  EXPECT_EQ(sv.status, 0) << sv.output;
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_EQ(counter(p, 0, "rx_impair_drops") + counter(p, 1, "rx_impair_drops"), drops);
}

INSTANTIATE_TEST_SUITE_P(Ports, ImpairE2e,
                         ::testing::Values(Param{"udp", false}, Param{"afxdp", false},
                                           Param{"udp", true}, Param{"afxdp", true}),
                         name_of);

}  // namespace
}  // namespace xroce::e2e
