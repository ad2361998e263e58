// rdma_cm over the IB CM: two hosts' RdmaCm joined by a MAD link, driven with the ucma commands
// as librdmacm issues them (rping's sequence), checking the events, their order and statuses,
// and the QP attributes each side gets.
#include <gtest/gtest.h>

#include "cm/rdma_cm.h"

namespace xroce::cm {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
const wire::IpAddr kIpA = wire::IpAddr::v4(0xc6120001);  // 198.18.0.1
const wire::IpAddr kIpB = wire::IpAddr::v4(0xc6120002);

// Every destination is on-link through device 0; the source is the host's one address.
class OneRoute : public Resolver {
 public:
  explicit OneRoute(wire::IpAddr self) : self_(self) {}
  wire::Result<Route, int> resolve(const wire::IpAddr&, const wire::IpAddr& dst,
                                   std::uint32_t) override {
    if (dst == wire::IpAddr::v4(0xc6130001)) return wire::Err(EHOSTUNREACH);
    return Route{self_, 0, 64};
  }

 private:
  wire::IpAddr self_;
};

struct Hosts {
  OneRoute route_a{kIpA}, route_b{kIpB};
  RdmaCm a{route_a, EndpointConfig{0, 20, 3, 16, 24, 11}};
  RdmaCm b{route_b, EndpointConfig{0, 20, 3, 16, 24, 12}};
  std::uint64_t now = 0;
  bool link_up = true;
  // The Starting PSN of the last REQ and REP that crossed the link.
  std::uint32_t req_starting_psn = 0, rep_starting_psn = 0;
  Hosts() {
    a.add_device(0, CmDeviceInfo{0xa, {kIpA}, 3, 3, 16});
    b.add_device(0, CmDeviceInfo{0xb, {kIpB}, 3, 3, 16});
  }
  void pump() {
    for (bool progress = true; progress;) {
      progress = false;
      while (auto m = a.poll_transmit()) {
        progress = true;
        note(m->second.mad);
        if (link_up)
          b.handle_mad(now, 0, MadPeer{m->second.to.local_gid, m->second.to.remote_gid},
                       m->second.mad);
      }
      while (auto m = b.poll_transmit()) {
        progress = true;
        note(m->second.mad);
        if (link_up)
          a.handle_mad(now, 0, MadPeer{m->second.to.local_gid, m->second.to.remote_gid},
                       m->second.mad);
      }
    }
  }
  void note(std::span<const std::uint8_t> mad) {
    auto decoded = decode_cm_mad(mad);
    if (!decoded) return;
    if (const auto* req = std::get_if<ReqMsg>(&decoded->message))
      req_starting_psn = req->starting_psn;
    if (const auto* rep = std::get_if<RepMsg>(&decoded->message))
      rep_starting_psn = rep->starting_psn;
  }
  void advance(std::uint64_t ns) {
    const std::uint64_t end = now + ns;
    for (;;) {
      std::optional<std::uint64_t> next = a.next_deadline();
      if (auto t = b.next_deadline(); t && (!next || *t < *next)) next = t;
      if (!next || *next > end) break;
      now = std::max(now, *next);
      a.handle_timeout(now);
      b.handle_timeout(now);
      pump();
    }
    now = end;
  }
};

constexpr std::uint64_t kFileA = 100, kFileB = 200;
const SockAddr kAny{wire::IpAddr::v4(0), 0, true};

SockAddr at(wire::IpAddr ip, std::uint16_t port) {
  return SockAddr{ip, port, true};
}

EventRecord expect_event(RdmaCm& cm, std::uint64_t file, RdmaCmEvent type) {
  auto e = cm.get_event(file);
  EXPECT_TRUE(e) << "no event, expected " << to_string(type);
  if (!e) return {};
  EXPECT_EQ(e->event, type) << to_string(e->event) << " instead of " << to_string(type);
  return *e;
}

// Server listening on port 7174 of any address; client resolved and routed to it.
struct Connected {
  Hosts h;
  std::uint32_t listener = 0, client = 0, server = 0;
  void setup_until_request() {
    listener = *h.b.create_id(kFileB, 0xb0, PortSpace::kTcp);
    ASSERT_EQ(h.b.bind(kFileB, listener, at(wire::IpAddr::v4(0), 7174)), 0);
    ASSERT_EQ(h.b.listen(kFileB, listener, 4), 0);
    client = *h.a.create_id(kFileA, 0xa0, PortSpace::kTcp);
    ASSERT_EQ(h.a.resolve_addr(h.now, kFileA, client, std::nullopt, at(kIpB, 7174)), 0);
    EXPECT_EQ(expect_event(h.a, kFileA, RdmaCmEvent::kAddrResolved).uid, 0xa0u);
    auto route = h.a.query_route(kFileA, client);
    ASSERT_TRUE(route);
    EXPECT_EQ(route->node_guid, 0xau);
    EXPECT_EQ(route->src.ip, kIpA);
    EXPECT_NE(route->src.port, 0);  // an ephemeral port was bound
    EXPECT_EQ(route->num_paths, 0u);
    ASSERT_EQ(h.a.resolve_route(h.now, kFileA, client), 0);
    expect_event(h.a, kFileA, RdmaCmEvent::kRouteResolved);
    EXPECT_EQ(h.a.query_route(kFileA, client)->num_paths, 1u);
    ConnParam p;
    p.qp_num = 0x11;
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.private_data = {1, 2, 3};
    ASSERT_EQ(h.a.connect(h.now, kFileA, client, p), 0);
    h.pump();
  }
  void accept_and_establish() {
    const EventRecord req = expect_event(h.b, kFileB, RdmaCmEvent::kConnectRequest);
    EXPECT_EQ(req.uid, 0xb0u);  // the listener's
    server = req.id;
    EXPECT_NE(server, listener);
    EXPECT_EQ(req.conn.qp_num, 0x11u);
    ASSERT_EQ(req.conn.private_data.size(), 56u);
    EXPECT_EQ(req.conn.private_data[0], 1);
    EXPECT_EQ(req.conn.private_data[2], 3);
    EXPECT_EQ(req.conn.responder_resources, 2);  // from the receiver's side
    EXPECT_EQ(req.conn.initiator_depth, 4);
    auto info = h.b.query_route(kFileB, server);
    EXPECT_EQ(info->dst.ip, kIpA);
    EXPECT_EQ(info->src.port, 7174);
    ConnParam p;
    p.qp_num = 0x22;
    p.responder_resources = 2;
    p.initiator_depth = 4;
    ASSERT_EQ(h.b.accept(h.now, kFileB, server, 0xb1, p), 0);
    h.pump();
    const EventRecord rep = expect_event(h.a, kFileA, RdmaCmEvent::kConnectResponse);
    EXPECT_EQ(rep.conn.qp_num, 0x22u);
    EXPECT_EQ(rep.conn.private_data.size(), 196u);
    ASSERT_EQ(h.a.accept(h.now, kFileA, client, 0, std::nullopt), 0);  // librdmacm's RTU
    h.pump();
    EXPECT_EQ(expect_event(h.b, kFileB, RdmaCmEvent::kEstablished).uid, 0xb1u);
  }
};

TEST(RdmaCm, RpingHandshakeGivesMatchingQpAttributes) {
  Connected c;
  c.setup_until_request();
  c.accept_and_establish();
  auto a_rtr = c.h.a.init_qp_attr(kFileA, c.client, 2);
  auto a_rts = c.h.a.init_qp_attr(kFileA, c.client, 3);
  auto b_rtr = c.h.b.init_qp_attr(kFileB, c.server, 2);
  auto b_rts = c.h.b.init_qp_attr(kFileB, c.server, 3);
  ASSERT_TRUE(a_rtr && a_rts && b_rtr && b_rts);
  EXPECT_EQ(a_rtr->dest_qp_num, 0x22u);
  EXPECT_EQ(b_rtr->dest_qp_num, 0x11u);
  EXPECT_EQ(a_rtr->rq_psn, b_rts->sq_psn);  // each expects what the other sends
  EXPECT_EQ(b_rtr->rq_psn, a_rts->sq_psn);
  // As the kernel's CM: each side receives from the Starting PSN of its own message (the
  // client's REQ, the server's REP) and sends from the other's; the two differ.
  EXPECT_EQ(a_rtr->rq_psn, c.h.req_starting_psn);
  EXPECT_EQ(b_rtr->rq_psn, c.h.rep_starting_psn);
  EXPECT_NE(c.h.req_starting_psn, c.h.rep_starting_psn);
  EXPECT_EQ(a_rtr->dgid, kIpB.bytes);
  EXPECT_EQ(b_rtr->dgid, kIpA.bytes);
  EXPECT_EQ(a_rtr->hop_limit, 64);
  EXPECT_EQ(a_rtr->path_mtu, 3u);
  EXPECT_EQ(a_rtr->max_dest_rd_atomic, 4);  // the server's initiator depth (4), within ours
  EXPECT_EQ(b_rtr->max_dest_rd_atomic, 2);
  EXPECT_EQ(a_rts->max_rd_atomic, 2);
  EXPECT_EQ(b_rts->max_rd_atomic, 4);
  EXPECT_EQ(a_rts->timeout, 17);
  auto init = c.h.b.init_qp_attr(kFileB, c.server, 1);
  EXPECT_EQ(init->qp_access_flags, 2u | 4u | 8u);
}

TEST(RdmaCm, DisconnectFromEitherSideReachesBoth) {
  Connected c;
  c.setup_until_request();
  c.accept_and_establish();
  ASSERT_EQ(c.h.a.disconnect(c.h.now, kFileA, c.client), 0);
  c.h.pump();
  expect_event(c.h.b, kFileB, RdmaCmEvent::kDisconnected);
  EXPECT_FALSE(c.h.a.get_event(kFileA));                      // the DREP has not come yet
  ASSERT_EQ(c.h.b.disconnect(c.h.now, kFileB, c.server), 0);  // sends the DREP
  c.h.pump();
  expect_event(c.h.a, kFileA, RdmaCmEvent::kDisconnected);
  c.h.advance(2000 * kMs);
  expect_event(c.h.a, kFileA, RdmaCmEvent::kTimewaitExit);
  expect_event(c.h.b, kFileB, RdmaCmEvent::kTimewaitExit);
  // rdma_destroy_id waits for this many acks: every event it got.
  EXPECT_EQ(*c.h.a.destroy_id(c.h.now, kFileA, c.client), 5u);
  EXPECT_EQ(*c.h.b.destroy_id(c.h.now, kFileB, c.server), 3u);
  EXPECT_EQ(*c.h.b.destroy_id(c.h.now, kFileB, c.listener), 1u);
  EXPECT_TRUE(c.h.a.ids().empty());
  EXPECT_TRUE(c.h.b.ids().empty());
}

TEST(RdmaCm, KilledProcessDisconnectsItsPeers) {
  Connected c;
  c.setup_until_request();
  c.accept_and_establish();
  c.h.a.release_file(c.h.now, kFileA);
  c.h.pump();
  expect_event(c.h.b, kFileB, RdmaCmEvent::kDisconnected);
  EXPECT_TRUE(c.h.a.ids().empty());
}

TEST(RdmaCm, ConnectToNobodyIsRejectedWithTheReason) {
  Hosts h;
  const std::uint32_t id = *h.a.create_id(kFileA, 0xa0, PortSpace::kTcp);
  ASSERT_EQ(h.a.resolve_addr(h.now, kFileA, id, std::nullopt, at(kIpB, 9999)), 0);
  expect_event(h.a, kFileA, RdmaCmEvent::kAddrResolved);
  ASSERT_EQ(h.a.resolve_route(h.now, kFileA, id), 0);
  expect_event(h.a, kFileA, RdmaCmEvent::kRouteResolved);
  ASSERT_EQ(h.a.connect(h.now, kFileA, id, ConnParam{}), 0);
  h.pump();
  const EventRecord rej = expect_event(h.a, kFileA, RdmaCmEvent::kRejected);
  EXPECT_EQ(rej.status, 8);  // invalid service ID
  EXPECT_EQ(rej.conn.private_data.size(), 148u);
}

TEST(RdmaCm, UnreachableAfterRetriesAndAddrErrorForNoRoute) {
  Hosts h;
  h.link_up = false;
  const std::uint32_t id = *h.a.create_id(kFileA, 0xa0, PortSpace::kTcp);
  ASSERT_EQ(h.a.resolve_addr(h.now, kFileA, id, std::nullopt, at(kIpB, 7174)), 0);
  expect_event(h.a, kFileA, RdmaCmEvent::kAddrResolved);
  ASSERT_EQ(h.a.resolve_route(h.now, kFileA, id), 0);
  expect_event(h.a, kFileA, RdmaCmEvent::kRouteResolved);
  ASSERT_EQ(h.a.connect(h.now, kFileA, id, ConnParam{}), 0);
  h.pump();
  h.advance(4 * 4608 * kMs);
  const EventRecord e = expect_event(h.a, kFileA, RdmaCmEvent::kUnreachable);
  EXPECT_EQ(e.status, -ETIMEDOUT);
  EXPECT_EQ(h.a.endpoint(0)->counters().mads_retried, 3u);

  const std::uint32_t other = *h.a.create_id(kFileA, 0xa1, PortSpace::kTcp);
  ASSERT_EQ(
      h.a.resolve_addr(h.now, kFileA, other, std::nullopt, at(wire::IpAddr::v4(0xc6130001), 1)), 0);
  EXPECT_EQ(expect_event(h.a, kFileA, RdmaCmEvent::kAddrError).status, -EHOSTUNREACH);
}

// rdma_resolve_addr with no source toward an IPv6 destination (rping -a <IPv6>): the id binds
// the IPv6 wildcard and takes the route's IPv6 source, as the kernel's cma_bind_addr() does.
// An IPv4 wildcard there was no address of any device: EADDRNOTAVAIL before the address was
// even routed.
TEST(RdmaCm, ResolvingAnIpv6DestinationWithoutASourceTakesTheRoutesIpv6Source) {
  std::array<std::uint8_t, 16> self{0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0xb2};
  std::array<std::uint8_t, 16> peer = self;
  self[15] = 2;
  peer[15] = 1;
  OneRoute route{wire::IpAddr::v6(self)};
  RdmaCm cm{route, EndpointConfig{0, 20, 3, 16, 24, 13}};
  cm.add_device(0, CmDeviceInfo{0xc, {wire::IpAddr::v6(self)}, 3, 3, 16});
  const std::uint32_t id = *cm.create_id(kFileA, 0xa0, PortSpace::kTcp);
  ASSERT_EQ(
      cm.resolve_addr(0, kFileA, id, std::nullopt, SockAddr{wire::IpAddr::v6(peer), 7176, false}),
      0);
  expect_event(cm, kFileA, RdmaCmEvent::kAddrResolved);
  const auto resolved = cm.query_route(kFileA, id);
  ASSERT_TRUE(resolved);
  EXPECT_EQ(resolved->src.ip, wire::IpAddr::v6(self));
  EXPECT_FALSE(resolved->src.v4);
  EXPECT_NE(resolved->src.port, 0);
  EXPECT_EQ(resolved->dst.ip, wire::IpAddr::v6(peer));
  EXPECT_FALSE(resolved->dst.v4);
}

// A link-local destination names its interface (rping -a fe80::1%eth0): the route is looked
// up on that interface, and the link-local source the route gives belongs to it too.
TEST(RdmaCm, ALinkLocalDestinationsInterfaceGoesToTheRouteAndTheSource) {
  std::array<std::uint8_t, 16> self{0xfe, 0x80};
  std::array<std::uint8_t, 16> peer = self;
  self[15] = 2;
  peer[15] = 1;
  struct ScopedRoute : Resolver {
    wire::IpAddr self;
    std::uint32_t asked_scope = 0;
    wire::Result<Route, int> resolve(const wire::IpAddr&, const wire::IpAddr&,
                                     std::uint32_t dst_scope_id) override {
      asked_scope = dst_scope_id;
      return Route{self, 0, 64};
    }
  } route;
  route.self = wire::IpAddr::v6(self);
  RdmaCm cm{route, EndpointConfig{0, 20, 3, 16, 24, 14}};
  cm.add_device(0, CmDeviceInfo{0xd, {wire::IpAddr::v6(self)}, 3, 3, 16});
  const std::uint32_t id = *cm.create_id(kFileA, 0xa0, PortSpace::kTcp);
  ASSERT_EQ(cm.resolve_addr(0, kFileA, id, std::nullopt,
                            SockAddr{wire::IpAddr::v6(peer), 7176, false, 7}),
            0);
  expect_event(cm, kFileA, RdmaCmEvent::kAddrResolved);
  EXPECT_EQ(route.asked_scope, 7u);
  const auto resolved = cm.query_route(kFileA, id);
  ASSERT_TRUE(resolved);
  EXPECT_EQ(resolved->src.ip, wire::IpAddr::v6(self));
  EXPECT_EQ(resolved->src.scope_id, 7u);
  EXPECT_EQ(resolved->dst.scope_id, 7u);
}

TEST(RdmaCm, BacklogBoundsUnretrievedRequests) {
  Hosts h;
  const std::uint32_t listener = *h.b.create_id(kFileB, 0xb0, PortSpace::kTcp);
  ASSERT_EQ(h.b.bind(kFileB, listener, at(kIpB, 7174)), 0);
  ASSERT_EQ(h.b.listen(kFileB, listener, 1), 0);
  std::uint32_t ids[2];
  for (auto& id : ids) {
    id = *h.a.create_id(kFileA, 0xa0, PortSpace::kTcp);
    ASSERT_EQ(h.a.resolve_addr(h.now, kFileA, id, std::nullopt, at(kIpB, 7174)), 0);
    ASSERT_EQ(h.a.resolve_route(h.now, kFileA, id), 0);
    ASSERT_EQ(h.a.connect(h.now, kFileA, id, ConnParam{}), 0);
    h.pump();
  }
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(h.a.get_event(kFileA));  // addr, route x2
  const EventRecord rej = expect_event(h.a, kFileA, RdmaCmEvent::kRejected);
  EXPECT_EQ(rej.id, ids[1]);
  EXPECT_EQ(rej.status, 28);  // consumer defined: the backlog was full
  expect_event(h.b, kFileB, RdmaCmEvent::kConnectRequest);
  EXPECT_FALSE(h.b.get_event(kFileB));
}

TEST(RdmaCm, OneFileCannotNameAnothersIds) {
  Hosts h;
  const std::uint32_t id = *h.a.create_id(kFileA, 0xa0, PortSpace::kTcp);
  EXPECT_EQ(h.a.bind(kFileA + 1, id, kAny), EINVAL);
  EXPECT_EQ(h.a.destroy_id(h.now, kFileA + 1, id).error(), EINVAL);
  EXPECT_EQ(h.a.init_qp_attr(kFileA + 1, id, 1).error(), EINVAL);
  EXPECT_FALSE(h.a.get_event(kFileA + 1));
  EXPECT_EQ(h.a.bind(kFileA, id, at(kIpB, 1)), EADDRNOTAVAIL);  // not our address
  // A loopback address is local but no RoCE port's GID: ENODEV, as rdma_bind_addr_dst.
  EXPECT_EQ(h.a.bind(kFileA, id, at(wire::IpAddr::v4(0x7f000001), 1)), ENODEV);
  const std::uint32_t second = *h.a.create_id(kFileA, 0xa1, PortSpace::kTcp);
  ASSERT_EQ(h.a.bind(kFileA, id, at(kIpA, 5000)), 0);
  EXPECT_EQ(h.a.bind(kFileA, second, at(kIpA, 5000)), EADDRINUSE);
}

TEST(RdmaCm, DestroyedListenerTakesItsUnretrievedRequestsWithIt) {
  Connected c;
  c.setup_until_request();
  EXPECT_TRUE(c.h.b.has_events(kFileB));
  EXPECT_EQ(*c.h.b.destroy_id(c.h.now, kFileB, c.listener), 0u);
  c.h.pump();
  EXPECT_FALSE(c.h.b.has_events(kFileB));
  EXPECT_TRUE(c.h.b.ids().empty());
  const EventRecord rej = expect_event(c.h.a, kFileA, RdmaCmEvent::kRejected);
  EXPECT_EQ(rej.status, 28);
}

// udaddy's sequence: the UDP port space resolves the service with SIDR and hands each side
// the other's QP number and the port space's Q_Key.
TEST(RdmaCm, UdpPortSpaceResolvesTheServiceWithSidr) {
  Hosts h;
  const std::uint32_t listener = *h.b.create_id(kFileB, 0xb0, PortSpace::kUdp);
  ASSERT_EQ(h.b.bind(kFileB, listener, at(kIpB, 7174)), 0);
  ASSERT_EQ(h.b.listen(kFileB, listener, 4), 0);
  const std::uint32_t client = *h.a.create_id(kFileA, 0xa0, PortSpace::kUdp);
  ASSERT_EQ(h.a.resolve_addr(h.now, kFileA, client, std::nullopt, at(kIpB, 7174)), 0);
  expect_event(h.a, kFileA, RdmaCmEvent::kAddrResolved);
  ASSERT_EQ(h.a.resolve_route(h.now, kFileA, client), 0);
  expect_event(h.a, kFileA, RdmaCmEvent::kRouteResolved);
  const auto init = h.a.init_qp_attr(kFileA, client, 1);
  ASSERT_TRUE(init);
  EXPECT_EQ(init->qkey, kUdpQkey);
  ConnParam p;
  p.qp_num = 0x31;
  p.private_data = {7};
  ASSERT_EQ(h.a.connect(h.now, kFileA, client, p), 0);
  h.pump();
  const EventRecord req = expect_event(h.b, kFileB, RdmaCmEvent::kConnectRequest);
  ASSERT_TRUE(req.is_ud);
  ASSERT_EQ(req.ud.private_data.size(), 180u);
  EXPECT_EQ(req.ud.private_data[0], 7);
  ConnParam answer;
  answer.qp_num = 0x42;
  ASSERT_EQ(h.b.accept(h.now, kFileB, req.id, 0xb1, answer), 0);
  h.pump();
  const EventRecord est = expect_event(h.a, kFileA, RdmaCmEvent::kEstablished);
  ASSERT_TRUE(est.is_ud);
  EXPECT_EQ(est.ud.qp_num, 0x42u);
  EXPECT_EQ(est.ud.qkey, kUdpQkey);
  EXPECT_EQ(est.ud.dgid, kIpB.bytes);
  EXPECT_EQ(est.ud.sgid, kIpA.bytes);

  // Nobody on the port: the SIDR_REP says so and the client learns UNREACHABLE.
  const std::uint32_t lost = *h.a.create_id(kFileA, 0xa2, PortSpace::kUdp);
  ASSERT_EQ(h.a.resolve_addr(h.now, kFileA, lost, std::nullopt, at(kIpB, 9)), 0);
  ASSERT_EQ(h.a.resolve_route(h.now, kFileA, lost), 0);
  ASSERT_EQ(h.a.connect(h.now, kFileA, lost, ConnParam{}), 0);
  h.pump();
  expect_event(h.a, kFileA, RdmaCmEvent::kAddrResolved);
  expect_event(h.a, kFileA, RdmaCmEvent::kRouteResolved);
  EXPECT_EQ(expect_event(h.a, kFileA, RdmaCmEvent::kUnreachable).status,
            static_cast<int>(SidrStatus::kServiceIdNotSupported));
}

}  // namespace
}  // namespace xroce::cm
