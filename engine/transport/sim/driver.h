// The workload driver's state and steps (internal to engine/transport/sim): workload.cc builds
// the network and runs the loop, driver_post.cc posts operations, driver_check.cc checks what
// completes. One Driver is one seeded run; nothing here is shared between runs.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/sim/network.h"
#include "net/sim/rng.h"
#include "transport/memory.h"
#include "transport/qp.h"
#include "transport/sim/workload.h"
#include "wire/frame.h"

namespace xroce::transport::sim {

namespace ns = xroce::net::sim;

// The inline-data limit the driver's QPs offer; small messages sometimes go inline.
inline constexpr std::uint32_t kMaxInlineBytes = 64;

// Deterministic message contents: byte i of a message is a function of (seed, i).
std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t i);
void fill_pattern(std::span<std::uint8_t> out, std::uint64_t seed);
bool matches_pattern(std::span<const std::uint8_t> in, std::uint64_t seed);
// The smallest local ACK timeout exponent (4.096 µs x 2^t, IBA 9.7.6.1.3) that waits at least
// four times `rtt_ns`, at most 31: a scenario's timeout that no round trip it builds can reach.
std::uint8_t timeout_exp_covering(double rtt_ns);

// A send WQE the driver posted, in posting order per QP. Most belong to an operation of the
// workload (`slot` of the posting endpoint); binds and LOCAL_INVs are posted on the peer's QP
// for an operation of the other side (`flow_owner`), and hold no slot.
struct PendingOp {
  enum class Role : std::uint8_t { kOp, kBind, kLocalInv };
  Role role = Role::kOp;
  std::uint64_t wr_id = 0;
  OpKind kind = OpKind::kSend;
  std::uint32_t length = 0;
  std::uint32_t slot = 0;
  std::uint64_t pattern = 0;
  std::uint64_t expected_original = 0;
  bool signaled = true;
  bool ends_op = true;  // the op is done when this WQE completes (else a flow continues)
};

struct ExpectedRecv {
  OpKind kind = OpKind::kSend;
  std::uint32_t length = 0;
  std::uint64_t pattern = 0;
  std::uint32_t imm = 0;
  bool has_imm = false;
  bool write_imm = false;
  wire::Rkey inv_rkey;  // SEND_WITH_INV
};

// A memory-window operation of the posting endpoint `e` (kSendInv, kMwWrite): the peer binds
// a window over the target slot, `e` writes through it, then the window is invalidated, by a
// SEND_WITH_INV from `e` or the peer's LOCAL_INV.
struct WindowFlow {
  enum class Phase : std::uint8_t { kBinding, kWriting, kInvalidating };
  Phase phase = Phase::kBinding;
  std::uint64_t op_wr_id = 0;
  OpKind kind = OpKind::kMwWrite;
  wire::Rkey rkey;  // the window's R_Key after the bind
  bool zero_based = false;
  std::uint32_t offset = 0;  // where in the window the WRITE lands
  std::uint32_t length = 0;
  std::uint64_t pattern = 0;
};

// A UC message in flight. Its slot is free again once the sender completed it and the
// receiver's expected PSN moved past it (it executed, or was dropped): the receiver never
// holds more UC messages of this endpoint than it has receive WQEs. A WRITE without
// immediate has no receive completion, so its bytes are checked then, on a network that
// loses nothing.
struct UcInFlight {
  wire::Psn last_psn;
  std::uint64_t wr_id = 0;
  OpKind kind = OpKind::kUcSend;
  std::uint32_t slot = 0;
  std::uint32_t length = 0;
  std::uint64_t pattern = 0;
  bool sent = false;  // the sender's completion was seen
};

struct Node;

// One QP and the memory it works on. Layout of its buffer: [src slots][target slots]
// [recv slots][atomic word].
struct Endpoint {
  Node* node = nullptr;
  Endpoint* peer = nullptr;
  QpType type = QpType::kRc;
  std::unique_ptr<Qp> qp;
  wire::FrameAddress addr;  // Ethernet/IP/UDP around this QP's packets
  std::uint64_t base = 0;
  MemoryRegion mr;
  std::uint64_t src = 0, target = 0, recv = 0, atomic_word = 0;
  std::vector<std::uint32_t> free_slots;
  std::deque<PendingOp> outstanding;
  std::deque<ExpectedRecv> expected_recvs;  // messages this endpoint will receive, in order
  std::uint64_t atomic_model = 0;           // value of the peer's atomic word after our posts
  // Windows over this endpoint's target slots, one per slot of the peer, and their R_Keys.
  std::vector<wire::Rkey> windows;
  std::map<std::uint32_t, WindowFlow> flows;  // by slot: this endpoint's window operations
  wire::Psn uc_next_psn;                      // UC: the PSN the next posted message starts at
  std::deque<UcInFlight> uc_in_flight;        // UC messages toward the peer, in PSN order
};

