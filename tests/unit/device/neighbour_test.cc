// The neighbour table (sans-I/O) and its rtnetlink codec: requests out, replies and
// notifications in, answers drained.
#include "device/neighbour.h"

#include <gtest/gtest.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace xroce::device {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr int kIf = 7;
const wire::IpAddr kPeer = wire::IpAddr::v4(0xC6120002);     // 198.18.0.2
const wire::IpAddr kGateway = wire::IpAddr::v4(0xC6120001);  // 198.18.0.1
const wire::MacAddr kMac = {0x02, 0x00, 0x00, 0xaa, 0xbb, 0xcc};

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

// A kernel-style RTM_NEWNEIGH (reply or notification).
std::vector<std::uint8_t> neigh_message(std::uint32_t seq, int ifindex, const wire::IpAddr& a,
                                        std::uint16_t state,
                                        std::optional<wire::MacAddr> mac = std::nullopt) {
  std::vector<std::uint8_t> b(NLMSG_SPACE(sizeof(ndmsg)));
  ndmsg nd{};
  nd.ndm_family = a.is_v4() ? AF_INET : AF_INET6;
  nd.ndm_ifindex = ifindex;
  nd.ndm_state = state;
  std::memcpy(b.data() + NLMSG_HDRLEN, &nd, sizeof nd);
  auto add_attr = [&](std::uint16_t type, const std::uint8_t* p, std::size_t n) {
    rtattr at{static_cast<std::uint16_t>(RTA_LENGTH(n)), type};
    const std::size_t at_off = b.size();
    b.resize(at_off + RTA_SPACE(n), 0);
    std::memcpy(b.data() + at_off, &at, sizeof at);
    std::memcpy(b.data() + at_off + RTA_LENGTH(0), p, n);
  };
  if (a.is_v4()) {
    add_attr(NDA_DST, a.bytes.data() + 12, 4);
  } else {
    add_attr(NDA_DST, a.bytes.data(), 16);
  }
  if (mac) add_attr(NDA_LLADDR, mac->data(), 6);
  nlmsghdr h{};
  h.nlmsg_len = static_cast<std::uint32_t>(b.size());
  h.nlmsg_type = RTM_NEWNEIGH;
  h.nlmsg_seq = seq;
  std::memcpy(b.data(), &h, sizeof h);
  return b;
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

TEST(NeighbourCodec, RouteRequestCarriesDestinationAndOif) {
  const Request r = parse(encode_get_route(42, kIf, kPeer));
  EXPECT_EQ(r.type, RTM_GETROUTE);
  EXPECT_EQ(r.seq, 42u);
  EXPECT_TRUE(r.flags & NLM_F_REQUEST);
  rtmsg rt;
  std::memcpy(&rt, r.bytes.data() + NLMSG_HDRLEN, sizeof rt);
  EXPECT_EQ(rt.rtm_family, AF_INET);
  EXPECT_EQ(rt.rtm_dst_len, 32);
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
  std::array<std::uint8_t, 16> v6{0x20, 0x01, 0x00, 0x02};
  v6[15] = 2;
  const auto addr = wire::IpAddr::v6(v6);
  const NlNeigh n = decode_one_neigh(neigh_message(0, kIf, addr, NUD_REACHABLE, kMac));
  EXPECT_EQ(n.addr, addr);
  ASSERT_TRUE(n.lladdr.has_value());
  EXPECT_EQ(*n.lladdr, kMac);
  EXPECT_EQ(n.nud_state, NUD_REACHABLE);
}

TEST(NeighbourCodec, TruncatedDatagramsYieldNothingAndNeverOverread) {
  const auto full = neigh_message(3, kIf, kPeer, NUD_REACHABLE, kMac);
  for (std::size_t n = 0; n < full.size(); ++n) {
    std::vector<std::uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
    EXPECT_TRUE(decode_netlink(cut).empty()) << n;
  }
}

class NeighbourTableTest : public ::testing::Test {
 protected:
  NeighbourTable table{NeighbourOptions{.resolved_lifetime_ns = 1000 * kMs,
                                        .unreachable_lifetime_ns = 100 * kMs,
                                        .retry_interval_ns = 10 * kMs,
                                        .give_up_ns = 50 * kMs}};

  Request next_request() {
    auto r = table.poll_request();
    EXPECT_TRUE(r.has_value());
    return r ? parse(*r) : Request{};
  }
  void feed(std::uint64_t now, const std::vector<std::uint8_t>& bytes) {
    for (const auto& m : decode_netlink(bytes))
      table.handle_message(now, m);
  }
  // Drives one key to kResolved through route (on-link) and a neighbour reply.
  void resolve_on_link(std::uint64_t now) {
    table.resolve(now, kIf, kPeer);
    const Request route = next_request();
    table.handle_message(now, NlRoute{route.seq, kIf, std::nullopt});
    const Request neigh = next_request();
    feed(now, neigh_message(neigh.seq, kIf, kPeer, NUD_REACHABLE, kMac));
  }
};

TEST_F(NeighbourTableTest, OnLinkMissTriggersResolutionThenNotificationAnswers) {
  const NeighbourAnswer first = table.resolve(0, kIf, kPeer);
  EXPECT_EQ(first.state, NeighbourState::kPending);
  const Request route = next_request();
  EXPECT_EQ(route.type, RTM_GETROUTE);
  EXPECT_FALSE(table.poll_request().has_value());

  table.handle_message(1 * kMs, NlRoute{route.seq, kIf, std::nullopt});
  const Request get = next_request();
  EXPECT_EQ(get.type, RTM_GETNEIGH);
  EXPECT_EQ(asked_neighbour(get), kPeer);  // on-link: the destination itself

  table.handle_message(2 * kMs, NlError{get.seq, ENOENT});
  const Request use = next_request();
  EXPECT_EQ(use.type, RTM_NEWNEIGH);
  EXPECT_FALSE(table.poll_answer().has_value());
  // Asking again while pending sends nothing new.
  EXPECT_EQ(table.resolve(3 * kMs, kIf, kPeer).state, NeighbourState::kPending);
  EXPECT_FALSE(table.poll_request().has_value());

  feed(4 * kMs, neigh_message(0, kIf, kPeer, NUD_INCOMPLETE));
  EXPECT_FALSE(table.poll_answer().has_value());
  feed(5 * kMs, neigh_message(0, kIf, kPeer, NUD_REACHABLE, kMac));
  const auto answer = table.poll_answer();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kResolved);
  EXPECT_EQ(answer->mac, kMac);
  EXPECT_EQ(answer->key.dst, kPeer);

  const NeighbourAnswer cached = table.resolve(6 * kMs, kIf, kPeer);
  EXPECT_EQ(cached.state, NeighbourState::kResolved);
  EXPECT_EQ(cached.mac, kMac);
  EXPECT_FALSE(table.poll_request().has_value());
}

