// The IB CM state machine, two endpoints joined by a test link that can lose MADs: receive X,
// expect Y, with time as a parameter.
#include <gtest/gtest.h>

#include <functional>

#include "cm/endpoint.h"
#include "cm/ip_service.h"

namespace xroce::cm {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
const std::uint64_t kService = service_id(PortSpace::kTcp, 7174);

Gid gid(std::uint8_t last) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, last};
}

struct Link {
  Endpoint a{EndpointConfig{0xa, 20, 3, 16, 24, 1}};
  Endpoint b{EndpointConfig{0xb, 20, 3, 16, 24, 2}};
  std::uint64_t now = 0;
  // Return false to lose the MAD (from a when a_to_b).
  std::function<bool(bool a_to_b, const CmMad&)> deliver = [](bool, const CmMad&) { return true; };
  std::vector<CmMad> sent_by_a, sent_by_b;
  std::vector<CmEvent> events_a, events_b;

  MadPeer peer_of_a() const { return MadPeer{gid(2), gid(1)}; }  // a's view of b
  MadPeer peer_of_b() const { return MadPeer{gid(1), gid(2)}; }

  void pump() {
    for (bool progress = true; progress;) {
      progress = false;
      while (auto m = a.poll_transmit()) {
        progress = true;
        auto d = decode_cm_mad(m->mad);
        ASSERT_TRUE(d);
        sent_by_a.push_back(*d);
        if (deliver(true, *d)) b.handle_mad(now, peer_of_b(), m->mad);
      }
      while (auto m = b.poll_transmit()) {
        progress = true;
        auto d = decode_cm_mad(m->mad);
        ASSERT_TRUE(d);
        sent_by_b.push_back(*d);
        if (deliver(false, *d)) a.handle_mad(now, peer_of_a(), m->mad);
      }
      while (auto e = a.poll_event())
        events_a.push_back(*e);
      while (auto e = b.poll_event())
        events_b.push_back(*e);
    }
  }
  void advance_to(std::uint64_t t) {
    while (true) {
      std::optional<std::uint64_t> next;
      for (Endpoint* e : {&a, &b}) {
        auto d = e->next_deadline();
        if (d && (!next || *d < *next)) next = d;
      }
      if (!next || *next > t) break;
      now = std::max(now, *next);
      a.handle_timeout(now);
      b.handle_timeout(now);
      pump();
    }
    now = t;
  }
  CommId connect() {
    ReqParams p;
    p.peer = peer_of_a();
    p.service_id = kService;
    p.qpn = 0x11;
    p.starting_psn = 0x100;
    p.primary.local_gid = gid(1);
    p.primary.remote_gid = gid(2);
    p.primary.hop_limit = 64;
    auto id = a.send_req(now, p, 77);
    EXPECT_TRUE(id);
    pump();
    return *id;
  }
};

template <class T>
int count(const std::vector<CmMad>& mads) {
  int n = 0;
  for (const auto& m : mads)
    n += std::holds_alternative<T>(m.message);
  return n;
}

RepParams rep22() {
  RepParams p;
  p.qpn = 0x22;
  return p;
}

struct Established {
  CommId a_id, b_id;
};

// b listens, a connects, b replies with QPN 0x22 and a sends the RTU: both established.
Established establish(Link& l) {
  EXPECT_EQ(l.b.listen(kService, 5), 0);
  const CommId a_id = l.connect();
  const CommId b_id = l.events_b.at(0).id;
  EXPECT_EQ(l.b.send_rep(l.now, b_id, rep22()), 0);
  l.pump();
  EXPECT_EQ(l.a.send_rtu(l.now, a_id, {}), 0);
  l.pump();
  return {a_id, b_id};
}

bool has(const std::vector<CmEvent>& events, CmEventType type) {
  for (const auto& e : events)
    if (e.type == type) return true;
  return false;
}

