// End-to-end data path: two network namespaces joined by a veth pair, an xroce device in each
// (`xroce link add ... port afxdp|udp`), and unmodified Debian programs run with
// `xroce exec --`: ibv_rc_pingpong (with its -c buffer check), ibv_ud_pingpong,
// ibv_srq_pingpong and perftest. Every test runs once per port kind. Each test asserts on the
// programs' exit status and their own reports (pingpong's "iters in" line after its buffer
// check, perftest's result rows), never only that they ran.
//
// Iteration counts are small (-n) and perftest's -a sweep is limited, to keep the run short on
// a 2-core host; the programs' own checks do not depend on the counts.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>

#include <future>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pair.h"

namespace xroce::e2e {
namespace {

using namespace std::chrono_literals;

int pair_counter = 0;

struct Outcome {
  RunResult server;
  RunResult client;
};

// Runs the server in namespace a, waits until it listens on `port`, then the client in b.
Outcome serve(const Pair& p, std::vector<std::string> server, std::vector<std::string> client,
              int port = 18515) {
  auto s = std::async(std::launch::async, [&] { return p.verbs(0, server); });
  eventually([&] { return p.listening(0, port); }, 20s);
  client.push_back(p.ip(0));
  Outcome o;
  o.client = p.verbs(1, client);
  o.server = s.get();
  return o;
}

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// pingpong prints "N iters in S seconds" only after every iteration completed (and, with -c,
// after the buffer check passed).
void expect_pingpong_passed(const Outcome& o, int iters) {
  const std::string line = std::to_string(iters) + " iters in ";
  EXPECT_EQ(o.server.status, 0) << o.server.output;
  EXPECT_EQ(o.client.status, 0) << o.client.output;
  EXPECT_NE(o.server.output.find(line), std::string::npos) << o.server.output;
  EXPECT_NE(o.client.output.find(line), std::string::npos) << o.client.output;
}

class DatapathE2e : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, XDP)";
    pair_ = std::make_unique<Pair>("xrdp", 60 + pair_counter++ % 100, GetParam());
    ASSERT_TRUE(pair_->ready()) << pair_->why_not();
  }
  // ibv_*_pingpong on both sides with the GID index of the IPv4 address (0, as ibv_devinfo
  // lists it: checked in RcPingpongGidIndexFromDevinfo).
  Outcome pingpong(const std::string& program, const std::vector<std::string>& args,
                   int port = 18515) {
    const std::vector<std::string> common = {"-g", "0", "-p", std::to_string(port)};
    return serve(*pair_, with(with({program, "-d", pair_->dev(0)}, common), args),
                 with(with({program, "-d", pair_->dev(1)}, common), args), port);
  }
  std::unique_ptr<Pair> pair_;
};

TEST_P(DatapathE2e, RcPingpongGidIndexFromDevinfo) {
  const auto info = pair_->verbs(0, {"ibv_devinfo", "-v", "-d", pair_->dev(0)});
  ASSERT_EQ(info.status, 0) << info.output;
  EXPECT_NE(info.output.find("GID[  0]:\t\t::ffff:" + pair_->ip(0) + ", RoCE v2"),
            std::string::npos)
      << info.output;
  expect_pingpong_passed(pingpong("ibv_rc_pingpong", {"-c", "-n", "20"}), 20);
}

TEST_P(DatapathE2e, RcPingpongSizesFrom1ByteTo1MiB) {
  for (const auto& [size, iters] : std::vector<std::pair<int, int>>{
           {1, 20}, {1024, 20}, {4096, 20}, {65536, 10}, {1 << 20, 3}}) {
    SCOPED_TRACE(size);
    expect_pingpong_passed(pingpong("ibv_rc_pingpong", {"-c", "-s", std::to_string(size), "-n",
                                                        std::to_string(iters)}),
                           iters);
  }
}

TEST_P(DatapathE2e, RcPingpongWithCompletionEvents) {
  for (const int size : {1, 4096, 1 << 20}) {
    SCOPED_TRACE(size);
    expect_pingpong_passed(
        pingpong("ibv_rc_pingpong", {"-c", "-e", "-s", std::to_string(size), "-n", "5"}), 5);
  }
}

TEST_P(DatapathE2e, RcPingpongWithNewSendApi) {
  expect_pingpong_passed(pingpong("ibv_rc_pingpong", {"-c", "-N", "-n", "20"}), 20);
}

TEST_P(DatapathE2e, UdPingpong) {
  expect_pingpong_passed(pingpong("ibv_ud_pingpong", {"-c", "-n", "20", "-s", "1024"}), 20);
}