TEST_F(NeighbourTableTest, OffLinkDestinationResolvesTheGateway) {
  table.resolve(0, kIf, kPeer);
  const Request route = next_request();
  table.handle_message(0, NlRoute{route.seq, kIf, kGateway});
  const Request get = next_request();
  EXPECT_EQ(asked_neighbour(get), kGateway);
  feed(1 * kMs, neigh_message(get.seq, kIf, kGateway, NUD_STALE, kMac));
  const auto answer = table.poll_answer();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kResolved);
  EXPECT_EQ(answer->next_hop, kGateway);
  EXPECT_EQ(answer->key.dst, kPeer);
}

TEST_F(NeighbourTableTest, RouteThroughAnotherNetdevIsUnreachable) {
  table.resolve(0, kIf, kPeer);
  table.handle_message(0, NlRoute{next_request().seq, kIf + 1, std::nullopt});
  const auto answer = table.poll_answer();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kUnreachable);
  EXPECT_EQ(table.resolve(1 * kMs, kIf, kPeer).state, NeighbourState::kUnreachable);
  EXPECT_FALSE(table.poll_request().has_value());
  // Remembered only for unreachable_lifetime: then asked again.
  EXPECT_EQ(table.resolve(101 * kMs, kIf, kPeer).state, NeighbourState::kPending);
  EXPECT_EQ(next_request().type, RTM_GETROUTE);
}

TEST_F(NeighbourTableTest, NoRouteIsUnreachable) {
  table.resolve(0, kIf, kPeer);
  table.handle_message(0, NlError{next_request().seq, ENETUNREACH});
  const auto answer = table.poll_answer();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourTableTest, FailedNeighbourAfterTriggerIsUnreachable) {
  table.resolve(0, kIf, kPeer);
  table.handle_message(0, NlRoute{next_request().seq, kIf, std::nullopt});
  table.handle_message(0, NlError{next_request().seq, ENOENT});
  EXPECT_EQ(next_request().type, RTM_NEWNEIGH);
  feed(3 * kMs, neigh_message(0, kIf, kPeer, NUD_FAILED));
  EXPECT_FALSE(table.poll_answer().has_value());  // tried again until give-up
  EXPECT_FALSE(table.poll_request().has_value());
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
  const auto answer = table.poll_answer();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourTableTest, FailedNotificationMakesResolvedEntryUnreachable) {
  resolve_on_link(0);
  ASSERT_TRUE(table.poll_answer().has_value());
  feed(5 * kMs, neigh_message(0, kIf, kPeer, NUD_FAILED));
  const auto answer = table.poll_answer();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kUnreachable);
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
  table.handle_message(11 * kMs, NlRoute{route.seq, kIf, std::nullopt});  // stale reply: ignored
  EXPECT_FALSE(table.poll_request().has_value());
  for (std::uint64_t t = 20; t < 50; t += 10) {
    table.handle_timeout(t * kMs);
    EXPECT_TRUE(table.poll_request().has_value()) << t;
    EXPECT_FALSE(table.poll_answer().has_value()) << t;
  }
  table.handle_timeout(50 * kMs);
  const auto answer = table.poll_answer();
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourTableTest, ExpiredEntryRevalidatesWhileStillAnswering) {
  resolve_on_link(0);
  ASSERT_TRUE(table.poll_answer().has_value());
  const NeighbourAnswer stale = table.resolve(1000 * kMs, kIf, kPeer);
  EXPECT_EQ(stale.state, NeighbourState::kResolved);  // old MAC while the kernel is asked
  EXPECT_EQ(next_request().type, RTM_GETROUTE);
}

TEST_F(NeighbourTableTest, NotificationUpdatesCachedMac) {
  resolve_on_link(0);
  ASSERT_TRUE(table.poll_answer().has_value());
  const wire::MacAddr moved = {0x02, 0, 0, 0, 0, 0x99};
  feed(5 * kMs, neigh_message(0, kIf, kPeer, NUD_REACHABLE, moved));
  EXPECT_EQ(table.resolve(6 * kMs, kIf, kPeer).mac, moved);
  // Another interface's neighbour with the same address changes nothing.
  feed(7 * kMs, neigh_message(0, kIf + 1, kPeer, NUD_REACHABLE, kMac));
  EXPECT_EQ(table.resolve(8 * kMs, kIf, kPeer).mac, moved);
}

TEST_F(NeighbourTableTest, IdleEntriesAreForgotten) {
  resolve_on_link(0);
  EXPECT_EQ(table.size(), 1u);
  table.handle_timeout(2000 * kMs);
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace xroce::device
