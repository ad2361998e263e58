// DCQCN reaction point: scripted event sequences with expected rates and alphas worked out by
// hand from the formulas of docs/protocol.md §5.4 (each written next to its number).
//   cut:      Rc <- max(min_rate, Rc * max(1 - alpha * 2^(10 - rpg_gd), rpg_min_dec_fac/100))
//   alpha:    alpha <- d * alpha (+ (1 - d) when a CNP counts), d = dce_tcp_g / 1024
//   increase: FR Rc <- (Rt + Rc)/2;  AI Rt += R_AI, then FR;  HAI Rt += i * R_HAI, then FR
#include "cc/reaction_point.h"

#include <gtest/gtest.h>

#include <cmath>

namespace xroce::cc {
namespace {

constexpr TimeNs us(double v) {
  return static_cast<TimeNs>(v * 1000);
}

double pow_n(double base, int n) {
  double out = 1;
  for (int i = 0; i < n; ++i)
    out *= base;
  return out;
}

constexpr double kCxDecay = 1019.0 / 1024;     // ConnectX dce_tcp_g = 1019
constexpr double kPaperDecay = 1020.0 / 1024;  // paper g = 1/256

// ---------------------------------------------------------------- ConnectX profile

TEST(ReactionPointConnectx, StartsUnlimitedAtLineRate) {
  const DcqcnParams p = DcqcnParams::connectx();
  ReactionPoint rp(p, 100'000);
  EXPECT_EQ(rp.rate_mbps(), 100'000);
  EXPECT_FALSE(rp.limited());
  EXPECT_FALSE(rp.next_deadline().has_value());
  rp.on_bytes_sent(1'000'000, us(5));  // no byte counter before the first CNP
  EXPECT_EQ(rp.byte_stage(), 0u);
  EXPECT_EQ(rp.rate_mbps(), 100'000);
}

TEST(ReactionPointConnectx, FirstCnp) {
  const DcqcnParams p = DcqcnParams::connectx();
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(us(10));
  // alpha = initial_alpha_value/1024 = 1023/1024; Rc = 100000 * (1 - (1023/1024)/2)
  //       = 100000 * 1025/2048 = 50048.828125; Rt = the rate before the cut = 100000.
  EXPECT_EQ(rp.alpha(), 1023.0 / 1024);
  EXPECT_EQ(rp.rate_mbps(), 50048.828125);
  EXPECT_EQ(rp.target_rate_mbps(), 100'000);
  EXPECT_EQ(rp.stage(), RpStage::kFastRecovery);
  EXPECT_EQ(rp.next_deadline(), us(10 + 300));  // rate-increase timer T = rpg_time_reset
  EXPECT_EQ(rp.counters().rp_cnp_handled, 1u);
  EXPECT_EQ(rp.counters().rate_cuts, 1u);
}

TEST(ReactionPointConnectx, RateToSetOnFirstCnpAndMaxRate) {
  DcqcnParams p = DcqcnParams::connectx();
  p.rate_to_set_on_first_cnp = 40'000;
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);
  // Rc = Rt = 40000 first, then the cut: 40000 * 1025/2048 = 20019.53125.
  EXPECT_EQ(rp.rate_mbps(), 20019.53125);
  EXPECT_EQ(rp.target_rate_mbps(), 40'000);

  DcqcnParams capped = DcqcnParams::connectx();
  capped.rpg_max_rate = 25'000;
  ReactionPoint rp2(capped, 100'000);
  EXPECT_EQ(rp2.rate_mbps(), 25'000);  // the ceiling, not the line
  rp2.on_cnp(0);
  EXPECT_EQ(rp2.rate_mbps(), 12512.20703125);  // 25000 * 1025/2048
}

TEST(ReactionPointConnectx, AlphaDecaysEveryDceTcpRttWithoutCnp) {
  const DcqcnParams p = DcqcnParams::connectx();
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);
  rp.on_timer(us(0.999));
  EXPECT_EQ(rp.alpha(), 1023.0 / 1024);  // the first period has not ended
  rp.on_timer(us(1));
  // The first CNP sets alpha but does not count in its period: alpha = 1023/1024 * 1019/1024.
  EXPECT_EQ(rp.alpha(), 1023.0 / 1024 * kCxDecay);
  rp.on_timer(us(10.5));
  // 10 periods ended (1, 2, ..., 10 µs): alpha = 1023/1024 * (1019/1024)^10
  EXPECT_DOUBLE_EQ(rp.alpha(), 1023.0 / 1024 * pow_n(kCxDecay, 10));
  rp.on_timer(us(1000));
  // 1000 periods: alpha = 1023/1024 * (1019/1024)^1000 ~ 0.0075
  EXPECT_NEAR(rp.alpha(), 1023.0 / 1024 * pow_n(kCxDecay, 1000), 1e-15);
  EXPECT_NEAR(rp.alpha(), 0.00748, 0.00001);
}

TEST(ReactionPointConnectx, RepeatedCnpsRaiseAlphaAndCutAgain) {
  const DcqcnParams p = DcqcnParams::connectx();
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);  // Rc1 = 50048.828125, alpha0 = 1023/1024
  const double rc1 = 50048.828125;
  rp.on_cnp(us(10.5));
  // 10 periods ended, none counting a CNP: a10 = alpha0 * d^10. Cut: Rc2 = Rc1 * (1 - a10/2).
  // Rt: clamp_tgt_rate_ati and no increase since the first cut, so Rt stays 100000.
  const double a10 = 1023.0 / 1024 * pow_n(kCxDecay, 10);
  const double rc2 = rc1 * (1 - a10 / 2);
  EXPECT_DOUBLE_EQ(rp.alpha(), a10);
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), rc2);
  EXPECT_EQ(rp.target_rate_mbps(), 100'000);
  rp.on_cnp(us(20.5));
  // The period ending at 11 µs saw the CNP: a11 = a10 * d + (1 - d); then 9 plain decays
  // (12..20 µs): a20 = a11 * d^9. Cut: Rc3 = Rc2 * (1 - a20/2).
  const double a20 = (a10 * kCxDecay + (1 - kCxDecay)) * pow_n(kCxDecay, 9);
  EXPECT_DOUBLE_EQ(rp.alpha(), a20);
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), rc2 * (1 - a20 / 2));
  EXPECT_EQ(rp.counters().rate_cuts, 3u);
  EXPECT_EQ(rp.counters().rp_cnp_handled, 3u);
}

TEST(ReactionPointConnectx, CnpInsideRateReduceMonitorPeriodIsFoldedIntoOneCut) {
  const DcqcnParams p = DcqcnParams::connectx();  // rate_reduce_monitor_period = 4 µs
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);
  const double rc1 = 50048.828125;
  rp.on_cnp(us(0.5));  // inside the period: no cut now, one at 0 + 4 µs
  EXPECT_EQ(rp.rate_mbps(), rc1);
  EXPECT_TRUE(rp.cut_pending());
  EXPECT_EQ(rp.next_deadline(), us(4));
  rp.on_cnp(us(2));  // folded into the pending cut
  rp.on_timer(us(3.999));
  EXPECT_EQ(rp.rate_mbps(), rc1);
  EXPECT_EQ(rp.counters().rate_cuts, 1u);
  rp.on_timer(us(4));
  // alpha periods end at 1 µs (the 0.5 µs CNP counts: raise), 2 (decay), 3 (the 2 µs CNP
  // counts: raise), 4 (decay), each step a <- a*d (+ (1 - d) when raised), from a0 = 1023/1024:
  const double a0 = 1023.0 / 1024;
  const double a1 = a0 * kCxDecay + (1 - kCxDecay);
  const double a2 = a1 * kCxDecay;
  const double a3 = a2 * kCxDecay + (1 - kCxDecay);
  const double a4 = a3 * kCxDecay;
  EXPECT_DOUBLE_EQ(rp.alpha(), a4);
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), rc1 * (1 - a4 / 2));
  EXPECT_EQ(rp.counters().rate_cuts, 2u);
  EXPECT_EQ(rp.counters().rp_cnp_handled, 3u);
  EXPECT_EQ(rp.counters().cnp_coalesced, 1u);
  EXPECT_FALSE(rp.cut_pending());
  EXPECT_EQ(rp.next_deadline(), us(4 + 300));  // the cut restarted the increase timer
}

