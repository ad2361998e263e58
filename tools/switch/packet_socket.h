// An AF_PACKET socket bound to one interface: a TPACKET_V2 receive ring (one slot per frame,
// so poll() wakes per frame rather than per block as TPACKET_V3 does, which keeps the switch's
// latency low at low rates), promiscuous mode, our own transmissions ignored, and send() to
// transmit (bypassing the qdisc). Every frame carries a virtio-net header (PACKET_VNET_HDR):
// a veth hands over TCP segmentation-offload superframes and frames whose checksum is left to
// offload, and passing the header back on send lets the egress device segment and checksum
// them as the sender's stack expected. RAII: the destructor unmaps the ring and closes the socket,
// which also drops the promiscuous membership.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "wire/frame_layout.h"

namespace xroce::sw {

using wire::kVnetHeaderBytes;  // struct virtio_net_hdr

struct ReceivedFrame {
  std::span<const std::uint8_t> vnet_header;  // kVnetHeaderBytes, just before data
  std::span<const std::uint8_t> data;         // in the ring, valid until release()
  std::optional<std::uint16_t> vlan_tci;      // a tag the NIC/veth stripped into metadata
  std::uint16_t vlan_tpid = wire::kEtherTypeVlan;
  bool truncated = false;  // longer than a ring slot
};

class PacketSocket {
 public:
  // Opens and binds; on failure error() says why and fd() is -1.
  explicit PacketSocket(const std::string& ifname);
  ~PacketSocket();
  PacketSocket(const PacketSocket&) = delete;
  PacketSocket& operator=(const PacketSocket&) = delete;

  bool ok() const { return fd_ >= 0; }
  const std::string& error() const { return error_; }
  const std::string& name() const { return ifname_; }
  int fd() const { return fd_; }

  // The next received frame, if any; release() hands its slot back to the kernel.
  std::optional<ReceivedFrame> peek();
  void release();

  // Frames the kernel dropped because the ring was full, since the socket opened.
  std::uint64_t ring_drops();

  enum class SendResult : std::uint8_t { kSent, kBlocked, kFailed };
  // `buffer`: a virtio-net header, then the frame.
  SendResult send(std::span<const std::uint8_t> buffer);

 private:
  bool open_ring();
  std::string ifname_;
  std::string error_;
  int fd_ = -1;
  int ifindex_ = 0;
  std::uint8_t* ring_ = nullptr;
  std::size_t ring_bytes_ = 0;
  std::size_t slot_ = 0;
  std::uint64_t ring_drops_ = 0;
};

}  // namespace xroce::sw
