// The pure parts of `xroce validate` (no I/O, unit-tested): RoCE packet sizes for a path-MTU
// check, reading `ibv_devinfo -v` and perftest output, the perftest matrix and the only
// command lines the serving peer will run, and the report (table, JSON, SVG).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace xroce::cli::validate {

// The RoCE (IB) MTUs: 256, 512, 1024, 2048, 4096.
bool is_roce_mtu(int bytes);
// The IP packet (header included) that carries the largest RoCEv2 packet at RoCE MTU `mtu`:
// RDMA WRITE Only with Immediate, BTH (12) + RETH (16) + ImmDt (4) + mtu payload bytes + ICRC
// (4), in UDP (8), in IPv4 (20) or IPv6 (40). A path must carry this many bytes unfragmented
// (RoCEv2 packets are sent with DF set and never fragmented).
int largest_roce_ip_packet(int mtu, bool ipv6);
// The largest RoCE MTU whose largest packet fits in `ip_bytes`, or 0 if none does.
int roce_mtu_for_ip_packet(int ip_bytes, bool ipv6);

struct Gid {
  int index = 0;
  std::string gid;   // as ibv_devinfo prints it: ::ffff:198.18.0.1, 2001:2::1, fe80::...
  std::string type;  // "RoCE v2", "RoCE v1", "IB"
};

struct VerbsDevice {
  std::string name;
  std::string port_state;  // "PORT_ACTIVE", ...
  int active_mtu = 0;      // bytes
  int max_mtu = 0;
  std::string link_layer;  // "Ethernet"
  std::vector<Gid> gids;   // port 1
};

// The devices of `ibv_devinfo -v` output (port 1 of each).
std::vector<VerbsDevice> parse_ibv_devinfo(const std::string& text);
// The index of the device's RoCE v2 GID for an IPv4 or IPv6 address.
std::optional<int> roce_v2_gid_index(const VerbsDevice& device, const std::string& address);

// Where the test programs' own TCP exchange (ibv_rc_pingpong's and perftest's, which listen on
// IPv4 only in Debian's builds) reaches the peer: `peer` itself when it is an IPv4 address, else
// the address of the peer device's first IPv4-mapped RoCE v2 GID (the QPs still use the GIDs of
// `peer`); nullopt when the device has none.
std::optional<std::string> exchange_address(const std::string& peer, const VerbsDevice& device);

// ECN codepoints (RFC 3168), the low two bits of the IPv4 TOS / IPv6 traffic class.
const char* ecn_name(int codepoint);

// One perftest run of the matrix: the program, its extra options, what it measures.
struct PerftestSpec {
  std::string name;     // write_bw, read_lat, atomic_fa_bw, ...
  std::string program;  // ib_write_bw, ...
  std::vector<std::string> options;
  bool latency = false;
};
// write/read/send bandwidth and latency and both atomics (fetch-add, compare-swap), each as
// bandwidth and latency.
const std::vector<PerftestSpec>& perftest_matrix();
const PerftestSpec* find_perftest(const std::string& name);
// How one side runs a perftest program.
struct PerftestRun {
  std::string device;
  int gid_index = 0;
  int mtu = 0;  // RoCE MTU, bytes
  int tcp_port = 0;
  int iterations = 0;
  int qp_timeout = 0;  // the ACK timeout exponent (perftest -u, 4.096 us << n); 0: its default
  std::string peer;    // empty: the server
};
std::vector<std::string> perftest_argv(const PerftestSpec& spec, const PerftestRun& run);
// The line of a failed program's output that says why: the first that speaks of an error, a
// failure or a timeout, else the last non-empty one.
std::string failure_line(const std::string& output);

// `ibv_rc_pingpong -c` (buffers checked) as the data check.
std::vector<std::string> pingpong_argv(const std::string& device, int gid_index, int mtu,
                                       int tcp_port, int size, int iterations,
                                       const std::string& peer);

struct PerftestResult {
  std::uint64_t bytes = 0;
  std::uint64_t iterations = 0;
  double bw_peak_gbps = 0;  // bandwidth tests (--report_gbits)
  double bw_avg_gbps = 0;
  double msg_rate_mpps = 0;
  double lat_min_us = 0;  // latency tests
  double lat_typical_us = 0;
  double lat_avg_us = 0;
  double lat_p99_us = 0;
};
// The first result row of a perftest report, nullopt when there is none.
std::optional<PerftestResult> parse_perftest(const std::string& output, bool latency);

// What the serving peer agrees to run for a request {"op": "perftest"|"pingpong", "test",
// "device", "gid_index", "mtu", "port", "iterations", "size"}: only known tests on its own
// devices with bounded numbers. The argv, or nullopt with `error` set.
std::optional<std::vector<std::string>> server_argv_for(const nlohmann::json& request,
                                                        const std::vector<VerbsDevice>& devices,
                                                        std::string& error);

struct Check {
  std::string name;  // peer, gid, port, mtu, path_mtu, ecn, data, perftest
  enum class Outcome { kPass, kFail, kSkip } outcome = Outcome::kPass;
  std::string detail;  // what was found; for a failure, the reason
};

struct PerftestRow {
  std::string name;
  bool latency = false;
  bool ok = false;
  PerftestResult result;
  std::string error;
};

struct Report {
  std::string peer;
  std::string local_device;
  std::string local_gid;
  std::string peer_device;
  std::string peer_gid;
  int roce_mtu = 0;
  std::vector<Check> checks;
  std::vector<PerftestRow> perftest;

  bool passed() const;
  nlohmann::ordered_json to_json() const;
  std::string table() const;
  // Bandwidth and latency bar charts and the list of checks, as one SVG document.
  std::string svg() const;
};

}  // namespace xroce::cli::validate
