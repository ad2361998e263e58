// engine/wire: ICRC throughput (ISA-L folding vs the bit-at-a-time reference, same run) and
// whole-frame encode and decode-and-validate rates.
//   <build>/bin/bench/bench_wire --benchmark_counters_tabular=true
// Sizes are RoCE payload bytes; the ICRC covers the IP datagram around them (+60 bytes here).
#include <benchmark/benchmark.h>

#include <vector>

#include "wire/frame.h"
#include "wire/icrc.h"
#include "wire/icrc_reference.h"

namespace {

using namespace xroce::wire;

constexpr std::size_t kEthBytes = 14;

FrameAddress bench_address() {
  FrameAddress a;
  a.src_ip = IpAddr::v4(0xC6120001);
  a.dst_ip = IpAddr::v4(0xC6120002);
  a.traffic_class = 0x6A;
  return a;
}

TransportHeaders send_only() {
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcSendOnly;
  h.bth.dest_qp = Qpn(0x11);
  h.bth.ack_req = true;
  h.bth.psn = Psn(100);
  return h;
}

std::vector<std::uint8_t> bench_frame(std::size_t payload_len) {
  std::vector<std::uint8_t> payload(payload_len);
  for (std::size_t i = 0; i < payload_len; ++i)
    payload[i] = static_cast<std::uint8_t>(i * 31);
  std::vector<std::uint8_t> f(frame_bytes(bench_address(), send_only(), payload_len));
  if (!encode_frame(bench_address(), send_only(), payload, f).ok()) std::abort();
  return f;
}

void set_rates(benchmark::State& state, std::size_t bytes_per_iter) {
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * bytes_per_iter));
  state.counters["GB/s"] =
      benchmark::Counter(iters * bytes_per_iter / 1e9, benchmark::Counter::kIsRate);
  state.counters["Mpps"] = benchmark::Counter(iters / 1e6, benchmark::Counter::kIsRate);
}

template <std::uint32_t (*Icrc)(Bytes)>
void BM_Icrc(benchmark::State& state) {
  const auto f = bench_frame(static_cast<std::size_t>(state.range(0)));
  const Bytes dgram(f.data() + kEthBytes, f.size() - kEthBytes - kIcrcBytes);
  for (auto _ : state)
    benchmark::DoNotOptimize(Icrc(dgram));
  set_rates(state, dgram.size());
}
BENCHMARK(BM_Icrc<icrc_compute>)->Name("icrc/fast_isal")->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_Icrc<reference::icrc>)->Name("icrc/reference_bitwise")->Arg(64)->Arg(1024)->Arg(4096);

void BM_Decode(benchmark::State& state) {
  const auto f = bench_frame(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    auto d = decode_frame(f);
    if (!d.ok() || !d->icrc_ok) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(d);
  }
  set_rates(state, f.size());
}
BENCHMARK(BM_Decode)->Name("frame/decode_and_validate")->Arg(0)->Arg(64)->Arg(1024)->Arg(4096);

void BM_Encode(benchmark::State& state) {
  const std::size_t len = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint8_t> payload(len, 0x5A);
  std::vector<std::uint8_t> out(frame_bytes(bench_address(), send_only(), len));
  const FrameAddress addr = bench_address();
  TransportHeaders h = send_only();
  for (auto _ : state) {
    h.bth.psn += 1;
    auto n = encode_frame(addr, h, payload, out);
    benchmark::DoNotOptimize(n);
    benchmark::ClobberMemory();
  }
  set_rates(state, out.size());
}
BENCHMARK(BM_Encode)->Name("frame/encode")->Arg(0)->Arg(64)->Arg(1024)->Arg(4096);

}  // namespace
