// The shared-memory ring contract (include/xroce/queues.h) and the device's side of it
// (engine/device/objects.h): indices, wrap-around, the doorbell flag, CQ arming and overflow,
// WQE decoding and CQE encoding.
#include <endian.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "device/objects.h"
#include "device/shared_region.h"
#include "xroce/queues.h"

namespace xroce::device {
namespace {

struct TestRing {
  explicit TestRing(uint32_t slots, uint32_t slot_bytes, queues::RingKind kind) {
    auto made = SharedRegion::create("test-ring", queues::ring_bytes(slots, slot_bytes));
    EXPECT_TRUE(made.ok());
    region = std::move(*made);
    queues::Ring::format(region.base(), kind, slots, slot_bytes);
    ring = queues::Ring(region.base(), slots, slot_bytes);
  }
  SharedRegion region;
  queues::Ring ring;
};

TEST(Ring, ProducerAndConsumerIndicesWrapAround) {
  TestRing t(4, 16, queues::RingKind::recv);
  queues::Ring& r = t.ring;
  uint32_t produced = 0xfffffffe;  // free-running indices wrap through zero
  uint32_t consumed = produced;
  r.header().producer.store(produced);
  r.header().consumer.store(consumed);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(r.free_slots(produced), 4u);
    for (uint32_t i = 0; i < 4; ++i) {
      *reinterpret_cast<uint32_t*>(r.slot(produced)) = produced;
      ++produced;
    }
    EXPECT_EQ(r.free_slots(produced), 0u);
    EXPECT_FALSE(r.publish(produced));  // the engine is awake: no doorbell
    ASSERT_EQ(r.ready(consumed), 4u);
    for (uint32_t i = 0; i < 4; ++i) {
      EXPECT_EQ(*reinterpret_cast<uint32_t*>(r.slot(consumed)), consumed);
      ++consumed;
    }
    r.release(consumed);
    EXPECT_EQ(r.ready(consumed), 0u);
  }
}

TEST(Ring, DoorbellIsNeededOnlyWhileTheEngineSleeps) {
  TestRing t(8, 16, queues::RingKind::send);
  t.ring.header().wakeup.store(queues::kEngineAsleep);
  EXPECT_TRUE(t.ring.publish(1));
  t.ring.header().wakeup.store(queues::kEngineAwake);
  EXPECT_FALSE(t.ring.publish(2));
}

// queues.h "Receive doorbells": a sleeping worker is woken for a receive only when the daemon
// says the QP needs it; with a ready bit as without.
TEST(Ring, AReceiveRingsOnlyWhereTheDaemonWantsIt) {
  TestRing t(8, 16, queues::RingKind::recv);
  t.ring.header().wakeup.store(queues::kEngineAsleep);
  t.ring.header().receive_doorbell.store(queues::kReceiveDoorbellSkip);
  EXPECT_FALSE(t.ring.publish(1));
  queues::ContextPage page;
  t.ring.header().ready_bit = 3;
  t.ring.header().wakeup.store(queues::kEngineAwake);
  page.asleep_workers.store(1);
  EXPECT_FALSE(t.ring.publish(2, &page));
  EXPECT_EQ(page.ready[0].load(), uint64_t{1} << 3) << "the ready bit is set all the same";
  t.ring.header().receive_doorbell.store(queues::kReceiveDoorbellRing);
  EXPECT_TRUE(t.ring.publish(3, &page));
  page.asleep_workers.store(0);
  EXPECT_FALSE(t.ring.publish(4, &page)) << "nobody sleeps";
}

// The daemon's side of it: only a hosted QP in a state where a receive waits for a request
// skips the doorbell; the error state, and a QP no worker hosts, ring.
TEST(ReceiveDoorbell, SkippedOnlyWhileAHostedQpWaitsForRequests) {
  TestRing t(8, 16, queues::RingKind::recv);
  QueuePair qp;
  qp.rq = t.ring;
  using transport::QpState;
  const auto word = [&] { return t.ring.header().receive_doorbell.load(); };
  sync_receive_doorbell(qp, QpState::kRts);
  EXPECT_EQ(word(), queues::kReceiveDoorbellRing) << "not hosted: nothing pulls on arrival";
  qp.hosted = true;
  for (QpState s : {QpState::kInit, QpState::kRtr, QpState::kRts, QpState::kSqd, QpState::kSqe}) {
    sync_receive_doorbell(qp, QpState::kReset);
    EXPECT_EQ(word(), queues::kReceiveDoorbellRing);
    sync_receive_doorbell(qp, s);
    EXPECT_EQ(word(), queues::kReceiveDoorbellSkip) << static_cast<int>(s);
  }
  sync_receive_doorbell(qp, QpState::kErr);
  EXPECT_EQ(word(), queues::kReceiveDoorbellRing) << "a receive in error is flushed at once";
}

TEST(Ring, AProducerIndexBeyondTheRingIsCorruptNotWork) {
  TestRing t(8, 16, queues::RingKind::send);
  t.ring.header().producer.store(9);  // 9 WQEs in an 8-slot ring: a broken client
  EXPECT_TRUE(t.ring.corrupt(0));
  EXPECT_EQ(t.ring.ready(0), 0u);
  t.ring.header().producer.store(8);
  EXPECT_FALSE(t.ring.corrupt(0));
  EXPECT_EQ(t.ring.ready(0), 8u);
}

CompletionQueue make_cq(uint32_t slots) {
  CompletionQueue cq;
  auto region = SharedRegion::create("test-cq", queues::ring_bytes(slots, sizeof(queues::Cqe)));
  EXPECT_TRUE(region.ok());
  cq.region = std::move(*region);
  queues::Ring::format(cq.region.base(), queues::RingKind::cq, slots, sizeof(queues::Cqe));
  cq.ring = queues::Ring(cq.region.base(), slots, sizeof(queues::Cqe));
  cq.cqe = slots;
  return cq;
}

queues::Cqe cqe_with(uint64_t wr_id, uint32_t status = 0, uint8_t flags = 0) {
  queues::Cqe e{};
  e.wr_id = wr_id;
  e.status = status;
  e.flags = flags;
  return e;
}

TEST(CompletionQueue, PushedEntriesAreReadBackInOrder) {
  CompletionQueue cq = make_cq(4);
  for (uint64_t i = 0; i < 3; ++i)
    EXPECT_EQ(cq.push(cqe_with(100 + i)), CompletionQueue::Push::written);
  ASSERT_EQ(cq.ring.ready(0), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    queues::Cqe e;
    std::memcpy(&e, cq.ring.slot(i), sizeof(e));
    EXPECT_EQ(e.wr_id, 100 + i);
  }
}

TEST(CompletionQueue, AFullQueueOverflowsInsteadOfOverwriting) {
  CompletionQueue cq = make_cq(2);
  EXPECT_EQ(cq.push(cqe_with(1)), CompletionQueue::Push::written);
  EXPECT_EQ(cq.push(cqe_with(2)), CompletionQueue::Push::written);
  EXPECT_EQ(cq.push(cqe_with(3)), CompletionQueue::Push::overflow);
  EXPECT_EQ(cq.ring.header().overflow.load(), 1u);
  queues::Cqe first;
  std::memcpy(&first, cq.ring.slot(0), sizeof(first));
  EXPECT_EQ(first.wr_id, 1u);
  cq.ring.release(1);  // the application polled one: room again
  EXPECT_EQ(cq.push(cqe_with(4)), CompletionQueue::Push::written);
}

TEST(CompletionQueue, ArmNextNotifiesOnceAndDisarms) {
  CompletionQueue cq = make_cq(8);
  EXPECT_EQ(cq.push(cqe_with(1)), CompletionQueue::Push::written);  // not armed
  cq.ring.header().arm.store(queues::kArmNext);
  EXPECT_EQ(cq.push(cqe_with(2)), CompletionQueue::Push::written_notify);
  EXPECT_EQ(cq.ring.header().arm.load(), queues::kArmNone);
  EXPECT_EQ(cq.push(cqe_with(3)), CompletionQueue::Push::written);
}

TEST(CompletionQueue, ArmSolicitedWaitsForSolicitedOrErrorCompletions) {
  CompletionQueue cq = make_cq(8);
  cq.ring.header().arm.store(queues::kArmSolicited);
  EXPECT_EQ(cq.push(cqe_with(1)), CompletionQueue::Push::written);
  EXPECT_EQ(cq.ring.header().arm.load(), queues::kArmSolicited);
  EXPECT_EQ(cq.push(cqe_with(2, 0, queues::kCqeSolicited)), CompletionQueue::Push::written_notify);
  cq.ring.header().arm.store(queues::kArmSolicited);
  EXPECT_EQ(cq.push(cqe_with(3, /*IBV_WC_REM_ACCESS_ERR*/ 10)),
            CompletionQueue::Push::written_notify);
}

std::vector<uint8_t> send_slot(const queues::SendWqe& w, const void* payload, size_t bytes,
                               uint32_t slot_bytes) {
  std::vector<uint8_t> slot(slot_bytes);
  std::memcpy(slot.data(), &w, sizeof(w));
  if (bytes != 0) std::memcpy(slot.data() + sizeof(w), payload, bytes);
  return slot;
}

TEST(DecodeSendWqe, SgesImmediateAndRemoteAddressCarryOver) {
  const uint32_t slot_bytes = queues::send_slot_bytes(4, 64);
  queues::SendWqe w{};
  w.wr_id = 7;
  w.opcode = 1;      // IBV_WR_RDMA_WRITE_WITH_IMM
  w.send_flags = 2;  // SIGNALED
  w.imm_data = htobe32(0x01020304);
  w.remote_addr = 0x1000;
  w.rkey = 0x55;
  w.num_sge = 2;
  const queues::Sge sges[2] = {{0x2000, 10, 0x11}, {0x3000, 20, 0x12}};
  auto slot = send_slot(w, sges, sizeof(sges), slot_bytes);
  auto d = decode_send_wqe(slot.data(), slot_bytes, 4, 64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->wr.wr_id, 7u);
  EXPECT_EQ(d->wr.opcode, transport::WrOpcode::kRdmaWriteWithImm);
  EXPECT_EQ(d->wr.imm_data, 0x01020304u);  // the value, as the transport puts it on the wire
  EXPECT_EQ(d->wr.remote_addr, 0x1000u);
  EXPECT_EQ(d->wr.rkey.value(), 0x55u);
  ASSERT_EQ(d->wr.sg_list.size(), 2u);
  EXPECT_EQ(d->wr.sg_list[1].addr, 0x3000u);
  EXPECT_EQ(d->wr.sg_list[1].length, 20u);
  EXPECT_EQ(d->wr.sg_list[1].lkey.value(), 0x12u);
  EXPECT_TRUE(d->inline_data.empty());
}

TEST(DecodeSendWqe, InlineDataIsCopiedOut) {
  const uint32_t slot_bytes = queues::send_slot_bytes(1, 64);
  queues::SendWqe w{};
  w.opcode = 2;      // SEND
  w.send_flags = 8;  // INLINE
  w.inline_bytes = 5;
  auto slot = send_slot(w, "hello", 5, slot_bytes);
  auto d = decode_send_wqe(slot.data(), slot_bytes, 1, 64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(std::string(d->inline_data.begin(), d->inline_data.end()), "hello");
  EXPECT_TRUE(d->wr.sg_list.empty());
}

TEST(DecodeSendWqe, MalformedWqesAreRejected) {
  const uint32_t slot_bytes = queues::send_slot_bytes(2, 16);
  queues::SendWqe w{};
  w.opcode = 2;
  w.num_sge = 3;  // beyond the QP's max_send_sge
  auto too_many = send_slot(w, nullptr, 0, slot_bytes);
  EXPECT_EQ(decode_send_wqe(too_many.data(), slot_bytes, 2, 16).error(), EINVAL);
  w.num_sge = 0;
  w.opcode = 42;  // no such ibv_wr_opcode
  auto bad_opcode = send_slot(w, nullptr, 0, slot_bytes);
  EXPECT_EQ(decode_send_wqe(bad_opcode.data(), slot_bytes, 2, 16).error(), EINVAL);
  w.opcode = 2;
  w.send_flags = 8;
  w.inline_bytes = 17;  // beyond max_inline
  auto long_inline = send_slot(w, nullptr, 0, slot_bytes);
  EXPECT_EQ(decode_send_wqe(long_inline.data(), slot_bytes, 2, 16).error(), EINVAL);
  w.send_flags = 1u << 7;  // an ibv_send_flags bit the device does not know
  w.inline_bytes = 0;
  auto bad_flags = send_slot(w, nullptr, 0, slot_bytes);
  EXPECT_EQ(decode_send_wqe(bad_flags.data(), slot_bytes, 2, 16).error(), EINVAL);
}

TEST(DecodeRecvWqe, SgesAndLimits) {
  const uint32_t slot_bytes = queues::recv_slot_bytes(2);
  std::vector<uint8_t> slot(slot_bytes);
  queues::RecvWqe w{9, 2, 0};
  const queues::Sge sges[2] = {{0x10, 1, 3}, {0x20, 2, 4}};
  std::memcpy(slot.data(), &w, sizeof(w));
  std::memcpy(slot.data() + sizeof(w), sges, sizeof(sges));
  auto d = decode_recv_wqe(slot.data(), slot_bytes, 2);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->wr_id, 9u);
  ASSERT_EQ(d->sg_list.size(), 2u);
  EXPECT_EQ(d->sg_list[1].lkey.value(), 4u);
  EXPECT_EQ(decode_recv_wqe(slot.data(), slot_bytes, 1).error(), EINVAL);
}

TEST(EncodeCqe, ImmediateInNetworkOrderAndInvalidatedRkey) {
  transport::Completion c;
  c.wr_id = 5;
  c.opcode = transport::WcOpcode::kRecvRdmaWithImm;
  c.byte_len = 100;
  c.imm_data = 0x0a0b0c0d;
  c.wc_flags = transport::wc_flags::kWithImm;
  c.qp_num = wire::Qpn(0x12);
  c.solicited = true;
  queues::Cqe e = encode_cqe(c);
  EXPECT_EQ(e.wr_id, 5u);
  EXPECT_EQ(e.opcode, 129u);  // IBV_WC_RECV_RDMA_WITH_IMM
  EXPECT_EQ(e.imm_data, htobe32(0x0a0b0c0d));
  EXPECT_EQ(e.qp_num, 0x12u);
  EXPECT_EQ(e.flags, queues::kCqeSolicited);
  c.wc_flags = transport::wc_flags::kWithInv;
  c.invalidated_rkey = wire::Rkey(0x777);
  EXPECT_EQ(encode_cqe(c).imm_data, 0x777u);  // ibv_wc.invalidated_rkey is host order
}

TEST(QpRegionLayout, ReceiveRingStartsOnItsOwnPage) {
  auto l =
      queues::qp_region_layout(16, queues::send_slot_bytes(2, 256), 8, queues::recv_slot_bytes(2));
  EXPECT_EQ(l.recv_offset % queues::kPageBytes, 0u);
  EXPECT_GE(l.recv_offset, sizeof(queues::RingHeader) + 16u * l.send_slot_bytes);
  EXPECT_GE(l.total_bytes, l.recv_offset + sizeof(queues::RingHeader) + 8u * l.recv_slot_bytes);
  // The wr_id shadows follow the rings, each on its own pages, kShadowFactor entries a slot.
  EXPECT_EQ(l.send_shadow_offset % queues::kPageBytes, 0u);
  EXPECT_GE(l.send_shadow_offset,
            l.recv_offset + sizeof(queues::RingHeader) + 8u * l.recv_slot_bytes);
  EXPECT_GE(l.recv_shadow_offset, l.send_shadow_offset + 16u * queues::kShadowFactor * 8u);
  EXPECT_GE(l.total_bytes, l.recv_shadow_offset + 8u * queues::kShadowFactor * 8u);
  auto on_srq = queues::qp_region_layout(16, 96, 0, 0);
  EXPECT_EQ(on_srq.send_shadow_offset, on_srq.recv_offset);  // no receive ring
  EXPECT_EQ(on_srq.total_bytes, on_srq.recv_shadow_offset);  // and no receive shadow
}

// Completion tracking (queues.h): the transport gets ring indices; completions come back as the
// application's wr_ids, and `completed` follows them, never backwards.
TEST(WorkRingTracking, CompletionsGiveBackWrIdsAndAdvanceCompleted) {
  std::vector<std::uint8_t> region(queues::ring_bytes(4, 96) + queues::shadow_bytes(4));
  queues::Ring::format(region.data(), queues::RingKind::send, 4, 96);
  queues::Ring ring(region.data(), 4, 96);
  queues::WrIdShadow shadow(region.data() + queues::ring_bytes(4, 96), 4);
  std::uint8_t slot[96] = {};
  for (std::uint32_t i = 0; i < 6; ++i) {  // wraps the 8-entry shadow's first half
    const std::uint64_t app_wr_id = 0x1000 + i;
    std::memcpy(slot, &app_wr_id, sizeof app_wr_id);
    EXPECT_EQ(take_wqe(shadow, i, slot), i);
  }
  EXPECT_EQ(retire_wqe(ring, shadow, 3), 0x1003u);  // a signaled WQE after three unsignaled
  EXPECT_EQ(ring.header().completed.load(), 4u);
  EXPECT_EQ(retire_wqe(ring, shadow, 2), 0x1002u);  // out of order: completed stays
  EXPECT_EQ(ring.header().completed.load(), 4u);
  EXPECT_EQ(retire_wqe(ring, shadow, 5), 0x1005u);
  EXPECT_EQ(ring.header().completed.load(), 6u);
}

}  // namespace
}  // namespace xroce::device
