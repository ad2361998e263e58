// verbs_probe's transport modes: the verbs beyond RC send/write/read/atomics, each run between
// two QPs of one device (the daemon loops a frame to its own GID back inside itself, through
// the same requester and responder as a frame from the wire) and checked on the data:
//
//   verbs_probe DEV transport  memory windows (type 1 and 2: bind, remote write with the
//                              window's R_Key, beyond the window, LOCAL_INV, SEND_WITH_INV),
//                              ATOMIC_WRITE, UC SEND_WITH_IMM and WRITE, rereg_mr (translation),
//                              ibv_reg_mr_iova, ODP registration and ibv_advise_mr, XRC (domain,
//                              XRC SRQ, INI and TGT QPs, ibv_open_qp), completion timestamps,
//                              extended-CQ poll batches (start/next/end_poll)
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "verbs_probe.h"

namespace xroce::probe {

namespace {

constexpr std::size_t kBytes = 64 * 1024;
constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

void fill(uint8_t* p, std::size_t n, uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>(seed + i * 13);
}

bool holds(const uint8_t* p, std::size_t n, uint8_t seed) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 13)) return false;
  return true;
}

// One completion from `cq` within 10 s; its status in *wc. False on timeout or poll error.
bool poll_one(ibv_cq* cq, ibv_wc* wc) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n < 0) return false;
    if (n == 1) return true;
  }
  return false;
}

// Two QPs of `type` on one CQ each side, connected to each other; remade after a test leaves
// them in the error state. Side 0 may use the caller's CQ (`cq0`, kept by the caller).
struct Link {
  ibv_cq* cq[2] = {nullptr, nullptr};
  ibv_qp* qp[2] = {nullptr, nullptr};
  bool own_cq0 = true;

  Link(ibv_context* ctx, ibv_pd* pd, ibv_qp_type type, const ibv_gid& gid, ibv_cq* cq0 = nullptr)
      : own_cq0(cq0 == nullptr) {
    cq[0] = own_cq0 ? ibv_create_cq(ctx, 64, nullptr, nullptr, 0) : cq0;
    cq[1] = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    if (cq[0] == nullptr || cq[1] == nullptr) return;
    for (int i = 0; i < 2; ++i) {
      ibv_qp_init_attr init{};
      init.send_cq = cq[i];
      init.recv_cq = cq[i];
      init.qp_type = type;
      init.cap.max_send_wr = 32;
      init.cap.max_recv_wr = 32;
      init.cap.max_send_sge = 1;
      init.cap.max_recv_sge = 1;
      qp[i] = ibv_create_qp(pd, &init);
    }
    if (qp[0] == nullptr || qp[1] == nullptr) return;
    if (!connect_qp(qp[0], qp[1]->qp_num, gid) || !connect_qp(qp[1], qp[0]->qp_num, gid)) {
      qp[0] = qp[1] = nullptr;  // leaked on purpose: the process ends after the failed check
    }
  }
  ~Link() {
    for (auto* q : qp)
      if (q != nullptr) ibv_destroy_qp(q);
    if (own_cq0 && cq[0] != nullptr) ibv_destroy_cq(cq[0]);
    if (cq[1] != nullptr) ibv_destroy_cq(cq[1]);
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  bool ok() const { return qp[0] != nullptr && qp[1] != nullptr; }

  // Posts `wr` signaled on side `side` and returns its completion's status (or -1).
  int run(int side, ibv_send_wr& wr) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp[side], &wr, &bad) != 0) return -1;
    ibv_wc wc{};
    return poll_one(cq[side], &wc) ? static_cast<int>(wc.status) : -1;
  }
  bool post_recv(int side, ibv_mr* mr, void* at, uint32_t length) {
    ibv_sge sge{addr_of(at), length, mr->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp[side], &wr, &bad) == 0;
  }
};

