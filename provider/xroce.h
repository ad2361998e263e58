// libxroce-rdmav34.so: the rdma-core provider that makes an xroced device an ibverbs device.
//
// Private structs wrap the verbs structs, as rdma-core providers do. Verbs reach the daemon
// over the context's control connection (include/xroce/control.h); every verb the device
// cannot do yet stays libibverbs' dummy and fails with EOPNOTSUPP. Verbs return positive errno
// (or NULL with errno set); nothing throws across the C ABI.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>

#include "xroce/control_client.h"
#include "xroce/fd.h"
#include "xroce/provider_abi.h"
#include "xroce/queues.h"

namespace xroce::provider {

struct Device {
  verbs_device vdev;           // must be first: libibverbs frees nothing of ours, but casts to it
  xroce_device_extension ext;  // right after vdev: libxroce-preload.so looks for it there
  char control_path[108];
};
static_assert(offsetof(Device, ext) == sizeof(verbs_device));

// What a context keeps beside the verbs_context that libibverbs allocates for us (calloc'd, so
// it holds only a pointer to this C++ object).
struct Qp;

struct Mapping {
  void* base = nullptr;
  std::size_t bytes = 0;
  int map(int fd, std::size_t length);  // 0 or errno; closes fd either way
  void unmap();
};

struct ContextState {
  std::mutex lock;  // serialises the control connection and guards `channels`
  control::ControlClient control;
  struct Channel {
    uint32_t handle = 0;  // the daemon's
    Fd daemon_end;        // a copy of the end the daemon writes events on (device_death.h)
  };
  std::map<ibv_comp_channel*, Channel> channels;
  // The context's doorbell and ready-bit page (Op::hello's reply, queues.h): every QP and SRQ of
  // the context rings the one and sets its bit, if it has one, in the other.
  Fd doorbell;
  Mapping page;
  ~ContextState() { page.unmap(); }
  // Device death (device_death.h): a copy of the daemon's end of the async event socket, the
  // QPs to flush, and the watcher.
  Fd event_writer;
  std::atomic<bool> dead{false};
  std::atomic<bool> closing{false};
  std::mutex objects_lock;  // guards qps
  std::set<Qp*> qps;
  std::mutex flush_lock;  // the provider writing flush completions into CQ rings
  std::thread watcher;
};

struct Context {
  verbs_context ibv_ctx;  // must be first
  ContextState* state;
};

struct Pd {
  ::ibv_pd pd;
};

struct Mr {
  ::verbs_mr vmr;
  // Set when reg_mr re-backed the buffer with a memfd the daemon maps (shared_mr.h): dereg_mr
  // puts private pages back under [addr, addr + length).
  bool shared = false;
  void* addr = nullptr;
  std::size_t length = 0;
  unsigned long memfd_inode = 0;
};

// A shared-memory region the daemon passed us (include/xroce/queues.h), mapped MAP_SHARED.

// A CQ: ibv_cq_ex first (its leading fields are ibv_cq's, so one struct serves both APIs).
struct Cq {
  ibv_cq_ex cq_ex;
  uint32_t handle = 0;
  Mapping mapping;
  queues::Ring ring;
  uint32_t consumer = 0;  // our private consumer index (published with ring.release)
  std::mutex lock;
  queues::Cqe current{};  // the entry start_poll/next_poll made current (ibv_cq_ex API)
  // Whether the slot at `consumer` is that current entry, which end_poll consumes: false once
  // next_poll found no next one. Judged from what the poll saw, never from the ring again, which
  // the daemon may have filled in between (that entry is the next poll's, not consumed unseen).
  bool holding_current = false;
  // How long an empty poll's yield point sleeps (us; 0: it yields) for the sends queued on the
  // QPs completing into this CQ when a poller last counted them (cq.cc, note_poll), and when
  // (CLOCK_MONOTONIC, ns): counted at most every 100 us, as counting walks the context's QPs.
  // Relaxed atomics: pollers may share the CQ.
  std::atomic<uint32_t> poll_sleep_us{0};
  std::atomic<int64_t> sends_counted_ns{0};
};

struct Qp {
  verbs_qp vqp;  // must be first: ibv_qp_to_qp_ex() reads verbs_qp.comp_mask
  uint32_t handle = 0;
  control::QpCap cap{};
  bool sq_sig_all = false;
  Mapping mapping;
  queues::Ring sq;
  queues::Ring rq;  // not valid() on an SRQ
  queues::WrIdShadow sq_shadow;
  queues::WrIdShadow rq_shadow;
  uint32_t sq_next = 0;  // private producer indices
  uint32_t rq_next = 0;
  // Payload bytes posted to the send queue before each WQE (indexed by WQE index & mask) and
  // in all, written under sq_lock just before the WQEs are published (the ring's producer
  // index); read without it by a poller to know how much work the daemon has queued for this QP
  // (cq.cc, note_poll).
  std::unique_ptr<std::atomic<uint64_t>[]> sq_bytes_before;
  std::atomic<uint64_t> sq_bytes_posted{0};
  int doorbell_fd = -1;
  queues::ContextPage* page = nullptr;  // the context's (ContextState::page)
  std::mutex sq_lock;
  std::mutex rq_lock;
  // ibv_wr_* batch state, between wr_start and wr_complete/wr_abort (sq_lock held).
  uint32_t batch_start = 0;
  int batch_error = 0;
  queues::SendWqe* batch_wqe = nullptr;  // the WQE the last wr_<opcode> began
};

struct Srq {
  ibv_srq srq;
  uint32_t handle = 0;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  uint32_t srqn = 0;  // ibv_get_srq_num
  Mapping mapping;
  queues::Ring ring;
  uint32_t next = 0;
  int doorbell_fd = -1;
  queues::ContextPage* page = nullptr;  // the context's (ContextState::page)
  std::mutex lock;
};

struct Ah {
  ibv_ah ah;
};

// ibv_context sits at the end of verbs_context ("grows up" fields come first): container_of.
inline Context* to_context(ibv_context* ctx) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(ctx) -
                                    offsetof(Context, ibv_ctx.context));
}

// A control call on the context's connection; errors that mean "the daemon is gone" come back
// as EIO, the errno of a device that has died under its users.
int call(ibv_context* ctx, control::Op op, const void* request, std::size_t request_len,
         void* reply, std::size_t reply_len, int pass_fd = -1);

// A control call whose reply carries exactly fds.size() descriptors (owned by the caller).
int call_fds(ibv_context* ctx, control::Op op, const void* request, std::size_t request_len,
             void* reply, std::size_t reply_len, std::span<Fd> fds);

// The context's doorbell eventfd (owned by the context).
int context_doorbell(ibv_context* ctx);
// The context's page of ready bits (queues.h), or null.
queues::ContextPage* context_page(ibv_context* ctx);

// ibv_create_comp_channel for xroce contexts, reached through libxroce-preload.so.
ibv_comp_channel* create_comp_channel(ibv_context* ctx);

}  // namespace xroce::provider
