// `xroce conform` on the wire against xroce: an xroce device in namespace a (each port kind),
// xroce-conform-agent under `xroce exec` there, and the scripted peer in namespace b on the
// other end of the veth (an AF_PACKET socket; b has no device), over IPv4 and over IPv6 (the
// agent then started by `xroce conform --agent-ns`). Every case must pass or be not
// applicable. Needs root.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "pair.h"

namespace xroce::e2e {
namespace {

// Runs `xroce conform --json` in namespace b against `peer` (with `extra` flags) and checks
// that every case passed or was not applicable, at least 100 of them passing.
void expect_conform_passes(Pair& pair, const std::string& what, const std::string& peer,
                           const std::vector<std::string>& extra) {
  const std::string pcap = (std::filesystem::temp_directory_path() /
                            ("conform-" + what + "-" + std::to_string(getpid()) + ".pcap"))
                               .string();
  std::vector<std::string> argv = {xroce_bin(), "conform", "--dev", pair.netdev(1), "--peer", peer,
                                   "--json",    "--pcap",  pcap};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const RunResult r = pair.exec(1, argv, seconds(600));
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "status " << r.status << ":\n" << r.output;
  const int pass = j["summary"]["pass"];
  const int fail = j["summary"]["fail"];
  std::string failures;
  std::set<std::string> failed;
  for (const auto& c : j["cases"]) {
    if (c["result"] == "fail") {
      failed.insert(c["name"].get<std::string>());
      failures += c["name"].get<std::string>() + ": expected " + c["expected"].get<std::string>() +
                  "; seen " + c["seen"].get<std::string>() + "\n";
    }
  }
  std::cout << "xroce, " << what << ": " << pass << " pass, " << fail << " fail, "
            << j["summary"]["not_applicable"] << " n/a; capture " << pcap << "\n";
  EXPECT_TRUE(failed.empty()) << failures;
  EXPECT_GE(pass, 100);
  EXPECT_EQ(r.status, fail == 0 ? 0 : 1);
  if (failed.empty()) std::filesystem::remove(pcap);
}

class ConformWire : public ::testing::TestWithParam<const char*> {};

// IPv4, the agent started by the test under `xroce exec` in namespace a.
TEST_P(ConformWire, EveryCasePassesAgainstXroce) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, XDP, AF_PACKET)";
  const std::string port = GetParam();
  Pair pair("xcf" + port.substr(0, 1), port == "udp" ? 61 : 60, port, /*device_on_b=*/false);
  ASSERT_TRUE(pair.ready()) << "xroce device in namespace a";
  const std::string tcp_port = "18516";
  Child agent(pair.app(0, {XROCE_CONFORM_AGENT, "--port", tcp_port, "--once"}));
  ASSERT_TRUE(eventually(
      [&] {
        auto r = pair.exec(0, {"ss", "-ltnH", "sport", "= :" + tcp_port});
        return r.output.find(tcp_port) != std::string::npos;
      },
      seconds(20)))
      << "the agent listens";
  expect_conform_passes(pair, port + "-ipv4", pair.ip(0), {});
}

// IPv6 on the wire, the agent started by `xroce conform --agent-ns` in namespace a (with the
// environment `xroce exec` gives there).
TEST_P(ConformWire, EveryCasePassesAgainstXroceOverIpv6WithAgentNs) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, XDP, AF_PACKET)";
  const std::string port = GetParam();
  Pair pair("xc6" + port.substr(0, 1), port == "udp" ? 63 : 62, port, /*device_on_b=*/false);
  ASSERT_TRUE(pair.ready()) << "xroce device in namespace a";
  expect_conform_passes(pair, port + "-ipv6", pair.ip6(0), {"--agent-ns", pair.netns(0)});
}

INSTANTIATE_TEST_SUITE_P(Ports, ConformWire, ::testing::Values("afxdp", "udp"));

}  // namespace
}  // namespace xroce::e2e
