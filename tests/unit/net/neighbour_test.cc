// The route and neighbour resolver's rules (sans-I/O) and its rtnetlink codec: requests out,
// replies and notifications in, answers drained, time as a parameter.
#include "net/neighbour.h"

#include <gtest/gtest.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace xroce::net {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr int kIf = 7;
constexpr std::uint32_t kPortId = 4242;                      // the shell's socket
const wire::IpAddr kPeer = wire::IpAddr::v4(0xC6120002);     // 198.18.0.2
const wire::IpAddr kGateway = wire::IpAddr::v4(0xC6120001);  // 198.18.0.1
const wire::IpAddr kOther = wire::IpAddr::v4(0xC6120003);    // 198.18.0.3
const wire::IpAddr kSelf = wire::IpAddr::v4(0xC6120009);     // 198.18.0.9
const wire::MacAddr kMac = {0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc};
const wire::MacAddr kMoved = {0x02, 0x00, 0x00, 0x00, 0x00, 0x99};

wire::IpAddr v6(std::uint8_t last, std::uint8_t first = 0x20) {
  std::array<std::uint8_t, 16> b{first, first == 0x20 ? std::uint8_t{0x01} : std::uint8_t{0x80}};
  if (first == 0x20) {
    b[2] = 0x00;
    b[3] = 0x02;
  }
  b[15] = last;
  return wire::IpAddr::v6(b);
}
const wire::IpAddr kPeer6 = v6(2);
const wire::IpAddr kGateway6 = v6(1);
const wire::IpAddr kLinkLocal6 = v6(5, 0xfe);  // fe80::5

struct Request {
  std::uint16_t type;
  std::uint16_t flags;
  std::uint32_t seq;
  std::vector<std::uint8_t> bytes;
};

Request parse(const std::vector<std::uint8_t>& b) {
  nlmsghdr h;
  EXPECT_GE(b.size(), sizeof h);
  std::memcpy(&h, b.data(), sizeof h);
  EXPECT_EQ(h.nlmsg_len, b.size());
  return {h.nlmsg_type, h.nlmsg_flags, h.nlmsg_seq, b};
}

// Builds a kernel-style message: header, fixed body, attributes.
class Message {
 public:
  template <typename Body>
  Message(std::uint16_t type, std::uint32_t seq, std::uint32_t pid, const Body& body) {
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_seq = seq;
    h.nlmsg_pid = pid;
    append(&h, sizeof h);
    append(&body, sizeof body);
  }
  Message& attr(std::uint16_t type, const void* p, std::size_t n) {
    rtattr a{static_cast<std::uint16_t>(RTA_LENGTH(n)), type};
    append(&a, sizeof a);
    append(p, n);
    return *this;
  }
  Message& ip(std::uint16_t type, const wire::IpAddr& a) {
    return a.is_v4() ? attr(type, a.bytes.data() + 12, 4) : attr(type, a.bytes.data(), 16);
  }
  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> b = buf_;
    const auto len = static_cast<std::uint32_t>(b.size());
    std::memcpy(b.data(), &len, sizeof len);
    return b;
  }

 private:
  void append(const void* p, std::size_t n) {
    const auto* c = static_cast<const std::uint8_t*>(p);
    buf_.insert(buf_.end(), c, c + n);
    buf_.resize(NLMSG_ALIGN(buf_.size()), 0);
  }
  std::vector<std::uint8_t> buf_;
};

// A kernel-style RTM_NEWNEIGH (reply or notification).
std::vector<std::uint8_t> neigh_message(std::uint32_t seq, int ifindex, const wire::IpAddr& a,
                                        std::uint16_t state,
                                        std::optional<wire::MacAddr> mac = std::nullopt,
                                        std::uint32_t pid = kPortId) {
  ndmsg nd{};
  nd.ndm_family = a.is_v4() ? AF_INET : AF_INET6;
  nd.ndm_ifindex = ifindex;
  nd.ndm_state = state;
  Message m(RTM_NEWNEIGH, seq, seq == 0 ? 0 : pid, nd);
  m.ip(NDA_DST, a);
  if (mac) m.attr(NDA_LLADDR, mac->data(), 6);
  return m.bytes();
}