TEST(CmEndpoint, HandshakeDisconnectAndTimewait) {
  Link l;
  ASSERT_EQ(l.b.listen(kService, 5), 0);
  const CommId a_id = l.connect();
  ASSERT_EQ(l.events_b.size(), 1u);
  const CmEvent req = l.events_b[0];
  EXPECT_EQ(req.type, CmEventType::kReqReceived);
  EXPECT_EQ(req.listen_context, 5u);
  EXPECT_EQ(req.peer.remote_gid, gid(1));
  const auto& req_msg = std::get<ReqMsg>(*req.message);
  EXPECT_EQ(req_msg.local_qpn, 0x11u);
  EXPECT_EQ(req_msg.starting_psn, 0x100u);
  EXPECT_EQ(l.b.state_of(req.id), CmState::kReqRcvd);

  RepParams rep;
  rep.qpn = 0x22;
  rep.starting_psn = 0x100;
  ASSERT_EQ(l.b.send_rep(l.now, req.id, rep), 0);
  l.pump();
  ASSERT_TRUE(has(l.events_a, CmEventType::kRepReceived));
  EXPECT_EQ(l.events_a.back().context, 77u);
  EXPECT_EQ(l.a.remote_qpn_of(a_id), 0x22u);
  ASSERT_EQ(l.a.send_rtu(l.now, a_id, {}), 0);
  l.pump();
  EXPECT_TRUE(has(l.events_b, CmEventType::kRtuReceived));
  EXPECT_EQ(l.a.state_of(a_id), CmState::kEstablished);
  EXPECT_EQ(l.b.state_of(req.id), CmState::kEstablished);

  ASSERT_EQ(l.a.send_dreq(l.now, a_id, {}), 0);
  l.pump();
  ASSERT_TRUE(has(l.events_b, CmEventType::kDreqReceived));
  EXPECT_EQ(l.b.state_of(req.id), CmState::kDreqRcvd);
  ASSERT_EQ(l.b.send_drep(l.now, req.id, {}), 0);
  l.pump();
  EXPECT_TRUE(has(l.events_a, CmEventType::kDrepReceived));
  EXPECT_EQ(l.a.state_of(a_id), CmState::kTimewait);
  EXPECT_EQ(l.b.state_of(req.id), CmState::kTimewait);
  l.advance_to(l.now + 2000 * kMs);
  EXPECT_TRUE(has(l.events_a, CmEventType::kTimewaitExit));
  EXPECT_TRUE(has(l.events_b, CmEventType::kTimewaitExit));
  EXPECT_EQ(l.a.counters().mads_dropped + l.b.counters().mads_dropped, 0u);
  EXPECT_EQ(l.a.counters().mads_retried + l.b.counters().mads_retried, 0u);
}

TEST(CmEndpoint, ReqForNoListenerIsRejectedWithInvalidServiceId) {
  Link l;
  const CommId id = l.connect();
  ASSERT_EQ(count<RejMsg>(l.sent_by_b), 1);
  const auto& rej = std::get<RejMsg>(l.sent_by_b[0].message);
  EXPECT_EQ(rej.reason, static_cast<std::uint16_t>(RejReason::kInvalidServiceId));
  EXPECT_EQ(rej.remote_comm_id, id);
  EXPECT_EQ(rej.message, MessageRef::kReq);
  EXPECT_EQ(l.sent_by_b[0].transaction_id, l.sent_by_a[0].transaction_id);
  ASSERT_TRUE(has(l.events_a, CmEventType::kRejReceived));
  EXPECT_EQ(l.a.state_of(id), CmState::kIdle);
  EXPECT_EQ(l.b.counters().rej_sent[8], 1u);
  EXPECT_EQ(l.a.counters().rej_received[8], 1u);
  EXPECT_EQ(l.b.connection_count(), 0u);
}

TEST(CmEndpoint, LostReqIsRetriedThenGivenUp) {
  Link l;
  ASSERT_EQ(l.b.listen(kService, 5), 0);
  l.deliver = [](bool, const CmMad&) { return false; };
  const CommId id = l.connect();
  // 2 * 2^(16-8) ms + 2^(20-8) ms = 4608 ms per try, 3 retries (the test endpoint's limit).
  l.advance_to(4607 * kMs);
  EXPECT_EQ(l.a.counters().mads_retried, 0u);
  l.advance_to(4608 * kMs);
  EXPECT_EQ(l.a.counters().mads_retried, 1u);
  l.advance_to(4 * 4608 * kMs - 1);
  EXPECT_EQ(l.a.counters().mads_retried, 3u);
  EXPECT_FALSE(has(l.events_a, CmEventType::kReqError));
  l.advance_to(4 * 4608 * kMs);
  EXPECT_TRUE(has(l.events_a, CmEventType::kReqError));
  EXPECT_EQ(l.a.state_of(id), CmState::kIdle);
  EXPECT_EQ(count<ReqMsg>(l.sent_by_a), 4);
  EXPECT_EQ(l.a.counters().timeouts, 1u);
  EXPECT_FALSE(l.a.next_deadline());
}

