// many_qps: N RC QPs between two devices, each side WRITEs a pattern to the peer's memory and
// then SENDs a message on every QP, round after round; each side checks every byte that arrived
// and that every QP completed each of its operations. The two sides meet over TCP (the server
// listens, the client connects) to trade QPNs, GIDs and the target region's address and rkey.
//
// CQs: one send CQ and one receive CQ for all QPs, or with cqs=N, N pairs, QP q on pair q % N (a
// device keeps the QPs that share a CQ on one worker, so more CQs let its workers share the QPs).
//
// Memory (one MR per side), per QP q and round r: a source slot and a target slot of `bytes`
// each (the peer WRITEs into our target slot (q, r)), and a message and a receive slot of
// kMessageBytes. Slots are not reused across rounds, so a round may overlap the peer's next
// one; every receive is posted before the two sides meet again after connecting, so no SEND
// can find none.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbs_probe.h"

namespace xroce::probe {
namespace {

constexpr uint32_t kMessageBytes = 64;
constexpr int kPollBatch = 64;
// Shorter than the e2e harness's 120 s for the whole program, so that a round that hangs says
// what it waits for (report_hang) instead of being killed silently.
constexpr auto kRoundDeadline = std::chrono::seconds(60);
constexpr uint32_t kQpsNamedInReport = 8;

// What each side tells the other, then one QPN per QP.
struct Hello {
  uint32_t qps;
  uint32_t rounds;
  uint32_t bytes;
  uint32_t rkey;
  uint64_t target_addr;
  uint8_t gid[16];
};

// The byte at `offset` of what side `sender` (0 server, 1 client) writes or sends on QP q in
// round r: differs for every side, QP, round and offset, so a byte landing in the wrong slot
// or from the wrong QP is caught.
uint8_t pattern(uint32_t sender, uint32_t q, uint32_t r, uint32_t offset) {
  const uint32_t x = (sender * 0x9E3779B1u) ^ (q * 0x85EBCA77u) ^ (r * 0xC2B2AE3Du) ^ offset;
  return static_cast<uint8_t>((x ^ (x >> 11) ^ (x >> 19)) & 0xff);
}

bool full_io(int fd, void* data, size_t bytes, bool send_it) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = send_it ? send(fd, p, bytes, MSG_NOSIGNAL) : recv(fd, p, bytes, 0);
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// Both sides send theirs, then read the peer's.
bool trade(int fd, const void* mine, void* theirs, size_t bytes) {
  return full_io(fd, const_cast<void*>(mine), bytes, true) && full_io(fd, theirs, bytes, false);
}

// A byte each way: neither side goes on before the other got here.
bool barrier(int fd) {
  uint8_t mine = 1;
  uint8_t theirs = 0;
  return trade(fd, &mine, &theirs, 1) && theirs == 1;
}

int tcp_server(uint16_t port) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listener, 1) != 0) {
    std::printf("listen on %u: %s\n", port, std::strerror(errno));
    close(listener);
    return -1;
  }
  const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  close(listener);
  return fd;
}

