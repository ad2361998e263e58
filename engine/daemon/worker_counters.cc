#include "daemon/worker_counters.h"

#include "device/counters_report.h"

namespace xroce::daemon {
namespace {

void add_growth(device::CounterBlock& block, device::Counter c, std::uint64_t now,
                std::uint64_t& reported) {
  if (now > reported) block.add(c, now - reported);
  reported = now;
}

}  // namespace

void WorkerCounters::completion(const transport::Completion& c) {
  device::feed_completion(device_, c);
}

void WorkerCounters::qp_growth(Hosted& hosted) {
  device::feed_qp_counters(device_, hosted.qp->counters(), hosted.reported);
  if (hosted.cc == nullptr) return;
  const cc::CcCounters now = hosted.cc->qp_cc.counters();
  add_growth(device_, device::Counter::kRpCnpHandled, now.rp_cnp_handled,
             hosted.cc_reported.rp_cnp_handled);
  add_growth(device_, device::Counter::kRpCnpIgnored, now.rp_cnp_ignored,
             hosted.cc_reported.rp_cnp_ignored);
}

}  // namespace xroce::daemon
