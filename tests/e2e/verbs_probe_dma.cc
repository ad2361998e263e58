// verbs_probe's registered-memory modes (docs/ARCHITECTURE.md decision 5: the daemon reaches a
// region through a shared mapping of a memfd, or through cross-memory attach):
//
//   verbs_probe DEV dma_regions  register a page-aligned anonymous buffer (shareable) and a part
//                                of a page (not), print "mr shared|cma ADDR LENGTH" for each as
//                                /proc/self/maps shows it, "ready", wait for SIGUSR1 (60 s at
//                                most), deregister, and check the buffer is private again with
//                                its contents kept
//   verbs_probe DEV dma_hold     register both kinds, print "ready", wait to be killed (60 s)
//   verbs_probe DEV dma_loopback N  two RC QPs on this device connected to each other: RDMA
//                                WRITE a pattern into a region, READ it back, and N fetch-and-adds
//                                on one word while this process's CPU adds to the same word;
//                                prints "dma shared|cma" for the target, "atomic_total T of E"
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "verbs_probe.h"
#include "xroce/proc_maps.h"

namespace xroce::probe {

namespace {

constexpr std::size_t kRegionBytes = 64 * 1024;
// What one device fetch-and-add adds: far above what the CPU's adds can reach in a run, so the
// two counts can be read apart from the word.
constexpr std::uint64_t kDeviceAdd = std::uint64_t{1} << 32;
constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// "shared" when [addr, addr + length) is mapped from the provider's memfd, else "cma" (what the
// provider leaves as it was: the daemon then reaches it by cross-memory access).
std::string backing_of(const void* addr, std::size_t length) {
  std::string maps;
  if (xroce::proc::read_all("/proc/self/maps", maps) != 0) return "cma";
  const bool shared = xroce::proc::covers(
      maps, reinterpret_cast<std::uintptr_t>(addr), length, [](const xroce::proc::Mapping& m) {
        return m.path.find("/memfd:xroce-mr") != std::string_view::npos;
      });
  return shared ? "shared" : "cma";
}

void* map_anonymous(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void fill(std::uint8_t* p, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<std::uint8_t>(seed + i * 7);
}

bool holds(const std::uint8_t* p, std::size_t n, std::uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<std::uint8_t>(seed + i * 7)) return false;
  return true;
}

// Waits for SIGUSR1 up to `seconds`; true if it came.
bool wait_for_usr1(int seconds) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  timespec limit{seconds, 0};
  return sigtimedwait(&set, nullptr, &limit) == SIGUSR1;
}

void block_usr1() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

void print_region(const char* expected, const void* addr, std::size_t length) {
  std::printf("mr %s %" PRIu64 " %zu\n", backing_of(addr, length).c_str(),
              static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(addr)), length);
  check(backing_of(addr, length) == expected, expected);
}

}  // namespace

int dma_regions(ibv_context* ctx, bool hold) {
  block_usr1();  // before "ready": the signal must wait for sigtimedwait
  ibv_pd* pd = ibv_alloc_pd(ctx);
  auto* whole = static_cast<std::uint8_t*>(map_anonymous(kRegionBytes));
  auto* partial = static_cast<std::uint8_t*>(map_anonymous(kRegionBytes));
  check(pd != nullptr && whole != nullptr && partial != nullptr, "setup");
  if (pd == nullptr || whole == nullptr || partial == nullptr) return 1;
  fill(whole, kRegionBytes, 1);
  // Part of a page cannot be re-backed without touching its neighbours: cross-memory attach.
  constexpr std::size_t kPartialOffset = 100;
  constexpr std::size_t kPartialBytes = 1000;
  ibv_mr* shared = ibv_reg_mr(pd, whole, kRegionBytes, kAllAccess);
  ibv_mr* cma = ibv_reg_mr(pd, partial + kPartialOffset, kPartialBytes, kAllAccess);
  check(shared != nullptr && cma != nullptr, "reg_mr");
  if (shared == nullptr || cma == nullptr) return 1;
  print_region("shared", whole, kRegionBytes);
  print_region("cma", partial + kPartialOffset, kPartialBytes);
  check(holds(whole, kRegionBytes, 1), "contents_kept_when_shared");
  std::printf("ready\n");
  std::fflush(stdout);
  if (!wait_for_usr1(60) || hold) return 1;
  check(ibv_dereg_mr(shared) == 0 && ibv_dereg_mr(cma) == 0, "dereg_mr");
  check(backing_of(whole, kRegionBytes) == "cma", "private_again_after_dereg");
  check(holds(whole, kRegionBytes, 1), "contents_kept_after_dereg");
  // Registering it again shares it again.
  ibv_mr* again = ibv_reg_mr(pd, whole, kRegionBytes, kAllAccess);
  check(again != nullptr && backing_of(whole, kRegionBytes) == "shared", "shared_again");
  if (again != nullptr) check(ibv_dereg_mr(again) == 0, "dereg_again");
  check(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
  std::printf("done\n");
  return 0;
}

namespace {

struct Loop {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp[2] = {nullptr, nullptr};
};

ibv_qp* make_rc(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 64;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &init);
}

// Posts one signaled work request and waits (busy-polling, 10 s at most) for its completion.
bool run_one(const Loop& loop, ibv_send_wr& wr) {
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(loop.qp[0], &wr, &bad) != 0) return false;
  ibv_wc wc{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(loop.cq, 1, &wc);
    if (n < 0) return false;
    if (n == 1) return wc.status == IBV_WC_SUCCESS;
  }
  return false;
}

}  // namespace

