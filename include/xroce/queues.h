// The data path shared by the provider and xroced (docs/ARCHITECTURE.md decision 4): work queues
// and completion queues in shared memory.
//
// Memory. For each CQ, each QP (send and receive queue in one region) and each SRQ, the daemon
// creates a memfd, sizes it, maps it, and passes it to the provider with SCM_RIGHTS in the reply
// of the create op (include/xroce/control.h says which reply carries which fds). The provider
// maps it MAP_SHARED. The daemon never trusts what a client writes in the region: it reads each
// index once, bounds-checks it against the ring size it keeps itself (not the copy in the
// region), and copies a slot out before validating it.
//
// A region holds one or two rings. Each ring is a RingHeader followed by `slot_count` slots of
// `slot_bytes` bytes each (slot_count a power of two). Indices are free-running uint32 counters;
// slot i lives at (i & (slot_count - 1)). A ring is full when producer - consumer == slot_count.
//
// Who writes what, and with which memory order:
//
//   ring       producer (writes slots, then `producer` with release)   consumer (reads
//                                                                       `producer` with acquire,
//                                                                       then slots, then
//                                                                       `consumer` with release)
//   SQ, RQ     provider (ibv_post_send / ibv_post_recv)                 daemon worker
//   SRQ        provider (ibv_post_srq_recv)                             daemon worker
//   CQ         daemon worker (writes CQEs)                              provider (ibv_poll_cq)
//
//   The producer reads `consumer` with acquire to learn which slots it may overwrite.
//
// Doorbells (the AF_XDP need_wakeup idea). A daemon worker that is about to sleep stores
// kEngineAsleep in `wakeup` of every work ring it serves (seq_cst), then re-reads each ring's
// `producer` before it really sleeps; a worker that wakes stores kEngineAwake. After publishing
// `producer` (seq_cst store) the provider loads `wakeup` (seq_cst); only when it reads
// kEngineAsleep does it write 1 to the doorbell eventfd passed with the queue. While the engine
// is awake, posting makes no system call. The seq_cst pair on both sides (store then load of
// the other's word) is the Dekker pattern: either the worker sees the new producer index, or the
// provider sees kEngineAsleep and rings.
//
// Ready bits (the context page). A worker hosting a thousand QPs must not read a thousand rings
// each turn nor write a thousand `wakeup` words each time it sleeps and wakes. So each context
// also has one page (ContextPage, a memfd passed in Op::hello's reply after the doorbell), and
// the daemon may give a QP's send and receive rings one bit of it (`ready_bit` in both headers,
// written before the region's fd is passed). After publishing `producer` (seq_cst) to a ring
// with a ready bit, the provider sets the bit (fetch_or, seq_cst; skipped when it already reads
// it set) and then loads the page's `asleep_workers` (seq_cst): nonzero means a worker serving
// the context sleeps, and it rings the doorbell. A worker takes the bits of its own QPs
// (fetch_and, seq_cst) and pulls only those rings; it sleeps by adding one to `asleep_workers`
// (seq_cst) and then looking at its ready bits once more: the same Dekker
// pairing as `wakeup`, one word per context instead of one per ring. A ring without a ready bit
// (kNoReadyBit: SRQs, XRC targets, a context whose page is full) keeps the per-ring protocol
// above, and the provider rings when either word says asleep.
//
// Receive doorbells. A responder reads its QP's RQ only when a request needs a receive WQE, and
// then the worker pulls what was posted since (transport::ReceiveSource), so a receive posted to
// a healthy QP does not need the worker awake: rxe too kicks its responder on a post only for a
// QP in the error state (rxe_verbs.c rxe_post_recv). The daemon stores kReceiveDoorbellSkip in
// the RQ's `receive_doorbell` while a worker hosts the QP in a state where a posted receive
// waits for a request (INIT, RTR, RTS, SQD, SQE), and kReceiveDoorbellRing otherwise (the
// default): in the error state a posted receive must be flushed at once (IBA C10-42,
// C10-97.2.1). An SRQ's ring says Skip for good once workers run the QPs: nothing flushes an
// SRQ's WQEs, and each turn of a worker reads its SRQs before its packets. The provider loads
// `receive_doorbell` (seq_cst) after its ready bit or `wakeup` says the worker sleeps, and rings
// only if it reads kReceiveDoorbellRing. A worker that moves the QP to the error state stores
// kReceiveDoorbellRing before its next look for work: either it sees the ready bit (or `producer`)
// of a post that skipped the doorbell, or that post reads Ring. So a program reposting receives
// while its peer streams SENDs no longer wakes the worker, which preempted it on its own core, for
// each receive.
//
// CQ notification (ibv_req_notify_cq). The provider stores kArmNext or kArmSolicited in `arm`
// (seq_cst). A worker that has published CQEs (seq_cst store of `producer`) exchanges `arm` with
// kArmNone (seq_cst) when the new CQE qualifies (any CQE for kArmNext; a CQE with
// kCqeSolicited or an error status for kArmSolicited) and, if it took an arm, writes one
// control::CompletionEvent{cq cookie} on the CQ's completion channel. As with hardware, a CQE
// that was in the ring before arming does not raise an event: the application polls once more
// after arming, as every verbs program does.
//
// CQ overflow: a worker that finds the CQ full does not overwrite; it sets `overflow` and raises
// IBV_EVENT_CQ_ERR on the context's async socket (as real devices do).
//
// Completion tracking, for a device that dies. The daemon hands a WQE it takes from the SQ or RQ
// to the transport under its ring index, keeping the application's wr_id in the ring's shadow
// (an array of kShadowFactor * slot_count wr_ids after the rings, written only by the daemon),
// and when a completion comes back it writes the WQE's wr_id into the CQE and stores index + 1 in
// `completed` (release): every WQE before `completed` has completed. The transport holds at most
// slot_count WQEs of a queue, so those it holds lie in [consumer - slot_count, consumer). When
// the daemon vanishes, the provider completes the rest itself with IBV_WC_WR_FLUSH_ERR, as a NIC
// flushes a QP whose device died: the WQEs from max(completed, consumer - slot_count) up to its
// own producer index, their wr_ids read from the shadow (taken by the daemon) or the ring (not
// taken yet). A WQE that completed unsignaled after the last signaled one is flushed too: the
// application cannot tell.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

