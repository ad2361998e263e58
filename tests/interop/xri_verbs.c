// xri_verbs: a small RC verbs program for the interop suite's provoked-error cases, run on
// either side (xroce on the host through `xroce exec`, rxe in the VM: built here against
// Debian 12's libibverbs, whose soname the VM image carries too).
//
//   server: xri_verbs --server [--port P] [--gid-index G] [--size N] [--recvs R]
//                     [--rnr-timer T] [--wait-file F --late-recvs L] [--mtu M]
//   client: xri_verbs --client HOST --test TEST [--port P] [--gid-index G]
//                     [--size N] [--sends S] [--rnr-retry R] [--mtu M]
// (the server takes --test too: the memory-window, ATOMIC WRITE and XRC tests set up its side)
//
// Both sides exchange QPN, PSN, GID, rkey and buffer address over TCP (one text line each way),
// bring an RC QP to RTS; the server then says "rts RKEY ADDR LEN AUX": what the client is to
// reach (its region, or a window it bound) and then:
//   write: the client fills its buffer with a pattern, RDMA WRITEs it to the server, reads it
//          back with RDMA READ into a second buffer and compares; prints both checksums.
//   rkey:  the client posts an RDMA WRITE with a wrong rkey, then a SEND; IBA o9-? (C9-? the
//          responder's remote access error NAK) gives IBV_WC_REM_ACCESS_ERR, then a flush.
//   rnr:   the client posts S SENDs; the server has posted R receives (and, once F exists,
//          posts L more); with rnr_retry small the first unmatched SEND ends in
//          IBV_WC_RNR_RETRY_EXC_ERR, with rnr_retry 7 it waits for the late receives.
//   mw:    as write, through a type 2 window the server bound (IBV_WR_BIND_MW) over the middle
//          half of its region; the server prints the window's checksum.
//   mw_invalidated, mw_unbound: the client WRITEs through a window the server bound and then
//          invalidated (IBV_WR_LOCAL_INV), or allocated and never bound, then SENDs: the rkey
//          names no valid window (C10-72/o10-37), so IBV_WC_REM_ACCESS_ERR, then a flush.
//   bind_beyond: the client binds a type 2 window reaching 4 KiB past the end of its own
//          region (C10-75), then SENDs: IBV_WC_MW_BIND_ERR, then a flush; nothing is sent.
//   atomic_write: the client ATOMIC WRITEs (oA19-28) 8 bytes and READs them back.
//   xrc_foreign: XRC QPs instead of RC: the server's XRC TGT QP belongs to one XRC domain and
//          has an XRC SRQ there (AUX: an XRC SRQ of a second domain, RKEY: the first's); the
//          client's XRC INI QP SENDs to the first (success), then to the foreign one (an
//          invalid request: IBV_WC_REM_INV_REQ_ERR), then to the first again (flushed).
// Both sides print "caps atomic_write 0|1" (IB_UVERBS_DEVICE_ATOMIC_WRITE in the device's
// capabilities) and skip a test their device lacks with "unsupported TEST".
// Every completion prints as "wc <side> <wr_id> <status name> <opcode> <byte_len>"; the
// server prints its async events ("async <name>"), its buffer checksum ("server_sum <hex>")
// and both print their final QP state ("qp_state <n>"). The test script judges these lines.
// Exit status: 0 when the program ran its steps (whatever the completions), 1 on a setup or
// timeout failure.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { kMaxWr = 64, kDeadlineMs = 60000 };

struct options {
  const char* host;  // client: the server's address; NULL for the server
  const char* test;
  const char* wait_file;
  int port, gid_index, recvs, late_recvs, sends, rnr_retry, rnr_timer, mtu;
  size_t size;
};

