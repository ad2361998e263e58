// The data path in one process, without the host's noise: two workers (the daemon's Worker and
// its loop, engine/daemon/worker.h) joined by an in-memory port, one connected RC QP on each,
// their memory reached through the daemon's real DMA paths (engine/device/dma.h): the shared
// mapping of a memfd the "application" buffer was re-backed with (include/xroce/shared_mr.h), or
// cross-memory attach into this process. One thread runs the two workers turn by turn, as the
// simulator does, so a figure depends on the code, not on wakeups or the scheduler.
//
// BM_DatapathPairs runs 1 and 2 such pairs on as many threads (scaling with workers), each side
// with a ProcessMemory and PD of its own or (/oneprocess, /onepd) all through one. The cases ending
// in /qN run N connected QPs on the same two workers, each over its own part of the buffers (as
// perftest -q N does), with the daemon's device-wide in-flight budget and its QP timers and
// windows: what many QPs cost a worker, apart from the host. /q1000/samebuf runs the 1,000 QPs over
// the same 64 KiB on each side, which the caches hold: against /q1000 it tells the cost of the QPs
// from the cost of the memory they move. /q1000/d16 keeps 16 messages posted on every QP, as
// ib_write_bw -q 1000 -t 16 does, where the others keep one: there the device's budget decides how
// many messages a QP sends per turn (its grant) and so how many ACKs the responder sends.
//
// Reports, per case (operation / message bytes / DMA path [/ QPs] [/ messages per QP], MTU 4096,
// 32 messages in flight, or one per QP where there are more QPs), per data packet (WRITE: request
// packets; READ: response packets):
//   cpu_ns_per_pkt   the benchmark thread's CPU time (the figure on a shared host)
//   wall_ns_per_pkt  wall time (adds what other processes took from this thread)
//   frames_per_pkt   frames through the port (ACKs and READ requests included)
// Instructions per data packet come from callgrind, which counts them exactly on this host
// (perf has no instruction counter in this VM): bench/bench-datapath.sh runs
//   valgrind --tool=callgrind --collect-atstart=no bench_datapath --packets=N --case=NAME
// where this program toggles collection around exactly N data packets after a warm-up.
//
// Run: <build>/bin/bench/bench_datapath [Google Benchmark flags]
//      <build>/bin/bench/bench_datapath --list-cases
//      ... --no-lend: the port lends no transmit buffers (the worker's frames are copied into it)
//      bench/bench-datapath.sh [BUILD_DIR] [PACKETS]   (both figures for every case)
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#define RUNNING_ON_VALGRIND 0
#endif

#include "daemon/worker.h"
#include "device/device.h"
#include "device/dma.h"
#include "transport/memory.h"
#include "xroce/fd.h"
#include "xroce/shared_mr.h"

namespace {

using namespace xroce;
using daemon::Worker;

constexpr std::size_t kBufferBytes = 1 << 22;  // each side's registered buffer, at least
constexpr std::uint32_t kInFlight = 32;  // messages posted and not yet completed over all QPs, or
                                         // one per QP where there are more
constexpr std::uint64_t kLineRateMbps = 100'000;

// --no-lend: the port lends no transmit buffers (the worker's own batch buffers, copied).
bool g_lend = true;

// A port modelled on AF_XDP copy mode: it lends the worker transmit buffers (its UMEM) to encode
// frames in, copies a frame built anywhere else into one first (as AfXdpPort::transmit does),
// and "the kernel" copies each frame into its peer's receive ring (one copy per frame), with
// back-pressure when the ring is full. Single-threaded: the benchmark runs both workers on its
// own thread.
class MemoryPort final : public net::Port {
 public:
  static constexpr std::size_t kSlots = 1024;
  static constexpr std::size_t kSlotBytes = 4096 + 256;
  static constexpr std::size_t kTxBuffers = 64;
  static constexpr std::size_t kTxBufferBytes = 8192;

