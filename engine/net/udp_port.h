// UdpPort: the Port interface over an ordinary UDP socket bound to port 4791, batched
// (recvmmsg, io_uring sends), for hosts where XDP cannot be attached (no CAP_NET_ADMIN or CAP_BPF).
//
// The transport sees the same Ethernet frames as with AF_XDP. On receive the port synthesizes
// Ethernet/IP/UDP headers in the buffer's headroom from the socket's view of the datagram:
// source address and port (msg_name), destination address (IP_PKTINFO/IPV6_PKTINFO), TOS or
// traffic class with the ECN bits (IP_RECVTOS/IPV6_RECVTCLASS) and TTL or hop limit. What a
// socket cannot observe is filled with fixed values: MAC addresses from the config, IPv4
// ID 0 with DF set, IPv6 flow label 0, UDP checksum 0, no VLAN tag. None of these is covered
// by the ICRC (docs/protocol.md §1.7), so the transport's checks are unchanged.
//
// On send the port strips the headers and sends the UDP payload to the frame's destination
// address, with the frame's TOS/traffic class and TTL/hop limit as ancillary data, from the
// frame's UDP source port (a small table of sockets bound to those ports; the 4791 socket
// when a port cannot be bound), IPv4 DF with ID 0 and IPv6 flow label 0. The kernel chooses
// the MACs. The ICRC covers the IPv4 ID and flags, which a socket cannot set freely: IPv4
// frames must carry ID 0 and DF (wire::encode_frame's default); others are refused
// (tx_rejected) rather than sent with an ICRC that fails.
//
// Segmentation offload (UdpPortConfig::gso, on by default; the daemon's XROCE_UDP_GSO=0 turns
// it off). Consecutive frames of one batch to the same destination, source port, TOS and TTL,
// each as long as the first but the last (the packets of one message: udp(7) UDP_SEGMENT's
// rule), up to 64 frames and 65,000 bytes, leave in one sendmsg with UDP_SEGMENT: one system
// call, one skb and one pass through the stack per message instead of per packet, cut into
// datagrams by the kernel (on veth, by the receiving socket) or the NIC. The wire is the same
// packet for packet, with two differences, both within RoCEv2: the kernel numbers the IPv4
// segments of a send with identifications 0, 1, 2, ... (inet_gso_segment), so the port writes
// segment k's ICRC for ID k (wire::icrc_ipv4_id_change, in its own buffer, from the ICRC the
// frame was encoded with); and the kernel refuses UDP_SEGMENT on a socket that sends checksum 0,
// so the port's sockets send a correct UDP checksum, computed by the kernel or the NIC (over
// veth the kernel leaves it partial for the peer's kernel to trust; the wire decoder accepts
// that, wire::decode_frame). Without it: one sendmsg per frame, UDP checksum 0 as rxe sends.
// A segmented send the kernel refuses goes again frame by frame, and on EINVAL/EIO (no UDP
// GSO, IPsec) the port stops segmenting. tx_gso_sends counts the segmented sends.
// Known limit: a veth hands a send whole to its peer, and where the peer runs XDP in generic
// (SKB) mode, the program sees one frame of up to 64 KiB, which an AF_XDP port drops (native
// XDP is fine: the sending veth then loses its offloads and the stack cuts the send). A UDP
// port whose veth peer is an `afxdp` port forced into SKB mode needs XROCE_UDP_GSO=0.
//
// Receive offload (UdpPortConfig::gro, on by default; the daemon's XROCE_UDP_GRO=0 turns it off).
// With UDP_GRO on the socket, a segmented send (ours over a veth, whose peer socket takes it
// whole; or datagrams a NIC's or the stack's GRO joined) is read as one datagram with its segment
// length in a cmsg: one skb queued, one recvmmsg entry and one set of cmsgs for up to 64 frames,
// where without it the kernel cuts the send into an skb per segment on the sender's CPU. The
// transport still sees one frame per packet, each with headers in front, so the port lays out each
// read's iovecs to land the segments where they can stay: one slot per expected segment, each
// iovec as long as the expected segment, then a 64 KiB spill buffer for the rest. What a read
// expects is what the largest datagram of the last read brought (slots and length), or one whole
// slot after 64 reads without a segmented datagram. Segments of the expected length stay where
// they landed; those in the spill buffer are copied into free slots; a datagram of another length
// is copied out through a bounce buffer, and a single datagram longer than the expected length
// has its tail moved behind its head. rx_gro_datagrams counts the datagrams with several frames,
// rx_gro_copied the frames moved. This is why a send does not pair a message's longer first
// packet with one shorter middle packet (transmit). A read's frames beyond the caller's batch
// wait in the port and come first on the next receive(), before the socket is read again; a
// datagram whose frames find no free slot waits for the caller to release frames.
//
// Receive is a non-blocking recvmmsg() of up to one batch into free slots, and wait_fd() is the
// socket itself, not many recvmsg requests armed in io_uring: each datagram would wake all of
// them, the losers re-arm, and past io_uring's poll retry limit each is punted to an io-wq kernel
// thread, hundreds per daemon, a thread wakeup per packet (bench/README.md). Transmit is batched
// on io_uring (one sendmsg per frame, or per run of frames with segmentation offload). A busy
// worker receives every turn, so many reads find nothing (rx_reads and rx_empty_reads count
// them); a readiness sign that costs no system call (a multishot poll whose task work only sets
// a flag in shared memory) removed 95 % of those and made the port 2-9 % slower, most likely as
// each arrival then wakes the poll on the sending core (bench/README.md, "Tried, not kept").
//
// Threading: as for every port, one owning thread; a port may be opened on one thread and
// handed to another.
// Sockets for new source ports are made on the owning thread, which must be in the port's
// network namespace (else the frame goes out from the 4791 socket).
#pragma once

