// The conformance harness judged on a target whose behaviour is known: xroce's transport in
// process. Every case passes (or says why it does not apply) against it, and every case fails
// against at least one deliberately wrong device: one that answers with a wrong PSN, a wrong
// AETH, a wrong opcode, wrong data, twice, too early, not at all, answers what it should drop,
// or reports wrong completions, memory or QP state. A case no wrong device can fail would be
// a case that cannot tell a right answer from a wrong one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <set>

#include "case.h"
#include "inprocess.h"
#include "report.h"
#include "wire/frame.h"
#include "wire/pcap.h"

namespace xroce::conform {
namespace {

Timing inprocess_timing() {
  return Timing{200'000'000, 50'000'000};  // virtual time: free
}

enum class Mutation {
  kDropAllFrames,
  kPsnPlusOne,
  kAckNakSwapped,
  kAethValueShifted,
  kOpcodeSwapped,
  kDataCorrupted,
  kEveryFrameTwice,
  kAnswersWhatItShouldDrop,
  kMarksCe,
  kCompletionStatusFlipped,
  kCompletionsLost,
  kCompletionsTwice,
  kCompletionFieldsWrong,
  kMemoryCorrupted,
  kErrorStateMisreported,
};

const char* name(Mutation m) {
  switch (m) {
    case Mutation::kDropAllFrames:
      return "drops every frame";  // used by the report test; too easy to count as a catch
    case Mutation::kPsnPlusOne:
      return "PSN + 1";
    case Mutation::kAckNakSwapped:
      return "ACK <-> NAK";
    case Mutation::kAethValueShifted:
      return "AETH value / MSN + 1";
    case Mutation::kOpcodeSwapped:
      return "opcode swapped";
    case Mutation::kDataCorrupted:
      return "data corrupted";
    case Mutation::kEveryFrameTwice:
      return "every frame twice";
    case Mutation::kAnswersWhatItShouldDrop:
      return "ACKs every frame it gets";
    case Mutation::kMarksCe:
      return "marks CE";
    case Mutation::kCompletionStatusFlipped:
      return "completion status flipped";
    case Mutation::kCompletionsLost:
      return "completions lost";
    case Mutation::kCompletionsTwice:
      return "completions twice";
    case Mutation::kCompletionFieldsWrong:
      return "completion fields wrong";
    case Mutation::kMemoryCorrupted:
      return "memory corrupted";
    case Mutation::kErrorStateMisreported:
      return "QP state misreported";
  }
  return "?";
}

constexpr Mutation kAllMutations[] = {
    Mutation::kDropAllFrames,
    Mutation::kPsnPlusOne,
    Mutation::kAckNakSwapped,
    Mutation::kAethValueShifted,
    Mutation::kOpcodeSwapped,
    Mutation::kDataCorrupted,
    Mutation::kEveryFrameTwice,
    Mutation::kAnswersWhatItShouldDrop,
    Mutation::kMarksCe,
    Mutation::kCompletionStatusFlipped,
    Mutation::kCompletionsLost,
    Mutation::kCompletionsTwice,
    Mutation::kCompletionFieldsWrong,
    Mutation::kMemoryCorrupted,
    Mutation::kErrorStateMisreported,
};

wire::Opcode swapped(wire::Opcode op) {
  using wire::Opcode;
  switch (op) {
    case Opcode::kRcReadResponseOnly:
      return Opcode::kRcReadResponseFirst;
    case Opcode::kRcReadResponseFirst:
      return Opcode::kRcReadResponseOnly;
    case Opcode::kRcReadResponseMiddle:
      return Opcode::kRcReadResponseLast;
    case Opcode::kRcReadResponseLast:
      return Opcode::kRcReadResponseMiddle;
    case Opcode::kRcSendOnly:
      return Opcode::kRcSendFirst;
    case Opcode::kRcSendFirst:
      return Opcode::kRcSendOnly;
    case Opcode::kRcSendMiddle:
      return Opcode::kRcSendLast;
    case Opcode::kRcSendLast:
      return Opcode::kRcSendMiddle;
    case Opcode::kRcWriteOnly:
      return Opcode::kRcWriteFirst;
    case Opcode::kRcWriteFirst:
      return Opcode::kRcWriteOnly;
    case Opcode::kRcAck:
      return Opcode::kRcAtomicAck;
    case Opcode::kRcAtomicAck:
      return Opcode::kRcAck;
    case Opcode::kRcReadRequest:
      return Opcode::kRcWriteOnly;
    case Opcode::kRcCompareSwap:
      return Opcode::kRcFetchAdd;
    case Opcode::kRcFetchAdd:
      return Opcode::kRcCompareSwap;
    case Opcode::kUdSendOnly:
      return Opcode::kUdSendOnlyImm;
    case Opcode::kUdSendOnlyImm:
      return Opcode::kUdSendOnly;
    default:
      return op;
  }
}

// Makes the headers the new opcode needs (present or absent) and keeps the rest.
void fit_headers(wire::TransportHeaders& h) {
  const wire::HeaderSet need = h.info().headers;
  if (need.has(wire::Header::kAtomicAckEth) && !h.atomic_ack_orig) h.atomic_ack_orig = 0;
  if (!need.has(wire::Header::kAtomicAckEth)) h.atomic_ack_orig.reset();
  if (need.has(wire::Header::kAeth) && !h.aeth) h.aeth = wire::Aeth::ack(0);
  if (!need.has(wire::Header::kAeth)) h.aeth.reset();
  if (need.has(wire::Header::kReth) && !h.reth) h.reth = wire::Reth{};
  if (!need.has(wire::Header::kReth)) h.reth.reset();
  if (need.has(wire::Header::kAtomicEth) && !h.atomic_eth) h.atomic_eth = wire::AtomicEth{};
  if (!need.has(wire::Header::kAtomicEth)) h.atomic_eth.reset();
  if (need.has(wire::Header::kImmDt) && !h.imm) h.imm = 0;
  if (!need.has(wire::Header::kImmDt)) h.imm.reset();
}

// A device that is wrong in one way: the in-process target with one mutation on its output.
class WrongDevice final : public Target, public Link {
 public:
  WrongDevice(InProcessDevice& inner, Mutation m, std::uint32_t peer_qpn)
      : in_(inner), m_(m), peer_qpn_(peer_qpn) {}

