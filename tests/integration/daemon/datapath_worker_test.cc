// The data path's workers with real threads, io_uring sleeps and the real transport, over
// in-process "pipe" ports (no namespaces, no root): RC and UD traffic between two datapaths,
// data checked byte for byte; a packet that lands on another worker's queue is handed over;
// frames with a bad ICRC or broken headers are counted and dropped at the door, and RC recovers
// by retransmission; loopback inside the daemon (two devices of one registry, and one device to
// itself across workers, IPv4 and IPv6 GIDs, RC and UD) moves data and counters and never
// touches a port. Seeded where random; the seed is printed on failure.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "daemon/loopback.h"
#include "pipe_fabric.h"

namespace xroce::daemon::test {
namespace {

using namespace std::chrono_literals;
using transport::Completion;
using transport::QpType;
using transport::WcOpcode;
using transport::WcStatus;
using transport::WrOpcode;

constexpr std::size_t kMemBytes = kSideMemBytes;

// Brings a QP to RTS (RC: connected to `peer`) and places it on the side's datapath, with
// address vector `av`. `window`: unacknowledged PSNs allowed in flight (else the default).
void place_qp(Side& s, QpType type, wire::Qpn qpn, wire::Qpn peer, const wire::FrameAddress& av,
              std::uint32_t worker = 0, std::optional<std::uint32_t> window = std::nullopt) {
  s.place_qp(QpSetup{.type = type,
                     .qpn = qpn,
                     .peer = peer,
                     .av = av,
                     .timeout = 10,  // ~4 ms local ACK timeout: retransmissions come quickly
                     .worker = worker,
                     .window = window});
}

void place_qp(Side& s, QpType type, wire::Qpn qpn, wire::Qpn peer, std::uint32_t src,
              std::uint32_t dst, std::uint32_t worker = 0) {
  place_qp(s, type, qpn, peer, address(src, dst), worker);
}

// The pipe fabric with an RC QP on each side once connected.
struct Fabric : PipeFabric {
  explicit Fabric(std::uint32_t a_workers) : PipeFabric(a_workers, kMemBytes, kAllAccess) {}
  void connect_rc(wire::Qpn qa, wire::Qpn qb, std::uint32_t a_worker = 0) {
    place_qp(a, QpType::kRc, qa, qb, kIpA, kIpB, a_worker);
    place_qp(b, QpType::kRc, qb, qa, kIpB, kIpA);
  }
};

void fill_pattern(std::span<std::uint8_t> bytes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (auto& x : bytes)
    x = static_cast<std::uint8_t>(rng());
}

// Sends one message of each size from `from` to `to` over their connected RC QPs and checks
// every byte and completion.
void send_sizes(Side& to, Side& from, const std::vector<std::uint32_t>& sizes) {
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    to.post_recv({i, {to.sge(off, sizes[i])}});
    fill_pattern(from.bytes(off, sizes[i]), static_cast<std::uint32_t>(i));
    transport::WorkRequest wr;
    wr.wr_id = 100 + i;
    wr.opcode = WrOpcode::kSend;
    wr.send_flags = transport::send_flags::kSignaled;
    wr.sg_list = {from.sge(off, sizes[i])};
    from.post_send(wr);
    off += sizes[i];
  }
  const auto recvs = to.box->wait(sizes.size());
  const auto sends = from.box->wait(sizes.size());
  ASSERT_EQ(recvs.size(), sizes.size());
  ASSERT_EQ(sends.size(), sizes.size());
  off = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(recvs[i].status, WcStatus::kSuccess) << transport::to_string(recvs[i].status);
    EXPECT_EQ(recvs[i].opcode, WcOpcode::kRecv);
    EXPECT_EQ(recvs[i].byte_len, sizes[i]);
    EXPECT_EQ(sends[i].wr_id, 100 + i);
    EXPECT_EQ(sends[i].status, WcStatus::kSuccess);
    const auto got = to.bytes(off, sizes[i]);
    const auto want = from.bytes(off, sizes[i]);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "message " << i;
    off += sizes[i];
  }
}

