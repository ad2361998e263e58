// Egress with a port that lends its transmit buffers (as AF_XDP does): packets are encoded where
// the port lent, leave in order whatever the port takes per call, and every lent buffer goes
// back to the port, sent or not; a port that stops lending gets the worker's own buffers.
#include "daemon/worker_egress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "wire/frame.h"

namespace xroce::daemon {
namespace {

// Lends `buffers` buffers of 8 KiB; takes at most `per_call` frames per transmit(). A frame in a
// lent buffer is recorded and its buffer freed, as a kernel completing it would; any other frame
// is recorded as copied. Every misuse of a lent buffer is counted.
class LendingPort final : public net::Port {
 public:
  LendingPort(std::size_t buffers, std::size_t per_call)
      : pool_(buffers, std::vector<std::uint8_t>(8192)),
        state_(buffers, kFree),
        per_call_(per_call) {}

  net::Result<std::size_t, net::PortError> receive(std::span<net::RxFrame>) override {
    return std::size_t{0};
  }
  void release(std::span<const net::RxFrame>) override {}
  net::Result<std::size_t, net::PortError> transmit(std::span<const net::TxFrame> frames) override {
    const std::size_t n = std::min(frames.size(), per_call_);
    for (std::size_t i = 0; i < n; ++i) {
      sent.emplace_back(frames[i].begin(), frames[i].end());
      const int b = buffer_of(frames[i].data());
      if (b < 0) {
        ++copied;
        continue;
      }
      if (state_[b] != kLent) ++misuse;
      state_[b] = kFree;
      ++zero_copy;
    }
    return n;
  }
  std::span<std::uint8_t> lend_tx(std::size_t bytes) override {
    if (bytes > 8192 || lend_budget == 0) return {};
    for (std::size_t b = 0; b < pool_.size(); ++b) {
      if (state_[b] != kFree) continue;
      state_[b] = kLent;
      --lend_budget;
      return pool_[b];
    }
    return {};
  }
  void return_tx(std::span<const std::uint8_t> lent) override {
    const int b = buffer_of(lent.data());
    if (b < 0 || state_[b] != kLent) {
      ++misuse;
      return;
    }
    state_[b] = kFree;
  }
  net::Result<std::size_t, net::PortError> flush() override { return std::size_t{0}; }
  int wait_fd() const override { return -1; }
  net::PortStats stats() const override { return {}; }
  net::PortMode mode() const override { return net::PortMode::kAfXdpCopy; }
  std::size_t max_frame_bytes() const override { return 9014; }

  std::size_t lent_out() const { return std::count(state_.begin(), state_.end(), kLent); }

  std::vector<std::vector<std::uint8_t>> sent;
  std::size_t zero_copy = 0;
  std::size_t copied = 0;
  std::size_t misuse = 0;
  std::size_t lend_budget = ~std::size_t{0};

