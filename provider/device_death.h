// A device that dies under its users, as a NIC's driver reports it (rxe and mlx5 on a fatal
// device): every context gets IBV_EVENT_DEVICE_FATAL on its async fd, and every work request
// still outstanding completes with IBV_WC_WR_FLUSH_ERR, so a program that only polls its CQ is
// not left waiting. The daemon is the device: it dies when xroced is killed, and for its clients
// when `xroce link del` removes the device (it closes their connections).
//
// The provider notices by itself: a watcher thread per context sleeps in poll() on the control
// connection (no CPU while the daemon lives) and wakes when the daemon's end closes. It then
// writes the flush completions into the CQ rings — the provider becomes their producer, the
// daemon being gone — (include/xroce/queues.h says which WQEs are outstanding), signals the
// completion channels of armed CQs, and writes DEVICE_FATAL on the context's event socket.
// Work posted afterwards is flushed at once. Verbs that release objects succeed from then on (the
// daemon released everything when the connection closed); others fail with EIO.
//
// Threading: the watcher and the posting threads flush under the context's flush lock, taken
// after the queue's own lock (sq_lock / rq_lock), never before; the context's lock (channels)
// comes last.
#pragma once

#include "provider/xroce.h"

namespace xroce::provider {

// Starts the context's watcher; 0 or errno.
int start_death_watch(Context* ctx);
// Stops it (free_context: the connection is being closed on purpose).
void stop_death_watch(ContextState* state);

// Objects whose outstanding work a dying device must flush.
void register_qp(ibv_context* ctx, Qp* qp);
void unregister_qp(ibv_context* ctx, Qp* qp);

// Whether the context's device has died.
bool device_dead(ibv_context* ctx);
// After posting on a dead device: flushes what was just posted. The caller holds the queue's
// lock (sq_lock for the send queue, rq_lock for the receive queue).
void flush_send_queue_locked(Qp& qp);
void flush_recv_queue_locked(Qp& qp);

}  // namespace xroce::provider