void send_sizes(Fabric& f, const std::vector<std::uint32_t>& sizes) {
  send_sizes(f.a, f.b, sizes);
}

const std::vector<std::uint32_t> kSizes = {1, 2, 63, 1024, 1025, 4096, 65536, 1 << 20};

TEST(DatapathWorker, RcSendAtEverySizeArrivesIntact) {
  Fabric f(1);
  f.connect_rc(wire::Qpn(0x11), wire::Qpn(0x22));
  send_sizes(f, kSizes);
  const auto st = f.a.dp->status();
  EXPECT_GT(st.counters.rx_delivered, 1024u);  // 1 MiB alone is 1024 packets at MTU 1024
  EXPECT_EQ(st.counters.rx_icrc_errors, 0u);
  EXPECT_EQ(st.qps, 1u);
}

// RDMA WRITE, READ and FETCH_AND_ADD from `from` to `to`'s memory; checks the bytes and the
// atomic's original and new value.
void write_read_atomic(Side& to, Side& from) {
  constexpr std::uint32_t kLen = 300000;
  std::size_t before = 0;  // completions of earlier work
  {
    std::lock_guard lock(from.box->m);
    before = from.box->completions.size();
  }
  fill_pattern(from.bytes(0, kLen), 7);
  fill_pattern(to.bytes(kLen, kLen), 8);
  std::memcpy(to.bytes(2 * kLen, 8).data(), "\x05\0\0\0\0\0\0\0", 8);  // 5, little-endian host

  transport::WorkRequest write;
  write.wr_id = 1;
  write.opcode = WrOpcode::kRdmaWrite;
  write.send_flags = transport::send_flags::kSignaled;
  write.sg_list = {from.sge(0, kLen)};
  write.remote_addr = to.buf;
  write.rkey = to.mr.rkey;
  from.post_send(write);
  transport::WorkRequest read = write;
  read.wr_id = 2;
  read.opcode = WrOpcode::kRdmaRead;
  read.sg_list = {from.sge(kLen, kLen)};
  read.remote_addr = to.buf + kLen;
  from.post_send(read);
  transport::WorkRequest add = write;
  add.wr_id = 3;
  add.opcode = WrOpcode::kAtomicFetchAndAdd;
  add.sg_list = {from.sge(2 * kLen, 8)};
  add.remote_addr = to.buf + 2 * kLen;
  add.compare_add = 10;
  from.post_send(add);

  const auto all = from.box->wait(before + 3);
  ASSERT_EQ(all.size(), before + 3);
  for (std::size_t i = before; i < all.size(); ++i)
    EXPECT_EQ(all[i].status, WcStatus::kSuccess) << all[i].wr_id;
  const auto wrote = to.bytes(0, kLen), src = from.bytes(0, kLen);
  EXPECT_TRUE(std::equal(wrote.begin(), wrote.end(), src.begin()));
  const auto got = from.bytes(kLen, kLen), remote = to.bytes(kLen, kLen);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), remote.begin()));
  std::uint64_t original = 0, now = 0;
  std::memcpy(&original, from.bytes(2 * kLen, 8).data(), 8);
  std::memcpy(&now, to.bytes(2 * kLen, 8).data(), 8);
  EXPECT_EQ(original, 5u);
  EXPECT_EQ(now, 15u);
}

TEST(DatapathWorker, RdmaWriteReadAndAtomicsReachPeerMemory) {
  Fabric f(1);
  f.connect_rc(wire::Qpn(0x11), wire::Qpn(0x22));
  write_read_atomic(f.a, f.b);
}

TEST(DatapathWorker, PacketOnAnotherWorkersQueueIsHandedOver) {
  Fabric f(2);
  // Worker 1 of A owns the QP, but every frame from B arrives on A's queue 0.
  f.connect_rc(wire::Qpn(0x13), wire::Qpn(0x22), 1);
  EXPECT_EQ(f.a.dp->worker_for(wire::Qpn(0x13))->index(), 1u);
  send_sizes(f, {1, 4096, 100000});
  const auto st = f.a.dp->status();
  EXPECT_EQ(st.workers, 2u);
  EXPECT_GT(st.counters.rx_handed_over, 100u);
  EXPECT_EQ(st.counters.rx_handover_drops, 0u);
  EXPECT_EQ(st.counters.rx_no_qp, 0u);
}