TEST(CmEndpoint, RetriedReqWhileTheConsumerThinksGetsAnMraThatExtendsTheWait) {
  Link l;
  ASSERT_EQ(l.b.listen(kService, 5), 0);
  const CommId id = l.connect();
  ASSERT_EQ(l.events_b.size(), 1u);
  l.advance_to(4608 * kMs);               // the REQ is retried; b has not answered
  EXPECT_EQ(l.b.connection_count(), 1u);  // the retry is a duplicate, not a new connection
  ASSERT_EQ(count<MraMsg>(l.sent_by_b), 1);
  EXPECT_EQ(std::get<MraMsg>(l.sent_by_b[0].message).service_timeout, 24);
  EXPECT_EQ(l.a.state_of(id), CmState::kMraReqRcvd);
  // The wait is now 2^(24-8) + 2^(16-8) ms, far beyond the next regular retry.
  l.advance_to(l.now + 2 * 4608 * kMs);
  EXPECT_EQ(l.a.counters().mads_retried, 1u);
  EXPECT_EQ(l.events_b.size(), 1u);
}

TEST(CmEndpoint, LostRtuIsRecoveredByTheRetriedRep) {
  Link l;
  ASSERT_EQ(l.b.listen(kService, 5), 0);
  int rtus = 0;
  l.deliver = [&](bool, const CmMad& m) {
    return !(std::holds_alternative<RtuMsg>(m.message) && rtus++ == 0);
  };
  const CommId id = l.connect();
  const CommId b_id = l.events_b[0].id;
  ASSERT_EQ(l.b.send_rep(l.now, b_id, rep22()), 0);
  l.pump();
  ASSERT_EQ(l.a.send_rtu(l.now, id, {}), 0);
  l.pump();
  EXPECT_EQ(l.b.state_of(b_id), CmState::kRepSent);
  l.advance_to(l.now + 4608 * kMs);
  EXPECT_EQ(count<RtuMsg>(l.sent_by_a), 2);
  EXPECT_EQ(l.b.state_of(b_id), CmState::kEstablished);
  EXPECT_EQ(l.a.counters().mads_dropped, 0u);
}

TEST(CmEndpoint, PeerVanishingAfterRepLeavesNothingBehind) {
  Link l;
  ASSERT_EQ(l.b.listen(kService, 5), 0);
  l.connect();
  const CommId b_id = l.events_b[0].id;
  l.deliver = [](bool a_to_b, const CmMad&) { return a_to_b; };  // a is gone
  ASSERT_EQ(l.b.send_rep(l.now, b_id, rep22()), 0);
  l.pump();
  l.advance_to(l.now + 5 * 4608 * kMs);
  ASSERT_TRUE(has(l.events_b, CmEventType::kRepError));
  EXPECT_EQ(l.b.counters().mads_retried, 3u);
  l.b.destroy(l.now, b_id);
  EXPECT_EQ(l.b.connection_count(), 0u);
  EXPECT_FALSE(l.b.next_deadline());
}

TEST(CmEndpoint, DestroyingAnEstablishedConnectionSendsADreq) {
  Link l;
  const auto [id, b_id] = establish(l);
  l.a.destroy(l.now, id);  // the process was killed
  l.pump();
  EXPECT_EQ(count<DreqMsg>(l.sent_by_a), 1);
  EXPECT_EQ(std::get<DreqMsg>(l.sent_by_a.back().message).remote_qpn, 0x22u);
  ASSERT_TRUE(has(l.events_b, CmEventType::kDreqReceived));
  l.b.destroy(l.now, b_id);  // its consumer saw DISCONNECTED and destroyed the id: DREP
  l.pump();
  EXPECT_EQ(count<DrepMsg>(l.sent_by_b), 1);
  EXPECT_EQ(l.a.counters().mads_dropped, 0u);  // the DREP reached a's timewait record
  l.advance_to(l.now + 2000 * kMs);
  EXPECT_EQ(l.a.connection_count(), 0u);
  EXPECT_EQ(l.b.connection_count(), 0u);
  EXPECT_FALSE(has(l.events_a, CmEventType::kTimewaitExit));  // destroyed: no events
}

