// End-to-end: a peer's bad input across two namespaces (pair.h), on both port kinds. Each case
// runs xri_verbs (tests/interop/xri_verbs.c, the program the rxe interop suite runs against
// rxe, so the same steps give the same lines on both) as server in namespace a and client in b,
// and asserts what a NIC gives: the completion statuses in order, the QP states ibv_query_qp
// reports afterwards, and a hw_counter that moved. Needs root (namespaces, XDP); skips otherwise.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "pair.h"

namespace xroce::e2e {
namespace {

constexpr int kTcpPort = 18600;  // each Pair has its own namespaces: no clash between tests
constexpr const char* kFlushed = "Work Request Flushed Error";

std::string xri_verbs_bin() {
  return XROCE_XRI_VERBS;
}

// "wc SIDE WR_ID STATUS OPCODE BYTES" lines of xri_verbs: wr_id -> status text.
std::map<int, std::string> completions(const std::string& out, const std::string& side) {
  std::map<int, std::string> wcs;
  const std::regex line("^wc " + side + " (\\d+) (.+) (-?\\d+) (\\d+)$", std::regex::multiline);
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
    wcs[std::stoi((*it)[1])] = (*it)[2];
  return wcs;
}

// The "qp_state SIDE N" line (enum ibv_qp_state), or -1.
int qp_state(const std::string& out, const std::string& side) {
  std::smatch m;
  const std::regex line("^qp_state " + side + " (\\d+)$", std::regex::multiline);
  return std::regex_search(out, m, line) ? std::stoi(m[1]) : -1;
}

class BadInput : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    static int subnet = 150 + static_cast<int>(getpid() % 40);
    pair_ = std::make_unique<Pair>("xrbad", subnet++ % 250 + 1, GetParam());
    ASSERT_TRUE(pair_->ready()) << pair_->why_not();
  }

  // xri_verbs --test `test` with the server in namespace a, the client in b; both must run
  // their steps (exit 0). Output: server's and client's.
  std::pair<std::string, std::string> run_test(const std::string& test) {
    const std::string port = std::to_string(kTcpPort);
    auto [server, client] = run_server_client(
        pair_->app(
            0, {xri_verbs_bin(), "--server", "--port", port, "--gid-index", "0", "--test", test}),
        [&] { return pair_->listening(0, kTcpPort); },
        pair_->app(1, {xri_verbs_bin(), "--client", pair_->ip(0), "--port", port, "--gid-index",
                       "0", "--test", test}));
    EXPECT_EQ(server.status, 0) << server.output;
    EXPECT_EQ(client.status, 0) << client.output;
    return {server.output, client.output};
  }

  // hw_counters/<name> of host i reaches `at_least` within the deadline (the daemon writes the
  // tree as the counters move).
  bool counter_reaches(int i, const std::string& name, long long at_least) {
    return eventually([&] { return pair_->hw_counter(i, name) >= at_least; }, seconds(10));
  }

  std::unique_ptr<Pair> pair_;
};

// The positive control of the window cases: a type 2 window bound by the server over half its
// region; the client's WRITE through it lands there and READs back equal.
TEST_P(BadInput, WriteAndReadThroughABoundWindow) {
  auto [s, c] = run_test("mw");
  EXPECT_EQ(completions(c, "client"), (std::map<int, std::string>{{1, "success"}, {2, "success"}}))
      << c;
  EXPECT_NE(c.find("read_back equal"), std::string::npos) << c;
  std::smatch client_sum, server_sum;
  ASSERT_TRUE(std::regex_search(c, client_sum, std::regex("client_sum ([0-9a-f]+)"))) << c;
  ASSERT_TRUE(std::regex_search(s, server_sum, std::regex("server_sum ([0-9a-f]+)"))) << s;
  EXPECT_EQ(client_sum[1], server_sum[1]) << "the window's bytes differ from what was written";
  EXPECT_EQ(qp_state(c, "client"), IBV_QPS_RTS) << c;
}

// A WRITE whose rkey names a window that was bound and then invalidated (LOCAL_INV), or one
// allocated and never bound: no valid window has that R_Key (C10-72, o10-37.2.26; rxe_resp.c
// check_rkey -> rxe_lookup_mw fails: RESPST_ERR_RKEY_VIOLATION). The responder NAKs with a
// remote access error (a responder class C error) and goes to ERR (rxe_resp.c
// do_class_ac_error); the requester completes the WRITE with IBV_WC_REM_ACCESS_ERR, goes to ERR
// and flushes what follows (rxe_comp.c COMPST_ERROR). Counters: the responder's
// resp_remote_access_errors, the requester's req_remote_access_errors.
void expect_remote_access_error(const std::string& s, const std::string& c) {
  EXPECT_EQ(completions(c, "client"),
            (std::map<int, std::string>{{1, "remote access error"}, {2, kFlushed}}))
      << c << "\nserver:\n"
      << s;
  EXPECT_EQ(qp_state(c, "client"), IBV_QPS_ERR) << c;
  EXPECT_EQ(qp_state(s, "server"), IBV_QPS_ERR) << s;
  // The server's receive is flushed with its QP; nothing was delivered.
  EXPECT_EQ(completions(s, "server")[1000], kFlushed) << s;
}