TEST(DatapathWorker, BadIcrcAndMalformedFramesAreCountedAndRcRecovers) {
  const std::uint32_t seed = static_cast<std::uint32_t>(std::random_device{}());
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Fabric f(1);
  f.connect_rc(wire::Qpn(0x11), wire::Qpn(0x22));
  auto rng = std::make_shared<std::mt19937>(seed);
  auto corrupted = std::make_shared<std::atomic<int>>(0);
  // One B -> A frame in 20 gets a flipped payload bit: the ICRC no longer verifies.
  f.b.port->tamper = [rng, corrupted](std::vector<std::uint8_t>& frame) {
    if ((*rng)() % 20 == 0 && frame.size() > 80) {
      frame[frame.size() - 10] ^= 0x10;
      ++*corrupted;
    }
    return true;
  };
  f.a.port->inject(std::vector<std::uint8_t>(30, 0xAB));  // not even an IP packet
  send_sizes(f, {4096, 65536, 200000});
  // A corrupted retransmission may still be on its way after the last completion: wait until
  // A has counted every corrupted frame B sent (deadline, no sleep).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  auto st = f.a.dp->status();
  while (st.counters.rx_icrc_errors < static_cast<std::uint64_t>(corrupted->load()) &&
         std::chrono::steady_clock::now() < deadline)
    st = f.a.dp->status();
  EXPECT_EQ(st.counters.rx_malformed, 1u);
  EXPECT_EQ(st.counters.rx_icrc_errors, static_cast<std::uint64_t>(corrupted->load()));
  EXPECT_GT(corrupted->load(), 0);
}

TEST(DatapathWorker, UdSendCarriesGrhAndData) {
  Fabric f(1);
  place_qp(f.a, QpType::kUd, wire::Qpn(0x31), wire::Qpn(0x32), kIpA, kIpB);
  place_qp(f.b, QpType::kUd, wire::Qpn(0x32), wire::Qpn(0x31), kIpB, kIpA);
  constexpr std::uint32_t kGrh = 40, kLen = 1000;
  f.a.post_recv({7, {f.a.sge(0, kGrh + kLen)}});
  fill_pattern(f.b.bytes(0, kLen), 3);
  transport::WorkRequest wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = transport::send_flags::kSignaled;
  wr.sg_list = {f.b.sge(0, kLen)};
  wr.ud.av_id = MailboxBinding::kAvId;
  wr.ud.remote_qpn = wire::Qpn(0x31);
  wr.ud.remote_qkey = wire::Qkey(0x11111111);
  f.b.post_send(wr);
  const auto got = f.a.box->wait(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  EXPECT_EQ(got[0].byte_len, kGrh + kLen);
  EXPECT_EQ(got[0].src_qp, wire::Qpn(0x32));
  const auto grh = f.a.bytes(0, kGrh);
  EXPECT_EQ(grh[20] >> 4, 4);  // the IPv4 header sits in the GRH's last 20 bytes
  std::uint32_t src = 0;
  std::memcpy(&src, grh.data() + 20 + 12, 4);
  EXPECT_EQ(src, htonl(kIpB));
  const auto data = f.a.bytes(kGrh, kLen), sent = f.b.bytes(0, kLen);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), sent.begin()));
}

