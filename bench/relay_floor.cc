// xroce-relay-floor: the least one-way latency a NIC made of a daemon can have on this host,
// beside the kernel UDP ping-pong that sockperf measures, in the same run.
//
// xroce's one-way path has four threads where sockperf's has two: the application writes its
// work request into memory it shares with the daemon (and rings a doorbell when the worker
// sleeps), the daemon's worker sends the frame, the peer daemon's worker receives it and writes
// the completion into memory its application shares, and that application, polling, sees it.
// This program keeps that shape and nothing else: no verbs, no transport, no ICRC, 14 bytes of
// payload over loopback UDP. Each mode is a ping-pong of --round-trips round trips, reported as
// one way (half the round trip, as sockperf and perftest's latency tests report it):
//   direct       two threads, blocking recvfrom: sockperf's ping-pong;
//   relay-sleep  two polling "applications" (threads of this process, one session as perftest's
//                two processes started from one shell), two "workers", each in a process that
//                leads its own session as each xroced does, scheduled as xroced's workers are,
//                that sleep in poll() on their doorbell eventfd and socket when there is nothing
//                to do (xroced's workers when the host has no idle core:
//                engine/daemon/worker_sleep.h);
//   relay-ack    relay-sleep with an acknowledgement per message: the receiving worker answers
//                each message with a datagram of its own before its application sees it, as an
//                RC responder ACKs each message that asks (rxe_resp.c), so the sending worker
//                wakes for it as well as for the reply;
//   relay-ack-held  relay-ack, but an acknowledgement waits (up to 200 us) for the worker's
//                next message to the peer and leaves with it, as a delayed ACK would, so a
//                ping-pong's reply carries it and the sending worker wakes once;
//   relay-spin   the same workers never sleeping (xroced's when every runnable thread has a
//                core); `all` runs it only where the host has four cores or more, since on
//                fewer its four spinning threads take milliseconds a round trip.
// What xroce adds to relay-ack (transport, encode, decode, the provider's rings) is its own
// latency; what relay-ack adds to direct is the daemon's shape on this host (bench/README.md,
// "The floor of a daemon's shape").
#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xroce/sched_attr.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kPayloadBytes = 14;  // sockperf's default message

struct Options {
  std::string mode = "all";
  std::uint64_t round_trips = 20000;
  std::uint64_t warmup = 1000;
  // A mode stops early after this long, with the round trips it has: relay-spin on a host with
  // fewer cores than its four spinning threads takes milliseconds a round trip.
  double max_seconds = 20;
  // As xroced's workers run (engine/daemon/worker_uring.h: nice -10, a 100 us EEVDF slice) and
  // as the provider's polling thread asks for (a 100 us slice, nice kept; provider/cq.cc).
  int worker_nice = -10;
  std::uint64_t worker_slice_us = 100;
  std::uint64_t application_slice_us = 100;
  bool json = false;
};

// The calling thread's nice and slice as xroced's workers set theirs (each alone where both
// together are refused, xroce::set_nice_and_slice); what was refused is said once per process.
void set_scheduling(int nice, std::uint64_t slice_us) {
  const xroce::NiceAndSlice applied = xroce::set_nice_and_slice(nice, slice_us * 1000);
  if (applied == xroce::NiceAndSlice::kBoth) return;
  const char* refused = applied == xroce::NiceAndSlice::kNiceOnly    ? "slice"
                        : applied == xroce::NiceAndSlice::kSliceOnly ? "nice"
                        : nice != 0                                  ? "nice and slice"
                                                                     : "slice";
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    std::fprintf(stderr, "xroce-relay-floor: nice %d, slice %llu us: the %s refused\n", nice,
                 static_cast<unsigned long long>(slice_us), refused);
}

struct Figures {
  std::string mode;
  std::uint64_t round_trips = 0;  // measured (fewer than asked when max_seconds ran out)
  double typical_us = 0;          // the median one way
  double p99_us = 0;
  double average_us = 0;
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {
    if (fd_ < 0) throw std::runtime_error(fmt::format("socket/eventfd: {}", strerror(errno)));
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close(fd_); }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A UDP socket on 127.0.0.1, bound to a port the kernel picks; connect_to sends it to its
// peer's.
struct Endpoint {
  Fd fd{socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)};
  std::uint16_t port = 0;

