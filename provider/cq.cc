// Completion queues: create/destroy/resize over the control socket; polling and arming read and
// write the shared ring only (no system call), as include/xroce/queues.h lays down; a thread
// that keeps polling an empty CQ yields its core now and then (note_poll).
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "provider/queues.h"
#include "xroce/env_count.h"
#include "xroce/sched_attr.h"

namespace xroce::provider {

namespace {

// The ibv_wc_ex fields we fill (and so accept in ibv_create_cq_ex), as rxe.
constexpr uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS |
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;

// Empty polls in a row after which a polling thread yields its core (sched_yield), as some
// user-space drivers do: on a host with fewer cores than busy threads, the daemon worker that
// would produce the completion may be runnable behind this very thread. One empty poll costs
// tens of nanoseconds, so this is about a microsecond of pure spinning between yields; a poll
// that finds completions makes no system call. XROCE_POLL_YIELD=N sets the count, and
// XROCE_POLL_YIELD=0 turns yielding off (no system call on any poll: for hosts with a core per
// polling thread and the daemon's workers).
constexpr uint32_t kEmptyPollsBeforeYield = 32;
thread_local uint32_t empty_polls = 0;

uint32_t empty_polls_before_yield() {
  static const uint32_t count = env_count("XROCE_POLL_YIELD", kEmptyPollsBeforeYield);
  return count;
}

// The EEVDF slice (sched_setattr's sched_runtime, Linux 6.12+) a thread that polls until it
// yields asks for, once. sched_yield moves the thread's virtual deadline one slice on; with the
// default slice (0.75-3 ms) a poller yielding every microsecond soon has a later deadline than
// anything else runnable on its core, a nice-19 background job included, which is then picked
// and runs a whole slice of its own (1.5-4 ms at HZ 250) before the poller runs again: the
// ~2 ms p99 of ib_send_lat beside busy loops (bench/README.md). With 100 us, as the daemon's
// workers use, each yield moves the deadline 100 us. The thread's share of the core does not
// change (that is its nice, kept), only how long it may run before the scheduler looks again.
// Only a SCHED_OTHER thread whose slice is longer is changed; XROCE_POLL_SLICE_US=N sets the
// slice, 0 leaves every thread as it is. A kernel that refuses (before 6.12) changes nothing.
constexpr uint32_t kPollSliceUs = 100;
thread_local bool slice_checked = false;

void shorten_slice_once() {
  if (slice_checked) return;
  slice_checked = true;
  static const uint64_t slice_ns = uint64_t{env_count("XROCE_POLL_SLICE_US", kPollSliceUs)} * 1000;
  if (slice_ns == 0) return;
  const int saved_errno = errno;
  SchedAttr attr;
  if (get_sched_attr(attr) && attr.sched_policy == SCHED_OTHER && attr.sched_runtime > slice_ns) {
    attr.size = sizeof(attr);
    attr.sched_flags &= kSchedFlagResetOnFork;  // kept; the rest are not settings to carry
    attr.sched_runtime = slice_ns;
    (void)set_sched_attr(attr);
  }
  errno = saved_errno;  // the application's errno is not ours to change
}

// An empty poll's yield point sleeps instead of yielding while at least kQueuedBytesToSleep of
// payload is posted and not yet completed on the QPs that complete sends into the polled CQ.
// sched_yield gives the core only to a thread queued on the same core, and under EEVDF not even
// always to that: a daemon worker runnable on it, or woken onto it, waits behind the poller.
// With 1 MiB queued the next completion is not urgent, and the core the poller leaves goes to
// the workers that produce it (bench/README.md, "A poller that sleeps" and "A sleep as long as
// the queue allows"). A latency test has one small WQE outstanding, so it never sleeps, nor
// does a thread that polls only receives. With 256 KiB instead, ib_write_bw of 4 KB messages
// (128 queued, 512 KiB) slept and lost 10-26 % (not traced why).
//
// How long: by the queue (poll_sleep_for_queue), so a poller with more queued wakes less
// often; every wake-up costs the workers a core for a while on a small host, and a fixed 20 us
// sleep woke ib_write_bw's poller about 12,000 times a second. XROCE_POLL_SLEEP_US=N sleeps N us
// whatever the queue (0: never sleep, only yield).
constexpr uint64_t kQueuedBytesToSleep = 1024 * 1024;
// One microsecond of sleep per 16 KiB queued: a sleep lasts an eighth of the time the queue
// takes to drain at 2 GB/s and half of it at 8 GB/s, so the device has work through the sleep
// and its timer slack (50 us for a fair-class thread) at any rate it reaches on a host like this
// one. 64 us at 1 MiB, kPollSleepMaxUs from 8 MiB (perftest's 128 WQEs of 64 KiB) up.
constexpr uint64_t kQueuedBytesPerSleepUs = 16 * 1024;
constexpr uint32_t kPollSleepMaxUs = 512;
constexpr uint64_t kQueuedBytesForMaxSleep = uint64_t{kPollSleepMaxUs} * kQueuedBytesPerSleepUs;
// XROCE_POLL_SLEEP_US unset: the sleep goes by the queue.
constexpr uint32_t kPollSleepByQueue = UINT32_MAX;

// The sleep (us; 0: yield) for `queued` bytes of sends under the setting `fixed_us`.
constexpr uint32_t poll_sleep_for_queue(uint64_t queued, uint32_t fixed_us) {
  if (fixed_us == 0 || queued < kQueuedBytesToSleep) return 0;
  if (fixed_us != kPollSleepByQueue) return fixed_us;
  return static_cast<uint32_t>(
      std::min<uint64_t>(kPollSleepMaxUs, queued / kQueuedBytesPerSleepUs));
}
static_assert(poll_sleep_for_queue(kQueuedBytesToSleep - 1, kPollSleepByQueue) == 0);
static_assert(poll_sleep_for_queue(kQueuedBytesToSleep, kPollSleepByQueue) == 64);
static_assert(poll_sleep_for_queue(2 * kQueuedBytesToSleep, kPollSleepByQueue) == 128);
static_assert(poll_sleep_for_queue(128 * 65536, kPollSleepByQueue) == kPollSleepMaxUs);
static_assert(poll_sleep_for_queue(uint64_t{1} << 40, kPollSleepByQueue) == kPollSleepMaxUs);
static_assert(poll_sleep_for_queue(kQueuedBytesToSleep, 20) == 20);
static_assert(poll_sleep_for_queue(uint64_t{1} << 40, 0) == 0);

uint32_t poll_sleep_setting() {
  static const uint32_t us = env_count("XROCE_POLL_SLEEP_US", kPollSleepByQueue);
  return us;
}

// Payload bytes posted and not yet completed on the QPs whose send CQ is `cq`, counted until
// `enough` (Qp::sq_bytes_before). Read without the QPs' locks, from the ring's published
// producer index (stored after the bytes, so every WQE before it has its count): a stale value
// only changes how long this one yield point sleeps.
uint64_t send_bytes_queued(Cq* cq, uint64_t enough) {
  ContextState* state = to_context(cq->cq_ex.context)->state;
  ibv_cq* const ibcq = ibv_cq_ex_to_cq(&cq->cq_ex);
  std::lock_guard guard(state->objects_lock);
  uint64_t n = 0;
  for (Qp* qp : state->qps) {
    if (qp->vqp.qp.send_cq != ibcq || !qp->sq.valid() || !qp->sq_bytes_before) continue;
    const uint32_t next = qp->sq.header().producer.load(std::memory_order_acquire);
    const uint64_t posted = qp->sq_bytes_posted.load(std::memory_order_acquire);
    const uint32_t completed = qp->sq.header().completed.load(std::memory_order_acquire);
    if (completed == next || next - completed > qp->sq.slot_count()) continue;
    n += posted -
         qp->sq_bytes_before[completed & (qp->sq.slot_count() - 1)].load(std::memory_order_relaxed);
    if (n >= enough) break;
  }
  return n;
}

// The sleep for the sends queued on `cq` now (us; 0: yield), counted at most every kRecountNs per
// CQ: a context with 1,000 QPs takes microseconds to walk, and a yield point comes every
// microsecond or two of empty polling. A stale count is off by what the device completed since,
// at most 100 us of its rate.
constexpr int64_t kRecountNs = 100'000;

uint32_t poll_sleep_us(Cq* cq) {
  const uint32_t setting = poll_sleep_setting();
  if (setting == 0) return 0;
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
  if (now - cq->sends_counted_ns.load(std::memory_order_relaxed) >= kRecountNs) {
    cq->sends_counted_ns.store(now, std::memory_order_relaxed);
    const uint64_t enough =
        setting == kPollSleepByQueue ? kQueuedBytesForMaxSleep : kQueuedBytesToSleep;
    cq->poll_sleep_us.store(poll_sleep_for_queue(send_bytes_queued(cq, enough), setting),
                            std::memory_order_relaxed);
  }
  return cq->poll_sleep_us.load(std::memory_order_relaxed);
}

void note_poll(bool found, Cq* cq) {
  if (found) {
    empty_polls = 0;
    return;
  }
  const uint32_t limit = empty_polls_before_yield();
  if (limit != 0 && ++empty_polls >= limit) {
    empty_polls = 0;
    shorten_slice_once();
    const uint32_t sleep_us = poll_sleep_us(cq);
    if (sleep_us != 0) {
      const int saved_errno = errno;
      const timespec pause{static_cast<time_t>(sleep_us / 1'000'000),
                           static_cast<long>(sleep_us % 1'000'000) * 1000};
      nanosleep(&pause, nullptr);
      errno = saved_errno;
    } else {
      sched_yield();
    }
  }
}

Cq* to_cq(ibv_cq* cq) {
  return reinterpret_cast<Cq*>(cq);
}
Cq* to_cq(ibv_cq_ex* cq) {
  return reinterpret_cast<Cq*>(cq);
}

void to_wc(const queues::Cqe& e, ibv_wc& wc) {
  wc.wr_id = e.wr_id;
  wc.status = static_cast<ibv_wc_status>(e.status);
  wc.opcode = static_cast<ibv_wc_opcode>(e.opcode);
  wc.vendor_err = e.vendor_err;
  wc.byte_len = e.byte_len;
  wc.imm_data = e.imm_data;  // or invalidated_rkey: the same union
  wc.qp_num = e.qp_num;
  wc.src_qp = e.src_qp;
  wc.wc_flags = e.wc_flags;
  wc.pkey_index = e.pkey_index;
  wc.slid = e.slid;
  wc.sl = e.sl;
  wc.dlid_path_bits = e.dlid_path_bits;
}

int attach_ring(Cq* cq, const control::CqReply& reply, int fd) {
  if (reply.slot_count == 0 || (reply.slot_count & (reply.slot_count - 1)) != 0) {
    close(fd);
    return EIO;
  }
  Mapping mapping;
  if (int err = mapping.map(fd, reply.region_bytes)) return err;
  cq->mapping.unmap();
  cq->mapping = mapping;
  cq->ring = queues::Ring(mapping.base, reply.slot_count, sizeof(queues::Cqe));
  cq->consumer = cq->ring.header().consumer.load(std::memory_order_acquire);
  cq->cq_ex.cqe = static_cast<int>(reply.cqe);
  cq->handle = reply.handle;
  return 0;
}

Cq* make_cq(ibv_context* ctx, uint32_t cqe, ibv_comp_channel* channel, uint32_t comp_vector) {
  auto* cq = new (std::nothrow) Cq{};
  if (cq == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  control::CreateCqRequest request{};
  request.cqe = cqe;
  request.channel = channel == nullptr ? 0 : channel_handle(channel);
  request.comp_vector = comp_vector;
  request.cookie = reinterpret_cast<uint64_t>(&cq->cq_ex);
  if (channel != nullptr && request.channel == 0) {
    delete cq;
    errno = EINVAL;  // not a channel of this context
    return nullptr;
  }
  control::CqReply reply{};
  Fd region;
  int err = call_fds(ctx, control::Op::create_cq, &request, sizeof(request), &reply, sizeof(reply),
                     std::span(&region, 1));
  if (err == 0) err = attach_ring(cq, reply, region.release());
  if (err != 0) {
    if (reply.handle != 0) {
      control::HandleRequest release{reply.handle};
      (void)call(ctx, control::Op::destroy_cq, &release, sizeof(release), nullptr, 0);
    }
    delete cq;
    errno = err;
    return nullptr;
  }
  cq->cq_ex.context = ctx;
  cq->cq_ex.handle = reply.handle;
  return cq;
}

// ---- ibv_cq_ex polling ----

int start_poll(ibv_cq_ex* current, ibv_poll_cq_attr* attr) {
  Cq* cq = to_cq(current);
  if (attr->comp_mask != 0) return EINVAL;
  cq->lock.lock();
  if (cq->ring.ready(cq->consumer) == 0) {
    cq->lock.unlock();  // ENOENT: the caller will not call end_poll
    note_poll(false, cq);
    return ENOENT;
  }
  note_poll(true, cq);
  std::memcpy(&cq->current, cq->ring.slot(cq->consumer), sizeof(queues::Cqe));
  cq->holding_current = true;
  current->status = static_cast<ibv_wc_status>(cq->current.status);
  current->wr_id = cq->current.wr_id;
  return 0;
}

int next_poll(ibv_cq_ex* current) {
  Cq* cq = to_cq(current);
  if (cq->holding_current) ++cq->consumer;
  cq->holding_current = false;
  if (cq->ring.ready(cq->consumer) == 0) return ENOENT;
  std::memcpy(&cq->current, cq->ring.slot(cq->consumer), sizeof(queues::Cqe));
  cq->holding_current = true;
  current->status = static_cast<ibv_wc_status>(cq->current.status);
  current->wr_id = cq->current.wr_id;
  return 0;
}

void end_poll(ibv_cq_ex* current) {
  Cq* cq = to_cq(current);
  // The entry current now is consumed; after a next_poll that found none, nothing more is (an
  // entry the daemon wrote since then was not seen, and stays for the next poll).
  if (cq->holding_current) ++cq->consumer;
  cq->holding_current = false;
  cq->ring.release(cq->consumer);
  cq->lock.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* c) {
  return static_cast<ibv_wc_opcode>(to_cq(c)->current.opcode);
}
uint32_t read_vendor_err(ibv_cq_ex* c) {
  return to_cq(c)->current.vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* c) {
  return to_cq(c)->current.byte_len;
}
__be32 read_imm_data(ibv_cq_ex* c) {
  return to_cq(c)->current.imm_data;
}
uint32_t read_qp_num(ibv_cq_ex* c) {
  return to_cq(c)->current.qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* c) {
  return to_cq(c)->current.src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* c) {
  return to_cq(c)->current.wc_flags;
}
uint32_t read_slid(ibv_cq_ex* c) {
  return to_cq(c)->current.slid;
}
uint8_t read_sl(ibv_cq_ex* c) {
  return to_cq(c)->current.sl;
}
uint8_t read_dlid_path_bits(ibv_cq_ex* c) {
  return to_cq(c)->current.dlid_path_bits;
}
// The device clock: CLOCK_MONOTONIC nanoseconds (hca_core_clock 1 GHz, query_rt_values).
uint64_t read_completion_ts(ibv_cq_ex* c) {
  return to_cq(c)->current.timestamp_ns;
}

void set_poll_ops(ibv_cq_ex& ex, uint64_t wc_flags) {
  ex.start_poll = start_poll;
  ex.next_poll = next_poll;
  ex.end_poll = end_poll;
  ex.read_opcode = read_opcode;
  ex.read_vendor_err = read_vendor_err;
  ex.read_wc_flags = read_wc_flags;
  if (wc_flags & IBV_WC_EX_WITH_BYTE_LEN) ex.read_byte_len = read_byte_len;
  if (wc_flags & IBV_WC_EX_WITH_IMM) ex.read_imm_data = read_imm_data;
  if (wc_flags & IBV_WC_EX_WITH_QP_NUM) ex.read_qp_num = read_qp_num;
  if (wc_flags & IBV_WC_EX_WITH_SRC_QP) ex.read_src_qp = read_src_qp;
  if (wc_flags & IBV_WC_EX_WITH_SLID) ex.read_slid = read_slid;
  if (wc_flags & IBV_WC_EX_WITH_SL) ex.read_sl = read_sl;
  if (wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS) ex.read_dlid_path_bits = read_dlid_path_bits;
  if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ex.read_completion_ts = read_completion_ts;
}

}  // namespace

int Mapping::map(int fd, std::size_t length) {
  void* p =
      length == 0 ? MAP_FAILED : mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return length == 0 ? EIO : err;
  base = p;
  bytes = length;
  return 0;
}

void Mapping::unmap() {
  if (base != nullptr) munmap(base, bytes);
  base = nullptr;
  bytes = 0;
}

ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector) {
  if (cqe <= 0 || comp_vector < 0) {
    errno = EINVAL;
    return nullptr;
  }
  Cq* cq = make_cq(ctx, static_cast<uint32_t>(cqe), channel, static_cast<uint32_t>(comp_vector));
  // ibv_create_cq calls verbs_init_cq on what we return.
  return cq == nullptr ? nullptr : ibv_cq_ex_to_cq(&cq->cq_ex);
}

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  if ((attr->wc_flags & ~kSupportedWcFlags) != 0 || attr->comp_mask != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->cqe == 0) {
    errno = EINVAL;
    return nullptr;
  }
  Cq* cq = make_cq(ctx, attr->cqe, attr->channel, attr->comp_vector);
  if (cq == nullptr) return nullptr;
  set_poll_ops(cq->cq_ex, attr->wc_flags);
  // libibverbs' __lib_ibv_create_cq_ex calls verbs_init_cq on what we return, as
  // ibv_create_cq does: that takes the channel's one reference (ibv_destroy_cq drops it), so
  // calling it here too would leave the channel busy forever (ibv_destroy_comp_channel: EBUSY).
  return &cq->cq_ex;
}