int dma_loopback(ibv_context* ctx, int atomics) {
  Loop loop;
  ibv_gid gid{};
  loop.pd = ibv_alloc_pd(ctx);
  loop.cq = ibv_create_cq(ctx, 128, nullptr, nullptr, 0);
  if (loop.pd != nullptr && loop.cq != nullptr) {
    loop.qp[0] = make_rc(loop.pd, loop.cq);
    loop.qp[1] = make_rc(loop.pd, loop.cq);
  }
  const bool made = loop.qp[0] != nullptr && loop.qp[1] != nullptr &&
                    ibv_query_gid(ctx, 1, 0, &gid) == 0 &&
                    connect_qp(loop.qp[0], loop.qp[1]->qp_num, gid) &&
                    connect_qp(loop.qp[1], loop.qp[0]->qp_num, gid);
  auto* target = static_cast<std::uint8_t*>(map_anonymous(kRegionBytes));
  auto* local = static_cast<std::uint8_t*>(map_anonymous(kRegionBytes));
  check(made && target != nullptr && local != nullptr, "setup");
  if (!made || target == nullptr || local == nullptr) return 1;
  ibv_mr* remote_mr = ibv_reg_mr(loop.pd, target, kRegionBytes, kAllAccess);
  ibv_mr* local_mr = ibv_reg_mr(loop.pd, local, kRegionBytes, kAllAccess);
  check(remote_mr != nullptr && local_mr != nullptr, "reg_mr");
  if (remote_mr == nullptr || local_mr == nullptr) return 1;
  const std::string dma = backing_of(target, kRegionBytes);
  std::printf("dma %s\n", dma.c_str());

  // RDMA WRITE a pattern into the target, then READ it back into a cleared local buffer.
  fill(local, kRegionBytes, 3);
  ibv_sge sge{reinterpret_cast<std::uint64_t>(local), kRegionBytes, local_mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = reinterpret_cast<std::uint64_t>(target);
  wr.wr.rdma.rkey = remote_mr->rkey;
  check(run_one(loop, wr) && holds(target, kRegionBytes, 3), "rdma_write_data");
  std::memset(local, 0, kRegionBytes);
  wr.opcode = IBV_WR_RDMA_READ;
  check(run_one(loop, wr) && holds(local, kRegionBytes, 3), "rdma_read_data");

  // Fetch-and-add on one word, from the device and from this CPU at the same time. Through the
  // shared mapping both are CPU atomics on the same page: no increment is lost.
  auto* word = reinterpret_cast<std::uint64_t*>(target + 4096);
  *word = 0;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> cpu_adds{0};
  std::thread cpu([&] {
    std::atomic_ref<std::uint64_t> w(*word);
    while (!stop.load(std::memory_order_relaxed)) {
      w.fetch_add(1);
      cpu_adds.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::yield();  // leave the daemon some of the machine's CPU
    }
  });
  bool all_ok = true;
  std::vector<std::uint64_t> seen;
  sge = {reinterpret_cast<std::uint64_t>(local), 8, local_mr->lkey};
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = reinterpret_cast<std::uint64_t>(word);
  wr.wr.atomic.rkey = remote_mr->rkey;
  wr.wr.atomic.compare_add = kDeviceAdd;
  // At least `atomics` adds from each side, overlapping (bounded, in case the CPU thread is
  // starved).
  std::uint64_t device_adds = 0;
  const auto want = static_cast<std::uint64_t>(atomics);
  while (all_ok && (device_adds < want || cpu_adds.load() < want) && device_adds < 20 * want) {
    all_ok = run_one(loop, wr);
    ++device_adds;
    std::uint64_t original = 0;
    std::memcpy(&original, local, sizeof original);
    seen.push_back(original);
  }
  stop = true;
  cpu.join();
  check(all_ok, "atomics_complete");
  const std::uint64_t expected = device_adds * kDeviceAdd + cpu_adds.load();
  const std::uint64_t total = std::atomic_ref<std::uint64_t>(*word).load();
  std::printf("atomic_total %" PRIu64 " of %" PRIu64 " (device adds %" PRIu64 ", cpu adds %" PRIu64
              ", cpu adds lost %" PRIu64 ")\n",
              total, expected, device_adds, cpu_adds.load(), expected - total);
  // Cross-memory attach is atomic against other device atomics only (dma.h): CPU adds made
  // between its read and its write are lost, so there only the device's own adds are checked.
  if (dma == "shared") check(total == expected, "atomic_total");
  check(total / kDeviceAdd == device_adds, "atomic_device_adds");
  bool increasing = true;  // each fetch saw every device add before it
  for (std::size_t i = 1; i < seen.size(); ++i)
    increasing = increasing && seen[i] / kDeviceAdd == seen[i - 1] / kDeviceAdd + 1;
  check(increasing, "atomic_originals");
  check(ibv_destroy_qp(loop.qp[0]) == 0 && ibv_destroy_qp(loop.qp[1]) == 0, "destroy_qp");
  check(ibv_dereg_mr(remote_mr) == 0 && ibv_dereg_mr(local_mr) == 0, "dereg_mr");
  ibv_destroy_cq(loop.cq);
  ibv_dealloc_pd(loop.pd);
  return 0;
}

}  // namespace xroce::probe
