// `xroce conform` on the wire against xroce: an xroce device in namespace a (each port kind),
// xroce-conform-agent under `xroce exec` there, and the scripted peer in namespace b on the
// other end of the veth (an AF_PACKET socket; b has no device). Every case must pass or be
// not applicable. Needs root.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

#include "pair.h"

namespace xroce::e2e {
namespace {

class ConformWire : public ::testing::TestWithParam<const char*> {};

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
  const std::string pcap = (std::filesystem::temp_directory_path() /
                            ("conform-" + port + "-" + std::to_string(getpid()) + ".pcap"))
                               .string();
  const RunResult r = pair.exec(1,
                                {xroce_bin(), "conform", "--dev", pair.netdev(1), "--peer",
                                 pair.ip(0), "--json", "--pcap", pcap},
                                seconds(600));
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
  std::cout << "xroce over " << port << ": " << pass << " pass, " << fail << " fail, "
            << j["summary"]["not_applicable"] << " n/a; capture " << pcap << "\n";
  EXPECT_TRUE(failed.empty()) << failures;
  EXPECT_GE(pass, 100);
  EXPECT_EQ(r.status, fail == 0 ? 0 : 1);
  if (failed.empty()) std::filesystem::remove(pcap);
}

INSTANTIATE_TEST_SUITE_P(Ports, ConformWire, ::testing::Values("afxdp", "udp"));

}  // namespace
}  // namespace xroce::e2e
