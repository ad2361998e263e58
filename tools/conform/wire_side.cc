#include "wire_side.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "net/neighbour.h"
#include "wire/frame_layout.h"
#include "wire/types.h"

namespace xroce::conform {
namespace {

[[noreturn]] void fail_errno(const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

int poll_ms_until(std::uint64_t deadline_ns) {
  const std::uint64_t now = monotonic_ns();
  if (now >= deadline_ns) return 0;
  return static_cast<int>((deadline_ns - now + 999'999) / 1'000'000);
}

std::string hex_of(const std::uint8_t* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i)
    s += fmt::format("{:02x}", p[i]);
  return s;
}

// "key=value" from an agent reply.
std::string field(const std::string& line, const std::string& key) {
  const std::string pat = " " + key + "=";
  const std::size_t at = (" " + line).find(pat);
  if (at == std::string::npos) throw std::runtime_error("agent reply without " + key + ": " + line);
  const std::size_t begin = at + pat.size() - 1;
  const std::size_t end = line.find(' ', begin);
  return line.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

std::uint64_t hex_field(const std::string& line, const std::string& key) {
  return std::stoull(field(line, key), nullptr, 16);
}

using wire::kVnetHeaderBytes;

}  // namespace

PacketLink::PacketLink(const std::string& ifname, const Endpoints& ends) : ends_(ends) {
  ifindex_ = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex_ == 0) fail_errno("interface " + ifname);
  fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (fd_ < 0) fail_errno("AF_PACKET socket (needs CAP_NET_RAW)");
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = ifindex_;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
    close(fd_);
    fail_errno("bind AF_PACKET to " + ifname);
  }
  const int on = 1;
  if (setsockopt(fd_, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0) {
    close(fd_);
    fail_errno("PACKET_VNET_HDR on " + ifname);
  }
}

PacketLink::~PacketLink() {
  if (fd_ >= 0) close(fd_);
}

std::uint64_t PacketLink::now_ns() {
  return monotonic_ns();
}

void PacketLink::send(const Frame& frame) {
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = ifindex_;
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, frame.data(), 6);
  std::array<std::uint8_t, kVnetHeaderBytes> none{};  // no offload asked of the kernel
  std::array<iovec, 2> iov{iovec{none.data(), none.size()},
                           iovec{const_cast<std::uint8_t*>(frame.data()), frame.size()}};
  msghdr msg{};
  msg.msg_name = &to;
  msg.msg_namelen = sizeof to;
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  if (sendmsg(fd_, &msg, 0) != static_cast<ssize_t>(none.size() + frame.size())) {
    fail_errno("send on the link");
  }
}

bool PacketLink::from_target(const Frame& f) const {
  const wire::FrameLayout l = wire::walk_frame(f);
  if (!l.has_udp() || wire::load_be16(&f[l.udp_offset + 2]) != wire::kRoceV2Port) return false;
  const wire::FrameAddress a = wire::address_of(f, l);
  return a.src_ip == ends_.target_ip && a.dst_ip == ends_.peer_ip;
}

std::optional<Frame> PacketLink::read_one(std::uint64_t deadline_ns) {
  if (!split_.empty()) {
    Frame f = std::move(split_.front());
    split_.pop_front();
    return f;
  }
  Frame buf(kVnetHeaderBytes + 65536);
  while (true) {
    pollfd p{fd_, POLLIN, 0};
    const int n = poll(&p, 1, poll_ms_until(deadline_ns));
    if (n < 0 && errno != EINTR) fail_errno("poll on the link");
    if (n <= 0) {
      if (monotonic_ns() >= deadline_ns) return std::nullopt;
      continue;
    }
    sockaddr_ll from{};
    socklen_t from_len = sizeof from;
    const ssize_t got = recvfrom(fd_, buf.data(), buf.size(), MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&from), &from_len);
    if (got < 0) fail_errno("receive on the link");
    if (from.sll_pkttype == PACKET_OUTGOING) continue;
    if (got < static_cast<ssize_t>(kVnetHeaderBytes)) continue;
    const auto end = buf.begin() + std::min<ssize_t>(got, static_cast<ssize_t>(buf.size()));
    Frame f(buf.begin() + kVnetHeaderBytes, end);
    if (!from_target(f)) continue;
    if (const std::uint16_t segment =
            wire::vnet_udp_segment_bytes(std::span(buf).first(kVnetHeaderBytes))) {
      auto frames = wire::split_udp_superframe(f, segment);
      if (!frames.empty()) {
        for (std::size_t i = 1; i < frames.size(); ++i)
          split_.push_back(std::move(frames[i]));
        return std::move(frames[0]);
      }
    }
    return f;
  }
}

std::optional<Frame> PacketLink::receive(std::uint64_t deadline_ns) {
  if (!held_.empty()) {
    Frame f = std::move(held_.front());
    held_.pop_front();
    return f;
  }
  return read_one(deadline_ns);
}

void PacketLink::idle_until(std::uint64_t deadline_ns) {
  while (auto f = read_one(deadline_ns))
    held_.push_back(std::move(*f));
}

AgentTarget::AgentTarget(const std::string& host, std::uint16_t port, const Endpoints& ends,
                         int sgid_index, bool generates_cnp)
    : peer_gid_hex_(hex_of(ends.peer_ip.bytes.data(), ends.peer_ip.bytes.size())),
      target_gid_hex_(hex_of(ends.target_ip.bytes.data(), ends.target_ip.bytes.size())),
      sgid_index_(sgid_index) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    throw std::runtime_error("cannot resolve the agent's address " + host);
  }
  fd_ = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int rc = fd_ < 0 ? -1 : connect(fd_, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0) {
    if (fd_ >= 0) close(fd_);
    fail_errno(fmt::format("connect to xroce-conform-agent at {}:{}", host, port));
  }
  const std::string caps = request("caps");
  caps_.name = field(caps, "name");
  caps_.atomics = field(caps, "atomics") == "1";
  caps_.ud = field(caps, "ud") == "1";
  caps_.port_mtu_bytes = static_cast<std::uint32_t>(std::stoul(field(caps, "mtu")));
  caps_.generates_cnp = generates_cnp;
}

