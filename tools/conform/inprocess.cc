#include "inprocess.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "wire/frame.h"

namespace xroce::conform {
namespace {

constexpr std::uint32_t kPeerAvId = 1;  // the one address vector: the peer
// The port's active MTU, as on a 1500-byte Ethernet link (what the device gives its QPs there).
constexpr transport::PathMtu kPortMtu = transport::PathMtu::k1024;

transport::PathMtu path_mtu(std::uint32_t bytes) {
  switch (bytes) {
    case 256:
      return transport::PathMtu::k256;
    case 512:
      return transport::PathMtu::k512;
    case 2048:
      return transport::PathMtu::k2048;
    case 4096:
      return transport::PathMtu::k4096;
    default:
      return transport::PathMtu::k1024;
  }
}

void modify_or_throw(transport::Qp& qp, const transport::QpAttr& a, std::uint32_t mask) {
  if (qp.modify(a, mask) != 0) throw std::runtime_error("in-process target: modify_qp refused");
}

// RESET -> INIT -> RTR -> RTS, as the agent does with ibv_modify_qp.
void bring_up(transport::Qp& qp, const QpSpec& s) {
  namespace m = transport::qp_attr;
  transport::QpAttr a;
  a.qp_access_flags = s.access;
  a.qkey = wire::Qkey(s.qkey);
  a.path_mtu = path_mtu(s.mtu_bytes);
  a.dest_qp_num = wire::Qpn(s.peer_qpn);
  a.rq_psn = wire::Psn(s.rq_psn);
  a.sq_psn = wire::Psn(s.sq_psn);
  a.max_dest_rd_atomic = s.max_dest_rd_atomic;
  a.max_rd_atomic = s.max_rd_atomic;
  a.min_rnr_timer = s.min_rnr_timer;
  a.timeout = s.timeout;
  a.retry_cnt = s.retry_cnt;
  a.rnr_retry = s.rnr_retry;
  a.av_id = kPeerAvId;
  const bool ud = s.kind == QpKind::kUd;
  a.qp_state = transport::QpState::kInit;
  modify_or_throw(qp, a, m::kState | m::kPkeyIndex | m::kPort | (ud ? m::kQkey : m::kAccessFlags));
  a.qp_state = transport::QpState::kRtr;
  modify_or_throw(qp, a,
                  ud ? m::kState
                     : m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                           m::kMaxDestRdAtomic | m::kMinRnrTimer);
  a.qp_state = transport::QpState::kRts;
  modify_or_throw(
      qp, a,
      ud ? m::kState | m::kSqPsn
         : m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic);
}

Cqe to_cqe(const transport::Completion& c) {
  Cqe e;
  e.wr_id = c.wr_id;
  e.status = static_cast<std::uint32_t>(c.status);
  e.opcode = static_cast<std::uint32_t>(c.opcode);
  e.byte_len = c.byte_len;
  e.imm = c.imm_data;
  e.src_qp = c.src_qp.value();
  e.wc_flags = c.wc_flags;
  return e;
}

}  // namespace

Endpoints inprocess_endpoints(bool ipv6) {
  Endpoints e;
  e.peer_mac = {0x02, 0xC0, 0, 0, 0, 0x01};
  e.target_mac = {0x02, 0xC0, 0, 0, 0, 0x02};
  if (ipv6) {
    std::array<std::uint8_t, 16> a = {0x20, 0x01, 0x00, 0x02};  // 2001:2::
    a[15] = 1;
    e.peer_ip = wire::IpAddr::v6(a);
    a[15] = 2;
    e.target_ip = wire::IpAddr::v6(a);
  } else {
    e.peer_ip = wire::IpAddr::v4(0xC6120001);    // 198.18.0.1
    e.target_ip = wire::IpAddr::v4(0xC6120002);  // 198.18.0.2
  }
  return e;
}

InProcessDevice::InProcessDevice(const Endpoints& ends) : ends_(ends) {}
InProcessDevice::~InProcessDevice() = default;

Capabilities InProcessDevice::capabilities() {
  Capabilities c;
  c.name = "xroce (in-process transport)";
  c.atomics = true;
  c.generates_cnp = false;  // the notification point lives in the daemon's data path
  c.ud = true;
  c.port_mtu_bytes = transport::mtu_bytes(kPortMtu);
  return c;
}

QpInfo InProcessDevice::create_qp(const QpSpec& spec) {
  transport::QpConfig cfg;
  cfg.type = spec.kind == QpKind::kUd ? transport::QpType::kUd : transport::QpType::kRc;
  cfg.qpn = wire::Qpn(next_qpn_++);
  cfg.port_mtu = kPortMtu;
  auto qp = std::make_unique<transport::Qp>(cfg, mrs_);
  bring_up(*qp, spec);
  const std::uint32_t qpn = cfg.qpn.value();
  qps_[qpn] = QpSlot{std::move(qp), {}};
  return QpInfo{qpn, qpn};
}

void InProcessDevice::destroy_qp(const QpInfo& qp) {
  qps_.erase(qp.id);
}

MrInfo InProcessDevice::register_mr(std::uint32_t length, std::uint32_t access) {
  const std::uint64_t addr = memory_.allocate(length);
  const transport::MemoryRegion& r = mrs_.register_region(addr, length, access);
  regions_.push_back(r);
  return MrInfo{static_cast<std::uint32_t>(regions_.size() - 1), addr, length, r.lkey.value(),
                r.rkey.value()};
}

void InProcessDevice::write_mr(const MrInfo& mr, std::uint32_t offset,
                               const std::vector<std::uint8_t>& data) {
  auto v = memory_.view(mr.addr + offset, data.size());
  std::copy(data.begin(), data.end(), v.begin());
}

std::vector<std::uint8_t> InProcessDevice::read_mr(const MrInfo& mr, std::uint32_t offset,
                                                   std::uint32_t length) {
  auto v = memory_.view(mr.addr + offset, length);
  return {v.begin(), v.end()};
}

void InProcessDevice::post_recv(const QpInfo& qp, std::uint64_t wr_id, const MrInfo& mr,
                                std::uint32_t offset, std::uint32_t length) {
  transport::RecvRequest r;
  r.wr_id = wr_id;
  r.sg_list.push_back(transport::Sge{mr.addr + offset, length, wire::Lkey(mr.lkey)});
  if (slot(qp).qp->post_recv(r) != 0) throw std::runtime_error("post_recv refused");
  drain_outputs();
}

void InProcessDevice::post_send(const QpInfo& qp, const SendSpec& s) {
  transport::WorkRequest w;
  w.wr_id = s.wr_id;
  w.opcode = static_cast<transport::WrOpcode>(s.op);
  w.send_flags = transport::send_flags::kSignaled;
  if (s.length > 0) {
    const transport::MemoryRegion& r = regions_.at(s.mr);
    w.sg_list.push_back(transport::Sge{r.addr + s.offset, s.length, r.lkey});
  }
  w.remote_addr = s.remote_addr;
  w.rkey = wire::Rkey(s.rkey);
  w.imm_data = s.imm;
  w.compare_add = s.compare_add;
  w.swap = s.swap;
  w.ud.av_id = kPeerAvId;
  w.ud.remote_qpn = wire::Qpn(s.ud_remote_qpn);
  w.ud.remote_qkey = wire::Qkey(s.ud_remote_qkey);
  if (slot(qp).qp->post_send(w) != 0) throw std::runtime_error("post_send refused");
  drain_outputs();
}

std::vector<Cqe> InProcessDevice::poll(const QpInfo& qp) {
  drain_outputs();
  QpSlot& s = slot(qp);
  std::vector<Cqe> out(s.cqes.begin(), s.cqes.end());
  s.cqes.clear();
  return out;
}

bool InProcessDevice::in_error(const QpInfo& qp) {
  return slot(qp).qp->state() == transport::QpState::kErr;
}

InProcessDevice::QpSlot* InProcessDevice::find_qpn(std::uint32_t qpn) {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : &it->second;
}

InProcessDevice::QpSlot& InProcessDevice::slot(const QpInfo& qp) {
  QpSlot* s = find_qpn(qp.id);
  if (s == nullptr) throw std::runtime_error("in-process target: no such QP");
  return *s;
}

// The data path's door: a frame that does not decode, fails its ICRC or names no QP is dropped.
void InProcessDevice::send(const Frame& frame) {
  wire::DecodedFrame d;
  if (wire::decode_frame_into(frame, d) || !d.icrc_ok) {
    ++dropped_;
    return;
  }
  QpSlot* s = find_qpn(d.hdr.bth.dest_qp.value());
  if (s == nullptr) {
    ++dropped_;
    return;
  }
  transport::RxMeta meta;
  meta.ecn_ce = d.ecn == wire::Ecn::kCe;
  meta.grh = wire::grh_area(frame, d);
  s->qp->handle_packet(now_ns_, d.hdr, d.payload, meta);
  drain_outputs();
}

void InProcessDevice::drain_outputs() {
  std::array<std::uint8_t, 8192> buf{};
  for (auto& [qpn, s] : qps_) {
    while (auto t = s.qp->poll_transmit(now_ns_, buf)) {
      wire::FrameAddress a;
      a.src_mac = ends_.target_mac;
      a.dst_mac = ends_.peer_mac;
      a.src_ip = ends_.target_ip;
      a.dst_ip = ends_.peer_ip;
      a.udp_src_port = static_cast<std::uint16_t>(0xC000 | (qpn & 0x3FFF));
      if (t->ect) a.traffic_class = static_cast<std::uint8_t>(wire::Ecn::kEct0);
      Frame f(wire::frame_bytes(a, t->hdr, t->payload_len));
      if (wire::encode_frame(a, t->hdr, wire::Bytes(buf.data(), t->payload_len), f)) {
        pending_.push_back(std::move(f));
      }
    }
    while (auto c = s.qp->poll_completion())
      s.cqes.push_back(to_cqe(*c));
  }
}

bool InProcessDevice::run_until(std::uint64_t deadline_ns, bool stop_on_frame) {
  drain_outputs();
  while (!(stop_on_frame && !pending_.empty())) {
    std::optional<std::uint64_t> next;
    for (auto& [qpn, s] : qps_) {
      if (auto d = s.qp->next_deadline()) next = next ? std::min(*next, *d) : *d;
    }
    if (!next || *next > deadline_ns) break;
    now_ns_ = std::max(now_ns_, *next);
    for (auto& [qpn, s] : qps_) {
      if (auto d = s.qp->next_deadline(); d && *d <= now_ns_) s.qp->handle_timeout(now_ns_);
    }
    drain_outputs();
  }
  if (stop_on_frame && !pending_.empty()) return true;
  now_ns_ = std::max(now_ns_, deadline_ns);
  return false;
}

std::optional<Frame> InProcessDevice::receive(std::uint64_t deadline_ns) {
  if (pending_.empty() && !run_until(deadline_ns, true)) return std::nullopt;
  Frame f = std::move(pending_.front());
  pending_.pop_front();
  return f;
}

void InProcessDevice::idle_until(std::uint64_t deadline_ns) {
  run_until(deadline_ns, false);
}

}  // namespace xroce::conform
