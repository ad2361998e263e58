// xroce-switch between namespaces (no RDMA): raw RoCEv2 frames built with engine/wire go from
// namespace a through the switch in m to namespace b, where the test reads them back. Checks
// the ECN marking rule, that marking keeps IPv4 checksums and ICRCs valid (also as
// `xroce wire decode` and tshark read a capture of what arrived), the rate limit, the
// impairments, and that the statistics agree with what the receiver counted. Needs root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "switch_fabric.h"
#include "wire/frame.h"
#include "wire/pcap.h"

namespace xroce::swtest {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
namespace w = xroce::wire;

constexpr std::size_t kPayloadBytes = 1000;
constexpr int kSubnet = 77;

// A RoCEv2 frame from a to b (or back when `reverse`): PSN = seq, the seq also in the payload.
std::vector<std::uint8_t> roce_frame(std::uint32_t seq, std::uint8_t tos, bool ipv6,
                                     w::Opcode opcode = w::Opcode::kRcSendOnly,
                                     bool reverse = false) {
  w::FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0x0a, 0x01};
  a.dst_mac = {0x02, 0, 0, 0, 0x0b, 0x01};
  if (ipv6) {
    std::array<std::uint8_t, 16> ip{0x20, 0x01, 0x00, 0x02, 0x00, kSubnet};
    ip[15] = 1;
    a.src_ip = w::IpAddr::v6(ip);
    ip[15] = 2;
    a.dst_ip = w::IpAddr::v6(ip);
  } else {
    a.src_ip = w::IpAddr::v4(0xC6120001 | kSubnet << 8);  // 198.18.77.1
    a.dst_ip = w::IpAddr::v4(0xC6120002 | kSubnet << 8);
  }
  if (reverse) {
    std::swap(a.src_mac, a.dst_mac);
    std::swap(a.src_ip, a.dst_ip);
  }
  a.traffic_class = tos;
  a.ipv4_id = static_cast<std::uint16_t>(seq);
  w::TransportHeaders h;
  h.bth.opcode = opcode;
  h.bth.dest_qp = w::Qpn(0x12);
  h.bth.psn = w::Psn(seq);
  if (opcode == w::Opcode::kRcWriteOnly) h.reth = w::Reth{0x1000, w::Rkey(0x77), kPayloadBytes};
  std::vector<std::uint8_t> payload(kPayloadBytes, 0x5a);
  w::store_be32(payload.data(), seq);
  std::vector<std::uint8_t> frame(w::frame_bytes(a, h, payload.size()));
  const auto n = w::encode_frame(a, h, payload, frame);
  EXPECT_TRUE(n.ok());
  return frame;
}

// The same frame to UDP port 4792: not RoCE, so never impaired.
std::vector<std::uint8_t> non_roce_frame(std::uint32_t seq) {
  auto f = roce_frame(seq, 0, false);
  w::store_be16(f.data() + 14 + 20 + 2, 4792);  // UDP checksum is 0: nothing else to fix
  return f;
}

// Sends frames in bursts of `burst`, at most one burst per millisecond, and before each next
// burst waits until the switch has taken in all but kMaxAhead of the frames sent so far on
// `ingress` (its `rx` counter). A switch ring holds 256 frames: a loaded host that leaves the
// switch unscheduled for a few milliseconds would otherwise overflow it (`rx_ring_drops`), which
// is not what these tests are about. A switch that keeps up is never waited for, so its queue,
// which drains at the configured rate, fills as fast as the frames are sent.
void send_paced(RawSocket& s, const std::vector<std::vector<std::uint8_t>>& frames, int burst,
                SwitchFabric& fabric, const std::string& ingress) {
  constexpr std::uint64_t kMaxAhead = 128;
  auto next = std::chrono::steady_clock::now();
  std::uint64_t taken = 0;  // the switch's rx when last asked
  for (std::size_t i = 0; i < frames.size(); ++i) {
    ASSERT_TRUE(s.send(frames[i])) << "frame " << i;
    if ((i + 1) % static_cast<std::size_t>(burst) != 0) continue;
    const std::uint64_t sent = i + 1;
    nlohmann::json stats;
    const bool caught_up =
        sent <= taken + kMaxAhead || e2e::eventually(
                                         [&] {
                                           auto now = fabric.stats_now();
                                           if (!now) return false;
                                           stats = *now;
                                           taken = SwitchFabric::port(stats, ingress)["rx"];
                                           return sent <= taken + kMaxAhead;
                                         },
                                         seconds(20));
    ASSERT_TRUE(caught_up) << "the switch took " << taken << " of " << sent << " frames on "
                           << ingress << ": " << stats.dump();
    next += milliseconds(1);
    std::this_thread::sleep_until(next);
  }
}

