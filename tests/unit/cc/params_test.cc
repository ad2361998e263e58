// Parameter table, profiles and set-by-name (engine/cc/params.h).
#include "cc/params.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace xroce::cc {
namespace {

TEST(DcqcnParams, ConnectxProfileHasFirmwareDefaults) {
  // docs/protocol.md §5.5, the `mlxconfig q` dump: RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, ...
  const DcqcnParams p = DcqcnParams::connectx();
  EXPECT_EQ(p.rpg_time_reset, 300u);
  EXPECT_EQ(p.rpg_byte_reset, 32767u);
  EXPECT_EQ(p.rpg_threshold, 1u);
  EXPECT_EQ(p.rpg_max_rate, 0u);
  EXPECT_EQ(p.rpg_ai_rate, 5u);
  EXPECT_EQ(p.rpg_hai_rate, 50u);
  EXPECT_EQ(p.rpg_gd, 11u);
  EXPECT_EQ(p.rpg_min_dec_fac, 50u);
  EXPECT_EQ(p.rpg_min_rate, 1u);
  EXPECT_EQ(p.rate_to_set_on_first_cnp, 0u);
  EXPECT_EQ(p.dce_tcp_g, 1019u);
  EXPECT_EQ(p.dce_tcp_rtt, 1u);
  EXPECT_EQ(p.rate_reduce_monitor_period, 4u);
  EXPECT_EQ(p.initial_alpha_value, 1023u);
  EXPECT_EQ(p.min_time_between_cnps, 4u);
  EXPECT_EQ(p.cnp_802p_prio, 6u);
  EXPECT_EQ(p.cnp_dscp, 48u);
  EXPECT_EQ(p.clamp_tgt_rate, 0u);
  EXPECT_EQ(p.clamp_tgt_rate_ati, 1u);
  EXPECT_EQ(p.rp_enable_mask, 0xFFu);
  EXPECT_EQ(p.np_enable_mask, 0xFFu);
  EXPECT_EQ(p.alpha_update_on_cnp, 0u);
  EXPECT_EQ(p.hyper_halves_periods, 0u);
  EXPECT_EQ(p.tgt_rate_guard, 0u);
}

TEST(DcqcnParams, PaperProfileHasDcqcnMdValues) {
  // docs/protocol.md §5.5: T 55 µs, B 10 MB, F 5, R_AI 40 Mb/s, R_HAI 200 Mb/s (ns-3), g 1/256, K
  // 55 µs, N 50 µs, alpha starts at 1, min rate 100 Mb/s (ns-3).
  const DcqcnParams p = DcqcnParams::paper();
  EXPECT_EQ(p.rpg_time_reset, 55u);
  EXPECT_EQ(p.rpg_byte_reset, 10'000'000u);
  EXPECT_EQ(p.rpg_threshold, 5u);
  EXPECT_EQ(p.rpg_ai_rate, 40u);
  EXPECT_EQ(p.rpg_hai_rate, 200u);
  EXPECT_EQ(p.dce_tcp_g, 1020u);  // 1 - g = 1 - 1/256 = 1020/1024
  EXPECT_EQ(p.dce_tcp_rtt, 55u);
  EXPECT_EQ(p.min_time_between_cnps, 50u);
  EXPECT_EQ(p.initial_alpha_value, 1024u);
  EXPECT_EQ(p.rpg_min_rate, 100u);
  EXPECT_EQ(p.rate_reduce_monitor_period, 0u);
  EXPECT_EQ(p.clamp_tgt_rate, 1u);
  EXPECT_EQ(p.alpha_update_on_cnp, 1u);
  EXPECT_EQ(p.hyper_halves_periods, 1u);
  EXPECT_EQ(p.tgt_rate_guard, 1u);
}

TEST(DcqcnParams, ProfilesByName) {
  EXPECT_EQ(profile_by_name("connectx"), DcqcnParams::connectx());
  EXPECT_EQ(profile_by_name("paper"), DcqcnParams::paper());
  EXPECT_FALSE(profile_by_name("ConnectX-7").has_value());
  ASSERT_EQ(profile_names().size(), 2u);
  for (std::string_view name : profile_names())
    EXPECT_TRUE(profile_by_name(name).has_value());
}

TEST(ParamTable, EveryConnectxNameIsPresentOnce) {
  std::set<std::string_view> names;
  for (const ParamInfo& info : param_table()) {
    EXPECT_TRUE(names.insert(info.name).second) << "duplicate " << info.name;
    EXPECT_FALSE(info.unit.empty()) << info.name;
    EXPECT_FALSE(info.description.empty()) << info.name;
    EXPECT_LE(info.min, info.max) << info.name;
  }
  for (std::string_view n : {"rpg_time_reset",
                             "rpg_byte_reset",
                             "rpg_threshold",
                             "rpg_ai_rate",
                             "rpg_hai_rate",
                             "rpg_gd",
                             "rpg_min_dec_fac",
                             "rpg_min_rate",
                             "rpg_max_rate",
                             "rate_to_set_on_first_cnp",
                             "initial_alpha_value",
                             "dce_tcp_g",
                             "dce_tcp_rtt",
                             "rate_reduce_monitor_period",
                             "clamp_tgt_rate",
                             "clamp_tgt_rate_ati",
                             "min_time_between_cnps",
                             "cnp_dscp",
                             "cnp_802p_prio",
                             "rp_enable/0",
                             "rp_enable/7",
                             "np_enable/0",
                             "np_enable/7"}) {
    EXPECT_TRUE(names.contains(n)) << n;
  }
}

TEST(ParamTable, DefaultsOfBothProfilesAreInRange) {
  for (const DcqcnParams& p : {DcqcnParams::connectx(), DcqcnParams::paper()}) {
    for (const ParamInfo& info : param_table()) {
      const std::int64_t v = info.get(p, info.index);
      EXPECT_GE(v, info.min) << info.name;
      EXPECT_LE(v, info.max) << info.name;
    }
  }
}

TEST(SetParam, SetsTheNamedFieldOnly) {
  DcqcnParams p = DcqcnParams::connectx();
  auto r = set_param(p, "rpg_ai_rate", std::int64_t{40});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 40);
  EXPECT_EQ(p.rpg_ai_rate, 40u);
  DcqcnParams expected = DcqcnParams::connectx();
  expected.rpg_ai_rate = 40;
  EXPECT_EQ(p, expected);
  EXPECT_EQ(get_param(p, "rpg_ai_rate"), 40);
}