struct peer {
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

// What the server tells the client to reach once its QP is ready ("rts" line).
struct advert {
  uint32_t rkey, len, aux;
  uint64_t addr;
};

// The XRC objects of the server (two domains, an SRQ in each) or the client (none).
struct xrc {
  struct ibv_xrcd* domain[2];
  struct ibv_srq* srq[2];
  uint32_t srqn[2];
};

struct ctx {
  struct ibv_context* dev;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_qp_ex* qpx;  // the extended send interface, for ATOMIC WRITE
  struct ibv_mw* mw;
  struct xrc xrc;
  struct ibv_mr* mr;   // the buffer the peer reads and writes
  struct ibv_mr* mr2;  // client: where READ lands
  char *buf, *buf2;
  const char* side;
  int completions;
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void die(const char* what) {
  fprintf(stderr, "xri_verbs: %s: %s\n", what, strerror(errno));
  exit(1);
}

static uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
  return h;
}

// --- TCP exchange ----------------------------------------------------------------------------

static int tcp_server(int port) {
  int s = socket(AF_INET6, SOCK_STREAM, 0), one = 1, zero = 0;
  if (s < 0) die("socket");
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
  if (bind(s, (struct sockaddr*)&a, sizeof a) || listen(s, 1)) die("bind/listen");
  int c = accept(s, NULL, NULL);
  if (c < 0) die("accept");
  close(s);
  return c;
}

static int tcp_client(const char* host, int port) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
  if (getaddrinfo(host, service, &hints, &res)) die("getaddrinfo");
  int s = socket(res->ai_family, SOCK_STREAM, 0);
  if (s < 0 || connect(s, res->ai_addr, res->ai_addrlen)) die("connect");
  freeaddrinfo(res);
  return s;
}

static void send_line(int s, const char* line) {
  size_t n = strlen(line);
  if (write(s, line, n) != (ssize_t)n) die("write tcp");
}

// Reads one '\n'-terminated line (deadline: the whole test's).
static void read_line(int s, char* out, size_t cap) {
  size_t n = 0;
  while (n + 1 < cap) {
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (poll(&p, 1, kDeadlineMs) <= 0) die("tcp read timeout");
    ssize_t r = read(s, out + n, 1);
    if (r <= 0) die("tcp closed");
    if (out[n] == '\n') break;
    n++;
  }
  out[n] = 0;
}

static void send_peer(int s, const struct peer* p) {
  char line[160], gid[33];
  for (int i = 0; i < 16; i++)
    snprintf(gid + 2 * i, 3, "%02x", p->gid.raw[i]);
  snprintf(line, sizeof line, "%06x %06x %08x %016llx %s\n", p->qpn, p->psn, p->rkey,
           (unsigned long long)p->addr, gid);
  send_line(s, line);
}

static void recv_peer(int s, struct peer* p) {
  char line[160], gid[33];
  unsigned long long addr;
  read_line(s, line, sizeof line);
  if (sscanf(line, "%x %x %x %llx %32s", &p->qpn, &p->psn, &p->rkey, &addr, gid) != 5) {
    fprintf(stderr, "xri_verbs: bad peer line '%s'\n", line);
    exit(1);
  }
  p->addr = addr;
  for (int i = 0; i < 16; i++)
    sscanf(gid + 2 * i, "%2hhx", &p->gid.raw[i]);
}

// --- verbs -------------------------------------------------------------------------------------

static enum ibv_mtu mtu_enum(int mtu) {
  switch (mtu) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return IBV_MTU_1024;
  }
}

static int is_test(const struct options* o, const char* name) {
  return strcmp(o->test, name) == 0;
}

static int xrc_test(const struct options* o) {
  return is_test(o, "xrc_foreign");
}

// Bit 40 of device_cap_flags_ex: IB_UVERBS_DEVICE_ATOMIC_WRITE in the kernel's uverbs ABI
// (rdma-core 44's headers do not name it yet).
static const uint64_t kDeviceAtomicWrite = 1ULL << 40;

static int device_has_atomic_write(struct ibv_context* dev) {
  struct ibv_device_attr_ex attr;
  memset(&attr, 0, sizeof attr);
  if (ibv_query_device_ex(dev, NULL, &attr)) return 0;
  return (attr.device_cap_flags_ex & kDeviceAtomicWrite) != 0;
}

