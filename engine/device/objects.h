// The data path objects of the device model: completion queues, queue pairs, shared receive
// queues and address handles, each with its shared-memory ring(s) (include/xroce/queues.h).
//
// Threading and ownership: the control thread creates and destroys these (engine/daemon
// control handlers, through Device). A QueuePair is run by exactly one worker (its `worker`
// index, assigned at creation); the worker is the only thread that reads its work rings, calls
// its transport::Qp and writes CQEs into its CQs (CompletionQueue::push). The control thread
// destroys a QP only after the worker has let go of it (engine/daemon/worker.h's contract).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "device/shared_region.h"
#include "transport/qp.h"
#include "transport/srq.h"
#include "xroce/control.h"
#include "xroce/queues.h"

namespace xroce::device {

using ClientId = uint64_t;

struct CompletionQueue {
  ClientId owner = 0;
  uint64_t cookie = 0;   // the provider's ibv_cq pointer (CompletionEvent::cq_handle)
  uint32_t channel = 0;  // the owner's completion channel handle, 0 = none
  uint32_t cqe = 0;      // entries promised to the application
  SharedRegion region;
  queues::Ring ring;
  uint32_t producer = 0;  // the daemon's private producer index
  uint32_t users = 0;     // QPs whose send or receive CQ this is (EBUSY on destroy)
  int channel_fd = -1;    // the daemon's end of `channel` (owned by the control server)
  int event_fd = -1;      // the owner's async event socket (owned by the control server)

  enum class Push : uint8_t { written, written_notify, overflow };
  // Worker side: writes one CQE and publishes it. `written_notify` means the CQ was armed for
  // this CQE: the caller writes a CompletionEvent on `channel`.
  Push push(const queues::Cqe& cqe);
};

struct AddressHandle {
  ClientId owner = 0;
  uint32_t pd = 0;
  control::AhAttr attr{};
};

struct SharedReceiveQueue {
  ClientId owner = 0;
  uint32_t pd = 0;
  uint64_t cookie = 0;
  control::SrqAttr attr{};
  SharedRegion region;
  queues::Ring ring;
  uint32_t consumer = 0;  // the daemon's private consumer index
  int doorbell_fd = -1;   // the owner context's doorbell (owned by the control server)
  std::unique_ptr<transport::Srq> srq;
  uint32_t users = 0;  // QPs attached (EBUSY on destroy)
  int event_fd = -1;   // the owner's async event socket (owned by the control server)
  // XRC SRQs (IBV_SRQT_XRC): the domain, and the CQ their receive completions go to. The SRQ
  // number (ibv_get_srq_num) is the SRQ's handle.
  uint32_t xrcd = 0;
  uint32_t cq = 0;
  CompletionQueue* xrc_cq = nullptr;                // the CQ of that handle (held: EBUSY)
  transport::MemoryRegionTable* regions = nullptr;  // the SRQ's PD
};

// An XRC domain (ibv_open_xrcd): the XRC SRQs an XRC_RECV QP of the domain may deliver to.
// Control thread: opens, closes, adds and removes SRQs; the worker of the domain's target QPs
// looks SRQs up per request (transport::XrcDomain) and pulls their rings. One mutex guards the
// SRQ map between them; a removed SRQ is freed only after the target's worker let go of it
// (Device::destroy_srq).
class XrcDomainObject final : public transport::XrcDomain {
 public:
  std::optional<transport::XrcSrqTarget> find_srq(std::uint32_t srqn) override;
  // Runs fn on every SRQ of the domain (worker side: pulling rings).
  void for_each_srq(const std::function<void(SharedReceiveQueue&)>& fn);
  // The SRQ numbered srqn, or nullptr (worker side: where its completions go).
  SharedReceiveQueue* srq(std::uint32_t srqn);
  void add(std::uint32_t srqn, SharedReceiveQueue* srq);
  void remove(std::uint32_t srqn);
  bool has_srqs();

  std::set<uint64_t> openers;  // ClientIds that opened the domain (each holds one reference)
  uint64_t inode_dev = 0;      // the shared file's st_dev, 0 for a private domain
  uint64_t inode = 0;          // the shared file's st_ino
  uint32_t qps = 0;            // XRC_RECV QPs of the domain (EBUSY on close)
  // What an XRC_RECV QP's core checks keys against when it has named no SRQ yet: nothing.
  std::unique_ptr<transport::MemoryAccess> no_memory;
  std::unique_ptr<transport::MemoryRegionTable> no_regions;