TEST_P(BadInput, WriteThroughAnInvalidatedWindowIsARemoteAccessError) {
  auto [s, c] = run_test("mw_invalidated");
  const auto server_wcs = completions(s, "server");
  ASSERT_EQ(server_wcs.count(1) + server_wcs.count(2), 2u) << s;
  EXPECT_EQ(server_wcs.at(1), "success") << "bind: " << s;
  EXPECT_EQ(server_wcs.at(2), "success") << "LOCAL_INV: " << s;
  expect_remote_access_error(s, c);
  EXPECT_TRUE(counter_reaches(0, "resp_remote_access_errors", 1));
  EXPECT_TRUE(counter_reaches(1, "req_remote_access_errors", 1));
}

TEST_P(BadInput, WriteThroughAnUnboundWindowIsARemoteAccessError) {
  auto [s, c] = run_test("mw_unbound");
  expect_remote_access_error(s, c);
  EXPECT_TRUE(counter_reaches(0, "resp_remote_access_errors", 1));
  EXPECT_TRUE(counter_reaches(1, "req_remote_access_errors", 1));
}

// A type 2 bind reaching past its region (C10-75; rxe_mw.c rxe_check_bind_mw: -EINVAL, then
// rxe_req.c completes the WQE with IB_WC_MW_BIND_ERR, which ibv_wc_status_str calls "memory
// management operation error", and moves the QP to ERR): a local error,
// nothing goes on the wire; the SEND behind it is flushed; the peer's QP stays RTS.
TEST_P(BadInput, BindBeyondItsRegionFailsLocally) {
  auto [s, c] = run_test("bind_beyond");
  EXPECT_EQ(completions(c, "client"),
            (std::map<int, std::string>{{1, "memory management operation error"}, {2, kFlushed}}))
      << c;
  EXPECT_EQ(qp_state(c, "client"), IBV_QPS_ERR) << c;
  EXPECT_EQ(qp_state(s, "server"), IBV_QPS_RTS) << s;
  EXPECT_TRUE(counter_reaches(1, "req_cqe_error", 1));
  EXPECT_EQ(completions(s, "server").count(1000), 0u) << "the flushed SEND reached the peer: " << s;
}

// An XRC SEND naming an XRC SRQ of another XRC domain than the target QP's: the target must not
// deliver it (the XRCETH's SRQ has to share the TGT QP's XRC domain); it answers an invalid
// request NAK and goes to ERR; the INI QP completes the SEND with IBV_WC_REM_INV_REQ_ERR and
// flushes the next. The SEND to the right domain before it arrived. Counter: the requester's
// req_remote_invalid_request. (rxe has no XRC; ConnectX answers the same NAK.)
TEST_P(BadInput, XrcSendToAForeignDomainIsAnInvalidRequest) {
  auto [s, c] = run_test("xrc_foreign");
  EXPECT_EQ(completions(c, "client"),
            (std::map<int, std::string>{
                {1, "success"}, {2, "remote invalid request error"}, {3, kFlushed}}))
      << c << "\nserver:\n"
      << s;
  EXPECT_EQ(qp_state(c, "client"), IBV_QPS_ERR) << c;
  EXPECT_EQ(qp_state(s, "server"), IBV_QPS_ERR) << s;
  const auto server_wcs = completions(s, "server");
  const auto own_domain = server_wcs.find(1000);
  ASSERT_NE(own_domain, server_wcs.end()) << "the SEND to the target's own domain: " << s;
  EXPECT_EQ(own_domain->second, "success") << s;
  EXPECT_EQ(server_wcs.count(1500), 0u) << "the foreign domain's SRQ took a SEND: " << s;
  EXPECT_TRUE(counter_reaches(1, "req_remote_invalid_request", 1));
}

// FLUSH needs a peer that can send one: rdma-core 44 has no FLUSH verb (ibv_wr_flush came in
// v45), so the peer is the attack probe forging it from the QP's peer address (namespace b, a
// plain host here so its capture sees the answer before any XDP program could take it).
class ForgedFlush : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, XDP)";
    static int subnet = 200 + static_cast<int>(getpid() % 40);
    pair_ =
        std::make_unique<Pair>("xrflush", subnet++ % 250 + 1,
                               PairOptions{.port = GetParam(), .device_on_b = false, .device = ""});
    ASSERT_TRUE(pair_->ready()) << pair_->why_not();
    pcap_ = "/tmp/xroce-rxe16-flush-" + std::to_string(getpid()) + ".pcap";
  }
  void TearDown() override { std::remove(pcap_.c_str()); }

  std::unique_ptr<Pair> pair_;
  std::string pcap_;
};