// A kernel-style RTM_NEWROUTE / RTM_DELROUTE.
std::vector<std::uint8_t> route_message(std::uint32_t seq, const wire::IpAddr& dst, int oif,
                                        std::optional<wire::IpAddr> gateway = std::nullopt,
                                        std::uint8_t type = RTN_UNICAST,
                                        std::optional<wire::IpAddr> prefsrc = std::nullopt,
                                        std::optional<std::uint32_t> hop_limit = std::nullopt,
                                        std::uint16_t msg_type = RTM_NEWROUTE,
                                        std::uint32_t pid = kPortId) {
  rtmsg rt{};
  rt.rtm_family = dst.is_v4() ? AF_INET : AF_INET6;
  rt.rtm_dst_len = dst.is_v4() ? 32 : 128;
  rt.rtm_type = type;
  Message m(msg_type, seq, pid, rt);
  m.ip(RTA_DST, dst);
  const auto oif32 = static_cast<std::uint32_t>(oif);
  m.attr(RTA_OIF, &oif32, 4);
  if (gateway) m.ip(RTA_GATEWAY, *gateway);
  if (prefsrc) m.ip(RTA_PREFSRC, *prefsrc);
  if (hop_limit) {
    // RTA_METRICS nests one RTAX_HOPLIMIT attribute.
    std::uint8_t nested[RTA_SPACE(4)] = {};
    rtattr inner{static_cast<std::uint16_t>(RTA_LENGTH(4)), RTAX_HOPLIMIT};
    std::memcpy(nested, &inner, sizeof inner);
    std::memcpy(nested + RTA_LENGTH(0), &*hop_limit, 4);
    m.attr(RTA_METRICS, nested, sizeof nested);
  }
  return m.bytes();
}

std::vector<std::uint8_t> addr_message(std::uint32_t seq, int ifindex, const wire::IpAddr& a,
                                       bool deleted = false, std::uint32_t pid = kPortId) {
  ifaddrmsg ifa{};
  ifa.ifa_family = a.is_v4() ? AF_INET : AF_INET6;
  ifa.ifa_prefixlen = a.is_v4() ? 24 : 64;
  ifa.ifa_index = static_cast<std::uint32_t>(ifindex);
  Message m(deleted ? RTM_DELADDR : RTM_NEWADDR, seq, seq == 0 ? 0 : pid, ifa);
  m.ip(IFA_ADDRESS, a);
  if (a.is_v4()) m.ip(IFA_LOCAL, a);
  return m.bytes();
}

std::vector<std::uint8_t> done_message(std::uint32_t seq) {
  const int zero = 0;
  return Message(NLMSG_DONE, seq, kPortId, zero).bytes();
}

NlNeigh decode_one_neigh(const std::vector<std::uint8_t>& b) {
  const auto msgs = decode_netlink(b);
  EXPECT_EQ(msgs.size(), 1u);
  return std::get<NlNeigh>(msgs.at(0));
}

// The neighbour a RTM_GETNEIGH request asks about (decoded as if it were a reply).
wire::IpAddr asked_neighbour(const Request& r) {
  EXPECT_EQ(r.type, RTM_GETNEIGH);
  std::vector<std::uint8_t> b = r.bytes;
  const std::uint16_t type = RTM_NEWNEIGH;
  std::memcpy(b.data() + offsetof(nlmsghdr, nlmsg_type), &type, sizeof type);
  return decode_one_neigh(b).addr;
}

// --- codec ---------------------------------------------------------------------------------

TEST(NeighbourCodec, RouteRequestCarriesDestinationAndOif) {
  const Request r = parse(encode_get_route(42, kIf, kPeer));
  EXPECT_EQ(r.type, RTM_GETROUTE);
  EXPECT_EQ(r.seq, 42u);
  EXPECT_TRUE(r.flags & NLM_F_REQUEST);
  rtmsg rt;
  std::memcpy(&rt, r.bytes.data() + NLMSG_HDRLEN, sizeof rt);
  EXPECT_EQ(rt.rtm_family, AF_INET);
  EXPECT_EQ(rt.rtm_dst_len, 32);
  // Without an interface the request leaves the choice to the routing table: no RTA_OIF.
  EXPECT_EQ(parse(encode_get_route(43, 0, kPeer)).bytes.size() + RTA_SPACE(4), r.bytes.size());
}

TEST(NeighbourCodec, UseRequestDecodesAsNeighbourWithNtfUse) {
  const Request r = parse(encode_use_neigh(9, kIf, kPeer));
  EXPECT_EQ(r.type, RTM_NEWNEIGH);
  EXPECT_TRUE(r.flags & NLM_F_CREATE);
  ndmsg nd;
  std::memcpy(&nd, r.bytes.data() + NLMSG_HDRLEN, sizeof nd);
  EXPECT_EQ(nd.ndm_flags, NTF_USE);
  const NlNeigh n = decode_one_neigh(r.bytes);
  EXPECT_EQ(n.ifindex, kIf);
  EXPECT_EQ(n.addr, kPeer);
  EXPECT_FALSE(n.lladdr.has_value());
}

TEST(NeighbourCodec, DecodesIpv6NeighbourWithMac) {
  const NlNeigh n = decode_one_neigh(neigh_message(0, kIf, kPeer6, NUD_REACHABLE, kMac));
  EXPECT_EQ(n.addr, kPeer6);
  ASSERT_TRUE(n.lladdr.has_value());
  EXPECT_EQ(*n.lladdr, kMac);
  EXPECT_EQ(n.nud_state, NUD_REACHABLE);
}