TEST(ReactionPointConnectx, AdditiveThenHyperIncrease) {
  DcqcnParams p = DcqcnParams::connectx();  // F = 1, B = 32767 bytes, T = 300 µs
  p.rate_to_set_on_first_cnp = 10'000;      // start below the line so Rt can grow
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);  // Rc = 10000 * 1025/2048 = 5004.8828125, Rt = 10000
  EXPECT_EQ(rp.rate_mbps(), 5004.8828125);
  rp.on_bytes_sent(32766, us(1));
  EXPECT_EQ(rp.byte_stage(), 0u);
  rp.on_bytes_sent(1, us(1));
  // Byte event 1: B_cnt = 1 >= F, T_cnt = 0 < F: additive. Rt = 10000 + 5 = 10005,
  // Rc = (10005 + 5004.8828125)/2 = 7504.94140625.
  EXPECT_EQ(rp.stage(), RpStage::kAdditiveIncrease);
  EXPECT_EQ(rp.target_rate_mbps(), 10'005);
  EXPECT_EQ(rp.rate_mbps(), 7504.94140625);
  rp.on_bytes_sent(32767, us(2));
  // B_cnt = 2: Rt = 10010, Rc = (10010 + 7504.94140625)/2 = 8757.470703125
  EXPECT_EQ(rp.rate_mbps(), 8757.470703125);
  rp.on_timer(us(300));
  // Timer: T_cnt = 1, B_cnt = 2, both >= F: hyper, i = min(1, 2) - 1 + 1 = 1.
  // Rt = 10010 + 50 = 10060, Rc = (10060 + 8757.470703125)/2 = 9408.7353515625
  EXPECT_EQ(rp.stage(), RpStage::kHyperIncrease);
  EXPECT_EQ(rp.target_rate_mbps(), 10'060);
  EXPECT_EQ(rp.rate_mbps(), 9408.7353515625);
  rp.on_bytes_sent(32767, us(301));
  // B_cnt = 3: i = min(1, 3) = 1: Rt = 10110, Rc = (10110 + 9408.7353515625)/2
  EXPECT_EQ(rp.rate_mbps(), 9759.36767578125);
  rp.on_timer(us(600));
  // T_cnt = 2: i = min(2, 3) - 1 + 1 = 2: Rt = 10110 + 2*50 = 10210,
  // Rc = (10210 + 9759.36767578125)/2 = 9984.683837890625
  EXPECT_EQ(rp.target_rate_mbps(), 10'210);
  EXPECT_EQ(rp.rate_mbps(), 9984.683837890625);
  EXPECT_EQ(rp.next_deadline(), us(900));  // no halving in the ConnectX profile
  EXPECT_EQ(rp.counters().timer_events, 2u);
  EXPECT_EQ(rp.counters().byte_events, 3u);
}

// docs/protocol.md §5.4, paper rule 1: a cut resets both stage counts and the byte accumulator, so
// bytes sent before a cut never count toward a byte event after it (docs/dcqcn-results.md §3.2 item
// 3: why the byte counter favours the faster flow).
TEST(ReactionPointConnectx, ACutRestartsTheByteAccumulatorAndBothStageCounts) {
  const DcqcnParams p = DcqcnParams::connectx();  // F = 1, B = 32767 bytes, T = 300 µs
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);                     // Rc = 50048.828125, Rt = 100000
  rp.on_bytes_sent(30'000, us(1));  // below B: no byte event
  EXPECT_EQ(rp.byte_stage(), 0u);
  rp.on_timer(us(300));
  // Timer event: T_cnt = 1 >= F, B_cnt = 0 < F: additive, Rt = min(100005, line) = 100000,
  // Rc = (100000 + 50048.828125)/2 = 75024.4140625.
  EXPECT_EQ(rp.timer_stage(), 1u);
  EXPECT_EQ(rp.rate_mbps(), 75024.4140625);
  rp.on_cnp(us(300.5));
  // The cut: clamp_tgt_rate_ati with T_cnt > 0 sets Rt = Rc; alpha after 300 plain periods is
  // a = 1023/1024 * d^300; Rc = 75024.4140625 * (1 - a/2); both stage counts back to 0.
  const double a300 = 1023.0 / 1024 * pow_n(kCxDecay, 300);
  const double rc_cut = 75024.4140625 * (1 - a300 / 2);
  EXPECT_EQ(rp.target_rate_mbps(), 75024.4140625);
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), rc_cut);
  EXPECT_EQ(rp.timer_stage(), 0u);
  EXPECT_EQ(rp.byte_stage(), 0u);
  // 30000 bytes before the cut + 30000 after would cross B; only those after it count.
  rp.on_bytes_sent(30'000, us(301));
  EXPECT_EQ(rp.byte_stage(), 0u);
  EXPECT_EQ(rp.counters().byte_events, 0u);
  rp.on_bytes_sent(2'767, us(302));  // 32767 since the cut: byte event, B_cnt = 1: additive
  EXPECT_EQ(rp.byte_stage(), 1u);
  EXPECT_EQ(rp.target_rate_mbps(), 75029.4140625);  // Rt + R_AI
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), (75029.4140625 + rc_cut) / 2);
}

