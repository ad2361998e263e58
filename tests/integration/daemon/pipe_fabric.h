// The in-process fabric of the worker tests: two Datapaths (engine/daemon/datapath.h) with real
// worker threads, io_uring sleeps and the real transport, joined by "pipe" ports that hand each
// transmitted frame to the other side's receive queue. No namespaces, no root. The tests play
// the provider: they queue work requests in a Mailbox per QP and wait on its completions.
//
// Threading: a test thread queues work and reads results; the workers call the ports and the
// bindings. Everything shared between them is guarded (mutex or atomic) or set before the QPs
// are placed (PipePort::peer, PipePort::tamper).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/eventually.h"
#include "daemon/datapath.h"
#include "transport/memory.h"

namespace xroce::daemon::test {

using xroce::test::eventually;

struct SentFrame {
  std::uint64_t at_ns;  // monotonic_now_ns() when the worker handed it to the port
  std::vector<std::uint8_t> bytes;
};

// A port whose transmit lands in `peer`'s receive queue. It records what it sent, with the time;
// `tamper` may edit a frame or drop it (return false) on its way; `mark_ce` sets IP ECN = CE on
// RoCE request frames, as a congested switch would; `drop` loses every frame it sends.
class PipePort final : public net::Port {
 public:
  PipePort();
  ~PipePort() override;
  PipePort(const PipePort&) = delete;
  PipePort& operator=(const PipePort&) = delete;

  PipePort* peer = nullptr;
  std::function<bool(std::vector<std::uint8_t>&)> tamper;
  std::atomic<bool> mark_ce{false};
  std::atomic<bool> drop{false};

  // Queues a frame for receive, from any thread.
  void inject(std::vector<std::uint8_t> frame);
  std::vector<SentFrame> sent();

  net::Result<std::size_t, net::PortError> receive(std::span<net::RxFrame> frames) override;
  void release(std::span<const net::RxFrame> frames) override;
  net::Result<std::size_t, net::PortError> transmit(std::span<const net::TxFrame> frames) override;
  net::Result<std::size_t, net::PortError> flush() override { return std::size_t{0}; }
  int wait_fd() const override { return efd_; }
  net::PortStats stats() const override;
  net::PortMode mode() const override { return net::PortMode::kUdpSocket; }
  std::size_t max_frame_bytes() const override { return 9014; }

 private:
  int efd_;
  mutable std::mutex m_;
  std::deque<std::vector<std::uint8_t>> queue_;
  std::map<std::uint64_t, std::vector<std::uint8_t>> held_;
  std::uint64_t next_handle_ = 1;
  std::vector<SentFrame> sent_;
  net::PortStats stats_;
};

// The test's stand-in for one QP's provider rings: work the test queues, completions and
// events the worker delivers.
struct Mailbox {
  std::mutex m;
  std::condition_variable cv;
  std::deque<transport::WorkRequest> sends;
  std::deque<transport::RecvRequest> recvs;
  // Receive WQEs as if posted just after the worker's last pull: pull_work_on_worker leaves
  // them; only the responder's ask (pull_receives_on_worker) finds them.
  std::deque<transport::RecvRequest> late_recvs;
  std::vector<transport::Completion> completions;
  std::vector<transport::AsyncEvent> events;

  // Waits (with a deadline, no sleep) until `n` completions arrived; returns them all.
  std::vector<transport::Completion> wait(std::size_t n,
                                          std::chrono::seconds limit = std::chrono::seconds(20));
};

class MailboxBinding final : public QpBinding {
 public:
  static constexpr std::uint32_t kAvId = 1;  // the one address vector a test QP has

  MailboxBinding(std::shared_ptr<Mailbox> box, wire::FrameAddress av)
      : box_(std::move(box)), av_(av) {}
  bool pull_work_on_worker(transport::Qp& qp) override;
  void pull_receives_on_worker(transport::Qp& qp) override;
  bool work_pending_on_worker() const override;
  void complete_on_worker(const transport::Completion& c) override;
  void event_on_worker(const transport::AsyncEvent& e) override;
  const wire::FrameAddress* address_on_worker(std::uint32_t av_id) override {
    return av_id == kAvId ? &av_ : nullptr;
  }

