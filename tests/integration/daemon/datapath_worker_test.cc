// The data path's workers with real threads, io_uring sleeps and the real transport, over
// in-process "pipe" ports (no namespaces, no root): RC and UD traffic between two datapaths,
// data checked byte for byte; a packet that lands on another worker's queue is handed over;
// frames with a bad ICRC or broken headers are counted and dropped at the door, and RC recovers
// by retransmission. Seeded where random; the seed is printed on failure.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>

#include "daemon/datapath.h"
#include "transport/memory.h"

namespace xroce::daemon {
namespace {

using namespace std::chrono_literals;
using transport::Completion;
using transport::QpType;
using transport::WcOpcode;
using transport::WcStatus;
using transport::WrOpcode;

// A port whose transmit lands in another port's receive queue. `tamper` may edit or drop
// (return false) a frame on its way. Thread-safe: the test injects frames from its own thread.
class PipePort final : public net::Port {
 public:
  PipePort() : efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~PipePort() override { close(efd_); }
  std::function<PipePort*()> peer;
  std::function<bool(std::vector<std::uint8_t>&)> tamper;

  void inject(std::vector<std::uint8_t> frame) {
    {
      std::lock_guard lock(m_);
      queue_.push_back(std::move(frame));
    }
    const std::uint64_t one = 1;
    (void)!write(efd_, &one, sizeof(one));
  }

  net::Result<std::size_t, net::PortError> receive(std::span<net::RxFrame> frames) override {
    std::uint64_t count = 0;
    (void)!read(efd_, &count, sizeof(count));
    std::lock_guard lock(m_);
    std::size_t n = 0;
    while (n < frames.size() && !queue_.empty()) {
      const std::uint64_t handle = next_handle_++;
      auto& held = held_[handle] = std::move(queue_.front());
      queue_.pop_front();
      frames[n++] = net::RxFrame{held, handle};
    }
    stats_.rx_packets += n;
    return n;
  }
  void release(std::span<const net::RxFrame> frames) override {
    std::lock_guard lock(m_);
    for (const auto& f : frames)
      held_.erase(f.handle);
  }
  net::Result<std::size_t, net::PortError> transmit(std::span<const net::TxFrame> frames) override {
    for (const auto& f : frames) {
      std::vector<std::uint8_t> bytes(f.begin(), f.end());
      ++stats_.tx_packets;
      if (tamper && !tamper(bytes)) continue;
      peer()->inject(std::move(bytes));
    }
    return frames.size();
  }
  net::Result<std::size_t, net::PortError> flush() override { return std::size_t{0}; }
  int wait_fd() const override { return efd_; }
  net::PortStats stats() const override { return stats_; }
  net::PortMode mode() const override { return net::PortMode::kUdpSocket; }
  std::size_t max_frame_bytes() const override { return 9014; }

 private:
  int efd_;
  std::mutex m_;
  std::deque<std::vector<std::uint8_t>> queue_;
  std::map<std::uint64_t, std::vector<std::uint8_t>> held_;
  std::uint64_t next_handle_ = 1;
  net::PortStats stats_;
};

// The test's stand-in for the provider's rings: work the test queues, completions it waits on.
struct Mailbox {
  std::mutex m;
  std::condition_variable cv;
  std::deque<transport::WorkRequest> sends;
  std::deque<transport::RecvRequest> recvs;
  std::vector<Completion> completions;
  std::vector<transport::AsyncEvent> events;