ibv_send_wr write_wr(ibv_sge* sge, uint64_t remote_addr, uint32_t rkey) {
  ibv_send_wr wr{};
  wr.sg_list = sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

struct Buffers {
  std::vector<uint8_t> local = std::vector<uint8_t>(kBytes);
  std::vector<uint8_t> target = std::vector<uint8_t>(kBytes);
  ibv_mr* local_mr = nullptr;
  ibv_mr* target_mr = nullptr;
};

// Type 2 window bound by side 1 (the target) over part of its region; side 0 writes through it.
void windows(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  constexpr std::size_t kWindowOffset = 4096;
  constexpr uint32_t kWindowBytes = 8192;
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  check(mw != nullptr, "alloc_mw_type2");
  if (mw == nullptr) return;
  {
    Link link(ctx, pd, IBV_QPT_RC, gid);
    check(link.ok(), "mw_link");
    if (!link.ok()) return;
    ibv_send_wr bind{};
    bind.opcode = IBV_WR_BIND_MW;
    bind.bind_mw.mw = mw;
    bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    bind.bind_mw.bind_info.mr = b.target_mr;
    bind.bind_mw.bind_info.addr = addr_of(b.target.data() + kWindowOffset);
    bind.bind_mw.bind_info.length = kWindowBytes;
    bind.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    check(link.run(1, bind) == IBV_WC_SUCCESS, "bind_mw_type2");
    mw->rkey = bind.bind_mw.rkey;
    const uint32_t window_rkey = bind.bind_mw.rkey;

    fill(b.local.data(), kWindowBytes, 21);
    std::memset(b.target.data(), 0, kBytes);
    ibv_sge sge{addr_of(b.local.data()), kWindowBytes, b.local_mr->lkey};
    ibv_send_wr wr = write_wr(&sge, bind.bind_mw.bind_info.addr, window_rkey);
    check(link.run(0, wr) == IBV_WC_SUCCESS &&
              holds(b.target.data() + kWindowOffset, kWindowBytes, 21),
          "write_through_window_data");

    // LOCAL_INV on the window: the next access with its R_Key is a remote access error.
    ibv_send_wr inv{};
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.invalidate_rkey = window_rkey;
    check(link.run(1, inv) == IBV_WC_SUCCESS, "local_inv");
    std::memset(b.target.data(), 0, kBytes);
    wr = write_wr(&sge, bind.bind_mw.bind_info.addr, window_rkey);
    check(link.run(0, wr) == IBV_WC_REM_ACCESS_ERR, "write_after_local_inv_rem_access_err");
    check(b.target[kWindowOffset] == 0, "nothing_written_after_local_inv");
  }
  {
    // Bound again after LOCAL_INV freed it.
    Link link(ctx, pd, IBV_QPT_RC, gid);
    check(link.ok(), "mw_link_2");
    if (!link.ok()) return;
    ibv_send_wr bind{};
    bind.opcode = IBV_WR_BIND_MW;
    bind.bind_mw.mw = mw;
    bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    bind.bind_mw.bind_info.mr = b.target_mr;
    bind.bind_mw.bind_info.addr = addr_of(b.target.data() + kWindowOffset);
    bind.bind_mw.bind_info.length = kWindowBytes;
    bind.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    check(link.run(1, bind) == IBV_WC_SUCCESS, "rebind_mw_type2");
    mw->rkey = bind.bind_mw.rkey;
    const uint32_t window_rkey = bind.bind_mw.rkey;

    // Beyond the window's end: a remote access error, nothing written (C9-88 / o10-37.2.x).
    ibv_sge beyond{addr_of(b.local.data()), 64, b.local_mr->lkey};
    std::memset(b.target.data(), 0, kBytes);
    ibv_send_wr wr =
        write_wr(&beyond, bind.bind_mw.bind_info.addr + kWindowBytes - 32, window_rkey);
    check(link.run(0, wr) == IBV_WC_REM_ACCESS_ERR, "write_beyond_window_rem_access_err");
  }
  check(ibv_dealloc_mw(mw) == 0, "dealloc_mw_type2");
  // A fresh window (the last one is still bound to the QP the failed write broke), bound and
  // then invalidated by the peer's SEND_WITH_INV.
  mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  check(mw != nullptr, "alloc_mw_type2_again");
  if (mw == nullptr) return;
  {
    Link link(ctx, pd, IBV_QPT_RC, gid);
    check(link.ok(), "mw_link_3");
    if (!link.ok()) return;
    ibv_send_wr bind{};
    bind.opcode = IBV_WR_BIND_MW;
    bind.bind_mw.mw = mw;
    bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    bind.bind_mw.bind_info.mr = b.target_mr;
    bind.bind_mw.bind_info.addr = addr_of(b.target.data());
    bind.bind_mw.bind_info.length = kWindowBytes;
    bind.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    const int bound = link.run(1, bind);
    const uint32_t window_rkey = bind.bind_mw.rkey;
    check(bound == IBV_WC_SUCCESS, "bind_mw_on_new_qp");
    mw->rkey = window_rkey;
    check(link.post_recv(1, b.target_mr, b.target.data() + 32768, 4096), "post_recv");
    ibv_sge sge{addr_of(b.local.data()), 16, b.local_mr->lkey};
    ibv_send_wr send{};
    send.sg_list = &sge;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND_WITH_INV;
    send.invalidate_rkey = window_rkey;
    check(link.run(0, send) == IBV_WC_SUCCESS, "send_with_inv");
    ibv_wc wc{};
    check(poll_one(link.cq[1], &wc) && wc.status == IBV_WC_SUCCESS &&
              (wc.wc_flags & IBV_WC_WITH_INV) != 0 && wc.invalidated_rkey == window_rkey,
          "recv_with_inv_names_the_key");
    ibv_send_wr wr = write_wr(&sge, addr_of(b.target.data()), window_rkey);
    check(link.run(0, wr) == IBV_WC_REM_ACCESS_ERR, "write_after_send_with_inv_rem_access_err");
  }
  check(ibv_dealloc_mw(mw) == 0, "dealloc_mw_type2");

  // Type 1: ibv_bind_mw on the target's QP; any QP of the PD may then use the R_Key.
  ibv_mw* mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  check(mw1 != nullptr, "alloc_mw_type1");
  if (mw1 == nullptr) return;
  Link link(ctx, pd, IBV_QPT_RC, gid);
  check(link.ok(), "mw1_link");
  if (!link.ok()) return;
  ibv_mw_bind bind1{};
  bind1.send_flags = IBV_SEND_SIGNALED;
  bind1.bind_info.mr = b.target_mr;
  bind1.bind_info.addr = addr_of(b.target.data() + 16384);
  bind1.bind_info.length = 4096;
  bind1.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ibv_wc wc{};
  check(ibv_bind_mw(link.qp[1], mw1, &bind1) == 0 && poll_one(link.cq[1], &wc) &&
            wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW,
        "bind_mw_type1");
  fill(b.local.data(), 4096, 5);
  std::memset(b.target.data(), 0, kBytes);
  ibv_sge sge{addr_of(b.local.data()), 4096, b.local_mr->lkey};
  ibv_send_wr wr = write_wr(&sge, bind1.bind_info.addr, mw1->rkey);
  check(link.run(0, wr) == IBV_WC_SUCCESS && holds(b.target.data() + 16384, 4096, 5),
        "write_through_type1_window_data");
  check(ibv_dealloc_mw(mw1) == 0, "dealloc_mw_type1");
}

void atomic_write(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  Link link(ctx, pd, IBV_QPT_RC, gid);
  check(link.ok(), "atomic_write_link");
  if (!link.ok()) return;
  const uint64_t value = 0x0123456789abcdefULL;
  std::memcpy(b.local.data(), &value, 8);
  std::memset(b.target.data(), 0xEE, 64);
  ibv_sge sge{addr_of(b.local.data()), 8, b.local_mr->lkey};
  ibv_send_wr wr = write_wr(&sge, addr_of(b.target.data() + 8), b.target_mr->rkey);
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  uint64_t got = 0;
  const bool done = link.run(0, wr) == IBV_WC_SUCCESS;
  std::memcpy(&got, b.target.data() + 8, 8);
  check(done && got == value && b.target[7] == 0xEE && b.target[16] == 0xEE, "atomic_write_data");
}

void unreliable_connected(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  Link link(ctx, pd, IBV_QPT_UC, gid);
  check(link.ok(), "uc_link");
  if (!link.ok()) return;
  std::memset(b.target.data(), 0, kBytes);
  check(link.post_recv(1, b.target_mr, b.target.data(), 8192), "uc_post_recv");
  fill(b.local.data(), 5000, 9);  // several packets at MTU 1024
  ibv_sge sge{addr_of(b.local.data()), 5000, b.local_mr->lkey};
  ibv_send_wr send{};
  send.sg_list = &sge;
  send.num_sge = 1;
  send.opcode = IBV_WR_SEND_WITH_IMM;
  send.imm_data = htobe32(0xC0FFEE);
  check(link.run(0, send) == IBV_WC_SUCCESS, "uc_send_with_imm");
  ibv_wc wc{};
  check(poll_one(link.cq[1], &wc) && wc.status == IBV_WC_SUCCESS && wc.byte_len == 5000 &&
            (wc.wc_flags & IBV_WC_WITH_IMM) != 0 && be32toh(wc.imm_data) == 0xC0FFEE &&
            holds(b.target.data(), 5000, 9),
        "uc_recv_data_and_imm");
  fill(b.local.data(), 10000, 17);
  sge.length = 10000;
  ibv_send_wr wr = write_wr(&sge, addr_of(b.target.data() + 20000), b.target_mr->rkey);
  const bool written = link.run(0, wr) == IBV_WC_SUCCESS;
  // UC has no ACK: the requester completes at sending; the data arrives on its own time.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!holds(b.target.data() + 20000, 10000, 17) && std::chrono::steady_clock::now() < deadline)
    ;
  check(written && holds(b.target.data() + 20000, 10000, 17), "uc_write_data");
}

// ibv_rereg_mr moves the region to another buffer: a write with the new R_Key lands there.
void rereg_and_iova(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  Link link(ctx, pd, IBV_QPT_RC, gid);
  check(link.ok(), "rereg_link");
  if (!link.ok()) return;
  std::vector<uint8_t> first(8192);
  std::vector<uint8_t> second(8192);
  ibv_mr* mr = ibv_reg_mr(pd, first.data(), first.size(), kAllAccess);
  check(mr != nullptr, "rereg_reg_mr");
  if (mr == nullptr) return;
  check(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second.data(), second.size(),
                     0) == 0,
        "rereg_mr_translation");
  fill(b.local.data(), 4096, 33);
  ibv_sge sge{addr_of(b.local.data()), 4096, b.local_mr->lkey};
  ibv_send_wr wr = write_wr(&sge, addr_of(second.data() + 100), mr->rkey);
  check(
      link.run(0, wr) == IBV_WC_SUCCESS && holds(second.data() + 100, 4096, 33) && first[100] == 0,
      "write_after_rereg_lands_in_new_buffer");
  check(ibv_dereg_mr(mr) == 0, "rereg_dereg");

  // An iova other than the address: the remote side addresses the region by its iova.
  constexpr uint64_t kIova = 0x10000000;
  std::vector<uint8_t> region(8192);
  ibv_mr* iova_mr = ibv_reg_mr_iova(pd, region.data(), region.size(), kIova, kAllAccess);
  check(iova_mr != nullptr, "reg_mr_iova");
  if (iova_mr == nullptr) return;
  wr = write_wr(&sge, kIova + 200, iova_mr->rkey);
  check(link.run(0, wr) == IBV_WC_SUCCESS && holds(region.data() + 200, 4096, 33),
        "write_by_iova_data");
  check(ibv_dereg_mr(iova_mr) == 0, "iova_dereg");
}

