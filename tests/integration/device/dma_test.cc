// Registered memory of another process (engine/device/dma.h, include/xroce/shared_mr.h): a
// forked child registers a buffer and hands over its own /proc/self/mem and /proc/self/maps, as
// the provider does at hello; the test, standing in for the daemon, reads, writes and runs
// atomics on it through both implementations and the child checks what landed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "device/dma.h"
#include "transport/memory.h"
#include "xroce/fd_passing.h"
#include "xroce/shared_mr.h"

namespace xroce::device {
namespace {

constexpr std::size_t kPages = 4;

std::size_t page() {
  return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}
std::size_t buffer_bytes() {
  return kPages * page();
}

bool send_all(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
bool recv_all(int fd, void* p, std::size_t n) {
  auto* b = static_cast<std::uint8_t*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, b, n, 0);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Commands the test sends the child.
enum : char { kDump = 'D', kWrite = 'W', kAtomicAdds = 'A', kQuit = 'Q' };

// The "application": registers a page-aligned buffer (re-backed with a memfd when `shared`),
// reports its address, passes its own /proc/self/mem and /proc/self/maps (and the memfd), then
// serves commands until told to quit.
[[noreturn]] void child_main(int sock, bool shared) {
  const std::size_t bytes = buffer_bytes();
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto* buf = static_cast<std::uint8_t*>(mem);
  for (std::size_t i = 0; i < bytes; ++i)
    buf[i] = static_cast<std::uint8_t>(i * 7 + 3);
  int memfd = -1;
  if (shared) memfd = control::share_region(buf, bytes);
  const std::uint64_t addr = reinterpret_cast<std::uint64_t>(buf);
  const std::int64_t status = shared ? memfd : 0;
  send_all(sock, &addr, sizeof addr);
  send_all(sock, &status, sizeof status);
  std::vector<int> fds{::open("/proc/self/mem", O_RDWR | O_CLOEXEC),
                       ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC)};
  if (memfd >= 0) fds.push_back(memfd);
  const char byte = 'F';
  send_message(sock, bytes_of_object(byte), fds);
  for (const int fd : fds)
    ::close(fd);
  for (;;) {
    char cmd = 0;
    if (!recv_all(sock, &cmd, 1)) ::_exit(1);
    if (cmd == kDump) {
      send_all(sock, buf, bytes);
    } else if (cmd == kWrite) {
      std::vector<std::uint8_t> in(bytes);
      recv_all(sock, in.data(), bytes);
      std::memcpy(buf, in.data(), bytes);
      send_all(sock, "k", 1);
    } else if (cmd == kAtomicAdds) {
      std::uint64_t offset = 0, count = 0;
      recv_all(sock, &offset, sizeof offset);
      recv_all(sock, &count, sizeof count);
      send_all(sock, "k", 1);  // started
      auto* word = reinterpret_cast<std::uint64_t*>(buf + offset);
      for (std::uint64_t i = 0; i < count; ++i)
        __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
      send_all(sock, "k", 1);  // done
    } else {
      ::_exit(0);
    }
  }
}

class Child {
 public:
  explicit Child(bool shared) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(sv[0]);
      child_main(sv[1], shared);
    }
    ::close(sv[1]);
    sock_ = sv[0];
    std::int64_t status = -1;
    EXPECT_TRUE(recv_all(sock_, &addr_, sizeof addr_));
    EXPECT_TRUE(recv_all(sock_, &status, sizeof status));
    std::byte byte{};
    ReceivedMessage image;
    EXPECT_EQ(receive_message(sock_, std::span(&byte, 1), image), 0);
    mem_ = image.take(0);
    maps_ = image.take(1);
    memfd_ = image.take(2).release();
    share_status_ = status;
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      reap();
    }
    ::close(sock_);
  }
  pid_t pid() const { return pid_; }
  std::uint64_t addr() const { return addr_; }
  std::int64_t share_status() const { return share_status_; }
  int take_memfd() { return std::exchange(memfd_, -1); }
  // What the daemon keeps for the child's image: a pidfd and (copies of) the descriptors the
  // child handed over.
  std::unique_ptr<ProcessMemory> memory() const {
    return std::make_unique<ProcessMemory>(pid_, pidfd(), copy(mem_), copy(maps_));
  }
  Fd pidfd() const { return Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0))); }
  static Fd copy(const Fd& fd) { return Fd(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0)); }
  const Fd& mem() const { return mem_; }
  const Fd& maps() const { return maps_; }

  std::vector<std::uint8_t> dump() {
    std::vector<std::uint8_t> out(buffer_bytes());
    const char cmd = kDump;
    EXPECT_TRUE(send_all(sock_, &cmd, 1));
    EXPECT_TRUE(recv_all(sock_, out.data(), out.size()));
    return out;
  }
  void overwrite(const std::vector<std::uint8_t>& bytes) {
    const char cmd = kWrite;
    char ack = 0;
    EXPECT_TRUE(send_all(sock_, &cmd, 1));
    EXPECT_TRUE(send_all(sock_, bytes.data(), bytes.size()));
    EXPECT_TRUE(recv_all(sock_, &ack, 1));
  }
  void start_atomic_adds(std::uint64_t offset, std::uint64_t count) {
    const char cmd = kAtomicAdds;
    char ack = 0;
    EXPECT_TRUE(send_all(sock_, &cmd, 1));
    EXPECT_TRUE(send_all(sock_, &offset, sizeof offset));
    EXPECT_TRUE(send_all(sock_, &count, sizeof count));
    EXPECT_TRUE(recv_all(sock_, &ack, 1));
  }
  void wait_atomic_adds() {
    char ack = 0;
    EXPECT_TRUE(recv_all(sock_, &ack, 1));
  }
  // Asks the child to exit and reaps it.
  void quit() {
    const char cmd = kQuit;
    send_all(sock_, &cmd, 1);
    reap();
  }
  void reap() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int sock_ = -1;
  int memfd_ = -1;
  Fd mem_;
  Fd maps_;
  std::uint64_t addr_ = 0;
  std::int64_t share_status_ = -1;
};

