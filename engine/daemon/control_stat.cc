// The observability ops (include/xroce/control.h: stat, qp_show) behind `xroce stat` and
// `xroce qp show`, and the hw_counters files of the sysfs-shaped tree. A user other than root
// sees the device's counters (as the kernel shows hw_counters to all) and its own regions and
// QPs only.
//
// Where the counters come from: each worker's device::CounterBlock, which the worker alone
// writes (frames as it sends and classifies them, its QPs' transport and DCQCN counters as they
// grow, completions; engine/daemon/worker.h), summed here with relaxed loads. Counts of QPs
// already destroyed stay; the counters restart when the device's data path does (link del /
// link add). link_downed is not counted yet. "port" sums the ports' own statistics
// (net::PortStats) over the queues, from the same start.
#include <arpa/inet.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/control_ops.h"
#include "device/counters_report.h"
#include "device/dma.h"

namespace xroce::daemon {

namespace {

std::string peer_text(const control::AhAttr& av) {
  char text[INET6_ADDRSTRLEN] = {};
  const std::uint8_t* gid = av.dgid;
  static constexpr std::uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid, kV4Prefix, sizeof kV4Prefix) == 0) {
    inet_ntop(AF_INET, gid + 12, text, sizeof text);
  } else {
    inet_ntop(AF_INET6, gid, text, sizeof text);
  }
  return text;
}

// One QP to show, with what the control thread knows of it.
struct ShownQp {
  wire::Qpn qpn;
  device::QpShowContext context;
};

// The transport's and DCQCN's view of each QP, read on its worker: one call per worker, however
// many QPs it runs.
void add_worker_views(Worker& worker, const std::vector<ShownQp>& qps, double line_rate_mbps,
                      nlohmann::ordered_json& out) {
  auto views = worker.call([&qps, line_rate_mbps](Worker& self) {
    std::vector<nlohmann::ordered_json> shown;
    for (const ShownQp& q : qps) {
      transport::Qp* core = self.find_qp_on_worker(q.qpn);
      if (core == nullptr) continue;
      nlohmann::ordered_json j = device::qp_show_json(*core, q.context);
      // DCQCN (engine/cc): the rate the QP is paced at, its target and alpha; the line rate and
      // stage "none" for a QP without congestion control (UD, or not connected yet).
      const std::optional<QpCcStatus> cc = self.qp_cc_on_worker(q.qpn);
      j["rate_mbps"] = cc ? cc->rate_mbps : line_rate_mbps;
      j["target_rate_mbps"] = cc ? cc->target_rate_mbps : line_rate_mbps;
      j["alpha"] = cc ? cc->alpha : 0.0;
      j["cc_stage"] = cc ? cc->stage : "none";
      j["cc_active"] = cc && cc->active;
      j["priority"] = cc ? cc->priority : 0;
      j["rp_cnp_handled"] = cc ? cc->counters.rp_cnp_handled : 0;
      j["np_cnp_sent"] = cc ? cc->counters.np_cnp_sent : 0;
      shown.push_back(std::move(j));
    }
    return shown;
  });
  for (auto& j : views)
    out.push_back(std::move(j));
}

}  // namespace

device::CounterValues worker_counters(Datapath& datapath) {
  device::CounterValues v{};
  for (std::uint32_t w = 0; w < datapath.worker_count(); ++w) {
    const device::CounterBlock& block = datapath.worker(w).device_counters();
    for (std::size_t i = 0; i < device::kCounterCount; ++i)
      v[i] += block.load(static_cast<device::Counter>(i));
  }
  return v;
}

