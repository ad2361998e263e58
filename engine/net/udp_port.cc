#include "net/udp_port.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <linux/udp.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <cstring>

#include "wire/icrc.h"
#include "wire/opcode.h"

namespace xroce::net {
namespace {

constexpr std::size_t kControlBytes = 256;
constexpr std::uint32_t kTxBatch = 64;
// A READ of 8 MiB is answered by 2,048 frames at once (8,192 at a 1024-byte MTU), and the
// receive queue is all that holds them until the worker reads; the responder resends the whole
// remainder from the first frame lost (go-back-N), so a queue that overflows costs a round trip
// and a resend of everything after it. Debian's net.core.rmem_max (212,992) caps a plain request
// at ~90 such frames, which lost every 8 MiB READ's tail several times over; 4 MiB still lost 8 %
// of ib_read_bw -s 8M's frames here, 16 MiB none. So the daemon asks for 16 MiB past the limit
// (size_buffer); the kernel charges only what is queued.
constexpr int kSocketBufferBytes = 16 << 20;
// UDP segmentation offload (udp(7) UDP_SEGMENT): at most this many segments per send
// (UDP_MAX_SEGMENTS is 64 on Linux 6.1, 128 later) and this many bytes of UDP payload, within
// one IP datagram's 65,535 bytes less the IPv4 and UDP headers.
constexpr std::size_t kMaxGsoSegments = 64;
constexpr std::size_t kMaxGsoBytes = 65000;

#ifndef UDP_SEGMENT
constexpr int UDP_SEGMENT = 103;
#endif
#ifndef UDP_GRO
constexpr int UDP_GRO = 104;
#endif
// Receive offload (udp(7) UDP_GRO): a datagram may carry up to UDP_GRO_CNT_MAX (64) segments
// and no more than an IP datagram's payload; the spill buffer of a receive takes what does not
// land in its slots, so it holds a whole datagram.
constexpr std::size_t kMaxGroSegments = 64;
constexpr std::size_t kSpillBytes = 65536;
// Datagrams one recvmmsg reads at most (each may bring many frames).
constexpr std::size_t kMaxRxEntries = 32;
// Reads that brought no segmented datagram before a read expects single datagrams again.
constexpr std::uint32_t kReadsBeforeOneSlot = 64;

#ifndef IPV6_AUTOFLOWLABEL
constexpr int IPV6_AUTOFLOWLABEL = 70;
#endif
#ifndef UDP_NO_CHECK6_TX
constexpr int UDP_NO_CHECK6_TX = 101;
#endif
#ifndef UDP_NO_CHECK6_RX
constexpr int UDP_NO_CHECK6_RX = 102;
#endif

// The network namespace the calling thread is in (its inode number), 0 when unknown.
ino_t current_netns() {
  struct stat st {};
  return stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}

Err<PortError> os_error(std::string what) {
  return Err{PortError{std::move(what), errno}};
}

constexpr int kOne = 1;

void set_int(int fd, int level, int name, int value) {
  // Options that only improve fidelity (ancillary data, buffer sizes): a kernel without one
  // still gives a working port, so failures are ignored here and show up as zeros.
  (void)setsockopt(fd, level, name, &value, sizeof(value));
}

// SO_RCVBUFFORCE / SO_SNDBUFFORCE take the size whatever net.core.{r,w}mem_max say, with
// CAP_NET_ADMIN (socket(7)), which a daemon that attaches XDP programs has; without it the
// plain option gives what the limit allows.
void size_buffer(int fd, int force_name, int name, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, force_name, &bytes, sizeof(bytes)) != 0) {
    set_int(fd, SOL_SOCKET, name, bytes);
  }
}

// RoCEv2 sends UDP checksum 0 (docs/protocol.md §1.3) and so do we without segmentation
// offload: the ICRC protects the data. The kernel refuses UDP_SEGMENT on a socket that sends no
// checksum (udp_send_skb: EINVAL), so with it (`gso`) the socket sends a correct checksum, which
// RoCEv2 receivers accept as well (the kernel checks it, the ICRC masks it); the kernel or the
// NIC computes it (on veth it is left partial, which the peer's kernel trusts).
//
// IPv4 also sets DF on every datagram: the ICRC covers the IPv4 identification and flags
// (docs/protocol.md §1.7), and Linux sends ID 0 for a DF datagram from an unconnected socket, which
// is what the transport's frame carries. Without DF the kernel picks an ID and the receiver's
// ICRC check fails.
void send_like_roce(int fd, bool gso) {
  if (!gso) {
    set_int(fd, SOL_SOCKET, SO_NO_CHECK, 1);
    set_int(fd, IPPROTO_UDP, UDP_NO_CHECK6_TX, 1);
  }
  set_int(fd, SOL_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO);
  set_int(fd, IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, 0);  // flow label 0, as our frames carry
}

}  // namespace