  MemoryPort()
      : slots_(kSlots, std::vector<std::uint8_t>(kSlotBytes)),
        lengths_(kSlots),
        tx_pool_(kTxBuffers * kTxBufferBytes),
        tx_copy_(kTxBufferBytes) {
    for (std::size_t i = 0; i < kTxBuffers; ++i)
      tx_free_.push_back(i);
  }
  MemoryPort* peer = nullptr;

  net::Result<std::size_t, net::PortError> receive(std::span<net::RxFrame> frames) override {
    std::size_t n = 0;
    while (n < frames.size() && head_ + out_ < tail_) {
      const std::size_t i = (head_ + out_) % kSlots;
      frames[n++] = net::RxFrame{std::span(slots_[i].data(), lengths_[i]), head_ + out_};
      ++out_;
    }
    return n;
  }
  // Frames come back in the order they were handed out (the worker releases a whole batch).
  void release(std::span<const net::RxFrame> frames) override {
    head_ += frames.size();
    out_ -= frames.size();
  }
  net::Result<std::size_t, net::PortError> transmit(std::span<const net::TxFrame> frames) override {
    std::size_t n = 0;
    for (const net::TxFrame& f : frames) {
      if (!peer->has_room() || f.size() > kSlotBytes) break;
      const std::uint8_t* pool = tx_pool_.data();
      if (f.data() >= pool && f.data() < pool + tx_pool_.size()) {
        peer->accept(f);  // built in a lent buffer; "completed" at once
        tx_free_.push_back(static_cast<std::size_t>(f.data() - pool) / kTxBufferBytes);
      } else {
        std::memcpy(tx_copy_.data(), f.data(), f.size());  // into UMEM
        peer->accept(net::TxFrame(tx_copy_.data(), f.size()));
      }
      ++stats_.tx_packets;
      stats_.tx_bytes += f.size();
      ++n;
    }
    return n;
  }
  std::span<std::uint8_t> lend_tx(std::size_t bytes) override {
    if (!g_lend || bytes > kTxBufferBytes || tx_free_.empty()) return {};
    const std::size_t i = tx_free_.back();
    tx_free_.pop_back();
    return {tx_pool_.data() + i * kTxBufferBytes, kTxBufferBytes};
  }
  void return_tx(std::span<const std::uint8_t> lent) override {
    tx_free_.push_back(static_cast<std::size_t>(lent.data() - tx_pool_.data()) / kTxBufferBytes);
  }
  net::Result<std::size_t, net::PortError> flush() override { return std::size_t{0}; }
  int wait_fd() const override { return -1; }
  net::PortStats stats() const override { return stats_; }
  net::PortMode mode() const override { return net::PortMode::kAfXdpCopy; }
  std::size_t max_frame_bytes() const override { return kSlotBytes; }

 private:
  bool has_room() const { return tail_ - head_ < kSlots; }
  void accept(net::TxFrame f) {
    const std::size_t i = tail_ % kSlots;
    std::memcpy(slots_[i].data(), f.data(), f.size());
    lengths_[i] = f.size();
    ++tail_;
  }