namespace xroce::queues {

inline constexpr uint32_t kRingMagic = 0x58524e47;  // "XRNG"
inline constexpr uint32_t kRingVersion = 3;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kPageBytesForContext = 4096;

// `wakeup` values.
inline constexpr uint32_t kEngineAwake = 0;
inline constexpr uint32_t kEngineAsleep = 1;

// `receive_doorbell` values (RQs; above, "Receive doorbells").
inline constexpr uint32_t kReceiveDoorbellRing = 0;
inline constexpr uint32_t kReceiveDoorbellSkip = 1;

// `arm` values (ibv_req_notify_cq(cq, solicited_only)).
inline constexpr uint32_t kArmNone = 0;
inline constexpr uint32_t kArmNext = 1;
inline constexpr uint32_t kArmSolicited = 2;

enum class RingKind : uint32_t { send = 1, recv = 2, srq = 3, cq = 4 };

static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "ring indices are shared between processes: they must be address-free");

struct RingHeader {
  // Written once by the daemon before the fd is passed; read-only afterwards. Both sides use
  // their own copy of slot_count/slot_bytes (from the control reply), these are for debugging
  // and for the provider to check what it mapped.
  uint32_t magic = kRingMagic;
  uint32_t version = kRingVersion;
  RingKind kind = RingKind::send;
  uint32_t slot_count = 0;
  uint32_t slot_bytes = 0;
  // The ring's bit in its context's ContextPage, or kNoReadyBit (read by the provider).
  uint32_t ready_bit = 0xffffffffu;
  uint32_t reserved0[10] = {};

  // Written by the producer only (release), read by the consumer (acquire).
  alignas(kCacheLine) std::atomic<uint32_t> producer{0};
  // Written by the consumer only (release), read by the producer (acquire).
  alignas(kCacheLine) std::atomic<uint32_t> consumer{0};
  // Written by the daemon only: kEngineAwake / kEngineAsleep (work rings); for CQs, nonzero
  // once the CQ overflowed; SQ and RQ: the index after the last completed WQE (release).
  alignas(kCacheLine) std::atomic<uint32_t> wakeup{kEngineAwake};
  std::atomic<uint32_t> overflow{0};
  std::atomic<uint32_t> completed{0};
  // RQ only, written by the daemon: kReceiveDoorbellRing / kReceiveDoorbellSkip (above).
  std::atomic<uint32_t> receive_doorbell{kReceiveDoorbellRing};
  // CQ only. Written by the provider (kArmNext/kArmSolicited), taken back to kArmNone by the
  // daemon's exchange.
  alignas(kCacheLine) std::atomic<uint32_t> arm{kArmNone};
  uint32_t reserved1[15] = {};
};
static_assert(sizeof(RingHeader) == 5 * kCacheLine);
static_assert(offsetof(RingHeader, producer) == kCacheLine);
static_assert(offsetof(RingHeader, consumer) == 2 * kCacheLine);

