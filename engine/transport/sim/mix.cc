#include <cmath>
#include <cstdio>
#include <string>

#include "transport/sim/workload.h"

namespace xroce::transport::sim {

namespace {
constexpr std::array<const char*, kOpKinds> kNames = {
    "send", "send_imm",     "send_inv", "write",    "write_imm", "read",     "cas",
    "faa",  "atomic_write", "flush",    "mw_write", "uc_send",   "uc_write", "uc_write_imm"};

// Names that stand for several kinds.
bool in_group(std::string_view name, OpKind k) {
  if (name == "atomic") return k == OpKind::kCmpSwap || k == OpKind::kFetchAdd;
  if (name == "mw") return k == OpKind::kSendInv || k == OpKind::kMwWrite;
  if (name == "uc") return is_uc(k);
  return false;
}
}  // namespace

const char* to_string(OpKind k) {
  return kNames[static_cast<std::size_t>(k)];
}

std::optional<Mix> Mix::parse(std::string_view text) {
  if (text == "all") return Mix{};
  Mix m;
  m.weight.fill(0);
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    std::uint32_t w = 1;
    const std::size_t eq = item.find('=');
    if (eq != std::string_view::npos) {
      const std::string num(item.substr(eq + 1));
      char* end = nullptr;
      const unsigned long v = std::strtoul(num.c_str(), &end, 10);
      if (num.empty() || *end != '\0' || v > 1000000) return std::nullopt;
      w = static_cast<std::uint32_t>(v);
      item = item.substr(0, eq);
    }
    bool found = false;
    for (std::size_t i = 0; i < kOpKinds; ++i) {
      if (item == kNames[i] || in_group(item, static_cast<OpKind>(i))) {
        m.weight[i] = w;
        found = true;
      }
    }
    if (!found) return std::nullopt;
  }
  std::uint64_t total = 0;
  for (auto w : m.weight)
    total += w;
  if (total == 0) return std::nullopt;
  return m;
}

std::string Mix::to_string() const {
  if (*this == Mix{}) return "all";
  std::string s;
  for (std::size_t i = 0; i < kOpKinds; ++i) {
    if (weight[i] == 0) continue;
    if (!s.empty()) s += ',';
    s += kNames[i];
    s += '=';
    s += std::to_string(weight[i]);
  }
  return s;
}

std::string reproduce_command(const ScenarioConfig& c) {
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "xroce sim --seed %llu --ops %llu --nodes %u --qps %u --uc-qps %u --mix %s --mtu %u "
      "--loss %g --reorder %g --dup %g --corrupt %g --delay-us %llu --rate-gbps %g "
      "--max-msg %u --outstanding %u --bottleneck-gbps %g --queue-bytes %llu "
      "--inflight-budget %u --rto-floor-us %llu --resend-probe-floor-us %llu "
      "--loss-window-min-psns %u --tail-probe-floor-us %llu --lossy-tail-probe-floor-us %llu "
      "--lossy-read-tail-probe-floor-us %llu --selective-read-repair %d --read-repair-floor-us "
      "%llu "
      "--nic-queue-bytes %llu --jitter-us %llu "
      "--stall-every-us %llu --stall-max-us %llu --path-stall-every-us %llu "
      "--path-stall-max-us %llu",
      static_cast<unsigned long long>(c.seed), static_cast<unsigned long long>(c.ops), c.nodes,
      c.qps, c.uc_qps, c.mix.to_string().c_str(), mtu_bytes(c.mtu), c.loss, c.reorder, c.dup,
      c.corrupt, static_cast<unsigned long long>(c.delay_us), c.rate_gbps, c.max_msg_bytes,
      c.max_outstanding, c.bottleneck_gbps, static_cast<unsigned long long>(c.queue_bytes),
      c.inflight_budget_psns, static_cast<unsigned long long>(c.rto_floor_us),
      static_cast<unsigned long long>(c.resend_probe_floor_us), c.loss_window_min_psns,
      static_cast<unsigned long long>(c.tail_probe_floor_us),
      static_cast<unsigned long long>(c.lossy_tail_probe_floor_us),
      static_cast<unsigned long long>(c.lossy_read_tail_probe_floor_us),
      c.selective_read_repair ? 1 : 0, static_cast<unsigned long long>(c.read_repair_floor_us),
      static_cast<unsigned long long>(c.nic_queue_bytes),
      static_cast<unsigned long long>(c.jitter_us),
      static_cast<unsigned long long>(c.stall_every_us),
      static_cast<unsigned long long>(c.stall_max_us),
      static_cast<unsigned long long>(c.path_stall_every_us),
      static_cast<unsigned long long>(c.path_stall_max_us));
  return buf;
}

}  // namespace xroce::transport::sim