  Capabilities capabilities() override { return in_.capabilities(); }
  QpInfo create_qp(const QpSpec& s) override { return in_.create_qp(s); }
  void destroy_qp(const QpInfo& q) override { in_.destroy_qp(q); }
  MrInfo register_mr(std::uint32_t l, std::uint32_t a) override { return in_.register_mr(l, a); }
  void write_mr(const MrInfo& mr, std::uint32_t o, const std::vector<std::uint8_t>& d) override {
    in_.write_mr(mr, o, d);
  }
  std::vector<std::uint8_t> read_mr(const MrInfo& mr, std::uint32_t o, std::uint32_t l) override {
    auto v = in_.read_mr(mr, o, l);
    if (m_ == Mutation::kMemoryCorrupted && !v.empty()) v[v.size() / 2] ^= 0xFF;
    return v;
  }
  void post_recv(const QpInfo& q, std::uint64_t id, const MrInfo& mr, std::uint32_t o,
                 std::uint32_t l) override {
    in_.post_recv(q, id, mr, o, l);
  }
  void post_send(const QpInfo& q, const SendSpec& w) override { in_.post_send(q, w); }
  std::vector<Cqe> poll(const QpInfo& q) override {
    std::vector<Cqe> got = in_.poll(q);
    switch (m_) {
      case Mutation::kCompletionsLost:
        return {};
      case Mutation::kCompletionsTwice: {
        std::vector<Cqe> twice;
        for (const Cqe& c : got) {
          twice.push_back(c);
          twice.push_back(c);
        }
        return twice;
      }
      case Mutation::kCompletionStatusFlipped:
        for (Cqe& c : got)
          c.status = c.status == wc::kSuccess ? wc::kRemAccessErr : wc::kSuccess;
        return got;
      case Mutation::kCompletionFieldsWrong:
        for (Cqe& c : got) {
          c.wr_id += 1;
          c.byte_len += 1;
          c.imm ^= 1;
          c.src_qp ^= 1;
          c.wc_flags ^= 3;
          c.opcode ^= 1;
        }
        return got;
      default:
        return got;
    }
  }
  bool in_error(const QpInfo& q) override {
    const bool e = in_.in_error(q);
    return m_ == Mutation::kErrorStateMisreported ? !e : e;
  }