  std::vector<std::vector<std::uint8_t>> slots_;
  std::vector<std::size_t> lengths_;
  std::uint64_t head_ = 0, tail_ = 0, out_ = 0;
  std::vector<std::uint8_t> tx_pool_;
  std::vector<std::size_t> tx_free_;
  std::vector<std::uint8_t> tx_copy_;
  net::PortStats stats_;
};

// The benchmark's workers never sleep: every turn runs.
class SpinningSleeper final : public daemon::Sleeper {
 public:
  void notify() override {}
  bool spin_allowed(std::uint64_t) override { return true; }
  void watch_doorbell(int) override {}
  void unwatch_doorbell(int) override {}
  std::optional<daemon::Wakeup> wait(const daemon::WaitSet&, std::uint64_t) override {
    return daemon::Wakeup{};
  }
};

// The application's side of one QP: keeps `in_flight` copies of one work request posted. As the
// provider does, it sets its QP's ready bit (include/xroce/queues.h) when it has work, here when
// a completion frees room for another post, so the worker pulls only the QPs that have some.
class RepeatBinding final : public daemon::QpBinding {
 public:
  RepeatBinding(transport::WorkRequest wr, wire::FrameAddress av, std::uint32_t in_flight,
                daemon::ReadyBit ready)
      : wr_(std::move(wr)), av_(av), in_flight_(in_flight), ready_(ready) {}
  bool pull_work_on_worker(transport::Qp& qp) override {
    if (!posting) return false;
    bool any = false;
    while (posted - completed < in_flight_) {
      wr_.wr_id = posted++;
      if (qp.post_send(wr_) != 0) std::abort();
      any = true;
    }
    return any;
  }
  bool work_pending_on_worker() const override { return false; }
  void complete_on_worker(const transport::Completion& c) override {
    if (c.status != transport::WcStatus::kSuccess) std::abort();  // a benchmark of failures is none
    ++completed;
    if (posting) daemon::ReadyRings::mark_ready(ready_);
  }
  daemon::ReadyBit ready_bit_on_worker() const override { return ready_; }
  void event_on_worker(const transport::AsyncEvent&) override {}
  const wire::FrameAddress* address_on_worker(std::uint32_t) override { return &av_; }

  bool posting = true;  // false: the receiving side, which posts nothing
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;