struct Node {
  LocalMemory mem;
  MemoryRegionTable mrs{mem};
  ns::NodeId host = 0;
  std::shared_ptr<InflightBudget> inflight_budget;  // ScenarioConfig::inflight_budget_psns
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::unordered_map<std::uint32_t, Endpoint*> by_qpn;
  std::size_t tx_turn = 0;  // the endpoint the NIC asks for a packet first (round robin)
  // ScenarioConfig::stall_every_us: the NIC does nothing before stalled_until_ns; its next
  // stall starts at next_stall_ns.
  std::uint64_t stalled_until_ns = 0;
  std::uint64_t next_stall_ns = 0;
  bool stalled(std::uint64_t now_ns) const { return now_ns < stalled_until_ns; }
};

class Driver {
 public:
  explicit Driver(const ScenarioConfig& c)
      : cfg_(c), rng_(c.seed), stall_rng_(c.seed ^ 0x57A11), net_(c.seed ^ 0x5EED) {
    summary_.seed = c.seed;
  }
  Summary run();

 private:
  // workload.cc
  std::uint8_t pick_timeout_exp() const;
  void build_network();
  void build_nodes();
  Endpoint& make_endpoint(std::size_t node, QpType type);
  void connect_qp(Endpoint& e, std::uint32_t peer_qpn, wire::Psn sq_psn, wire::Psn rq_psn);
  void transmit_all();
  bool transmit_one(Node& node, Endpoint& e);
  void deliver_all();
  void fire_timers();
  void schedule_stalls();
  std::optional<std::uint64_t> next_wakeup() const;
  bool done() const;
  void finish();
  bool faulty() const;
  std::string describe_outstanding() const;

  // driver_post.cc
  void post_work();
  void post_one(Endpoint& e);
  bool post(Endpoint& e, const WorkRequest& wr, const PendingOp& op);
  void prepare_send_write(Endpoint& e, PendingOp& op, WorkRequest& wr);
  void prepare_read(Endpoint& e, PendingOp& op, WorkRequest& wr);
  void prepare_atomic(Endpoint& e, PendingOp& op, WorkRequest& wr);
  void prepare_atomic_write(Endpoint& e, PendingOp& op, WorkRequest& wr);
  void prepare_flush(Endpoint& e, PendingOp& op, WorkRequest& wr);
  void start_window_flow(Endpoint& e, const PendingOp& op);
  void flow_write(Endpoint& e, std::uint32_t slot);
  void flow_invalidate(Endpoint& e, std::uint32_t slot);
  std::optional<OpKind> pick_kind(const Endpoint& e);
  std::uint32_t pick_length(OpKind k);
  std::vector<Sge> split_sges(const Endpoint& e, std::uint64_t addr, std::uint32_t len);
  void post_recv(Endpoint& e, std::uint32_t slot);

  // driver_check.cc
  bool poll_completions();  // true if any completion was seen
  void on_send_completion(Endpoint& e, const Completion& c);
  void on_flow_step(Endpoint& e, const PendingOp& op, const Completion& c);
  void retire(Endpoint& e, const PendingOp& op);
  void on_recv_completion(Endpoint& e, const Completion& c);
  std::span<const std::uint8_t> recv_bytes(Endpoint& e, const ExpectedRecv& x, const Completion& c);
  void check_uc_progress(Endpoint& e);
  void check_window_gone(const Endpoint& owner, wire::Rkey rkey);
  void fail(const std::string& why);

  std::uint64_t slot_addr(std::uint64_t area, std::uint32_t slot) const {
    return area + std::uint64_t{slot} * slot_bytes_;
  }

  ScenarioConfig cfg_;
  ns::Rng rng_;
  ns::Rng stall_rng_;  // its own stream: a run without stalls draws the same workload
  ns::Network net_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<ns::PortId> switch_ports_;  // the switch's port toward each host
  std::uint32_t slot_bytes_ = 0;
  std::uint32_t recv_slots_ = 0;
  std::uint8_t timeout_exp_ = 0;
  std::uint64_t next_wr_id_ = 1;
  std::uint64_t now_ = 0;
  Summary summary_;
  std::array<std::uint8_t, 4096> payload_{};
};

}  // namespace xroce::transport::sim
