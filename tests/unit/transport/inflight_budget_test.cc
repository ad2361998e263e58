// The device-wide InflightBudget: its share arithmetic, and a requester that shares it stops at
// its share, asks for the ACK that lets it go on, resends without asking the budget, and gives
// back what it held when it leaves RTS or is destroyed.
#include "transport/inflight_budget.h"

#include <gtest/gtest.h>

#include <memory>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;

BudgetHolding holds(std::uint32_t psns) {
  return BudgetHolding{psns, false};
}
constexpr BudgetHolding kWaiting{0, true};

TEST(InflightBudget, SharesTheLimitEvenlyAmongTheQpsInDemand) {
  InflightBudget b(256);  // the device's limit; each share below stays above a grant
  EXPECT_EQ(b.share_psns(), 256u);
  b.update({}, holds(4));  // one QP holds 4
  b.update({}, holds(1));  // a second holds 1
  EXPECT_EQ(b.active_qps(), 2u);
  EXPECT_EQ(b.in_flight_psns(), 5u);
  EXPECT_EQ(b.share_psns(), 128u);
  EXPECT_TRUE(b.may_take(127));
  EXPECT_FALSE(b.may_take(128));
  b.update({}, kWaiting);  // a third waits: it counts in the share
  EXPECT_EQ(b.active_qps(), 3u);
  EXPECT_EQ(b.waiting_qps(), 1u);
  EXPECT_EQ(b.share_psns(), 85u);
  b.update(kWaiting, holds(2));
  EXPECT_EQ(b.waiting_qps(), 0u);
  EXPECT_EQ(b.active_qps(), 3u);
  b.update(holds(4), {});
  EXPECT_EQ(b.active_qps(), 2u);
  EXPECT_EQ(b.in_flight_psns(), 3u);
}

// However many QPs want to send, none is given less than a grant: the rest wait.
TEST(InflightBudget, TheShareIsNeverBelowAGrant) {
  InflightBudget b(64);
  for (int i = 0; i < 100; ++i)
    b.update({}, kWaiting);
  EXPECT_EQ(b.share_psns(), InflightBudget::kGrantPsns);
  EXPECT_TRUE(b.may_take(0));
  EXPECT_TRUE(b.may_take(InflightBudget::kGrantPsns - 1));
  EXPECT_FALSE(b.may_take(InflightBudget::kGrantPsns));
  // A small limit is one grant.
  InflightBudget small(4);
  EXPECT_EQ(small.grant_psns(), 4u);
  EXPECT_EQ(small.share_psns(), 4u);
}

// The limit is a bound: a QP holding nothing starts only where a whole grant fits, and while
// QPs wait, one already sending needs that room too.
TEST(InflightBudget, AQpStartsOnlyWhereAWholeGrantFits) {
  InflightBudget b(64);
  b.update({}, holds(64 - InflightBudget::kGrantPsns));
  EXPECT_TRUE(b.may_take(0));
  b.update(holds(64 - InflightBudget::kGrantPsns), holds(64 - InflightBudget::kGrantPsns + 1));
  EXPECT_FALSE(b.may_take(0));
  EXPECT_TRUE(b.may_take(64 - InflightBudget::kGrantPsns + 1));  // nobody waits: it goes on
  b.update({}, kWaiting);
  EXPECT_FALSE(b.may_take(64 - InflightBudget::kGrantPsns + 1));  // now it leaves the room
  // A packet being built counts before the device is told of it.
  InflightBudget c(64);
  c.update({}, holds(63));
  EXPECT_TRUE(c.may_take(63));
  EXPECT_FALSE(c.may_take(63, 1));
}

// A new limit takes effect at the next decision; what QPs hold stays theirs.
TEST(InflightBudget, ANewLimitRulesTheNextDecisions) {
  InflightBudget b(64);
  b.update({}, holds(60));
  EXPECT_FALSE(b.may_take(0));
  b.set_limit_psns(512);
  EXPECT_EQ(b.limit_psns(), 512u);
  EXPECT_EQ(b.in_flight_psns(), 60u);
  EXPECT_TRUE(b.may_take(0));
  EXPECT_EQ(b.share_psns(), 512u);
  b.set_limit_psns(0);  // at least one PSN
  EXPECT_EQ(b.limit_psns(), 1u);
  EXPECT_FALSE(b.may_take(60));
}