// A receive buffer: one frame, its datagram after kMaxEnvelopeBytes of headroom, where the
// synthesized headers go.
struct UdpPort::RxSlot {
  std::vector<std::uint8_t> buffer;
};

// One datagram of a recvmmsg: its address and ancillary data, and where its bytes land. The
// kernel fills the iovecs in order: the first `slots` take `segment` bytes each (the whole
// datagram when there is one slot), then the spill buffer, so that a datagram of segments of the
// expected length lands one segment per slot, headroom before each, without a copy.
struct UdpPort::RxEntry {
  msghdr msg{};
  sockaddr_in6 peer{};
  alignas(cmsghdr) std::uint8_t control[kControlBytes];
  std::array<iovec, kMaxGroSegments + 1> iov{};
  std::array<std::uint32_t, kMaxGroSegments> slot{};
  std::uint32_t slots = 0;
  std::size_t segment = 0;  // bytes of each slot's iovec
  std::vector<std::uint8_t> spill;
  // What was read, and how far take_datagram got.
  std::size_t bytes = 0;
  bool parsed = false;
  UdpEnvelope env;
  std::size_t length = 0;  // of each segment but the last
  std::size_t count = 0;   // segments (frames)
  std::size_t used = 0;    // the first `used` slots hold frames
  std::size_t next = 0;    // the next segment to take
  bool copied = false;     // the segments were packed at another length: copied via the bounce
};

// Where one frame goes: what target_of reads from its headers.
struct UdpPort::Target {
  std::uint16_t src_port = 0;
  sockaddr_in6 dst{};
  int traffic_class = 0;
  int hop_limit = 0;
  bool v4 = false;
  std::span<const std::uint8_t> payload;  // the UDP payload, ICRC last

  bool same_flow(const Target& o) const {
    return src_port == o.src_port && traffic_class == o.traffic_class && hop_limit == o.hop_limit &&
           std::memcmp(&dst, &o.dst, sizeof(dst)) == 0;
  }
};

// One sendmsg: a frame, or with segmentation offload a run of frames to one destination.
struct UdpPort::TxSlot {
  msghdr msg{};
  sockaddr_in6 dst{};
  alignas(cmsghdr) std::uint8_t control[kControlBytes];
  // One iovec per frame; two for a segment whose ICRC the port rewrote (its UDP payload
  // without the ICRC, then icrcs[k]).
  std::array<iovec, 2 * kMaxGsoSegments> iov{};
  std::array<std::array<std::uint8_t, wire::kIcrcBytes>, kMaxGsoSegments> icrcs{};
  std::size_t first = 0;  // the caller's index of its first frame
  std::uint32_t frames = 0;
  std::size_t bytes = 0;  // the frames' bytes, as the caller counts them
};

UdpPort::UdpPort(const UdpPortConfig& config) : config_(config), gso_(config.gso) {}