 private:
  transport::WorkRequest wr_;
  wire::FrameAddress av_;
  std::uint32_t in_flight_;
  daemon::ReadyBit ready_;
};

enum class Op { kWrite, kRead };
enum class Dma { kShared, kCma };

enum class Sharing : std::uint8_t { kNothing, kProcess, kPd, kDevice };

struct Case {
  Op op;
  std::uint32_t bytes;
  Dma dma;
  std::uint32_t qps = 1;
  bool same_buffer = false;  // every QP over the first message's room instead of its own
  std::uint32_t depth = 0;   // messages each QP keeps posted; 0: kInFlight over all QPs
  // What the sides of every pair share, as a daemon's workers do when one application's QPs are
  // spread over them: nothing (each side its own process and PD), one ProcessMemory
  // (/oneprocess), that and one MemoryRegionTable, the application's one PD (/onepd), or those
  // and the device: the requesting sides of all pairs one device's in-flight budget, the
  // responding sides another's (/onedevice).
  Sharing sharing = Sharing::kNothing;
  std::string name() const {
    return std::string(op == Op::kWrite ? "write" : "read") + "/" + std::to_string(bytes) + "/" +
           (dma == Dma::kShared ? "shared" : "cma") +
           (qps > 1 ? "/q" + std::to_string(qps) : std::string()) +
           (same_buffer ? "/samebuf" : "") + (depth > 0 ? "/d" + std::to_string(depth) : "") +
           (sharing == Sharing::kProcess  ? "/oneprocess"
            : sharing == Sharing::kPd     ? "/onepd"
            : sharing == Sharing::kDevice ? "/onedevice"
                                          : "");
  }
  std::uint64_t offset_of_qp(std::uint32_t i) const {
    return same_buffer ? 0 : static_cast<std::uint64_t>(i) * bytes;
  }
  // Messages each QP keeps posted.
  std::uint32_t in_flight_per_qp() const {
    return depth > 0 ? depth : std::max(1u, kInFlight / qps);
  }
  // Each side's buffer: a message's room per QP (QP i at i * bytes).
  std::size_t buffer_bytes() const {
    return std::max(kBufferBytes, static_cast<std::size_t>(same_buffer ? 1 : qps) * bytes);
  }
};

const std::vector<Case> kCases = {
    {Op::kWrite, 64, Dma::kShared},
    {Op::kWrite, 64, Dma::kCma},
    {Op::kWrite, 4096, Dma::kShared},
    {Op::kWrite, 4096, Dma::kCma},
    {Op::kWrite, 65536, Dma::kShared},
    {Op::kWrite, 65536, Dma::kCma},
    {Op::kRead, 4096, Dma::kShared},
    {Op::kRead, 65536, Dma::kShared},
    {Op::kRead, 65536, Dma::kCma},
    {Op::kWrite, 65536, Dma::kShared, 64},
    {Op::kWrite, 65536, Dma::kShared, 1000},
    {Op::kWrite, 65536, Dma::kShared, 1000, true},
    {Op::kWrite, 65536, Dma::kShared, 1000, false, 16},
};

// The pidfd the DMA layer polls to learn that the client process exited. valgrind 3.19
// (Debian 12) does not know pidfd_open (Linux 5.3) and fails it with ENOSYS; under it the
// bench passes an eventfd nobody writes instead (never readable: "the process has not
// exited"), so the DMA paths run unchanged under callgrind.
Fd own_pidfd() {
  const long fd = syscall(SYS_pidfd_open, getpid(), 0);
  if (fd >= 0) return Fd(static_cast<int>(fd));
  return Fd(eventfd(0, EFD_CLOEXEC));
}

// The one ProcessMemory of this process that the sides of /oneprocess and /onepd cases share,
// the one PD (MemoryRegionTable) over it that /onepd sides share, and the lock that stands for
// the daemon's control thread: add_shared, remove_shared, registration and deregistration are
// its alone.
std::shared_ptr<device::ProcessMemory> one_process_memory() {
  static const auto memory = std::make_shared<device::ProcessMemory>(
      getpid(), own_pidfd(), Fd(open("/proc/self/mem", O_RDWR | O_CLOEXEC)),
      Fd(open("/proc/self/maps", O_RDONLY | O_CLOEXEC)));
  return memory;
}
std::shared_ptr<transport::MemoryRegionTable> one_pd() {
  static const auto pd = std::make_shared<transport::MemoryRegionTable>(*one_process_memory());
  return pd;
}
// The in-flight budgets of the two devices of /onedevice: 0 the requesting sides', 1 the
// responding sides'.
std::shared_ptr<transport::InflightBudget> one_device_budget(int device) {
  static const std::shared_ptr<transport::InflightBudget> budgets[2] = {
      std::make_shared<transport::InflightBudget>(device::Device::kInflightBudgetPsns),
      std::make_shared<transport::InflightBudget>(device::Device::kInflightBudgetPsns)};
  return budgets[device];
}
std::mutex g_control;

// One side: a device with one worker and a QP whose memory is this process's, through `dma`.
struct Side {
  daemon::QpRoutes routes;
  MemoryPort* port = nullptr;
  std::unique_ptr<Worker> worker;
  std::shared_ptr<device::ProcessMemory> memory;
  std::shared_ptr<transport::MemoryRegionTable> mrs;
  std::uint8_t* buffer = nullptr;
  std::size_t buffer_bytes = 0;
  transport::MemoryRegion mr;
  std::vector<RepeatBinding*> bindings;  // one per QP, in QP order
  // The ready bits of the side's "context", bit i for QP i (kReadyBits of them).
  std::unique_ptr<queues::ContextPage> page = std::make_unique<queues::ContextPage>();
  // The device's bound on its RC QPs' unacknowledged PSNs (engine/device/device.h): the grants
  // it deals decide which of many QPs send. Its release hook is not set: the benchmark's workers
  // never sleep, and each turn looks at the QPs waiting for it.
  std::shared_ptr<transport::InflightBudget> budget =
      std::make_shared<transport::InflightBudget>(device::Device::kInflightBudgetPsns);

  Sharing sharing = Sharing::kNothing;