inline constexpr uint32_t kNoReadyBit = 0xffffffffu;

// A context's page of ready bits (above). One page: a cache line of `asleep_workers`, then the
// bits, word w holding bits [64 w, 64 w + 64).
struct ContextPage {
  // How many of the daemon's workers serving the context sleep. Written by those workers only.
  alignas(kCacheLine) std::atomic<uint32_t> asleep_workers{0};
  // Set by the provider, taken (cleared) by the worker hosting the ring's QP.
  alignas(kCacheLine) std::atomic<uint64_t> ready[(kPageBytesForContext - kCacheLine) / 8];
};
static_assert(sizeof(ContextPage) == kPageBytesForContext);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
inline constexpr uint32_t kReadyBits = sizeof(ContextPage::ready) * 8;

// One scatter/gather element, as ibv_sge.
struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
static_assert(sizeof(Sge) == 16);

// WQE flags beyond ibv_send_flags (which keep their own bits in send_flags).
inline constexpr uint32_t kMaxInlineData = 256;  // as rxe (and transport::QpConfig)

// A send WQE: the fixed part, then `num_sge` Sge, or `inline_bytes` bytes of inline data when
// send_flags has IBV_SEND_INLINE. All integers in host order except imm_data, which holds
// ibv_send_wr.imm_data as the application gave it (network order). Per opcode:
//   BIND_MW       invalidate_rkey: the window's current R_Key; rkey: the R_Key it takes;
//                 remote_addr, compare_add: the bound range (ibv_mw_bind_info addr, length);
//                 mw_lkey, mw_access: the region and the window's access flags
//   LOCAL_INV     invalidate_rkey
//   ATOMIC_WRITE  remote_addr, rkey; compare_add: the 8 bytes, in memory order
//   FLUSH         remote_addr, rkey, flush_length, flush_type, flush_level (rdma-core v45)
//   XRC_SEND QPs  xrc_remote_srqn: the target XRC SRQ of every request
struct SendWqe {
  uint64_t wr_id;
  uint32_t opcode;      // ibv_wr_opcode
  uint32_t send_flags;  // ibv_send_flags
  uint32_t num_sge;
  uint32_t inline_bytes;
  uint32_t imm_data;         // SEND_WITH_IMM, RDMA_WRITE_WITH_IMM (network order)
  uint32_t invalidate_rkey;  // SEND_WITH_INV, LOCAL_INV, BIND_MW (see above)
  uint64_t remote_addr;      // RDMA and atomics
  uint32_t rkey;
  uint32_t reserved0;
  uint64_t compare_add;  // ATOMIC_CMP_AND_SWP compare, ATOMIC_FETCH_AND_ADD add
  uint64_t swap;         // ATOMIC_CMP_AND_SWP swap
  // UD: the address handle (a control handle of create_ah) and destination.
  uint32_t ah_handle;
  uint32_t remote_qpn;
  uint32_t remote_qkey;
  uint32_t reserved1;
  uint32_t mw_lkey;
  uint32_t mw_access;
  uint32_t xrc_remote_srqn;
  uint32_t flush_length;
  uint8_t flush_type;   // placement type: IBV_FLUSH_GLOBAL / IBV_FLUSH_PERSISTENT bits
  uint8_t flush_level;  // selectivity: IBV_FLUSH_RANGE, IBV_FLUSH_MR
  uint8_t reserved2[6];
  // followed by Sge[num_sge] or inline bytes
};
static_assert(sizeof(SendWqe) == 104);
static_assert(std::is_trivially_copyable_v<SendWqe>);

// A receive WQE (RQ and SRQ): the fixed part, then Sge[num_sge].
struct RecvWqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t reserved;
  // followed by Sge[num_sge]
};
static_assert(sizeof(RecvWqe) == 16);

