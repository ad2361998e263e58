// `xroce conform` on a real link: the peer's frames go out of an AF_PACKET socket on IFNAME,
// and the target device is driven by xroce-conform-agent over TCP.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "target.h"

namespace xroce::conform {

// An AF_PACKET socket on one interface, seeing only RoCEv2 frames from the target to the peer.
// Needs CAP_NET_RAW. Owns the fd. It reads with a virtio-net header (PACKET_VNET_HDR), so a
// segmentation-offload superframe (a UDP-port target sends with UDP_SEGMENT; a veth hands the
// send over whole) is seen as the frames a NIC would have put on the wire
// (wire::split_udp_superframe), as a capture on a real link would.
class PacketLink final : public Link {
 public:
  PacketLink(const std::string& ifname, const Endpoints& ends);
  ~PacketLink() override;
  PacketLink(const PacketLink&) = delete;
  PacketLink& operator=(const PacketLink&) = delete;

  std::uint64_t now_ns() override;
  void send(const Frame& frame) override;
  std::optional<Frame> receive(std::uint64_t deadline_ns) override;
  void idle_until(std::uint64_t deadline_ns) override;

 private:
  // Reads frames until one is the target's or the deadline passes.
  std::optional<Frame> read_one(std::uint64_t deadline_ns);
  bool from_target(const Frame& f) const;

  int fd_ = -1;
  int ifindex_ = 0;
  Endpoints ends_;
  std::deque<Frame> held_;   // taken while idling, handed out by receive
  std::deque<Frame> split_;  // the rest of a superframe read_one split
};

// The agent's requests, one line each way (tools/conform/agent/xroce_conform_agent.c). Owns
// the TCP connection.
class AgentTarget final : public Target {
 public:
  // The agent's QPs are connected to ends.peer_ip (in GID form) and send from the target's
  // GID index `sgid_index` (-1: the index whose GID is ends.target_ip).
  AgentTarget(const std::string& host, std::uint16_t port, const Endpoints& ends, int sgid_index,
              bool generates_cnp);
  ~AgentTarget() override;
  AgentTarget(const AgentTarget&) = delete;
  AgentTarget& operator=(const AgentTarget&) = delete;

  Capabilities capabilities() override { return caps_; }
  QpInfo create_qp(const QpSpec& spec) override;
  void destroy_qp(const QpInfo& qp) override;
  MrInfo register_mr(std::uint32_t length, std::uint32_t access) override;
  void write_mr(const MrInfo& mr, std::uint32_t offset,
                const std::vector<std::uint8_t>& data) override;
  std::vector<std::uint8_t> read_mr(const MrInfo& mr, std::uint32_t offset,
                                    std::uint32_t length) override;
  void post_recv(const QpInfo& qp, std::uint64_t wr_id, const MrInfo& mr, std::uint32_t offset,
                 std::uint32_t length) override;
  void post_send(const QpInfo& qp, const SendSpec& wr) override;
  std::vector<Cqe> poll(const QpInfo& qp) override;
  bool in_error(const QpInfo& qp) override;

 private:
  // Sends one request and returns the "ok ..." reply; an "err" reply throws.
  std::string request(const std::string& line);
  std::string read_line();

  int fd_ = -1;
  std::string buffered_;
  std::string peer_gid_hex_;
  std::string target_gid_hex_;
  int sgid_index_ = -1;
  Capabilities caps_;
};

// An IPv4 or IPv6 address in text form.
std::optional<wire::IpAddr> parse_ip(const std::string& text);

// The addresses of the link to the target at `target_ip` (IPv4 or IPv6): the target's MAC from
// the namespace's neighbour table (resolved through engine/net's resolver, which solicits it
// when needed: CAP_NET_ADMIN), ours from IFNAME (the route's preferred source when it is one of
// IFNAME's addresses, else IFNAME's first address of the target's family and scope). The
// target must be on IFNAME's link, not behind a gateway.
Endpoints discover_endpoints(const std::string& ifname, const std::string& target_ip);

}  // namespace xroce::conform