  std::uint64_t now_ns() override { return in_.now_ns(); }
  void send(const Frame& f) override {
    in_.send(f);
    if (m_ == Mutation::kAnswersWhatItShouldDrop) {
      wire::DecodedFrame d;
      if (!wire::decode_frame_into(f, d)) {
        wire::TransportHeaders h;
        h.bth.opcode = wire::Opcode::kRcAck;
        h.bth.dest_qp = wire::Qpn(peer_qpn_);
        h.bth.psn = d.hdr.bth.psn;
        h.aeth = wire::Aeth::ack(0);
        extra_.push_back(encode_like(f, d, h, {}));
      }
    }
  }
  std::optional<Frame> receive(std::uint64_t deadline) override {
    while (extra_.empty()) {
      auto f = in_.receive(deadline);
      if (!f) return std::nullopt;
      mutate(std::move(*f));
    }
    Frame f = std::move(extra_.front());
    extra_.pop_front();
    return f;
  }
  void idle_until(std::uint64_t deadline) override { in_.idle_until(deadline); }

 private:
  static Frame encode_like(const Frame& like, const wire::DecodedFrame& d,
                           const wire::TransportHeaders& h, wire::Bytes payload) {
    wire::FrameAddress a = d.addr;
    std::swap(a.src_mac, a.dst_mac);
    std::swap(a.src_ip, a.dst_ip);
    (void)like;
    Frame out(wire::frame_bytes(a, h, payload.size()));
    if (!wire::encode_frame(a, h, payload, out)) return {};
    return out;
  }

  void mutate(Frame f) {
    wire::DecodedFrame d;
    if (wire::decode_frame_into(f, d)) {
      extra_.push_back(std::move(f));
      return;
    }
    wire::TransportHeaders h = d.hdr;
    std::vector<std::uint8_t> payload(d.payload.begin(), d.payload.end());
    wire::FrameAddress a = d.addr;
    switch (m_) {
      case Mutation::kDropAllFrames:
        return;
      case Mutation::kEveryFrameTwice:
        extra_.push_back(f);
        extra_.push_back(std::move(f));
        return;
      case Mutation::kPsnPlusOne:
        h.bth.psn = h.bth.psn + 1;
        break;
      case Mutation::kAckNakSwapped:
        if (h.aeth) {
          h.aeth = h.aeth->is_ack() ? wire::Aeth::nak(h.aeth->msn, wire::NakCode::kPsnSequenceError)
                                    : wire::Aeth::ack(h.aeth->msn);
        }
        if (h.bth.opcode == wire::Opcode::kCnp) h.bth.becn = false;
        break;
      case Mutation::kAethValueShifted:
        if (h.aeth) {
          h.aeth->syndrome =
              static_cast<std::uint8_t>((h.aeth->syndrome & 0x60) | ((h.aeth->value() + 1) & 0x1F));
          h.aeth->msn = (h.aeth->msn + 1) & 0xFFFFFF;
        }
        if (h.atomic_ack_orig) *h.atomic_ack_orig ^= 1;
        if (h.reth) h.reth->dma_length += 1;
        if (h.deth) h.deth->qkey = wire::Qkey(h.deth->qkey.value() ^ 1);
        if (h.bth.opcode == wire::Opcode::kRcAtomicAck) *h.atomic_ack_orig ^= 2;
        break;
      case Mutation::kOpcodeSwapped:
        h.bth.opcode = swapped(h.bth.opcode);
        fit_headers(h);
        if (!h.info().has_payload) payload.clear();
        break;
      case Mutation::kDataCorrupted:
        if (!payload.empty()) payload[payload.size() / 2] ^= 0x5A;
        if (h.atomic_ack_orig) *h.atomic_ack_orig ^= 0x100;
        if (h.reth) h.reth->va += 8;
        if (h.atomic_eth) h.atomic_eth->swap_add ^= 1;
        if (h.deth) h.deth->src_qp = wire::Qpn(h.deth->src_qp.value() ^ 1);
        if (h.imm) *h.imm ^= 1;
        break;
      case Mutation::kMarksCe:
        a.traffic_class |= static_cast<std::uint8_t>(wire::Ecn::kCe);
        break;
      default:
        extra_.push_back(std::move(f));
        return;
    }
    Frame out(wire::frame_bytes(a, h, payload.size()));
    if (wire::encode_frame(a, h, payload, out)) extra_.push_back(std::move(out));
  }