// A receive WQE posted after the worker's last pull of its rings is found when the SEND
// arrives (the responder asks its Hosted QP to pull again), not answered with RNR NAKs: on a
// loaded host the worker can be preempted between its pull and its receive for as long as the
// peer needs to send.
TEST(DatapathWorker, ASendFindsAReceivePostedAfterTheWorkersLastPull) {
  Fabric f(1);
  f.connect_rc(wire::Qpn(0x41), wire::Qpn(0x42));
  constexpr std::uint32_t kLen = 3000;
  {
    std::lock_guard lock(f.a.box->m);
    f.a.box->late_recvs.push_back({5, {f.a.sge(0, kLen)}});
  }
  fill_pattern(f.b.bytes(0, kLen), 8);
  transport::WorkRequest wr;
  wr.wr_id = 6;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = transport::send_flags::kSignaled;
  wr.sg_list = {f.b.sge(0, kLen)};
  f.b.post_send(wr);
  const auto got = f.a.box->wait(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 5u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  EXPECT_EQ(got[0].byte_len, kLen);
  const auto data = f.a.bytes(0, kLen), sent = f.b.bytes(0, kLen);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), sent.begin()));
  const auto sends = f.b.box->wait(1);
  ASSERT_EQ(sends.size(), 1u);
  EXPECT_EQ(sends[0].status, WcStatus::kSuccess);
  EXPECT_EQ(f.a.counter(device::Counter::kSendRnrErr), 0u);
  EXPECT_TRUE(eventually([&] { return f.a.counter(device::Counter::kReceivesPulledLate) == 1; }));
}

TEST(DatapathWorker, IdleWorkerSleepsAndWakesForWork) {
  Fabric f(1);
  f.connect_rc(wire::Qpn(0x11), wire::Qpn(0x22));
  send_sizes(f, {64});
  // Wait (deadline, no sleep) until B's worker has gone to sleep, then post: the doorbell
  // must wake it.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (f.b.dp->worker(0).sleeps() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_GT(f.b.dp->worker(0).sleeps(), 0u);
  for (Side* s : {&f.a, &f.b}) {
    std::lock_guard lock(s->box->m);
    s->box->completions.clear();
  }
  send_sizes(f, {128, 5000});
}

// --- loopback inside the daemon (daemon/loopback.h) --------------------------------------

const wire::MacAddr kMacX = {0x02, 0, 0, 0, 0x0a, 0x01};
const wire::MacAddr kMacY = {0x02, 0, 0, 0, 0x0b, 0x01};
constexpr std::uint32_t kIpC = 0xC6120003;  // 198.18.0.3: served by no device here

wire::IpAddr gid6(std::uint8_t last) {
  return wire::IpAddr::v6(
      {0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0xfe, 0, 0, 0, 0, 0, 0, 0, last});
}
const wire::IpAddr kIpA6 = gid6(0xa);
const wire::IpAddr kIpB6 = gid6(0xb);

wire::FrameAddress address6(const wire::IpAddr& src, const wire::IpAddr& dst) {
  wire::FrameAddress a;
  a.src_mac = kMacX;
  a.src_ip = src;
  a.dst_ip = dst;  // dst_mac zero: the worker fills in what it knows
  return a;
}

// Two devices of one daemon in one LoopbackRegistry: X (`x_workers` workers) serving 198.18.0.1
// and 2001:2:0:fe::a, Y (one worker) serving 198.18.0.2 and 2001:2:0:fe::b. Every port leads
// to `sink`: a frame that reached a port would be counted in the port's tx_packets.
struct LoopbackHost {
  PipePort sink;  // first: the workers transmit into it until they stop
  LoopbackRegistry registry;
  std::shared_ptr<Datapath> x, y;
  std::vector<std::unique_ptr<Side>> sides;

  explicit LoopbackHost(std::uint32_t x_workers) {
    x = Datapath::over_ports(ports(x_workers), 0, false, &registry, {wire::IpAddr::v4(kIpA), kIpA6},
                             kMacX);
    y = Datapath::over_ports(ports(1), 0, false, &registry, {wire::IpAddr::v4(kIpB), kIpB6}, kMacY);
  }
  ~LoopbackHost() {
    // QPs and devices go before the sides' memory; each device leaves the registry first.
    for (auto& s : sides)
      s->dp.reset();
    x.reset();
    y.reset();
  }
  std::vector<std::unique_ptr<net::Port>> ports(std::uint32_t n) {
    std::vector<std::unique_ptr<net::Port>> out;
    for (std::uint32_t i = 0; i < n; ++i) {
      auto p = std::make_unique<PipePort>();
      p->peer = &sink;
      out.push_back(std::move(p));
    }
    return out;
  }
  Side& side(const std::shared_ptr<Datapath>& dp) {
    sides.push_back(std::make_unique<Side>());
    sides.back()->dp = dp;
    return *sides.back();
  }
  static std::uint64_t port_transmits(Datapath& dp) { return dp.status().port.tx_packets; }
  static std::uint64_t counter(Datapath& dp, device::Counter c) {
    std::uint64_t sum = 0;
    for (std::uint32_t w = 0; w < dp.worker_count(); ++w)
      sum += dp.worker(w).device_counters().load(c);
    return sum;
  }
};