std::vector<std::uint8_t> initial_pattern() {
  std::vector<std::uint8_t> v(buffer_bytes());
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return v;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<std::uint8_t>(rng());
  return v;
}

std::uint64_t word_at(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
  std::uint64_t w;
  std::memcpy(&w, bytes.data() + offset, sizeof w);
  return w;
}

bool skip_unless_root() {
  return ::geteuid() != 0;
}

// Both implementations, through the ProcessMemory a daemon keeps per client.
class DmaTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (skip_unless_root()) GTEST_SKIP() << "needs root (cross-memory attach into a child)";
    child_ = std::make_unique<Child>(GetParam());
    memory_ = child_->memory();
    if (GetParam()) {
      ASSERT_GE(child_->share_status(), 0) << "share_region failed: " << child_->share_status();
      ASSERT_EQ(memory_->add_shared(child_->take_memfd(), child_->addr(), buffer_bytes()), 0);
    }
  }
  DmaKind expected_kind() const {
    return GetParam() ? DmaKind::kSharedMapping : DmaKind::kCrossMemory;
  }

  std::unique_ptr<Child> child_;
  std::unique_ptr<ProcessMemory> memory_;
};

TEST_P(DmaTest, RegionUsesTheExpectedPath) {
  EXPECT_EQ(memory_->kind_of(child_->addr(), buffer_bytes()), expected_kind());
  // A range that leaves the shared mapping is served by cross-memory attach.
  EXPECT_EQ(memory_->kind_of(child_->addr() + 8, buffer_bytes()), DmaKind::kCrossMemory);
  EXPECT_EQ(memory_->shared_ranges().size(), GetParam() ? 1u : 0u);
}

TEST_P(DmaTest, ReadsSeeTheChildsBytes) {
  const std::vector<std::uint8_t> expect = initial_pattern();
  std::vector<std::uint8_t> got(buffer_bytes());
  ASSERT_TRUE(memory_->read(child_->addr(), got));
  EXPECT_EQ(got, expect);
  // An unaligned piece across a page boundary.
  std::vector<std::uint8_t> piece(100);
  const std::size_t at = page() - 37;
  ASSERT_TRUE(memory_->read(child_->addr() + at, piece));
  EXPECT_TRUE(std::equal(piece.begin(), piece.end(), expect.begin() + static_cast<long>(at)));
}

TEST_P(DmaTest, WritesLandBitExactInTheChild) {
  std::vector<std::uint8_t> expect = initial_pattern();
  const auto data = random_bytes(3 * page() + 5, 1234);
  const std::size_t at = page() / 2 + 3;
  ASSERT_TRUE(memory_->write(child_->addr() + at, data));
  std::copy(data.begin(), data.end(), expect.begin() + static_cast<long>(at));
  EXPECT_EQ(child_->dump(), expect);
}