// CQE flags beyond ibv_wc_flags.
inline constexpr uint8_t kCqeSolicited = 1;  // the message carried SE

// A completion: every ibv_wc field. imm_data is in network order as ibv_wc holds it; for
// IBV_WC_WITH_INV it holds the invalidated rkey in host order (the ibv_wc union). timestamp_ns
// is when the device made the completion, in CLOCK_MONOTONIC nanoseconds (the device's clock:
// hca_core_clock 1 GHz; IBV_WC_EX_WITH_COMPLETION_TIMESTAMP).
struct Cqe {
  uint64_t wr_id;
  uint32_t status;  // ibv_wc_status
  uint32_t opcode;  // ibv_wc_opcode
  uint32_t vendor_err;
  uint32_t byte_len;
  uint32_t imm_data;
  uint32_t qp_num;
  uint32_t src_qp;
  uint32_t wc_flags;  // ibv_wc_flags
  uint16_t pkey_index;
  uint16_t slid;
  uint8_t sl;
  uint8_t dlid_path_bits;
  uint8_t flags;  // kCqeSolicited
  uint8_t reserved;
  uint64_t timestamp_ns;
  uint8_t reserved2[8];
};
static_assert(sizeof(Cqe) == 64);
static_assert(std::is_trivially_copyable_v<Cqe>);

inline constexpr uint32_t send_slot_bytes(uint32_t max_sge, uint32_t max_inline) {
  const uint32_t sges = max_sge * static_cast<uint32_t>(sizeof(Sge));
  const uint32_t payload = sges > max_inline ? sges : max_inline;
  return (static_cast<uint32_t>(sizeof(SendWqe)) + payload + 15u) & ~15u;
}
inline constexpr uint32_t recv_slot_bytes(uint32_t max_sge) {
  return static_cast<uint32_t>(sizeof(RecvWqe) + max_sge * sizeof(Sge));
}
inline constexpr uint32_t round_up_pow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n)
    p <<= 1;
  return p;
}
inline constexpr std::size_t kPageBytes = 4096;
inline constexpr std::size_t page_round(std::size_t n) {
  return (n + kPageBytes - 1) & ~(kPageBytes - 1);
}
// Bytes one ring takes in its region (header + slots, page-rounded so a second ring starts on
// its own page).
inline constexpr std::size_t ring_bytes(uint32_t slot_count, uint32_t slot_bytes) {
  return page_round(sizeof(RingHeader) + std::size_t{slot_count} * slot_bytes);
}

// One ring as either side sees it: the header and slots at `base`, with the geometry the side
// holds itself. No allocation, no system call; not thread-safe (verbs on one queue are
// serialised by the provider's per-queue lock; one worker owns a queue in the daemon).
class Ring {
 public:
  Ring() = default;
  Ring(void* base, uint32_t slot_count, uint32_t slot_bytes)
      : header_(static_cast<RingHeader*>(base)),
        slots_(static_cast<uint8_t*>(base) + sizeof(RingHeader)),
        mask_(slot_count - 1),
        slot_bytes_(slot_bytes) {}

  // The daemon formats a fresh ring once, before passing it on.
  static void format(void* base, RingKind kind, uint32_t slot_count, uint32_t slot_bytes,
                     uint32_t ready_bit = kNoReadyBit) {
    auto* h = new (base) RingHeader{};
    h->kind = kind;
    h->slot_count = slot_count;
    h->slot_bytes = slot_bytes;
    h->ready_bit = ready_bit;
  }