static struct ibv_qp* create_rc_qp(struct ctx* c, const struct options* o) {
  struct ibv_qp_init_attr_ex init = {
      .send_cq = c->cq,
      .recv_cq = c->cq,
      .qp_type = IBV_QPT_RC,
      .cap = {.max_send_wr = kMaxWr, .max_recv_wr = kMaxWr, .max_send_sge = 1, .max_recv_sge = 1},
      .comp_mask = IBV_QP_INIT_ATTR_PD,
      .pd = c->pd};
  if (is_test(o, "atomic_write") && o->host) {
    init.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    init.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_READ;
  }
  struct ibv_qp* qp = ibv_create_qp_ex(c->dev, &init);
  if (qp && (init.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) c->qpx = ibv_qp_to_qp_ex(qp);
  return qp;
}

// The server's XRC side: two XRC domains with an XRC SRQ each, and a TGT QP in the first.
static struct ibv_qp* create_xrc_target(struct ctx* c) {
  for (int i = 0; i < 2; i++) {
    struct ibv_xrcd_init_attr xattr = {
        .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
        .fd = -1,
        .oflags = O_CREAT};
    c->xrc.domain[i] = ibv_open_xrcd(c->dev, &xattr);
    if (!c->xrc.domain[i]) die("ibv_open_xrcd");
    struct ibv_srq_init_attr_ex sattr = {.attr = {.max_wr = kMaxWr, .max_sge = 1},
                                         .comp_mask = IBV_SRQ_INIT_ATTR_TYPE |
                                                      IBV_SRQ_INIT_ATTR_PD |
                                                      IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
                                         .srq_type = IBV_SRQT_XRC,
                                         .pd = c->pd,
                                         .xrcd = c->xrc.domain[i],
                                         .cq = c->cq};
    c->xrc.srq[i] = ibv_create_srq_ex(c->dev, &sattr);
    if (!c->xrc.srq[i] || ibv_get_srq_num(c->xrc.srq[i], &c->xrc.srqn[i])) die("XRC SRQ");
  }
  struct ibv_qp_init_attr_ex init = {
      .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = c->xrc.domain[0]};
  return ibv_create_qp_ex(c->dev, &init);
}

static struct ibv_qp* create_xrc_initiator(struct ctx* c) {
  struct ibv_qp_init_attr_ex init = {.send_cq = c->cq,
                                     .recv_cq = c->cq,
                                     .qp_type = IBV_QPT_XRC_SEND,
                                     .cap = {.max_send_wr = kMaxWr, .max_send_sge = 1},
                                     .comp_mask = IBV_QP_INIT_ATTR_PD,
                                     .pd = c->pd};
  return ibv_create_qp_ex(c->dev, &init);
}

static void open_device(struct ctx* c, const struct options* o) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no RDMA device");
  c->dev = ibv_open_device(list[0]);
  if (!c->dev) die("ibv_open_device");
  printf("device %s\n", ibv_get_device_name(list[0]));
  printf("caps atomic_write %d\n", device_has_atomic_write(c->dev));
  ibv_free_device_list(list);
  int flags = fcntl(c->dev->async_fd, F_GETFL);
  fcntl(c->dev->async_fd, F_SETFL, flags | O_NONBLOCK);
  c->pd = ibv_alloc_pd(c->dev);
  c->cq = ibv_create_cq(c->dev, 2 * kMaxWr, NULL, NULL, 0);
  if (!c->pd || !c->cq) die("pd/cq");
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
               IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
  c->buf = calloc(1, o->size);
  c->buf2 = calloc(1, o->size);
  c->mr = ibv_reg_mr(c->pd, c->buf, o->size, access);
  c->mr2 = ibv_reg_mr(c->pd, c->buf2, o->size, IBV_ACCESS_LOCAL_WRITE);
  if (!c->mr || !c->mr2) die("ibv_reg_mr");
  if (!xrc_test(o))
    c->qp = create_rc_qp(c, o);
  else
    c->qp = o->host ? create_xrc_initiator(c) : create_xrc_target(c);
  if (!c->qp) die("create QP");
}

