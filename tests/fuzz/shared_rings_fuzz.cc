// libFuzzer target for the shared rings (include/xroce/queues.h) as the daemon's worker reads
// them: the client owns the memory, so the producer indices and every slot are arbitrary bytes.
// The target takes work the way RingBinding does (engine/daemon/datapath_runner.cc): checks the
// producer index against its own geometry, copies each slot before decoding it
// (device::decode_send_wqe / decode_recv_wqe), hands it to a real transport::Qp under its ring
// index (device::take_wqe), then makes the QP send what it can and flushes it (modify to ERR) so
// every WQE completes, retiring each completion (device::retire_wqe).
//
// Properties besides "no crash, no sanitizer report":
//   - a producer index more than a ring ahead of the consumer is corrupt and takes nothing;
//   - every completion gives back the wr_id the slot held when the WQE was taken;
//   - `completed` never moves back and never passes what was taken.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "device/objects.h"
#include "fuzz_support.h"
#include "transport/memory.h"
#include "transport/qp.h"
#include "xroce/queues.h"

namespace {

using xroce::fuzz::require;

using namespace xroce;

constexpr uint32_t kSlots = 8;
constexpr uint32_t kMaxSge = 2;
constexpr uint32_t kMaxInline = 64;

// A work ring and its shadow in one buffer, as a QP region holds them.
struct WorkRing {
  WorkRing(queues::RingKind kind, uint32_t slot_bytes)
      : memory(queues::ring_bytes(kSlots, slot_bytes) + queues::shadow_bytes(kSlots)) {
    queues::Ring::format(memory.data(), kind, kSlots, slot_bytes);
    ring = queues::Ring(memory.data(), kSlots, slot_bytes);
    shadow = queues::WrIdShadow(memory.data() + queues::ring_bytes(kSlots, slot_bytes), kSlots);
  }
  std::vector<uint8_t> memory;
  queues::Ring ring;
  queues::WrIdShadow shadow;
  uint32_t consumer = 0;
  std::map<uint32_t, uint64_t> taken;  // ring index -> the wr_id its slot held
};

// The client's side: arbitrary producer index and slot bytes.
void fill(WorkRing& w, const uint8_t*& data, std::size_t& size) {
  uint16_t producer = 0;
  if (size >= 2) {
    std::memcpy(&producer, data, 2);
    data += 2;
    size -= 2;
  }
  w.ring.header().producer.store(producer % (3 * kSlots));
  for (uint32_t i = 0; i < kSlots && size > 0; ++i) {
    const std::size_t n = std::min<std::size_t>(size, w.ring.slot_bytes());
    std::memcpy(w.ring.slot(i), data, n);
    data += n;
    size -= n;
  }
}

void take_sends(WorkRing& w, transport::Qp& qp, std::vector<uint8_t>& scratch) {
  const uint32_t bytes = w.ring.slot_bytes();
  if (w.ring.corrupt(w.consumer)) require(w.ring.ready(w.consumer) == 0, "corrupt takes nothing");
  for (uint32_t ready = w.ring.ready(w.consumer); ready > 0; --ready) {
    std::memcpy(scratch.data(), w.ring.slot(w.consumer), bytes);
    auto wqe = device::decode_send_wqe(scratch.data(), bytes, kMaxSge, kMaxInline);
    const uint64_t index = device::take_wqe(w.shadow, w.consumer, scratch.data());
    uint64_t wr_id;
    std::memcpy(&wr_id, scratch.data(), sizeof wr_id);
    if (wqe) {
      wqe->wr.wr_id = index;
      const int err = (wqe->wr.send_flags & transport::send_flags::kInline) != 0
                          ? qp.post_send_inline(wqe->wr, wqe->inline_data)
                          : qp.post_send(wqe->wr);
      if (err == 0) w.taken[w.consumer] = wr_id;
    }
    w.ring.release(++w.consumer);
  }
}

void take_recvs(WorkRing& w, transport::Qp& qp, std::vector<uint8_t>& scratch) {
  const uint32_t bytes = w.ring.slot_bytes();
  for (uint32_t ready = w.ring.ready(w.consumer); ready > 0; --ready) {
    std::memcpy(scratch.data(), w.ring.slot(w.consumer), bytes);
    auto wqe = device::decode_recv_wqe(scratch.data(), bytes, kMaxSge);
    const uint64_t index = device::take_wqe(w.shadow, w.consumer, scratch.data());
    uint64_t wr_id;
    std::memcpy(&wr_id, scratch.data(), sizeof wr_id);
    if (wqe) {
      wqe->wr_id = index;
      if (qp.post_recv(*wqe) == 0) w.taken[w.consumer] = wr_id;
    }
    w.ring.release(++w.consumer);
  }
}

void retire(WorkRing& w, const transport::Completion& c) {
  const uint32_t before = w.ring.header().completed.load();
  const uint64_t wr_id = device::retire_wqe(w.ring, w.shadow, c.wr_id);
  const auto it = w.taken.find(static_cast<uint32_t>(c.wr_id));
  require(it != w.taken.end(), "a completion names a WQE that was taken");
  require(wr_id == it->second, "a completion gives back the wr_id of its WQE");
  const uint32_t after = w.ring.header().completed.load();
  require(static_cast<int32_t>(after - before) >= 0, "completed never moves back");
  require(static_cast<int32_t>(w.consumer - after) >= 0, "completed never passes what was taken");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  WorkRing sq(queues::RingKind::send, queues::send_slot_bytes(kMaxSge, kMaxInline));
  WorkRing rq(queues::RingKind::recv, queues::recv_slot_bytes(kMaxSge));
  fill(sq, data, size);
  fill(rq, data, size);

  transport::LocalMemory memory;
  transport::MemoryRegionTable regions(memory);
  const uint64_t buffer = memory.allocate(4096);
  (void)regions.register_region(buffer, 4096, transport::access::kLocalWrite);
  transport::QpConfig config;
  config.qpn = wire::Qpn(0x11);
  config.max_send_wr = kSlots;
  config.max_recv_wr = kSlots;
  config.max_send_sge = kMaxSge;
  config.max_recv_sge = kMaxSge;
  config.max_inline_data = kMaxInline;
  transport::Qp qp(config, regions);
  transport::QpAttr a;
  a.qp_access_flags = transport::access::kRemoteWrite;
  a.path_mtu = transport::PathMtu::k256;
  a.dest_qp_num = wire::Qpn(0x22);
  a.timeout = 14;
  a.retry_cnt = 1;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  a.av_id = 1;
  namespace m = transport::qp_attr;
  a.qp_state = transport::QpState::kInit;
  (void)qp.modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags);
  a.qp_state = transport::QpState::kRtr;
  (void)qp.modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                         m::kMaxDestRdAtomic | m::kMinRnrTimer);
  a.qp_state = transport::QpState::kRts;
  (void)qp.modify(
      a, m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic);

  std::vector<uint8_t> scratch(std::max(sq.ring.slot_bytes(), rq.ring.slot_bytes()));
  take_sends(sq, qp, scratch);
  take_recvs(rq, qp, scratch);
  std::vector<uint8_t> packet(4096);
  for (int i = 0; i < 64 && qp.poll_transmit(0, packet); ++i) {
  }
  a.qp_state = transport::QpState::kErr;
  (void)qp.modify(a, m::kState);
  while (auto c = qp.poll_completion())
    retire(c->is_recv() ? rq : sq, *c);
  return 0;
}
