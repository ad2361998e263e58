// DCQCN in the data path's workers (engine/daemon/worker.h), with real threads, io_uring sleeps
// and the real transport over in-process pipe ports (no namespaces, no root). A sender datapath
// A and a receiver datapath B; the pipe from A to B can set CE on A's data frames as a
// congested switch would. Checked: B's CNP byte for byte (decoded with engine/wire), CNP
// moderation by min_time_between_cnps, no CNP while np_enable is off or for a CE-marked ACK, the
// rate cut a CNP causes at A, the pacer's spacing of A's packets at that rate without holding
// A's other QP, ECT(0) on data while rp_enable is on, and the device counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "pipe_fabric.h"
#include "wire/frame.h"

namespace xroce::daemon::test {
namespace {

using namespace std::chrono_literals;
using device::Counter;
using transport::Completion;
using transport::WcStatus;
using transport::WrOpcode;

constexpr std::uint8_t kDataTos = 26 << 2;  // DSCP 26 (priority 3), as production RoCE uses
constexpr std::size_t kMemBytes = 1 << 20;
constexpr std::uint32_t kMtu = 1024;
constexpr double kLineRateMbps = 100'000;

struct Retries {
  std::uint8_t timeout = 16;  // ~268 ms: no retransmission while a QP is paced slowly
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;  // 7 = infinite
};

void place_qp(Side& s, wire::Qpn qpn, wire::Qpn peer, std::uint32_t src, std::uint32_t dst,
              Retries retries = {}, std::uint32_t worker = 0) {
  s.place_qp(QpSetup{.qpn = qpn,
                     .peer = peer,
                     .av = address(src, dst, kDataTos),
                     .timeout = retries.timeout,
                     .retry_cnt = retries.retry_cnt,
                     .rnr_retry = retries.rnr_retry,
                     .worker = worker,
                     .window = std::nullopt});
}

const wire::Qpn kQpA(0x11), kQpB(0x22);    // the pair the CE marks hit
const wire::Qpn kQpA2(0x13), kQpB2(0x24);  // a second pair, never marked

// The pipe fabric at a 100 Gb/s line rate, with two RC pairs between A and B.
struct Fabric : PipeFabric {
  explicit Fabric(std::uint32_t a_workers = 1)
      : PipeFabric(a_workers, kMemBytes,
                   transport::access::kLocalWrite | transport::access::kRemoteWrite) {
    for (Side* s : {&a, &b})
      s->set_cc([](cc::CcDevice& d) { d.line_rate_mbps = kLineRateMbps; });
  }
  void connect(Retries a_retries = {}, std::uint32_t a_worker = 0) {
    place_qp(a, kQpA, kQpB, kIpA, kIpB, a_retries, a_worker);
    place_qp(b, kQpB, kQpA, kIpB, kIpA);
    place_qp(a, kQpA2, kQpB2, kIpA, kIpB);
    place_qp(b, kQpB2, kQpA2, kIpB, kIpA);
  }
  void write_and_wait(wire::Qpn qpn, std::uint32_t bytes) {
    const std::size_t before = a.mailbox(qpn).completions.size();
    a.write(qpn, before, bytes, b.mr.rkey.value());
    const auto done = a.mailbox(qpn).wait(before + 1);
    ASSERT_EQ(done.size(), before + 1);
    EXPECT_EQ(done.back().status, WcStatus::kSuccess);
  }
};

std::vector<wire::DecodedFrame> decoded(const std::vector<SentFrame>& frames,
                                        std::vector<std::uint64_t>* times = nullptr) {
  std::vector<wire::DecodedFrame> out;
  for (const auto& f : frames) {
    auto d = wire::decode_frame(f.bytes);
    EXPECT_TRUE(d.ok());
    if (!d) continue;
    out.push_back(*d);
    if (times != nullptr) times->push_back(f.at_ns);
  }
  return out;
}

std::vector<std::vector<std::uint8_t>> cnps_sent(PipePort& port) {
  std::vector<std::vector<std::uint8_t>> out;
  for (const auto& f : port.sent()) {
    auto d = wire::decode_frame(f.bytes);
    if (d && d->hdr.bth.opcode == wire::Opcode::kCnp) out.push_back(f.bytes);
  }
  return out;
}

TEST(DatapathCc, CeMarkedWriteGetsOneCnpWithTheProtocolBytes) {
  Fabric f;
  f.b.set_cc([](cc::CcDevice& d) {
    d.params.np_enable_mask = cc::kAllPriorities;
    d.params.min_time_between_cnps = 1'000'000;  // 1 s: one CNP in this test
  });
  f.connect();
  f.a.port->mark_ce = true;
  f.write_and_wait(kQpA, 100);
  ASSERT_TRUE(eventually([&] { return f.b.counter(Counter::kNpCnpSent) == 1; }));
  ASSERT_TRUE(eventually([&] { return f.a.counter(Counter::kRpCnpHandled) == 1; }));

  const auto cnps = cnps_sent(*f.b.port);
  ASSERT_EQ(cnps.size(), 1u);
  const std::vector<std::uint8_t>& bytes = cnps[0];
  EXPECT_EQ(bytes.size(), 74u);  // docs/protocol.md §5.3: IPv4, no VLAN
  const auto d = wire::decode_frame(bytes);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->icrc_ok);
  EXPECT_EQ(d->hdr.bth.opcode, wire::Opcode::kCnp);
  EXPECT_TRUE(d->hdr.bth.becn);
  EXPECT_FALSE(d->hdr.bth.fecn);
  EXPECT_FALSE(d->hdr.bth.solicited);
  EXPECT_FALSE(d->hdr.bth.ack_req);
  EXPECT_EQ(d->hdr.bth.pkey, 0xFFFF);
  EXPECT_EQ(d->hdr.bth.dest_qp, kQpA);  // the QP that sent the marked data
  EXPECT_EQ(d->hdr.bth.psn.value(), 0u);
  EXPECT_EQ(d->addr.src_ip, wire::IpAddr::v4(kIpB));
  EXPECT_EQ(d->addr.dst_ip, wire::IpAddr::v4(kIpA));
  EXPECT_EQ(d->addr.traffic_class, 48 << 2);  // cnp_dscp 48, Not-ECT
  EXPECT_EQ(d->udp_length, 40);
  EXPECT_TRUE(d->payload.empty());
  constexpr std::size_t kBthOffset = 14 + 20 + 8;
  EXPECT_EQ(bytes[kBthOffset], 0x81);
  EXPECT_EQ(bytes[kBthOffset + 4] & 0xC0, 0x40);  // BECN set, FECN clear
  for (std::size_t i = 0; i < 16; ++i)
    EXPECT_EQ(bytes[kBthOffset + 12 + i], 0) << "reserved byte " << i;