// ODP: a fresh mapping registered without being touched, then written remotely.
void on_demand(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  Link link(ctx, pd, IBV_QPT_RC, gid);
  check(link.ok(), "odp_link");
  if (!link.ok()) return;
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(p != MAP_FAILED, "odp_mmap");
  if (p == MAP_FAILED) return;
  auto* region = static_cast<uint8_t*>(p);
  ibv_mr* mr = ibv_reg_mr(pd, region, kBytes, kAllAccess | IBV_ACCESS_ON_DEMAND);
  check(mr != nullptr, "odp_reg_mr");
  if (mr != nullptr) {
    ibv_sge range{addr_of(region), 4096, mr->lkey};
    check(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &range,
                        1) == 0,
          "advise_mr");
    fill(b.local.data(), 8192, 41);
    ibv_sge sge{addr_of(b.local.data()), 8192, b.local_mr->lkey};
    ibv_send_wr wr = write_wr(&sge, addr_of(region + 12288), mr->rkey);
    check(link.run(0, wr) == IBV_WC_SUCCESS && holds(region + 12288, 8192, 41), "odp_write_data");
    check(ibv_dereg_mr(mr) == 0, "odp_dereg");
  }
  munmap(p, kBytes);
}

// XRC: a domain, an XRC SRQ, a TGT QP (XRC_RECV) and an INI QP (XRC_SEND) connected to it;
// a SEND names the SRQ and lands in its receive.
void xrc(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  ibv_xrcd_init_attr xattr{};
  xattr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xattr.fd = -1;
  xattr.oflags = O_CREAT;
  ibv_xrcd* xrcd = ibv_open_xrcd(ctx, &xattr);
  check(xrcd != nullptr, "open_xrcd");
  if (xrcd == nullptr) return;
  ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_srq_init_attr_ex sattr{};
  sattr.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  sattr.srq_type = IBV_SRQT_XRC;
  sattr.pd = pd;
  sattr.xrcd = xrcd;
  sattr.cq = cq;
  sattr.attr.max_wr = 16;
  sattr.attr.max_sge = 1;
  ibv_srq* srq = cq != nullptr ? ibv_create_srq_ex(ctx, &sattr) : nullptr;
  uint32_t srqn = 0;
  check(srq != nullptr && ibv_get_srq_num(srq, &srqn) == 0, "create_xrc_srq");
  ibv_qp_init_attr_ex tgt_attr{};
  tgt_attr.qp_type = IBV_QPT_XRC_RECV;
  tgt_attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  tgt_attr.xrcd = xrcd;
  ibv_qp* tgt = ibv_create_qp_ex(ctx, &tgt_attr);
  ibv_qp_init_attr_ex ini_attr{};
  ini_attr.qp_type = IBV_QPT_XRC_SEND;
  ini_attr.comp_mask = IBV_QP_INIT_ATTR_PD;
  ini_attr.pd = pd;
  ini_attr.send_cq = cq;
  ini_attr.cap.max_send_wr = 16;
  ini_attr.cap.max_send_sge = 1;
  ibv_qp* ini = cq != nullptr ? ibv_create_qp_ex(ctx, &ini_attr) : nullptr;
  check(tgt != nullptr && ini != nullptr, "create_xrc_qps");
  if (srq != nullptr && tgt != nullptr && ini != nullptr) {
    check(connect_qp(tgt, ini->qp_num, gid) && connect_qp(ini, tgt->qp_num, gid), "xrc_connect");
    ibv_qp_open_attr oattr{};
    oattr.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    oattr.qp_num = tgt->qp_num;
    oattr.xrcd = xrcd;
    oattr.qp_type = IBV_QPT_XRC_RECV;
    ibv_qp* opened = ibv_open_qp(ctx, &oattr);
    check(opened != nullptr && opened->qp_num == tgt->qp_num, "open_qp");
    if (opened != nullptr) check(ibv_destroy_qp(opened) == 0, "destroy_opened_qp");

    std::memset(b.target.data(), 0, kBytes);
    ibv_sge rsge{addr_of(b.target.data()), 4096, b.target_mr->lkey};
    ibv_recv_wr rwr{};
    rwr.wr_id = 77;
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    check(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "xrc_post_srq_recv");
    fill(b.local.data(), 3000, 55);
    ibv_sge sge{addr_of(b.local.data()), 3000, b.local_mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = srqn;
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(ini, &wr, &bad) == 0, "xrc_post_send");
    // Both completions go to the one CQ: the send's and the SRQ's receive.
    bool sent = false;
    bool received = false;
    for (int i = 0; i < 2; ++i) {
      ibv_wc wc{};
      if (!poll_one(cq, &wc) || wc.status != IBV_WC_SUCCESS) break;
      if (wc.wr_id == 1) sent = true;
      if (wc.wr_id == 77 && wc.byte_len == 3000 && wc.qp_num == tgt->qp_num) received = true;
    }
    check(sent && received && holds(b.target.data(), 3000, 55), "xrc_send_data");
  }
  if (ini != nullptr) ibv_destroy_qp(ini);
  if (tgt != nullptr) ibv_destroy_qp(tgt);
  if (srq != nullptr) ibv_destroy_srq(srq);
  if (cq != nullptr) ibv_destroy_cq(cq);
  check(ibv_close_xrcd(xrcd) == 0, "close_xrcd");
}