TEST_P(DmaTest, AtomicsReturnTheOldValueAndLandInTheChild) {
  const std::uint64_t a = child_->addr() + 64;
  const std::uint64_t b = child_->addr() + page() + 8;
  const auto before = child_->dump();
  std::uint64_t original = 0;
  ASSERT_TRUE(memory_->atomic_fetch_add(a, 5, &original));
  EXPECT_EQ(original, word_at(before, 64));
  ASSERT_TRUE(memory_->atomic_cmp_swap(b, word_at(before, page() + 8), 0xfeedface, &original));
  EXPECT_EQ(original, word_at(before, page() + 8));
  ASSERT_TRUE(memory_->atomic_cmp_swap(b, 1, 2, &original));  // does not match: no swap
  EXPECT_EQ(original, 0xfeedfaceu);
  const auto after = child_->dump();
  EXPECT_EQ(word_at(after, 64), word_at(before, 64) + 5);
  EXPECT_EQ(word_at(after, page() + 8), 0xfeedfaceu);
}

TEST_P(DmaTest, ConcurrentAtomicsFromManyWorkersAreSerialised) {
  constexpr int kThreads = 4;
  constexpr std::uint64_t kAdds = 2000;
  const std::uint64_t a = child_->addr() + 128;
  ASSERT_TRUE(memory_->write(a, std::vector<std::uint8_t>(8, 0)));
  std::atomic<bool> all_ok{true};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.emplace_back([&] {
      for (std::uint64_t i = 0; i < kAdds; ++i) {
        std::uint64_t old;
        if (!memory_->atomic_fetch_add(a, 1, &old)) all_ok = false;
      }
    });
  for (auto& w : workers)
    w.join();
  EXPECT_TRUE(all_ok);
  EXPECT_EQ(word_at(child_->dump(), 128), kThreads * kAdds);
}

TEST_P(DmaTest, AccessesAfterTheChildExitsFailCleanly) {
  const std::uint64_t addr = child_->addr();
  child_->quit();                        // exited and reaped: its pid may now be anyone's
  if (GetParam()) memory_->mark_dead();  // the daemon does this when the connection closes
  std::vector<std::uint8_t> buf(64);
  std::uint64_t original = 0;
  EXPECT_FALSE(memory_->read(addr, buf));
  EXPECT_FALSE(memory_->write(addr, buf));
  EXPECT_FALSE(memory_->atomic_fetch_add(addr, 1, &original));
  EXPECT_FALSE(memory_->atomic_cmp_swap(addr, 0, 1, &original));
}

INSTANTIATE_TEST_SUITE_P(BothPaths, DmaTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Shared" : "CrossMemory"; });

TEST(CrossMemory, ExitedButUnreapedChildFailsWithoutBeingMarked) {
  if (skip_unless_root()) GTEST_SKIP() << "needs root";
  Child child(false);
  auto owned = child.memory();
  ProcessMemory& memory = *owned;
  std::vector<std::uint8_t> buf(16);
  ASSERT_TRUE(memory.read(child.addr(), buf));
  ::kill(child.pid(), SIGKILL);
  // Wait (with a deadline) until the kernel reports the exit, without reaping.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child.pid()), &info, WEXITED | WNOWAIT), 0);
  EXPECT_FALSE(memory.read(child.addr(), buf));
  EXPECT_FALSE(memory.write(child.addr(), buf));
}

TEST(SharedMapping, CoherentBothWaysWithTheChild) {
  if (skip_unless_root()) GTEST_SKIP() << "needs root";
  Child child(true);
  ASSERT_GE(child.share_status(), 0);
  auto owned = child.memory();
  ProcessMemory& memory = *owned;
  ASSERT_EQ(memory.add_shared(child.take_memfd(), child.addr(), buffer_bytes()), 0);
  // The child writes into its buffer: the daemon's view sees it.
  const auto data = random_bytes(buffer_bytes(), 99);
  child.overwrite(data);
  std::vector<std::uint8_t> got(buffer_bytes());
  ASSERT_TRUE(memory.read(child.addr(), got));
  EXPECT_EQ(got, data);
  // The daemon's atomics and the child's own CPU atomics on one word: no update is lost.
  constexpr std::uint64_t kEach = 200000;
  const std::uint64_t offset = 256;
  ASSERT_TRUE(memory.write(child.addr() + offset, std::vector<std::uint8_t>(8, 0)));
  child.start_atomic_adds(offset, kEach);
  for (std::uint64_t i = 0; i < kEach; ++i) {
    std::uint64_t old;
    ASSERT_TRUE(memory.atomic_fetch_add(child.addr() + offset, 1, &old));
  }
  child.wait_atomic_adds();
  EXPECT_EQ(word_at(child.dump(), offset), 2 * kEach);
}

// The daemon's mappings of the child's memfds: lines of this process's maps naming one.
std::size_t shared_mr_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);)
    n += line.find("/memfd:xroce-mr") != std::string::npos ? 1 : 0;
  return n;
}