TEST(SetParam, RejectsOutOfRangeAndLeavesParamsUnchanged) {
  DcqcnParams p = DcqcnParams::connectx();
  auto r = set_param(p, "cnp_dscp", std::int64_t{64});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ParamError::Kind::kOutOfRange);
  EXPECT_NE(r.error().message.find("cnp_dscp=64"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("[0, 63]"), std::string::npos) << r.error().message;
  EXPECT_EQ(p, DcqcnParams::connectx());
  EXPECT_FALSE(set_param(p, "rpg_threshold", std::int64_t{0}).ok());  // F >= 1
  EXPECT_FALSE(set_param(p, "rpg_min_dec_fac", std::int64_t{101}).ok());
  EXPECT_FALSE(set_param(p, "dce_tcp_rtt", std::int64_t{0}).ok());  // a zero period never ends
  EXPECT_FALSE(set_param(p, "rpg_min_rate", std::int64_t{-1}).ok());
  EXPECT_EQ(p, DcqcnParams::connectx());
}

TEST(SetParam, RejectsUnknownNamesListingTheKnownOnes) {
  DcqcnParams p;
  auto r = set_param(p, "rpg_ai", "5");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ParamError::Kind::kUnknownName);
  EXPECT_NE(r.error().message.find("rpg_ai_rate"), std::string::npos);
}

TEST(SetParam, ParsesDecimalAndHexAndRejectsJunk) {
  DcqcnParams p;
  ASSERT_TRUE(set_param(p, "rpg_byte_reset", "0x8000").ok());
  EXPECT_EQ(p.rpg_byte_reset, 0x8000u);
  for (const char* bad : {"", "12abc", "1.5", " 7", "-", "0x"}) {
    auto r = set_param(p, "rpg_byte_reset", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind, ParamError::Kind::kMalformedValue) << bad;
  }
  EXPECT_EQ(p.rpg_byte_reset, 0x8000u);
}

TEST(SetParam, AssignmentsAsTheCliTakesThem) {
  DcqcnParams p;
  ASSERT_TRUE(apply_assignment(p, "min_time_between_cnps=50").ok());
  EXPECT_EQ(p.min_time_between_cnps, 50u);
  for (const char* bad : {"min_time_between_cnps", "=5", ""}) {
    auto r = apply_assignment(p, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().kind, ParamError::Kind::kMalformedAssignment) << bad;
  }
}

TEST(SetParam, PerPriorityEnablesAreBitsOfOneMask) {
  DcqcnParams p;
  ASSERT_TRUE(apply_assignment(p, "rp_enable/3=0").ok());
  ASSERT_TRUE(apply_assignment(p, "np_enable/0=0").ok());
  EXPECT_EQ(p.rp_enable_mask, 0xF7u);
  EXPECT_EQ(p.np_enable_mask, 0xFEu);
  EXPECT_FALSE(p.rp_enabled(3));
  EXPECT_TRUE(p.rp_enabled(2));
  EXPECT_FALSE(p.np_enabled(0));
  EXPECT_EQ(get_param(p, "rp_enable/3"), 0);
  EXPECT_EQ(get_param(p, "rp_enable/4"), 1);
  ASSERT_TRUE(apply_assignment(p, "rp_enable/3=1").ok());
  EXPECT_EQ(p.rp_enable_mask, 0xFFu);
  EXPECT_FALSE(apply_assignment(p, "rp_enable/3=2").ok());
  EXPECT_FALSE(apply_assignment(p, "rp_enable/8=1").ok());
}

}  // namespace
}  // namespace xroce::cc