// One signaled WRITE on `qp` (whose send CQ is `cq`): its completion timestamp lies between the
// device clock (ibv_query_rt_values_ex, hca_core_clock 1 GHz: nanoseconds) read before posting
// and after polling.
void timestamp_write(ibv_context* ctx, ibv_qp* qp, ibv_cq_ex* cq, Buffers& b) {
  ibv_device_attr_ex dattr{};
  ibv_values_ex before{};
  ibv_values_ex after{};
  before.comp_mask = after.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  check(ibv_query_device_ex(ctx, nullptr, &dattr) == 0 && dattr.hca_core_clock != 0,
        "hca_core_clock");
  if (ibv_query_rt_values_ex(ctx, &before) == 0) {
    ibv_sge sge{addr_of(b.local.data()), 256, b.local_mr->lkey};
    ibv_send_wr wr = write_wr(&sge, addr_of(b.target.data()), b.target_mr->rkey);
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(qp, &wr, &bad) == 0, "timestamp_post");
    ibv_poll_cq_attr pattr{};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int rc = ENOENT;
    while ((rc = ibv_start_poll(cq, &pattr)) == ENOENT &&
           std::chrono::steady_clock::now() < deadline)
      ;
    uint64_t ts = 0;
    bool success = false;
    if (rc == 0) {
      success = cq->status == IBV_WC_SUCCESS;
      ts = ibv_wc_read_completion_ts(cq);
      ibv_end_poll(cq);
    }
    const bool read_after = ibv_query_rt_values_ex(ctx, &after) == 0;
    const auto to_ns = [](const timespec& t) {
      return static_cast<uint64_t>(t.tv_sec) * 1000000000ULL + static_cast<uint64_t>(t.tv_nsec);
    };
    const uint64_t lo = to_ns(before.raw_clock);
    const uint64_t hi = to_ns(after.raw_clock);
    std::printf("timestamp %" PRIu64 " in [%" PRIu64 ", %" PRIu64 "]\n", ts, lo, hi);
    check(success && read_after && lo <= ts && ts <= hi, "completion_timestamp_in_range");
  }
}