  Endpoint() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error(fmt::format("bind: {}", strerror(errno)));
    port = ntohs(a.sin_port);
  }
  void connect_to(const Endpoint& peer) const {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(peer.port);
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0)
      throw std::runtime_error(fmt::format("connect: {}", strerror(errno)));
  }
};

Figures summarize(std::string mode, std::vector<double> one_way_us) {
  Figures f;
  f.mode = std::move(mode);
  f.round_trips = one_way_us.size();
  if (one_way_us.empty()) return f;
  std::sort(one_way_us.begin(), one_way_us.end());
  const std::size_t n = one_way_us.size();
  f.typical_us = one_way_us[n / 2];
  f.p99_us = one_way_us[std::min(n - 1, n * 99 / 100)];
  double sum = 0;
  for (double v : one_way_us)
    sum += v;
  f.average_us = sum / static_cast<double>(n);
  return f;
}

double half_round_trip_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2;
}

// sockperf's ping-pong: the client sends, the server's blocking recv returns and it sends back.
Figures run_direct(const Options& o) {
  Endpoint client, server;
  client.connect_to(server);
  server.connect_to(client);
  const std::uint64_t total = o.warmup + o.round_trips;
  std::thread echo([&] {
    char buf[kPayloadBytes];
    // A zero-length datagram from the client ends the echo.
    while (recv(server.fd.get(), buf, sizeof(buf), 0) > 0)
      (void)send(server.fd.get(), buf, sizeof(buf), 0);
  });
  const auto deadline = Clock::now() + std::chrono::duration<double>(o.max_seconds);
  std::vector<double> samples;
  samples.reserve(o.round_trips);
  char buf[kPayloadBytes] = {};
  for (std::uint64_t i = 0; i < total && Clock::now() < deadline; ++i) {
    const auto start = Clock::now();
    (void)send(client.fd.get(), buf, sizeof(buf), 0);
    if (recv(client.fd.get(), buf, sizeof(buf), 0) <= 0) break;
    if (i >= o.warmup) samples.push_back(half_round_trip_us(start));
  }
  (void)send(client.fd.get(), buf, 0, 0);
  echo.join();
  return summarize("direct", std::move(samples));
}

// The memory an application shares with its daemon: a request word it writes and the worker
// reads (the send queue and its ready bit), a completion word the worker writes and the
// application polls (the CQ), and the doorbell, rung only while the worker says it sleeps
// (the provider's doorbell: provider/post.cc).
struct alignas(64) SharedLine {
  std::atomic<std::uint64_t> value{0};
};