// Every packet one device sent (sent_pkts) arrived at the other (rcvd_pkts), both ways.
void expect_sent_equals_received(Datapath& one, Datapath& other) {
  using device::Counter;
  const bool balanced = eventually([&] {
    return LoopbackHost::counter(one, Counter::kSentPkts) ==
               LoopbackHost::counter(other, Counter::kRcvdPkts) &&
           LoopbackHost::counter(other, Counter::kSentPkts) ==
               LoopbackHost::counter(one, Counter::kRcvdPkts);
  });
  EXPECT_TRUE(balanced) << "sent " << LoopbackHost::counter(one, Counter::kSentPkts) << "/"
                        << LoopbackHost::counter(other, Counter::kSentPkts) << " received "
                        << LoopbackHost::counter(other, Counter::kRcvdPkts) << "/"
                        << LoopbackHost::counter(one, Counter::kRcvdPkts);
}

TEST(DatapathLoopback, RcBetweenTwoDevicesNeverReachesAPort) {
  LoopbackHost h(1);
  Side& a = h.side(h.x);
  Side& b = h.side(h.y);
  place_qp(a, QpType::kRc, wire::Qpn(0x11), wire::Qpn(0x22), address(kIpA, kIpB));
  place_qp(b, QpType::kRc, wire::Qpn(0x22), wire::Qpn(0x11), address(kIpB, kIpA));
  send_sizes(a, b, kSizes);
  write_read_atomic(a, b);
  expect_sent_equals_received(*h.x, *h.y);

  const auto sx = h.x->status(), sy = h.y->status();
  EXPECT_EQ(sx.port.tx_packets + sy.port.tx_packets, 0u);  // nothing reached a port
  EXPECT_GT(sy.counters.tx_loopback, 1024u);  // 1 MiB alone is 1024 packets at MTU 1024
  EXPECT_GT(sx.counters.tx_loopback, 0u);     // ACKs and READ responses
  EXPECT_EQ(sx.counters.rx_loopback, sy.counters.tx_loopback);
  EXPECT_EQ(sy.counters.rx_loopback, sx.counters.tx_loopback);
  EXPECT_EQ(sx.counters.rx_frames, sx.counters.rx_loopback);  // the same door as the port's
  EXPECT_EQ(sx.counters.rx_icrc_errors + sy.counters.rx_icrc_errors, 0u);
  EXPECT_EQ(sx.counters.rx_no_qp + sy.counters.rx_no_qp, 0u);
  EXPECT_EQ(LoopbackHost::counter(*h.y, device::Counter::kLoopbackPkts),
            LoopbackHost::counter(*h.y, device::Counter::kSentPkts));
  EXPECT_GT(LoopbackHost::counter(*h.x, device::Counter::kRcvdPkts), 1024u);
  EXPECT_EQ(LoopbackHost::counter(*h.x, device::Counter::kNeighbourFailures), 0u);
}

// Holds a worker inside a command until released (or until the gate goes away).
class WorkerGate {
 public:
  explicit WorkerGate(Worker& w) {
    std::shared_future<void> opened = open_.get_future().share();
    EXPECT_TRUE(w.post_command([opened](Worker&) { opened.wait(); }));
  }
  ~WorkerGate() { release(); }
  void release() {
    if (!released_) open_.set_value();
    released_ = true;
  }