struct Received {
  std::vector<std::uint8_t> bytes;
  std::chrono::nanoseconds at;  // the kernel's receive timestamp (RawSocket::last_arrival)
};

// Reads frames until `count` arrived or nothing came for `quiet` (a bound on the wait, not a
// synchronisation: callers know from the switch's counters how many to expect).
std::vector<Received> receive(RawSocket& s, std::size_t count, milliseconds quiet = seconds(5)) {
  std::vector<Received> got;
  while (got.size() < count) {
    auto f = s.receive(quiet);
    if (!f) break;
    got.push_back({std::move(*f), s.last_arrival()});
  }
  return got;
}

std::uint16_t udp_dport(const std::vector<std::uint8_t>& f) {
  return f.size() >= 38 ? w::load_be16(f.data() + 36) : 0;  // IPv4 frames only
}

// Lines of tshark output that are frame numbers (it also prints a warning when run as root).
std::uint64_t frame_numbers(const std::string& tshark_output) {
  std::istringstream lines(tshark_output);
  std::uint64_t n = 0;
  for (std::string line; std::getline(lines, line);)
    n += !line.empty() && std::all_of(line.begin(), line.end(), ::isdigit);
  return n;
}

class SwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
  }
  // Waits until the switch has taken in the `sent` frames from a and forwarded to b all it did
  // not drop.
  bool forwarded_all(SwitchFabric& fabric, std::uint64_t sent, nlohmann::json* stats) {
    return e2e::eventually(
        [&] {
          auto s = fabric.stats_now();
          if (!s) return false;
          *stats = *s;
          const auto a = SwitchFabric::port(*s, kPortA);
          const auto b = SwitchFabric::port(*s, kPortB);
          return a["rx"] == sent && b["queue_bytes"] == 0 &&
                 b["tx"].get<std::uint64_t>() + b["dropped_full"].get<std::uint64_t>() +
                         a["dropped_impair"].get<std::uint64_t>() ==
                     a["rx"].get<std::uint64_t>();
        },
        seconds(20));
  }
};

// ECN: ECT(0), ECT(1) and Not-ECT frames in turn, 26 times faster than the 10 Mbit/s limit, so
// the queue grows by about a frame per frame sent. Frame i finds at most i frames queued, so
// the first KMIN / frame-size frames can never be marked; well past KMAX every ECT frame must
// be; Not-ECT frames never are.
class SwitchEcnTest : public SwitchTest, public ::testing::WithParamInterface<bool> {};