int destroy_cq(ibv_cq* ibcq) {
  Cq* cq = to_cq(ibcq);
  control::HandleRequest request{cq->handle};
  if (int err =
          call(ibcq->context, control::Op::destroy_cq, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  cq->mapping.unmap();
  delete cq;
  return 0;
}

int resize_cq(ibv_cq* ibcq, int cqe) {
  Cq* cq = to_cq(ibcq);
  if (cqe <= 0) return EINVAL;
  std::lock_guard guard(cq->lock);
  // The daemon copies what we have not polled; publish what we have.
  cq->ring.release(cq->consumer);
  control::ResizeCqRequest request{cq->handle, static_cast<uint32_t>(cqe)};
  control::CqReply reply{};
  Fd region;
  if (int err = call_fds(ibcq->context, control::Op::resize_cq, &request, sizeof(request), &reply,
                         sizeof(reply), std::span(&region, 1))) {
    return err;
  }
  return attach_ring(cq, reply, region.release());
}

int poll_cq(ibv_cq* ibcq, int ne, ibv_wc* wc) {
  Cq* cq = to_cq(ibcq);
  int n = 0;
  {
    std::lock_guard guard(cq->lock);
    const uint32_t ready = cq->ring.ready(cq->consumer);
    n = ne < 0 ? 0 : static_cast<int>(std::min<uint32_t>(ready, static_cast<uint32_t>(ne)));
    for (int i = 0; i < n; ++i) {
      queues::Cqe e;
      std::memcpy(&e, cq->ring.slot(cq->consumer + static_cast<uint32_t>(i)), sizeof(e));
      to_wc(e, wc[i]);
    }
    if (n > 0) {
      cq->consumer += static_cast<uint32_t>(n);
      cq->ring.release(cq->consumer);
    }
  }
  note_poll(n > 0, cq);  // outside the lock: it may yield the core
  return n;
}

// The kept entries move toward the producer and the consumer index steps past the dropped
// ones, so the producer's side of the ring is never written: the daemon may be adding
// completions of other QPs behind the last ready one meanwhile.
void clean_cq(ibv_cq* ibcq, uint32_t qpn) {
  Cq* cq = to_cq(ibcq);
  std::lock_guard guard(cq->lock);
  const uint32_t ready = cq->ring.ready(cq->consumer);
  uint32_t dropped = 0;
  for (uint32_t i = ready; i-- > 0;) {
    queues::Cqe e;
    std::memcpy(&e, cq->ring.slot(cq->consumer + i), sizeof(e));
    if (e.qp_num == qpn) {
      ++dropped;
    } else if (dropped != 0) {
      std::memcpy(cq->ring.slot(cq->consumer + i + dropped), &e, sizeof(e));
    }
  }
  if (dropped != 0) {
    cq->consumer += dropped;
    cq->ring.release(cq->consumer);
  }
}

int req_notify_cq(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = to_cq(ibcq);
  auto& arm = cq->ring.header().arm;
  if (solicited_only == 0) {
    arm.store(queues::kArmNext, std::memory_order_seq_cst);
  } else {
    // An armed "next" already covers solicited completions: do not narrow it.
    uint32_t expected = queues::kArmNone;
    arm.compare_exchange_strong(expected, queues::kArmSolicited, std::memory_order_seq_cst);
  }
  return 0;
}

}  // namespace xroce::provider
