#include "provider/device_death.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace xroce::provider {

namespace {

constexpr uint32_t kEventDeviceFatal = IBV_EVENT_DEVICE_FATAL;

Cq* cq_of(ibv_cq* cq) {
  return reinterpret_cast<Cq*>(cq);  // ibv_cq_ex leads Cq, and ibv_cq leads ibv_cq_ex
}

ContextState* state_of(ibv_context* ctx) {
  return to_context(ctx)->state;
}

// Writes one flush completion into `cq`'s ring as its producer (the daemon being gone), and
// signals the CQ's completion channel if it was armed (a completion in error qualifies for
// either kind of arming). Caller holds the context's flush lock.
void push_flush(ContextState& state, ibv_cq* ibcq, uint64_t wr_id, ibv_wc_opcode opcode,
                uint32_t qp_num) {
  Cq* cq = cq_of(ibcq);
  const queues::Ring& ring = cq->ring;
  const uint32_t producer = ring.header().producer.load(std::memory_order_relaxed);
  if (ring.free_slots(producer) == 0) {
    ring.header().overflow.store(1, std::memory_order_release);
    return;
  }
  queues::Cqe cqe{};
  cqe.wr_id = wr_id;
  cqe.status = IBV_WC_WR_FLUSH_ERR;
  cqe.opcode = opcode;
  cqe.qp_num = qp_num;
  std::memcpy(ring.slot(producer), &cqe, sizeof cqe);
  ring.header().producer.store(producer + 1, std::memory_order_seq_cst);
  if (ring.header().arm.exchange(queues::kArmNone, std::memory_order_seq_cst) == queues::kArmNone ||
      ibcq->channel == nullptr) {
    return;
  }
  std::lock_guard guard(state.lock);
  const auto it = state.channels.find(ibcq->channel);
  if (it == state.channels.end()) return;
  const control::CompletionEvent event{reinterpret_cast<uint64_t>(&cq->cq_ex)};
  (void)send(it->second.daemon_end.get(), &event, sizeof event, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Completes every WQE of a work ring that the dead daemon did not complete (queues.h:
// completion tracking), up to `next`, the provider's own producer index.
void flush_ring(ContextState& state, const queues::Ring& ring, const queues::WrIdShadow& shadow,
                uint32_t next, ibv_cq* cq, ibv_wc_opcode opcode, uint32_t qp_num) {
  if (!ring.valid()) return;
  const uint32_t taken = ring.header().consumer.load(std::memory_order_acquire);
  const uint32_t completed = ring.header().completed.load(std::memory_order_acquire);
  // The transport held at most slot_count of the WQEs the daemon took.
  uint32_t from = taken - ring.slot_count();
  if (static_cast<int32_t>(completed - from) > 0) from = completed;
  std::lock_guard guard(state.flush_lock);
  for (uint32_t i = from; static_cast<int32_t>(next - i) > 0; ++i) {
    uint64_t wr_id;
    if (static_cast<int32_t>(taken - i) > 0) {
      wr_id = shadow.at(i);
    } else {
      std::memcpy(&wr_id, ring.slot(i), sizeof wr_id);  // wr_id leads every WQE
    }
    push_flush(state, cq, wr_id, opcode, qp_num);
  }
  // Everything is complete and taken: the ring's slots are free again.
  ring.header().completed.store(next, std::memory_order_release);
  ring.header().consumer.store(next, std::memory_order_release);
}

void flush_all(ContextState& state) {
  std::lock_guard objects(state.objects_lock);
  for (Qp* qp : state.qps) {
    {
      std::lock_guard guard(qp->sq_lock);
      flush_send_queue_locked(*qp);
    }
    std::lock_guard guard(qp->rq_lock);
    flush_recv_queue_locked(*qp);
  }
}

// The watcher: sleeps until the connection closes. Closed by free_context: nothing to do.
// Closed by the daemon: the device is dead.
void watch(ContextState* state) {
  pollfd p{state->control.fd(), POLLRDHUP, 0};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
  if (state->closing.load()) return;
  state->dead.store(true);
  flush_all(*state);
  const control::AsyncEvent fatal{0, kEventDeviceFatal};
  (void)send(state->event_writer.get(), &fatal, sizeof fatal, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

int start_death_watch(Context* ctx) {
  ContextState* state = ctx->state;
  // No signal of the application's is ever delivered to the watcher.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = 0;
  try {
    state->watcher = std::thread(watch, state);
  } catch (const std::system_error& e) {
    err = e.code().value();
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return err;
}

void stop_death_watch(ContextState* state) {
  if (!state->watcher.joinable()) return;
  state->closing.store(true);
  state->control.shutdown();  // wakes the watcher
  state->watcher.join();
}

void register_qp(ibv_context* ctx, Qp* qp) {
  ContextState* state = state_of(ctx);
  std::lock_guard guard(state->objects_lock);
  state->qps.insert(qp);
}

void unregister_qp(ibv_context* ctx, Qp* qp) {
  ContextState* state = state_of(ctx);
  std::lock_guard guard(state->objects_lock);
  state->qps.erase(qp);
}

bool device_dead(ibv_context* ctx) {
  return state_of(ctx)->dead.load(std::memory_order_acquire);
}

void flush_send_queue_locked(Qp& qp) {
  ibv_qp& ib = qp.vqp.qp;
  flush_ring(*state_of(ib.context), qp.sq, qp.sq_shadow, qp.sq_next, ib.send_cq, IBV_WC_SEND,
             ib.qp_num);
}

void flush_recv_queue_locked(Qp& qp) {
  ibv_qp& ib = qp.vqp.qp;
  flush_ring(*state_of(ib.context), qp.rq, qp.rq_shadow, qp.rq_next, ib.recv_cq, IBV_WC_RECV,
             ib.qp_num);
}

}  // namespace xroce::provider