AgentTarget::~AgentTarget() {
  if (fd_ >= 0) close(fd_);
}

std::string AgentTarget::read_line() {
  while (true) {
    const std::size_t nl = buffered_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 30'000) <= 0) throw std::runtime_error("the agent did not answer in 30 s");
    char buf[65536];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) throw std::runtime_error("the agent closed the connection");
    buffered_.append(buf, static_cast<std::size_t>(n));
  }
}

std::string AgentTarget::request(const std::string& line) {
  const std::string out = line + "\n";
  if (write(fd_, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
    fail_errno("write to the agent");
  }
  std::string reply = read_line();
  if (reply.rfind("ok", 0) != 0)
    throw std::runtime_error("agent: " + reply + " (for: " + line + ")");
  return reply;
}

QpInfo AgentTarget::create_qp(const QpSpec& s) {
  const std::string r = request(fmt::format(
      "create_qp kind={} peer_gid={} peer_qpn={:x} sq_psn={:x} rq_psn={:x} mtu={} timeout={} "
      "retry={} rnr_retry={} min_rnr_timer={} max_rd_atomic={} max_dest_rd_atomic={} access={:x} "
      "qkey={:x}{}",
      s.kind == QpKind::kUd ? "ud" : "rc", peer_gid_hex_, s.peer_qpn, s.sq_psn, s.rq_psn,
      s.mtu_bytes, s.timeout, s.retry_cnt, s.rnr_retry, s.min_rnr_timer, s.max_rd_atomic,
      s.max_dest_rd_atomic, s.access, s.qkey,
      sgid_index_ < 0 ? " local_gid=" + target_gid_hex_ : fmt::format(" sgid={}", sgid_index_)));
  return QpInfo{static_cast<std::uint32_t>(std::stoul(field(r, "id"))),
                static_cast<std::uint32_t>(hex_field(r, "qpn"))};
}

void AgentTarget::destroy_qp(const QpInfo& qp) {
  request(fmt::format("destroy_qp id={}", qp.id));
}

MrInfo AgentTarget::register_mr(std::uint32_t length, std::uint32_t access) {
  const std::string r = request(fmt::format("reg_mr length={} access={:x}", length, access));
  return MrInfo{static_cast<std::uint32_t>(std::stoul(field(r, "id"))), hex_field(r, "addr"),
                length, static_cast<std::uint32_t>(hex_field(r, "lkey")),
                static_cast<std::uint32_t>(hex_field(r, "rkey"))};
}

void AgentTarget::write_mr(const MrInfo& mr, std::uint32_t offset,
                           const std::vector<std::uint8_t>& data) {
  request(fmt::format("write_mr id={} offset={} hex={}", mr.id, offset,
                      hex_of(data.data(), data.size())));
}

std::vector<std::uint8_t> AgentTarget::read_mr(const MrInfo& mr, std::uint32_t offset,
                                               std::uint32_t length) {
  const std::string h = field(
      request(fmt::format("read_mr id={} offset={} length={}", mr.id, offset, length)), "hex");
  std::vector<std::uint8_t> out(h.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(std::stoul(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

void AgentTarget::post_recv(const QpInfo& qp, std::uint64_t wr_id, const MrInfo& mr,
                            std::uint32_t offset, std::uint32_t length) {
  request(fmt::format("post_recv qp={} wr_id={:x} mr={} offset={} length={}", qp.id, wr_id, mr.id,
                      offset, length));
}

void AgentTarget::post_send(const QpInfo& qp, const SendSpec& w) {
  request(fmt::format(
      "post_send qp={} wr_id={:x} op={} mr={} offset={} length={} raddr={:x} rkey={:x} imm={:x} "
      "cmp={:x} swap={:x} ud_qpn={:x} ud_qkey={:x}",
      qp.id, w.wr_id, static_cast<int>(w.op), w.mr, w.offset, w.length, w.remote_addr, w.rkey,
      w.imm, w.compare_add, w.swap, w.ud_remote_qpn, w.ud_remote_qkey));
}

std::vector<Cqe> AgentTarget::poll(const QpInfo& qp) {
  const std::string r = request(fmt::format("poll qp={}", qp.id));
  const int n = std::stoi(field(r, "n"));
  std::vector<Cqe> out;
  for (int i = 0; i < n; ++i) {
    const std::string l = read_line();
    Cqe c;
    c.wr_id = hex_field(l, "wr_id");
    c.status = static_cast<std::uint32_t>(std::stoul(field(l, "status")));
    c.opcode = static_cast<std::uint32_t>(std::stoul(field(l, "opcode")));
    c.byte_len = static_cast<std::uint32_t>(std::stoul(field(l, "byte_len")));
    c.imm = static_cast<std::uint32_t>(hex_field(l, "imm"));
    c.src_qp = static_cast<std::uint32_t>(hex_field(l, "src_qp"));
    c.wc_flags = static_cast<std::uint32_t>(hex_field(l, "flags"));
    out.push_back(c);
  }
  return out;
}

bool AgentTarget::in_error(const QpInfo& qp) {
  constexpr int kIbvQpsErr = 6;
  return std::stoi(field(request(fmt::format("query qp={}", qp.id)), "state")) == kIbvQpsErr;
}

std::optional<wire::IpAddr> parse_ip(const std::string& text) {
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return wire::IpAddr::v4(ntohl(v4.s_addr));
  std::array<std::uint8_t, 16> v6{};
  if (inet_pton(AF_INET6, text.c_str(), v6.data()) == 1) return wire::IpAddr::v6(v6);
  return std::nullopt;
}

namespace {

// IFNAME's addresses of the target's family: for IPv6 the link-local ones only when the target
// is link-local itself (a RoCE GID of a global address is reached from a global one).
std::vector<wire::IpAddr> interface_addresses(const std::string& ifname,
                                              const wire::IpAddr& target) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) fail_errno("getifaddrs");
  std::vector<wire::IpAddr> out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || ifname != i->ifa_name) continue;
    if (i->ifa_addr->sa_family == AF_INET && target.is_v4()) {
      out.push_back(
          wire::IpAddr::v4(ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr)));
    } else if (i->ifa_addr->sa_family == AF_INET6 && !target.is_v4()) {
      std::array<std::uint8_t, 16> b{};
      std::memcpy(b.data(), &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16);
      const wire::IpAddr ip = wire::IpAddr::v6(b);
      if (ip.is_link_local_v6() == target.is_link_local_v6()) out.push_back(ip);
    }
  }
  freeifaddrs(list);
  return out;
}

wire::MacAddr interface_mac(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) fail_errno("getifaddrs");
  wire::MacAddr mac{};
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_PACKET && ifname == i->ifa_name) {
      std::memcpy(mac.data(), reinterpret_cast<sockaddr_ll*>(i->ifa_addr)->sll_addr, 6);
    }
  }
  freeifaddrs(list);
  return mac;
}

}  // namespace

