#include "pipe_fabric.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "wire/frame.h"

namespace xroce::daemon::test {

namespace {

// Re-encodes a request frame with CE (the IPv4 header checksum covers the TOS byte); anything
// else goes as it was.
std::vector<std::uint8_t> with_ce(const std::vector<std::uint8_t>& bytes) {
  auto d = wire::decode_frame(bytes);
  if (!d || !d->hdr.info().is_request) return bytes;
  wire::FrameAddress a = d->addr;
  a.traffic_class |= static_cast<std::uint8_t>(wire::Ecn::kCe);
  std::vector<std::uint8_t> out(bytes.size() + 64);
  const auto len = wire::encode_frame(a, d->hdr, d->payload, out);
  out.resize(len ? *len : 0);
  return out;
}

}  // namespace

PipePort::PipePort() : efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

PipePort::~PipePort() {
  close(efd_);
}

void PipePort::inject(std::vector<std::uint8_t> frame) {
  {
    std::lock_guard lock(m_);
    queue_.push_back(std::move(frame));
  }
  const std::uint64_t one = 1;
  (void)!write(efd_, &one, sizeof(one));
}

std::vector<SentFrame> PipePort::sent() {
  std::lock_guard lock(m_);
  return sent_;
}

net::PortStats PipePort::stats() const {
  std::lock_guard lock(m_);
  return stats_;
}

net::Result<std::size_t, net::PortError> PipePort::receive(std::span<net::RxFrame> frames) {
  std::uint64_t count = 0;
  (void)!read(efd_, &count, sizeof(count));
  std::lock_guard lock(m_);
  std::size_t n = 0;
  while (n < frames.size() && !queue_.empty()) {
    const std::uint64_t handle = next_handle_++;
    auto& held = held_[handle] = std::move(queue_.front());
    queue_.pop_front();
    frames[n++] = net::RxFrame{held, handle};
  }
  stats_.rx_packets += n;
  return n;
}

void PipePort::release(std::span<const net::RxFrame> frames) {
  std::lock_guard lock(m_);
  for (const auto& f : frames)
    held_.erase(f.handle);
}

net::Result<std::size_t, net::PortError> PipePort::transmit(std::span<const net::TxFrame> frames) {
  for (const auto& f : frames) {
    std::vector<std::uint8_t> bytes(f.begin(), f.end());
    {
      std::lock_guard lock(m_);
      sent_.push_back({monotonic_now_ns(), bytes});
      ++stats_.tx_packets;
    }
    if (tamper && !tamper(bytes)) continue;
    if (mark_ce.load()) bytes = with_ce(bytes);
    if (!drop.load()) peer->inject(std::move(bytes));
  }
  return frames.size();
}

std::vector<transport::Completion> Mailbox::wait(std::size_t n, std::chrono::seconds limit) {
  std::unique_lock lock(m);
  cv.wait_for(lock, limit, [&] { return completions.size() >= n; });
  return completions;
}

bool MailboxBinding::pull_work_on_worker(transport::Qp& qp) {
  std::lock_guard lock(box_->m);
  const bool any = !box_->sends.empty() || !box_->recvs.empty();
  for (; !box_->recvs.empty(); box_->recvs.pop_front())
    EXPECT_EQ(qp.post_recv(box_->recvs.front()), 0);
  for (; !box_->sends.empty(); box_->sends.pop_front())
    EXPECT_EQ(qp.post_send(box_->sends.front()), 0);
  return any;
}

void MailboxBinding::pull_receives_on_worker(transport::Qp& qp) {
  std::lock_guard lock(box_->m);
  for (auto* q : {&box_->recvs, &box_->late_recvs}) {
    for (; !q->empty(); q->pop_front())
      EXPECT_EQ(qp.post_recv(q->front()), 0);
  }
}

bool MailboxBinding::work_pending_on_worker() const {
  std::lock_guard lock(box_->m);
  return !box_->sends.empty() || !box_->recvs.empty();
}

void MailboxBinding::complete_on_worker(const transport::Completion& c) {
  std::lock_guard lock(box_->m);
  box_->completions.push_back(c);
  box_->cv.notify_all();
}

void MailboxBinding::event_on_worker(const transport::AsyncEvent& e) {
  std::lock_guard lock(box_->m);
  box_->events.push_back(e);
}

wire::FrameAddress address(std::uint32_t src_v4, std::uint32_t dst_v4, std::uint8_t traffic_class) {
  wire::FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0, static_cast<std::uint8_t>(src_v4)};
  a.dst_mac = {0x02, 0, 0, 0, 0, static_cast<std::uint8_t>(dst_v4)};
  a.src_ip = wire::IpAddr::v4(src_v4);
  a.dst_ip = wire::IpAddr::v4(dst_v4);
  a.traffic_class = traffic_class;
  return a;
}

Side::Side(std::size_t mem_bytes, std::uint32_t access)
    : buf(mem.allocate(mem_bytes)), mr(mrs.register_region(buf, mem_bytes, access)) {}