UdpPort::~UdpPort() {
  if (tx_ring_ok_) io_uring_queue_exit(&tx_ring_);
  for (auto& [port, fd] : source_port_fds_)
    close(fd);
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<UdpPort>, PortError> UdpPort::open(const UdpPortConfig& config) {
  std::unique_ptr<UdpPort> port(new UdpPort(config));
  auto r = port->setup();
  if (!r) return Err{r.error()};
  return port;
}

Result<int, PortError> UdpPort::setup() {
  netns_ = current_netns();
  fd_ = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return os_error("udp port: socket(AF_INET6)");
  set_int(fd_, IPPROTO_IPV6, IPV6_V6ONLY, 0);  // one socket for IPv4 (mapped) and IPv6
  set_int(fd_, SOL_IP, IP_PKTINFO, 1);
  set_int(fd_, SOL_IP, IP_RECVTOS, 1);
  set_int(fd_, SOL_IP, IP_RECVTTL, 1);
  set_int(fd_, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
  set_int(fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, 1);
  set_int(fd_, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1);
  // RoCEv2 sends UDP checksum 0 (docs/protocol.md §1.3); IPv6 drops that unless told not to.
  set_int(fd_, IPPROTO_UDP, UDP_NO_CHECK6_RX, 1);
  send_like_roce(fd_, config_.gso);
  set_int(fd_, SOL_SOCKET, SO_RXQ_OVFL, 1);  // the socket's drop counter, as ancillary data
  size_buffer(fd_, SO_RCVBUFFORCE, SO_RCVBUF, kSocketBufferBytes);
  int rcvbuf = 0;
  socklen_t rcvbuf_len = sizeof(rcvbuf);
  if (getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rcvbuf_len) == 0 && rcvbuf > 0)
    receive_buffer_bytes_ = static_cast<std::size_t>(rcvbuf);
  // Receive offload: the segments of a segmented send (or of a flow the NIC's or veth's GRO
  // joined) come as one datagram (udp(7) UDP_GRO), read in one go (read_datagrams).
  gro_ = config_.gro && setsockopt(fd_, IPPROTO_UDP, UDP_GRO, &kOne, sizeof(kOne)) == 0;
  size_buffer(fd_, SO_SNDBUFFORCE, SO_SNDBUF, kSocketBufferBytes);
  if (config_.busy_poll_us > 0 && setsockopt(fd_, SOL_SOCKET, SO_BUSY_POLL, &config_.busy_poll_us,
                                             sizeof(config_.busy_poll_us)) < 0) {
    return os_error("udp port: SO_BUSY_POLL");
  }
  if (!config_.bind_device.empty() &&
      setsockopt(fd_, SOL_SOCKET, SO_BINDTODEVICE, config_.bind_device.data(),
                 static_cast<socklen_t>(config_.bind_device.size())) < 0) {
    return os_error("udp port: SO_BINDTODEVICE " + config_.bind_device);
  }
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(config_.udp_port);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    return os_error(fmt::format("udp port: bind [::]:{}", config_.udp_port));
  }
  const int rc = io_uring_queue_init(kTxBatch, &tx_ring_, 0);
  if (rc < 0) return Err{PortError{"udp port: io_uring_queue_init (tx)", -rc}};
  tx_ring_ok_ = true;

  // One spare byte tells an oversized datagram from one that fits exactly.
  const std::size_t max_datagram = config_.max_frame_bytes + 1;
  rx_.resize(std::max<std::uint32_t>(config_.rx_slots, 1));
  for (std::uint32_t i = 0; i < rx_.size(); ++i) {
    rx_[i].buffer.resize(kMaxEnvelopeBytes + max_datagram);
    rx_free_.push_back(static_cast<std::uint32_t>(rx_.size()) - 1 - i);
  }
  rx_entries_.resize(kMaxRxEntries);
  rx_mmsg_.resize(kMaxRxEntries);
  if (gro_) {
    for (RxEntry& en : rx_entries_)
      en.spill.resize(kSpillBytes);
    rx_bounce_.resize(kSpillBytes);
  }
  rx_ready_.reserve(rx_.size());
  tx_.resize(kTxBatch);
  tx_one_ = std::make_unique<TxSlot>();
  return 0;
}

std::size_t UdpPort::receive_frames(std::size_t frame_bytes) const {
  // The kernel charges a queued datagram its buffer's true size against the socket's limit,
  // which it set to twice what was asked, the other half for its bookkeeping (socket(7)). Half
  // the limit, at whole pages a datagram, is what surely fits: 2,048 frames of 4,170 bytes in
  // the 16 MiB asked for, where 8,012 of 8,192 sent fitted over a veth with receive offload
  // joining them (tests/integration/net port_test.cc, ReceiveCapacity, sent four times over).
  constexpr std::size_t kPageBytes = 4096;
  const std::size_t charge =
      (std::max<std::size_t>(frame_bytes, 1) + kPageBytes - 1) / kPageBytes * kPageBytes;
  return receive_buffer_bytes_ / 2 / charge;
}

std::size_t UdpPort::slot_payload_bytes() const {
  return rx_.front().buffer.size() - kMaxEnvelopeBytes;
}