  Side(Dma dma, std::size_t bytes, std::unique_ptr<MemoryPort> p, Sharing shares)
      : buffer_bytes(bytes), sharing(shares) {
    port = p.get();
    daemon::WorkerConfig wc;
    wc.routes = &routes;
    wc.port = std::move(p);
    wc.sleeper = std::make_unique<SpinningSleeper>();
    wc.spin_ns = UINT64_MAX;
    wc.cc.line_rate_mbps = kLineRateMbps;
    worker = std::make_unique<Worker>(std::move(wc));
    worker->attach_to_this_thread();
    void* b =
        mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) std::abort();
    buffer = static_cast<std::uint8_t*>(b);
    std::memset(buffer, 0x5A, buffer_bytes);
    memory = sharing != Sharing::kNothing
                 ? one_process_memory()
                 : std::make_shared<device::ProcessMemory>(
                       getpid(), own_pidfd(), Fd(open("/proc/self/mem", O_RDWR | O_CLOEXEC)),
                       Fd(open("/proc/self/maps", O_RDONLY | O_CLOEXEC)));
    if (dma == Dma::kShared) {
      const int memfd = control::share_region(buffer, buffer_bytes);
      const std::lock_guard control_thread(g_control);
      if (memfd < 0 ||
          memory->add_shared(memfd, reinterpret_cast<std::uint64_t>(buffer), buffer_bytes) != 0) {
        std::fprintf(stderr, "bench_datapath: the shared mapping could not be set up\n");
        std::exit(1);
      }
    }
    mrs = sharing >= Sharing::kPd ? one_pd()
                                  : std::make_shared<transport::MemoryRegionTable>(*memory);
    const std::lock_guard control_thread(g_control);
    mr = mrs->register_region(reinterpret_cast<std::uint64_t>(buffer), buffer_bytes,
                              transport::access::kLocalWrite | transport::access::kRemoteWrite |
                                  transport::access::kRemoteRead);
  }
  ~Side() {
    worker.reset();  // its QP uses the memory below
    const std::lock_guard control_thread(g_control);
    if (sharing >= Sharing::kPd) mrs->deregister(mr.lkey);
    mrs.reset();
    // The next case's buffer may land at this one's address.
    if (sharing != Sharing::kNothing) memory->remove_shared(addr());
    memory.reset();
    munmap(buffer, buffer_bytes);
  }
  std::uint64_t addr() const { return reinterpret_cast<std::uint64_t>(buffer); }
  std::uint64_t completed() const {
    std::uint64_t n = 0;
    for (const RepeatBinding* b : bindings)
      n += b->completed;
    return n;
  }
};

wire::FrameAddress address(std::uint8_t src, std::uint8_t dst) {
  wire::FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0, src};
  a.dst_mac = {0x02, 0, 0, 0, 0, dst};
  a.src_ip = wire::IpAddr::v4(0xC6120000u | src);  // 198.18.0.x
  a.dst_ip = wire::IpAddr::v4(0xC6120000u | dst);
  return a;
}

void connect(transport::Qp& qp, wire::Qpn peer) {
  namespace m = transport::qp_attr;
  transport::QpAttr at;
  at.qp_access_flags = transport::access::kRemoteWrite | transport::access::kRemoteRead;
  at.path_mtu = transport::PathMtu::k4096;
  at.dest_qp_num = peer;
  at.max_rd_atomic = at.max_dest_rd_atomic = 16;
  at.timeout = 14;
  at.retry_cnt = 7;
  at.rnr_retry = 7;
  at.qp_state = transport::QpState::kInit;
  qp.modify(at, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags);
  at.qp_state = transport::QpState::kRtr;
  qp.modify(at, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn | m::kMaxDestRdAtomic |
                    m::kMinRnrTimer);
  at.qp_state = transport::QpState::kRts;
  qp.modify(at,
            m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic);
}

// The requester (side a) WRITEs to or READs from the responder (side b), over two workers.
struct Bench {
  std::unique_ptr<Side> a, b;

