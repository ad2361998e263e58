// Feeding the device counters from the transport, and publishing them (JSON, hw_counters files).
#include "device/counters_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace xroce::device {
namespace {

std::uint64_t at(const CounterValues& v, Counter c) {
  return v[static_cast<std::size_t>(c)];
}

TEST(CountersReport, QpCountersAddOnlyTheirGrowth) {
  DeviceCounters counters(1);
  CounterBlock& block = counters.worker_block(0);
  transport::QpCounters qp, reported;
  qp.duplicate_requests = 2;
  qp.out_of_sequence = 1;
  qp.naks_received = 5;
  qp.rnr_naks_received = 3;
  qp.rnr_naks_sent = 4;
  qp.timeouts = 6;
  qp.adaptive_retransmits = 8;
  qp.resend_timeouts = 5;
  qp.tail_probes = 9;
  qp.probe_gaps = 3;
  qp.resend_repeats = 7;
  qp.replays_reordered = 4;
  qp.replay_gap_retries = 2;
  qp.read_responses_ahead = 6;
  qp.read_ranges_asked = 3;
  qp.receives_pulled_late = 6;
  feed_qp_counters(block, qp, reported);
  feed_qp_counters(block, qp, reported);  // nothing new: nothing added
  qp.duplicate_requests = 7;
  feed_qp_counters(block, qp, reported);
  const CounterValues v = counters.read();
  EXPECT_EQ(at(v, Counter::kDuplicateRequest), 7u);
  EXPECT_EQ(at(v, Counter::kOutOfSeqRequest), 1u);
  EXPECT_EQ(at(v, Counter::kRcvdRnrErr), 3u);
  EXPECT_EQ(at(v, Counter::kRcvdSeqErr), 2u);  // the non-RNR NAKs
  EXPECT_EQ(at(v, Counter::kSendRnrErr), 4u);
  EXPECT_EQ(at(v, Counter::kCompleterRetryErr), 6u);
  EXPECT_EQ(at(v, Counter::kAdaptiveRetransmits), 8u);  // apart from the Local ACK Timeout's
  EXPECT_EQ(at(v, Counter::kResendTimeouts), 5u);
  EXPECT_EQ(at(v, Counter::kTailProbes), 9u);
  EXPECT_EQ(at(v, Counter::kProbeGaps), 3u);
  EXPECT_EQ(at(v, Counter::kResendRepeats), 7u);
  EXPECT_EQ(at(v, Counter::kReplaysReordered), 4u);
  EXPECT_EQ(at(v, Counter::kReplayGapRetries), 2u);
  EXPECT_EQ(at(v, Counter::kReadResponsesAhead), 6u);
  EXPECT_EQ(at(v, Counter::kReadRangesAsked), 3u);
  EXPECT_EQ(at(v, Counter::kReceivesPulledLate), 6u);
}

TEST(CountersReport, ResetQpCountersAddTheirNewValue) {
  DeviceCounters counters(1);
  transport::QpCounters qp, reported;
  qp.out_of_sequence = 10;
  feed_qp_counters(counters.worker_block(0), qp, reported);
  qp = {};
  qp.out_of_sequence = 2;  // the QP went through RESET
  feed_qp_counters(counters.worker_block(0), qp, reported);
  EXPECT_EQ(counters.read(Counter::kOutOfSeqRequest), 12u);
}

TEST(CountersReport, CompletionsCountSendsReceivesAndRetryFailures) {
  DeviceCounters counters(1);
  CounterBlock& block = counters.worker_block(0);
  transport::Completion c;
  c.opcode = transport::WcOpcode::kSend;
  feed_completion(block, c);
  c.opcode = transport::WcOpcode::kRdmaWrite;
  feed_completion(block, c);  // not a SEND
  c.opcode = transport::WcOpcode::kRecv;
  feed_completion(block, c);
  c.opcode = transport::WcOpcode::kSend;
  c.status = transport::WcStatus::kRetryExcErr;
  feed_completion(block, c);
  c.status = transport::WcStatus::kRnrRetryExcErr;
  feed_completion(block, c);
  c.status = transport::WcStatus::kWrFlushErr;
  feed_completion(block, c);
  const CounterValues v = counters.read();
  EXPECT_EQ(at(v, Counter::kRdmaSends), 1u);
  EXPECT_EQ(at(v, Counter::kRdmaRecvs), 1u);
  EXPECT_EQ(at(v, Counter::kRetryExceededErr), 1u);
  EXPECT_EQ(at(v, Counter::kRetryRnrExceededErr), 1u);
}

// Error completions other than flushes count on the side that completed them; the requester's
// remote access and invalid request NAKs count apart too (ConnectX's names).
TEST(CountersReport, ErrorCompletionsCountPerSideAndPerNak) {
  DeviceCounters counters(1);
  CounterBlock& block = counters.worker_block(0);
  transport::Completion c;
  c.opcode = transport::WcOpcode::kRdmaWrite;
  c.status = transport::WcStatus::kRemAccessErr;
  feed_completion(block, c);
  c.opcode = transport::WcOpcode::kSend;
  c.status = transport::WcStatus::kRemInvReqErr;
  feed_completion(block, c);
  c.opcode = transport::WcOpcode::kBindMw;
  c.status = transport::WcStatus::kMwBindErr;
  feed_completion(block, c);
  c.status = transport::WcStatus::kWrFlushErr;
  feed_completion(block, c);  // a flush is no error of its own
  c.opcode = transport::WcOpcode::kRecv;
  c.status = transport::WcStatus::kRemAccessErr;  // a receive consumed by a refused request
  feed_completion(block, c);
  c.status = transport::WcStatus::kWrFlushErr;
  feed_completion(block, c);
  const CounterValues v = counters.read();
  EXPECT_EQ(at(v, Counter::kReqCqeError), 3u);
  EXPECT_EQ(at(v, Counter::kRespCqeError), 1u);
  EXPECT_EQ(at(v, Counter::kReqRemoteAccessErrors), 1u);
  EXPECT_EQ(at(v, Counter::kReqRemoteInvalidRequest), 1u);
  EXPECT_EQ(at(v, Counter::kRdmaSends), 0u);
  EXPECT_EQ(at(v, Counter::kRdmaRecvs), 0u);
}

TEST(CountersReport, JsonHasEveryCounterInOrder) {
  CounterValues v{};
  v[static_cast<std::size_t>(Counter::kSentPkts)] = 42;
  const auto j = nlohmann::ordered_json::parse(counters_json(v));
  ASSERT_EQ(j.size(), kCounterCount);
  std::size_t i = 0;
  for (const auto& [name, value] : j.items())
    EXPECT_EQ(name, kCounterNames[i++]);
  EXPECT_EQ(j["sent_pkts"], 42);
  EXPECT_EQ(j["rcvd_pkts"], 0);
}

TEST(CountersReport, HwCountersFilesAsRxeHasThem) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("xroce-hwc-" + std::to_string(::getpid()));
  CounterValues v{};
  v[static_cast<std::size_t>(Counter::kRcvdPkts)] = 1234;
  ASSERT_EQ(write_hw_counters(dir.string(), v), 0);
  v[static_cast<std::size_t>(Counter::kRcvdPkts)] = 1235;
  ASSERT_EQ(write_hw_counters(dir.string(), v), 0);  // rewrites in place
  auto read = [&](const char* name) {
    std::ifstream f(dir / "hw_counters" / name);
    std::string s;
    std::getline(f, s);
    return s;
  };
  EXPECT_EQ(read("rcvd_pkts"), "1235");
  EXPECT_EQ(read("sent_pkts"), "0");
  EXPECT_EQ(read("out_of_seq_request"), "0");
  EXPECT_EQ(read("lifespan"), "10");
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "hw_counters")) {
    EXPECT_EQ(e.path().extension(), "") << e.path();  // no temporaries left
    ++files;
  }
  EXPECT_EQ(files, kCounterCount + 1);
  std::filesystem::remove_all(dir);
}