#include <liburing.h>
#include <netinet/in.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "net/port.h"
#include "net/udp_frame.h"

namespace xroce::net {

struct UdpPortConfig {
  std::uint16_t udp_port = kRoceUdpPort;
  std::string bind_device;  // optional SO_BINDTODEVICE
  Mac local_mac{};          // written as the destination MAC of received frames
  Mac peer_mac{};           // written as the source MAC of received frames
  std::uint32_t rx_slots = 256;
  std::size_t max_frame_bytes = 9000 + kEthHeaderBytes;
  std::uint32_t max_source_port_sockets = 64;
  // > 0: SO_BUSY_POLL on the socket, so an empty receive() polls the device's NAPI for up to
  // this long (only where the device receives through NAPI, e.g. veth with GRO or XDP on).
  // 0 (the default): no busy polling.
  std::uint32_t busy_poll_us = 0;
  // UDP segmentation offload: consecutive frames to one destination leave in one send (see
  // the top of the file). Off: one send per frame, UDP checksum 0.
  bool gso = true;
  // UDP receive offload: the segments of one send (or of what GRO joined) are read as one
  // datagram into consecutive slots (see the top of the file). Off: one datagram per frame.
  bool gro = true;
};

class UdpPort final : public Port {
 public:
  static Result<std::unique_ptr<UdpPort>, PortError> open(const UdpPortConfig& config);
  ~UdpPort() override;

  Result<std::size_t, PortError> receive(std::span<RxFrame> frames) override;
  void release(std::span<const RxFrame> frames) override;
  Result<std::size_t, PortError> transmit(std::span<const TxFrame> frames) override;
  Result<std::size_t, PortError> flush() override { return std::size_t{0}; }
  int wait_fd() const override { return fd_; }
  PortStats stats() const override {
    PortStats s = stats_;
    s.rx_drops += socket_drops_;
    return s;
  }
  PortMode mode() const override { return PortMode::kUdpSocket; }
  std::size_t max_frame_bytes() const override { return config_.max_frame_bytes; }
  // The socket's receive buffer over what a datagram of that size is charged.
  std::size_t receive_frames(std::size_t frame_bytes) const override;

 private:
  struct RxSlot;
  struct RxEntry;
  struct Target;
  struct TxSlot;
  explicit UdpPort(const UdpPortConfig& config);
  Result<int, PortError> setup();
  std::size_t slot_payload_bytes() const;
  void read_datagrams(std::size_t want);
  void prepare_entry(RxEntry& en, std::uint32_t slots);
  UdpEnvelope envelope_of(const RxEntry& en, std::size_t& gro_segment);
  static void copy_out(const RxEntry& en, std::size_t offset, std::size_t len, std::uint8_t* to);
  bool take_datagram(RxEntry& en);
  void take_datagrams();
  void place(std::uint32_t slot, const UdpEnvelope& env, std::size_t datagram_bytes);
  int socket_for_source_port(std::uint16_t port);
  bool target_of(const TxFrame& frame, Target& t) const;
  static void start_slot(TxSlot& slot, const Target& t, std::size_t index, std::size_t bytes);
  static void add_segment(TxSlot& slot, const Target& t, std::size_t bytes);
  static void finish_slot(TxSlot& slot, const Target& t, std::size_t segment_bytes);
  void send_one_by_one(const TxSlot& slot, std::span<const TxFrame> frames, int error);

  UdpPortConfig config_;
  int fd_ = -1;
  ino_t netns_ = 0;  // the namespace the port was opened in
  io_uring tx_ring_{};
  bool tx_ring_ok_ = false;
  std::vector<RxSlot> rx_;
  std::vector<std::uint32_t> rx_free_;  // slots neither read into nor held by the caller
  std::vector<RxEntry> rx_entries_;     // one per datagram of a recvmmsg
  std::vector<mmsghdr> rx_mmsg_;
  std::size_t rx_filled_ = 0;      // entries the last read filled
  std::size_t rx_taken_ = 0;       // of which all frames were taken
  std::vector<RxFrame> rx_ready_;  // frames read, handed out from rx_ready_at_ on
  std::size_t rx_ready_at_ = 0;
  std::size_t receive_buffer_bytes_ = 0;  // SO_RCVBUF as the kernel set it (receive_frames)
  std::vector<std::uint8_t> rx_bounce_;   // a datagram whose segments are not where expected
  bool gro_ = false;                      // UDP_GRO is on
  // What the next read expects of a datagram: slots and bytes per segment (read_datagrams).
  std::uint32_t rx_expect_slots_ = 1;
  std::size_t rx_expect_segment_ = 0;
  std::size_t rx_seen_segments_ = 0;  // the most segments of a datagram in this read
  std::size_t rx_seen_segment_ = 0;   // and their length
  std::uint32_t rx_reads_without_gro_ = 0;
  std::vector<TxSlot> tx_;
  std::unique_ptr<TxSlot> tx_one_;  // send_one_by_one's
  bool gso_ = true;                 // config_.gso, until the kernel refuses a segmented send
  std::unordered_map<std::uint16_t, int> source_port_fds_;
  PortStats stats_;
  std::uint32_t socket_drops_ = 0;  // datagrams the socket dropped (SO_RXQ_OVFL, cumulative)
};

}  // namespace xroce::net