 private:
  std::promise<void> open_;
  bool released_ = false;
};

TEST(DatapathLoopback, AFullInboxDropsAndRcRetransmits) {
  LoopbackHost h(1);
  Side& a = h.side(h.x);
  Side& b = h.side(h.y);
  // A window wider than X's inbox, so that B can fill it. The Local ACK Timeout is perftest's
  // (14, ~67 ms), not the other tests' 4 ms: each go-back-N overflows the inbox again, the
  // responder NAKs a gap once, and a resend whose first packet meets a full inbox is found only
  // by that timer. With 4 ms, 8 such timeouts in a row (retry_cnt 7) while X's worker waited
  // for a core ended the QP in 2 of ~180 runs beside six busy loops; with 67 ms, none of 500.
  constexpr std::uint32_t kWindow = 2 * Worker::kLoopbackSlots;
  for (auto [side, qpn, peer, av] : {std::tuple{&a, 0x15u, 0x26u, address(kIpA, kIpB)},
                                     std::tuple{&b, 0x26u, 0x15u, address(kIpB, kIpA)}}) {
    side->place_qp(QpSetup{.type = QpType::kRc,
                           .qpn = wire::Qpn(qpn),
                           .peer = wire::Qpn(peer),
                           .av = av,
                           .timeout = 14,
                           .window = kWindow});
  }
  fill_pattern(b.bytes(0, kMemBytes), 41);
  WorkerGate gate(h.x->worker(0));      // X takes nothing in until released
  constexpr std::uint32_t kWrites = 3;  // 3 x 2048 packets at MTU 1024: more than the inbox
  for (std::uint32_t i = 0; i < kWrites; ++i) {
    transport::WorkRequest wr;
    wr.wr_id = 300 + i;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = transport::send_flags::kSignaled;
    wr.sg_list = {b.sge(0, kMemBytes)};
    wr.remote_addr = a.buf;
    wr.rkey = a.mr.rkey;
    b.post_send(wr);
  }
  ASSERT_TRUE(eventually([&] { return h.y->status().counters.tx_loopback_drops > 0; }));
  gate.release();
  const auto done = b.box->wait(kWrites);
  ASSERT_EQ(done.size(), kWrites);
  for (const auto& c : done)
    EXPECT_EQ(c.status, WcStatus::kSuccess) << c.wr_id;
  const auto got = a.bytes(0, kMemBytes), want = b.bytes(0, kMemBytes);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));
  // Lost as on a wire: counted at the sender, then sent again by the transport.
  EXPECT_GT(LoopbackHost::counter(*h.y, device::Counter::kSendErr), 0u);
  EXPECT_GT(LoopbackHost::counter(*h.y, device::Counter::kCompleterRetryErr), 0u);
  EXPECT_EQ(LoopbackHost::port_transmits(*h.x) + LoopbackHost::port_transmits(*h.y), 0u);
}

TEST(DatapathLoopback, OneDeviceToItselfAcrossWorkersWithIpv6Gids) {
  LoopbackHost h(2);
  Side& a = h.side(h.x);
  Side& b = h.side(h.x);
  // Both QPs have the device's own GID at both ends, on different workers.
  place_qp(a, QpType::kRc, wire::Qpn(0x13), wire::Qpn(0x24), address6(kIpA6, kIpA6), 0);
  place_qp(b, QpType::kRc, wire::Qpn(0x24), wire::Qpn(0x13), address6(kIpA6, kIpA6), 1);
  send_sizes(a, b, {1, 4096, 100000});
  write_read_atomic(a, b);
  expect_sent_equals_received(*h.x, *h.x);
  const auto st = h.x->status();
  EXPECT_EQ(st.port.tx_packets, 0u);
  EXPECT_GT(st.counters.tx_loopback, 100u);
  EXPECT_EQ(st.counters.rx_loopback, st.counters.tx_loopback);
  EXPECT_EQ(st.counters.rx_handed_over, 0u);  // looped straight to the owning worker
  EXPECT_EQ(st.counters.rx_no_qp, 0u);
  for (std::uint32_t w = 0; w < 2; ++w)
    EXPECT_GT(h.x->worker(w).device_counters().load(device::Counter::kLoopbackPkts), 0u) << w;
}

