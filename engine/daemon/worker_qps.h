// The QPs a worker hosts: the device side of each (QpBinding, where its work comes from and
// where its results go), the congestion-control state the worker attaches to it, and what the
// worker has already counted of it. Every part of the worker (worker.h) reaches the QPs
// through one HostedQps table, owned by the Worker.
//
// Threading: everything here belongs to the owning worker's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cc/qp_congestion.h"
#include "daemon/worker_ready.h"
#include "transport/qp.h"
#include "wire/frame.h"

namespace xroce::daemon {

// The device side of a hosted QP: where its work comes from and where its results go. The
// provider's shared-memory rings (include/xroce/queues.h) implement it; tests use plain queues.
// Every member runs on the owning worker.
class QpBinding {
 public:
  virtual ~QpBinding() = default;
  // Posts to `qp` the work requests that appeared in its send/receive rings since the last call.
  // Returns whether it posted anything.
  virtual bool pull_work_on_worker(transport::Qp& qp) = 0;
  // Posts to `qp` only the receive WQEs (of its RQ, its SRQ, an XRC target's SRQs) that
  // appeared since the last pull: what its responder asks for when it finds none
  // (transport::ReceiveSource). Sends stay for the next pull_work_on_worker.
  virtual void pull_receives_on_worker(transport::Qp& qp) { (void)qp; }
  // Cheap check before the worker sleeps: is there work pull_work_on_worker would take?
  virtual bool work_pending_on_worker() const = 0;
  virtual void complete_on_worker(const transport::Completion& completion) = 0;
  virtual void event_on_worker(const transport::AsyncEvent& event) = 0;
  // The state the QP's transport is in after a turn that touched it (so after any move to the
  // error state it made itself): whether posted receives need a doorbell (queues.h "Receive
  // doorbells").
  virtual void state_on_worker(transport::QpState state) { (void)state; }
  // The eventfds the provider rings when it finds the engine asleep (queues.h doorbells); the
  // worker sleeps on them.
  virtual std::vector<int> doorbell_fds_on_worker() const { return {}; }
  // Publishes to the provider whether the engine sleeps (queues.h `wakeup`): true before the
  // worker's last look for work, false once it is awake again. Not called for a binding with a
  // ready bit.
  virtual void set_asleep_on_worker(bool asleep) { (void)asleep; }
  // The bit (worker_ready.h) the provider sets whenever any ring this binding pulls gets work,
  // or none (page null): the worker then pulls this binding every turn and tells it when it
  // sleeps.
  virtual ReadyBit ready_bit_on_worker() const { return {}; }
  // The address vector `av_id` names (RC: the one modify_qp set; UD: an address handle), or
  // nullptr. A dst_mac of all zeros asks the worker to resolve it from dst_ip.
  virtual const wire::FrameAddress* address_on_worker(std::uint32_t av_id) = 0;
  // Whether a packet that arrived with these addresses may reach the QP: for a connected QP,
  // only from its peer's address to the address its path uses (rxe's check_addr); the worker
  // drops and counts (rx_peer_mismatch) the others.
  virtual bool accepts_from_on_worker(const wire::FrameAddress& addr) const {
    (void)addr;
    return true;
  }
};

// A QP handed to a worker (Datapath::add_qp).
struct HostedQp {
  std::unique_ptr<transport::Qp> qp;
  std::unique_ptr<QpBinding> binding;
};

// The congestion-control hooks the worker attaches to a connected RC QP: engine/cc's
// QpCongestion, except that CE marks reach its notification point from the worker, which sees
// the opcode (no CNP for an ACK or a CNP, docs/protocol.md §5.2), not from the transport.
class WorkerQpCongestion final : public transport::CongestionHooks {
 public:
  WorkerQpCongestion(const cc::CcDevice& device, wire::Qpn peer, std::uint8_t traffic_class)
      : qp_cc(device, peer, traffic_class), traffic_class(traffic_class) {}
  std::uint64_t earliest_send_ns(std::uint64_t now_ns) override {
    return qp_cc.earliest_send_ns(now_ns);
  }
  bool on_transmit(std::uint64_t now_ns, std::uint32_t bytes) override {
    return qp_cc.on_transmit(now_ns, bytes);
  }
  void on_cnp(std::uint64_t now_ns) override { qp_cc.on_cnp(now_ns); }
  void on_ce_marked(std::uint64_t /*now_ns*/) override {}  // the worker calls the NP itself

  cc::QpCongestion qp_cc;
  std::uint8_t traffic_class;  // of the path it was made for (its priority)
};

// A QP's congestion-control state as `xroce qp show` prints it.
struct QpCcStatus {
  bool active = false;  // congestion control on for its priority (rates below are its own)
  double rate_mbps = 0;
  double target_rate_mbps = 0;
  double alpha = 0;
  std::string stage;  // cc::stage_name, "none" for a QP without congestion control
  int priority = 0;
  cc::CcCounters counters;
};

// A hosted QP with what the worker keeps beside it.
// The worker attaches each Hosted to its QP as the responder's ReceiveSource.
struct Hosted final : transport::ReceiveSource {
  void pull_receives() override { binding->pull_receives_on_worker(*qp); }

  std::unique_ptr<transport::Qp> qp;
  std::unique_ptr<QpBinding> binding;
  std::unique_ptr<WorkerQpCongestion> cc;  // connected RC QPs only (TimersAndPacing)
  ReadyBit ready;                          // binding->ready_bit_on_worker(), taken when hosted
  // The worker's lists (worker_work.h): in the WorkList, in the queue for the InflightBudget,
  // and the deadline its DeadlineQueue holds for it.
  bool listed = false;
  bool budget_listed = false;
  std::optional<std::uint64_t> timer_key;
  transport::QpCounters reported;  // what WorkerCounters has added of qp's counters
  cc::CcCounters cc_reported;      // and of cc's
};

// By QPN.
using HostedQps = std::unordered_map<std::uint32_t, Hosted>;

}  // namespace xroce::daemon
