// Per-packet cost of engine/cc on a worker's transmit and receive paths.
#include <benchmark/benchmark.h>

#include <cstdint>

#include "cc/notification_point.h"
#include "cc/pacer.h"
#include "cc/reaction_point.h"

namespace xroce::cc {
namespace {

constexpr std::uint32_t kPacketBytes = 1024 + 58;  // payload + headers
constexpr double kLineMbps = 100'000;
// Serialisation time of one packet at 100 Gb/s, in ns (rounded): 1082 * 8 / 100 = 86.56.
constexpr TimeNs kPacketGapNs = 87;

// One transmitted packet under congestion: byte counter, due timers, pacer; a CNP every 64
// packets (about every 5.5 µs, so cuts, coalescing and increases all happen).
void BM_TransmitPathWithDcqcn(benchmark::State& state) {
  const DcqcnParams params = DcqcnParams::connectx();
  ReactionPoint rp(params, kLineMbps);
  Pacer pacer;
  TimeNs now = 0;
  std::uint64_t packets = 0;
  for (auto _ : state) {
    if (const auto deadline = rp.next_deadline(); deadline && *deadline <= now) rp.on_timer(now);
    if ((packets & 63) == 0) rp.on_cnp(now);
    if (!pacer.may_send(now)) now = pacer.next_send_ns();
    rp.on_bytes_sent(kPacketBytes, now);
    benchmark::DoNotOptimize(pacer.on_sent(now, kPacketBytes, rp.rate_mbps()));
    now += kPacketGapNs;
    ++packets;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(packets));
  state.counters["final_rate_mbps"] = rp.rate_mbps();
  state.counters["cuts"] = static_cast<double>(rp.counters().rate_cuts);
}
BENCHMARK(BM_TransmitPathWithDcqcn);

// The same without congestion control: the pacer alone at line rate, for comparison.
void BM_TransmitPathPacerOnly(benchmark::State& state) {
  Pacer pacer;
  TimeNs now = 0;
  for (auto _ : state) {
    if (!pacer.may_send(now)) now = pacer.next_send_ns();
    benchmark::DoNotOptimize(pacer.on_sent(now, kPacketBytes, kLineMbps));
    now += kPacketGapNs;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_TransmitPathPacerOnly);

// One CE-marked packet at the receiver.
void BM_NotificationPointPerMarkedPacket(benchmark::State& state) {
  const DcqcnParams params = DcqcnParams::connectx();
  NotificationPoint np;
  TimeNs now = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(np.on_ce_marked(params, 3, now));
    now += kPacketGapNs;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_NotificationPointPerMarkedPacket);

// A CNP after a long quiet spell: alpha catches up a million 1 µs periods in closed form.
void BM_CnpAfterLongIdle(benchmark::State& state) {
  const DcqcnParams params = DcqcnParams::connectx();
  ReactionPoint rp(params, kLineMbps);
  TimeNs now = 0;
  for (auto _ : state) {
    rp.on_cnp(now);
    now += 1'000'000'000;  // 1 s
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_CnpAfterLongIdle);

}  // namespace
}  // namespace xroce::cc