void UdpPort::prepare_entry(RxEntry& en, std::uint32_t slots) {
  en.slots = slots;
  // One slot takes any datagram that fits a frame; several take the expected segment each.
  en.segment = slots == 1 ? slot_payload_bytes() : rx_expect_segment_;
  for (std::uint32_t j = 0; j < slots; ++j) {
    en.slot[j] = rx_free_.back();
    rx_free_.pop_back();
    en.iov[j] = {rx_[en.slot[j]].buffer.data() + kMaxEnvelopeBytes, en.segment};
  }
  std::size_t iovs = slots;
  if (gro_) en.iov[iovs++] = {en.spill.data(), en.spill.size()};
  en.peer = {};
  // Zeroed so that the cmsg walk stops at the end of what the kernel wrote.
  std::memset(en.control, 0, sizeof(en.control));
  en.msg = {};
  en.msg.msg_name = &en.peer;
  en.msg.msg_namelen = sizeof(en.peer);
  en.msg.msg_iov = en.iov.data();
  en.msg.msg_iovlen = iovs;
  en.msg.msg_control = en.control;
  en.msg.msg_controllen = sizeof(en.control);
}

UdpEnvelope UdpPort::envelope_of(const RxEntry& en, std::size_t& gro_segment) {
  UdpEnvelope env;
  env.dst_mac = config_.local_mac;
  env.src_mac = config_.peer_mac;
  std::memcpy(env.src_ip.data(), &en.peer.sin6_addr, 16);
  env.src_port = ntohs(en.peer.sin6_port);
  env.dst_port = config_.udp_port;
  gro_segment = 0;
  msghdr walk = en.msg;
  walk.msg_control = const_cast<std::uint8_t*>(en.control);
  walk.msg_controllen = sizeof(en.control);
  for (cmsghdr* c = CMSG_FIRSTHDR(&walk); c && c->cmsg_len != 0; c = CMSG_NXTHDR(&walk, c)) {
    const void* d = CMSG_DATA(c);
    int v = 0;
    if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo pi;
      std::memcpy(&pi, d, sizeof(pi));
      env.dst_ip = v4_mapped(ntohl(pi.ipi_addr.s_addr));
    } else if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_TOS) {
      env.traffic_class = *static_cast<const std::uint8_t*>(d);
    } else if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_TTL) {
      std::memcpy(&v, d, sizeof(v));
      env.hop_limit = static_cast<std::uint8_t>(v);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo pi;
      std::memcpy(&pi, d, sizeof(pi));
      std::memcpy(env.dst_ip.data(), &pi.ipi6_addr, 16);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      std::memcpy(&v, d, sizeof(v));
      env.traffic_class = static_cast<std::uint8_t>(v);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) {
      std::memcpy(&v, d, sizeof(v));
      env.hop_limit = static_cast<std::uint8_t>(v);
    } else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
      std::memcpy(&v, d, sizeof(v));
      gro_segment = v > 0 ? static_cast<std::size_t>(v) : 0;
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
      std::memcpy(&socket_drops_, d, sizeof(socket_drops_));
    }
  }
  return env;
}

// Bytes [offset, offset + len) of what the kernel wrote into the entry's iovecs, in order.
void UdpPort::copy_out(const RxEntry& en, std::size_t offset, std::size_t len, std::uint8_t* to) {
  for (std::size_t i = 0; i < en.msg.msg_iovlen && len > 0; ++i) {
    const iovec& v = en.iov[i];
    if (offset >= v.iov_len) {
      offset -= v.iov_len;
      continue;
    }
    const std::size_t n = std::min(len, v.iov_len - offset);
    std::memcpy(to, static_cast<const std::uint8_t*>(v.iov_base) + offset, n);
    to += n;
    len -= n;
    offset = 0;
  }
}

void UdpPort::place(std::uint32_t slot, const UdpEnvelope& env, std::size_t datagram_bytes) {
  std::uint8_t* payload = rx_[slot].buffer.data() + kMaxEnvelopeBytes;
  const std::size_t header_bytes = envelope_bytes(env);
  write_envelope(env, datagram_bytes, payload);
  // The socket hides the IPv4 identification the ICRC covers; senders other than us set it,
  // and the segments of one of our segmented sends each carry their own (0, 1, 2, ...).
  const bool icrc_verified = recover_ipv4_id(env, datagram_bytes, payload) == IcrcCheck::kVerified;
  const std::size_t frame_bytes = header_bytes + datagram_bytes;
  rx_ready_.push_back(RxFrame{{payload - header_bytes, frame_bytes}, slot, icrc_verified});
  ++stats_.rx_packets;
  stats_.rx_bytes += frame_bytes;
}