  // Waits (with a deadline, no sleeps) until `n` completions arrived; returns them.
  std::vector<Completion> wait(std::size_t n, std::chrono::seconds limit = 20s) {
    std::unique_lock lock(m);
    cv.wait_for(lock, limit, [&] { return completions.size() >= n; });
    return completions;
  }
};

class MailboxBinding final : public QpBinding {
 public:
  MailboxBinding(std::shared_ptr<Mailbox> box, wire::FrameAddress av)
      : box_(std::move(box)), av_(av) {}
  bool pull_work_on_worker(transport::Qp& qp) override {
    std::lock_guard lock(box_->m);
    const bool any = !box_->sends.empty() || !box_->recvs.empty();
    for (; !box_->recvs.empty(); box_->recvs.pop_front())
      EXPECT_EQ(qp.post_recv(box_->recvs.front()), 0);
    for (; !box_->sends.empty(); box_->sends.pop_front())
      EXPECT_EQ(qp.post_send(box_->sends.front()), 0);
    return any;
  }
  bool work_pending_on_worker() const override {
    std::lock_guard lock(box_->m);
    return !box_->sends.empty() || !box_->recvs.empty();
  }
  void complete_on_worker(const Completion& c) override {
    std::lock_guard lock(box_->m);
    box_->completions.push_back(c);
    box_->cv.notify_all();
  }
  void event_on_worker(const transport::AsyncEvent& e) override {
    std::lock_guard lock(box_->m);
    box_->events.push_back(e);
  }
  const wire::FrameAddress* address_on_worker(std::uint32_t av_id) override {
    return av_id == kAvId ? &av_ : nullptr;
  }
  static constexpr std::uint32_t kAvId = 1;

 private:
  std::shared_ptr<Mailbox> box_;
  wire::FrameAddress av_;
};

wire::FrameAddress address(std::uint32_t src_v4, std::uint32_t dst_v4) {
  wire::FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0, static_cast<std::uint8_t>(src_v4)};
  a.dst_mac = {0x02, 0, 0, 0, 0, static_cast<std::uint8_t>(dst_v4)};
  a.src_ip = wire::IpAddr::v4(src_v4);
  a.dst_ip = wire::IpAddr::v4(dst_v4);
  return a;
}

constexpr std::uint32_t kIpA = 0xC6120001;  // 198.18.0.1
constexpr std::uint32_t kIpB = 0xC6120002;  // 198.18.0.2
constexpr std::size_t kMemBytes = 1 << 21;

// One side: its memory, MR table and the QP it placed on its datapath.
struct Side {
  transport::LocalMemory mem;
  transport::MemoryRegionTable mrs{mem};
  std::uint64_t buf = mem.allocate(kMemBytes);
  transport::MemoryRegion mr =
      mrs.register_region(buf, kMemBytes,
                          transport::access::kLocalWrite | transport::access::kRemoteWrite |
                              transport::access::kRemoteRead | transport::access::kRemoteAtomic);
  std::shared_ptr<Mailbox> box = std::make_shared<Mailbox>();
  std::unique_ptr<Datapath> dp;
  wire::Qpn qpn;

  std::span<std::uint8_t> bytes(std::uint64_t off, std::size_t len) {
    return mem.view(buf + off, len);
  }
  transport::Sge sge(std::uint64_t off, std::uint32_t len) const {
    return transport::Sge{buf + off, len, mr.lkey};
  }
  void post_send(transport::WorkRequest wr) {
    {
      std::lock_guard lock(box->m);
      box->sends.push_back(std::move(wr));
    }
    dp->worker_for(qpn)->wake();
  }
  void post_recv(transport::RecvRequest wr) {
    {
      std::lock_guard lock(box->m);
      box->recvs.push_back(std::move(wr));
    }
    dp->worker_for(qpn)->wake();
  }
};

// Brings a QP to RTS (RC: connected to `peer`) and places it on the side's datapath.
void place_qp(Side& s, QpType type, wire::Qpn qpn, wire::Qpn peer, std::uint32_t src,
              std::uint32_t dst, std::uint32_t worker = 0) {
  namespace m = transport::qp_attr;
  s.qpn = qpn;
  transport::QpConfig cfg;
  cfg.type = type;
  cfg.qpn = qpn;
  cfg.port_mtu = transport::PathMtu::k1024;
  auto qp = std::make_unique<transport::Qp>(cfg, s.mrs);
  transport::QpAttr a;
  a.qp_access_flags = s.mr.access;
  a.qkey = wire::Qkey(0x11111111);
  a.path_mtu = transport::PathMtu::k1024;
  a.dest_qp_num = peer;
  a.max_dest_rd_atomic = 16;
  a.max_rd_atomic = 16;
  a.min_rnr_timer = 1;
  a.timeout = 10;  // ~4 ms local ACK timeout: retransmissions come quickly
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.av_id = MailboxBinding::kAvId;
  const bool ud = type == QpType::kUd;
  a.qp_state = transport::QpState::kInit;
  ASSERT_EQ(qp->modify(a, m::kState | m::kPkeyIndex | m::kPort | (ud ? m::kQkey : m::kAccessFlags)),
            0);
  a.qp_state = transport::QpState::kRtr;
  ASSERT_EQ(qp->modify(a, ud ? m::kState
                             : m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                                   m::kMaxDestRdAtomic | m::kMinRnrTimer),
            0);
  a.qp_state = transport::QpState::kRts;
  ASSERT_EQ(qp->modify(a, ud ? m::kState | m::kSqPsn
                             : m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn |
                                   m::kMaxQpRdAtomic),
            0);
  s.dp->add_qp(HostedQp{std::move(qp), std::make_unique<MailboxBinding>(s.box, address(src, dst))},
               worker);
}

// Two datapaths: A with `a_workers` workers (every frame from B lands on A's queue 0, as RSS
// might put it), B with one.
struct Fabric {
  std::vector<PipePort*> a_ports;
  PipePort* b_port = nullptr;
  Side a, b;