namespace ops {

Reply stat(OpContext& ctx) {
  ServedDevice& served = *ctx.served;
  device::Device& dev = *served.model;
  const std::string& name = dev.name();

  const device::CounterValues values = ctx.devices.write_hw_counters(name, served);

  nlohmann::ordered_json regions = nlohmann::ordered_json::array();
  for (const auto& [handle, mr] : dev.memory_regions()) {
    if (!visible_to(ctx.sessions, ctx.sender.uid, mr.owner)) continue;
    const auto memory = served.memory->find(mr.owner);
    const device::DmaKind kind =
        memory ? memory->kind_of(mr.addr, mr.length) : device::DmaKind::kCrossMemory;
    regions.push_back({{"handle", handle},
                       {"pid", mr.pid},
                       {"addr", mr.addr},
                       {"length", mr.length},
                       {"dma", device::to_string(kind)}});
  }
  nlohmann::ordered_json out = {
      {"device", name},
      {"counters", nlohmann::ordered_json::parse(device::counters_json(values))},
      {"memory_regions", regions}};
  // The ports under the data path, summed over its queues: what the kernel side saw (frames
  // the rings dropped, sends the kernel refused) and what the offloads did.
  if (served.runner) {
    const DatapathStatus status = served.runner->datapath().status();
    nlohmann::ordered_json port = {{"mode", status.port_mode}, {"queues", status.workers}};
    for (const net::PortStatField& f : net::kPortStatFields)
      port[f.name] = status.port.*f.member;
    // How often the queues' workers went to sleep, each a wake-up later: on a host with fewer
    // cores than busy threads an idle worker sleeps at once (worker_sleep.h), and what a sleep
    // and its wake-up cost there sets the rate of small messages (bench/README.md).
    port["worker_sleeps"] = status.counters.sleeps;
    // Of those, the sleeps without doorbells while a QP streamed (worker.h, WorkerConfig::
    // moderation_ns): how often the workers moderated the applications' doorbells.
    port["worker_moderated_sleeps"] = status.counters.moderated_sleeps;
    // Gauges: how many of its largest frames a queue's port holds received, the request PSNs
    // the device's RC QPs may have unacknowledged together (a quarter of that: Device::
    // set_port_receive_frames), and how many they have now.
    port["receive_frames"] = served.runner->datapath().receive_frames();
    port["inflight_budget_psns"] = dev.inflight_budget().limit_psns();
    port["inflight_psns"] = dev.inflight_budget().in_flight_psns();
    out["port"] = std::move(port);
  }
  if (const auto cm = ctx.devices.cm().stat(name)) {
    out["cm"] = {{"mads_sent", cm->mads_sent},       {"mads_received", cm->mads_received},
                 {"mads_retried", cm->mads_retried}, {"mads_dropped", cm->mads_dropped},
                 {"timeouts", cm->timeouts},         {"rej_sent", cm->rej_sent},
                 {"rej_received", cm->rej_received}};
  }
  return {0, {}, out.dump(), {}};
}

Reply qp_show(OpContext& ctx) {
  ServedDevice& served = *ctx.served;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (!served.runner) return {0, {}, out.dump(), {}};
  Datapath& datapath = served.runner->datapath();
  std::vector<std::vector<ShownQp>> by_worker(datapath.worker_count());
  for (const auto& [handle, qp] : served.model->queue_pairs()) {
    if (!visible_to(ctx.sessions, ctx.sender.uid, qp->owner)) continue;
    Worker* worker = datapath.worker_for(qp->qpn);
    if (worker == nullptr) continue;
    ShownQp shown{qp->qpn, {}};
    shown.context.worker = worker->index();
    shown.context.peer = qp->type == transport::QpType::kUd ? std::string() : peer_text(qp->av);
    if (const Session* owner = ctx.sessions.find(qp->owner)) shown.context.pid = owner->peer.pid();
    by_worker[worker->index()].push_back(std::move(shown));
  }
  for (std::uint32_t w = 0; w < datapath.worker_count(); ++w) {
    if (!by_worker[w].empty())
      add_worker_views(datapath.worker(w), by_worker[w], served.cc.line_rate_mbps, out);
  }
  return {0, {}, out.dump(), {}};
}

}  // namespace ops
}  // namespace xroce::daemon
