// The observability ops (include/xroce/control.h: stat, qp_show) behind `xroce stat` and
// `xroce qp show`, and the hw_counters files of the sysfs-shaped tree.
//
// Where the counters come from: each worker's device::CounterBlock, which the worker alone
// writes (frames as it sends and classifies them, its QPs' transport and DCQCN counters as they
// grow, completions; engine/daemon/worker.h), summed here with relaxed loads. Counts of QPs
// already destroyed stay; the counters restart when the device's data path does (link del /
// link add). link_downed is not counted yet.
#include <arpa/inet.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/control_server.h"
#include "device/counters_report.h"
#include "device/dma.h"

namespace xroce::daemon {

namespace {

std::string text_reply(const std::string& text) {
  control::TextReply head{static_cast<uint32_t>(text.size())};
  return std::string(reinterpret_cast<const char*>(&head), sizeof head) + text;
}

// The device a NameRequest names, or "" if the body is malformed.
std::string requested_name(const std::string& body) {
  control::NameRequest request{};
  if (body.size() != sizeof request) return {};
  std::memcpy(&request, body.data(), sizeof request);
  request.name[sizeof request.name - 1] = '\0';
  return request.name;
}

// Every worker's counter block, summed.
device::CounterValues worker_counters(Datapath& datapath) {
  device::CounterValues v{};
  for (std::uint32_t w = 0; w < datapath.worker_count(); ++w) {
    const device::CounterBlock& block = datapath.worker(w).device_counters();
    for (std::size_t i = 0; i < device::kCounterCount; ++i)
      v[i] += block.load(static_cast<device::Counter>(i));
  }
  return v;
}

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

}  // namespace

void ControlServer::refresh_hw_counters() {
  const std::uint64_t now = monotonic_now_ns();
  if (now - counters_written_ns_ < kCounterRefreshMs * 1'000'000ull) return;
  counters_written_ns_ = now;
  for (auto& [name, served] : devices_) {
    if (!served.runner) continue;
    device::write_hw_counters(tree_.root() + "/class/infiniband/" + name + "/ports/1",
                              worker_counters(served.runner->datapath()));
  }
}

ControlServer::Reply ControlServer::stat(const std::string& body) {
  const std::string name = requested_name(body);
  const auto it = devices_.find(name);
  if (it == devices_.end()) return {ENODEV, {}};
  ServedDevice& served = it->second;
  device::Device& dev = *served.model;

  device::CounterValues values{};
  if (served.runner) values = worker_counters(served.runner->datapath());
  device::write_hw_counters(tree_.root() + "/class/infiniband/" + name + "/ports/1", values);

  nlohmann::ordered_json regions = nlohmann::ordered_json::array();
  for (const auto& [handle, mr] : dev.memory_regions()) {
    const auto memory = served.memory ? served.memory->find(mr.pid) : nullptr;
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
  if (const auto cm = cm_.stat(name)) {
    out["cm"] = {{"mads_sent", cm->mads_sent},       {"mads_received", cm->mads_received},
                 {"mads_retried", cm->mads_retried}, {"mads_dropped", cm->mads_dropped},
                 {"rej_sent", cm->rej_sent},         {"rej_received", cm->rej_received}};
  }
  return {0, text_reply(out.dump())};
}

ControlServer::Reply ControlServer::qp_show(const std::string& body) {
  const std::string name = requested_name(body);
  const auto it = devices_.find(name);
  if (it == devices_.end()) return {ENODEV, {}};
  ServedDevice& served = it->second;
  device::Device& dev = *served.model;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [handle, qp] : dev.queue_pairs()) {
    device::QpShowContext context;
    context.peer = qp->type == transport::QpType::kUd ? std::string() : peer_text(qp->av);
    if (served.runner) {
      Datapath& datapath = served.runner->datapath();
      for (std::uint32_t w = 0; w < datapath.worker_count(); ++w) {
        const wire::Qpn qpn = qp->qpn;
        if (datapath.worker(w).call(
                [qpn](Worker& worker) { return worker.find_qp_on_worker(qpn) != nullptr; })) {
          context.worker = w;
        }
      }
    }
    for (const auto& [fd, client] : clients_)
      if (client.id == qp->owner) context.pid = client.pid;
    dev.with_core(*qp,
                  [&](transport::Qp& core) { out.push_back(device::qp_show_json(core, context)); });
    if (out.empty()) continue;
    // DCQCN (engine/cc): the rate the QP is paced at, its target and alpha; the line rate and
    // stage "none" for a QP without congestion control (UD, or not connected yet).
    std::optional<QpCcStatus> cc;
    if (served.runner) {
      if (Worker* w = served.runner->datapath().worker_for(qp->qpn)) {
        const wire::Qpn qpn = qp->qpn;
        cc = w->call([qpn](Worker& self) { return self.qp_cc_on_worker(qpn); });
      }
    }
    nlohmann::ordered_json& j = out.back();
    j["rate_mbps"] = cc ? cc->rate_mbps : served.cc.line_rate_mbps;
    j["target_rate_mbps"] = cc ? cc->target_rate_mbps : served.cc.line_rate_mbps;
    j["alpha"] = cc ? cc->alpha : 0.0;
    j["cc_stage"] = cc ? cc->stage : "none";
    j["cc_active"] = cc && cc->active;
    j["priority"] = cc ? cc->priority : 0;
    j["rp_cnp_handled"] = cc ? cc->counters.rp_cnp_handled : 0;
    j["np_cnp_sent"] = cc ? cc->counters.np_cnp_sent : 0;
  }
  return {0, text_reply(out.dump())};
}

}  // namespace xroce::daemon