// A child with a shared region the test can register (add_shared, which takes the descriptor
// it is given) again and again, from a memfd it keeps.
class SharedMappingTurns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (skip_unless_root()) GTEST_SKIP() << "needs root";
    child_ = std::make_unique<Child>(true);
    ASSERT_GE(child_->share_status(), 0);
    owned_ = child_->memory();
    memfd_ = Fd(child_->take_memfd());
  }
  // What the provider's reg_mr makes the daemon do: 0 or an errno.
  int register_region() {
    return owned_->add_shared(::fcntl(memfd_.get(), F_DUPFD_CLOEXEC, 0), child_->addr(),
                              buffer_bytes());
  }

  std::unique_ptr<Child> child_;
  std::unique_ptr<ProcessMemory> owned_;
  Fd memfd_;
};

// A worker's turn (transport::AccessTurn) keeps the snapshot of the shared mappings it loaded.
// A deregistration in the middle of the turn still reroutes the turn's next access at once, which
// lets the old snapshot go; a turn with no access after it lets the removed mapping go when it
// closes, not later.
TEST_F(SharedMappingTurns, AWorkersTurnLetsADeregisteredMappingGoAtItsEnd) {
  const std::size_t before = shared_mr_mappings();
  ASSERT_EQ(register_region(), 0);
  EXPECT_EQ(shared_mr_mappings(), before + 1);
  std::vector<std::uint8_t> got(buffer_bytes());
  {
    const transport::AccessTurn turn;
    ASSERT_TRUE(owned_->read(child_->addr(), got));
    EXPECT_EQ(got, initial_pattern());
    ASSERT_TRUE(owned_->remove_shared(child_->addr()));
    EXPECT_EQ(shared_mr_mappings(), before + 1);  // the turn still keeps it
  }
  EXPECT_EQ(shared_mr_mappings(), before);

  ASSERT_EQ(register_region(), 0);
  {
    const transport::AccessTurn turn;
    EXPECT_EQ(owned_->kind_of(child_->addr(), 64), DmaKind::kSharedMapping);
    ASSERT_TRUE(owned_->remove_shared(child_->addr()));
    // Rerouted within the turn: what the turn keeps is of an older version.
    EXPECT_EQ(owned_->kind_of(child_->addr(), 64), DmaKind::kCrossMemory);
    EXPECT_EQ(shared_mr_mappings(), before);
    std::fill(got.begin(), got.end(), 0);
    ASSERT_TRUE(owned_->read(child_->addr(), got));
    EXPECT_EQ(got, initial_pattern());
  }
}