// One UD datagram of `len` bytes from `from` (a UD QP) to `to_qpn` through `from`'s address
// vector; the receive lands in `to` when to_qpn is its QP.
void ud_send(Side& from, wire::Qpn to_qpn, std::uint32_t len, std::uint32_t seed) {
  fill_pattern(from.bytes(0, len), seed);
  transport::WorkRequest wr;
  wr.wr_id = seed;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = transport::send_flags::kSignaled;
  wr.sg_list = {from.sge(0, len)};
  wr.ud.av_id = MailboxBinding::kAvId;
  wr.ud.remote_qpn = to_qpn;
  wr.ud.remote_qkey = wire::Qkey(0x11111111);
  from.post_send(wr);
}

TEST(DatapathLoopback, UdDatagramKeepsTheSendersGidInItsGrh) {
  LoopbackHost h(1);
  Side& a = h.side(h.x);
  Side& b = h.side(h.y);
  place_qp(a, QpType::kUd, wire::Qpn(0x31), wire::Qpn(0x32), address6(kIpA6, kIpB6));
  place_qp(b, QpType::kUd, wire::Qpn(0x32), wire::Qpn(0x31), address6(kIpB6, kIpA6));
  constexpr std::uint32_t kGrh = 40, kLen = 1000;
  a.post_recv({7, {a.sge(0, kGrh + kLen)}});
  ud_send(b, wire::Qpn(0x31), kLen, 3);
  const auto got = a.box->wait(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess);
  EXPECT_EQ(got[0].byte_len, kGrh + kLen);
  EXPECT_EQ(got[0].src_qp, wire::Qpn(0x32));
  const auto grh = a.bytes(0, kGrh);
  EXPECT_EQ(grh[0] >> 4, 6);  // the IPv6 header fills the GRH
  EXPECT_TRUE(std::equal(kIpB6.bytes.begin(), kIpB6.bytes.end(), grh.begin() + 8));
  const auto data = a.bytes(kGrh, kLen), sent = b.bytes(0, kLen);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), sent.begin()));
  EXPECT_EQ(LoopbackHost::port_transmits(*h.x) + LoopbackHost::port_transmits(*h.y), 0u);
}

TEST(DatapathLoopback, UnknownQpIsCountedAndUnservedAddressesStillUseThePort) {
  LoopbackHost h(1);
  Side& to_x = h.side(h.y);
  Side& to_nobody = h.side(h.y);
  place_qp(to_x, QpType::kUd, wire::Qpn(0x41), wire::Qpn(0x99), address(kIpB, kIpA));
  place_qp(to_nobody, QpType::kUd, wire::Qpn(0x42), wire::Qpn(0x99), address(kIpB, kIpC));
  // To a QPN device X does not have: taken in by X and counted there, as from a port.
  ud_send(to_x, wire::Qpn(0x77), 64, 1);
  EXPECT_TRUE(eventually([&] { return h.x->status().counters.rx_no_qp == 1; }));
  EXPECT_EQ(LoopbackHost::counter(*h.x, device::Counter::kRxUnknownQp), 1u);
  EXPECT_EQ(LoopbackHost::port_transmits(*h.y), 0u);
  // To an address no device here serves: the port.
  ud_send(to_nobody, wire::Qpn(0x77), 64, 2);
  EXPECT_TRUE(eventually([&] { return LoopbackHost::port_transmits(*h.y) == 1; }));
  // Once X is gone, its addresses are nobody's: the port again, and nothing touches X.
  to_x.box->wait(1);
  h.x.reset();
  ud_send(to_x, wire::Qpn(0x77), 64, 3);
  EXPECT_TRUE(eventually([&] { return LoopbackHost::port_transmits(*h.y) == 2; }));
  EXPECT_EQ(h.y->status().counters.tx_loopback, 1u);
}

}  // namespace
}  // namespace xroce::daemon::test