  // Counters at both ends agree with the wire.
  EXPECT_TRUE(eventually([&] { return f.b.counter(Counter::kNpEcnMarkedRocePackets) >= 1; }));
  EXPECT_EQ(f.a.counter(Counter::kCnpRcvd), 1u);
  EXPECT_EQ(f.a.counter(Counter::kRpCnpIgnored), 0u);
  EXPECT_EQ(f.b.counter(Counter::kNpCnpSent), 0u + cnps.size());
}

TEST(DatapathCc, CnpsToOneQpAreSpacedByMinTimeBetweenCnps) {
  Fabric f;
  constexpr std::uint32_t kMinGapUs = 150'000;  // long against any scheduling delay
  f.b.set_cc([](cc::CcDevice& d) {
    d.params.np_enable_mask = cc::kAllPriorities;
    d.params.min_time_between_cnps = kMinGapUs;
  });
  f.connect();
  f.a.port->mark_ce = true;
  f.write_and_wait(kQpA, 8 * kMtu);  // 8 marked packets inside one gap
  ASSERT_TRUE(eventually([&] { return cnps_sent(*f.b.port).size() == 1; }));
  std::uint64_t first_ns = 0;
  for (const auto& sent : f.b.port->sent()) {
    const auto d = wire::decode_frame(sent.bytes);
    if (first_ns == 0 && d && d->hdr.bth.opcode == wire::Opcode::kCnp) first_ns = sent.at_ns;
  }
  ASSERT_TRUE(eventually([&] { return f.b.counter(Counter::kNpEcnMarkedRocePackets) >= 8; }));
  EXPECT_EQ(f.b.counter(Counter::kNpCnpSent), 1u);
  EXPECT_EQ(cnps_sent(*f.b.port).size(), 1u);

  // The other QP is moderated on its own: its marked packet gets its own CNP at once.
  f.write_and_wait(kQpA2, 100);
  ASSERT_TRUE(eventually([&] { return f.b.counter(Counter::kNpCnpSent) == 2; }));

  // Once the gap has passed, the next marked packet gets the first QP's second CNP.
  ASSERT_TRUE(
      eventually([&] { return monotonic_now_ns() > first_ns + kMinGapUs * 1000ull; }, 2000ms));
  f.write_and_wait(kQpA, 100);
  ASSERT_TRUE(eventually([&] { return f.b.counter(Counter::kNpCnpSent) == 3; }));
  std::size_t to_first = 0;
  for (const auto& bytes : cnps_sent(*f.b.port))
    to_first += wire::decode_frame(bytes)->hdr.bth.dest_qp == kQpA;
  EXPECT_EQ(to_first, 2u);
}

TEST(DatapathCc, NoCnpWhileNpIsDisabledNorForAMarkedAck) {
  Fabric f;  // np_enable defaults to 0 in the daemon
  f.connect();
  f.a.port->mark_ce = true;
  f.b.port->mark_ce = true;  // marks only requests: B's ACKs stay unmarked
  f.write_and_wait(kQpA, 4 * kMtu);
  ASSERT_TRUE(eventually([&] { return f.b.counter(Counter::kNpEcnMarkedRocePackets) >= 4; }));
  EXPECT_EQ(f.b.counter(Counter::kNpCnpSent), 0u);
  EXPECT_TRUE(cnps_sent(*f.b.port).empty());

  // A CE-marked ACK at A, with A's notification point on: counted, never answered.
  f.a.set_cc([](cc::CcDevice& d) { d.params.np_enable_mask = cc::kAllPriorities; });
  f.a.port->mark_ce = false;
  const std::uint64_t before = f.a.counter(Counter::kNpEcnMarkedRocePackets);
  // The pipe marks only requests, so the marked ACK is made by hand.
  wire::FrameAddress addr = address(kIpB, kIpA, kDataTos);
  addr.traffic_class |= static_cast<std::uint8_t>(wire::Ecn::kCe);
  wire::TransportHeaders ack;
  ack.bth.opcode = wire::Opcode::kRcAck;
  ack.bth.dest_qp = kQpA;
  ack.bth.psn = wire::Psn(0);
  ack.aeth = wire::Aeth{};
  std::vector<std::uint8_t> frame(256);
  const auto len = wire::encode_frame(addr, ack, wire::Bytes{}, frame);
  ASSERT_TRUE(len.ok());
  frame.resize(*len);
  f.a.port->inject(frame);
  ASSERT_TRUE(
      eventually([&] { return f.a.counter(Counter::kNpEcnMarkedRocePackets) == before + 1; }));
  f.write_and_wait(kQpA2, 100);  // a later turn of A's worker has run
  EXPECT_EQ(f.a.counter(Counter::kNpCnpSent), 0u);
  EXPECT_TRUE(cnps_sent(*f.a.port).empty());
}

// Wire bytes of a data packet as the pacer counts them (engine/cc/qp_congestion.h).
constexpr double kPacedBits = (kMtu + cc::kRoceV4DataOverheadBytes) * 8.0;

TEST(DatapathCc, CnpCutsTheRateAndThePacerSpacesThatQpOnly) {
  Fabric f;
  f.b.set_cc([](cc::CcDevice& d) {
    d.params.np_enable_mask = cc::kAllPriorities;
    d.params.min_time_between_cnps = 1'000'000;
  });
  f.a.set_cc([](cc::CcDevice& d) {
    d.params.rate_to_set_on_first_cnp = 100;  // Mb/s
    d.params.rpg_time_reset = 1'000'000;      // no rate increase during the test
    d.params.rpg_byte_reset = 0;
  });
  f.connect();
  EXPECT_EQ(f.a.cc_of(kQpA).stage, "unlimited");  // connected: attached, not limited yet
  f.a.port->mark_ce = true;
  f.write_and_wait(kQpA, 100);
  ASSERT_TRUE(eventually([&] { return f.a.counter(Counter::kRpCnpHandled) == 1; }));
  f.a.port->mark_ce = false;

  // docs/protocol.md §5.4 (ConnectX): Rc = Rt = rate_to_set_on_first_cnp, then Rc * (1 - alpha/2)
  // with alpha = initial_alpha_value / 1024.
  const double expected_rate = 100 * (1 - (1023.0 / 1024) / 2);
  const QpCcStatus st = f.a.cc_of(kQpA);
  EXPECT_TRUE(st.active);
  EXPECT_EQ(st.priority, 3);
  EXPECT_NEAR(st.rate_mbps, expected_rate, 1e-9);
  EXPECT_NEAR(st.target_rate_mbps, 100, 1e-9);
  EXPECT_GT(st.alpha, 0.9);
  EXPECT_EQ(f.a.cc_of(kQpA2).rate_mbps, kLineRateMbps);

  // 12 packets on the cut QP and 64 KiB on the other, posted together.
  const std::size_t first_frame = f.a.port->sent().size();
  constexpr std::uint32_t kPaced = 12;
  f.a.write(kQpA, 1, kPaced * kMtu, f.b.mr.rkey.value());
  f.a.write(kQpA2, 1, 64 * kMtu, f.b.mr.rkey.value());
  ASSERT_EQ(f.a.boxes[kQpA2.value()]->wait(1).size(), 1u);
  ASSERT_EQ(f.a.boxes[kQpA.value()]->wait(2).size(), 2u);

  std::vector<SentFrame> sent = f.a.port->sent();
  sent.erase(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(first_frame));
  std::vector<std::uint64_t> times;
  const auto frames = decoded(sent, &times);
  std::vector<std::uint64_t> paced, other;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (!frames[i].hdr.info().is_request) continue;
    EXPECT_EQ(frames[i].ecn, wire::Ecn::kEct0) << "rp_enable is on: data is ECT(0)";
    EXPECT_EQ(static_cast<int>(frames[i].addr.traffic_class >> 2), 26);
    (frames[i].hdr.bth.dest_qp == kQpB ? paced : other).push_back(times[i]);
  }
  ASSERT_EQ(paced.size(), kPaced);
  ASSERT_EQ(other.size(), 64u);
  // Capture times trail the pacer's decisions by a few µs of encoding (more if the thread is
  // preempted in between, which shortens the next gap; each preemption of a loaded host makes
  // one), so: the median gap is the paced one, and at most a quarter of the gaps are short by
  // more than 25 µs. Without the pacer every gap would be ~2 µs.
  const double gap_ns = kPacedBits / expected_rate * 1000;  // ~173 µs
  std::vector<double> gaps;
  for (std::size_t i = 1; i < paced.size(); ++i)
    gaps.push_back(static_cast<double>(paced[i] - paced[i - 1]));
  EXPECT_LE(std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g < gap_ns - 25'000; }),
            static_cast<std::ptrdiff_t>(gaps.size() / 4));
  std::sort(gaps.begin(), gaps.end());
  const double median = gaps[gaps.size() / 2];
  EXPECT_GE(median, gap_ns - 5'000);
  // Late by at most a loaded host's wake-up latency; a missed release deadline would show the
  // worker's 100 ms idle sleep instead.
  EXPECT_LE(median, gap_ns + 5'000'000) << "the pacer releases packets on time";
  // The held QP did not stall the worker: the other QP's packets all left while it was held
  // (before its last paced packet; "before its second" would time the worker against one gap).
  EXPECT_LT(other.back(), paced.back());
}

TEST(DatapathCc, RpDisabledMeansNotEctAndCnpsIgnored) {
  Fabric f;
  f.b.set_cc([](cc::CcDevice& d) {
    d.params.np_enable_mask = cc::kAllPriorities;
    d.params.min_time_between_cnps = 0;
  });
  f.a.set_cc([](cc::CcDevice& d) { d.params.rp_enable_mask = ~(1u << 3) & 0xFF; });  // prio 3 off
  f.connect();
  f.a.port->mark_ce = true;
  f.write_and_wait(kQpA, 2 * kMtu);
  ASSERT_TRUE(eventually([&] { return f.a.counter(Counter::kRpCnpIgnored) >= 1; }));
  EXPECT_EQ(f.a.counter(Counter::kRpCnpHandled), 0u);
  const QpCcStatus st = f.a.cc_of(kQpA);
  EXPECT_FALSE(st.active);
  EXPECT_EQ(st.rate_mbps, kLineRateMbps);
  for (const auto& d : decoded(f.a.port->sent())) {
    if (d.hdr.info().is_request) {
      EXPECT_EQ(d.ecn, wire::Ecn::kNotEct);
    }
  }

  // Turned back on at run time: the next data is ECT(0) and the next CNP is handled.
  f.a.set_cc([](cc::CcDevice& d) { d.params.rp_enable_mask = cc::kAllPriorities; });
  const std::size_t from = f.a.port->sent().size();
  f.write_and_wait(kQpA, 100);
  ASSERT_TRUE(eventually([&] { return f.a.counter(Counter::kRpCnpHandled) >= 1; }));
  auto sent = f.a.port->sent();
  sent.erase(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(from));
  for (const auto& d : decoded(sent)) {
    if (d.hdr.info().is_request) {
      EXPECT_EQ(d.ecn, wire::Ecn::kEct0);
    }
  }
  EXPECT_LT(f.a.cc_of(kQpA).rate_mbps, kLineRateMbps);
}

TEST(DatapathCc, DeviceCountersFollowTheTraffic) {
  Fabric f;
  f.connect();
  f.write_and_wait(kQpA, 10 * kMtu);
  ASSERT_TRUE(eventually([&] { return f.b.counter(Counter::kRcvdPkts) >= 10; }));
  // Both workers count after their port took the frame: wait until the two ends agree.
  EXPECT_TRUE(eventually([&] {
    return f.a.counter(Counter::kRcvdPkts) == f.b.counter(Counter::kSentPkts) &&
           f.b.counter(Counter::kRxBytes) == f.a.counter(Counter::kTxBytes) &&
           f.b.counter(Counter::kRcvdPkts) == f.a.counter(Counter::kSentPkts);
  }));
  EXPECT_EQ(f.b.counter(Counter::kRcvdPkts), 10u);
  EXPECT_EQ(f.a.counter(Counter::kSentPkts), 10u);
  EXPECT_GE(f.b.counter(Counter::kSentPkts), 1u);  // the ACK
  EXPECT_GT(f.a.counter(Counter::kTxBytes), 10u * kMtu);

  // A request PSN already executed: a duplicate; a PSN ahead: out of sequence (NAK).
  wire::TransportHeaders w;
  w.bth.opcode = wire::Opcode::kRcWriteOnly;
  w.bth.dest_qp = kQpB;
  w.reth = wire::Reth{f.b.buf, f.b.mr.rkey, 4};
  std::vector<std::uint8_t> payload(4, 0xAB), frame(256);
  for (const std::uint32_t psn : {0u, 1000u}) {
    w.bth.psn = wire::Psn(psn);
    const auto len = wire::encode_frame(address(kIpA, kIpB, kDataTos), w, payload, frame);
    ASSERT_TRUE(len.ok());
    f.b.port->inject(std::vector<std::uint8_t>(frame.begin(), frame.begin() + *len));
  }
  EXPECT_TRUE(eventually([&] { return f.b.counter(Counter::kDuplicateRequest) == 1; }));
  EXPECT_TRUE(eventually([&] { return f.b.counter(Counter::kOutOfSeqRequest) == 1; }));
}

TEST(DatapathCc, SendRnrAndRetryCountersMove) {
  Fabric f;
  // rnr_retry 1 for the RNR part; the default ACK timeout (~268 ms, 7 retries), since a
  // ~1 ms one with one retry fails the first SEND whenever a loaded host delays B's ACK by 2 ms.
  f.connect(Retries{.rnr_retry = 1});
  // A SEND that finds a receive: rdma_sends at A, rdma_recvs at B.
  {
    std::lock_guard lock(f.b.boxes[kQpB.value()]->m);
    f.b.boxes[kQpB.value()]->recvs.push_back({7, {transport::Sge{f.b.buf, 4096, f.b.mr.lkey}}});
  }
  f.b.worker().wake();
  transport::WorkRequest send;
  send.wr_id = 1;
  send.opcode = WrOpcode::kSend;
  send.send_flags = transport::send_flags::kSignaled;
  send.sg_list = {transport::Sge{f.a.buf, 100, f.a.mr.lkey}};
  auto post = [&](const transport::WorkRequest& wr) {
    {
      std::lock_guard lock(f.a.boxes[kQpA.value()]->m);
      f.a.boxes[kQpA.value()]->sends.push_back(wr);
    }
    f.a.worker().wake();
  };
  post(send);
  auto done = f.a.boxes[kQpA.value()]->wait(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(eventually([&] { return f.a.counter(Counter::kRdmaSends) == 1; }));
  EXPECT_TRUE(eventually([&] { return f.b.counter(Counter::kRdmaRecvs) == 1; }));

  // A SEND with no receive posted: B answers RNR NAK twice (first try and one retry), then A
  // gives up (rnr_retry 1).
  send.wr_id = 2;
  post(send);
  done = f.a.boxes[kQpA.value()]->wait(2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].status, WcStatus::kRnrRetryExcErr);
  EXPECT_TRUE(eventually([&] { return f.a.counter(Counter::kRetryRnrExceededErr) == 1; }));
  EXPECT_TRUE(eventually([&] { return f.a.counter(Counter::kRcvdRnrErr) == 2; }));
  EXPECT_TRUE(eventually([&] { return f.b.counter(Counter::kSendRnrErr) == 2; }));

  // The other pair, every frame from A lost: timeouts, then retry exceeded (retry_cnt 1 is set
  // on A's first QP only, so use a fresh fabric's numbers on it instead).
  Fabric g;
  g.connect(Retries{.timeout = 8, .retry_cnt = 1, .rnr_retry = 1});
  g.a.port->drop = true;
  g.a.write(kQpA, 1, 100, g.b.mr.rkey.value());
  done = g.a.boxes[kQpA.value()]->wait(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kRetryExcErr);
  EXPECT_TRUE(eventually([&] { return g.a.counter(Counter::kRetryExceededErr) == 1; }));
  EXPECT_GE(g.a.counter(Counter::kCompleterRetryErr), 1u);
}

// rxe's ack_deferred: responses its completer could not take at once. Ours: responses that
// arrived on one worker's queue for a QP of another and waited in its handover ring.
TEST(DatapathCc, AckDeferredCountsResponsesHandedToTheOwningWorker) {
  Fabric f(2);
  f.connect({}, 1);  // A's first QP on worker 1; B's ACKs arrive on worker 0's queue
  f.write_and_wait(kQpA, 3 * kMtu);
  EXPECT_TRUE(eventually([&] { return f.a.counter(Counter::kAckDeferred) >= 1; }));
  EXPECT_EQ(f.a.dp->worker(1).device_counters().load(Counter::kAckDeferred), 0u);
  const std::uint64_t deferred = f.a.counter(Counter::kAckDeferred);
  f.write_and_wait(kQpA2, 3 * kMtu);  // on worker 0, where its ACKs arrive: nothing deferred
  EXPECT_TRUE(eventually([&] { return f.a.counter(Counter::kRcvdPkts) >= 2; }));
  EXPECT_EQ(f.a.counter(Counter::kAckDeferred), deferred);
  // A CNP handed over is not a response: CE-marked writes from the QP on worker 1.
  f.b.set_cc([](cc::CcDevice& d) { d.params.np_enable_mask = cc::kAllPriorities; });
  f.a.ports[1]->mark_ce = true;
  f.write_and_wait(kQpA, 100);
  EXPECT_TRUE(eventually([&] { return f.a.counter(Counter::kRpCnpHandled) == 1; }));
  EXPECT_TRUE(eventually([&] { return f.a.counter(Counter::kAckDeferred) == deferred + 1; }));
}

}  // namespace
}  // namespace xroce::daemon::test