TEST_P(DatapathE2e, SrqPingpong) {
  expect_pingpong_passed(pingpong("ibv_srq_pingpong", {"-c", "-n", "20"}), 20);
}

// The verbs rxe offers beside RC, each through the program rdma-core ships for it: UC, ODP
// registration (-o), completion timestamps (-t), and XRC (XRC domains, XRC SRQs and send QPs).
TEST_P(DatapathE2e, UcPingpong) {
  expect_pingpong_passed(pingpong("ibv_uc_pingpong", {"-c", "-n", "20", "-s", "4096"}), 20);
}

TEST_P(DatapathE2e, RcPingpongWithOdpAndWithTimestamps) {
  expect_pingpong_passed(pingpong("ibv_rc_pingpong", {"-c", "-o", "-n", "20"}), 20);
  // -t reads each receive completion's timestamp and prints the spread of their differences:
  // the device reported timestamps (ibv_wc_read_completion_ts), or the run would fail.
  const Outcome timed = pingpong("ibv_rc_pingpong", {"-c", "-t", "-n", "20"});
  expect_pingpong_passed(timed, 20);
  EXPECT_NE(timed.client.output.find("Average receive completion clock cycles"), std::string::npos)
      << timed.client.output;
}

// ibv_xsrq_pingpong: each side an XRC domain, an XRC SRQ and XRC send/receive QPs; it prints
// "success" after every message came back on the right SRQ, and fails (non-zero) when a receive
// completes in error, arrives on another SRQ, or ibv_post_srq_recv refuses a repost.
TEST_P(DatapathE2e, XsrqPingpong) {
  const Outcome o = serve(*pair_, {"ibv_xsrq_pingpong", "-d", pair_->dev(0), "-g", "0", "-n", "20"},
                          {"ibv_xsrq_pingpong", "-d", pair_->dev(1), "-g", "0", "-n", "20"});
  EXPECT_EQ(o.server.status, 0) << o.server.output;
  EXPECT_EQ(o.client.status, 0) << o.client.output;
  EXPECT_NE(o.server.output.find("success"), std::string::npos) << o.server.output;
  EXPECT_NE(o.client.output.find("success"), std::string::npos) << o.client.output;
}

TEST_P(DatapathE2e, TwoProcessPairsAtOnce) {
  auto first = std::async(std::launch::async, [&] {
    return pingpong("ibv_rc_pingpong", {"-c", "-n", "30", "-s", "8192"}, 18515);
  });
  const Outcome second = pingpong("ibv_rc_pingpong", {"-c", "-n", "30", "-s", "8192"}, 18516);
  expect_pingpong_passed(second, 30);
  expect_pingpong_passed(first.get(), 30);
}

// A program that hangs is killed at its deadline, and its output then ends with both devices'
// QPs and counters as they stood before the kill (fabric.h set_deadline_report): here a
// pingpong server that waits for a client that never comes, with its QP on xpa.
TEST_P(DatapathE2e, AProgramAtItsDeadlineIsReportedWithTheDevicesState) {
  const RunResult r = pair_->verbs(0, {"ibv_rc_pingpong", "-d", pair_->dev(0), "-g", "0"}, 2s);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("reached its deadline"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("$ xroce qp show " + pair_->dev(0)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("$ xroce stat " + pair_->dev(1)), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rcvd_pkts"), std::string::npos) << r.output;
}

// perftest's result rows: "<bytes> <iterations> <numbers...>". Returns the rows' numbers.
std::vector<std::vector<double>> perftest_rows(const std::string& output) {
  static const std::regex row(R"(^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+).*$)");
  std::vector<std::vector<double>> rows;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    rows.push_back({std::stod(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4])});
  }
  return rows;
}

