// End-to-end: a peer's bad input across two namespaces (pair.h), on both port kinds. Each case
// runs xri_verbs (tests/interop/xri_verbs.c, the program the rxe interop suite runs against
// rxe, so the same steps give the same lines on both) as server in namespace a and client in b,
// and asserts what a NIC gives: the completion statuses in order, the QP states ibv_query_qp
// reports afterwards, and a hw_counter that moved. Needs root (namespaces, XDP); skips otherwise.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <regex>
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

INSTANTIATE_TEST_SUITE_P(Ports, BadInput, ::testing::Values("afxdp", "udp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace xroce::e2e