// What a forged FLUSH brought about at the target.
struct FlushOutcome {
  std::string event;   // the target's async event line
  std::string state;   // its QP's state in `xroce qp show`
  int nak_syndrome;    // AETH syndrome of the answer on the wire (ICRC ok), or -1
  std::string detail;  // what the test saw, for failure messages
};

// A FLUSH (placement global, 64 bytes of the target's region) forged from the QP's peer with
// its expected PSN; the target's QP allows FLUSH_GLOBAL or not, its region never does.
FlushOutcome forged_flush(const Pair& pair, const std::string& pcap, bool qp_allows_flush) {
  FlushOutcome out{"", "", -1, ""};
  std::vector<std::string> argv = {XROCE_ATTACK_PROBE, "target", pair.dev(0), pair.ip(1), "1"};
  if (qp_allows_flush) argv.push_back("flush");
  Child target(pair.app(0, argv), Child::Input::kPipe);
  if (read_until(target, "ready", out.detail).empty()) return out;
  std::smatch mr, qp;
  if (!std::regex_search(out.detail, mr, std::regex("mr (\\d+) (0x[0-9a-f]+) \\d+")) ||
      !std::regex_search(out.detail, qp, std::regex("qp (\\d+) (\\d+)")))
    return out;
  const std::string qpn = qp[1];
  Child capture(
      pair.in(1, {"tcpdump", "-i", pair.netdev(1), "-U", "-n", "-w", pcap, "udp", "port", "4791"}));
  bool listening = false;
  for (int i = 0; i < 5 && !listening; ++i)
    listening = capture.read_line(seconds(10)).find("listening on") != std::string::npos;
  if (!listening) {
    out.detail += "tcpdump did not start\n";
    return out;
  }
  const auto forged = pair.exec(1, {XROCE_ATTACK_PROBE, "forge", pair.ip(1), pair.ip(0), "50000",
                                    qpn, qp[2], mr[2], mr[1], "64", "0", "flush"});
  out.detail += forged.output;
  out.event = read_until(target, "event", out.detail);
  const auto qps = nlohmann::json::parse(
      pair.exec(0, {xroce_bin(), "qp", "show", pair.dev(0), "--json"}).output, nullptr, false);
  if (qps.is_array()) {
    for (const auto& q : qps)
      if (std::to_string(q.value("qpn", 0u)) == qpn) out.state = q.value("state", "");
  }
  eventually(
      [&] {
        const auto frames = nlohmann::json::parse(
            run({xroce_bin(), "wire", "decode", "--json", pcap}).output, nullptr, false);
        if (!frames.is_array()) return false;
        for (const auto& f : frames) {
          if (f.contains("aeth") && f.value("icrc", "") == "ok")
            out.nak_syndrome = f["aeth"].value("syndrome", -1);
        }
        return out.nak_syndrome >= 0;
      },
      seconds(10));
  capture.wait(milliseconds(0));
  return out;
}

// The QP allows FLUSH_GLOBAL, the region does not: the placement type asks for an access the
// region does not grant (oA19-*; rxe_resp.c check_rkey looks the key up with
// IB_ACCESS_FLUSH_GLOBAL added: RESPST_ERR_RKEY_VIOLATION). A remote access error NAK (AETH
// syndrome 0x62), the QP in ERR with IBV_EVENT_QP_ACCESS_ERR ("local access violation work
// queue error"), resp_remote_access_errors.
TEST_P(ForgedFlush, FlushWithoutFlushAccessOnTheRegionIsARemoteAccessError) {
  const FlushOutcome out = forged_flush(*pair_, pcap_, true);
  EXPECT_NE(out.event.find("local access violation"), std::string::npos) << out.detail;
  EXPECT_EQ(out.nak_syndrome, 0x62) << out.detail;
  EXPECT_EQ(out.state, "ERR") << out.detail;
  EXPECT_TRUE(eventually([&] { return pair_->hw_counter(0, "resp_remote_access_errors") >= 1; },
                         seconds(10)));
}

// Neither the QP nor the region allows FLUSH: the QP's own access flags refuse the operation
// first (rxe_resp.c check_qp_attr_access: RESPST_ERR_UNSUPPORTED_OPCODE), an invalid request
// NAK (0x61), the QP in ERR with IBV_EVENT_QP_REQ_ERR; no remote access error is counted.
TEST_P(ForgedFlush, FlushToAQpWithoutFlushAccessIsAnInvalidRequest) {
  const FlushOutcome out = forged_flush(*pair_, pcap_, false);
  EXPECT_NE(out.event.find("invalid request"), std::string::npos) << out.detail;
  EXPECT_EQ(out.nak_syndrome, 0x61) << out.detail;
  EXPECT_EQ(out.state, "ERR") << out.detail;
  EXPECT_LE(pair_->hw_counter(0, "resp_remote_access_errors"), 0);
}

INSTANTIATE_TEST_SUITE_P(Ports, ForgedFlush, ::testing::Values("afxdp", "udp"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Ports, BadInput, ::testing::Values("afxdp", "udp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace xroce::e2e