// The frames of one datagram, in order, onto rx_ready_, and its slots not used back. False
// when a frame needs a slot and none is free (the caller holds them): the entry resumes at
// `next` on a later call, once frames are released.
bool UdpPort::take_datagram(RxEntry& en) {
  if (!en.parsed) {
    en.parsed = true;
    en.next = 0;
    en.copied = false;
    std::size_t gro_segment = 0;
    en.env = envelope_of(en, gro_segment);
    en.length = gro_segment > 0 ? gro_segment : en.bytes;
    en.count = en.length == 0 ? 1 : (en.bytes + en.length - 1) / en.length;
    en.used = std::min<std::size_t>(en.count, en.slots);
    if ((en.msg.msg_flags & MSG_TRUNC) != 0 || en.length > slot_payload_bytes() - 1) {
      // Larger than any frame we carry (the spare byte tells one that fits exactly).
      stats_.rx_drops += (en.msg.msg_flags & MSG_TRUNC) != 0 ? 1 : en.count;
      en.count = 0;
      en.used = 0;
    } else if (en.count == 1) {
      // The first slot's iovec took the first en.segment bytes; the rest went on.
      if (en.bytes > en.segment) {
        copy_out(en, en.segment, en.bytes - en.segment,
                 rx_[en.slot[0]].buffer.data() + kMaxEnvelopeBytes + en.segment);
        ++stats_.rx_gro_copied;
      }
    } else {
      ++stats_.rx_gro_datagrams;
      // Segments of the expected length landed one per slot; the others are copied into place,
      // through one linear copy when the length was not the expected one (the kernel packed
      // them where other lengths were expected).
      en.copied = en.length != en.segment;
      if (en.copied && en.bytes > rx_bounce_.size()) {
        stats_.rx_drops += en.count;
        en.count = 0;
        en.used = 0;
      } else if (en.copied) {
        copy_out(en, 0, en.bytes, rx_bounce_.data());
      }
      if (en.count > rx_seen_segments_) {
        rx_seen_segments_ = en.count;
        rx_seen_segment_ = en.length;
      }
    }
  }
  for (; en.next < en.count; ++en.next) {
    const std::size_t i = en.next;
    const std::size_t len = std::min(en.length, en.bytes - i * en.length);
    if (!en.copied && i < en.slots) {
      place(en.slot[i], en.env, len);  // where the kernel put it
      continue;
    }
    std::uint32_t slot = 0;
    if (i < en.slots) {
      slot = en.slot[i];
    } else if (!rx_free_.empty()) {
      slot = rx_free_.back();
      rx_free_.pop_back();
    } else {
      return false;
    }
    std::uint8_t* to = rx_[slot].buffer.data() + kMaxEnvelopeBytes;
    if (en.copied) {
      std::memcpy(to, rx_bounce_.data() + i * en.length, len);
    } else {
      copy_out(en, i * en.length, len, to);
    }
    ++stats_.rx_gro_copied;
    place(slot, en.env, len);
  }
  for (std::size_t j = en.used; j < en.slots; ++j)
    rx_free_.push_back(en.slot[j]);
  return true;
}

void UdpPort::take_datagrams() {
  while (rx_taken_ < rx_filled_) {
    if (!take_datagram(rx_entries_[rx_taken_])) return;
    ++rx_taken_;
  }
  if (rx_filled_ == 0) return;
  // The next reads expect what the largest datagram of this one brought; after a while without
  // segmented datagrams, one slot each again (more datagrams per read).
  if (rx_seen_segments_ > 1) {
    rx_expect_slots_ = static_cast<std::uint32_t>(std::min(rx_seen_segments_, kMaxGroSegments));
    rx_expect_segment_ = rx_seen_segment_;
    rx_reads_without_gro_ = 0;
  } else if (++rx_reads_without_gro_ >= kReadsBeforeOneSlot) {
    rx_expect_slots_ = 1;
  }
  rx_filled_ = 0;
  rx_taken_ = 0;
}

