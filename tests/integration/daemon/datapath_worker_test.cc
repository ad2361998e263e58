// The data path's workers with real threads, io_uring sleeps and the real transport, over
// in-process "pipe" ports (no namespaces, no root): RC and UD traffic between two datapaths,
// data checked byte for byte; a packet that lands on another worker's queue is handed over;
// frames with a bad ICRC or broken headers are counted and dropped at the door, and RC recovers
// by retransmission. Seeded where random; the seed is printed on failure.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "pipe_fabric.h"

namespace xroce::daemon::test {
namespace {

using namespace std::chrono_literals;
using transport::Completion;
using transport::QpType;
using transport::WcOpcode;
using transport::WcStatus;
using transport::WrOpcode;

constexpr std::size_t kMemBytes = 1 << 21;
constexpr std::uint32_t kAllAccess =
    transport::access::kLocalWrite | transport::access::kRemoteWrite |
    transport::access::kRemoteRead | transport::access::kRemoteAtomic;

// Brings a QP to RTS (RC: connected to `peer`) on one of the side's workers.
void place_qp(Side& s, QpType type, wire::Qpn qpn, wire::Qpn peer, std::uint32_t src,
              std::uint32_t dst, std::uint32_t worker = 0) {
  s.place_qp(QpSetup{.type = type,
                     .qpn = qpn,
                     .peer = peer,
                     .av = address(src, dst),
                     .timeout = 10,  // ~4 ms local ACK timeout: retransmissions come quickly
                     .worker = worker});
}

// The pipe fabric with one RC QP on each side: `qa` on A, `qb` on B.
struct Fabric : PipeFabric {
  explicit Fabric(std::uint32_t a_workers) : PipeFabric(a_workers, kMemBytes, kAllAccess) {}
  wire::Qpn qa;
  wire::Qpn qb;
  void connect_rc(wire::Qpn a_qpn, wire::Qpn b_qpn, std::uint32_t a_worker = 0) {
    qa = a_qpn;
    qb = b_qpn;
    place_qp(a, QpType::kRc, qa, qb, kIpA, kIpB, a_worker);
    place_qp(b, QpType::kRc, qb, qa, kIpB, kIpA);
  }
};

void fill_pattern(std::span<std::uint8_t> bytes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (auto& x : bytes)
    x = static_cast<std::uint8_t>(rng());
}

// Sends one message of each size from B to A and checks every byte and completion.
void send_sizes(Fabric& f, const std::vector<std::uint32_t>& sizes) {
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    f.a.post_recv(f.qa, {i, {f.a.sge(off, sizes[i])}});
    fill_pattern(f.b.bytes(off, sizes[i]), static_cast<std::uint32_t>(i));
    transport::WorkRequest wr;
    wr.wr_id = 100 + i;
    wr.opcode = WrOpcode::kSend;
    wr.send_flags = transport::send_flags::kSignaled;
    wr.sg_list = {f.b.sge(off, sizes[i])};
    f.b.post_send(f.qb, wr);
    off += sizes[i];
  }
  const auto recvs = f.a.box(f.qa).wait(sizes.size());
  const auto sends = f.b.box(f.qb).wait(sizes.size());
  ASSERT_EQ(recvs.size(), sizes.size());
  ASSERT_EQ(sends.size(), sizes.size());
  off = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(recvs[i].status, WcStatus::kSuccess) << transport::to_string(recvs[i].status);
    EXPECT_EQ(recvs[i].opcode, WcOpcode::kRecv);
    EXPECT_EQ(recvs[i].byte_len, sizes[i]);
    EXPECT_EQ(sends[i].wr_id, 100 + i);
    EXPECT_EQ(sends[i].status, WcStatus::kSuccess);
    const auto got = f.a.bytes(off, sizes[i]);
    const auto want = f.b.bytes(off, sizes[i]);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "message " << i;
    off += sizes[i];
  }
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

TEST(DatapathWorker, RdmaWriteReadAndAtomicsReachPeerMemory) {
  Fabric f(1);
  f.connect_rc(wire::Qpn(0x11), wire::Qpn(0x22));
  constexpr std::uint32_t kLen = 300000;
  fill_pattern(f.b.bytes(0, kLen), 7);
  fill_pattern(f.a.bytes(kLen, kLen), 8);
  std::memcpy(f.a.bytes(2 * kLen, 8).data(), "\x05\0\0\0\0\0\0\0", 8);  // 5, little-endian host

  transport::WorkRequest write;
  write.wr_id = 1;
  write.opcode = WrOpcode::kRdmaWrite;
  write.send_flags = transport::send_flags::kSignaled;
  write.sg_list = {f.b.sge(0, kLen)};
  write.remote_addr = f.a.buf;
  write.rkey = f.a.mr.rkey;
  f.b.post_send(f.qb, write);
  transport::WorkRequest read = write;
  read.wr_id = 2;
  read.opcode = WrOpcode::kRdmaRead;
  read.sg_list = {f.b.sge(kLen, kLen)};
  read.remote_addr = f.a.buf + kLen;
  f.b.post_send(f.qb, read);
  transport::WorkRequest add = write;
  add.wr_id = 3;
  add.opcode = WrOpcode::kAtomicFetchAndAdd;
  add.sg_list = {f.b.sge(2 * kLen, 8)};
  add.remote_addr = f.a.buf + 2 * kLen;
  add.compare_add = 10;
  f.b.post_send(f.qb, add);

  const auto done = f.b.box(f.qb).wait(3);
  ASSERT_EQ(done.size(), 3u);
  for (const auto& c : done)
    EXPECT_EQ(c.status, WcStatus::kSuccess) << c.wr_id;
  const auto wrote = f.a.bytes(0, kLen), src = f.b.bytes(0, kLen);
  EXPECT_TRUE(std::equal(wrote.begin(), wrote.end(), src.begin()));
  const auto got = f.b.bytes(kLen, kLen), remote = f.a.bytes(kLen, kLen);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), remote.begin()));
  std::uint64_t original = 0, now = 0;
  std::memcpy(&original, f.b.bytes(2 * kLen, 8).data(), 8);
  std::memcpy(&now, f.a.bytes(2 * kLen, 8).data(), 8);
  EXPECT_EQ(original, 5u);
  EXPECT_EQ(now, 15u);
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
  f.a.post_recv(wire::Qpn(0x31), {7, {f.a.sge(0, kGrh + kLen)}});
  fill_pattern(f.b.bytes(0, kLen), 3);
  transport::WorkRequest wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = transport::send_flags::kSignaled;
  wr.sg_list = {f.b.sge(0, kLen)};
  wr.ud.av_id = MailboxBinding::kAvId;
  wr.ud.remote_qpn = wire::Qpn(0x31);
  wr.ud.remote_qkey = wire::Qkey(0x11111111);
  f.b.post_send(wire::Qpn(0x32), wr);
  const auto got = f.a.box(wire::Qpn(0x31)).wait(1);
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
  for (Mailbox* box : {&f.a.box(f.qa), &f.b.box(f.qb)}) {
    std::lock_guard lock(box->m);
    box->completions.clear();
  }
  send_sizes(f, {128, 5000});
}

}  // namespace
}  // namespace xroce::daemon::test