class BudgetedRequesterTest : public ProtocolTest {
 protected:
  void make(std::uint32_t limit_psns) {
    budget = std::make_shared<InflightBudget>(limit_psns);
    QpOptions o;
    o.inflight_budget = budget;
    make_qp(o);
  }
  std::shared_ptr<InflightBudget> budget;
};

TEST_F(BudgetedRequesterTest, StopsAtTheLimitAndTheLastPacketAsksForTheAck) {
  make(8);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 20 * kMtu)})), 0);
  auto out = drain();
  ASSERT_EQ(out.size(), 8u);
  for (std::size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i].hdr().bth.ack_req, i == 7) << i;
  EXPECT_EQ(qp->requester_state(0), RequesterState::kWaitBudget);
  EXPECT_EQ(budget->in_flight_psns(), 8u);
  receive(ack(kSqPsn + 7));
  EXPECT_EQ(budget->in_flight_psns(), 0u);
  out = drain();
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 8);
  EXPECT_TRUE(out[7].hdr().bth.ack_req);
}

TEST_F(BudgetedRequesterTest, ShareShrinksAsAnotherQpStartsSending) {
  make(64);
  budget->update({}, holds(3));  // another QP of the device holds 3 PSNs: our share is 64 / 2
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 40 * kMtu)})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 32u);
  for (std::size_t i = 0; i < out.size(); ++i)
    EXPECT_EQ(out[i].hdr().bth.ack_req, i == 31) << i;
  EXPECT_EQ(budget->in_flight_psns(), 35u);
  EXPECT_EQ(budget->waiting_qps(), 1u);  // it wants to send more
  receive(ack(kSqPsn + 31));
  EXPECT_EQ(drain().size(), 8u);
  EXPECT_EQ(budget->waiting_qps(), 0u);  // all of it sent
}

// The share fell below what the QP already holds after it sent packets that asked for no ACK:
// one more packet goes, asking for it, so the QP does not wait for the local ACK timeout.
TEST_F(BudgetedRequesterTest, AShareShrunkUnderTheQpGetsOneMorePacketWithAckReq) {
  make(64);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 10 * kMtu)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 2, {sge(local, 10 * kMtu)})), 0);
  auto buf = std::vector<std::uint8_t>(4096);
  for (int i = 0; i < 3; ++i) {
    const auto t = qp->poll_transmit(0, buf);
    ASSERT_TRUE(t);
    EXPECT_FALSE(t->hdr.bth.ack_req);
  }
  budget->update({}, holds(64));  // another QP took the whole limit
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].hdr().bth.ack_req);
  EXPECT_EQ(qp->requester_state(0), RequesterState::kWaitBudget);
}

// A go-back-N resend covers PSNs the QP already holds: the budget does not hold it back.
TEST_F(BudgetedRequesterTest, RetransmissionsAreNotHeldBack) {
  make(4);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 8 * kMtu)})), 0);
  ASSERT_EQ(drain().size(), 4u);
  receive(ack(kSqPsn, Aeth::nak(0, NakCode::kPsnSequenceError)));
  const auto out = drain_resend();
  ASSERT_EQ(out.size(), 4u);  // PSNs 0..3 again; PSN 4 would be new and over the limit
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].psn(), kSqPsn + i);
    EXPECT_TRUE(out[i].t.retransmission);
  }
  EXPECT_EQ(qp->requester_state(0), RequesterState::kWaitBudget);
  EXPECT_EQ(budget->in_flight_psns(), 4u);
}

TEST_F(BudgetedRequesterTest, ResetAndDestructionGiveTheHoldingBack) {
  make(8);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 4 * kMtu)})), 0);
  ASSERT_EQ(drain().size(), 4u);
  EXPECT_EQ(budget->in_flight_psns(), 4u);
  QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_EQ(qp->modify(a, qp_attr::kState), 0);
  EXPECT_EQ(budget->in_flight_psns(), 0u);
  EXPECT_EQ(budget->active_qps(), 0u);

  make(8);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 4 * kMtu)})), 0);
  ASSERT_EQ(drain().size(), 4u);
  const auto kept = budget;
  qp.reset();
  EXPECT_EQ(kept->in_flight_psns(), 0u);
  EXPECT_EQ(kept->active_qps(), 0u);
}

}  // namespace
}  // namespace xroce::transport::testing