void UdpPort::read_datagrams(std::size_t want) {
  // Slots per datagram: as many segments as recent datagrams brought, one without offload.
  const std::uint32_t per = gro_ ? rx_expect_slots_ : 1;
  std::size_t entries = std::min({want, kMaxRxEntries, rx_free_.size() / per});
  std::uint32_t last_slots = per;
  if (entries == 0 && want > 0 && !rx_free_.empty()) {  // fewer free slots than one's share
    entries = 1;
    last_slots = static_cast<std::uint32_t>(rx_free_.size());
  }
  if (entries == 0) return;
  for (std::size_t e = 0; e < entries; ++e) {
    prepare_entry(rx_entries_[e], e + 1 == entries ? last_slots : per);
    rx_mmsg_[e].msg_hdr = rx_entries_[e].msg;
    rx_mmsg_[e].msg_len = 0;
  }
  const int got =
      recvmmsg(fd_, rx_mmsg_.data(), static_cast<unsigned>(entries), MSG_DONTWAIT, nullptr);
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ++stats_.rx_drops;
  const std::size_t read = got > 0 ? static_cast<std::size_t>(got) : 0;
  ++stats_.rx_reads;
  if (read == 0) ++stats_.rx_empty_reads;
  for (std::size_t e = 0; e < read; ++e) {
    RxEntry& en = rx_entries_[e];
    en.msg.msg_flags = rx_mmsg_[e].msg_hdr.msg_flags;
    en.msg.msg_controllen = rx_mmsg_[e].msg_hdr.msg_controllen;
    en.bytes = rx_mmsg_[e].msg_len;
    en.parsed = false;
  }
  // Entries the kernel did not fill give their slots back, last taken first, so that the free
  // list comes back in the order it was in.
  for (std::size_t e = entries; e-- > read;) {
    const RxEntry& en = rx_entries_[e];
    for (std::uint32_t j = en.slots; j-- > 0;)
      rx_free_.push_back(en.slot[j]);
  }
  rx_filled_ = read;
  rx_taken_ = 0;
  rx_seen_segments_ = 0;
}

Result<std::size_t, PortError> UdpPort::receive(std::span<RxFrame> frames) {
  if (rx_ready_at_ == rx_ready_.size()) {
    rx_ready_.clear();
    rx_ready_at_ = 0;
    // Datagrams of the last read still to take come first; a new read only when all are taken.
    if (rx_taken_ == rx_filled_) read_datagrams(frames.size());
    take_datagrams();
  }
  const std::size_t n = std::min(frames.size(), rx_ready_.size() - rx_ready_at_);
  std::copy_n(rx_ready_.begin() + static_cast<std::ptrdiff_t>(rx_ready_at_), n, frames.begin());
  rx_ready_at_ += n;
  return n;
}

void UdpPort::release(std::span<const RxFrame> frames) {
  for (const RxFrame& f : frames)
    rx_free_.push_back(static_cast<std::uint32_t>(f.handle));
}

int UdpPort::socket_for_source_port(std::uint16_t port) {
  if (port == config_.udp_port) return fd_;
  if (auto it = source_port_fds_.find(port); it != source_port_fds_.end()) return it->second;
  if (source_port_fds_.size() >= config_.max_source_port_sockets) return fd_;
  // A socket made now lands in the calling thread's namespace: it must be the port's.
  if (current_netns() != netns_) return fd_;
  int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fd_;
  set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0);
  size_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF, kSocketBufferBytes);
  send_like_roce(fd, config_.gso);
  if (!config_.bind_device.empty()) {
    (void)setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, config_.bind_device.data(),
                     static_cast<socklen_t>(config_.bind_device.size()));
  }
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    close(fd);
    fd = fd_;  // the port is taken: send from 4791 rather than not at all
  }
  source_port_fds_.emplace(port, fd);
  return fd;
}