  InProcessDevice& in_;
  Mutation m_;
  std::uint32_t peer_qpn_;
  std::deque<Frame> extra_;
};

CaseResult run_inprocess(const Case& c, bool ipv6 = false) {
  const Endpoints ends = inprocess_endpoints(ipv6);
  InProcessDevice dev(ends);
  return run_case(c, dev, dev, ends, inprocess_timing(), 0x100);
}

CaseResult run_wrong(const Case& c, Mutation m, bool ipv6 = false) {
  const Endpoints ends = inprocess_endpoints(ipv6);
  InProcessDevice dev(ends);
  WrongDevice wrong(dev, m, 0x100);
  return run_case(c, wrong, wrong, ends, inprocess_timing(), 0x100);
}

TEST(ConformCases, AtLeastAHundredEachNamingItsRule) {
  const auto& cases = all_cases();
  EXPECT_GE(cases.size(), 100u);
  std::set<std::string> names;
  for (const Case& c : cases) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate name " << c.name;
    EXPECT_FALSE(c.rule.empty()) << c.name;
    EXPECT_FALSE(c.chapter.empty()) << c.name;
    EXPECT_FALSE(c.title.empty()) << c.name;
  }
  EXPECT_TRUE(case_selected(cases[0], "rc.*"));
  EXPECT_FALSE(case_selected(cases[0], "ud.*"));
}

// xroce's transport, in process: every case passes or is not applicable (and says why), with
// the peer speaking IPv4 and IPv6.
class ConformInProcess : public ::testing::TestWithParam<bool> {};

TEST_P(ConformInProcess, EveryCasePassesAgainstXroceTransport) {
  std::vector<CaseResult> results;
  for (const Case& c : all_cases())
    results.push_back(run_inprocess(c, GetParam()));
  const Totals t = totals(results);
  const std::string device =
      fmt::format("xroce (in-process transport, {})", GetParam() ? "IPv6" : "IPv4");
  std::cout << text_report(results, device);
  EXPECT_EQ(t.fail, 0) << text_report(results, device);
  EXPECT_GE(t.pass, 100);
}

INSTANTIATE_TEST_SUITE_P(Ip, ConformInProcess, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "IPv6" : "IPv4"; });

// Each case fails against at least one deliberately wrong device other than the one that
// answers nothing at all (any case that waits for an answer catches that one); a case that
// applies only to IPv6 is judged with the peer speaking IPv6.
TEST(ConformHarness, EveryCaseFailsAgainstSomeWrongDevice) {
  int checked = 0;
  std::map<std::string, int> caught_by;
  for (const Case& c : all_cases()) {
    bool ipv6 = false;
    if (run_inprocess(c).outcome != Outcome::kPass) {
      ipv6 = true;
      if (run_inprocess(c, ipv6).outcome != Outcome::kPass) continue;
    }
    ++checked;
    std::vector<std::string> caught;
    for (Mutation m : kAllMutations) {
      if (m == Mutation::kDropAllFrames) continue;
      const CaseResult r = run_wrong(c, m, ipv6);
      if (r.outcome == Outcome::kFail) {
        caught.push_back(name(m));
        EXPECT_FALSE(r.expected.empty()) << c.name << " under " << name(m);
      }
    }
    EXPECT_FALSE(caught.empty()) << c.name << " passes against every wrong device";
    for (const std::string& m : caught)
      ++caught_by[m];
  }
  EXPECT_GE(checked, 100);
  for (const auto& [m, n] : caught_by)
    std::cout << n << " case(s) fail against the device that " << m << "\n";
}

TEST(ConformReport, JsonAndPcapHoldEveryCase) {
  std::vector<CaseResult> results;
  const auto& cases = all_cases();
  results.push_back(run_inprocess(cases[0]));
  results.push_back(run_wrong(cases[0], Mutation::kDropAllFrames));
  const std::string json = json_report(results, "test");
  EXPECT_NE(json.find("\"fail\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"pass\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find(cases[0].name), std::string::npos);
  const auto pcap = pcap_report(results);
  std::size_t frames = 0;
  for (const CaseResult& r : results)
    frames += r.frames.size();
  const auto parsed = wire::pcap::parse(pcap);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->records.size(), frames);
}

}  // namespace
}  // namespace xroce::conform