  explicit Fabric(std::uint32_t a_workers) {
    std::vector<std::unique_ptr<net::Port>> pa;
    for (std::uint32_t i = 0; i < a_workers; ++i) {
      auto p = std::make_unique<PipePort>();
      p->peer = [this] { return b_port; };
      a_ports.push_back(p.get());
      pa.push_back(std::move(p));
    }
    auto pb = std::make_unique<PipePort>();
    pb->peer = [this] { return a_ports.front(); };
    b_port = pb.get();
    std::vector<std::unique_ptr<net::Port>> pbv;
    pbv.push_back(std::move(pb));
    a.dp = Datapath::over_ports(std::move(pa), 0, false);
    b.dp = Datapath::over_ports(std::move(pbv), 0, false);
  }
  ~Fabric() {
    // Every worker stops before any port goes away: each transmits into the other side's.
    for (Side* s : {&a, &b})
      for (std::uint32_t i = 0; i < s->dp->worker_count(); ++i)
        s->dp->worker(i).stop();
  }
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

// Sends one message of each size from B to A and checks every byte and completion.
void send_sizes(Fabric& f, const std::vector<std::uint32_t>& sizes) {
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    f.a.post_recv({i, {f.a.sge(off, sizes[i])}});
    fill_pattern(f.b.bytes(off, sizes[i]), static_cast<std::uint32_t>(i));
    transport::WorkRequest wr;
    wr.wr_id = 100 + i;
    wr.opcode = WrOpcode::kSend;
    wr.send_flags = transport::send_flags::kSignaled;
    wr.sg_list = {f.b.sge(off, sizes[i])};
    f.b.post_send(wr);
    off += sizes[i];
  }
  const auto recvs = f.a.box->wait(sizes.size());
  const auto sends = f.b.box->wait(sizes.size());
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
  f.b.post_send(write);
  transport::WorkRequest read = write;
  read.wr_id = 2;
  read.opcode = WrOpcode::kRdmaRead;
  read.sg_list = {f.b.sge(kLen, kLen)};
  read.remote_addr = f.a.buf + kLen;
  f.b.post_send(read);
  transport::WorkRequest add = write;
  add.wr_id = 3;
  add.opcode = WrOpcode::kAtomicFetchAndAdd;
  add.sg_list = {f.b.sge(2 * kLen, 8)};
  add.remote_addr = f.a.buf + 2 * kLen;
  add.compare_add = 10;
  f.b.post_send(add);

  const auto done = f.b.box->wait(3);
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
  f.b_port->tamper = [rng, corrupted](std::vector<std::uint8_t>& frame) {
    if ((*rng)() % 20 == 0 && frame.size() > 80) {
      frame[frame.size() - 10] ^= 0x10;
      ++*corrupted;
    }
    return true;
  };
  f.a_ports[0]->inject(std::vector<std::uint8_t>(30, 0xAB));  // not even an IP packet
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

}  // namespace
}  // namespace xroce::daemon