  bool valid() const { return header_ != nullptr; }
  RingHeader& header() const { return *header_; }
  uint32_t slot_count() const { return mask_ + 1; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  uint8_t* slot(uint32_t index) const { return slots_ + std::size_t{index & mask_} * slot_bytes_; }

  // Producer side.
  // Slots free for writing, from the producer's private index `next`.
  uint32_t free_slots(uint32_t next) const {
    const uint32_t used = next - header_->consumer.load(std::memory_order_acquire);
    return used >= slot_count() ? 0 : slot_count() - used;
  }
  // Makes slots up to (not including) `next` visible to the consumer, and sets the ring's ready
  // bit in `page` (the context's; null: none). Returns true when the consumer said it sleeps
  // and the doorbell must be rung (not for an RQ whose receives the worker pulls on arrival).
  bool publish(uint32_t next, ContextPage* page = nullptr) const {
    header_->producer.store(next, std::memory_order_seq_cst);
    const uint32_t bit = header_->ready_bit;
    bool asleep = false;
    if (page != nullptr && bit < kReadyBits) {
      std::atomic<uint64_t>& word = page->ready[bit / 64];
      const uint64_t mask = uint64_t{1} << (bit % 64);
      // The load may skip the store only when the bit is set: then the worker has not taken it
      // yet, and taking it reads `producer` after our store.
      if ((word.load(std::memory_order_seq_cst) & mask) == 0)
        word.fetch_or(mask, std::memory_order_seq_cst);
      asleep = page->asleep_workers.load(std::memory_order_seq_cst) != 0;
    }
    if (!asleep && header_->wakeup.load(std::memory_order_seq_cst) != kEngineAsleep) return false;
    return header_->receive_doorbell.load(std::memory_order_seq_cst) != kReceiveDoorbellSkip;
  }

  // Consumer side.
  // Slots ready to read, from the consumer's private index `next`; a count beyond slot_count
  // means a corrupt producer and is reported as 0 (the daemon treats it as a fatal QP error).
  uint32_t ready(uint32_t next) const {
    const uint32_t available = header_->producer.load(std::memory_order_acquire) - next;
    return available > slot_count() ? 0 : available;
  }
  bool corrupt(uint32_t next) const {
    return header_->producer.load(std::memory_order_acquire) - next > slot_count();
  }
  void release(uint32_t next) const { header_->consumer.store(next, std::memory_order_release); }
  // Daemon side of a work ring: every WQE before `next` has completed.
  void complete(uint32_t next) const { header_->completed.store(next, std::memory_order_release); }

 private:
  RingHeader* header_ = nullptr;
  uint8_t* slots_ = nullptr;
  uint32_t mask_ = 0;
  uint32_t slot_bytes_ = 0;
};

// The wr_id shadow of a work ring (completion tracking, above): kShadowFactor * slot_count
// entries, entry i % size for the WQE of index i.
inline constexpr uint32_t kShadowFactor = 2;
inline constexpr std::size_t shadow_bytes(uint32_t slot_count) {
  return page_round(std::size_t{slot_count} * kShadowFactor * sizeof(uint64_t));
}

// Layout of a QP's region: the send ring at offset 0, the receive ring right after it (absent
// for a QP on an SRQ: recv_slots == 0), then the send ring's wr_id shadow and the receive
// ring's. Both sides compute it from the ring geometry in the create_qp reply.
struct QpRegionLayout {
  uint32_t send_slots;
  uint32_t send_slot_bytes;
  uint32_t recv_slots;
  uint32_t recv_slot_bytes;
  uint64_t recv_offset;
  uint64_t send_shadow_offset;
  uint64_t recv_shadow_offset;
  uint64_t total_bytes;
};

inline QpRegionLayout qp_region_layout(uint32_t send_slots, uint32_t send_bytes,
                                       uint32_t recv_slots, uint32_t recv_bytes) {
  QpRegionLayout l{};
  l.send_slots = send_slots;
  l.send_slot_bytes = send_bytes;
  l.recv_slots = recv_slots;
  l.recv_slot_bytes = recv_bytes;
  l.recv_offset = ring_bytes(send_slots, send_bytes);
  l.send_shadow_offset = l.recv_offset + (recv_slots == 0 ? 0 : ring_bytes(recv_slots, recv_bytes));
  l.recv_shadow_offset = l.send_shadow_offset + shadow_bytes(send_slots);
  l.total_bytes = l.recv_shadow_offset + (recv_slots == 0 ? 0 : shadow_bytes(recv_slots));
  return l;
}

// A work ring's wr_id shadow as either side sees it (entries are plain: only the daemon writes
// them, only while it lives; the provider reads them after it died).
class WrIdShadow {
 public:
  WrIdShadow() = default;
  WrIdShadow(void* base, uint32_t slot_count)
      : entries_(static_cast<uint64_t*>(base)), mask_(slot_count * kShadowFactor - 1) {}
  bool valid() const { return entries_ != nullptr; }
  uint64_t& at(uint32_t index) const { return entries_[index & mask_]; }

 private:
  uint64_t* entries_ = nullptr;
  uint32_t mask_ = 0;
};

}  // namespace xroce::queues