// Completion timestamps on an extended CQ.
void timestamps(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  ibv_cq_init_attr_ex cattr{};
  cattr.cqe = 16;
  cattr.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &cattr);
  check(cq != nullptr, "create_cq_ex_timestamp");
  if (cq == nullptr) return;
  {
    Link link(ctx, pd, IBV_QPT_RC, gid, ibv_cq_ex_to_cq(cq));
    check(link.ok(), "timestamp_link");
    if (link.ok()) timestamp_write(ctx, link.qp[0], cq, b);
  }
  ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
}

// ibv_end_poll consumes what the batch saw, nothing more: a completion the daemon writes after
// an ibv_next_poll that found none, before ibv_end_poll, is the next batch's (rc_pingpong -t
// polls this way, and hung when end_poll took such an entry unseen). Each round holds the
// first WRITE's completion, arms the CQ and posts a SEND that the other QP has no receive for:
// the responder answers RNR NAK (rnr_retry 7 retries for ever), so next_poll finds none in every
// round, however the host schedules the daemon (a second WRITE raced the daemon, and on a loaded
// host lost every round). Only then does the test post the receive, wait for the channel's event
// (the SEND's completion is in the ring) and end the batch; the next batch must return the SEND.
void ex_poll_batches(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid, Buffers& b) {
  ibv_comp_channel* channel = ibv_create_comp_channel(ctx);
  check(channel != nullptr, "ex_poll_channel");
  if (channel == nullptr) return;
  ibv_cq_init_attr_ex cattr{};
  cattr.cqe = 16;
  cattr.channel = channel;
  cattr.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx, &cattr);
  check(cq != nullptr, "ex_poll_cq");
  const auto until = [](int seconds) {
    return std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  };
  // start_poll until an entry (true) or the deadline.
  const auto start = [&](const auto deadline) {
    ibv_poll_cq_attr pattr{};
    int rc = ENOENT;
    while ((rc = ibv_start_poll(cq, &pattr)) == ENOENT &&
           std::chrono::steady_clock::now() < deadline)
      ;
    return rc == 0;
  };
  const auto event = [&] {
    pollfd p{channel->fd, POLLIN, 0};
    if (poll(&p, 1, 10'000) != 1) return false;
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) != 0) return false;
    ibv_ack_cq_events(ev_cq, 1);
    return true;
  };
  if (cq != nullptr) {
    Link link(ctx, pd, IBV_QPT_RC, gid, ibv_cq_ex_to_cq(cq));
    check(link.ok(), "ex_poll_link");
    int windows = 0;
    bool every_second_seen = link.ok();
    constexpr int kRounds = 8;
    for (int round = 0; round < kRounds && every_second_seen; ++round) {
      ibv_sge sge{addr_of(b.local.data()), 64, b.local_mr->lkey};
      ibv_send_wr wr = write_wr(&sge, addr_of(b.target.data()), b.target_mr->rkey);
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr_id = 1000 + 2 * round;
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(link.qp[0], &wr, &bad) != 0 || !start(until(10)) || cq->wr_id != wr.wr_id) {
        every_second_seen = false;
        break;
      }
      ibv_req_notify_cq(ibv_cq_ex_to_cq(cq), 0);
      wr.wr_id += 1;
      wr.opcode = IBV_WR_SEND;
      const bool posted = ibv_post_send(link.qp[0], &wr, &bad) == 0;
      const int next = ibv_next_poll(cq);
      if (next == ENOENT) ++windows;
      const bool received = posted && link.post_recv(1, b.target_mr, b.target.data(), 64);
      const bool evented = received && event();
      ibv_end_poll(cq);
      bool seen = false;
      if (next == ENOENT && evented && start(until(2))) {
        seen = cq->wr_id == wr.wr_id && cq->status == IBV_WC_SUCCESS;
        ibv_end_poll(cq);
      }
      ibv_wc rwc{};
      const bool delivered = received && poll_one(link.cq[1], &rwc) && rwc.status == IBV_WC_SUCCESS;
      every_second_seen = evented && seen && delivered;
    }
    std::printf("ex_poll: %d of the rounds ended a batch after next_poll found none\n", windows);
    check(every_second_seen && windows == kRounds, "ex_poll_end_keeps_what_it_did_not_see");
  }
  if (cq != nullptr) ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
  ibv_destroy_comp_channel(channel);
}

}  // namespace

