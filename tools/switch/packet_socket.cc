#include "packet_socket.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xroce::sw {

namespace {

// Each slot holds the tpacket2 header, the sockaddr_ll, the virtio-net header and a frame of
// up to 64 KiB: a segmentation-offload superframe from a veth peer is one frame here.
constexpr unsigned kSlotBytes = 17 * 4096;
constexpr unsigned kBlockBytes = kSlotBytes;
constexpr unsigned kBlocks = 256;  // 256 slots, 17 MiB per port

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

tpacket2_hdr* slot_header(std::uint8_t* ring, std::size_t slot) {
  return reinterpret_cast<tpacket2_hdr*>(ring + slot * kSlotBytes);
}

}  // namespace

PacketSocket::PacketSocket(const std::string& ifname) : ifname_(ifname) {
  ifindex_ = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex_ == 0) {
    error_ = errno_text(("interface " + ifname).c_str());
    return;
  }
  // Protocol 0 until the ring is set up, so nothing is received before it.
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    error_ = errno_text("socket(AF_PACKET)");
    return;
  }
  if (!open_ring()) {
    close(fd_);
    fd_ = -1;
  }
}

bool PacketSocket::open_ring() {
  const int version = TPACKET_V2;
  const int one = 1;
  if (setsockopt(fd_, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) != 0) {
    error_ = errno_text("PACKET_VERSION");
    return false;
  }
  if (setsockopt(fd_, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) != 0 ||
      setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) != 0 ||
      setsockopt(fd_, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) != 0) {
    error_ = errno_text("PACKET_VNET_HDR/IGNORE_OUTGOING/QDISC_BYPASS");
    return false;
  }
  tpacket_req req{};
  req.tp_block_size = kBlockBytes;
  req.tp_block_nr = kBlocks;
  req.tp_frame_size = kSlotBytes;
  req.tp_frame_nr = kBlocks * (kBlockBytes / kSlotBytes);
  if (setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) != 0) {
    error_ = errno_text("PACKET_RX_RING");
    return false;
  }
  ring_bytes_ = std::size_t{kBlockBytes} * kBlocks;
  void* map = mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) {
    error_ = errno_text("mmap(rx ring)");
    return false;
  }
  ring_ = static_cast<std::uint8_t*>(map);
  packet_mreq mreq{};
  mreq.mr_ifindex = ifindex_;
  mreq.mr_type = PACKET_MR_PROMISC;
  if (setsockopt(fd_, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq, sizeof(mreq)) != 0) {
    error_ = errno_text("PACKET_MR_PROMISC");
    return false;
  }
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = ifindex_;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    error_ = errno_text(("bind " + ifname_).c_str());
    return false;
  }
  return true;
}

PacketSocket::~PacketSocket() {
  if (ring_ != nullptr) munmap(ring_, ring_bytes_);
  if (fd_ >= 0) close(fd_);
}

std::optional<ReceivedFrame> PacketSocket::peek() {
  tpacket2_hdr* h = slot_header(ring_, slot_);
  // The kernel fills the slot, then publishes TP_STATUS_USER (smp_wmb): acquire pairs with it.
  const std::uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
  if ((status & TP_STATUS_USER) == 0) return std::nullopt;
  ReceivedFrame f;
  const auto* mac = reinterpret_cast<const std::uint8_t*>(h) + h->tp_mac;
  f.vnet_header = {mac - kVnetHeaderBytes, kVnetHeaderBytes};  // tpacket_rcv puts it there
  f.data = {mac, h->tp_snaplen};
  f.truncated = h->tp_snaplen < h->tp_len || (status & TP_STATUS_COPY) != 0;
  if ((status & TP_STATUS_VLAN_VALID) != 0) {
    f.vlan_tci = h->tp_vlan_tci;
    if ((status & TP_STATUS_VLAN_TPID_VALID) != 0) f.vlan_tpid = h->tp_vlan_tpid;
  }
  return f;
}

void PacketSocket::release() {
  tpacket2_hdr* h = slot_header(ring_, slot_);
  __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
  slot_ = (slot_ + 1) % (ring_bytes_ / kSlotBytes);
}

std::uint64_t PacketSocket::ring_drops() {
  tpacket_stats stats{};  // reading resets the kernel's counters: accumulate them here
  socklen_t len = sizeof(stats);
  if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &stats, &len) == 0)
    ring_drops_ += stats.tp_drops;
  return ring_drops_;
}

PacketSocket::SendResult PacketSocket::send(std::span<const std::uint8_t> buffer) {
  const ssize_t n = ::send(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(buffer.size())) return SendResult::kSent;
  if (n < 0 && errno == EAGAIN) return SendResult::kBlocked;  // ENOBUFS: the device dropped it
  return SendResult::kFailed;
}

}  // namespace xroce::sw