// Workers reading in turns while the control thread registers and deregisters the region again
// and again: every read sees the child's bytes, by whichever path the moment gives it.
TEST_F(SharedMappingTurns, WorkersInTurnsReadRightWhileTheRegionComesAndGoes) {
  ASSERT_EQ(register_region(), 0);
  const std::vector<std::uint8_t> expect = initial_pattern();
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bad{0};
  std::atomic<std::uint64_t> reads{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      std::vector<std::uint8_t> piece(64);
      const std::size_t at = static_cast<std::size_t>(t) * page() + 8;
      while (!stop.load()) {
        const transport::AccessTurn turn;
        for (int i = 0; i < 32; ++i) {
          std::fill(piece.begin(), piece.end(), 0);
          if (!owned_->read(child_->addr() + at, piece) ||
              !std::equal(piece.begin(), piece.end(), expect.begin() + static_cast<long>(at))) {
            ++bad;
          }
          ++reads;
        }
      }
    });
  }
  // At least 200 rounds, and on until the workers have read 4,000 times while the rounds ran:
  // on a busy host they may not have started when the first round comes.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const std::uint64_t reads_at_start = reads.load();
  for (int round = 0; round < 200 || reads.load() - reads_at_start < 4000; ++round) {
    if (std::chrono::steady_clock::now() > deadline) break;
    // Not ASSERT: the workers must be stopped and joined whatever happens.
    if (!owned_->remove_shared(child_->addr()) || register_region() != 0) {
      ADD_FAILURE() << "round " << round << ": the region could not be registered again";
      break;
    }
  }
  const std::uint64_t reads_during = reads.load() - reads_at_start;
  stop = true;
  for (auto& w : workers)
    w.join();
  EXPECT_GE(reads_during, 4000u) << "the workers did not read while the region came and went";
  EXPECT_EQ(bad.load(), 0u);
}

TEST(ProcessMemoryDirectory, ContextsOfOneProcessShareOneMemoryAndExitIsNoticed) {
  if (skip_unless_root()) GTEST_SKIP() << "needs root";
  Child child(true);
  ASSERT_GE(child.share_status(), 0);
  ProcessMemoryDirectory dir;
  // Two contexts of the child, each handing over its image.
  dir.attach(1, child.pid(), child.pidfd(), Child::copy(child.mem()), Child::copy(child.maps()));
  dir.attach(2, child.pid(), child.pidfd(), Child::copy(child.mem()), Child::copy(child.maps()));
  auto pd1 = dir.view(1);
  auto pd2 = dir.view(2);
  EXPECT_EQ(&pd1->process(), &pd2->process());
  EXPECT_EQ(dir.view(3), nullptr);  // a client that said no hello reaches nothing
  ASSERT_EQ(dir.find(1)->add_shared(child.take_memfd(), child.addr(), buffer_bytes()), 0);
  // A region registered through the second PD reaches the same pages by the same path.
  EXPECT_EQ(pd2->process().kind_of(child.addr(), 64), DmaKind::kSharedMapping);
  std::uint64_t old = 0;
  ASSERT_TRUE(pd1->atomic_fetch_add(child.addr(), 3, &old));
  ASSERT_TRUE(pd2->atomic_fetch_add(child.addr(), 4, &old));
  EXPECT_EQ(word_at(child.dump(), 0), word_at(initial_pattern(), 0) + 7);
  const std::uint64_t addr = child.addr();
  child.quit();
  dir.reap_exited();  // what the daemon runs when a client connection closes
  std::vector<std::uint8_t> buf(8);
  EXPECT_FALSE(pd1->read(addr, buf));  // shared path, no system call: failed by the mark
  EXPECT_FALSE(pd2->write(addr, buf));
}

// The setuid-exec attack at this layer: a process hands over its image and then exec()s (a
// setuid program would be the same to the kernel). Nothing the daemon holds reaches the new
// image: the mem descriptor still names the old, gone address space, and the image check says so.
TEST(ClientImage, AnImageReplacedByExecIsNeverReached) {
  if (skip_unless_root()) GTEST_SKIP() << "needs root";
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    static std::uint8_t stack_like[4096] = {1, 2, 3};
    const std::uint64_t addr = reinterpret_cast<std::uint64_t>(stack_like);
    const int fds[] = {::open("/proc/self/mem", O_RDWR | O_CLOEXEC),
                       ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC)};
    send_message(sv[1], bytes_of_object(addr), fds);
    char go = 0;
    if (::read(sv[1], &go, 1) != 1) ::_exit(1);
    ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(sv[1]);
  std::uint64_t addr = 0;
  ReceivedMessage image;
  ASSERT_EQ(receive_message(sv[0], std::as_writable_bytes(std::span(&addr, 1)), image), 0);
  ASSERT_EQ(image.fds.size(), 2u);
  ProcessMemory memory(pid, Fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))), image.take(0),
                       image.take(1));
  std::vector<std::uint8_t> buf(3);
  ASSERT_TRUE(memory.read(addr, buf));
  EXPECT_EQ(buf, (std::vector<std::uint8_t>{1, 2, 3}));
  ASSERT_TRUE(memory.image().alive());
  ASSERT_EQ(::write(sv[0], "x", 1), 1);
  // The child exec()s: wait (with a deadline) until its process runs the new program.
  const std::string exe = "/proc/" + std::to_string(pid) + "/exe";
  bool execd = false;
  for (int i = 0; i < 500 && !execd; ++i) {
    char target[256] = {};
    execd = ::readlink(exe.c_str(), target, sizeof target - 1) > 0 &&
            std::string(target).find("sleep") != std::string::npos;
    if (!execd) ::usleep(10'000);
  }
  ASSERT_TRUE(execd);
  EXPECT_FALSE(memory.image().alive());
  EXPECT_FALSE(memory.read(addr, buf));
  EXPECT_FALSE(memory.write(addr, buf));
  std::string maps;
  EXPECT_EQ(memory.image().read_maps(maps), 0);
  EXPECT_TRUE(maps.empty()) << "the old image's maps show the new program: " << maps;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ::close(sv[0]);
}