TEST(ReactionPointConnectx, ClampTargetAfterIncrease) {
  DcqcnParams p = DcqcnParams::connectx();
  p.rate_to_set_on_first_cnp = 10'000;
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);                    // Rc = 5004.8828125, Rt = 10000
  rp.on_bytes_sent(32767, us(1));  // AI: Rt = 10005, Rc = 7504.94140625
  rp.on_cnp(us(10.5));             // B_cnt = 1 > 0, so clamp_tgt_rate_ati sets Rt = Rc
  EXPECT_EQ(rp.target_rate_mbps(), 7504.94140625);
  const double a10 = 1023.0 / 1024 * pow_n(kCxDecay, 10);
  EXPECT_DOUBLE_EQ(rp.rate_mbps(), 7504.94140625 * (1 - a10 / 2));
}

TEST(ReactionPointConnectx, MinDecFacBoundsOneCut) {
  DcqcnParams p = DcqcnParams::connectx();
  p.rpg_gd = 9;  // alpha_fx / 2^9 = 2 alpha ~ 2: the cut alone would go negative
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);
  EXPECT_EQ(rp.rate_mbps(), 50'000);  // 100000 * rpg_min_dec_fac/100 = 100000 * 0.5
  p.rpg_min_dec_fac = 100;            // 100 % disables cuts
  rp.on_cnp(us(10));
  EXPECT_EQ(rp.rate_mbps(), 50'000);
}

TEST(ReactionPointConnectx, DisabledPriorityIgnoresCnps) {
  DcqcnParams p = DcqcnParams::connectx();
  ASSERT_TRUE(apply_assignment(p, "rp_enable/5=0").ok());
  ReactionPoint rp(p, 100'000, 5);
  rp.on_cnp(0);
  EXPECT_EQ(rp.rate_mbps(), 100'000);
  EXPECT_FALSE(rp.limited());
  EXPECT_EQ(rp.counters().rp_cnp_ignored, 1u);
  EXPECT_EQ(rp.counters().rp_cnp_handled, 0u);
  ReactionPoint other(p, 100'000, 4);
  other.on_cnp(0);
  EXPECT_EQ(other.counters().rp_cnp_handled, 1u);
}

TEST(ReactionPointConnectx, MinRateFloor) {
  DcqcnParams p = DcqcnParams::connectx();
  p.rpg_min_rate = 30'000;
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);  // 50048.828125, above the floor
  rp.on_cnp(us(10));
  EXPECT_EQ(rp.rate_mbps(), 30'000);  // 50048.8 * (1 - 0.951/2) = ~26250 < 30000: floor
}

TEST(ReactionPointConnectx, RecoversToTheLineAndReleasesTheLimiter) {
  const DcqcnParams p = DcqcnParams::connectx();
  ReactionPoint rp(p, 100'000);
  rp.on_cnp(0);  // Rc = 50048.828125, Rt = 100000
  // Timer only (no bytes sent): every event is additive (T_cnt >= F = 1, B_cnt = 0 < F) with Rt
  // capped at the line, so each halves the gap 100000 - 50048.828125 = 49951.171875.
  // After 15 events (4500 µs) the gap is 49951.171875 / 2^15 = 1.524... > 1 Mb/s.
  rp.on_timer(us(4500));
  EXPECT_EQ(rp.rate_mbps(), 100'000 - 49951.171875 / 32768);
  EXPECT_EQ(rp.target_rate_mbps(), 100'000);
  EXPECT_EQ(rp.stage(), RpStage::kAdditiveIncrease);
  // Event 16: gap 0.76 < kReleaseSlackMbps: released at exactly the line rate.
  rp.on_timer(us(4800));
  EXPECT_EQ(rp.rate_mbps(), 100'000);
  EXPECT_FALSE(rp.limited());
  EXPECT_FALSE(rp.next_deadline().has_value());
  // The next CNP cuts from the line with the alpha that kept decaying (4800 periods of 1 µs):
  // it is not a first CNP again. alpha = 1023/1024 * (1019/1024)^4800 ~ 6e-11, so the cut
  // is tiny: Rc = 100000 * (1 - alpha/2).
  rp.on_cnp(us(4800));
  const double a = 1023.0 / 1024 * std::pow(kCxDecay, 4800);
  EXPECT_NEAR(rp.alpha(), a, a * 1e-9);
  EXPECT_NEAR(rp.rate_mbps(), 100'000 * (1 - a / 2), 1e-9);
  EXPECT_LT(rp.rate_mbps(), 100'000);
  EXPECT_TRUE(rp.limited());
}

TEST(ReactionPointConnectx, ProfileChangeAtRunTimeAppliesFromTheNextEvent) {
  DcqcnParams device = DcqcnParams::connectx();
  ReactionPoint rp(device, 100'000);
  rp.on_cnp(0);                            // armed: timer at 300 µs (connectx T)
  device = DcqcnParams::paper();           // `xroce cc profile NAME paper`
  EXPECT_EQ(rp.next_deadline(), us(300));  // the armed period runs out at its old length
  rp.on_timer(us(300));
  // Paper F = 5: T_cnt 1 < 5 is fast recovery now, Rc = (100000 + 50048.828125)/2.
  EXPECT_EQ(rp.stage(), RpStage::kFastRecovery);
  EXPECT_EQ(rp.rate_mbps(), 75024.4140625);
  EXPECT_EQ(rp.next_deadline(), us(300 + 55));  // paper T from here on
}

// ---------------------------------------------------------------- paper profile

TEST(ReactionPointPaper, FirstCnpHalvesTheRate) {
  const DcqcnParams p = DcqcnParams::paper();
  ReactionPoint rp(p, 40'000);
  rp.on_cnp(0);
  // alpha = 1: Rc = 40000 * (1 - 1/2) = 20000, Rt = 40000; then alpha = 1 * d + (1 - d) = 1.
  EXPECT_EQ(rp.rate_mbps(), 20'000);
  EXPECT_EQ(rp.target_rate_mbps(), 40'000);
  EXPECT_EQ(rp.alpha(), 1.0);
  EXPECT_EQ(rp.next_deadline(), us(55));
}

TEST(ReactionPointPaper, FastRecoveryThenAdditiveIncreaseAndAlphaDecay) {
  const DcqcnParams p = DcqcnParams::paper();
  ReactionPoint rp(p, 40'000);
  rp.on_cnp(0);         // Rc 20000, Rt 40000, alpha 1
  rp.on_timer(us(55));  // T_cnt 1 < 5: fast recovery, Rc = (40000 + 20000)/2 = 30000
  EXPECT_EQ(rp.rate_mbps(), 30'000);
  EXPECT_EQ(rp.stage(), RpStage::kFastRecovery);
  // The alpha timer (K = 55 µs after the last CNP) fired too: alpha = 1 * 1020/1024.
  EXPECT_EQ(rp.alpha(), 0.99609375);
  rp.on_cnp(us(60));
  // clamp_tgt_rate: Rt = Rc = 30000. Cut with alpha before this CNP:
  // Rc = 30000 * (1 - 0.99609375/2) = 30000 * 0.501953125 = 15058.59375.
  // Then alpha = 0.99609375 * 0.99609375 + 4/1024 = 0.9922027587890625 + 0.00390625.
  EXPECT_EQ(rp.target_rate_mbps(), 30'000);
  EXPECT_EQ(rp.rate_mbps(), 15058.59375);
  EXPECT_EQ(rp.alpha(), 0.9961090087890625);
  EXPECT_EQ(rp.next_deadline(), us(115));
  // Timer events at 115, 170, 225, 280 µs, T_cnt 1..4: fast recovery towards Rt = 30000.
  rp.on_timer(us(115));
  EXPECT_EQ(rp.rate_mbps(), 22529.296875);  // (30000 + 15058.59375)/2
  rp.on_timer(us(170));
  EXPECT_EQ(rp.rate_mbps(), 26264.6484375);  // (30000 + 22529.296875)/2
  rp.on_timer(us(225));
  EXPECT_EQ(rp.rate_mbps(), 28132.32421875);  // (30000 + 26264.6484375)/2
  rp.on_timer(us(280));
  EXPECT_EQ(rp.rate_mbps(), 29066.162109375);  // (30000 + 28132.32421875)/2
  EXPECT_EQ(rp.target_rate_mbps(), 30'000);
  rp.on_timer(us(335));
  // T_cnt 5 >= F, B_cnt 0 < F: additive. Rt = 30000 + 40 = 30040,
  // Rc = (30040 + 29066.162109375)/2 = 29553.0810546875.
  EXPECT_EQ(rp.stage(), RpStage::kAdditiveIncrease);
  EXPECT_EQ(rp.target_rate_mbps(), 30'040);
  EXPECT_EQ(rp.rate_mbps(), 29553.0810546875);
  rp.on_timer(us(390));
  // Rt = 30080, Rc = (30080 + 29553.0810546875)/2 = 29816.54052734375
  EXPECT_EQ(rp.target_rate_mbps(), 30'080);
  EXPECT_EQ(rp.rate_mbps(), 29816.54052734375);
  // alpha decayed at 115, 170, 225, 280, 335, 390 µs: 0.9961090087890625 * (1020/1024)^6.
  EXPECT_DOUBLE_EQ(rp.alpha(), 0.9961090087890625 * pow_n(kPaperDecay, 6));
  EXPECT_EQ(rp.counters().rate_cuts, 2u);
}

TEST(ReactionPointPaper, AlphaDecaysEveryKAfterTheLastCnp) {
  const DcqcnParams p = DcqcnParams::paper();  // K = dce_tcp_rtt = 55 µs, d = 255/256
  ReactionPoint rp(p, 40'000);
  rp.on_cnp(0);  // alpha = 1
  rp.on_timer(us(54.999));
  EXPECT_EQ(rp.alpha(), 1.0);
  rp.on_timer(us(55));
  EXPECT_EQ(rp.alpha(), 0.99609375);  // 255/256
  rp.on_timer(us(110));
  EXPECT_EQ(rp.alpha(), 0.99609375 * 0.99609375);  // (255/256)^2 = 0.9922027587890625
  rp.on_cnp(us(120));
  // Raise: a = (255/256)^2 * 255/256 + 1/256; the decay timer restarts: next at 175, not 165.
  const double raised = 0.9922027587890625 * 0.99609375 + 0.00390625;
  EXPECT_EQ(rp.alpha(), raised);
  rp.on_timer(us(174.999));
  EXPECT_EQ(rp.alpha(), raised);
  rp.on_timer(us(175));
  EXPECT_EQ(rp.alpha(), raised * 0.99609375);
}

TEST(ReactionPointPaper, EveryCnpCutsAndAlphaStaysAtOne) {
  const DcqcnParams p = DcqcnParams::paper();  // rate_reduce_monitor_period = 0
  ReactionPoint rp(p, 40'000);
  // CNPs 1 µs apart: alpha = 1 stays 1 (1 * d + 1 - d), each cut halves Rc:
  // 20000, 10000, 5000, 2500, 1250, 625, 312.5, 156.25, then 78.125 < 100: the floor.
  const double expected[] = {20000, 10000, 5000, 2500, 1250, 625, 312.5, 156.25, 100, 100};
  for (int i = 0; i < 10; ++i) {
    rp.on_cnp(us(i));
    EXPECT_EQ(rp.rate_mbps(), expected[i]) << "after CNP " << i + 1;
    EXPECT_EQ(rp.alpha(), 1.0);
  }
  EXPECT_EQ(rp.counters().rate_cuts, 10u);
  EXPECT_EQ(rp.target_rate_mbps(), 100);  // clamp_tgt_rate: Rt = Rc before each cut
}

TEST(ReactionPointPaper, HyperIncreaseHalvesThePeriods) {
  DcqcnParams p = DcqcnParams::paper();
  p.rpg_byte_reset = 1000;  // so the byte counter reaches F quickly
  p.rate_to_set_on_first_cnp = 10'000;
  ReactionPoint rp(p, 40'000);
  rp.on_cnp(0);  // Rc = 10000/2 = 5000, Rt = 10000
  // Byte events 1..4 (FR): 7500, 8750, 9375, 9687.5; event 5: AI, Rt = 10040,
  // Rc = (10040 + 9687.5)/2 = 9863.75.
  const double by_bytes[] = {7500, 8750, 9375, 9687.5, 9863.75};
  for (int i = 0; i < 5; ++i) {
    rp.on_bytes_sent(1000, us(1 + i));
    EXPECT_EQ(rp.rate_mbps(), by_bytes[i]) << "byte event " << i + 1;
  }
  EXPECT_EQ(rp.target_rate_mbps(), 10'040);
  // Timer events 1..4 at 55..220 µs (FR: the timer's own count is < F):
  // (10040 + 9863.75)/2 = 9951.875, 9995.9375, 10017.96875, 10028.984375.
  const double by_timer[] = {9951.875, 9995.9375, 10017.96875, 10028.984375};
  for (int i = 0; i < 4; ++i) {
    rp.on_timer(us(55.0 * (i + 1)));
    EXPECT_EQ(rp.rate_mbps(), by_timer[i]) << "timer event " << i + 1;
  }
  rp.on_timer(us(275));
  // T_cnt 5, B_cnt 5: hyper, i = min(5, 5) - 5 + 1 = 1. Rt = 10040 + 200 = 10240,
  // Rc = (10240 + 10028.984375)/2 = 10134.4921875. Not yet hyper before: next in T = 55 µs.
  EXPECT_EQ(rp.stage(), RpStage::kHyperIncrease);
  EXPECT_EQ(rp.rate_mbps(), 10134.4921875);
  EXPECT_EQ(rp.next_deadline(), us(330));
  rp.on_timer(us(330));
  // T_cnt 6: i = min(6, 5) - 4 = 1: Rt = 10440, Rc = (10440 + 10134.4921875)/2.
  // Already hyper before: the next timer period is T/2 = 27.5 µs.
  EXPECT_EQ(rp.rate_mbps(), 10287.24609375);
  EXPECT_EQ(rp.next_deadline(), us(357.5));
  rp.on_bytes_sent(1000, us(340));
  // B_cnt 6: i = min(6, 6) - 4 = 2: Rt = 10440 + 400 = 10840, Rc = (10840 + 10287.24609375)/2.
  // The next byte event now needs B/2 = 500 bytes.
  EXPECT_EQ(rp.target_rate_mbps(), 10'840);
  EXPECT_EQ(rp.rate_mbps(), 10563.623046875);
  rp.on_bytes_sent(500, us(341));
  // B_cnt 7: i = min(6, 7) - 4 = 2: Rt = 11240, Rc = (11240 + 10563.623046875)/2.
  EXPECT_EQ(rp.target_rate_mbps(), 11'240);
  EXPECT_EQ(rp.rate_mbps(), 10901.8115234375);
}

TEST(ReactionPointPaper, RecoversToLineRateAndReleasesTheLimiter) {
  const DcqcnParams p = DcqcnParams::paper();
  ReactionPoint rp(p, 40'000);
  rp.on_cnp(0);  // Rc 20000, Rt 40000
  // Timer events every 55 µs: FR 30000, 35000, 37500, 38750; then AI with Rt capped at the
  // line (40040 -> 40000): 39375, 39687.5, ..., each halving the gap to 40000. After event 14
  // (770 µs) the gap is 40000/2^15 = 1.220703125 > 1 Mb/s; event 15 (825 µs) makes it
  // 0.6103515625 < kReleaseSlackMbps: the limiter is released at exactly the line rate.
  rp.on_timer(us(770));
  EXPECT_EQ(rp.rate_mbps(), 40'000 - 40'000.0 / (1 << 15));  // 39998.779296875
  EXPECT_EQ(rp.target_rate_mbps(), 40'000);                  // Rt never exceeds the line
  EXPECT_TRUE(rp.limited());
  rp.on_timer(us(825));
  EXPECT_EQ(rp.rate_mbps(), 40'000);
  EXPECT_FALSE(rp.limited());
  EXPECT_FALSE(rp.next_deadline().has_value());
  EXPECT_EQ(rp.counters().timer_events, 15u);
}

TEST(ReactionPointPaper, LateTimerCallCatchesUpEveryEventInOrder) {
  const DcqcnParams p = DcqcnParams::paper();
  ReactionPoint a(p, 40'000);
  ReactionPoint b(p, 40'000);
  a.on_cnp(0);
  b.on_cnp(0);
  for (int i = 1; i <= 6; ++i)
    a.on_timer(us(55.0 * i));
  b.on_timer(us(340));  // one late call covering six deadlines
  EXPECT_EQ(a.rate_mbps(), b.rate_mbps());
  EXPECT_EQ(a.target_rate_mbps(), b.target_rate_mbps());
  EXPECT_EQ(a.alpha(), b.alpha());
  EXPECT_EQ(a.next_deadline(), b.next_deadline());
}

TEST(ReactionPointPaper, GuardDividesAStaleTarget) {
  DcqcnParams p = DcqcnParams::paper();
  p.clamp_tgt_rate = 0;  // QCN-standard clamp: Rt = Rc only if the byte stage is > 0
  ReactionPoint rp(p, 40'000);
  for (int i = 0; i < 5; ++i)
    rp.on_cnp(us(i));  // alpha stays 1: Rc = 40000/2^5 = 1250
  EXPECT_EQ(rp.rate_mbps(), 1250);
  EXPECT_EQ(rp.target_rate_mbps(), 40'000);  // never clamped: the byte stage stayed 0
  rp.on_timer(us(4 + 55));
  // T_cnt = 1 and Rt = 40000 > 10 * 1250: Rt = 40000/8 = 5000, Rc = (5000 + 1250)/2 = 3125.
  EXPECT_EQ(rp.target_rate_mbps(), 5000);
  EXPECT_EQ(rp.rate_mbps(), 3125);
}

}  // namespace
}  // namespace xroce::cc