TEST(NeighbourCodec, DecodesRouteTypeGatewaySourceAndHopLimit) {
  const auto msgs = decode_netlink(route_message(5, kPeer, kIf, kGateway, RTN_UNICAST, kSelf, 9));
  ASSERT_EQ(msgs.size(), 1u);
  const auto& r = std::get<NlRoute>(msgs[0]);
  EXPECT_EQ(r.seq, 5u);
  EXPECT_EQ(r.pid, kPortId);
  EXPECT_EQ(r.type, RTN_UNICAST);
  EXPECT_EQ(r.oif, kIf);
  EXPECT_EQ(r.gateway, kGateway);
  EXPECT_EQ(r.prefsrc, kSelf);
  EXPECT_EQ(r.hop_limit, 9);
  EXPECT_FALSE(r.deleted);
  const auto del = decode_netlink(route_message(0, kPeer6, kIf, std::nullopt, RTN_UNICAST,
                                                std::nullopt, std::nullopt, RTM_DELROUTE, 0));
  ASSERT_EQ(del.size(), 1u);
  EXPECT_TRUE(std::get<NlRoute>(del[0]).deleted);
  EXPECT_FALSE(std::get<NlRoute>(del[0]).hop_limit.has_value());
}

TEST(NeighbourCodec, DecodesAddressesAndTheEndOfADump) {
  auto bytes = addr_message(3, kIf, kSelf);
  const auto done = done_message(3);
  bytes.insert(bytes.end(), done.begin(), done.end());
  const auto msgs = decode_netlink(bytes);
  ASSERT_EQ(msgs.size(), 2u);
  const auto& a = std::get<NlAddr>(msgs[0]);
  EXPECT_EQ(a.addr, kSelf);
  EXPECT_EQ(a.ifindex, kIf);
  EXPECT_FALSE(a.deleted);
  EXPECT_EQ(std::get<NlDone>(msgs[1]).seq, 3u);
  EXPECT_TRUE(is_reply(msgs[0], kPortId));
  EXPECT_FALSE(is_reply(msgs[0], kPortId + 1));
  const Request dump = parse(encode_dump_addresses(11));
  EXPECT_EQ(dump.type, RTM_GETADDR);
  EXPECT_EQ(dump.flags & NLM_F_DUMP, NLM_F_DUMP);
}

TEST(NeighbourCodec, TruncatedDatagramsYieldNothingAndNeverOverread) {
  for (const auto& full : {neigh_message(3, kIf, kPeer, NUD_REACHABLE, kMac),
                           route_message(4, kPeer, kIf, kGateway, RTN_UNICAST, kSelf, 9),
                           addr_message(5, kIf, kSelf)}) {
    for (std::size_t n = 0; n < full.size(); ++n) {
      std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
      EXPECT_TRUE(decode_netlink(cut).empty()) << n;
    }
  }
}

// --- the table -----------------------------------------------------------------------------

class NeighbourTableTest : public ::testing::Test {
 protected:
  NeighbourTableTest() { table.set_port_id(kPortId); }

  NeighbourTable table{NeighbourOptions{.resolved_lifetime_ns = 1000 * kMs,
                                        .confirm_interval_ns = 100 * kMs,
                                        .unreachable_lifetime_ns = 100 * kMs,
                                        .retry_interval_ns = 10 * kMs,
                                        .give_up_ns = 50 * kMs,
                                        .forget_after_ns = 2000 * kMs,
                                        .hop_limit_v4 = 61,
                                        .hop_limit_v6 = 62}};

  Request next_request() {
    auto r = table.poll_request();
    EXPECT_TRUE(r.has_value());
    return r ? parse(*r) : Request{};
  }
  void expect_no_request() {
    const auto r = table.poll_request();
    EXPECT_FALSE(r.has_value()) << "request type " << (r ? parse(*r).type : 0);
  }
  void feed(std::uint64_t now, const std::vector<std::uint8_t>& bytes) {
    for (const auto& m : decode_netlink(bytes))
      table.handle_message(now, m);
  }
  NeighbourAnswer next_answer() {
    auto a = table.poll_answer();
    EXPECT_TRUE(a.has_value());
    return a.value_or(NeighbourAnswer{});
  }
  // Drives (kIf, dst) to kResolved: route (on-link, or through `gateway`), then a neighbour
  // reply in `nud` state. Returns the answer.
  NeighbourAnswer resolve_through(std::uint64_t now, const wire::IpAddr& dst,
                                  std::optional<wire::IpAddr> gateway = std::nullopt,
                                  std::uint16_t nud = NUD_REACHABLE, wire::MacAddr mac = kMac) {
    table.resolve(now, kIf, dst);
    const Request route = next_request();
    EXPECT_EQ(route.type, RTM_GETROUTE);
    feed(now, route_message(route.seq, dst, kIf, gateway));
    const Request neigh = next_request();
    EXPECT_EQ(asked_neighbour(neigh), gateway.value_or(dst));
    feed(now, neigh_message(neigh.seq, kIf, gateway.value_or(dst), nud, mac));
    return next_answer();
  }
};