  explicit Bench(const Case& c) {
    auto pa = std::make_unique<MemoryPort>();
    auto pb = std::make_unique<MemoryPort>();
    pa->peer = pb.get();
    pb->peer = pa.get();
    a = std::make_unique<Side>(c.dma, c.buffer_bytes(), std::move(pa), c.sharing);
    b = std::make_unique<Side>(c.dma, c.buffer_bytes(), std::move(pb), c.sharing);
    if (c.sharing == Sharing::kDevice) {
      a->budget = one_device_budget(0);
      b->budget = one_device_budget(1);
    }
    for (std::uint32_t i = 0; i < c.qps; ++i) {
      const wire::Qpn qa(0x11 + i), qb(0x100000 + i);
      const std::uint64_t offset = c.offset_of_qp(i);
      transport::WorkRequest wr;
      wr.opcode =
          c.op == Op::kWrite ? transport::WrOpcode::kRdmaWrite : transport::WrOpcode::kRdmaRead;
      wr.send_flags = transport::send_flags::kSignaled;
      wr.sg_list = {transport::Sge{a->addr() + offset, c.bytes, a->mr.lkey}};
      wr.remote_addr = b->addr() + offset;
      wr.rkey = b->mr.rkey;
      place(c, *a, qa, qb, address(1, 2), wr, true);
      place(c, *b, qb, qa, address(2, 1), wr, false);
    }
  }

  // Each QP as the daemon configures it: its timers and windows, and the device's budget.
  static void place(const Case& c, Side& s, wire::Qpn qpn, wire::Qpn peer,
                    const wire::FrameAddress& av, const transport::WorkRequest& wr, bool posting) {
    transport::QpConfig cfg;
    cfg.qpn = qpn;
    cfg.max_send_wr = c.in_flight_per_qp();
    transport::use_daemon_timers_and_windows(cfg);
    cfg.inflight_budget = s.budget;
    auto qp = std::make_unique<transport::Qp>(cfg, *s.mrs);
    connect(*qp, peer);
    const daemon::ReadyBit ready{s.page.get(), static_cast<std::uint32_t>(s.bindings.size())};
    auto binding = std::make_unique<RepeatBinding>(wr, av, c.in_flight_per_qp(), ready);
    binding->posting = posting;
    s.bindings.push_back(binding.get());
    s.routes.set(qpn, 0);
    s.worker->add_qp_on_worker(daemon::HostedQp{std::move(qp), std::move(binding)});
  }

  void turn() {
    a->worker->run_once_on_worker();
    b->worker->run_once_on_worker();
  }
  // Buffers faulted in, windows open, and every QP past its first messages.
  void warm_up(const Case& c) {
    for (std::uint32_t i = 0; i < std::max(1000u, 10 * c.qps); ++i)
      turn();
  }
  // Data packets so far: WRITE requests (a's frames) or READ responses (b's frames).
  std::uint64_t data_packets(Op op) const {
    return (op == Op::kWrite ? a : b)->port->stats().tx_packets;
  }
  std::uint64_t frames() const { return a->port->stats().tx_packets + b->port->stats().tx_packets; }
};

std::uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

void BM_Datapath(benchmark::State& state, Case c) {
  Bench bench(c);
  bench.warm_up(c);
  const std::uint64_t packets0 = bench.data_packets(c.op), frames0 = bench.frames();
  const std::uint64_t done0 = bench.a->completed();
  const std::uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), wall0 = clock_ns(CLOCK_MONOTONIC);
  for (auto _ : state)
    bench.turn();
  const double cpu_ns = static_cast<double>(clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0);
  const double wall_ns = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - wall0);
  const double packets = static_cast<double>(bench.data_packets(c.op) - packets0);
  const double frames = static_cast<double>(bench.frames() - frames0);
  if (packets == 0) {
    state.SkipWithError("no packet moved");
    return;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bench.a->completed() - done0) * c.bytes);
  // CPU time is the figure on a shared host; wall time adds what other processes took. With
  // several threads (worker pairs) each figure is the threads' average; bytes_per_second is
  // their sum.
  using benchmark::Counter;
  state.counters["cpu_ns_per_pkt"] = Counter(cpu_ns / packets, Counter::kAvgThreads);
  state.counters["wall_ns_per_pkt"] = Counter(wall_ns / packets, Counter::kAvgThreads);
  state.counters["frames_per_pkt"] = Counter(frames / packets, Counter::kAvgThreads);
}

