// The observability ops (include/xroce/control.h: stat, qp_show) behind `xroce stat` and
// `xroce qp show`, and the hw_counters files of the sysfs-shaped tree.
//
// Where the counters come from today: the workers' frame counters (DatapathCounters, read
// through Datapath::status()) and the transport counters of the QPs that exist now (read on
// their workers). Counters of QPs already destroyed are not kept, and link_downed is not
// counted yet; engine/device/counters.h's per-worker DeviceCounters, fed as
// counters_report.h describes, is the replacement that keeps both.
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

void add(device::CounterValues& v, device::Counter c, std::uint64_t n) {
  v[static_cast<std::size_t>(c)] += n;
}

// The frame counters the workers keep, under the counter set's names.
void add_datapath(device::CounterValues& v, const DatapathCounters& d) {
  using device::Counter;
  add(v, Counter::kSentPkts, d.tx_frames);
  add(v, Counter::kRcvdPkts, d.rx_delivered);
  add(v, Counter::kRxIcrcErrors, d.rx_icrc_errors);
  add(v, Counter::kRxMalformed, d.rx_malformed);
  add(v, Counter::kRxUnknownQp, d.rx_no_qp);
  add(v, Counter::kRxHandoffDrops, d.rx_handover_drops);
  add(v, Counter::kSendErr, d.tx_encode_errors + d.tx_backlog_drops);
  add(v, Counter::kNeighbourFailures, d.tx_no_neighbour);
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

ControlServer::Reply ControlServer::stat(const std::string& body) {
  const std::string name = requested_name(body);
  const auto it = devices_.find(name);
  if (it == devices_.end()) return {ENODEV, {}};
  ServedDevice& served = it->second;
  device::Device& dev = *served.model;

  device::CounterValues values{};
  if (served.runner) add_datapath(values, served.runner->datapath().status().counters);
  device::DeviceCounters qp_totals(0);  // the control block sums the live QPs' counters
  for (const auto& [handle, qp] : dev.queue_pairs()) {
    dev.with_core(*qp, [&](transport::Qp& core) {
      transport::QpCounters none;
      device::feed_qp_counters(qp_totals.control_block(), core.counters(), none);
    });
  }
  const device::CounterValues from_qps = qp_totals.read();
  for (std::size_t i = 0; i < device::kCounterCount; ++i)
    values[i] += from_qps[i];
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
  }
  return {0, text_reply(out.dump())};
}

}  // namespace xroce::daemon