void Side::place_qp(const QpSetup& q) {
  namespace m = transport::qp_attr;
  transport::QpConfig cfg;
  cfg.type = q.type;
  cfg.qpn = q.qpn;
  cfg.port_mtu = transport::PathMtu::k1024;
  if (q.window) cfg.max_unacked_psns = *q.window;
  auto qp = std::make_unique<transport::Qp>(cfg, mrs);
  transport::QpAttr a;
  a.qp_access_flags = mr.access;
  a.qkey = wire::Qkey(0x11111111);
  a.path_mtu = transport::PathMtu::k1024;
  a.dest_qp_num = q.peer;
  a.max_dest_rd_atomic = 16;
  a.max_rd_atomic = 16;
  a.min_rnr_timer = 1;
  a.timeout = q.timeout;
  a.retry_cnt = q.retry_cnt;
  a.rnr_retry = q.rnr_retry;
  a.av_id = MailboxBinding::kAvId;
  const bool ud = q.type == transport::QpType::kUd;
  a.qp_state = transport::QpState::kInit;
  ASSERT_EQ(qp->modify(a, m::kState | m::kPkeyIndex | m::kPort | (ud ? m::kQkey : m::kAccessFlags)),
            0);
  a.qp_state = transport::QpState::kRtr;
  ASSERT_EQ(qp->modify(a, ud ? m::kState
                             : m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                                   m::kMaxDestRdAtomic | m::kMinRnrTimer),
            0);
  a.qp_state = transport::QpState::kRts;
  ASSERT_EQ(qp->modify(a, ud ? m::kState | m::kSqPsn
                             : m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn |
                                   m::kMaxQpRdAtomic),
            0);
  box = std::make_shared<Mailbox>();
  boxes[q.qpn.value()] = box;
  qpn = q.qpn;
  dp->add_qp(HostedQp{std::move(qp), std::make_unique<MailboxBinding>(box, q.av)}, q.worker);
}

void Side::post_send(wire::Qpn to, transport::WorkRequest wr) {
  {
    std::lock_guard lock(mailbox(to).m);
    mailbox(to).sends.push_back(std::move(wr));
  }
  dp->worker_for(to)->wake();
}

void Side::post_recv(wire::Qpn to, transport::RecvRequest wr) {
  {
    std::lock_guard lock(mailbox(to).m);
    mailbox(to).recvs.push_back(std::move(wr));
  }
  dp->worker_for(to)->wake();
}

void Side::write(wire::Qpn to, std::uint64_t wr_id, std::uint32_t bytes, std::uint32_t rkey) {
  transport::WorkRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = transport::WrOpcode::kRdmaWrite;
  wr.send_flags = transport::send_flags::kSignaled;
  wr.sg_list = {transport::Sge{buf, bytes, mr.lkey}};
  wr.remote_addr = buf;
  wr.rkey = wire::Rkey(rkey);
  post_send(to, wr);
}

std::uint64_t Side::counter(device::Counter c) {
  std::uint64_t sum = 0;
  for (std::uint32_t w = 0; w < dp->worker_count(); ++w)
    sum += dp->worker(w).device_counters().load(c);
  return sum;
}

void Side::set_cc(const std::function<void(cc::CcDevice&)>& edit) {
  cc::CcDevice d = worker().call([](Worker& w) { return w.cc_on_worker(); });
  edit(d);
  for (std::uint32_t w = 0; w < dp->worker_count(); ++w) {
    dp->worker(w).call([d](Worker& self) {
      self.set_cc_on_worker(d);
      return 0;
    });
  }
}

QpCcStatus Side::cc_of(wire::Qpn of) {
  return *dp->worker_for(of)->call([of](Worker& w) { return w.qp_cc_on_worker(of); });
}

PipeFabric::PipeFabric(std::uint32_t a_workers, std::size_t mem_bytes, std::uint32_t access)
    : a(mem_bytes, access), b(mem_bytes, access) {
  std::vector<std::unique_ptr<net::Port>> va, vb;
  auto pb = std::make_unique<PipePort>();
  for (std::uint32_t i = 0; i < a_workers; ++i) {
    auto pa = std::make_unique<PipePort>();
    pa->peer = pb.get();
    a.ports.push_back(pa.get());
    va.push_back(std::move(pa));
  }
  a.port = a.ports.front();
  pb->peer = a.port;
  b.port = pb.get();
  b.ports.push_back(pb.get());
  vb.push_back(std::move(pb));
  a.dp = Datapath::over_ports(std::move(va), 0, false);
  b.dp = Datapath::over_ports(std::move(vb), 0, false);
}

PipeFabric::~PipeFabric() {
  for (Side* s : {&a, &b})
    for (std::uint32_t i = 0; i < s->dp->worker_count(); ++i)
      s->dp->worker(i).stop();
}

}  // namespace xroce::daemon::test
