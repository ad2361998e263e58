// UDP source port entropy: the worked examples of docs/protocol.md §1.3.
#include "wire/udp_sport.h"

#include <gtest/gtest.h>

namespace xroce::wire {
namespace {

TEST(UdpSport, CreationTimeHashMatchesRxe) {
  EXPECT_EQ(udp_sport_at_create(Qpn(0x11)), 0xDF94);
  EXPECT_EQ(udp_sport_at_create(Qpn(0x12)), 0xF806);
  static_assert(udp_sport_at_create(Qpn(0x11)) == 57236);
}

TEST(UdpSport, FlowLabelFoldIsSymmetric) {
  EXPECT_EQ(rdma_get_udp_sport(0, Qpn(0x11), Qpn(0x12)), 0xC132);
  EXPECT_EQ(rdma_get_udp_sport(0, Qpn(0x12), Qpn(0x11)), 0xC132);
  EXPECT_EQ(flow_label_from_qpns(Qpn(0x1234), Qpn(0x5678)), 0x60002u);
  EXPECT_EQ(rdma_get_udp_sport(0, Qpn(0x1234), Qpn(0x5678)), 0xC01A);
}

TEST(UdpSport, NonZeroFlowLabelIsFoldedDirectly) {
  // 0xFC000 folds its high six bits onto the low ones: 0x3F ^ 0x0000.
  EXPECT_EQ(udp_sport_from_flow_label(0xFC000), 0xC03F);
  EXPECT_EQ(rdma_get_udp_sport(0x00001, Qpn(5), Qpn(6)), 0xC001);
  for (std::uint32_t fl = 0; fl <= kFlowLabelMask; fl += 4099) {
    EXPECT_GE(udp_sport_from_flow_label(fl), kRoceSportMin);
  }
}

}  // namespace
}  // namespace xroce::wire