bool UdpPort::target_of(const TxFrame& frame, Target& t) const {
  if (frame.size() > config_.max_frame_bytes) return false;
  const auto parsed = parse_udp_frame(frame);
  if (!parsed) return false;
  const UdpEnvelope& env = parsed->env;
  t.v4 = is_v4_mapped(env.dst_ip);
  // The kernel sends IPv4 with ID 0 and DF (send_like_roce); a frame that says otherwise would
  // arrive with an ICRC that no longer verifies.
  if (t.v4 && (env.ipv4_id != 0 || !env.ipv4_dont_fragment)) return false;
  t.src_port = env.src_port;
  t.dst = {};
  t.dst.sin6_family = AF_INET6;
  t.dst.sin6_port = htons(env.dst_port);
  std::memcpy(&t.dst.sin6_addr, env.dst_ip.data(), 16);
  t.traffic_class = env.traffic_class;
  t.hop_limit = env.hop_limit;
  t.payload = parsed->payload;
  return true;
}

void UdpPort::start_slot(TxSlot& slot, const Target& t, std::size_t index, std::size_t bytes) {
  slot.dst = t.dst;
  slot.iov[0] = {const_cast<std::uint8_t*>(t.payload.data()), t.payload.size()};
  slot.first = index;
  slot.frames = 1;
  slot.bytes = bytes;
  slot.msg = {};
  slot.msg.msg_name = &slot.dst;
  slot.msg.msg_namelen = sizeof(slot.dst);
  slot.msg.msg_iov = slot.iov.data();
  slot.msg.msg_iovlen = 1;
}

// Segment k of an IPv4 send leaves with identification k: the kernel gives an unconnected DF
// datagram ID 0 (ip_select_ident_segs) and numbers the segments from it (inet_gso_segment), in
// software or in a NIC's segmentation offload. The frame's ICRC was computed for ID 0, and the
// ICRC covers the ID (docs/protocol.md §1.7): segment k's is rewritten for ID k, in a buffer of
// the port's (the caller's frame is read-only).
void UdpPort::add_segment(TxSlot& slot, const Target& t, std::size_t bytes) {
  const std::uint32_t k = slot.frames;
  iovec* iov = &slot.iov[slot.msg.msg_iovlen];
  auto* payload = const_cast<std::uint8_t*>(t.payload.data());
  if (t.v4) {
    const std::size_t icrc_at = t.payload.size() - wire::kIcrcBytes;
    const std::size_t datagram = kIpv4HeaderBytes + kUdpHeaderBytes + icrc_at;
    const std::uint32_t icrc = wire::load_icrc(payload + icrc_at) ^
                               wire::icrc_ipv4_id_change(datagram, static_cast<std::uint16_t>(k));
    wire::store_icrc(slot.icrcs[k].data(), icrc);
    iov[0] = {payload, icrc_at};
    iov[1] = {slot.icrcs[k].data(), wire::kIcrcBytes};
    slot.msg.msg_iovlen += 2;
  } else {
    iov[0] = {payload, t.payload.size()};
    slot.msg.msg_iovlen += 1;
  }
  ++slot.frames;
  slot.bytes += bytes;
}

void UdpPort::finish_slot(TxSlot& slot, const Target& t, std::size_t segment_bytes) {
  slot.msg.msg_control = slot.control;
  std::memset(slot.control, 0, sizeof(slot.control));
  slot.msg.msg_controllen = CMSG_SPACE(sizeof(int)) * 2;
  if (slot.frames > 1) slot.msg.msg_controllen += CMSG_SPACE(sizeof(std::uint16_t));
  cmsghdr* c = CMSG_FIRSTHDR(&slot.msg);
  c->cmsg_level = t.v4 ? SOL_IP : IPPROTO_IPV6;
  c->cmsg_type = t.v4 ? IP_TOS : IPV6_TCLASS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &t.traffic_class, sizeof(int));
  c = CMSG_NXTHDR(&slot.msg, c);
  c->cmsg_level = t.v4 ? SOL_IP : IPPROTO_IPV6;
  c->cmsg_type = t.v4 ? IP_TTL : IPV6_HOPLIMIT;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &t.hop_limit, sizeof(int));
  if (slot.frames > 1) {
    c = CMSG_NXTHDR(&slot.msg, c);
    c->cmsg_level = IPPROTO_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
    const auto gso_size = static_cast<std::uint16_t>(segment_bytes);
    std::memcpy(CMSG_DATA(c), &gso_size, sizeof(gso_size));
  }
}

