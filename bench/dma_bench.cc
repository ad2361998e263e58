// Cost of one registered-memory access from the daemon into a client process, per DMA path
// (dma.h): cross-memory access (pread/pwrite on the client's own /proc/self/mem) against the
// shared mapping (memcpy / CPU atomics). A forked child plays the application, handing over what
// the provider hands over at hello. process_vm_readv is measured beside it for comparison.
// Run: <build>/bin/bench/bench_dma
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "device/dma.h"
#include "transport/memory.h"
#include "xroce/fd_passing.h"
#include "xroce/shared_mr.h"

namespace {

using xroce::device::ProcessMemory;

constexpr std::size_t kBufferBytes = 1 << 20;

struct Client {
  pid_t pid = -1;
  int sock = -1;
  std::uint64_t plain = 0;   // served by cross-memory attach
  std::uint64_t shared = 0;  // re-backed with a memfd, mapped by `memory`
  bool shared_ok = false;
  std::unique_ptr<ProcessMemory> memory;
};

[[noreturn]] void child_main(int sock) {
  auto map = [] {
    void* p =
        ::mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    std::memset(p, 1, kBufferBytes);
    return p;
  };
  void* plain = map();
  void* shared = map();
  const int fds[] = {xroce::control::share_region(shared, kBufferBytes),
                     ::open("/proc/self/mem", O_RDWR | O_CLOEXEC),
                     ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC)};
  const std::uint64_t addrs[2] = {reinterpret_cast<std::uint64_t>(plain),
                                  reinterpret_cast<std::uint64_t>(shared)};
  (void)xroce::send_message(sock, xroce::bytes_of_object(addrs), fds);
  char byte;
  (void)!::read(sock, &byte, 1);  // until the parent closes the socket
  ::_exit(0);
}

Client& client() {
  static Client c = [] {
    Client c;
    int sv[2];
    ::socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    c.pid = ::fork();
    if (c.pid == 0) {
      ::close(sv[0]);  // so that the parent's close() reaches the child as end-of-file
      child_main(sv[1]);
    }
    ::close(sv[1]);
    c.sock = sv[0];
    std::uint64_t addrs[2];
    xroce::ReceivedMessage message;
    if (xroce::receive_message(c.sock, std::as_writable_bytes(std::span(addrs)), message) != 0 ||
        message.bytes != sizeof addrs || message.fds.size() != 3) {
      std::abort();
    }
    c.plain = addrs[0];
    c.shared = addrs[1];
    c.memory = std::make_unique<ProcessMemory>(
        c.pid, xroce::Fd(static_cast<int>(::syscall(SYS_pidfd_open, c.pid, 0))), message.take(1),
        message.take(2));
    c.shared_ok = c.memory->add_shared(message.take(0).release(), c.shared, kBufferBytes) == 0;
    return c;
  }();
  return c;
}

std::uint64_t base(bool shared) {
  return shared ? client().shared : client().plain;
}

// False (and the benchmark marked failed) if the shared path was asked for but not set up.
bool ready(benchmark::State& state, bool shared) {
  if (shared && !client().shared_ok) {
    state.SkipWithError("the shared mapping could not be set up");
    return false;
  }
  state.SetLabel(shared ? "shared" : "cma");
  return true;
}

void BM_Read(benchmark::State& state) {
  const bool shared = state.range(0) != 0;
  if (!ready(state, shared)) return;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(state.range(1)));
  for (auto _ : state) {
    if (!client().memory->read(base(shared), out)) state.SkipWithError("read failed");
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(1));
}
BENCHMARK(BM_Read)->ArgsProduct({{0, 1}, {64, 4096, 65536}});

void BM_Write(benchmark::State& state) {
  const bool shared = state.range(0) != 0;
  if (!ready(state, shared)) return;
  std::vector<std::uint8_t> in(static_cast<std::size_t>(state.range(1)), 7);
  for (auto _ : state)
    if (!client().memory->write(base(shared), in)) state.SkipWithError("write failed");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(1));
}
BENCHMARK(BM_Write)->ArgsProduct({{0, 1}, {64, 4096, 65536}});

void BM_FetchAdd(benchmark::State& state) {
  const bool shared = state.range(0) != 0;
  if (!ready(state, shared)) return;
  std::uint64_t old = 0;
  for (auto _ : state)
    if (!client().memory->atomic_fetch_add(base(shared) + 64, 1, &old))
      state.SkipWithError("atomic failed");
}
BENCHMARK(BM_FetchAdd)->Arg(0)->Arg(1);

// Workers reading through one ProcessMemory at once (one process's QPs spread over the workers):
// each thread its own 64 bytes, in its own page, so only what the accesses share is contended.
// Arg 0: every access looks up the shared mappings afresh (outside a worker's turn); arg N: a
// transport::AccessTurn is opened for every N accesses, as a worker opens one per turn, and keeps
// what the first looked up.
void BM_SharedReadThreads(benchmark::State& state) {
  if (!ready(state, true)) return;
  std::vector<std::uint8_t> out(64);
  const std::uint64_t addr = base(true) + 4096 * static_cast<std::uint64_t>(state.thread_index());
  const auto per_turn = static_cast<std::int64_t>(state.range(0));
  std::optional<xroce::transport::AccessTurn> turn;
  std::int64_t in_turn = 0;
  for (auto _ : state) {
    if (per_turn != 0 && in_turn-- == 0) {
      turn.reset();
      turn.emplace();
      in_turn = per_turn - 1;
    }
    if (!client().memory->read(addr, out)) state.SkipWithError("read failed");
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_SharedReadThreads)->Arg(0)->Arg(32)->Threads(1)->Threads(2)->UseRealTime();

// The check the daemon makes of a context's image on each control request (the pidfd, and one
// byte of the maps descriptor).
void BM_ImageCheck(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(client().memory->image().alive());
}
BENCHMARK(BM_ImageCheck);

// process_vm_readv, the system call cross-memory access used before it went through the
// client's own mem file, for comparison with BM_Read/0/64.
void BM_RawProcessVmReadv64(benchmark::State& state) {
  std::uint8_t out[64];
  for (auto _ : state) {
    iovec local{out, sizeof out};
    iovec remote{reinterpret_cast<void*>(client().plain), sizeof out};
    benchmark::DoNotOptimize(::process_vm_readv(client().pid, &local, 1, &remote, 1, 0));
  }
}
BENCHMARK(BM_RawProcessVmReadv64);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  ::close(client().sock);
  int status;
  ::waitpid(client().pid, &status, 0);
  return 0;
}