TEST_F(NeighbourTableTest, OnLinkMissTriggersResolutionThenNotificationAnswers) {
  const NeighbourAnswer first = table.resolve(0, kIf, kPeer);
  EXPECT_EQ(first.state, NeighbourState::kPending);
  const Request route = next_request();
  EXPECT_EQ(route.type, RTM_GETROUTE);
  expect_no_request();

  feed(1 * kMs, route_message(route.seq, kPeer, kIf));
  const Request get = next_request();
  EXPECT_EQ(get.type, RTM_GETNEIGH);
  EXPECT_EQ(asked_neighbour(get), kPeer);  // on-link: the destination itself

  table.handle_message(2 * kMs, NlError{get.seq, kPortId, ENOENT});
  const Request use = next_request();
  EXPECT_EQ(use.type, RTM_NEWNEIGH);
  EXPECT_FALSE(table.poll_answer().has_value());
  // Asking again while pending sends nothing new.
  EXPECT_EQ(table.resolve(3 * kMs, kIf, kPeer).state, NeighbourState::kPending);
  expect_no_request();

  feed(4 * kMs, neigh_message(0, kIf, kPeer, NUD_INCOMPLETE));
  EXPECT_FALSE(table.poll_answer().has_value());
  feed(5 * kMs, neigh_message(0, kIf, kPeer, NUD_REACHABLE, kMac));
  const NeighbourAnswer answer = next_answer();
  EXPECT_EQ(answer.state, NeighbourState::kResolved);
  EXPECT_EQ(answer.mac, kMac);
  EXPECT_EQ(answer.key.dst, kPeer);
  EXPECT_FALSE(answer.via_gateway);
  EXPECT_EQ(answer.next_hop, kPeer);
  EXPECT_EQ(answer.ifindex, kIf);
  EXPECT_EQ(answer.hop_limit, 61);  // no RTAX_HOPLIMIT: the namespace's default TTL
  EXPECT_FALSE(answer.mac_changed);

  const NeighbourAnswer cached = table.resolve(6 * kMs, kIf, kPeer);
  EXPECT_EQ(cached.state, NeighbourState::kResolved);
  EXPECT_EQ(cached.mac, kMac);
  expect_no_request();
}

TEST_F(NeighbourTableTest, GatewayRouteGivesNextHopSourceAndItsHopLimit) {
  table.resolve(0, kIf, kPeer);
  feed(0, route_message(next_request().seq, kPeer, kIf, kGateway, RTN_UNICAST, kSelf, 9));
  const Request get = next_request();
  EXPECT_EQ(asked_neighbour(get), kGateway);
  feed(1 * kMs, neigh_message(get.seq, kIf, kGateway, NUD_STALE, kMac));
  const NeighbourAnswer answer = next_answer();
  EXPECT_EQ(answer.state, NeighbourState::kResolved);
  EXPECT_TRUE(answer.via_gateway);
  EXPECT_EQ(answer.next_hop, kGateway);
  EXPECT_EQ(answer.key.dst, kPeer);
  EXPECT_EQ(answer.source, kSelf);
  EXPECT_EQ(answer.hop_limit, 9);
  EXPECT_EQ(answer.mac, kMac);
}

TEST_F(NeighbourTableTest, Ipv6ThroughAGatewayWithTheIpv6DefaultHopLimit) {
  const NeighbourAnswer answer = resolve_through(0, kPeer6, kGateway6);
  EXPECT_EQ(answer.state, NeighbourState::kResolved);
  EXPECT_EQ(answer.next_hop, kGateway6);
  EXPECT_EQ(answer.hop_limit, 62);
  EXPECT_EQ(answer.mac, kMac);
}

TEST_F(NeighbourTableTest, WithoutAnInterfaceTheRouteChoosesIt) {
  table.resolve(0, 0, kPeer);
  const Request route = next_request();
  feed(0, route_message(route.seq, kPeer, kIf + 3, kGateway));
  const Request get = next_request();
  ndmsg nd;
  std::memcpy(&nd, get.bytes.data() + NLMSG_HDRLEN, sizeof nd);
  EXPECT_EQ(nd.ndm_ifindex, kIf + 3);  // the neighbour is asked on the route's interface
  feed(0, neigh_message(get.seq, kIf + 3, kGateway, NUD_REACHABLE, kMac));
  const NeighbourAnswer answer = next_answer();
  EXPECT_EQ(answer.state, NeighbourState::kResolved);
  EXPECT_EQ(answer.ifindex, kIf + 3);
}

