// The conformance cases against xroce's transport itself, in one process: engine/transport QPs
// behind the wire codec (frames in, frames out, the ICRC checked as the data path checks it),
// with a virtual clock. Time passes only when the peer waits, and the QPs' timers fire as it
// does, so ACK timeouts and RNR timers are exact and cost nothing.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "target.h"
#include "transport/memory.h"
#include "transport/qp.h"

namespace xroce::conform {

// The addresses the in-process target and its peer use: 198.18.0.1 and .2, or 2001:2::1 and ::2.
Endpoints inprocess_endpoints(bool ipv6 = false);

class InProcessDevice final : public Target, public Link {
 public:
  explicit InProcessDevice(const Endpoints& ends);
  ~InProcessDevice() override;

  // Target
  Capabilities capabilities() override;
  QpInfo create_qp(const QpSpec& spec) override;
  void destroy_qp(const QpInfo& qp) override;
  MrInfo register_mr(std::uint32_t length, std::uint32_t access) override;
  void write_mr(const MrInfo& mr, std::uint32_t offset,
                const std::vector<std::uint8_t>& data) override;
  std::vector<std::uint8_t> read_mr(const MrInfo& mr, std::uint32_t offset,
                                    std::uint32_t length) override;
  void post_recv(const QpInfo& qp, std::uint64_t wr_id, const MrInfo& mr, std::uint32_t offset,
                 std::uint32_t length) override;
  void post_send(const QpInfo& qp, const SendSpec& wr) override;
  std::vector<Cqe> poll(const QpInfo& qp) override;
  bool in_error(const QpInfo& qp) override;

  // Link
  std::uint64_t now_ns() override { return now_ns_; }
  void send(const Frame& frame) override;
  std::optional<Frame> receive(std::uint64_t deadline_ns) override;
  void idle_until(std::uint64_t deadline_ns) override;

  // Frames the data path's door refused (did not decode, bad ICRC, no such QP).
  std::uint64_t dropped_frames() const { return dropped_; }

 private:
  struct QpSlot {
    std::unique_ptr<transport::Qp> qp;
    std::deque<Cqe> cqes;
  };
  QpSlot* find_qpn(std::uint32_t qpn);
  QpSlot& slot(const QpInfo& qp);
  // Drains every QP's transmits into pending_ and completions into their CQs.
  void drain_outputs();
  // Runs the QPs up to `deadline_ns`; stops early (returns true) when a frame is pending.
  bool run_until(std::uint64_t deadline_ns, bool stop_on_frame);

  Endpoints ends_;
  std::uint64_t now_ns_ = 1'000'000;
  transport::LocalMemory memory_;
  transport::MemoryRegionTable mrs_{memory_};
  std::vector<transport::MemoryRegion> regions_;  // by MrInfo::id
  std::map<std::uint32_t, QpSlot> qps_;           // by QPN (== QpInfo::id)
  std::uint32_t next_qpn_ = 0x11;
  std::deque<Frame> pending_;
  std::uint64_t dropped_ = 0;
};

}  // namespace xroce::conform
