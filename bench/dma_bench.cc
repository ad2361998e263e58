// Cost of one registered-memory access from the daemon into a client process, per DMA path
// (dma.h): cross-memory attach (process_vm_readv/writev plus the pidfd liveness check) against
// the shared mapping (memcpy / CPU atomics). A forked child plays the application.
// Run: <build>/bin/bench/bench_dma
#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "device/dma.h"
#include "provider/shared_mr.h"

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

int receive_fd(int sock) {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(sock, &msg, 0) != 1) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fd);
  return fd;
}

[[noreturn]] void child_main(int sock) {
  auto map = [] {
    void* p =
        ::mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    std::memset(p, 1, kBufferBytes);
    return p;
  };
  void* plain = map();
  void* shared = map();
  const int memfd = xroce::provider::share_region(shared, kBufferBytes);
  const std::uint64_t addrs[2] = {reinterpret_cast<std::uint64_t>(plain),
                                  reinterpret_cast<std::uint64_t>(shared)};
  char byte = 'F';
  ::send(sock, addrs, sizeof addrs, 0);
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &memfd, sizeof memfd);
  ::sendmsg(sock, &msg, 0);
  ::read(sock, &byte, 1);  // until the parent closes the socket
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
    ::recv(c.sock, addrs, sizeof addrs, MSG_WAITALL);
    c.plain = addrs[0];
    c.shared = addrs[1];
    c.memory = std::make_unique<ProcessMemory>(c.pid);
    c.shared_ok = c.memory->add_shared(receive_fd(c.sock), c.shared, kBufferBytes) == 0;
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

// The liveness check cross-memory accesses add (one poll() on the pidfd).
void BM_PidfdCheck(benchmark::State& state) {
  xroce::device::ClientProcess process(client().pid);
  for (auto _ : state)
    benchmark::DoNotOptimize(process.alive());
}
BENCHMARK(BM_PidfdCheck);

// process_vm_readv alone, to separate the system call from the check.
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
