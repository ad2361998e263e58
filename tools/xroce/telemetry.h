// What `xroce top` and `xroce exporter` read from this namespace's xroced: a device's counters
// (the stat op) and its QPs (the qp_show op), stamped with the time they were taken, and the
// per-second rates between two such snapshots.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "xroce/control_client.h"

namespace xroce::cli {

struct DeviceSnapshot {
  std::string device;
  std::chrono::steady_clock::time_point taken;
  nlohmann::ordered_json link;      // the device's entry of link show (netdev, state, ...)
  nlohmann::ordered_json counters;  // {"sent_pkts": N, ...} as `xroce stat --json` has them
  nlohmann::ordered_json port;      // its "port" object (absent: null)
  nlohmann::ordered_json qps;       // as `xroce qp show --json`
};

// One connection to the daemon, reopened after an error (a restarted daemon is picked up).
class TelemetryClient {
 public:
  // The devices this daemon serves (link show); empty with `error` set when unreachable.
  std::optional<nlohmann::ordered_json> links(std::string& error);
  // All three ops for one device; nullopt with `error` set when it is gone or unreachable.
  std::optional<DeviceSnapshot> snapshot(const std::string& device, std::string& error);

 private:
  bool call_text(int op, const std::string& device, std::string& text, std::string& error);

  control::ControlClient client_;
};

// A QP's figures between two snapshots: rates per second and the QP's JSON (current values).
struct QpRow {
  nlohmann::ordered_json qp;
  double tx_mbps = 0;  // payload bits sent per second (requests and responses)
  double rx_mbps = 0;
  double packets_per_s = 0;  // sent + received
  std::uint64_t rnr = 0;     // RNR NAKs sent + received
  std::uint64_t naks = 0;    // NAKs of every kind sent + received
};

// Rows for every QP of `now`; rates are 0 for a QP `before` lacks (or with no `before`).
std::vector<QpRow> qp_rows(const DeviceSnapshot* before, const DeviceSnapshot& now);

// The growth per second of counter `name` between the snapshots (0 without `before`).
double counter_rate(const DeviceSnapshot* before, const DeviceSnapshot& now,
                    const std::string& name);

}  // namespace xroce::cli