int transport(ibv_context* ctx) {
  ibv_gid gid{};
  ibv_pd* pd = ibv_alloc_pd(ctx);
  Buffers b;
  if (pd != nullptr) {
    b.local_mr = ibv_reg_mr(pd, b.local.data(), kBytes, kAllAccess);
    b.target_mr = ibv_reg_mr(pd, b.target.data(), kBytes, kAllAccess | IBV_ACCESS_MW_BIND);
  }
  const bool ready = pd != nullptr && b.local_mr != nullptr && b.target_mr != nullptr &&
                     ibv_query_gid(ctx, 1, 0, &gid) == 0;
  check(ready, "setup");
  if (!ready) return 1;
  windows(ctx, pd, gid, b);
  atomic_write(ctx, pd, gid, b);
  unreliable_connected(ctx, pd, gid, b);
  rereg_and_iova(ctx, pd, gid, b);
  on_demand(ctx, pd, gid, b);
  xrc(ctx, pd, gid, b);
  timestamps(ctx, pd, gid, b);
  ex_poll_batches(ctx, pd, gid, b);
  check(ibv_dereg_mr(b.local_mr) == 0 && ibv_dereg_mr(b.target_mr) == 0, "dereg_mr");
  check(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
  return 0;
}

}  // namespace xroce::probe