 private:
  enum State : std::uint8_t { kFree, kLent };
  int buffer_of(const std::uint8_t* p) const {
    for (std::size_t b = 0; b < pool_.size(); ++b)
      if (p >= pool_[b].data() && p < pool_[b].data() + pool_[b].size()) return static_cast<int>(b);
    return -1;
  }
  std::vector<std::vector<std::uint8_t>> pool_;
  std::vector<State> state_;
  std::size_t per_call_;
};

wire::FrameAddress address() {
  wire::FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0, 1};
  a.dst_mac = {0x02, 0, 0, 0, 0, 2};
  a.src_ip = wire::IpAddr::v4(0xC6120001);
  a.dst_ip = wire::IpAddr::v4(0xC6120002);
  return a;
}

// Packet i: a UD SEND of `bytes` bytes of value i, written where the transport writes it.
void emit_packet(Egress& egress, std::uint32_t i, std::size_t bytes) {
  transport::Transmit tx;
  tx.hdr.bth.opcode = wire::Opcode::kUdSendOnly;
  tx.hdr.bth.dest_qp = wire::Qpn(0x11);
  tx.hdr.bth.psn = wire::Psn(i);
  tx.hdr.deth = wire::Deth{wire::Qkey(0x11111111), wire::Qpn(0x12)};
  tx.payload_len = static_cast<std::uint32_t>(bytes);
  const wire::MutableBytes payload = egress.payload_buffer();
  std::memset(payload.data(), static_cast<int>(i & 0xFF), bytes);
  egress.emit(0, tx, address(), payload.first(bytes));
}

// Every frame decodes with a good ICRC, carries packet i's PSN and payload, in order.
void expect_packets_in_order(const std::vector<std::vector<std::uint8_t>>& sent, std::size_t n,
                             std::size_t bytes) {
  ASSERT_EQ(sent.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto f = wire::decode_frame(sent[i]);
    ASSERT_TRUE(f) << "frame " << i;
    EXPECT_TRUE(f->icrc_ok) << "frame " << i;
    EXPECT_EQ(f->hdr.bth.psn, wire::Psn(static_cast<std::uint32_t>(i)));
    ASSERT_EQ(f->payload.size(), bytes);
    EXPECT_EQ(std::count(f->payload.begin(), f->payload.end(), static_cast<std::uint8_t>(i & 0xFF)),
              static_cast<std::ptrdiff_t>(bytes))
        << "frame " << i;
  }
}

// Packets 0..n-1 of `bytes` through an Egress over `port`, the backlog drained as the worker's
// loop drains it; then, as the loop does at every poll, the next packet's slot is prepared and
// left unused, so the Egress ends holding it. Returns how many buffers were lent to the Egress
// when it ended (what its destructor must give back).
std::size_t send_through(LendingPort& port, std::uint32_t n, std::size_t bytes) {
  WorkerCounters counters;
  Egress egress(port, counters, nullptr);
  for (std::uint32_t i = 0; i < n; ++i)
    emit_packet(egress, i, bytes);
  egress.transmit_batch();
  for (int turn = 0; turn < 100 && !egress.backlog_empty(); ++turn)
    egress.flush();
  EXPECT_TRUE(egress.backlog_empty());
  (void)egress.payload_buffer();
  return port.lent_out();
}

TEST(EgressLending, PacketsAreEncodedInLentBuffersAndEveryBufferGoesBack) {
  LendingPort port(64, 1000);
  EXPECT_EQ(send_through(port, 100, 4096), 1u) << "the prepared slot is a lent buffer";
  expect_packets_in_order(port.sent, 100, 4096);
  EXPECT_EQ(port.zero_copy, 100u);
  EXPECT_EQ(port.copied, 0u);
  EXPECT_EQ(port.misuse, 0u);
  EXPECT_EQ(port.lent_out(), 0u) << "the egress gave back what it held when it ended";
}

// A port that takes three frames a call: the rest of each batch waits in the backlog (copied out
// of the lent buffers, which go back at once) and leaves first, in order.
TEST(EgressLending, BackPressureKeepsOrderAndReturnsWhatThePortDidNotTake) {
  LendingPort port(64, 3);
  EXPECT_EQ(send_through(port, 100, 1000), 1u);
  expect_packets_in_order(port.sent, 100, 1000);
  EXPECT_GT(port.zero_copy, 0u);
  EXPECT_GT(port.copied, 0u) << "backlogged frames are the worker's copies";
  EXPECT_EQ(port.misuse, 0u);
  EXPECT_EQ(port.lent_out(), 0u);
}

// The port runs out of buffers to lend part-way: the worker's own buffers carry the rest.
TEST(EgressLending, APortThatLendsNothingGetsTheWorkersBuffers) {
  LendingPort port(64, 1000);
  port.lend_budget = 10;
  EXPECT_EQ(send_through(port, 50, 64), 0u) << "nothing left to lend for the prepared slot";
  expect_packets_in_order(port.sent, 50, 64);
  EXPECT_EQ(port.zero_copy + port.copied, 50u);
  EXPECT_EQ(port.zero_copy, 10u) << "every buffer the port would lend was used";
  EXPECT_EQ(port.misuse, 0u);
  EXPECT_EQ(port.lent_out(), 0u);
}

}  // namespace
}  // namespace xroce::daemon