static void to_rts(struct ctx* c, const struct options* o, const struct peer* me,
                   const struct peer* remote) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND};
  if (ibv_modify_qp(c->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu_enum(o->mtu);
  a.dest_qp_num = remote->qpn;
  a.rq_psn = remote->psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = o->rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = remote->gid;
  a.ah_attr.grh.sgid_index = o->gid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(c->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify RTR");
  if (c->qp->qp_type == IBV_QPT_XRC_RECV) return;  // a TGT QP never sends: RTR is its last state
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;  // 4.096 us * 2^14 = 67 ms: rxe under emulation is slow
  a.retry_cnt = 7;
  a.rnr_retry = o->rnr_retry;
  a.sq_psn = me->psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(c->qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify RTS");
}

static void post_recv(struct ctx* c, uint64_t id, size_t offset, size_t len) {
  struct ibv_sge sge = {
      .addr = (uintptr_t)c->buf2 + offset, .length = (uint32_t)len, .lkey = c->mr2->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(c->qp, &wr, &bad)) die("ibv_post_recv");
}

static void post_send_to_srq(struct ctx* c, uint64_t id, enum ibv_wr_opcode op, char* local,
                             uint32_t lkey, size_t len, uint64_t raddr, uint32_t rkey,
                             uint32_t xrc_srqn) {
  struct ibv_sge sge = {.addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey};
  struct ibv_send_wr wr = {
      .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED};
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  wr.qp_type.xrc.remote_srqn = xrc_srqn;
  struct ibv_send_wr* bad;
  if (ibv_post_send(c->qp, &wr, &bad)) die("ibv_post_send");
}

static void post_send(struct ctx* c, uint64_t id, enum ibv_wr_opcode op, char* local, uint32_t lkey,
                      size_t len, uint64_t raddr, uint32_t rkey) {
  post_send_to_srq(c, id, op, local, lkey, len, raddr, rkey, 0);
}

// Binds type 2 window `mw` over [addr, addr + len) of the region `mr` with `access`, through a
// work request on this side's QP; returns the window's new rkey (valid once the bind completed).
static uint32_t post_bind(struct ctx* c, uint64_t id, struct ibv_mw* mw, struct ibv_mr* mr,
                          uint64_t addr, uint64_t len, unsigned access) {
  struct ibv_send_wr wr = {.wr_id = id, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info.mr = mr;
  wr.bind_mw.bind_info.addr = addr;
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = access;
  struct ibv_send_wr* bad;
  if (ibv_post_send(c->qp, &wr, &bad)) die("ibv_post_send BIND_MW");
  return wr.bind_mw.rkey;
}

static void post_local_inv(struct ctx* c, uint64_t id, uint32_t rkey) {
  struct ibv_send_wr wr = {
      .wr_id = id, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
  wr.invalidate_rkey = rkey;
  struct ibv_send_wr* bad;
  if (ibv_post_send(c->qp, &wr, &bad)) die("ibv_post_send LOCAL_INV");
}

static void drain_async(struct ctx* c) {
  struct ibv_async_event ev;
  while (ibv_get_async_event(c->dev, &ev) == 0) {
    printf("async %s %s\n", c->side, ibv_event_type_str(ev.event_type));
    ibv_ack_async_event(&ev);
  }
}

// Polls until `want` completions arrived in total (or the deadline); prints each one.
static int poll_until(struct ctx* c, int want, long long deadline_ms) {
  while (c->completions < want) {
    struct ibv_wc wc[8];
    int n = ibv_poll_cq(c->cq, 8, wc);
    if (n < 0) die("ibv_poll_cq");
    for (int i = 0; i < n; i++) {
      printf("wc %s %llu %s %d %u\n", c->side, (unsigned long long)wc[i].wr_id,
             ibv_wc_status_str(wc[i].status), wc[i].opcode, wc[i].byte_len);
    }
    c->completions += n;
    if (n == 0) {
      if (now_ms() > deadline_ms) return -1;
      // The rxe side shares one emulated CPU with its kernel: poll gently.
      nanosleep(&(struct timespec){.tv_nsec = 200000}, NULL);
    }
    drain_async(c);
  }
  fflush(stdout);
  return 0;
}

static void print_qp_state(struct ctx* c) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr init;
  if (ibv_query_qp(c->qp, &a, IBV_QP_STATE, &init) == 0)
    printf("qp_state %s %d\n", c->side, a.qp_state);
  fflush(stdout);
}

// --- the two roles -------------------------------------------------------------------------------

static struct peer local_peer(struct ctx* c, const struct options* o) {
  struct peer me = {.qpn = c->qp->qp_num,
                    .psn = (uint32_t)(getpid() * 7919u) & 0xffffff,
                    .rkey = c->mr->rkey,
                    .addr = (uintptr_t)c->buf};
  if (ibv_query_gid(c->dev, 1, o->gid_index, &me.gid)) die("ibv_query_gid");
  return me;
}

// The server's side of a test once its QP is ready: the window it binds (and invalidates) or
// allocates, and what the client is to reach.
static struct advert server_setup(struct ctx* c, const struct options* o) {
  struct advert a = {.rkey = c->mr->rkey, .addr = (uintptr_t)c->buf, .len = (uint32_t)o->size};
  if (is_test(o, "mw") || is_test(o, "mw_invalidated")) {
    c->mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
    if (!c->mw) die("ibv_alloc_mw");
    a.addr = (uintptr_t)c->buf + o->size / 4;
    a.len = (uint32_t)(o->size / 2);
    a.rkey = post_bind(c, 1, c->mw, c->mr, a.addr, a.len,
                       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (poll_until(c, c->completions + 1, now_ms() + kDeadlineMs)) die("no bind completion");
    if (is_test(o, "mw_invalidated")) {
      post_local_inv(c, 2, a.rkey);
      if (poll_until(c, c->completions + 1, now_ms() + kDeadlineMs)) die("no LOCAL_INV completion");
    }
  } else if (is_test(o, "mw_unbound")) {
    c->mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
    if (!c->mw) die("ibv_alloc_mw");
    a.rkey = c->mw->rkey;
  } else if (xrc_test(o)) {
    a.rkey = c->xrc.srqn[0];
    a.aux = c->xrc.srqn[1];
  }
  return a;
}

static void server_post_recvs(struct ctx* c, int first, int count, size_t recv_len) {
  for (int i = first; i < first + count; i++) {
    if (!c->xrc.srq[0]) {
      post_recv(c, 1000 + i, (size_t)i * recv_len, recv_len);
      continue;
    }
    // XRC: a receive in each domain's SRQ, so the foreign SEND fails on its domain, not RNR.
    for (int d = 0; d < 2; d++) {
      struct ibv_sge sge = {.addr = (uintptr_t)c->buf2 + (size_t)i * recv_len,
                            .length = (uint32_t)recv_len,
                            .lkey = c->mr2->lkey};
      struct ibv_recv_wr wr = {.wr_id = 1000 + 500 * d + i, .sg_list = &sge, .num_sge = 1}, *bad;
      if (ibv_post_srq_recv(c->xrc.srq[d], &wr, &bad)) die("ibv_post_srq_recv");
    }
  }
}

static int run_server(const struct options* o) {
  struct ctx c = {.side = "server"};
  open_device(&c, o);
  memset(c.buf, 0x5a, o->size);
  int s = tcp_server(o->port);
  struct peer me = local_peer(&c, o), remote;
  recv_peer(s, &remote);
  send_peer(s, &me);
  to_rts(&c, o, &me, &remote);
  struct advert adv = server_setup(&c, o);
  size_t recv_len = o->size / kMaxWr;
  server_post_recvs(&c, 0, o->recvs, recv_len);
  char line[160];
  snprintf(line, sizeof line, "rts %08x %016llx %08x %08x\n", adv.rkey,
           (unsigned long long)adv.addr, adv.len, adv.aux);
  send_line(s, line);
  printf("server ready recvs %d\n", o->recvs);
  fflush(stdout);
  // Late receives: once the test script created wait_file (it does so when this side's
  // counters show the RNR NAK it expects), post them.
  if (o->wait_file) {
    struct stat st;
    long long deadline = now_ms() + kDeadlineMs;
    while (stat(o->wait_file, &st) != 0) {
      int done = c.completions;
      poll_until(&c, done + 1, now_ms() + 10);
      if (now_ms() > deadline) die("wait-file never appeared");
    }
    server_post_recvs(&c, o->recvs, o->late_recvs, recv_len);
    printf("server posted late recvs %d\n", o->late_recvs);
  }
  // Until the client says it is done: print completions and async events as they come.
  for (;;) {
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (poll(&p, 1, 10) > 0) break;
    poll_until(&c, c.completions + 1, now_ms());
  }
  read_line(s, line, sizeof line);
  poll_until(&c, c.completions + 1, now_ms());
  drain_async(&c);
  printf("server_sum %016llx\n",
         (unsigned long long)fnv1a((const char*)(uintptr_t)adv.addr, adv.len));
  print_qp_state(&c);
  send_line(s, "bye\n");
  close(s);
  return 0;
}

// write, mw: the pattern WRITTEN to what the server advertised, READ back into buf2.
static int client_write_read(struct ctx* c, const struct advert* adv, long long deadline) {
  size_t len = adv->len;
  for (size_t i = 0; i < len; i++)
    c->buf[i] = (char)(i * 131 + (i >> 10) + 7);
  post_send(c, 1, IBV_WR_RDMA_WRITE, c->buf, c->mr->lkey, len, adv->addr, adv->rkey);
  post_send(c, 2, IBV_WR_RDMA_READ, c->buf2, c->mr2->lkey, len, adv->addr, adv->rkey);
  int rc = poll_until(c, 2, deadline);
  printf("client_sum %016llx\n", (unsigned long long)fnv1a(c->buf, len));
  printf("read_back %s\n", memcmp(c->buf, c->buf2, len) == 0 ? "equal" : "DIFFERENT");
  return rc;
}

// atomic_write: 8 bytes ATOMIC WRITTEN at the server's address, then READ back.
static int client_atomic_write(struct ctx* c, const struct advert* adv, long long deadline) {
  if (!device_has_atomic_write(c->dev) || !c->qpx) {
    printf("unsupported atomic_write\n");
    return 0;
  }
  uint64_t value = 0x0123456789abcdefULL ^ (uint64_t)getpid();
  ibv_wr_start(c->qpx);
  c->qpx->wr_id = 1;
  c->qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(c->qpx, adv->rkey, adv->addr, &value);
  c->qpx->wr_id = 2;
  c->qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(c->qpx, adv->rkey, adv->addr);
  ibv_wr_set_sge(c->qpx, c->mr2->lkey, (uintptr_t)c->buf2, sizeof value);
  if (ibv_wr_complete(c->qpx)) die("ibv_wr_complete");
  int rc = poll_until(c, 2, deadline);
  printf("read_back %s\n", memcmp(&value, c->buf2, sizeof value) == 0 ? "equal" : "DIFFERENT");
  return rc;
}

// Runs the client's side of o->test; returns 0, or -1 when completions missed the deadline.
static int client_test(struct ctx* c, const struct options* o, const struct advert* adv) {
  long long deadline = now_ms() + kDeadlineMs;
  if (is_test(o, "write") || is_test(o, "mw")) return client_write_read(c, adv, deadline);
  if (is_test(o, "atomic_write")) return client_atomic_write(c, adv, deadline);
  if (is_test(o, "rkey") || is_test(o, "mw_invalidated") || is_test(o, "mw_unbound")) {
    uint32_t rkey = is_test(o, "rkey") ? adv->rkey ^ 0x5a5a00 : adv->rkey;
    memset(c->buf, 0x33, o->size);
    post_send(c, 1, IBV_WR_RDMA_WRITE, c->buf, c->mr->lkey, 64, adv->addr, rkey);
    post_send(c, 2, IBV_WR_SEND, c->buf, c->mr->lkey, 8, 0, 0);
    return poll_until(c, 2, deadline);
  }
  if (is_test(o, "bind_beyond")) {
    c->mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
    if (!c->mw) die("ibv_alloc_mw");
    post_bind(c, 1, c->mw, c->mr, (uintptr_t)c->buf, o->size + 4096, IBV_ACCESS_REMOTE_WRITE);
    post_send(c, 2, IBV_WR_SEND, c->buf, c->mr->lkey, 8, 0, 0);
    return poll_until(c, 2, deadline);
  }
  if (xrc_test(o)) {
    const uint32_t srqn[] = {adv->rkey, adv->aux, adv->rkey};
    for (int i = 0; i < 3; i++)
      post_send_to_srq(c, 1 + i, IBV_WR_SEND, c->buf, c->mr->lkey, 8, 0, 0, srqn[i]);
    return poll_until(c, 3, deadline);
  }
  if (is_test(o, "rnr")) {
    for (int i = 0; i < o->sends; i++) {
      snprintf(c->buf + 64 * i, 64, "message %d", i);
      post_send(c, 1 + i, IBV_WR_SEND, c->buf + 64 * i, c->mr->lkey, 64, 0, 0);
    }
    return poll_until(c, o->sends, deadline);
  }
  fprintf(stderr, "xri_verbs: unknown test %s\n", o->test);
  exit(2);
}

static int run_client(const struct options* o) {
  struct ctx c = {.side = "client"};
  open_device(&c, o);
  int s = tcp_client(o->host, o->port);
  struct peer me = local_peer(&c, o), remote;
  send_peer(s, &me);
  recv_peer(s, &remote);
  to_rts(&c, o, &me, &remote);
  char line[160];
  read_line(s, line, sizeof line);  // "rts ...": the server's receives are posted
  struct advert adv;
  unsigned long long addr;
  if (sscanf(line, "rts %x %llx %x %x", &adv.rkey, &addr, &adv.len, &adv.aux) != 4) {
    fprintf(stderr, "xri_verbs: bad rts line '%s'\n", line);
    return 1;
  }
  adv.addr = addr;
  int rc = client_test(&c, o, &adv);
  drain_async(&c);
  print_qp_state(&c);
  send_line(s, "done\n");
  read_line(s, line, sizeof line);
  close(s);
  if (rc) fprintf(stderr, "xri_verbs: %d completions by the deadline\n", c.completions);
  return rc ? 1 : 0;
}

int main(int argc, char** argv) {
  struct options o = {.port = 18600,
                      .gid_index = 1,
                      .recvs = 1,
                      .sends = 3,
                      .rnr_retry = 7,
                      .rnr_timer = 1,
                      .mtu = 1024,
                      .size = 65536,
                      .test = "write"};
  int server = 0;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--server") == 0) {
      server = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "xri_verbs: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (strcmp(a, "--client") == 0)
      o.host = v;
    else if (strcmp(a, "--test") == 0)
      o.test = v;
    else if (strcmp(a, "--wait-file") == 0)
      o.wait_file = v;
    else if (strcmp(a, "--port") == 0)
      o.port = atoi(v);
    else if (strcmp(a, "--gid-index") == 0)
      o.gid_index = atoi(v);
    else if (strcmp(a, "--recvs") == 0)
      o.recvs = atoi(v);
    else if (strcmp(a, "--late-recvs") == 0)
      o.late_recvs = atoi(v);
    else if (strcmp(a, "--sends") == 0)
      o.sends = atoi(v);
    else if (strcmp(a, "--rnr-retry") == 0)
      o.rnr_retry = atoi(v);
    else if (strcmp(a, "--rnr-timer") == 0)
      o.rnr_timer = atoi(v);
    else if (strcmp(a, "--mtu") == 0)
      o.mtu = atoi(v);
    else if (strcmp(a, "--size") == 0)
      o.size = strtoul(v, NULL, 0);
    else {
      fprintf(stderr, "xri_verbs: unknown option %s\n", a);
      return 2;
    }
  }
  if (o.sends > kMaxWr || o.recvs + o.late_recvs > kMaxWr || o.size < 64 * kMaxWr) {
    fprintf(stderr, "xri_verbs: at most %d sends/receives, size at least %d\n", kMaxWr,
            64 * kMaxWr);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!server && !o.host) {
    fprintf(stderr,
            "usage: xri_verbs --server | --client HOST --test write|rkey|rnr|mw|"
            "mw_invalidated|mw_unbound|bind_beyond|atomic_write|xrc_foreign ...\n");
    return 2;
  }
  return server ? run_server(&o) : run_client(&o);
}
