// Simulation: the worker loop itself (engine/daemon/worker.h, the code xroced runs) on two
// simulated devices with several workers each, driven by a virtual clock (engine/daemon/sim).
// Safety under faults (loss, reordering, duplication, corruption on the wire; a full port;
// handover between workers; loopback; packets from strangers): every byte verified, nothing
// lost, duplicated or completed twice, completions in order, the counters balanced. Liveness with
// faults off: everything completes and nothing is ever retransmitted or dropped. Seeds vary the
// scenario: workers, QPs, MTU, sizes, the workers' speed, wakeup latency and spinning,
// back-pressure, ECN.
//
// Every failure prints its seed, the scenario and the command that reproduces it:
//   XROCE_WORKER_SIM_SEED=<seed> <this binary> --gtest_filter=<test>
// XROCE_SIM_SEEDS=<n> changes how many seeds each test runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "daemon/sim/worker_sim.h"

namespace xroce::daemon::sim {
namespace {

std::uint64_t seed_count(std::uint64_t dflt) {
  if (const char* s = std::getenv("XROCE_SIM_SEEDS")) return std::strtoull(s, nullptr, 10);
  return dflt;
}

// XROCE_WORKER_SIM_SEED=<seed>: only that seed.
std::optional<std::uint64_t> one_seed() {
  if (const char* s = std::getenv("XROCE_WORKER_SIM_SEED")) return std::strtoull(s, nullptr, 10);
  return std::nullopt;
}

// The seeds of a test over several: XROCE_WORKER_SIM_SEED's alone, else `count` from `first`.
std::vector<std::uint64_t> seeds_from(std::uint64_t first, std::uint64_t count) {
  if (const auto only = one_seed()) return {*only};
  std::vector<std::uint64_t> seeds;
  for (std::uint64_t i = 0; i < count; ++i)
    seeds.push_back(first + i);
  return seeds;
}

std::string this_binary() {
  char path[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "sim_worker_loop";
}

std::string reproduce(std::uint64_t seed) {
  const auto* test = testing::UnitTest::GetInstance()->current_test_info();
  return "XROCE_WORKER_SIM_SEED=" + std::to_string(seed) + " " + this_binary() +
         " --gtest_filter=" + test->test_suite_name() + "." + test->name();
}

std::string report(const WorkerScenario& c, const WorkerSummary& s) {
  const DatapathCounters& k = s.counters;
  return "seed " + std::to_string(c.seed) + ": " + (s.ok() ? "ok" : s.failure) +
         "\n  reproduce: " + reproduce(c.seed) + "\n  scenario: " + describe(c) + "\n  posted " +
         std::to_string(s.posted) + " completed " + std::to_string(s.completed) + " received " +
         std::to_string(s.received) + " lost " + std::to_string(s.lost) + " retransmitted " +
         std::to_string(s.retransmitted_packets) + " timeouts " + std::to_string(s.timeouts) +
         " handed_over " + std::to_string(k.rx_handed_over) + " loopback " +
         std::to_string(k.tx_loopback) + " sleeps " + std::to_string(k.sleeps) + " turns " +
         std::to_string(s.turns) + " sim_time_us " + std::to_string(s.sim_time_us);
}

// Seeds vary the scenario as well as the random draws.
WorkerScenario scenario_for(std::uint64_t seed, bool faults) {
  WorkerScenario c;
  c.seed = seed;
  c.ops = 120 + seed % 5 * 20;
  c.workers = 1 + static_cast<std::uint32_t>(seed % 3);
  c.qps = 1 + static_cast<std::uint32_t>(seed % 4);
  c.loopback_qps = static_cast<std::uint32_t>(seed % 3);
  c.max_outstanding = 2 + static_cast<std::uint32_t>(seed % 4);
  c.mtu = static_cast<transport::PathMtu>(1 + seed % 5);
  c.max_msg_bytes = seed % 3 == 0 ? 12000 : 3000;
  c.rate_gbps = seed % 2 == 0 ? 100 : 10;
  c.delay_ns = 1'000 + seed % 4 * 2'000;
  c.turn_ns = 100 + seed % 7 * 150;
  c.frame_ns = seed % 5 * 60;
  c.wake_ns = 1'000 + seed % 6 * 8'000;
  c.spin_ns = seed % 4 == 0 ? 0 : 20'000;
  c.spin_allowed = seed % 5 != 1;
  c.think_ns = seed % 3 * 15'000;
  if (seed % 4 == 2) c.host_queue_bytes = 6'000 + seed % 3 * 4'000;  // the port refuses
  c.ecn = seed % 6 == 5;
  c.strangers = static_cast<std::uint32_t>(seed % 3);
  // Every third seed moderates doorbells at two sends posted, which these QPs' 2-5 outstanding
  // reach: the moderated sleep must lose nothing either.
  if (seed % 3 == 1) c.moderation_sends = 2;
  if (faults) {
    c.loss = 0.02;
    c.reorder = 0.02;
    c.dup = 0.01;
    c.corrupt = 0.005;
    if (seed % 5 == 0) c.loss = 0.06;  // heavy loss: retry and timer paths
  }
  return c;
}

TEST(SimWorkerLoop, FaultySeedsLoseNothing) {
  const auto only = one_seed();
  const std::uint64_t first = only.value_or(1);
  const std::uint64_t last = only ? *only : seed_count(400);
  WorkerSummary total;
  std::uint64_t refused_seeds = 0, ecn_seeds = 0;
  for (std::uint64_t seed = first; seed <= last; ++seed) {
    const WorkerScenario c = scenario_for(seed, true);
    const WorkerSummary s = run_worker_scenario(c);
    ASSERT_TRUE(s.ok()) << report(c, s);
    ASSERT_EQ(s.completed, s.posted) << report(c, s);
    ASSERT_EQ(s.posted, c.ops) << report(c, s);
    ASSERT_EQ(s.data_errors + s.completion_errors + s.lost, 0u) << report(c, s);
    ASSERT_EQ(s.peer_mismatches, s.strangers) << report(c, s);
    total.strangers += s.strangers;
    total.peer_mismatches += s.peer_mismatches;
    total.retransmitted_packets += s.retransmitted_packets;
    total.counters += s.counters;
    total.doorbells += s.doorbells;
    total.bytes_verified += s.bytes_verified;
    total.cnps_sent += s.cnps_sent;
    refused_seeds += s.port_refusals > 0;
    ecn_seeds += c.ecn;
  }
  if (only) return;
  std::printf(
      "%llu seeds: %llu bytes verified, %llu retransmitted, %llu ICRC errors, %llu handed over, "
      "%llu looped back, %llu sleeps, %llu doorbells, %llu seeds with port refusals, %llu CNPs, "
      "%llu stranger packets dropped\n",
      static_cast<unsigned long long>(last - first + 1),
      static_cast<unsigned long long>(total.bytes_verified),
      static_cast<unsigned long long>(total.retransmitted_packets),
      static_cast<unsigned long long>(total.counters.rx_icrc_errors),
      static_cast<unsigned long long>(total.counters.rx_handed_over),
      static_cast<unsigned long long>(total.counters.tx_loopback),
      static_cast<unsigned long long>(total.counters.sleeps),
      static_cast<unsigned long long>(total.doorbells),
      static_cast<unsigned long long>(refused_seeds),
      static_cast<unsigned long long>(total.cnps_sent),
      static_cast<unsigned long long>(total.peer_mismatches));
  // The faults and the mechanisms were real: the transport recovered, the door caught
  // corruption, frames crossed between workers and devices, workers slept and were rung, ports
  // pushed back, and CNPs were sent where the switch marked.
  EXPECT_GT(total.retransmitted_packets, 0u);
  EXPECT_GT(total.counters.rx_icrc_errors, 0u);
  EXPECT_GT(total.counters.rx_handed_over, 0u);
  EXPECT_GT(total.counters.tx_loopback, 0u);
  EXPECT_GT(total.counters.sleeps, 0u);
  EXPECT_GT(total.doorbells, 0u);
  EXPECT_GT(total.bytes_verified, 0u);
  EXPECT_GT(refused_seeds, 0u);
  EXPECT_GT(total.strangers, 0u);
  if (ecn_seeds > 0) {
    EXPECT_GT(total.cnps_sent, 0u);
  }
}

TEST(SimWorkerLoop, CleanSeedsCompleteWithoutRetransmission) {
  const auto only = one_seed();
  const std::uint64_t first = only.value_or(1001);
  const std::uint64_t last = only ? *only : first + seed_count(200) - 1;
  for (std::uint64_t seed = first; seed <= last; ++seed) {
    const WorkerScenario c = scenario_for(seed, false);
    const WorkerSummary s = run_worker_scenario(c);
    ASSERT_TRUE(s.ok()) << report(c, s);
    ASSERT_EQ(s.completed, c.ops) << report(c, s);
    ASSERT_EQ(s.retransmitted_packets, 0u) << report(c, s);
    ASSERT_EQ(s.timeouts, 0u) << report(c, s);
    const DatapathCounters& k = s.counters;
    ASSERT_EQ(k.rx_icrc_errors + k.rx_malformed + k.rx_no_qp, 0u) << report(c, s);
    ASSERT_EQ(k.rx_handover_drops + k.tx_loopback_drops + k.tx_backlog_drops, 0u) << report(c, s);
    ASSERT_EQ(s.peer_mismatches, s.strangers) << report(c, s);
  }
}

// A thousand QP pairs on the daemon's own worker loop, two workers per device, each device
// with an InflightBudget of 256 PSNs (more QPs than the budget has grants).
WorkerScenario thousand_qps_under_the_budget(std::uint64_t seed) {
  WorkerScenario c;
  c.seed = seed;
  c.qps = 1000;
  c.loopback_qps = 0;
  c.ops = 4 * c.qps;
  c.workers = 2;
  c.max_outstanding = 2;
  c.mtu = transport::PathMtu::k1024;
  c.max_msg_bytes = 8192;
  c.rate_gbps = 10;
  c.strangers = 0;
  c.inflight_budget_psns = 256;
  return c;
}

// Every operation completed with its data, and on this clean network nothing was
// retransmitted, no ACK timer fired and no frame was dropped.
void expect_clean_and_complete(const WorkerScenario& c, const WorkerSummary& s) {
  ASSERT_TRUE(s.ok()) << report(c, s);
  ASSERT_EQ(s.posted, c.ops) << report(c, s);
  ASSERT_EQ(s.completed, c.ops) << report(c, s);
  ASSERT_EQ(s.data_errors + s.completion_errors + s.lost, 0u) << report(c, s);
  EXPECT_GT(s.bytes_verified, 0u) << report(c, s);
  EXPECT_EQ(s.retransmitted_packets, 0u) << report(c, s);
  EXPECT_EQ(s.timeouts, 0u) << report(c, s);
  const DatapathCounters& k = s.counters;
  EXPECT_EQ(k.rx_icrc_errors + k.rx_malformed + k.rx_no_qp, 0u) << report(c, s);
  EXPECT_EQ(k.rx_handover_drops + k.tx_loopback_drops + k.tx_backlog_drops, 0u) << report(c, s);
}

// The workers' round robin and the budget's grants let every QP through. Each endpoint posts
// two operations first (4,000 for 2,000 endpoints), so every QP must progress; every byte is
// checked.
TEST(SimWorkerLoop, AThousandQpsUnderTheBudgetAllProgressWithoutTimeouts) {
  const WorkerScenario c = thousand_qps_under_the_budget(one_seed().value_or(5001));
  expect_clean_and_complete(c, run_worker_scenario(c));
}

// The same with every frame arriving on each device's first queue, and workers that sleep as
// soon as a turn finds nothing to do (no spinning): the second worker's QPs that the budget
// stopped hold nothing, so no frame or doorbell of theirs wakes that worker; only the first
// worker's ACKs free the budget, and the budget's release hook must wake the second
// (Worker::wake_for_budget). The simulator fails the run when, after any turn, a worker sleeps,
// not woken, while a grant its QPs wait for is free; without the hook that happens within the
// first 100 us. The run also takes no longer in virtual time than with the frames spread.
TEST(SimWorkerLoop, BudgetFreedOnOneWorkerWakesTheQpsWaitingOnAnother) {
  const WorkerScenario spread = thousand_qps_under_the_budget(one_seed().value_or(5001));
  WorkerScenario one_queue = spread;
  one_queue.one_rx_queue = true;
  one_queue.spin_allowed = false;
  const WorkerSummary s = run_worker_scenario(one_queue);
  expect_clean_and_complete(one_queue, s);
  const WorkerSummary base = run_worker_scenario(spread);
  ASSERT_TRUE(base.ok()) << report(spread, base);
  EXPECT_LT(s.sim_time_us, 2 * base.sim_time_us)
      << "spread over both queues: " << base.sim_time_us << " us\n"
      << report(one_queue, s);
}

// One RC QP pair between the two devices, one worker each, nothing else on the wire.
WorkerScenario one_qp_pair(std::uint64_t seed) {
  WorkerScenario c;
  c.seed = seed;
  c.qps = 1;
  c.loopback_qps = 0;
  c.workers = 1;
  c.strangers = 0;
  return c;
}

// One QP pair streaming large messages at 2 % loss with the daemon's loss window, on workers
// whose every packet costs 1.5 us (about what the udp port's requester spends per 4 KiB frame):
// a turn that sends a window of 32 packets takes 48 us, and a NAK that arrives meanwhile waits
// for its end while every packet after the loss is doomed. With a lossy QP's burst cut at 16
// packets (WorkerConfig::lossy_burst_packets) the NAK is read a burst sooner, so fewer packets
// are sent again, and nothing is lost either way.
WorkerScenario lossy_stream(std::uint64_t seed, std::size_t lossy_burst_packets) {
  WorkerScenario c = one_qp_pair(seed);
  c.ops = 300;
  c.max_outstanding = 16;
  c.max_msg_bytes = 65536;
  c.mtu = transport::PathMtu::k4096;
  c.loss = 0.02;
  c.rate_gbps = 25;
  c.turn_ns = 300;
  c.frame_ns = 1'500;
  c.think_ns = 0;
  c.daemon_qp_config = true;
  c.lossy_burst_packets = lossy_burst_packets;
  return c;
}

TEST(SimWorkerLoop, OnALossyPathABurstCutShortDoomsFewerPackets) {
  std::uint64_t resent_cut = 0, resent_whole = 0, time_cut = 0, time_whole = 0;
  for (const std::uint64_t seed : seeds_from(6001, 6)) {
    for (const std::size_t burst : {std::size_t{16}, std::size_t{0}}) {
      const WorkerScenario c = lossy_stream(seed, burst);
      const WorkerSummary s = run_worker_scenario(c);
      ASSERT_TRUE(s.ok()) << report(c, s);
      ASSERT_EQ(s.completed, c.ops) << report(c, s);
      ASSERT_EQ(s.data_errors + s.completion_errors + s.lost, 0u) << report(c, s);
      (burst != 0 ? resent_cut : resent_whole) += s.retransmitted_packets;
      (burst != 0 ? time_cut : time_whole) += s.sim_time_us;
    }
  }
  std::printf(
      "packets sent again: %llu with the burst cut at 16, %llu without; simulated time "
      "%llu us against %llu\n",
      static_cast<unsigned long long>(resent_cut), static_cast<unsigned long long>(resent_whole),
      static_cast<unsigned long long>(time_cut), static_cast<unsigned long long>(time_whole));
  if (one_seed()) return;
  EXPECT_GT(resent_whole, 0u);
  EXPECT_LT(resent_cut, resent_whole);
}

// Doorbell moderation (WorkerConfig::moderation_ns): one QP pair whose applications keep
// `outstanding` operations of 1 KiB posted, on workers that never spin, so that every idle
// moment is a sleep and every post to a sleeping worker a doorbell. With 32 posted the queues
// are deep enough for the moderation (16), the workers sleep without asking for doorbells and
// the applications ring a fraction of them; every byte still arrives and nothing is sent twice.
// With one posted (a ping-pong) no sleep is moderated: a lone request never waits for one; nor
// where the host has a core for every thread (spin allowed), where a wake-up preempts nobody.
// The simulated time is not compared: a doorbell's wake-up costs the simulator only its latency,
// not the preempted application's core, and there the moderation's waits take longer.
WorkerScenario doorbell_stream(std::uint64_t seed, std::uint32_t outstanding,
                               std::uint64_t moderation_ns) {
  WorkerScenario c = one_qp_pair(seed);
  c.ops = 1000;
  c.max_outstanding = outstanding;
  c.max_msg_bytes = 1024;
  c.mtu = transport::PathMtu::k1024;
  c.spin_ns = 0;
  c.spin_allowed = false;
  c.think_ns = 40'000;
  c.moderation_ns = moderation_ns;
  return c;
}

TEST(SimWorkerLoop, AStreamsWorkerSleepsWithoutDoorbellsAndLosesNothing) {
  for (const std::uint64_t seed : seeds_from(8001, 4)) {
    const WorkerScenario moderated = doorbell_stream(seed, 32, 30'000);
    const WorkerScenario plain = doorbell_stream(seed, 32, 0);
    const WorkerScenario pingpong = doorbell_stream(seed, 1, 30'000);
    WorkerScenario spare_core = moderated;
    spare_core.spin_allowed = true;
    const WorkerSummary m = run_worker_scenario(moderated);
    const WorkerSummary p = run_worker_scenario(plain);
    const WorkerSummary q = run_worker_scenario(pingpong);
    const WorkerSummary r = run_worker_scenario(spare_core);
    expect_clean_and_complete(moderated, m);
    expect_clean_and_complete(plain, p);
    expect_clean_and_complete(pingpong, q);
    expect_clean_and_complete(spare_core, r);
    EXPECT_GT(m.counters.moderated_sleeps, 0u) << report(moderated, m);
    EXPECT_EQ(p.counters.moderated_sleeps, 0u) << report(plain, p);
    EXPECT_EQ(q.counters.moderated_sleeps, 0u) << report(pingpong, q);
    EXPECT_EQ(r.counters.moderated_sleeps, 0u) << report(spare_core, r);
    EXPECT_GT(r.counters.sleeps, 0u) << report(spare_core, r);
    EXPECT_GT(p.doorbells, 0u) << report(plain, p);
    EXPECT_LT(2 * m.doorbells, p.doorbells)
        << "moderated " << m.doorbells << " doorbells, plain " << p.doorbells << "\n"
        << report(moderated, m);
    std::printf(
        "seed %llu: doorbells %llu moderated (%llu of %llu sleeps), %llu plain; "
        "simulated time %llu us against %llu\n",
        static_cast<unsigned long long>(seed), static_cast<unsigned long long>(m.doorbells),
        static_cast<unsigned long long>(m.counters.moderated_sleeps),
        static_cast<unsigned long long>(m.counters.sleeps),
        static_cast<unsigned long long>(p.doorbells),
        static_cast<unsigned long long>(m.sim_time_us),
        static_cast<unsigned long long>(p.sim_time_us));
  }
}

// Receive doorbells (include/xroce/queues.h): the same streams with a receive posted to a sleeping
// worker ringing its doorbell, as before, and without, as the daemon does now. Without, no
// receive rings, fewer doorbells ring in all, and every SEND still finds its receive (the
// responder pulls what was posted since its last pull): every byte arrives, nothing is lost.
TEST(SimWorkerLoop, AReceiverRingsNoDoorbellForItsReceivesAndLosesNothing) {
  for (const std::uint64_t seed : seeds_from(8101, 4)) {
    const WorkerScenario skip = doorbell_stream(seed, 32, 0);
    WorkerScenario ring = skip;
    ring.receive_doorbells = true;
    const WorkerSummary s = run_worker_scenario(skip);
    const WorkerSummary r = run_worker_scenario(ring);
    expect_clean_and_complete(skip, s);
    expect_clean_and_complete(ring, r);
    EXPECT_GT(s.received, 0u) << report(skip, s);
    EXPECT_EQ(s.receive_doorbells, 0u) << report(skip, s);
    EXPECT_GT(r.receive_doorbells, 0u) << report(ring, r);
    EXPECT_LT(s.doorbells, r.doorbells) << report(skip, s);
    std::printf(
        "seed %llu: %llu receives; doorbells %llu (0 for receives, %llu pulled late), "
        "%llu with receive doorbells (%llu for receives)\n",
        static_cast<unsigned long long>(seed), static_cast<unsigned long long>(s.received),
        static_cast<unsigned long long>(s.doorbells),
        static_cast<unsigned long long>(s.receives_pulled_late),
        static_cast<unsigned long long>(r.doorbells),
        static_cast<unsigned long long>(r.receive_doorbells));
  }
}

// One seed, one run: the same scenario twice gives the same run, turn for turn.
TEST(SimWorkerLoop, SameSeedSameRun) {
  const WorkerScenario c = scenario_for(one_seed().value_or(7), true);
  const WorkerSummary a = run_worker_scenario(c);
  const WorkerSummary b = run_worker_scenario(c);
  ASSERT_TRUE(a.ok()) << report(c, a);
  EXPECT_EQ(a.turns, b.turns) << report(c, a);
  EXPECT_EQ(a.sim_time_us, b.sim_time_us);
  EXPECT_EQ(a.retransmitted_packets, b.retransmitted_packets);
  EXPECT_EQ(a.counters.tx_frames, b.counters.tx_frames);
  EXPECT_EQ(a.counters.sleeps, b.counters.sleeps);
  EXPECT_EQ(a.doorbells, b.doorbells);
}

}  // namespace
}  // namespace xroce::daemon::sim