TEST_P(SwitchEcnTest, MarksOnlyEctFramesByQueueDepthAndKeepsThemValid) {
  const bool ipv6 = GetParam();
  SwitchFabric fabric(ipv6 ? "xrswe6" : "xrswe4");
  ASSERT_TRUE(fabric.ok());
  constexpr std::uint32_t kFrames = 300;
  constexpr int kRateMbit = 10;
  const std::size_t frame_bytes = roce_frame(0, 2, ipv6).size();
  const std::size_t kmin = 20 * frame_bytes;
  const std::size_t kmax = 60 * frame_bytes;
  ASSERT_TRUE(fabric.start_switch(
      {"--rate-mbit", std::to_string(kRateMbit), "--buffer", "1000000", "--ecn",
       std::to_string(kmin) + "," + std::to_string(kmax) + ",0.5", "--seed", "7"}));
  RawSocket tx(fabric.ns_a(), "xsa");
  RawSocket rx(fabric.ns_b(), "xsb");
  ASSERT_TRUE(tx.ok() && rx.ok());
  const std::uint8_t tos_of[3] = {0x02, 0x01, 0x00};  // ECT(0), ECT(1), Not-ECT; DSCP 0
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::uint32_t i = 0; i < kFrames; ++i)
    frames.push_back(roce_frame(i, tos_of[i % 3], ipv6));
  send_paced(tx, frames, 32, fabric, kPortA);
  const auto got = receive(rx, kFrames);
  ASSERT_EQ(got.size(), kFrames) << fabric.describe_counters();

  w::pcap::Writer capture;
  std::uint64_t ce = 0;
  std::size_t marked_late = 0;
  for (std::uint32_t i = 0; i < kFrames; ++i) {
    const auto& f = got[i].bytes;
    capture.add(f, static_cast<std::uint64_t>(i) * 1000);
    const auto d = w::decode_frame(f);  // verifies the IPv4 header checksum
    ASSERT_TRUE(d.ok()) << "frame " << i << ": " << w::to_string(d.error());
    EXPECT_TRUE(d->icrc_ok) << "frame " << i;
    ASSERT_EQ(d->hdr.bth.psn.value(), i) << "frames arrive once each, in order";
    const auto sent = static_cast<w::Ecn>(tos_of[i % 3]);
    const bool is_ce = d->ecn == w::Ecn::kCe;
    ce += is_ce;
    // Unmarked frames keep their codepoint; Not-ECT ones and those below KMIN stay unmarked.
    EXPECT_TRUE(is_ce || d->ecn == sent) << "frame " << i;
    EXPECT_FALSE(is_ce && sent == w::Ecn::kNotEct) << "Not-ECT frame " << i << " marked";
    EXPECT_FALSE(is_ce && i * frame_bytes <= kmin) << "frame " << i << " marked below KMIN";
    if (i >= 250 && sent != w::Ecn::kNotEct) {
      EXPECT_TRUE(is_ce) << "ECT frame " << i << " not marked far above KMAX";
      marked_late += is_ce;
    }
  }
  EXPECT_GT(ce, marked_late) << "some frames between KMIN and KMAX are marked too";
  // The rate once the first burst (the limiter's 100 us tolerance) is through: the bytes after
  // frame 20 over the time they took to arrive, by the kernel's receive timestamps (when the
  // switch sent them, not when this process read them). Only the limit is asserted: a loaded
  // host can make the switch slower, never faster; how fast it gets is for benchmarks.
  const double seconds_taken = std::chrono::duration<double>(got.back().at - got[20].at).count();
  const double mbit = static_cast<double>((kFrames - 21) * frame_bytes) * 8 / seconds_taken / 1e6;
  EXPECT_LT(mbit, kRateMbit * 1.05);

  int status = -1;
  const auto stats = fabric.stop_switch(&status);
  EXPECT_EQ(status, 0);
  ASSERT_TRUE(stats);
  const auto a = SwitchFabric::port(*stats, kPortA);
  const auto b = SwitchFabric::port(*stats, kPortB);
  EXPECT_EQ(a["rx"], kFrames) << stats->dump();
  EXPECT_EQ(b["tx"], kFrames) << stats->dump();
  EXPECT_EQ(b["tx_bytes"], kFrames * frame_bytes);
  EXPECT_EQ(b["marked"], ce) << stats->dump();
  EXPECT_EQ(b["dropped_full"], 0);
  EXPECT_GT(b["queue_max_bytes"].get<std::size_t>(), kmax);
  EXPECT_LE(b["queue_p99_bytes"].get<std::size_t>(), b["queue_max_bytes"].get<std::size_t>());
  EXPECT_EQ(a["marked"], 0);

  // What arrived, as the project's dissector and tshark read it.
  const std::string pcap =
      "/tmp/xrswe-" + std::to_string(getpid()) + (ipv6 ? "-6" : "-4") + ".pcap";
  std::ofstream(pcap, std::ios::binary)
      .write(reinterpret_cast<const char*>(capture.bytes().data()),
             static_cast<std::streamsize>(capture.bytes().size()));
  const auto decoded = e2e::run({e2e::xroce_bin(), "wire", "decode", "--json", pcap});
  ASSERT_EQ(decoded.status, 0) << decoded.output;
  const auto frames_json = nlohmann::json::parse(decoded.output, nullptr, false);
  ASSERT_TRUE(frames_json.is_array()) << decoded.output;
  ASSERT_EQ(frames_json.size(), kFrames);
  for (const auto& f : frames_json) {
    EXPECT_EQ(f["status"], "ok") << f.dump();
    EXPECT_EQ(f["icrc"], "ok") << f.dump();
  }
  if (e2e::run({"sh", "-c", "command -v tshark"}).status == 0) {
    const std::string ce_filter = ipv6 ? "ipv6.tclass.ecn == 3" : "ip.dsfield.ecn == 3";
    const auto t = e2e::run({"tshark", "-n", "-r", pcap, "-o", "ip.check_checksum:TRUE", "-Y",
                             ce_filter, "-T", "fields", "-e", "frame.number"},
                            seconds(60));
    EXPECT_EQ(frame_numbers(t.output), ce) << t.output;
    if (!ipv6) {
      const auto bad = e2e::run({"tshark", "-n", "-r", pcap, "-o", "ip.check_checksum:TRUE", "-Y",
                                 "ip.checksum.status != 1", "-T", "fields", "-e", "frame.number"},
                                seconds(60));
      EXPECT_EQ(bad.status, 0);
      EXPECT_EQ(frame_numbers(bad.output), 0u) << "IPv4 checksums tshark does not call good";
    }
  }
  std::remove(pcap.c_str());
}

