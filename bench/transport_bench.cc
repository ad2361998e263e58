// engine/transport: packets per second through requester + responder + completer with no I/O.
// Two QPs in one thread; request packets go straight from one QP's poll_transmit into the
// other's handle_packet, ACKs come back the same way (in batches, so the responder coalesces
// as it would behind a real receive burst). Every WRITE is signaled and its CQE polled.
#include <benchmark/benchmark.h>

#include <array>
#include <memory>

#include "transport/memory.h"
#include "transport/qp.h"

namespace {

using namespace xroce::transport;
namespace wire = xroce::wire;

constexpr std::size_t kBatchPackets = 32;
constexpr std::size_t kQueueDepth = 128;

struct Pair {
  LocalMemory mem;
  MemoryRegionTable mrs{mem};
  std::unique_ptr<Qp> a, b;
  std::uint64_t src = 0, dst = 0;
  MemoryRegion src_mr, mr;

  Pair(PathMtu mtu, std::size_t bytes) {
    src = mem.allocate(bytes);
    dst = mem.allocate(bytes);
    const std::uint32_t all =
        access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
    src_mr = mrs.register_region(src, bytes, all);
    mr = mrs.register_region(dst, bytes, all);
    QpConfig ca, cb;
    ca.qpn = wire::Qpn(1);
    cb.qpn = wire::Qpn(2);
    ca.max_send_wr = cb.max_send_wr = kQueueDepth;
    a = std::make_unique<Qp>(ca, mrs);
    b = std::make_unique<Qp>(cb, mrs);
    connect(*a, 2, mtu);
    connect(*b, 1, mtu);
  }

  static void connect(Qp& qp, std::uint32_t peer, PathMtu mtu) {
    namespace m = qp_attr;
    QpAttr at;
    at.qp_access_flags = access::kRemoteWrite;
    at.path_mtu = mtu;
    at.dest_qp_num = wire::Qpn(peer);
    at.max_rd_atomic = at.max_dest_rd_atomic = 4;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.qp_state = QpState::kInit;
    qp.modify(at, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags);
    at.qp_state = QpState::kRtr;
    qp.modify(at, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMaxDestRdAtomic |
                      m::kMinRnrTimer);
    at.qp_state = QpState::kRts;
    qp.modify(
        at, m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic);
  }
};

void write_packets(benchmark::State& state, PathMtu mtu) {
  const auto bytes = static_cast<std::uint32_t>(state.range(0));
  Pair p(mtu, bytes);
  WorkRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = {Sge{p.src, bytes, p.src_mr.lkey}};
  wr.remote_addr = p.dst;
  wr.rkey = p.mr.rkey;
  std::array<std::uint8_t, 4096> buf{};
  std::uint64_t now = 0, packets = 0, completions = 0;
  for (auto _ : state) {
    while (p.a->send_queue_depth() < kQueueDepth)
      p.a->post_send(wr);
    for (std::size_t i = 0; i < kBatchPackets; ++i) {
      auto t = p.a->poll_transmit(now, buf);
      if (!t) break;
      p.b->handle_packet(now, t->hdr, wire::Bytes(buf.data(), t->payload_len));
      ++packets;
    }
    while (auto t = p.b->poll_transmit(now, buf))
      p.a->handle_packet(now, t->hdr, wire::Bytes(buf.data(), t->payload_len));
    while (p.a->poll_completion())
      ++completions;
    now += 1000;
  }
  if (p.a->state() != QpState::kRts || completions == 0) state.SkipWithError("QP failed");
  state.counters["packets_per_s"] =
      benchmark::Counter(static_cast<double>(packets), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<std::int64_t>(completions) * bytes);
}

void BM_TransportWriteMtu1024(benchmark::State& s) {
  write_packets(s, PathMtu::k1024);
}
void BM_TransportWriteMtu4096(benchmark::State& s) {
  write_packets(s, PathMtu::k4096);
}

BENCHMARK(BM_TransportWriteMtu1024)->Arg(64)->Arg(4096);
BENCHMARK(BM_TransportWriteMtu4096)->Arg(64)->Arg(4096);

}  // namespace