// rping -C's client disconnects and destroys its id at once; its server waits for DISCONNECTED.
// If that one DREQ is lost, ib_destroy_cm_id's cancelled retries would leave the server waiting
// for ever: here the destroyed connection retries it until the DREP, reporting nothing.
TEST(CmEndpoint, ADreqLostBeforeDestroyIsRetriedUntilTheDrep) {
  for (const bool disconnect_first : {true, false}) {
    SCOPED_TRACE(disconnect_first ? "rdma_disconnect, then destroy" : "destroy only");
    Link l;
    const auto [id, b_id] = establish(l);
    int dreqs_lost = 0;
    l.deliver = [&](bool a_to_b, const CmMad& m) {
      if (a_to_b && std::holds_alternative<DreqMsg>(m.message) && dreqs_lost < 2) {
        ++dreqs_lost;
        return false;
      }
      return true;
    };
    if (disconnect_first) {
      ASSERT_EQ(l.a.send_dreq(l.now, id, {}), 0);
    }
    l.a.destroy(l.now, id);
    l.pump();
    EXPECT_EQ(dreqs_lost, 1);
    EXPECT_FALSE(has(l.events_b, CmEventType::kDreqReceived));
    // Retry by retry (the timeout comes from the peer's REP) until b hears one.
    for (int retry = 0; retry < 5 && !has(l.events_b, CmEventType::kDreqReceived); ++retry) {
      const auto deadline = l.a.next_deadline();
      ASSERT_TRUE(deadline);
      l.advance_to(*deadline);
    }
    EXPECT_EQ(dreqs_lost, 2);
    EXPECT_EQ(count<DreqMsg>(l.sent_by_a), 3);
    ASSERT_TRUE(has(l.events_b, CmEventType::kDreqReceived));
    l.b.destroy(l.now, b_id);  // its consumer saw DISCONNECTED: DREP
    l.pump();
    EXPECT_EQ(count<DrepMsg>(l.sent_by_b), 1);
    EXPECT_EQ(l.a.counters().mads_dropped, 0u);
    l.advance_to(l.now + 30 * 4608 * kMs);
    EXPECT_EQ(count<DreqMsg>(l.sent_by_a), 3);  // the DREP ended the retries
    EXPECT_EQ(l.a.connection_count(), 0u);      // timewait over, erased
    EXPECT_EQ(l.b.connection_count(), 0u);
    EXPECT_TRUE(l.events_a.size() == 1 && l.events_a[0].type == CmEventType::kRepReceived);
  }
}

// A peer that never answers: the destroyed connection gives its DREQ up after its retries and
// is erased after timewait, reporting nothing.
TEST(CmEndpoint, ADestroyedConnectionsDreqRetriesEnd) {
  Link l;
  const auto [id, b_id] = establish(l);
  l.deliver = [](bool a_to_b, const CmMad&) { return !a_to_b; };  // b is unreachable
  l.a.destroy(l.now, id);
  l.pump();
  l.advance_to(l.now + 1000 * 4608 * kMs);
  EXPECT_EQ(count<DreqMsg>(l.sent_by_a), 1 + 3);  // max_cm_retries 3 in this link's config
  EXPECT_EQ(l.a.connection_count(), 0u);
  EXPECT_FALSE(l.a.next_deadline());
  EXPECT_EQ(l.events_a.size(), 1u);  // the REP only
}

