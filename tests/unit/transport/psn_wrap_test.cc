// PSNs are 24-bit and wrap (IBA 9.7.1; docs/protocol.md §3.1): segmentation, ACKs, duplicates and
// NAKs across the wrap.
#include <gtest/gtest.h>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::Opcode;

class PsnWrapTest : public ProtocolTest {
 protected:
  void SetUp() override {
    QpOptions o;
    o.sq_psn = 0xFFFFFF;
    o.rq_psn = 0xFFFFFE;
    make_qp(o);
  }
};

TEST_F(PsnWrapTest, RequesterSegmentsAcrossTheWrapAndAcksCompleteIt) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 600)})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].psn(), 0xFFFFFFu);
  EXPECT_EQ(out[1].psn(), 0u);
  EXPECT_EQ(out[2].psn(), 1u);
  receive(ack(0xFFFFFF));  // partial: nothing completes
  EXPECT_TRUE(completions().empty());
  receive(ack(0, Aeth::nak(0, wire::NakCode::kPsnSequenceError)));
  const auto again = drain_resend();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].psn(), 0u);
  EXPECT_EQ(again[0].opcode(), Opcode::kRcSendMiddle);
  receive(ack(1));
  ASSERT_EQ(completions().size(), 1u);
  receive(ack(0x7FFFFF));  // half the circle away: never sent, ignored
  EXPECT_EQ(qp->counters().ghost_acks, 1u);
}

TEST_F(PsnWrapTest, ResponderExpectsAndReAcksAcrossTheWrap) {
  const std::uint64_t target = local + 8192;
  auto write = [&](std::uint32_t psn) {
    auto h = packet(Opcode::kRcWriteOnly, psn, true);
    h.reth = wire::Reth{target, local_mr.rkey, 4};
    std::array<std::uint8_t, 4> data{1, 2, 3, 4};
    receive(h, data);
  };
  write(0xFFFFFE);
  write(0xFFFFFF);
  write(0);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);  // coalesced
  EXPECT_EQ(out[0].psn(), 0u);
  EXPECT_EQ(qp->expected_psn(), wire::Psn(1));
  write(0xFFFFFF);  // duplicate from before the wrap: re-ACK of the last good PSN
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), 0u);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(3));
  write(3);  // a gap after the wrap
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::nak(3, wire::NakCode::kPsnSequenceError));
  EXPECT_EQ(out[0].psn(), 1u);
}

}  // namespace
}  // namespace xroce::transport::testing
