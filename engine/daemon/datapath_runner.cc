#include "daemon/datapath_runner.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "net/neighbour.h"
#include "wire/udp_sport.h"

namespace xroce::daemon {
namespace {

constexpr std::uint32_t kEventCqErr = 0;  // IBV_EVENT_CQ_ERR
constexpr std::uint32_t kEventSrqLimitReached = 15;
// The hop limit a path starts with: the namespace's default TTL (IPv4) or hop limit (IPv6),
// read once. For RoCE v2 the kernel's verbs core replaces the address vector's hop_limit with
// the route's (ib_resolve_unicast_gid_dmac), so rxe sends 64 whatever the application asked
// for; ibv_rc_pingpong asks for 1, which would stop at the first router. Where the worker
// resolves the MAC (AF_XDP) it also takes the route's own hop limit (RTAX_HOPLIMIT).
std::uint8_t default_hop_limit(bool v4) {
  static const std::uint8_t v4_limit = net::namespace_hop_limit(true);
  static const std::uint8_t v6_limit = net::namespace_hop_limit(false);
  return v4 ? v4_limit : v6_limit;
}

void send_record(int fd, const void* record, std::size_t bytes) {
  if (fd >= 0) (void)send(fd, record, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The worker side of one hosted QP: its rings, CQs and address vectors.
class RingBinding final : public QpBinding {
 public:
  // send_cq and recv_cq are null where the QP type has none (XRC); `xrc` is an XRC_RECV QP's
  // domain, whose SRQs it pulls and whose SRQs' CQs take its receive completions.
  RingBinding(const device::Device& device, device::QueuePair& qp, device::CompletionQueue* send_cq,
              device::CompletionQueue* recv_cq, device::SharedReceiveQueue* srq,
              device::XrcDomainObject* xrc)
      : device_(device),
        qp_(qp),
        send_cq_(send_cq),
        recv_cq_(recv_cq),
        srq_(srq),
        xrc_(xrc),
        src_mac_(device.netdev().mac),
        scratch_(std::max({qp.layout.send_slot_bytes, qp.layout.recv_slot_bytes,
                           srq != nullptr ? srq->ring.slot_bytes() : 0u})) {}

  bool pull_work_on_worker(transport::Qp& core) override {
    const bool sends = pull_sends(core);
    return pull_receives(core) || sends;
  }

  void pull_receives_on_worker(transport::Qp& core) override { pull_receives(core); }

  bool work_pending_on_worker() const override {
    bool xrc_ready = false;
    if (xrc_ != nullptr) {
      xrc_->for_each_srq([&](device::SharedReceiveQueue& s) {
        xrc_ready = xrc_ready || s.ring.ready(s.consumer) != 0;
      });
    }
    return qp_.sq.ready(qp_.sq_consumer) != 0 ||
           (qp_.rq.valid() && qp_.rq.ready(qp_.rq_consumer) != 0) ||
           (srq_ != nullptr && srq_->ring.ready(srq_->consumer) != 0) || xrc_ready;
  }

  // One doorbell per context, which all its QPs and SRQs ring; an XRC target's SRQs may belong
  // to other contexts of its domain, which ring their own.
  std::vector<int> doorbell_fds_on_worker() const override {
    std::vector<int> fds{qp_.doorbell_fd};
    if (xrc_ != nullptr) {
      xrc_->for_each_srq([&](device::SharedReceiveQueue& s) {
        if (std::find(fds.begin(), fds.end(), s.doorbell_fd) == fds.end()) {
          fds.push_back(s.doorbell_fd);
        }
      });
    }
    return fds;
  }

  // The QP's own rings share its bit; a QP that also pulls from SRQs has none (their posts set
  // no bit of ours).
  ReadyBit ready_bit_on_worker() const override {
    if (srq_ != nullptr || xrc_ != nullptr || qp_.ready_page == nullptr ||
        qp_.ready_bit >= queues::kReadyBits) {
      return {};
    }
    return {qp_.ready_page, qp_.ready_bit};
  }

  void set_asleep_on_worker(bool asleep) override {
    const std::uint32_t v = asleep ? queues::kEngineAsleep : queues::kEngineAwake;
    qp_.sq.header().wakeup.store(v, std::memory_order_seq_cst);
    if (qp_.rq.valid()) qp_.rq.header().wakeup.store(v, std::memory_order_seq_cst);
    if (srq_ != nullptr) srq_->ring.header().wakeup.store(v, std::memory_order_seq_cst);
    if (xrc_ != nullptr) {
      xrc_->for_each_srq([&](device::SharedReceiveQueue& s) {
        s.ring.header().wakeup.store(v, std::memory_order_seq_cst);
      });
    }
  }

  // Where a completion goes: the QP's send or receive CQ, or for an XRC target's receive the
  // CQ of the XRC SRQ that supplied the WQE.
  device::CompletionQueue* cq_for(const transport::Completion& c) {
    if (!c.is_recv()) return send_cq_;
    if (c.xrc_srqn == 0 || xrc_ == nullptr) return recv_cq_;
    device::SharedReceiveQueue* s = xrc_->srq(c.xrc_srqn);
    return s == nullptr ? nullptr : s->xrc_cq;
  }

  void complete_on_worker(const transport::Completion& completion) override {
    transport::Completion c = completion;
    // The transport knows SQ and RQ WQEs by ring index (queues.h completion tracking).
    if (!c.is_recv()) {
      c.wr_id = device::retire_wqe(qp_.sq, qp_.sq_shadow, c.wr_id);
    } else if (srq_ == nullptr && qp_.rq.valid()) {
      c.wr_id = device::retire_wqe(qp_.rq, qp_.rq_shadow, c.wr_id);
    }
    if (c.is_recv()) release_recv_slot(c);
    device::CompletionQueue* target = cq_for(c);
    if (target == nullptr) return;  // an XRC SRQ destroyed under its last completion
    device::CompletionQueue& cq = *target;
    switch (cq.push(device::encode_cqe(c))) {
      case device::CompletionQueue::Push::written:
        break;
      case device::CompletionQueue::Push::written_notify: {
        const control::CompletionEvent event{cq.cookie};
        send_record(cq.channel_fd, &event, sizeof(event));
        break;
      }
      case device::CompletionQueue::Push::overflow: {
        const control::AsyncEvent event{cq.cookie, kEventCqErr};
        send_record(cq.event_fd, &event, sizeof(event));
        break;
      }
    }
  }

  void state_on_worker(transport::QpState state) override {
    device::sync_receive_doorbell(qp_, state);
  }

  void event_on_worker(const transport::AsyncEvent& e) override {
    const control::AsyncEvent event{qp_.cookie, static_cast<std::uint32_t>(e.type)};
    send_record(qp_.event_fd, &event, sizeof(event));
  }

  // An RC/UC QP takes packets from its peer only, sent to its own address (rxe's check_addr):
  // a datagram forged from elsewhere, however right its QPN, PSN and rkey, never reaches it.
  // Before the QP has a path (RTR) the transport refuses every packet anyway.
  bool accepts_from_on_worker(const wire::FrameAddress& addr) const override {
    if (qp_.type == transport::QpType::kUd || qp_.av.is_global == 0) return true;
    if (std::memcmp(addr.src_ip.bytes.data(), qp_.av.dgid, sizeof qp_.av.dgid) != 0) return false;
    return qp_.av.sgid_index < device_.gids().size() &&
           std::memcmp(addr.dst_ip.bytes.data(), device_.gids().at(qp_.av.sgid_index).data(),
                       addr.dst_ip.bytes.size()) == 0;
  }

  const wire::FrameAddress* address_on_worker(std::uint32_t av_id) override {
    if ((av_id & device::kQpAvTag) != 0) {
      // The path modify_qp set (RTR). The control thread writes qp_.av before it answers the
      // application, which only then posts the work that makes us transmit.
      if (!path_ || std::memcmp(&path_attr_, &qp_.av, sizeof(path_attr_)) != 0) {
        path_attr_ = qp_.av;
        path_ = frame_address(path_attr_, qp_.av.dgid, true);
      }
      return path_ ? &*path_ : nullptr;
    }
    auto it = ahs_.find(av_id);
    if (it == ahs_.end()) {
      // First use of this address handle on this QP. Known limit: Device's AH map is read here
      // while the control thread may insert into it (a hook publishing AHs to the workers
      // would remove this race).
      const device::AddressHandle* ah = device_.ah(av_id);
      if (ah == nullptr || ah->owner != qp_.owner) return nullptr;
      auto address = frame_address(ah->attr, ah->attr.dgid, false);
      if (!address) return nullptr;
      it = ahs_.emplace(av_id, *address).first;
    }
    return &it->second;
  }

 private:
  std::optional<wire::FrameAddress> frame_address(const control::AhAttr& attr,
                                                  const std::uint8_t (&dgid)[16], bool rc) const {
    if (attr.sgid_index >= device_.gids().size()) return std::nullopt;
    wire::FrameAddress a;
    a.src_mac = src_mac_;
    std::memcpy(a.src_ip.bytes.data(), device_.gids().at(attr.sgid_index).data(), 16);
    std::memcpy(a.dst_ip.bytes.data(), dgid, 16);
    if (a.src_ip.is_v4() != a.dst_ip.is_v4()) return std::nullopt;
    a.traffic_class = attr.traffic_class;
    a.hop_limit = default_hop_limit(a.src_ip.is_v4());
    a.flow_label = a.src_ip.is_v4() ? 0 : attr.flow_label;
    a.udp_src_port = rc ? wire::rdma_get_udp_sport(attr.flow_label, qp_.qpn, dest_qpn_)
                        : wire::udp_sport_at_create(qp_.qpn);
    return a;
  }

  bool pull_receives(transport::Qp& core) {
    bool any = false;
    if (qp_.rq.valid()) any |= pull_recvs(core);
    if (srq_ != nullptr) any |= pull_srq(*srq_);
    if (xrc_ != nullptr) {
      xrc_->for_each_srq([&](device::SharedReceiveQueue& s) { any |= pull_srq(s); });
    }
    return any;
  }

  bool pull_sends(transport::Qp& core) {
    bool any = false;
    const std::uint32_t bytes = qp_.layout.send_slot_bytes;
    for (std::uint32_t ready = qp_.sq.ready(qp_.sq_consumer); ready > 0; --ready) {
      std::memcpy(scratch_.data(), qp_.sq.slot(qp_.sq_consumer), bytes);  // copy, then check
      auto wqe = device::decode_send_wqe(scratch_.data(), bytes, qp_.cap.max_send_sge,
                                         qp_.cap.max_inline_data);
      const std::uint64_t index = device::take_wqe(qp_.sq_shadow, qp_.sq_consumer, scratch_.data());
      int err = EINVAL;
      if (wqe) {
        wqe->wr.wr_id = index;
        err = (wqe->wr.send_flags & transport::send_flags::kInline) != 0
                  ? core.post_send_inline(wqe->wr, wqe->inline_data)
                  : core.post_send(wqe->wr);
        if (err == 0) dest_qpn_ = core.attr().dest_qp_num;
      }
      if (err == ENOMEM) break;  // the transport's queue is full: take it on a later turn
      if (err != 0) fail_wqe(transport::WcOpcode::kSend, index);
      qp_.sq.release(++qp_.sq_consumer);
      any = true;
    }
    return any;
  }

  // Receive WQEs stay the application's until they are used, as on an RNIC: a WQE moved into
  // the transport keeps its ring slot (rq_consumer and the SRQ's consumer are only our read
  // positions), so ibv_post_recv / ibv_post_srq_recv take at most max_recv_wr / max_wr
  // outstanding and then ENOMEM (pyverbs full_rq_bad_flow), and every WQE they accepted is one
  // the responder can use. A QP's RQ slot is freed when the WQE's completion is written
  // (complete_on_worker; a reset drops WQEs without completions, and Device::modify_qp frees
  // theirs); an SRQ's when a QP takes the WQE from the SRQ (what the transport's Srq still
  // holds is all that is outstanding).
  bool pull_recvs(transport::Qp& core) {
    bool any = false;
    const std::uint32_t bytes = qp_.layout.recv_slot_bytes;
    for (std::uint32_t ready = qp_.rq.ready(qp_.rq_consumer); ready > 0; --ready) {
      std::memcpy(scratch_.data(), qp_.rq.slot(qp_.rq_consumer), bytes);
      auto wqe = device::decode_recv_wqe(scratch_.data(), bytes, qp_.cap.max_recv_sge);
      const std::uint64_t index = device::take_wqe(qp_.rq_shadow, qp_.rq_consumer, scratch_.data());
      if (wqe) wqe->wr_id = index;
      const int err = wqe ? core.post_recv(*wqe) : EINVAL;
      if (err == ENOMEM) break;
      ++qp_.rq_consumer;
      if (err != 0) fail_wqe(transport::WcOpcode::kRecv, index);  // its completion frees the slot
      any = true;
    }
    return any;
  }

  bool pull_srq(device::SharedReceiveQueue& srq) {
    bool any = false;
    const std::uint32_t bytes = srq.ring.slot_bytes();
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    for (std::uint32_t ready = srq.ring.ready(srq.consumer); ready > 0; --ready) {
      std::memcpy(scratch_.data(), srq.ring.slot(srq.consumer), bytes);
      auto wqe = device::decode_recv_wqe(scratch_.data(), bytes, srq.attr.max_sge);
      const int err = wqe ? srq.srq->post_recv(*wqe) : EINVAL;
      if (err == ENOMEM) break;
      ++srq.consumer;  // a malformed WQE is dropped, and its slot freed below
      any = true;
    }
    release_srq_slots(srq);
    if (srq.srq->poll_limit_event()) {
      const control::AsyncEvent event{srq.cookie, kEventSrqLimitReached};
      send_record(srq.event_fd, &event, sizeof(event));
    }
    return any;
  }

  // The SRQ's slots are those of the WQEs read from its ring that its Srq still holds. Called
  // when WQEs are read and when one completes: a consumer that reposts only after a completion
  // (UCX counts its free SRQ slots by completions) must find the slot free by then, even when
  // nothing else makes this worker read the ring again.
  static void release_srq_slots(device::SharedReceiveQueue& srq) {
    const auto outstanding = static_cast<std::uint32_t>(srq.srq->size());
    if (srq.ring.header().consumer.load(std::memory_order_relaxed) != srq.consumer - outstanding) {
      srq.ring.release(srq.consumer - outstanding);
    }
  }

  // A receive WQE completed (or was flushed): its slot is free, in the QP's RQ, its SRQ, or for
  // an XRC target the XRC SRQ the WQE came from.
  void release_recv_slot(const transport::Completion& c) {
    if (qp_.rq.valid()) {
      qp_.rq.release(qp_.rq.header().consumer.load(std::memory_order_relaxed) + 1);
    } else if (srq_ != nullptr) {
      release_srq_slots(*srq_);
    } else if (xrc_ != nullptr && c.xrc_srqn != 0) {
      if (device::SharedReceiveQueue* s = xrc_->srq(c.xrc_srqn)) release_srq_slots(*s);
    }
  }

  // A WQE the provider should never have written (it validates at post time): complete it
  // with an error rather than act on it.
  void fail_wqe(transport::WcOpcode opcode, std::uint64_t index) {
    transport::Completion c;
    c.wr_id = index;
    c.status = transport::WcStatus::kLocQpOpErr;
    c.opcode = opcode;
    c.qp_num = qp_.qpn;
    complete_on_worker(c);
  }

  const device::Device& device_;
  device::QueuePair& qp_;
  device::CompletionQueue* send_cq_;
  device::CompletionQueue* recv_cq_;
  device::SharedReceiveQueue* srq_;
  device::XrcDomainObject* xrc_;
  wire::MacAddr src_mac_;
  std::vector<std::uint8_t> scratch_;
  wire::Qpn dest_qpn_;
  control::AhAttr path_attr_{};
  std::optional<wire::FrameAddress> path_;
  std::map<std::uint32_t, wire::FrameAddress> ahs_;
};

// Receive queues of a netdev, as sysfs lists them (queues/rx-N).
std::uint32_t rx_queue_count(const std::string& ifname) {
  std::error_code ec;
  std::uint32_t n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/sys/class/net/" + ifname + "/queues", ec)) {
    if (entry.path().filename().string().rfind("rx-", 0) == 0) ++n;
  }
  return n == 0 ? 1 : n;
}

}  // namespace

wire::Result<std::unique_ptr<DatapathRunner>, std::string> start_datapath(
    device::Device& device, DatapathPort port, std::uint32_t queues,
    const std::vector<std::uint32_t>& cpus, LoopbackRegistry* loopback) {
  const device::NetdevState& netdev = device.netdev();
  DatapathConfig config;
  config.ifname = netdev.name;
  config.ifindex = netdev.ifindex;
  config.mac = netdev.mac;
  config.port = port;
  if (queues == 0 && port == DatapathPort::kAfXdp) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    queues =
        std::min(cpus > 0 ? static_cast<std::uint32_t>(cpus) : 1u, rx_queue_count(netdev.name));
  }
  config.queues = queues;
  config.cpus = cpus;
  config.local_ips = local_ips_of(device);
  config.loopback = loopback;
  auto datapath = Datapath::open(config);
  if (!datapath) return wire::Err(datapath.error());
  // An AF_XDP port without multi-buffer carries less than a 4 KB-MTU frame: the active MTU
  // comes down to what it carries rather than QPs sending frames it refuses.
  device.set_port_frame_limit((*datapath)->max_frame_bytes());
  device.set_port_receive_frames((*datapath)->receive_frames());
  return std::make_unique<DatapathRunner>(device, std::move(*datapath));
}

std::vector<wire::IpAddr> local_ips_of(const device::Device& device) {
  std::vector<wire::IpAddr> ips;
  for (std::size_t i = 0; i < device.gids().size(); ++i) {
    if (device::is_zero(device.gids().at(i))) continue;
    wire::IpAddr ip;
    std::memcpy(ip.bytes.data(), device.gids().at(i).data(), ip.bytes.size());
    if (std::find(ips.begin(), ips.end(), ip) == ips.end()) ips.push_back(ip);
  }
  return ips;
}

DatapathRunner::DatapathRunner(device::Device& device, std::unique_ptr<Datapath> datapath)
    : device_(device), datapath_(std::move(datapath)) {
  std::vector<Worker*> workers;
  for (std::uint32_t i = 0; i < datapath_->worker_count(); ++i)
    workers.push_back(&datapath_->worker(i));
  wake_on_budget_release(device_.inflight_budget(), std::move(workers));
}

DatapathRunner::~DatapathRunner() {
  // The workers' QPs give their PSNs back as they go: with the workers stopped first, and the
  // hook that wakes them gone, none of that reaches a worker already destroyed.
  datapath_->stop();
  device_.inflight_budget().set_release_hook({});
}

// The objects a QP's worker writes or consumes with other QPs: its CQs and SRQ, and for an
// XRC target its domain and the CQs of the domain's SRQs.
std::vector<const void*> DatapathRunner::shared_objects(const device::QueuePair& qp) {
  std::vector<const void*> out{static_cast<const void*>(device_.cq(qp.owner, qp.send_cq)),
                               static_cast<const void*>(device_.cq(qp.owner, qp.recv_cq)),
                               static_cast<const void*>(device_.srq(qp.owner, qp.srq))};
  if (device::XrcDomainObject* domain = device_.xrcd(qp.owner, qp.xrcd)) {
    out.push_back(domain);
    domain->for_each_srq([&](device::SharedReceiveQueue& s) { out.push_back(s.xrc_cq); });
  }
  std::erase(out, nullptr);
  return out;
}

std::uint32_t DatapathRunner::choose_worker(const device::QueuePair& qp) {
  for (const void* shared : shared_objects(qp)) {
    const auto it = shared_.find(shared);
    if (it != shared_.end()) return it->second.worker;
  }
  return datapath_->least_loaded_worker();
}

void DatapathRunner::host(device::QueuePair& qp, std::unique_ptr<transport::Qp> core) {
  device::CompletionQueue* send_cq = device_.cq(qp.owner, qp.send_cq);
  device::CompletionQueue* recv_cq = device_.cq(qp.owner, qp.recv_cq);
  device::SharedReceiveQueue* srq = qp.srq != 0 ? device_.srq(qp.owner, qp.srq) : nullptr;
  device::XrcDomainObject* xrc = qp.xrcd != 0 ? device_.xrcd(qp.owner, qp.xrcd) : nullptr;
  const std::uint32_t worker = choose_worker(qp);
  const std::vector<const void*> shared = shared_objects(qp);
  for (const void* object : shared) {
    auto [it, added] = shared_.try_emplace(object, Placement{worker, 0});
    ++it->second.users;
  }
  placed_with_[qp.qpn.value()] = shared;
  auto binding = std::make_unique<RingBinding>(device_, qp, send_cq, recv_cq, srq, xrc);
  datapath_->add_qp(HostedQp{std::move(core), std::move(binding)}, worker);
}

void DatapathRunner::run(device::QueuePair& qp, const std::function<void(transport::Qp&)>& fn) {
  Worker* w = datapath_->worker_for(qp.qpn);
  if (w == nullptr) return;
  const wire::Qpn qpn = qp.qpn;
  w->call([&fn, qpn](Worker& self) {
    if (transport::Qp* core = self.find_qp_on_worker(qpn)) fn(*core);
    return 0;
  });
}

void DatapathRunner::catch_up(device::QueuePair& qp) {
  Worker* w = datapath_->worker_for(qp.qpn);
  if (w == nullptr) return;
  w->call([](Worker& self) {
    self.catch_up_on_worker();
    return 0;
  });
}

void DatapathRunner::unhost(device::QueuePair& qp) {
  datapath_->remove_qp(qp.qpn);
  auto placed = placed_with_.find(qp.qpn.value());
  if (placed == placed_with_.end()) return;
  for (const void* shared : placed->second) {
    const auto it = shared_.find(shared);
    if (it == shared_.end()) continue;
    if (--it->second.users == 0) shared_.erase(it);
  }
  placed_with_.erase(placed);
}

}  // namespace xroce::daemon