class PerftestE2e : public DatapathE2e {
 protected:
  // Runs a perftest program on both sides; returns the client's result rows after checking
  // both exited 0.
  std::vector<std::vector<double>> perftest(const std::string& program,
                                            const std::vector<std::string>& args) {
    const std::vector<std::string> common = {"-x", "0"};
    const auto run_once = [&] {
      return serve(*pair_, with(with({program, "-d", pair_->dev(0)}, common), args),
                   with(with({program, "-d", pair_->dev(1)}, common), args));
    };
    Outcome o = run_once();
    // perftest measures the CPU clock again for every row it prints (get_cpu_mhz: ten timed
    // samples whose fit must reach r^2 0.9) and exits "Can't produce a report" when a
    // descheduled sample spoils the fit: a failure of perftest's own timing on a busy host,
    // not of the transfer. That failure alone gets one more run, said in the log. Either side
    // can fail so: the one that prints the report (ib_send_bw's server prints one too).
    const auto calibration_failed = [](const std::string& out) {
      return out.find("Can't produce a report") != std::string::npos &&
             out.find("Correlation coefficient") != std::string::npos;
    };
    if (calibration_failed(o.client.output) || calibration_failed(o.server.output)) {
      std::fprintf(stderr,
                   "%s: perftest's clock calibration failed (r^2 < 0.9); running it again\n",
                   program.c_str());
      o = run_once();
    }
    EXPECT_EQ(o.server.status, 0) << o.server.output;
    EXPECT_EQ(o.client.status, 0) << o.client.output;
    return perftest_rows(o.client.output);
  }
  // Bandwidth rows: bytes, iterations, BW peak, BW average (MB/s) > 0.
  void expect_bandwidth(const std::string& program, const std::vector<std::string>& args,
                        std::size_t min_rows = 1) {
    SCOPED_TRACE(program);
    const auto rows = perftest(program, args);
    EXPECT_GE(rows.size(), min_rows);
    // perftest prints MB/s with two decimals: a few tiny messages can round to 0.00.
    constexpr double kPrintedResolutionBytes = 4096;
    for (const auto& r : rows)
      if (r[0] >= kPrintedResolutionBytes) {
        EXPECT_GT(r[3], 0.0) << program << " " << r[0] << " bytes";
      }
  }
  // Latency rows: bytes, iterations, t_min, t_max (usec) > 0, t_min <= t_max.
  void expect_latency(const std::string& program, const std::vector<std::string>& args) {
    SCOPED_TRACE(program);
    const auto rows = perftest(program, args);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_GT(rows[0][2], 0.0);
    EXPECT_LE(rows[0][2], rows[0][3]);
  }
};

TEST_P(PerftestE2e, Bandwidth) {
  for (const char* program : {"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"})
    expect_bandwidth(program, {"-n", "50"});
}

TEST_P(PerftestE2e, Latency) {
  for (const char* program : {"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"})
    expect_latency(program, {"-n", "50"});
}

// -a: every size from 2 bytes to 8 MiB (23 rows), 5 iterations each.
TEST_P(PerftestE2e, BandwidthAllSizes) {
  for (const char* program : {"ib_write_bw", "ib_read_bw", "ib_send_bw"})
    expect_bandwidth(program, {"-a", "-n", "5"}, 23);
}

TEST_P(PerftestE2e, FourQps) {
  for (const char* program : {"ib_write_bw", "ib_send_bw"})
    expect_bandwidth(program, {"-q", "4", "-n", "50"});
}

TEST_P(PerftestE2e, SendWithCompletionEvents) {
  expect_bandwidth("ib_send_bw", {"-e", "-n", "50"});
  expect_latency("ib_send_lat", {"-e", "-n", "50"});
}