TEST_F(NeighbourTableTest, LocalAddressesAnswerLocalWithoutAnyRequest) {
  table.load_addresses();
  const Request dump = next_request();
  EXPECT_EQ(dump.type, RTM_GETADDR);
  // Until the dump is answered a local address is found through its RTN_LOCAL route.
  EXPECT_EQ(table.resolve(0, kIf, kSelf).state, NeighbourState::kPending);
  feed(0, route_message(next_request().seq, kSelf, 1, std::nullopt, RTN_LOCAL));
  EXPECT_EQ(next_answer().state, NeighbourState::kLocal);
  expect_no_request();  // never the neighbour table

  feed(1 * kMs, addr_message(dump.seq, kIf + 1, kSelf));
  feed(1 * kMs, addr_message(dump.seq, kIf, kPeer6));
  feed(1 * kMs, done_message(dump.seq));
  for (const auto& addr : {kSelf, kPeer6}) {
    const NeighbourAnswer a = table.resolve(2 * kMs, kIf, addr);
    EXPECT_EQ(a.state, NeighbourState::kLocal);
    EXPECT_EQ(a.next_hop, addr);
  }
  // An address of another interface is local too, and says which interface holds it.
  EXPECT_EQ(table.resolve(2 * kMs, kIf, kSelf).ifindex, kIf + 1);
  expect_no_request();
  EXPECT_TRUE(table.is_local(0, kPeer6));
  EXPECT_FALSE(table.is_local(0, kPeer));

  // Address notifications keep the list current.
  table.handle_message(3 * kMs, NlAddr{0, 0, false, kIf, kPeer});
  EXPECT_EQ(table.resolve(3 * kMs, kIf, kPeer).state, NeighbourState::kLocal);
  table.handle_message(4 * kMs, NlAddr{0, 0, true, kIf, kPeer6});
  EXPECT_EQ(table.resolve(4 * kMs, kIf, kPeer6).state, NeighbourState::kPending);
  EXPECT_EQ(next_request().type, RTM_GETROUTE);
}

TEST_F(NeighbourTableTest, LinkLocalIpv6IsLocalOnlyOnItsOwnInterface) {
  table.handle_message(0, NlAddr{0, 0, false, kIf, kLinkLocal6});
  EXPECT_EQ(table.resolve(0, kIf, kLinkLocal6).state, NeighbourState::kLocal);
  EXPECT_EQ(table.resolve(0, 0, kLinkLocal6).state, NeighbourState::kLocal);
  EXPECT_EQ(table.resolve(0, kIf + 1, kLinkLocal6).state, NeighbourState::kPending);
}

TEST_F(NeighbourTableTest, RouteThroughAnotherNetdevIsUnreachable) {
  table.resolve(0, kIf, kPeer);
  feed(0, route_message(next_request().seq, kPeer, kIf + 1));
  EXPECT_EQ(next_answer().state, NeighbourState::kUnreachable);
  EXPECT_EQ(table.resolve(1 * kMs, kIf, kPeer).state, NeighbourState::kUnreachable);
  expect_no_request();
  // Remembered only for unreachable_lifetime: then asked again.
  EXPECT_EQ(table.resolve(101 * kMs, kIf, kPeer).state, NeighbourState::kPending);
  EXPECT_EQ(next_request().type, RTM_GETROUTE);
}