 private:
  std::mutex lock_;
  std::map<std::uint32_t, SharedReceiveQueue*> srqs_;
};

// The address vector id (transport::QpAttr::av_id) of an RC/UC QP's primary path is the QP's
// handle with this tag; a UD WQE's av_id is an AddressHandle handle (no tag). The port resolves
// either through Device::qp / Device::ah.
inline constexpr uint32_t kQpAvTag = 0x80000000u;

struct QueuePair {
  ClientId owner = 0;
  uint32_t pd = 0;
  uint32_t xrcd = 0;  // XRC_RECV: its XRC domain
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  uint32_t srq = 0;  // 0 = none
  uint64_t cookie = 0;
  transport::QpType type = transport::QpType::kRc;
  wire::Qpn qpn;
  bool sq_sig_all = false;
  control::QpCap cap{};
  control::AhAttr av{};  // the primary path (ah_attr of RTR)
  queues::QpRegionLayout layout{};
  SharedRegion region;
  queues::Ring sq;
  queues::Ring rq;  // not valid() on an SRQ
  queues::WrIdShadow sq_shadow;
  queues::WrIdShadow rq_shadow;  // not valid() on an SRQ
  uint32_t sq_consumer = 0;
  uint32_t rq_consumer = 0;
  int doorbell_fd = -1;  // the owner context's doorbell (owned by the control server)
  // The owner context's page of ready bits and the bit of this QP's rings (queues.h), or none.
  queues::ContextPage* ready_page = nullptr;
  uint32_t ready_bit = queues::kNoReadyBit;
  int event_fd = -1;  // the owner's async event socket (owned by the control server)
  // The transport core while the device runs it itself (no QpRunner); null once a runner
  // hosts it on a worker.
  std::unique_ptr<transport::Qp> qp;
  bool hosted = false;
};

// Where QPs run: the daemon's data path (a worker per QP). Device hands each new QP's
// transport core over with host(), reaches it with run() (blocking until fn ran where the QP
// lives) and takes it back with unhost() before the QueuePair goes away. All three are called
// on the control thread.
class QpRunner {
 public:
  virtual ~QpRunner() = default;
  virtual void host(QueuePair& qp, std::unique_ptr<transport::Qp> core) = 0;
  virtual void run(QueuePair& qp, const std::function<void(transport::Qp&)>& fn) = 0;
  virtual void unhost(QueuePair& qp) = 0;
  // Before a control call that must see it: takes in the work the application posted to the QP
  // (and to the QPs sharing its worker) and sends what it can, so the completions of requests
  // that need no answer (UD sends) are written, as rxe writes them while ibv_post_send runs.
  virtual void catch_up(QueuePair& qp) { (void)qp; }
};

// Decodes one WQE slot into a transport work request. The daemon copies the slot out of shared
// memory first (the client may be rewriting it), then calls these on its copy. EINVAL for a
// malformed WQE (more SGEs than the QP allows, inline beyond its limit, unknown opcode).
struct DecodedSend {
  transport::WorkRequest wr;
  std::vector<uint8_t> inline_data;
};
wire::Result<DecodedSend, int> decode_send_wqe(const uint8_t* slot, uint32_t slot_bytes,
                                               uint32_t max_sge, uint32_t max_inline);
wire::Result<transport::RecvRequest, int> decode_recv_wqe(const uint8_t* slot, uint32_t slot_bytes,
                                                          uint32_t max_sge);
// A transport completion as the CQE the provider turns into an ibv_wc.
queues::Cqe encode_cqe(const transport::Completion& c);

// Completion tracking of an SQ or RQ (include/xroce/queues.h), on the worker that owns the QP.
// take_wqe: the WQE at ring index `index` (its copy in `slot`, whose first 8 bytes are the
// application's wr_id) goes to the transport: keeps the wr_id in the shadow and returns the
// wr_id to hand the transport instead (the index). retire_wqe: a completion came back with that
// index; marks the ring completed up to it and returns the application's wr_id.
uint64_t take_wqe(const queues::WrIdShadow& shadow, uint32_t index, const uint8_t* slot);
uint64_t retire_wqe(const queues::Ring& ring, const queues::WrIdShadow& shadow,
                    uint64_t transport_wr_id);

// Tells the provider whether a post to the QP's RQ must ring the doorbell (include/xroce/
// queues.h "Receive doorbells"): not while a worker hosts the QP in `state` and a posted receive
// only waits for a request, which pulls it; always in the error state, where it is flushed at
// once, and for a QP no worker hosts. Stores only on a change. On the thread that runs the QP's
// transport (its worker once hosted), before that thread's next look for posted work.
void sync_receive_doorbell(QueuePair& qp, transport::QpState state);

}  // namespace xroce::device