TEST(CountersReport, QpShowReadsTheTransportCore) {
  transport::LocalMemory memory;
  transport::MemoryRegionTable mrs(memory);
  transport::QpConfig config;
  config.qpn = wire::Qpn(0x11);
  config.loss_window_min_psns = 32;
  transport::Qp qp(config, mrs);
  transport::QpAttr attr;
  attr.qp_state = transport::QpState::kInit;
  attr.qp_access_flags = 0;
  ASSERT_EQ(qp.modify(attr, transport::qp_attr::kState | transport::qp_attr::kPkeyIndex |
                                transport::qp_attr::kPort | transport::qp_attr::kAccessFlags),
            0);
  const auto j = qp_show_json(qp, {.worker = 3, .pid = 77, .peer = "198.18.0.2"});
  EXPECT_EQ(j["qpn"], 0x11);
  EXPECT_EQ(j["type"], "RC");
  EXPECT_EQ(j["state"], transport::to_string(transport::QpState::kInit));
  EXPECT_EQ(j["worker"], 3);
  EXPECT_EQ(j["pid"], 77);
  EXPECT_EQ(j["peer"], "198.18.0.2");
  EXPECT_EQ(j["retransmits"], 0);
  EXPECT_TRUE(j.contains("sq_psn") && j.contains("rq_psn") && j.contains("dest_qpn"));
  for (const char* key :
       {"payload_bytes_sent", "payload_bytes_received", "naks_sent", "rnr_naks_sent",
        "ecn_ce_received", "cnps_received", "rtt_samples", "tail_probes", "probe_gaps",
        "resend_repeats", "replays_reordered", "receives_pulled_late", "loss_window_reductions",
        "read_responses_ahead", "read_ranges_asked"}) {
    EXPECT_EQ(j[key], 0) << key;
  }
  EXPECT_EQ(j["rtt_us"], 0.0);
  EXPECT_EQ(j["loss_window_psns"], config.max_unacked_psns);  // a new QP: the whole window
}

}  // namespace
}  // namespace xroce::device