TEST_F(NeighbourTableTest, NoRouteOrANonUnicastRouteIsUnreachable) {
  table.resolve(0, kIf, kPeer);
  table.handle_message(0, NlError{next_request().seq, kPortId, ENETUNREACH});
  EXPECT_EQ(next_answer().state, NeighbourState::kUnreachable);
  table.resolve(0, kIf, kPeer6);
  feed(0, route_message(next_request().seq, kPeer6, kIf, std::nullopt, RTN_BLACKHOLE));
  EXPECT_EQ(next_answer().state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourTableTest, ANotificationIsNotTakenForAReply) {
  table.resolve(0, kIf, kPeer);
  const Request route = next_request();
  // Someone else's route change that happens to carry our sequence number.
  feed(0, route_message(route.seq, kPeer, kIf + 1, std::nullopt, RTN_UNICAST, std::nullopt,
                        std::nullopt, RTM_NEWROUTE, kPortId + 1));
  EXPECT_FALSE(table.poll_answer().has_value());
  feed(0, route_message(route.seq, kPeer, kIf));
  EXPECT_EQ(next_request().type, RTM_GETNEIGH);
}

// Rule 4 (neighbour.h): NTF_USE gives the kernel no packet to source an IPv6 solicitation
// from, so the table asks the shell for one of its own, right after the NTF_USE, from the
// route's preferred source; then again once per solicit interval while no answer comes, and
// not after the answer. An IPv4 next hop never gets one: ARP needs no source address of ours.
TEST_F(NeighbourTableTest, AnIpv6TriggerAlsoSolicitsFromTheRoutesSourceUntilAnswered) {
  NeighbourTable t6{NeighbourOptions{
      .retry_interval_ns = 10 * kMs, .give_up_ns = 3000 * kMs, .solicit_interval_ns = 1000 * kMs}};
  t6.set_port_id(kPortId);
  const wire::IpAddr self6 = v6(9);
  auto next = [&] {
    auto r = t6.poll_request();
    EXPECT_TRUE(r.has_value());
    return r ? parse(*r) : Request{};
  };
  auto feed6 = [&](std::uint64_t now, const std::vector<std::uint8_t>& bytes) {
    for (const auto& m : decode_netlink(bytes))
      t6.handle_message(now, m);
  };
  t6.resolve(0, kIf, kPeer6);
  feed6(0, route_message(next().seq, kPeer6, kIf, std::nullopt, RTN_UNICAST, self6));
  EXPECT_FALSE(t6.poll_solicitation().has_value()) << "the kernel's entry not asked yet";
  t6.handle_message(1 * kMs, NlError{next().seq, kPortId, ENOENT});
  EXPECT_EQ(next().type, RTM_NEWNEIGH);
  const auto first = t6.poll_solicitation();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->ifindex, kIf);
  EXPECT_EQ(first->target, kPeer6);
  EXPECT_EQ(first->source, self6);
  EXPECT_FALSE(t6.poll_solicitation().has_value());
  // Retries of the neighbour request within the interval solicit nothing more.
  for (std::uint64_t t = 11; t < 1001; t += 10) {
    t6.handle_timeout(t * kMs);
    while (const auto r = t6.poll_request())
      feed6(t * kMs, neigh_message(parse(*r).seq, kIf, kPeer6, NUD_INCOMPLETE));
    EXPECT_FALSE(t6.poll_solicitation().has_value()) << t;
  }
  t6.handle_timeout(1011 * kMs);
  const auto again = t6.poll_solicitation();
  ASSERT_TRUE(again.has_value()) << "no answer within the interval: solicited again";
  EXPECT_EQ(again->target, kPeer6);
  feed6(1012 * kMs, neigh_message(0, kIf, kPeer6, NUD_REACHABLE, kMac));
  EXPECT_EQ(t6.poll_answer().value_or(NeighbourAnswer{}).state, NeighbourState::kResolved);
  for (std::uint64_t t = 1020; t < 2500; t += 100) {
    t6.handle_timeout(t * kMs);
    while (t6.poll_request()) {
    }
    EXPECT_FALSE(t6.poll_solicitation().has_value()) << t;
  }

  // IPv4: the NTF_USE alone.
  table.resolve(0, kIf, kPeer);
  feed(0, route_message(next_request().seq, kPeer, kIf));
  table.handle_message(0, NlError{next_request().seq, kPortId, ENOENT});
  EXPECT_EQ(next_request().type, RTM_NEWNEIGH);
  EXPECT_FALSE(table.poll_solicitation().has_value());
}