INSTANTIATE_TEST_SUITE_P(Families, SwitchEcnTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ipv6" : "ipv4"; });

// --drop-nth with --match-opcode and --from: only the 3rd RDMA WRITE ONLY that arrives on the
// port towards a is dropped; the same opcode coming from b does not count.
TEST_F(SwitchTest, DropNthDropsExactlyThatFrame) {
  SwitchFabric fabric("xrswd");
  ASSERT_TRUE(fabric.ok());
  ASSERT_TRUE(fabric.start_switch({"--drop-nth", "3", "--match-opcode", "0x0a", "--from", kPortA}));
  RawSocket at_a(fabric.ns_a(), "xsa");
  RawSocket at_b(fabric.ns_b(), "xsb");
  ASSERT_TRUE(at_a.ok() && at_b.ok());
  // From b first: five writes that must all arrive at a.
  std::vector<std::vector<std::uint8_t>> back;
  for (std::uint32_t i = 0; i < 5; ++i)
    back.push_back(roce_frame(100 + i, 0, false, w::Opcode::kRcWriteOnly, true));
  send_paced(at_b, back, 8, fabric, kPortB);
  EXPECT_EQ(receive(at_a, back.size()).size(), back.size());
  // From a: sends at even PSNs, writes at odd ones; the third write is PSN 5.
  std::vector<std::vector<std::uint8_t>> forth;
  for (std::uint32_t i = 0; i < 20; ++i)
    forth.push_back(
        roce_frame(i, 0, false, i % 2 ? w::Opcode::kRcWriteOnly : w::Opcode::kRcSendOnly));
  send_paced(at_a, forth, 8, fabric, kPortA);
  nlohmann::json stats;
  ASSERT_TRUE(forwarded_all(fabric, forth.size(), &stats)) << stats.dump();
  const auto got = receive(at_b, forth.size() - 1);
  std::vector<std::uint32_t> psns;
  for (const auto& f : got) {
    const auto d = w::decode_frame(f.bytes);
    ASSERT_TRUE(d.ok());
    psns.push_back(d->hdr.bth.psn.value());
  }
  std::vector<std::uint32_t> expected;
  for (std::uint32_t i = 0; i < 20; ++i)
    if (i != 5) expected.push_back(i);
  EXPECT_EQ(psns, expected);
  EXPECT_FALSE(at_b.receive(milliseconds(200))) << "nothing else arrives";
  EXPECT_EQ(SwitchFabric::port(stats, kPortA)["dropped_impair"], 1) << stats.dump();
  EXPECT_EQ(SwitchFabric::port(stats, kPortB)["dropped_impair"], 0) << stats.dump();
  EXPECT_EQ(SwitchFabric::port(stats, kPortA)["rx"], 20);
  EXPECT_EQ(SwitchFabric::port(stats, kPortB)["tx"], 19);
  int status = -1;
  const auto final_stats = fabric.stop_switch(&status);
  EXPECT_EQ(status, 0);
  ASSERT_TRUE(final_stats) << "statistics written at exit";
  EXPECT_EQ(SwitchFabric::port(*final_stats, kPortA)["dropped_impair"], 1);
}

// --loss: RoCE frames only, at about the configured rate, the same frames for the same seed,
// and the switch's count is the receiver's.
TEST_F(SwitchTest, SeededLossDropsOnlyRoceFrames) {
  constexpr std::uint32_t kRoce = 400;
  constexpr std::uint32_t kOther = 100;
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::uint32_t i = 0; i < kRoce + kOther; ++i)
    frames.push_back(i % 5 == 4 ? non_roce_frame(i) : roce_frame(i, 0, false));
  std::set<std::uint32_t> lost_in_run[2];
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    SwitchFabric fabric("xrswl" + std::to_string(run));
    ASSERT_TRUE(fabric.ok());
    ASSERT_TRUE(fabric.start_switch({"--loss", "0.25", "--seed", "3"}));
    RawSocket tx(fabric.ns_a(), "xsa");
    RawSocket rx(fabric.ns_b(), "xsb");
    ASSERT_TRUE(tx.ok() && rx.ok());
    send_paced(tx, frames, 16, fabric, kPortA);
    nlohmann::json stats;
    ASSERT_TRUE(forwarded_all(fabric, frames.size(), &stats)) << stats.dump();
    const std::uint64_t dropped = SwitchFabric::port(stats, kPortA)["dropped_impair"];
    const auto got = receive(rx, frames.size() - dropped);
    ASSERT_EQ(got.size(), frames.size() - dropped) << fabric.describe_counters();
    std::set<std::uint32_t> seen;
    std::uint32_t other = 0;
    for (const auto& f : got) {
      if (udp_dport(f.bytes) == 4792) {
        ++other;
        continue;
      }
      const auto d = w::decode_frame(f.bytes);
      ASSERT_TRUE(d.ok());
      seen.insert(d->hdr.bth.psn.value());
    }
    EXPECT_EQ(other, kOther) << "non-RoCE frames are never dropped";
    for (std::uint32_t i = 0; i < kRoce + kOther; ++i)
      if (i % 5 != 4 && !seen.contains(i)) lost_in_run[run].insert(i);
    EXPECT_EQ(lost_in_run[run].size(), dropped);
    // Binomial(400, 0.25): mean 100, sd 8.7; these bounds are 4.6 sd away.
    EXPECT_GT(dropped, 60u);
    EXPECT_LT(dropped, 140u);
  }
  EXPECT_EQ(lost_in_run[0], lost_in_run[1]) << "the same seed drops the same frames";
}

}  // namespace
}  // namespace xroce::swtest