// --packets=N --case=NAME: exactly N data packets of one case with callgrind collecting (and
// nothing else), after a warm-up; prints what ran. --case=all runs every case in turn (ctest's
// bench.datapath_cases: every case must move its packets, and every completion must be a
// success, or the program fails). A case that stops moving packets fails rather than spin.
int run_counted_case(const Case& c, std::uint64_t packets) {
  Bench bench(c);
  bench.warm_up(c);
  const std::uint64_t start = bench.data_packets(c.op), frames0 = bench.frames();
  const std::uint64_t max_turns = 1000 + packets * 10;  // far beyond need: a turn moves 16-250
  std::uint64_t turns = 0;
  CALLGRIND_TOGGLE_COLLECT;
  while (bench.data_packets(c.op) - start < packets && turns < max_turns) {
    bench.turn();
    ++turns;
  }
  CALLGRIND_TOGGLE_COLLECT;
  const std::uint64_t moved = bench.data_packets(c.op) - start;
  std::printf("case %s data_packets %llu frames %llu turns %llu\n", c.name().c_str(),
              static_cast<unsigned long long>(moved),
              static_cast<unsigned long long>(bench.frames() - frames0),
              static_cast<unsigned long long>(turns));
  if (moved < packets) {
    std::fprintf(stderr, "bench_datapath: case %s moved %llu of %llu packets in %llu turns\n",
                 c.name().c_str(), static_cast<unsigned long long>(moved),
                 static_cast<unsigned long long>(packets), static_cast<unsigned long long>(turns));
    return 1;
  }
  return 0;
}

int run_counted(std::string_view name, std::uint64_t packets) {
  int rc = 0;
  for (const Case& c : kCases) {
    if (name == "all") {
      rc |= run_counted_case(c, packets);
    } else if (c.name() == name) {
      return run_counted_case(c, packets);
    }
  }
  if (name == "all") return rc;
  std::fprintf(stderr, "bench_datapath: no case %.*s; cases:", static_cast<int>(name.size()),
               name.data());
  for (const Case& c : kCases)
    std::fprintf(stderr, " %s", c.name().c_str());
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view counted_case;
  std::uint64_t counted_packets = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--list-cases") {
      for (const Case& c : kCases)
        std::printf("%s\n", c.name().c_str());
      return 0;
    }
    if (arg.starts_with("--packets=")) counted_packets = std::strtoull(argv[i] + 10, nullptr, 10);
    if (arg.starts_with("--case=")) counted_case = arg.substr(7);
    if (arg == "--no-lend") g_lend = false;
  }
  if (counted_packets > 0) return run_counted(counted_case, counted_packets);
  for (const Case& c : kCases)
    benchmark::RegisterBenchmark(("BM_Datapath/" + c.name()).c_str(), BM_Datapath, c);
  // Scaling with workers: 1 and 2 independent worker pairs, each pair (two workers, its port,
  // its QPs and memory) on its own thread, as a device with one worker per queue and one flow
  // per queue runs them. The aggregate bytes_per_second against wall time is the figure: 2
  // pairs on 2 free cores should move twice what one moves; what they share (memory bandwidth,
  // the allocator, cache) is what keeps them below. /oneprocess: all four sides reach their
  // buffers through one ProcessMemory, and /onepd through one MemoryRegionTable too, as the
  // workers of a device reach one application's QPs spread over them; what the workers then
  // share of it is measured too.
  for (const Sharing sharing :
       {Sharing::kNothing, Sharing::kProcess, Sharing::kPd, Sharing::kDevice}) {
    for (const int pairs : {1, 2}) {
      Case c{Op::kWrite, 65536, Dma::kShared};
      c.sharing = sharing;
      benchmark::RegisterBenchmark(("BM_DatapathPairs/" + c.name()).c_str(), BM_Datapath, c)
          ->Threads(pairs)
          ->UseRealTime();
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
