#include "daemon/datapath_frames.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

namespace xroce::daemon {
namespace {

constexpr std::uint8_t kEcnMask = 0x3;

}  // namespace

DatapathCounters& DatapathCounters::operator+=(const DatapathCounters& o) {
  rx_frames += o.rx_frames;
  rx_delivered += o.rx_delivered;
  rx_malformed += o.rx_malformed;
  rx_icrc_errors += o.rx_icrc_errors;
  rx_no_qp += o.rx_no_qp;
  rx_handed_over += o.rx_handed_over;
  rx_handover_drops += o.rx_handover_drops;
  rx_loopback += o.rx_loopback;
  tx_frames += o.tx_frames;
  tx_encode_errors += o.tx_encode_errors;
  tx_no_address += o.tx_no_address;
  tx_no_neighbour += o.tx_no_neighbour;
  tx_backlog_drops += o.tx_backlog_drops;
  tx_loopback += o.tx_loopback;
  tx_loopback_drops += o.tx_loopback_drops;
  sleeps += o.sleeps;
  moderated_sleeps += o.moderated_sleeps;
  return *this;
}

QpRoutes::QpRoutes() {
  void* p = mmap(nullptr, std::size_t{wire::Qpn::kMask} + 1, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) std::abort();  // 16 MiB of address space: an operating failure at start
  table_ = static_cast<std::uint8_t*>(p);
}

QpRoutes::~QpRoutes() {
  munmap(table_, std::size_t{wire::Qpn::kMask} + 1);
}

FrameClass classify(wire::Bytes frame, wire::DecodedFrame& out, bool icrc_verified) {
  if (wire::decode_frame_into(frame, out, icrc_verified).has_value()) return FrameClass::kMalformed;
  return out.icrc_ok ? FrameClass::kPacket : FrameClass::kBadIcrc;
}

transport::RxMeta rx_meta_of(wire::Bytes frame, const wire::DecodedFrame& decoded) {
  transport::RxMeta meta;
  meta.ecn_ce = decoded.ecn == wire::Ecn::kCe;
  meta.grh = wire::grh_area(frame, decoded);
  return meta;
}

wire::Result<std::size_t, wire::FrameError> encode_transmit(const transport::Transmit& tx,
                                                            const wire::FrameAddress& addr,
                                                            wire::Bytes payload,
                                                            wire::MutableBytes out) {
  wire::FrameAddress a = addr;
  a.traffic_class = static_cast<std::uint8_t>(
      (a.traffic_class & ~kEcnMask) |
      static_cast<std::uint8_t>(tx.ect ? wire::Ecn::kEct0 : wire::Ecn::kNotEct));
  return wire::encode_frame(a, tx.hdr, payload.first(tx.payload_len), out);
}

}  // namespace xroce::daemon