Endpoints discover_endpoints(const std::string& ifname, const std::string& target_ip) {
  const auto target = parse_ip(target_ip);
  if (!target) throw std::runtime_error("--peer must be an IPv4 or IPv6 address: " + target_ip);
  const int ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (ifindex == 0) fail_errno("interface " + ifname);
  int error = 0;
  auto resolver = net::NeighbourResolver::open(net::NeighbourOptions{}, error);
  if (!resolver) {
    errno = error;
    fail_errno("rtnetlink socket");
  }
  constexpr std::uint64_t kResolveTimeoutNs = 5'000'000'000;
  const net::NeighbourAnswer a = resolver->resolve_blocking(ifindex, *target, kResolveTimeoutNs);
  if (a.state == net::NeighbourState::kLocal) {
    throw std::runtime_error(target_ip +
                             " is an address of this host: run the peer where the target is "
                             "reached over " +
                             ifname + " (another namespace or host)");
  }
  if (a.state != net::NeighbourState::kResolved || a.via_gateway) {
    throw std::runtime_error(fmt::format("{} is not a neighbour on {} ({}{})", target_ip, ifname,
                                         net::to_string(a.state),
                                         a.via_gateway ? ", behind a gateway" : ""));
  }
  const std::vector<wire::IpAddr> ours = interface_addresses(ifname, *target);
  Endpoints e;
  e.target_ip = *target;
  e.target_mac = a.mac;
  e.peer_mac = interface_mac(ifname);
  if (a.source && std::find(ours.begin(), ours.end(), *a.source) != ours.end()) {
    e.peer_ip = *a.source;
  } else if (!ours.empty()) {
    e.peer_ip = ours.front();
  } else {
    throw std::runtime_error(ifname + " has no address of " + target_ip + "'s family and scope");
  }
  return e;
}

}  // namespace xroce::conform