int tcp_client(const char* ip, uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    std::printf("connect to %s:%u: %s\n", ip, port, std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

// The GID of the port's IPv4 address (::ffff:a.b.c.d), the one the peer is reached through.
int ipv4_gid_index(ibv_context* ctx, ibv_gid& gid) {
  ibv_port_attr port{};
  if (ibv_query_port(ctx, 1, &port) != 0) return -1;
  for (int i = 0; i < port.gid_tbl_len; ++i) {
    if (ibv_query_gid(ctx, 1, i, &gid) != 0) continue;
    static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(gid.raw, kV4Mapped, sizeof(kV4Mapped)) == 0) return i;
  }
  return -1;
}

class ManyQps {
 public:
  ManyQps(ibv_context* ctx, uint32_t side, uint32_t qps, uint32_t rounds, uint32_t bytes,
          uint32_t cqs)
      : ctx_(ctx), side_(side), qps_(qps), rounds_(rounds), bytes_(bytes), cqs_(cqs) {}
  ~ManyQps() {
    for (ibv_qp* qp : qp_)
      ibv_destroy_qp(qp);
    for (ibv_cq* cq : send_cq_)
      ibv_destroy_cq(cq);
    for (ibv_cq* cq : recv_cq_)
      ibv_destroy_cq(cq);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  }
  ManyQps(const ManyQps&) = delete;
  ManyQps& operator=(const ManyQps&) = delete;

  int run(int tcp) {
    if (!create()) return 1;
    Hello mine{qps_, rounds_, bytes_, mr_->rkey, addr(target_), {}};
    std::memcpy(mine.gid, gid_.raw, sizeof(mine.gid));
    Hello theirs{};
    std::vector<uint32_t> my_qpns(qps_);
    std::vector<uint32_t> peer_qpns(qps_);
    for (uint32_t q = 0; q < qps_; ++q)
      my_qpns[q] = qp_[q]->qp_num;
    if (!trade(tcp, &mine, &theirs, sizeof(mine)) ||
        !trade(tcp, my_qpns.data(), peer_qpns.data(), qps_ * sizeof(uint32_t))) {
      std::printf("trading QPNs failed\n");
      return 1;
    }
    if (theirs.qps != qps_ || theirs.rounds != rounds_ || theirs.bytes != bytes_) {
      std::printf("the peer runs another shape\n");
      return 1;
    }
    peer_rkey_ = theirs.rkey;
    peer_target_ = theirs.target_addr;
    ibv_gid peer_gid{};
    std::memcpy(peer_gid.raw, theirs.gid, sizeof(peer_gid.raw));
    for (uint32_t q = 0; q < qps_; ++q) {
      if (!connect_qp(qp_[q], peer_qpns[q], peer_gid, static_cast<uint8_t>(gid_index_)) ||
          !post_receives(q)) {
        return 1;
      }
    }
    if (!barrier(tcp)) return 1;  // the peer's QPs are ready and hold every receive
    const auto start = std::chrono::steady_clock::now();
    std::printf("many_qps: %u QPs connected in %.3f s\n", qps_,
                std::chrono::duration<double>(start - created_).count());
    for (uint32_t r = 0; r < rounds_; ++r) {
      if (!round(r)) return 1;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Until the peer checked too: our daemon may still owe it ACKs for what we received.
    if (!barrier(tcp)) return 1;
    std::printf("many_qps: %u QPs, %u rounds, %llu bytes verified, every QP completed, %.3f s\n",
                qps_, rounds_, static_cast<unsigned long long>(verified_), seconds);
    return 0;
  }

 private:
  uint64_t addr(size_t offset) const { return reinterpret_cast<uint64_t>(memory_.data() + offset); }
  size_t slot(size_t base, uint32_t q, uint32_t r, uint32_t slot_bytes) const {
    return base + (size_t{q} * rounds_ + r) * slot_bytes;
  }

  bool create() {
    created_ = std::chrono::steady_clock::now();
    gid_index_ = ipv4_gid_index(ctx_, gid_);
    if (gid_index_ < 0) {
      std::printf("no IPv4 GID on port 1\n");
      return false;
    }
    const size_t data = size_t{qps_} * rounds_ * bytes_;
    const size_t messages = size_t{qps_} * rounds_ * kMessageBytes;
    source_ = 0;
    target_ = data;
    message_ = 2 * data;
    receive_ = 2 * data + messages;
    memory_.assign(2 * data + 2 * messages, 0);
    for (uint32_t q = 0; q < qps_; ++q) {
      for (uint32_t r = 0; r < rounds_; ++r) {
        for (uint32_t i = 0; i < bytes_; ++i)
          memory_[slot(source_, q, r, bytes_) + i] = pattern(side_, q, r, i);
        for (uint32_t i = 0; i < kMessageBytes; ++i)
          memory_[slot(message_, q, r, kMessageBytes) + i] = pattern(side_, q, r, ~i);
      }
    }
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ != nullptr) {
      mr_ = ibv_reg_mr(pd_, memory_.data(), memory_.size(),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    }
    if (mr_ == nullptr) {
      std::printf("PD or MR: %s\n", std::strerror(errno));
      return false;
    }
    for (uint32_t c = 0; c < cqs_; ++c) {
      ibv_cq* send = ibv_create_cq(ctx_, static_cast<int>(2 * qps_ * rounds_), nullptr, nullptr, 0);
      if (send != nullptr) send_cq_.push_back(send);
      ibv_cq* recv = ibv_create_cq(ctx_, static_cast<int>(qps_ * rounds_), nullptr, nullptr, 0);
      if (recv != nullptr) recv_cq_.push_back(recv);
      if (send == nullptr || recv == nullptr) {
        std::printf("CQs: %s\n", std::strerror(errno));
        return false;
      }
    }
    for (uint32_t q = 0; q < qps_; ++q) {
      ibv_qp_init_attr init{};
      init.send_cq = send_cq_[q % cqs_];
      init.recv_cq = recv_cq_[q % cqs_];
      init.qp_type = IBV_QPT_RC;
      init.cap.max_send_wr = 2 * rounds_;
      init.cap.max_recv_wr = rounds_;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      ibv_qp* qp = ibv_create_qp(pd_, &init);
      if (qp == nullptr) {
        std::printf("create_qp %u: %s\n", q, std::strerror(errno));
        return false;
      }
      qp_.push_back(qp);
    }
    return true;
  }

  uint64_t wr_id(uint32_t q, uint32_t r) const { return uint64_t{q} * rounds_ + r; }

  // Every round's receive on QP q (a QP takes receives from INIT on).
  bool post_receives(uint32_t q) {
    for (uint32_t r = 0; r < rounds_; ++r) {
      ibv_sge sge{addr(slot(receive_, q, r, kMessageBytes)), kMessageBytes, mr_->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = wr_id(q, r);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      if (int err = ibv_post_recv(qp_[q], &wr, &bad)) {
        std::printf("post_recv %u: %s\n", q, std::strerror(err));
        return false;
      }
    }
    return true;
  }

  // Every QP: a WRITE of its source slot to the peer's target slot, then a SEND of its message
  // (which arrives after the WRITE's data: one QP's requests execute in order).
  bool post_round(uint32_t r) {
    for (uint32_t q = 0; q < qps_; ++q) {
      ibv_sge write_sge{addr(slot(source_, q, r, bytes_)), bytes_, mr_->lkey};
      ibv_sge send_sge{addr(slot(message_, q, r, kMessageBytes)), kMessageBytes, mr_->lkey};
      ibv_send_wr send{};
      send.wr_id = wr_id(q, r);
      send.sg_list = &send_sge;
      send.num_sge = 1;
      send.opcode = IBV_WR_SEND;
      send.send_flags = IBV_SEND_SIGNALED;
      ibv_send_wr write{};
      write.wr_id = wr_id(q, r);
      write.sg_list = &write_sge;
      write.num_sge = 1;
      write.opcode = IBV_WR_RDMA_WRITE;
      write.send_flags = IBV_SEND_SIGNALED;
      write.wr.rdma.remote_addr = peer_target_ + slot(0, q, r, bytes_);
      write.wr.rdma.rkey = peer_rkey_;
      write.next = &send;
      ibv_send_wr* bad = nullptr;
      if (int err = ibv_post_send(qp_[q], &write, &bad)) {
        std::printf("post_send %u: %s\n", q, std::strerror(err));
        return false;
      }
    }
    return true;
  }

  // Round r: post on every QP, then wait until every QP's WRITE and SEND completed and every
  // QP received the peer's message, checking each completion and the bytes it brought.
  bool round(uint32_t r) {
    if (!post_round(r)) return false;
    std::vector<uint8_t> writes(qps_, 0), sends(qps_, 0);
    uint32_t send_done = 0;
    const auto deadline = std::chrono::steady_clock::now() + kRoundDeadline;
    ibv_wc wc[kPollBatch];
    while (send_done < 2 * qps_ || receives_[r] < qps_) {
      if (std::chrono::steady_clock::now() > deadline) {
        report_hang(r, send_done, writes, sends);
        return false;
      }
      for (uint32_t c = 0; c < cqs_; ++c) {
        const int ns = ibv_poll_cq(send_cq_[c], kPollBatch, wc);
        for (int i = 0; i < ns; ++i) {
          if (!take_send(wc[i], r, writes, sends)) return false;
          ++send_done;
        }
        const int nr = ibv_poll_cq(recv_cq_[c], kPollBatch, wc);
        for (int i = 0; i < nr; ++i) {
          if (!take_receive(wc[i])) return false;
        }
        if (ns < 0 || nr < 0) {
          std::printf("poll_cq failed\n");
          return false;
        }
      }
    }
    return true;
  }

  // What a hung round still waits for: the counts, then the first QPs missing a WRITE
  // completion, a SEND completion or the peer's SEND, each with what ibv_query_qp says of it
  // (the device's next send PSN and expected receive PSN: whether the transport got as far as
  // the completion that is missing).
  void report_hang(uint32_t r, uint32_t send_done, const std::vector<uint8_t>& writes,
                   const std::vector<uint8_t>& sends) const {
    std::printf("round %u hung: %u of %u send completions, %u of %u receives\n", r, send_done,
                2 * qps_, receives_[r], qps_);
    const auto name_missing = [&](const char* what, auto missing) {
      uint32_t count = 0;
      std::string first;
      for (uint32_t q = 0; q < qps_; ++q) {
        if (!missing(q)) continue;
        if (count++ < kQpsNamedInReport) first += " " + describe(q);
      }
      if (count != 0) std::printf("  %u QPs without %s:%s\n", count, what, first.c_str());
    };
    name_missing("their WRITE completion", [&](uint32_t q) { return writes[q] == 0; });
    name_missing("their SEND completion", [&](uint32_t q) { return sends[q] == 0; });
    name_missing("the peer's SEND", [&](uint32_t q) { return received_[wr_id(q, r)] == 0; });
  }

  std::string describe(uint32_t q) const {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    std::string d = std::to_string(q) + " (qpn " + std::to_string(qp_[q]->qp_num);
    if (ibv_query_qp(qp_[q], &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &init) != 0)
      return d + ", query_qp failed)";
    return d + " state " + std::to_string(attr.qp_state) + " sq_psn " +
           std::to_string(attr.sq_psn) + " rq_psn " + std::to_string(attr.rq_psn) + ")";
  }

  bool take_send(const ibv_wc& wc, uint32_t r, std::vector<uint8_t>& writes,
                 std::vector<uint8_t>& sends) {
    const uint32_t q = static_cast<uint32_t>(wc.wr_id / rounds_);
    if (wc.status != IBV_WC_SUCCESS || q >= qps_ || wc.wr_id % rounds_ != r) {
      std::printf("send completion on QP %u round %u: %s (wr_id %llu)\n", q, r,
                  ibv_wc_status_str(wc.status), static_cast<unsigned long long>(wc.wr_id));
      return false;
    }
    std::vector<uint8_t>& seen = wc.opcode == IBV_WC_RDMA_WRITE ? writes : sends;
    if (seen[q]++ != 0 || (wc.opcode != IBV_WC_RDMA_WRITE && wc.opcode != IBV_WC_SEND)) {
      std::printf("QP %u round %u: unexpected completion (opcode %d)\n", q, r, wc.opcode);
      return false;
    }
    return true;
  }

  // The peer's SEND on QP q in round r (the peer may be a round ahead of us) came after its
  // WRITE: both must hold the peer's pattern.
  bool take_receive(const ibv_wc& wc) {
    const uint32_t q = static_cast<uint32_t>(wc.wr_id / rounds_);
    const uint32_t r = static_cast<uint32_t>(wc.wr_id % rounds_);
    if (wc.status != IBV_WC_SUCCESS || q >= qps_ || wc.qp_num != qp_[q]->qp_num ||
        wc.byte_len != kMessageBytes || received_[wc.wr_id]++ != 0) {
      std::printf("receive on QP %u round %u: %s, %u bytes, qp_num %u\n", q, r,
                  ibv_wc_status_str(wc.status), wc.byte_len, wc.qp_num);
      return false;
    }
    const uint32_t peer = 1 - side_;
    for (uint32_t i = 0; i < kMessageBytes; ++i) {
      if (memory_[slot(receive_, q, r, kMessageBytes) + i] != pattern(peer, q, r, ~i)) {
        std::printf("QP %u round %u: SEND byte %u differs\n", q, r, i);
        return false;
      }
    }
    for (uint32_t i = 0; i < bytes_; ++i) {
      if (memory_[slot(target_, q, r, bytes_) + i] != pattern(peer, q, r, i)) {
        std::printf("QP %u round %u: WRITE byte %u differs\n", q, r, i);
        return false;
      }
    }
    verified_ += kMessageBytes + bytes_;
    ++receives_[r];
    return true;
  }

  ibv_context* ctx_;
  uint32_t side_, qps_, rounds_, bytes_, cqs_;
  ibv_gid gid_{};
  int gid_index_ = -1;
  std::vector<uint8_t> memory_;
  size_t source_ = 0, target_ = 0, message_ = 0, receive_ = 0;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<ibv_cq*> send_cq_;  // cqs_ of each
  std::vector<ibv_cq*> recv_cq_;
  std::vector<ibv_qp*> qp_;
  uint32_t peer_rkey_ = 0;
  uint64_t peer_target_ = 0;
  uint64_t verified_ = 0;
  std::chrono::steady_clock::time_point created_;
  std::vector<uint8_t> received_ = std::vector<uint8_t>(size_t{qps_} * rounds_, 0);  // by wr_id
  std::vector<uint32_t> receives_ = std::vector<uint32_t>(rounds_, 0);               // per round
};

}  // namespace

// args: server PORT QPS ROUNDS BYTES [cqs=N] | client PORT QPS ROUNDS BYTES SERVER_IPV4 [cqs=N]
int many_qps(ibv_context* ctx, int argc, char** argv) {
  const bool server = argc >= 5 && std::strcmp(argv[0], "server") == 0;
  const bool client = argc >= 6 && std::strcmp(argv[0], "client") == 0;
  if (!server && !client) {
    std::printf(
        "many_qps server PORT QPS ROUNDS BYTES [cqs=N] | client PORT QPS ROUNDS BYTES IP "
        "[cqs=N]\n");
    return 2;
  }
  const int options = server ? 5 : 6;  // the first argument after the required ones
  uint32_t cqs = 1;
  for (int i = options; i < argc; ++i) {
    if (std::strncmp(argv[i], "cqs=", 4) != 0 ||
        (cqs = static_cast<uint32_t>(std::atoi(argv[i] + 4))) == 0) {
      std::printf("unknown or bad option %s (cqs=N, N > 0)\n", argv[i]);
      return 2;
    }
  }
  const auto port = static_cast<uint16_t>(std::atoi(argv[1]));
  const auto qps = static_cast<uint32_t>(std::atoi(argv[2]));
  const auto rounds = static_cast<uint32_t>(std::atoi(argv[3]));
  const auto bytes = static_cast<uint32_t>(std::atoi(argv[4]));
  if (qps == 0 || rounds == 0 || bytes == 0) {
    std::printf("QPS, ROUNDS and BYTES must be positive\n");
    return 2;
  }
  const int tcp = server ? tcp_server(port) : tcp_client(argv[5], port);
  if (tcp < 0) return 1;
  int rc = 0;
  std::chrono::steady_clock::time_point released;
  {
    ManyQps run(ctx, server ? 0 : 1, qps, rounds, bytes, std::min(cqs, qps));
    rc = run.run(tcp);
    released = std::chrono::steady_clock::now();
  }
  // Where the time went when the harness's deadline ends a run: the teardown is a control call
  // per object, each a round trip to the daemon's workers.
  std::printf("many_qps: released %u QPs in %.3f s\n", qps,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - released).count());
  close(tcp);
  return rc;
}

}  // namespace xroce::probe