// Loops at SCHED_IDLE, one per online CPU and one more, for a scope: a host with more runnable
// threads than cores, where an idle worker does not spin (worker_uring.h, spin_allowed). Each is
// killed and reaped by its pid at the end.
class BusyHost {
 public:
  BusyHost() {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i <= std::max(cpus, 1L); ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        const sched_param idle{};
        sched_setscheduler(0, SCHED_IDLE, &idle);
        for (;;)
          std::atomic_signal_fence(std::memory_order_seq_cst);  // a loop the compiler keeps
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyHost() {
    for (const pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  BusyHost(const BusyHost&) = delete;
  BusyHost& operator=(const BusyHost&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// Doorbell moderation (engine/daemon/worker.h, WorkerConfig::moderation_ns) on a busy host: a
// stream of 1 KiB SENDs, 128 posted at a time (perftest's default), is carried with the workers
// sleeping without doorbells, every message completing; a ping-pong, one posted at a time, gets
// no moderated sleep (its requests never wait for one). Summed over both devices'
// worker_moderated_sleeps (`xroce stat`).
TEST_P(PerftestE2e, AStreamsDoorbellsAreModeratedAndAPingPongsAreNot) {
  constexpr std::uint64_t kUnread = ~std::uint64_t{0};
  const auto moderated = [&]() -> std::uint64_t {
    std::uint64_t sum = 0;
    for (int i = 0; i < 2; ++i) {
      const auto stat = nlohmann::json::parse(
          pair_->exec(i, {xroce_bin(), "stat", pair_->dev(i), "--json"}).output, nullptr, false);
      if (!stat.is_object() || !stat.contains("port") || !stat["port"].is_object()) return kUnread;
      sum += stat["port"].value("worker_moderated_sleeps", std::uint64_t{0});
    }
    return sum;
  };
  const BusyHost busy;
  const std::uint64_t before = moderated();
  ASSERT_NE(before, kUnread) << "no port object in xroce stat";
  expect_bandwidth("ib_send_bw", {"-s", "1024", "-n", "20000"});
  // A worker counts a sleep when it ends: wait until two reads agree, so that a moderated sleep
  // still under way as the stream ended is not counted in the ping-pong.
  std::uint64_t after_stream = moderated();
  ASSERT_TRUE(eventually(
      [&] {
        const std::uint64_t now = moderated();
        const bool settled = now == after_stream;
        after_stream = now;
        return settled;
      },
      std::chrono::seconds(10)));
  ASSERT_NE(after_stream, kUnread);
  EXPECT_GT(after_stream, before) << "no sleep was moderated during the stream";
  expect_latency("ib_send_lat", {"-s", "2", "-n", "2000"});
  EXPECT_EQ(moderated(), after_stream) << "a ping-pong's sleeps were moderated";
  std::printf("moderated sleeps: %llu in the stream, %llu in the ping-pong\n",
              static_cast<unsigned long long>(after_stream - before),
              static_cast<unsigned long long>(moderated() - after_stream));
}

// Many QPs at once: their windows together far exceed the frames the receiver's port holds
// (1,024 full frames on AF_XDP); the device's InflightBudget keeps what is in flight within a
// quarter of it, as `xroce stat` shows. Completion, not speed: both sides exit 0 and no QP ran
// out of retries.
TEST_P(PerftestE2e, SixtyFourAndAThousandQps) {
  for (int i = 0; i < 2; ++i) {
    const auto stat = nlohmann::json::parse(
        pair_->exec(i, {xroce_bin(), "stat", pair_->dev(i), "--json"}).output, nullptr, false);
    ASSERT_TRUE(stat.is_object() && stat.contains("port")) << "no port object in xroce stat";
    const auto frames = stat["port"].value("receive_frames", std::uint64_t{0});
    EXPECT_GE(frames, 1024u) << pair_->dev(i);
    EXPECT_EQ(stat["port"].value("inflight_budget_psns", std::uint64_t{0}), frames / 4)
        << pair_->dev(i);
  }
  expect_bandwidth("ib_write_bw", {"-q", "64", "-n", "20"});
  expect_bandwidth("ib_write_bw", {"-q", "1000", "-n", "5"});
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(pair_->hw_counter(i, "retry_exceeded_err"), 0) << pair_->dev(i);
}

// Our own many-QP program (verbs_probe many_qps): on every one of 64, then 1,000 RC QPs each
// side WRITEs 8 KiB and then SENDs 64 bytes, two rounds; each side checks every byte it
// received against the peer's pattern for that QP and round, and that every QP's WRITE and
// SEND completed successfully, before it prints its summary line. Completion and data, not
// speed; no QP may exhaust its retries.
TEST_P(PerftestE2e, ManyQpsProgramWritesAndSendsOnEveryQp) {
  for (const char* qps : {"64", "1000"}) {
    SCOPED_TRACE(std::string(qps) + " QPs");
    const std::vector<std::string> shape = {qps, "2", "8192"};
    const Outcome o = serve(
        *pair_, with({XROCE_VERBS_PROBE, pair_->dev(0), "many_qps", "server", "18517"}, shape),
        with({XROCE_VERBS_PROBE, pair_->dev(1), "many_qps", "client", "18517"}, shape), 18517);
    const std::string summary = std::string("many_qps: ") + qps + " QPs, 2 rounds, " +
                                std::to_string(std::stoi(qps) * 2 * (8192 + 64)) +
                                " bytes verified, every QP completed";
    EXPECT_EQ(o.server.status, 0) << o.server.output;
    EXPECT_EQ(o.client.status, 0) << o.client.output;
    EXPECT_NE(o.server.output.find(summary), std::string::npos) << o.server.output;
    EXPECT_NE(o.client.output.find(summary), std::string::npos) << o.client.output;
  }
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(pair_->hw_counter(i, "retry_exceeded_err"), 0) << pair_->dev(i);
}

// UC and XRC transports and ODP registration through perftest (-c UC, -c XRC, --odp).
TEST_P(PerftestE2e, UcXrcAndOdp) {
  expect_bandwidth("ib_write_bw", {"-c", "UC", "-n", "50"});
  // UC has no flow control and no retransmission: a burst larger than the receiver's port ring
  // (2048 frames on AF_XDP) is partly lost when its worker is descheduled (rx_port_drops), and
  // ib_send_bw's server then waits forever for the lost SENDs, as it would on a lossy link.
  // 50 x 4 KiB is 200 frames at MTU 1024, which the ring holds whatever the scheduler does.
  expect_bandwidth("ib_send_bw", {"-c", "UC", "-n", "50", "-s", "4096"});
  expect_bandwidth("ib_send_bw", {"-c", "XRC", "-n", "50"});
  expect_bandwidth("ib_write_bw", {"-c", "XRC", "-n", "50"});
  expect_bandwidth("ib_write_bw", {"--odp", "-n", "50"});
}

// Two workers a side (`link add ... queues 2` on a veth with two queues each way; the udp port
// runs one worker, so afxdp only). A device places each new QP on its least loaded worker unless
// it shares a CQ with a QP placed already, so the QPs of one program with several CQs land on
// both, and both workers reach that application's memory and PD at once: what a worker's turn keeps
// of the shared mappings and of the keys it resolved must stay right while the other worker works
// (bench/README.md "One application's QPs on two workers"). The many-QP program checks every byte
// on every QP; `xroce qp show` while it runs must show its QPs on both workers.
class TwoWorkersE2e : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, XDP)";
    PairOptions options;
    options.port = GetParam();
    options.queues = 2;
    pair_ = std::make_unique<Pair>("xrdw", 60 + pair_counter++ % 100, options);
    ASSERT_TRUE(pair_->ready()) << pair_->why_not();
  }
  std::unique_ptr<Pair> pair_;
};

TEST_P(TwoWorkersE2e, OneProgramsQpsOnBothWorkersMoveEveryByte) {
  const std::vector<std::string> shape = {"16", "300", "65536"};
  // Four CQ pairs: a device keeps the QPs of one CQ on one worker, and spreads the CQs.
  auto s = std::async(std::launch::async, [&] {
    return pair_->verbs(
        0, with(with({XROCE_VERBS_PROBE, pair_->dev(0), "many_qps", "server", "18519"}, shape),
                {"cqs=4"}));
  });
  eventually([&] { return pair_->listening(0, 18519); }, 20s);
  auto c = std::async(std::launch::async, [&] {
    return pair_->verbs(
        1, with(with({XROCE_VERBS_PROBE, pair_->dev(1), "many_qps", "client", "18519"}, shape),
                {pair_->ip(0), "cqs=4"}));
  });
  // Workers holding RC QPs on each side, seen while the program runs.
  std::set<unsigned> workers[2];
  const auto both_seen = [&] { return workers[0].size() == 2 && workers[1].size() == 2; };
  eventually(
      [&] {
        for (int side = 0; side < 2; ++side) {
          const RunResult r =
              pair_->exec(side, {xroce_bin(), "qp", "show", pair_->dev(side), "--json"});
          const auto qps = nlohmann::json::parse(r.output, nullptr, false);
          if (!qps.is_array()) continue;
          for (const auto& q : qps) {
            if (q.value("type", "") == "RC") workers[side].insert(q.value("worker", 0u));
          }
        }
        return both_seen();
      },
      30s);
  const RunResult cr = c.get();
  const RunResult sr = s.get();
  const std::string summary = "many_qps: 16 QPs, 300 rounds, " +
                              std::to_string(16 * 300 * (65536 + 64)) +
                              " bytes verified, every QP completed";
  EXPECT_EQ(sr.status, 0) << sr.output;
  EXPECT_EQ(cr.status, 0) << cr.output;
  EXPECT_NE(sr.output.find(summary), std::string::npos) << sr.output;
  EXPECT_NE(cr.output.find(summary), std::string::npos) << cr.output;
  EXPECT_TRUE(both_seen()) << "workers with RC QPs: " << workers[0].size() << " on a, "
                           << workers[1].size() << " on b";
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(pair_->hw_counter(i, "retry_exceeded_err"), 0) << pair_->dev(i);
}

std::string port_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}
INSTANTIATE_TEST_SUITE_P(Ports, DatapathE2e, ::testing::Values("udp", "afxdp"), port_name);
INSTANTIATE_TEST_SUITE_P(Ports, PerftestE2e, ::testing::Values("udp", "afxdp"), port_name);
INSTANTIATE_TEST_SUITE_P(Ports, TwoWorkersE2e, ::testing::Values("afxdp"), port_name);

}  // namespace
}  // namespace xroce::e2e
