#include "telemetry.h"

#include <fmt/core.h>

#include <cstring>

#include "daemon_launch.h"
#include "xroce/control.h"

namespace xroce::cli {

namespace {

double seconds_between(const DeviceSnapshot& before, const DeviceSnapshot& now) {
  return std::chrono::duration<double>(now.taken - before.taken).count();
}

std::uint64_t u64(const nlohmann::ordered_json& j, const char* key) {
  return j.value(key, std::uint64_t{0});
}

// Growth of a counter that may restart (a QP reset, a device re-added): then its new value.
std::uint64_t growth(std::uint64_t before, std::uint64_t now) {
  return now >= before ? now - before : now;
}

}  // namespace

bool TelemetryClient::call_text(int op, const std::string& device, std::string& text,
                                std::string& error) {
  if (!client_.connected()) {
    client_ = control::ControlClient();
    if (connect_daemon(client_, false, error) != 0) return false;
  }
  control::NameRequest request{};
  if (device.size() >= sizeof request.name) {
    error = fmt::format("bad device name '{}'", device);
    return false;
  }
  std::snprintf(request.name, sizeof request.name, "%s", device.c_str());
  const auto code = static_cast<control::Op>(op);
  const bool named = code != control::Op::link_show;
  const int err =
      client_.call_text(code, named ? &request : nullptr, named ? sizeof request : 0, text);
  if (err == 0) return true;
  error = device.empty() ? std::strerror(err) : fmt::format("{}: {}", device, std::strerror(err));
  if (err == EIO || err == ETIMEDOUT) client_ = control::ControlClient();  // reconnect next time
  return false;
}

std::optional<nlohmann::ordered_json> TelemetryClient::links(std::string& error) {
  std::string text;
  if (!call_text(static_cast<int>(control::Op::link_show), "", text, error)) return std::nullopt;
  auto links = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!links.is_array()) {
    error = "malformed link show reply from xroced";
    return std::nullopt;
  }
  return links;
}

std::optional<DeviceSnapshot> TelemetryClient::snapshot(const std::string& device,
                                                        std::string& error) {
  DeviceSnapshot snap;
  snap.device = device;
  auto all = links(error);
  if (!all) return std::nullopt;
  for (const auto& l : *all)
    if (l.value("ifname", "") == device) snap.link = l;
  if (!snap.link.is_object()) {
    error = fmt::format("{}: no such device", device);
    return std::nullopt;
  }
  std::string stat_text;
  std::string qp_text;
  if (!call_text(static_cast<int>(control::Op::stat), device, stat_text, error) ||
      !call_text(static_cast<int>(control::Op::qp_show), device, qp_text, error)) {
    return std::nullopt;
  }
  snap.taken = std::chrono::steady_clock::now();
  const auto stat = nlohmann::ordered_json::parse(stat_text, nullptr, false);
  snap.qps = nlohmann::ordered_json::parse(qp_text, nullptr, false);
  if (!stat.is_object() || !stat.contains("counters") || !snap.qps.is_array()) {
    error = "malformed stat or qp show reply from xroced";
    return std::nullopt;
  }
  snap.counters = stat["counters"];
  if (stat.contains("port")) snap.port = stat["port"];
  return snap;
}

std::vector<QpRow> qp_rows(const DeviceSnapshot* before, const DeviceSnapshot& now) {
  std::vector<QpRow> rows;
  const double dt = before ? seconds_between(*before, now) : 0;
  for (const auto& qp : now.qps) {
    QpRow row;
    row.qp = qp;
    row.rnr = u64(qp, "rnr_naks_sent") + u64(qp, "rnr_naks_received");
    row.naks = u64(qp, "naks_sent") + u64(qp, "naks_received");
    const nlohmann::ordered_json* old = nullptr;
    if (before != nullptr) {
      for (const auto& b : before->qps)
        if (b.value("qpn", 0u) == qp.value("qpn", 0u)) old = &b;
    }
    if (old != nullptr && dt > 0) {
      const auto per_s = [&](const char* key) {
        return static_cast<double>(growth(u64(*old, key), u64(qp, key))) / dt;
      };
      row.tx_mbps = per_s("payload_bytes_sent") * 8 / 1e6;
      row.rx_mbps = per_s("payload_bytes_received") * 8 / 1e6;
      row.packets_per_s = per_s("packets_sent") + per_s("packets_received");
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

double counter_rate(const DeviceSnapshot* before, const DeviceSnapshot& now,
                    const std::string& name) {
  if (before == nullptr) return 0;
  const double dt = seconds_between(*before, now);
  if (dt <= 0) return 0;
  return static_cast<double>(growth(before->counters.value(name, std::uint64_t{0}),
                                    now.counters.value(name, std::uint64_t{0}))) /
         dt;
}

}  // namespace xroce::cli