TEST(CmEndpoint, DestroyDuringHandshakeRejects) {
  Link l;
  ASSERT_EQ(l.b.listen(kService, 5), 0);
  const CommId id = l.connect();
  l.a.destroy(l.now, id);
  l.pump();
  ASSERT_EQ(count<RejMsg>(l.sent_by_a), 1);
  const auto& rej = std::get<RejMsg>(l.sent_by_a.back().message);
  EXPECT_EQ(rej.reason, static_cast<std::uint16_t>(RejReason::kTimeout));
  EXPECT_EQ(rej.ari_length, 8);
  EXPECT_EQ(rej.ari[7], 0xa);  // our CA GUID
  ASSERT_TRUE(has(l.events_b, CmEventType::kRejReceived));
  EXPECT_EQ(l.b.state_of(l.events_b[0].id), CmState::kIdle);
  EXPECT_EQ(l.a.connection_count(), 0u);
}

TEST(CmEndpoint, MalformedAndUnsolicitedMadsAreCountedAndDropped) {
  Link l;
  std::array<std::uint8_t, 256> junk{};
  l.b.handle_mad(0, l.peer_of_b(), junk);
  l.b.handle_mad(0, l.peer_of_b(), std::span(junk).first(10));
  RepMsg rep;
  rep.remote_comm_id = 0x1234;
  l.b.handle_mad(0, l.peer_of_b(), encode_cm_mad(1, rep));
  DreqMsg dreq;
  dreq.remote_comm_id = 0x1234;
  l.b.handle_mad(0, l.peer_of_b(), encode_cm_mad(2, dreq));
  l.b.handle_mad(0, l.peer_of_b(), encode_cm_mad(3, RtuMsg{}));
  l.b.handle_mad(0, l.peer_of_b(), encode_cm_mad(4, DrepMsg{}));
  l.b.handle_mad(0, l.peer_of_b(), encode_cm_mad(5, MraMsg{}));
  EXPECT_EQ(l.b.counters().mads_received, 7u);
  EXPECT_EQ(l.b.counters().mads_dropped, 7u);
  EXPECT_EQ(l.b.counters().mads_malformed, 2u);
  EXPECT_FALSE(l.b.poll_transmit());
  EXPECT_FALSE(l.b.poll_event());
  EXPECT_EQ(l.b.connection_count(), 0u);
}

TEST(CmEndpoint, SidrResolvesAServiceOrSaysItIsUnsupported) {
  Link l;
  const std::uint64_t udp = service_id(PortSpace::kUdp, 7174);
  ASSERT_EQ(l.b.listen(udp, 9), 0);
  auto id = l.a.send_sidr_req(l.now, SidrReqParams{l.peer_of_a(), udp, {}}, 3);
  ASSERT_TRUE(id);
  l.pump();
  ASSERT_EQ(l.events_b.size(), 1u);
  EXPECT_EQ(l.events_b[0].type, CmEventType::kSidrReqReceived);
  EXPECT_EQ(l.events_b[0].listen_context, 9u);
  ASSERT_EQ(l.b.send_sidr_rep(l.now, l.events_b[0].id,
                              SidrRepParams{SidrStatus::kValid, 0x33, 0x01234567, {}}),
            0);
  l.pump();
  ASSERT_TRUE(has(l.events_a, CmEventType::kSidrRepReceived));
  const auto& rep = std::get<SidrRepMsg>(*l.events_a.back().message);
  EXPECT_EQ(rep.qpn, 0x33u);
  EXPECT_EQ(rep.qkey, 0x01234567u);

  auto none = l.a.send_sidr_req(l.now, SidrReqParams{l.peer_of_a(), udp + 1, {}}, 4);
  ASSERT_TRUE(none);
  l.pump();
  EXPECT_EQ(std::get<SidrRepMsg>(*l.events_a.back().message).status,
            SidrStatus::kServiceIdNotSupported);
}

TEST(CmEndpoint, ConsumerErrorsAreErrnos) {
  Link l;
  EXPECT_EQ(l.b.listen(kService, 1), 0);
  EXPECT_EQ(l.b.listen(kService, 2), EADDRINUSE);
  EXPECT_EQ(l.b.send_rep(0, 1234, RepParams{}), EINVAL);
  EXPECT_EQ(l.b.send_dreq(0, 1234, {}), EINVAL);
  std::array<std::uint8_t, kReqPrivateBytes + 1> big{};
  ReqParams p;
  p.private_data = big;
  EXPECT_EQ(l.a.send_req(0, p, 0).error(), EMSGSIZE);
}

}  // namespace
}  // namespace xroce::cm