// A segmented send the kernel refused: its frames go one by one (each with the ICRC of ID 0,
// as encoded). A kernel or path without UDP segmentation (EINVAL, EIO: e.g. IPsec) turns it
// off for the port.
void UdpPort::send_one_by_one(const TxSlot& slot, std::span<const TxFrame> frames, int error) {
  if (error == -EINVAL || error == -EIO || error == -EOPNOTSUPP || error == -ENOPROTOOPT) {
    gso_ = false;
  }
  for (std::size_t i = slot.first; i < slot.first + slot.frames; ++i) {
    Target t;
    if (!target_of(frames[i], t)) continue;  // parsed once already
    TxSlot& one = *tx_one_;
    start_slot(one, t, i, frames[i].size());
    finish_slot(one, t, t.payload.size());
    if (sendmsg(socket_for_source_port(t.src_port), &one.msg, 0) < 0) {
      ++stats_.tx_drops;
    } else {
      ++stats_.tx_packets;
      stats_.tx_bytes += frames[i].size();
    }
  }
}

Result<std::size_t, PortError> UdpPort::transmit(std::span<const TxFrame> frames) {
  std::size_t done = 0;
  while (done < frames.size()) {
    std::uint32_t queued = 0;
    while (done < frames.size() && queued < kTxBatch) {
      TxSlot& slot = tx_[queued];
      Target first;
      if (!target_of(frames[done], first)) {
        ++stats_.tx_rejected;
        ++done;
        continue;
      }
      start_slot(slot, first, done, frames[done].size());
      ++done;
      // Segmentation offload: the frames after it to the same destination, each as long as the
      // first but the last, which may be shorter (udp(7)), go in the same send. A shorter frame
      // does not follow the first alone: a message's first packet is longer than its middle
      // ones (RETH, AETH), and a send of [FIRST, MIDDLE] then [MIDDLE ...] would reach a
      // receiver with offload as datagrams of two segment lengths in turn, each packed where
      // the other's segments were expected (read_datagrams); [FIRST], [MIDDLE ... LAST] costs
      // the same two sends.
      const std::size_t segment = first.payload.size();
      std::size_t total = segment;
      Target next;
      // A segment's ICRC is rewritten (add_segment): each must hold a BTH and an ICRC.
      const bool segmentable = gso_ && segment >= wire::kBthBytes + wire::kIcrcBytes;
      while (segmentable && done < frames.size() && slot.frames < kMaxGsoSegments &&
             target_of(frames[done], next) && next.same_flow(first) &&
             next.payload.size() <= segment &&
             next.payload.size() >= wire::kBthBytes + wire::kIcrcBytes &&
             total + next.payload.size() <= kMaxGsoBytes) {
        if (next.payload.size() < segment && slot.frames == 1) break;
        add_segment(slot, next, frames[done].size());
        total += next.payload.size();
        ++done;
        if (next.payload.size() < segment) break;
      }
      finish_slot(slot, first, segment);
      io_uring_sqe* sqe = io_uring_get_sqe(&tx_ring_);
      io_uring_prep_sendmsg(sqe, socket_for_source_port(first.src_port), &slot.msg, 0);
      io_uring_sqe_set_data64(sqe, queued);
      ++queued;
    }
    if (queued == 0) continue;
    // The caller's bytes must be sent before we return: wait for every completion.
    const int rc = io_uring_submit_and_wait(&tx_ring_, queued);
    if (rc < 0) return Err{PortError{"udp port: io_uring_submit_and_wait (tx)", -rc}};
    for (std::uint32_t i = 0; i < queued; ++i) {
      io_uring_cqe* cqe = nullptr;
      const int wrc = io_uring_wait_cqe(&tx_ring_, &cqe);
      if (wrc < 0) return Err{PortError{"udp port: io_uring_wait_cqe (tx)", -wrc}};
      const TxSlot& slot = tx_[io_uring_cqe_get_data64(cqe)];
      if (cqe->res >= 0) {
        stats_.tx_packets += slot.frames;
        stats_.tx_bytes += slot.bytes;
        if (slot.frames > 1) ++stats_.tx_gso_sends;
      } else if (slot.frames > 1) {
        send_one_by_one(slot, frames, cqe->res);
      } else {
        ++stats_.tx_drops;
      }
      io_uring_cqe_seen(&tx_ring_, cqe);
    }
  }
  return done;
}

}  // namespace xroce::net