TEST_F(NeighbourTableTest, SilentNeighbourIsRetriedThenUnreachableAfterGiveUp) {
  table.resolve(0, kIf, kPeer);
  feed(0, route_message(next_request().seq, kPeer, kIf));
  table.handle_message(0, NlError{next_request().seq, kPortId, ENOENT});
  EXPECT_EQ(next_request().type, RTM_NEWNEIGH);
  feed(3 * kMs, neigh_message(0, kIf, kPeer, NUD_FAILED));
  EXPECT_FALSE(table.poll_answer().has_value());  // tried again until give-up
  expect_no_request();
  table.handle_timeout(10 * kMs);
  const Request get = next_request();
  EXPECT_EQ(get.type, RTM_GETNEIGH);
  feed(11 * kMs, neigh_message(get.seq, kIf, kPeer, NUD_FAILED));
  EXPECT_EQ(next_request().type, RTM_NEWNEIGH);  // triggered again
  for (std::uint64_t t = 20; t < 50; t += 10) {
    table.handle_timeout(t * kMs);
    while (table.poll_request()) {
    }
    EXPECT_FALSE(table.poll_answer().has_value()) << t;
  }
  table.handle_timeout(50 * kMs);
  EXPECT_EQ(next_answer().state, NeighbourState::kUnreachable);
  EXPECT_EQ(table.resolve(51 * kMs, kIf, kPeer).state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourTableTest, LostRepliesAreRetriedThenGivenUp) {
  table.resolve(0, kIf, kPeer);
  const Request route = next_request();
  ASSERT_TRUE(table.next_deadline().has_value());
  EXPECT_EQ(*table.next_deadline(), 10 * kMs);
  table.handle_timeout(10 * kMs);
  const Request again = next_request();
  EXPECT_EQ(again.type, RTM_GETROUTE);
  EXPECT_NE(again.seq, route.seq);
  feed(11 * kMs, route_message(route.seq, kPeer, kIf));  // stale reply: ignored
  expect_no_request();
  for (std::uint64_t t = 20; t < 50; t += 10) {
    table.handle_timeout(t * kMs);
    EXPECT_TRUE(table.poll_request().has_value()) << t;
    EXPECT_FALSE(table.poll_answer().has_value()) << t;
  }
  table.handle_timeout(50 * kMs);
  EXPECT_EQ(next_answer().state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourTableTest, ExpiredEntryRevalidatesWhileStillAnswering) {
  resolve_through(0, kPeer);
  const NeighbourAnswer stale = table.resolve(1000 * kMs, kIf, kPeer);
  EXPECT_EQ(stale.state, NeighbourState::kResolved);  // old MAC while the kernel is asked
  EXPECT_EQ(next_request().type, RTM_GETROUTE);
}

TEST_F(NeighbourTableTest, NotificationChangesTheMacAtOnce) {
  resolve_through(0, kPeer);
  feed(5 * kMs, neigh_message(0, kIf, kPeer, NUD_STALE, kMoved));  // a gratuitous ARP
  const NeighbourAnswer changed = next_answer();
  EXPECT_EQ(changed.state, NeighbourState::kResolved);
  EXPECT_EQ(changed.mac, kMoved);
  EXPECT_TRUE(changed.mac_changed);
  EXPECT_EQ(table.resolve(6 * kMs, kIf, kPeer).mac, kMoved);
  // The same MAC again is no news; another interface's neighbour with the address changes
  // nothing.
  feed(7 * kMs, neigh_message(0, kIf, kPeer, NUD_REACHABLE, kMoved));
  feed(7 * kMs, neigh_message(0, kIf + 1, kPeer, NUD_REACHABLE, kMac));
  EXPECT_FALSE(table.poll_answer().has_value());
  EXPECT_EQ(table.resolve(8 * kMs, kIf, kPeer).mac, kMoved);
}

TEST_F(NeighbourTableTest, GatewayMacChangeReachesEveryDestinationBehindIt) {
  resolve_through(0, kPeer, kGateway);
  table.resolve(0, kIf, kOther);
  feed(0, route_message(next_request().seq, kOther, kIf, kGateway));
  feed(0, neigh_message(next_request().seq, kIf, kGateway, NUD_REACHABLE, kMac));
  ASSERT_EQ(next_answer().key.dst, kOther);
  feed(1 * kMs, neigh_message(0, kIf, kGateway, NUD_STALE, kMoved));
  int changed = 0;
  while (auto a = table.poll_answer()) {
    EXPECT_TRUE(a->mac_changed);
    EXPECT_EQ(a->mac, kMoved);
    ++changed;
  }
  EXPECT_EQ(changed, 2);
}

TEST_F(NeighbourTableTest, FailedNextHopIsResolvedAgainAndItsNewMacFollowed) {
  resolve_through(0, kPeer, kGateway);
  // The kernel's probes of the old MAC went unanswered (the gateway's MAC changed).
  feed(5 * kMs, neigh_message(0, kIf, kGateway, NUD_FAILED, kMac));
  const Request use = next_request();
  EXPECT_EQ(use.type, RTM_NEWNEIGH);  // NTF_USE: a broadcast the new MAC answers
  EXPECT_EQ(table.resolve(6 * kMs, kIf, kPeer).state, NeighbourState::kPending);
  feed(8 * kMs, neigh_message(0, kIf, kGateway, NUD_REACHABLE, kMoved));
  const NeighbourAnswer answer = next_answer();
  EXPECT_EQ(answer.state, NeighbourState::kResolved);
  EXPECT_EQ(answer.mac, kMoved);
  EXPECT_TRUE(answer.mac_changed);
}

TEST_F(NeighbourTableTest, FailedNextHopThatNeverAnswersBecomesUnreachable) {
  resolve_through(0, kPeer);
  feed(5 * kMs, neigh_message(0, kIf, kPeer, NUD_FAILED));
  for (std::uint64_t t = 15; t < 55; t += 10) {
    table.handle_timeout(t * kMs);
    while (const auto r = table.poll_request()) {
      const Request req = parse(*r);
      if (req.type == RTM_GETNEIGH) feed(t * kMs, neigh_message(req.seq, kIf, kPeer, NUD_FAILED));
    }
    EXPECT_FALSE(table.poll_answer().has_value()) << t;
  }
  table.handle_timeout(55 * kMs);
  EXPECT_EQ(next_answer().state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourTableTest, RouteChangeRevalidatesAndANewGatewayIsResolved) {
  resolve_through(0, kPeer, kGateway);
  // `ip route replace ... via kOther`: a notification (another process's port id).
  feed(5 * kMs, route_message(77, kPeer, kIf, kOther, RTN_UNICAST, std::nullopt, std::nullopt,
                              RTM_NEWROUTE, 999));
  const Request route = next_request();
  EXPECT_EQ(route.type, RTM_GETROUTE);
  // The old answer stands while the route is asked again.
  EXPECT_EQ(table.resolve(6 * kMs, kIf, kPeer).state, NeighbourState::kResolved);
  feed(7 * kMs, route_message(route.seq, kPeer, kIf, kOther));
  // A new next hop: its MAC must be resolved before frames go again.
  EXPECT_EQ(table.resolve(8 * kMs, kIf, kPeer).state, NeighbourState::kPending);
  const Request get = next_request();
  EXPECT_EQ(asked_neighbour(get), kOther);
  feed(9 * kMs, neigh_message(get.seq, kIf, kOther, NUD_REACHABLE, kMoved));
  const NeighbourAnswer answer = next_answer();
  EXPECT_EQ(answer.next_hop, kOther);
  EXPECT_EQ(answer.mac, kMoved);
  EXPECT_TRUE(answer.mac_changed);
  // A burst of notifications asks each route once.
  feed(10 * kMs, route_message(0, kPeer6, 3, std::nullopt, RTN_UNICAST, std::nullopt, std::nullopt,
                               RTM_DELROUTE, 0));
  feed(10 * kMs, route_message(0, kPeer6, 3, std::nullopt, RTN_UNICAST, std::nullopt, std::nullopt,
                               RTM_NEWROUTE, 0));
  EXPECT_EQ(next_request().type, RTM_GETROUTE);
  expect_no_request();
}

TEST_F(NeighbourTableTest, LostNotificationsRevalidateEverythingAndReloadAddresses) {
  resolve_through(0, kPeer);
  table.handle_lost_notifications(5 * kMs);
  EXPECT_EQ(next_request().type, RTM_GETROUTE);
  EXPECT_EQ(next_request().type, RTM_GETADDR);
  EXPECT_EQ(table.resolve(6 * kMs, kIf, kPeer).state, NeighbourState::kResolved);
}

TEST_F(NeighbourTableTest, EntriesInUseAreUsedInTheKernelTableOncePerInterval) {
  resolve_through(0, kPeer);
  // Not used since it resolved: nothing to confirm.
  table.handle_timeout(150 * kMs);
  expect_no_request();
  table.resolve(160 * kMs, kIf, kPeer);
  ASSERT_TRUE(table.next_deadline().has_value());
  EXPECT_LE(*table.next_deadline(), 160 * kMs);
  table.handle_timeout(160 * kMs);
  const Request use = next_request();
  EXPECT_EQ(use.type, RTM_NEWNEIGH);
  ndmsg nd;
  std::memcpy(&nd, use.bytes.data() + NLMSG_HDRLEN, sizeof nd);
  EXPECT_EQ(nd.ndm_flags, NTF_USE);
  // Used again at once: the next one waits a whole interval.
  table.resolve(170 * kMs, kIf, kPeer);
  table.handle_timeout(200 * kMs);
  expect_no_request();
  table.handle_timeout(260 * kMs);
  EXPECT_EQ(next_request().type, RTM_NEWNEIGH);
  // Its acknowledgement or an error (no CAP_NET_ADMIN) changes nothing.
  table.handle_message(261 * kMs, NlError{use.seq, kPortId, EPERM});
  EXPECT_EQ(table.resolve(262 * kMs, kIf, kPeer).state, NeighbourState::kResolved);
}

TEST_F(NeighbourTableTest, AStaticNeighbourIsNeverUsed) {
  // NTF_USE would turn a PERMANENT entry into a dynamic one that must be resolved.
  resolve_through(0, kPeer, std::nullopt, NUD_PERMANENT);
  for (std::uint64_t t = 100; t <= 500; t += 100) {
    table.resolve(t * kMs, kIf, kPeer);
    table.handle_timeout(t * kMs + 50 * kMs);
    expect_no_request();
  }
  ASSERT_TRUE(table.next_deadline().has_value());
  EXPECT_GT(*table.next_deadline(), 550 * kMs);  // and no deadline left in the past
}

TEST_F(NeighbourTableTest, IdleEntriesAreForgotten) {
  resolve_through(0, kPeer);
  EXPECT_EQ(table.size(), 1u);
  table.handle_timeout(1999 * kMs);
  EXPECT_EQ(table.size(), 1u);
  table.handle_timeout(2000 * kMs);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_FALSE(table.next_deadline().has_value());
}

}  // namespace
}  // namespace xroce::net