TEST(SharedMapping, DaemonRefusesUnsealedOrShortMemfds) {
  const std::size_t bytes = buffer_bytes();
  int error = 0;
  const int unsealed = ::memfd_create("t", MFD_CLOEXEC);
  ASSERT_EQ(::ftruncate(unsealed, static_cast<off_t>(bytes)), 0);
  EXPECT_EQ(SharedMapping::map(unsealed, 0x10000, bytes, error), nullptr);
  EXPECT_EQ(error, EPERM);
  const int short_fd = ::memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(short_fd, static_cast<off_t>(page())), 0);
  ASSERT_EQ(::fcntl(short_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  EXPECT_EQ(SharedMapping::map(short_fd, 0x10000, bytes, error), nullptr);
  EXPECT_EQ(error, EINVAL);
}

// provider/shared_mr: what may be re-backed, and that contents survive both directions.
TEST(ShareRegion, RebacksAnonymousMemoryKeepingContentsAndUnsharesBack) {
  const std::size_t bytes = buffer_bytes();
  auto* buf = static_cast<std::uint8_t*>(
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(buf, MAP_FAILED);
  const auto data = random_bytes(bytes, 7);
  std::memcpy(buf, data.data(), bytes);

  EXPECT_EQ(control::share_region(buf + 1, page()), -EINVAL);
  EXPECT_EQ(control::share_region(buf, page() + 1), -EINVAL);
  const int memfd = control::share_region(buf, bytes);
  ASSERT_GE(memfd, 0);
  EXPECT_EQ(std::memcmp(buf, data.data(), bytes), 0);
  // The memfd holds the same pages: a write through either side is seen by the other.
  auto* other = static_cast<std::uint8_t*>(
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
  ASSERT_NE(other, MAP_FAILED);
  other[5] = 0xab;
  EXPECT_EQ(buf[5], 0xab);
  buf[page() + 1] = 0xcd;
  EXPECT_EQ(other[page() + 1], 0xcd);
  EXPECT_EQ(::ftruncate(memfd, 0), -1);  // sealed
  // Already shared: not anonymous any more, so a second registration falls back.
  EXPECT_EQ(control::share_region(buf, bytes), -ENOTSUP);

  ASSERT_EQ(control::unshare_region(buf, bytes), 0);
  other[6] = 0x11;  // no longer the same pages
  EXPECT_NE(buf[6], 0x11);
  EXPECT_EQ(buf[5], 0xab);
  EXPECT_EQ(buf[page() + 1], 0xcd);
  const int again = control::share_region(buf, bytes);
  EXPECT_GE(again, 0);
  ::close(again);
  ::munmap(other, bytes);
  ::close(memfd);
  ::munmap(buf, bytes);
}

TEST(ShareRegion, RefusesFileBackedSharedAndUnmappedRanges) {
  const std::size_t bytes = buffer_bytes();
  void* shared = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  EXPECT_EQ(control::share_region(shared, bytes), -ENOTSUP);
  void* ro = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_EQ(control::share_region(ro, bytes), -ENOTSUP);
  // A hole in the middle.
  auto* holed = static_cast<std::uint8_t*>(
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(holed, MAP_FAILED);
  ASSERT_EQ(::munmap(holed + page(), page()), 0);
  EXPECT_EQ(control::share_region(holed, bytes), -ENOTSUP);
  ::munmap(shared, bytes);
  ::munmap(ro, bytes);
  ::munmap(holed, bytes);
}

}  // namespace
}  // namespace xroce::device