struct Host {
  SharedLine request;     // the application's latest posted sequence number
  SharedLine completion;  // the latest sequence number the worker completed
  SharedLine asleep;      // 1 while the worker sleeps
  Fd doorbell{eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  Endpoint endpoint;
  std::atomic<bool> stop{false};

  void post(std::uint64_t seq) {
    request.value.store(seq, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the worker's
    if (asleep.value.load(std::memory_order_relaxed) != 0) {
      const std::uint64_t one = 1;
      (void)write(doorbell.get(), &one, sizeof(one));
    }
  }
  // The next completion after `after`; nullopt once `done` is set.
  std::optional<std::uint64_t> wait_completion(std::uint64_t after,
                                               const std::atomic<bool>& done) const {
    std::uint64_t v;
    while ((v = completion.value.load(std::memory_order_acquire)) == after) {
      if (done.load(std::memory_order_relaxed)) return std::nullopt;
    }
    return v;
  }
};

// The relay modes' workers: whether they sleep when idle, whether they acknowledge each message
// and how long an acknowledgement may wait for the worker's next message to the peer.
struct Relay {
  bool sleeps = true;
  bool acks = false;
  std::uint64_t ack_hold_ns = 0;
  const char* mode = "relay-sleep";
};
constexpr Relay kRelaySleep{true, false, 0, "relay-sleep"};
constexpr Relay kRelayAck{true, true, 0, "relay-ack"};
constexpr Relay kRelayAckHeld{true, true, 200'000, "relay-ack-held"};
constexpr Relay kRelaySpin{false, false, 0, "relay-spin"};
// An acknowledgement's sequence number has this bit set; a message's never does.
constexpr std::uint64_t kAckBit = 1ull << 63;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

void send_sequence(const Host& host, std::uint64_t seq) {
  char buf[kPayloadBytes] = {};
  std::memcpy(buf, &seq, sizeof(seq));
  (void)send(host.endpoint.fd.get(), buf, sizeof(buf), 0);
}

// The worker of one host: sends what its application posts, completes what arrives (and
// acknowledges it: at once, or with its next message to the peer within ack_hold_ns).
void worker(const Options& o, Host& host, Relay relay) {
  set_scheduling(o.worker_nice, o.worker_slice_us);
  std::uint64_t sent = 0;
  std::optional<std::uint64_t> ack_due;  // the acknowledgement held, and its deadline
  std::uint64_t ack_seq = 0;
  while (!host.stop.load(std::memory_order_relaxed)) {
    bool busy = false;
    const std::uint64_t posted = host.request.value.load(std::memory_order_acquire);
    if (posted != sent) {
      send_sequence(host, posted);
      sent = posted;
      busy = true;
    }
    if (ack_due && (busy || now_ns() >= *ack_due)) {
      send_sequence(host, ack_seq | kAckBit);
      ack_due.reset();
    }
    char buf[kPayloadBytes];
    if (recv(host.endpoint.fd.get(), buf, sizeof(buf), MSG_DONTWAIT) > 0) {
      std::uint64_t seq;
      std::memcpy(&seq, buf, sizeof(seq));
      busy = true;
      if ((seq & kAckBit) != 0) continue;  // the peer has the message: nothing more to do
      if (relay.acks && relay.ack_hold_ns == 0) send_sequence(host, seq | kAckBit);
      if (relay.acks && relay.ack_hold_ns != 0) {
        ack_seq = seq;
        if (!ack_due) ack_due = now_ns() + relay.ack_hold_ns;
      }
      host.completion.value.store(seq, std::memory_order_release);
    }
    if (busy || !relay.sleeps) continue;
    // "I sleep" is published before the last look for work, as the daemon's worker does.
    host.asleep.value.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (host.request.value.load(std::memory_order_acquire) == sent) {
      // The timeout: the held acknowledgement's deadline, else only to let a stop be seen.
      std::uint64_t wait_ns = 100'000'000;
      if (ack_due) {
        const std::uint64_t now = now_ns();
        wait_ns = *ack_due > now ? *ack_due - now : 0;
      }
      const timespec timeout{static_cast<time_t>(wait_ns / 1'000'000'000),
                             static_cast<long>(wait_ns % 1'000'000'000)};
      pollfd fds[2] = {{host.doorbell.get(), POLLIN, 0}, {host.endpoint.fd.get(), POLLIN, 0}};
      (void)ppoll(fds, 2, &timeout, nullptr);
      std::uint64_t count;
      (void)read(host.doorbell.get(), &count, sizeof(count));
    }
    host.asleep.value.store(0, std::memory_order_relaxed);
  }
}

// The two hosts' shared memory, as the provider and the daemon share theirs: mapped before the
// workers' processes fork, so both sides see the same words.
class SharedHosts {
 public:
  SharedHosts() {
    void* p =
        mmap(nullptr, sizeof(Host) * 2, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(fmt::format("mmap: {}", strerror(errno)));
    hosts_ = static_cast<Host*>(p);
    new (&hosts_[0]) Host();
    new (&hosts_[1]) Host();
  }
  SharedHosts(const SharedHosts&) = delete;
  SharedHosts& operator=(const SharedHosts&) = delete;
  ~SharedHosts() {
    hosts_[1].~Host();
    hosts_[0].~Host();
    munmap(hosts_, sizeof(Host) * 2);
  }
  Host& a() { return hosts_[0]; }
  Host& b() { return hosts_[1]; }

 private:
  Host* hosts_;
};

// A worker in a process of its own that leads its own session, as `xroce link add` starts
// xroced: the scheduler weighs its autogroup against the applications' session, and the worker
// gives the group its nice as xroced's do (engine/daemon/worker_uring.cc on_thread_start).
// The child dies with this process (PR_SET_PDEATHSIG) and never returns.
pid_t spawn_worker(const Options& o, Host& host, Relay relay) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", strerror(errno)));
  if (pid > 0) return pid;
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  (void)setsid();
  if (o.worker_nice != 0) (void)xroce::set_autogroup_nice(o.worker_nice);
  worker(o, host, relay);
  _exit(0);
}

Figures run_relay(const Options& o, Relay relay) {
  SharedHosts hosts;
  Host& a = hosts.a();
  Host& b = hosts.b();
  a.endpoint.connect_to(b.endpoint);
  b.endpoint.connect_to(a.endpoint);
  const std::uint64_t total = o.warmup + o.round_trips;
  // Forked before any other thread of this process exists.
  const pid_t worker_a = spawn_worker(o, a, relay);
  const pid_t worker_b = spawn_worker(o, b, relay);
  // The server application: a completion in, a post back (ib_send_lat's server).
  std::atomic<bool> done{false};
  std::thread server([&] {
    set_scheduling(0, o.application_slice_us);
    std::uint64_t seen = 0;
    while (const auto next = b.wait_completion(seen, done)) {
      seen = *next;
      b.post(seen);
    }
  });
  // The client application: a post, then its completion polled (ib_send_lat's client).
  std::vector<double> samples;
  samples.reserve(o.round_trips);
  std::thread client([&] {
    set_scheduling(0, o.application_slice_us);
    const auto deadline = Clock::now() + std::chrono::duration<double>(o.max_seconds);
    std::uint64_t seen = 0;
    for (std::uint64_t i = 1; i <= total && Clock::now() < deadline; ++i) {
      const auto start = Clock::now();
      a.post(i);
      seen = *a.wait_completion(seen, done);
      if (i > o.warmup) samples.push_back(half_round_trip_us(start));
    }
    done = true;
  });
  client.join();
  server.join();
  a.stop = b.stop = true;
  (void)waitpid(worker_a, nullptr, 0);
  (void)waitpid(worker_b, nullptr, 0);
  return summarize(relay.mode, std::move(samples));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The one-way latency of a daemon-shaped NIC path beside a UDP ping-pong"};
  Options o;
  app.add_option("--mode", o.mode,
                 "direct, relay-sleep, relay-ack, relay-ack-held, relay-spin or all (all: each "
                 "but relay-spin, and relay-spin where the host has a core for each of its four "
                 "threads)")
      ->check(CLI::IsMember(
          {"direct", "relay-sleep", "relay-ack", "relay-ack-held", "relay-spin", "all"}));
  app.add_option("--round-trips", o.round_trips, "measured round trips per mode")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "round trips before measuring");
  app.add_option("--max-seconds", o.max_seconds, "stop a mode after this long")
      ->check(CLI::PositiveNumber);
  app.add_option("--worker-nice", o.worker_nice, "the workers' nice value (xroced: -10)");
  app.add_option("--worker-slice-us", o.worker_slice_us,
                 "the workers' scheduler slice, 0: the default (xroced: 100)");
  app.add_option("--application-slice-us", o.application_slice_us,
                 "the polling applications' slice, 0: the default (the provider: 100)");
  app.add_flag("--json", o.json, "one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);

  std::vector<Figures> figures;
  try {
    if (o.mode == "direct" || o.mode == "all") figures.push_back(run_direct(o));
    if (o.mode == "relay-sleep" || o.mode == "all") figures.push_back(run_relay(o, kRelaySleep));
    if (o.mode == "relay-ack" || o.mode == "all") figures.push_back(run_relay(o, kRelayAck));
    if (o.mode == "relay-ack-held" || o.mode == "all")
      figures.push_back(run_relay(o, kRelayAckHeld));
    const bool cores_for_spinning = std::thread::hardware_concurrency() >= 4;
    if (o.mode == "relay-spin" || (o.mode == "all" && cores_for_spinning))
      figures.push_back(run_relay(o, kRelaySpin));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xroce-relay-floor: %s\n", e.what());
    return 1;
  }
  const std::optional<double> direct_us =
      figures.front().mode == "direct" ? std::optional(figures.front().typical_us) : std::nullopt;
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Figures& f : figures)
      j.push_back({{"mode", f.mode},
                   {"round_trips", f.round_trips},
                   {"typical_us", f.typical_us},
                   {"p99_us", f.p99_us},
                   {"average_us", f.average_us}});
    fmt::print("{}\n", nlohmann::json{{"one_way", j}}.dump());
    return 0;
  }
  fmt::print("{:<12} {:>12} {:>12} {:>10} {:>12} {:>10}\n", "mode", "round trips", "typical us",
             "p99 us", "average us", "x direct");
  for (const Figures& f : figures) {
    const std::string ratio = direct_us ? fmt::format("{:.2f}", f.typical_us / *direct_us) : "";
    fmt::print("{:<12} {:>12} {:>12.1f} {:>10.1f} {:>12.1f} {:>10}\n", f.mode, f.round_trips,
               f.typical_us, f.p99_us, f.average_us, ratio);
  }
  return 0;
}