 private:
  std::shared_ptr<Mailbox> box_;
  wire::FrameAddress av_;
};

inline constexpr std::uint32_t kIpA = 0xC6120001;  // 198.18.0.1
inline constexpr std::uint32_t kIpB = 0xC6120002;  // 198.18.0.2

// IPv4 from `src_v4` to `dst_v4`, MACs 02:00:00:00:00:<last address byte>.
wire::FrameAddress address(std::uint32_t src_v4, std::uint32_t dst_v4,
                           std::uint8_t traffic_class = 0);

// A QP a test places: brought to RTS (RC: connected to `peer`) on one worker.
struct QpSetup {
  transport::QpType type = transport::QpType::kRc;
  wire::Qpn qpn;
  wire::Qpn peer;
  wire::FrameAddress av;
  std::uint8_t timeout = 10;  // local ACK timeout code (10: ~4 ms)
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;  // 7 = infinite
  std::uint32_t worker = 0;
  std::optional<std::uint32_t> window;  // unacknowledged PSNs in flight (else the default)
};

inline constexpr std::size_t kSideMemBytes = 1 << 21;
inline constexpr std::uint32_t kAllAccess =
    transport::access::kLocalWrite | transport::access::kRemoteWrite |
    transport::access::kRemoteRead | transport::access::kRemoteAtomic;

// One side of the fabric: its memory (one registered region), the datapath its QPs are placed
// on (shared: two sides may place QPs on one device), its ports (port is the one of queue 0) and
// a mailbox per placed QP. Most tests place one QP per side: `qpn` and `box` are the last one
// placed, and post_send/post_recv without a QPN go to it.
struct Side {
  explicit Side(std::size_t mem_bytes = kSideMemBytes, std::uint32_t access = kAllAccess);

  transport::LocalMemory mem;
  transport::MemoryRegionTable mrs{mem};
  std::uint64_t buf;
  transport::MemoryRegion mr;
  std::shared_ptr<Datapath> dp;
  std::vector<PipePort*> ports;
  PipePort* port = nullptr;
  std::map<std::uint32_t, std::shared_ptr<Mailbox>> boxes;
  wire::Qpn qpn;
  std::shared_ptr<Mailbox> box;

  void place_qp(const QpSetup& setup);
  Mailbox& mailbox(wire::Qpn q) { return *boxes.at(q.value()); }
  Worker& worker() { return dp->worker(0); }

  std::span<std::uint8_t> bytes(std::uint64_t off, std::size_t len) {
    return mem.view(buf + off, len);
  }
  transport::Sge sge(std::uint64_t off, std::uint32_t len) const {
    return transport::Sge{buf + off, len, mr.lkey};
  }
  // Queue work for a QP and ring its worker's doorbell.
  void post_send(wire::Qpn to, transport::WorkRequest wr);
  void post_recv(wire::Qpn to, transport::RecvRequest wr);
  void post_send(transport::WorkRequest wr) { post_send(qpn, std::move(wr)); }
  void post_recv(transport::RecvRequest wr) { post_recv(qpn, std::move(wr)); }
  // An RDMA WRITE of `bytes` from the start of our region to the same offset of the peer's.
  void write(wire::Qpn to, std::uint64_t wr_id, std::uint32_t bytes, std::uint32_t rkey);

  // The device's count of `c`: every worker's block.
  std::uint64_t counter(device::Counter c);
  // Edits the device's DCQCN parameters on every worker.
  void set_cc(const std::function<void(cc::CcDevice&)>& edit);
  QpCcStatus cc_of(wire::Qpn of);
};

// Two datapaths joined by pipes: A with `a_workers` workers, each on its own port, B with one.
// Every frame from B lands on A's queue 0, as RSS might put it.
struct PipeFabric {
  PipeFabric(std::uint32_t a_workers, std::size_t mem_bytes, std::uint32_t access);
  // Every worker stops before any port goes away: each transmits into the other side's.
  ~PipeFabric();
  PipeFabric(const PipeFabric&) = delete;
  PipeFabric& operator=(const PipeFabric&) = delete;

  Side a;
  Side b;
};

}  // namespace xroce::daemon::test
