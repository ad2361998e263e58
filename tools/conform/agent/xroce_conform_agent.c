// xroce-conform-agent: the target side of `xroce conform`. An ordinary verbs program, linked
// only against the system's libibverbs (C, so the interop VM's busybox image runs it as is): it
// opens an RDMA device and does what the conformance peer asks over one TCP connection, one
// text line per request and per reply:
//
//   caps                                     -> ok name=<ibdev> atomics=0|1 ud=1 mtu=<active>
//   reg_mr length=N access=A                 -> ok id=I addr=X lkey=K rkey=R
//   write_mr id=I offset=O hex=H             -> ok
//   read_mr id=I offset=O length=N           -> ok hex=H
//   create_qp kind=rc|ud peer_gid=G peer_qpn=Q sq_psn=S rq_psn=R mtu=M timeout=T retry=C
//             rnr_retry=C min_rnr_timer=T max_rd_atomic=N max_dest_rd_atomic=N access=A qkey=K
//             [sgid=N] [local_gid=G] (the GID to send from: index N, else --gid-index, else
//             the index whose GID is G, the target's address, else the first IPv4-mapped GID)
//                                            -> ok id=I qpn=Q
//   destroy_qp id=I                          -> ok
//   post_recv qp=I wr_id=W mr=M offset=O length=N                                  -> ok
//   post_send qp=I wr_id=W op=O mr=M offset=O length=N raddr=X rkey=R imm=V cmp=X swap=X
//             ud_qpn=Q ud_qkey=K             -> ok
//   poll qp=I                                -> ok n=K then K lines "cqe wr_id=.. status=..
//                                               opcode=.. byte_len=.. imm=.. src_qp=.. flags=.."
//   query qp=I                               -> ok state=S
//   quit
//
// Numbers are hex without 0x except length/offset/mtu/etc. (decimal). Errors reply
// "err <text>". Usage: xroce-conform-agent [--port P] [--dev IBDEV] [--gid-index N] [--once]
// (P default 18516, 0 for any free port; IBDEV default the first device). Once listening it
// prints "xroce-conform-agent: <ibdev> listening on port <P>" (the port it got) on stdout.
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { kMaxObjects = 256, kLine = 1 << 17, kCqDepth = 1024, kQpDepth = 256 };

struct agent {
  struct ibv_context* dev;
  struct ibv_pd* pd;
  int gid_index;
  struct ibv_mr* mr[kMaxObjects];
  char* buf[kMaxObjects];
  struct ibv_qp* qp[kMaxObjects];
  struct ibv_cq* cq[kMaxObjects];
  struct ibv_ah* ah[kMaxObjects];  // UD: the peer's address
  uint32_t peer_qkey[kMaxObjects];
};

// Finds "key=" in a request line and parses what follows (base 10 or 16).
static int field(const char* line, const char* key, int base, unsigned long long* out) {
  char pat[40];
  snprintf(pat, sizeof pat, " %s=", key);
  const char* p = strstr(line, pat);
  if (!p) return 0;
  *out = strtoull(p + strlen(pat), NULL, base);
  return 1;
}

static unsigned long long get(const char* line, const char* key, int base,
                              unsigned long long dflt) {
  unsigned long long v;
  return field(line, key, base, &v) ? v : dflt;
}

static const char* word(const char* line, const char* key, char* out, size_t cap) {
  char pat[40];
  snprintf(pat, sizeof pat, " %s=", key);
  const char* p = strstr(line, pat);
  out[0] = 0;
  if (!p) return out;
  p += strlen(pat);
  size_t n = 0;
  while (p[n] && p[n] != ' ' && p[n] != '\n' && n + 1 < cap) {
    out[n] = p[n];
    n++;
  }
  out[n] = 0;
  return out;
}

static int free_slot(void** table) {
  for (int i = 0; i < kMaxObjects; i++)
    if (!table[i]) return i;
  return -1;
}

static enum ibv_mtu mtu_enum(unsigned mtu) {
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

static void reply(FILE* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void reply(FILE* out, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
  fputc('\n', out);
  fflush(out);
}

static void do_reg_mr(struct agent* a, const char* l, FILE* out) {
  int i = free_slot((void**)a->mr);
  size_t len = get(l, "length", 10, 0);
  int access = (int)get(l, "access", 16, 0);
  if (i < 0 || len == 0) return reply(out, "err no slot or length 0");
  a->buf[i] = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
  memset(a->buf[i], 0, len);
  a->mr[i] = ibv_reg_mr(a->pd, a->buf[i], len, access | IBV_ACCESS_LOCAL_WRITE);
  if (!a->mr[i]) {
    free(a->buf[i]);
    a->buf[i] = NULL;
    return reply(out, "err ibv_reg_mr: %s", strerror(errno));
  }
  reply(out, "ok id=%d addr=%llx lkey=%x rkey=%x", i, (unsigned long long)(uintptr_t)a->buf[i],
        a->mr[i]->lkey, a->mr[i]->rkey);
}

static struct ibv_mr* mr_of(struct agent* a, const char* l, const char* key) {
  unsigned long long i = get(l, key, 10, kMaxObjects);
  return i < kMaxObjects ? a->mr[i] : NULL;
}

static struct ibv_qp* qp_of(struct agent* a, const char* l, int* index) {
  unsigned long long i = get(l, "qp", 10, kMaxObjects);
  if (index) *index = (int)i;
  return i < kMaxObjects ? a->qp[i] : NULL;
}

static void do_write_mr(struct agent* a, const char* l, FILE* out) {
  struct ibv_mr* mr = mr_of(a, l, "id");
  size_t off = get(l, "offset", 10, 0);
  const char* h = strstr(l, " hex=");
  if (!mr || !h) return reply(out, "err bad write_mr");
  h += 5;
  size_t n = 0;
  while (h[2 * n] && h[2 * n] != '\n' && h[2 * n + 1])
    n++;
  if (off + n > mr->length) return reply(out, "err out of bounds");
  for (size_t i = 0; i < n; i++)
    sscanf(h + 2 * i, "%2hhx", (unsigned char*)mr->addr + off + i);
  reply(out, "ok");
}

static void do_read_mr(struct agent* a, const char* l, FILE* out) {
  struct ibv_mr* mr = mr_of(a, l, "id");
  size_t off = get(l, "offset", 10, 0), n = get(l, "length", 10, 0);
  if (!mr || off + n > mr->length) return reply(out, "err bad read_mr");
  fputs("ok hex=", out);
  for (size_t i = 0; i < n; i++)
    fprintf(out, "%02x", ((unsigned char*)mr->addr)[off + i]);
  reply(out, "%s", "");
}

static int modify_rc(struct ibv_qp* qp, const char* l, const union ibv_gid* gid, int sgid_index) {
  struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT,
                           .port_num = 1,
                           .qp_access_flags = (unsigned)get(l, "access", 16, 0)};
  if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = mtu_enum((unsigned)get(l, "mtu", 10, 1024));
  at.dest_qp_num = (uint32_t)get(l, "peer_qpn", 16, 0);
  at.rq_psn = (uint32_t)get(l, "rq_psn", 16, 0);
  at.max_dest_rd_atomic = (uint8_t)get(l, "max_dest_rd_atomic", 10, 4);
  at.min_rnr_timer = (uint8_t)get(l, "min_rnr_timer", 10, 1);
  at.ah_attr.is_global = 1;
  at.ah_attr.grh.dgid = *gid;
  at.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
  at.ah_attr.grh.hop_limit = 64;
  at.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &at,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = (uint32_t)get(l, "sq_psn", 16, 0);
  at.timeout = (uint8_t)get(l, "timeout", 10, 14);
  at.retry_cnt = (uint8_t)get(l, "retry", 10, 7);
  at.rnr_retry = (uint8_t)get(l, "rnr_retry", 10, 7);
  at.max_rd_atomic = (uint8_t)get(l, "max_rd_atomic", 10, 4);
  return ibv_modify_qp(qp, &at,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int modify_ud(struct ibv_qp* qp, const char* l) {
  struct ibv_qp_attr at = {
      .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = (uint32_t)get(l, "qkey", 16, 0)};
  if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return -1;
  at.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &at, IBV_QP_STATE)) return -1;
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = (uint32_t)get(l, "sq_psn", 16, 0);
  return ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// The first GID of port 1 in IPv4-mapped form (::ffff:a.b.c.d): rxe has it at index 1, xroce
// at 0. -1 when there is none.
static int ipv4_gid_index(struct ibv_context* dev) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  for (int i = 0; i < 16; i++) {
    union ibv_gid g;
    if (ibv_query_gid(dev, 1, i, &g) == 0 && memcmp(g.raw, prefix, sizeof prefix) == 0) return i;
  }
  return -1;
}

// The index of `gid` in port 1's table, -1 when it has none.
static int gid_index_of(struct ibv_context* dev, const union ibv_gid* gid) {
  for (int i = 0; i < 16; i++) {
    union ibv_gid g;
    if (ibv_query_gid(dev, 1, i, &g) == 0 && memcmp(g.raw, gid->raw, sizeof g.raw) == 0) return i;
  }
  return -1;
}

// A GID given as 32 hex digits in field `key`; 0 when the field is absent or malformed.
static int gid_field(const char* l, const char* key, union ibv_gid* gid) {
  char hex[40];
  word(l, key, hex, sizeof hex);
  if (strlen(hex) != 32) return 0;
  for (int k = 0; k < 16; k++)
    if (sscanf(hex + 2 * k, "%2hhx", &gid->raw[k]) != 1) return 0;
  return 1;
}

// The GID index to send from (create_qp's comment at the top).
static int source_gid_index(struct agent* a, const char* l) {
  unsigned long long sgid;
  union ibv_gid local;
  if (field(l, "sgid", 10, &sgid)) return (int)sgid;
  if (a->gid_index >= 0) return a->gid_index;
  if (gid_field(l, "local_gid", &local)) return gid_index_of(a->dev, &local);
  return ipv4_gid_index(a->dev);
}

static void do_create_qp(struct agent* a, const char* l, FILE* out) {
  int i = free_slot((void**)a->qp);
  const int sgid_index = source_gid_index(a, l);
  if (sgid_index < 0) return reply(out, "err no such RoCE v2 GID on port 1");
  char kind[8];
  word(l, "kind", kind, sizeof kind);
  union ibv_gid gid;
  if (i < 0 || !gid_field(l, "peer_gid", &gid)) return reply(out, "err bad create_qp");
  const int ud = strcmp(kind, "ud") == 0;
  a->cq[i] = ibv_create_cq(a->dev, kCqDepth, NULL, NULL, 0);
  if (!a->cq[i]) return reply(out, "err ibv_create_cq: %s", strerror(errno));
  struct ibv_qp_init_attr init = {
      .send_cq = a->cq[i],
      .recv_cq = a->cq[i],
      .qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC,
      .sq_sig_all = 0,
      .cap = {
          .max_send_wr = kQpDepth, .max_recv_wr = kQpDepth, .max_send_sge = 1, .max_recv_sge = 1}};
  a->qp[i] = ibv_create_qp(a->pd, &init);
  if (!a->qp[i]) return reply(out, "err ibv_create_qp: %s", strerror(errno));
  if (ud) {
    struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1};
    ah.grh.dgid = gid;
    ah.grh.sgid_index = (uint8_t)sgid_index;
    ah.grh.hop_limit = 64;
    a->ah[i] = ibv_create_ah(a->pd, &ah);
  }
  if ((ud ? modify_ud(a->qp[i], l) : modify_rc(a->qp[i], l, &gid, sgid_index)) ||
      (ud && !a->ah[i])) {
    return reply(out, "err modify_qp: %s", strerror(errno));
  }
  reply(out, "ok id=%d qpn=%x", i, a->qp[i]->qp_num);
}

static void do_destroy_qp(struct agent* a, const char* l, FILE* out) {
  unsigned long long i = get(l, "id", 10, kMaxObjects);
  if (i >= kMaxObjects || !a->qp[i]) return reply(out, "err no such QP");
  ibv_destroy_qp(a->qp[i]);
  if (a->ah[i]) ibv_destroy_ah(a->ah[i]);
  ibv_destroy_cq(a->cq[i]);
  a->qp[i] = NULL;
  a->ah[i] = NULL;
  a->cq[i] = NULL;
  reply(out, "ok");
}

static void do_post_recv(struct agent* a, const char* l, FILE* out) {
  struct ibv_qp* qp = qp_of(a, l, NULL);
  struct ibv_mr* mr = mr_of(a, l, "mr");
  if (!qp || !mr) return reply(out, "err bad post_recv");
  struct ibv_sge sge = {.addr = (uintptr_t)mr->addr + get(l, "offset", 10, 0),
                        .length = (uint32_t)get(l, "length", 10, 0),
                        .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = get(l, "wr_id", 16, 0), .sg_list = &sge, .num_sge = 1}, *bad;
  int rc = ibv_post_recv(qp, &wr, &bad);
  if (rc) return reply(out, "err ibv_post_recv: %s", strerror(rc));
  reply(out, "ok");
}

static void do_post_send(struct agent* a, const char* l, FILE* out) {
  int qi;
  struct ibv_qp* qp = qp_of(a, l, &qi);
  struct ibv_mr* mr = mr_of(a, l, "mr");
  if (!qp || !mr) return reply(out, "err bad post_send");
  struct ibv_sge sge = {.addr = (uintptr_t)mr->addr + get(l, "offset", 10, 0),
                        .length = (uint32_t)get(l, "length", 10, 0),
                        .lkey = mr->lkey};
  struct ibv_send_wr wr = {.wr_id = get(l, "wr_id", 16, 0),
                           .sg_list = &sge,
                           .num_sge = sge.length ? 1 : 0,
                           .opcode = (enum ibv_wr_opcode)get(l, "op", 10, IBV_WR_SEND),
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.imm_data = htonl((uint32_t)get(l, "imm", 16, 0));
  if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic.remote_addr = get(l, "raddr", 16, 0);
    wr.wr.atomic.rkey = (uint32_t)get(l, "rkey", 16, 0);
    wr.wr.atomic.compare_add = get(l, "cmp", 16, 0);
    wr.wr.atomic.swap = get(l, "swap", 16, 0);
  } else if (qp->qp_type == IBV_QPT_UD) {
    wr.wr.ud.ah = a->ah[qi];
    wr.wr.ud.remote_qpn = (uint32_t)get(l, "ud_qpn", 16, 0);
    wr.wr.ud.remote_qkey = (uint32_t)get(l, "ud_qkey", 16, 0);
  } else {
    wr.wr.rdma.remote_addr = get(l, "raddr", 16, 0);
    wr.wr.rdma.rkey = (uint32_t)get(l, "rkey", 16, 0);
  }
  int rc = ibv_post_send(qp, &wr, &bad);
  if (rc) return reply(out, "err ibv_post_send: %s", strerror(rc));
  reply(out, "ok");
}

static void do_poll(struct agent* a, const char* l, FILE* out) {
  int qi;
  if (!qp_of(a, l, &qi)) return reply(out, "err no such QP");
  struct ibv_wc wc[64];
  int n = ibv_poll_cq(a->cq[qi], 64, wc);
  if (n < 0) return reply(out, "err ibv_poll_cq");
  reply(out, "ok n=%d", n);
  for (int i = 0; i < n; i++) {
    reply(out, "cqe wr_id=%llx status=%d opcode=%d byte_len=%u imm=%x src_qp=%x flags=%x",
          (unsigned long long)wc[i].wr_id, wc[i].status, wc[i].opcode, wc[i].byte_len,
          ntohl(wc[i].imm_data), wc[i].src_qp, wc[i].wc_flags);
  }
}

static void do_query(struct agent* a, const char* l, FILE* out) {
  struct ibv_qp* qp = qp_of(a, l, NULL);
  struct ibv_qp_attr at;
  struct ibv_qp_init_attr init;
  if (!qp || ibv_query_qp(qp, &at, IBV_QP_STATE, &init)) return reply(out, "err query");
  reply(out, "ok state=%d", at.qp_state);
}

static void do_caps(struct agent* a, FILE* out) {
  struct ibv_device_attr at;
  struct ibv_port_attr port;
  if (ibv_query_device(a->dev, &at) || ibv_query_port(a->dev, 1, &port)) {
    return reply(out, "err ibv_query_device/port");
  }
  reply(out, "ok name=%s atomics=%d ud=1 mtu=%d", ibv_get_device_name(a->dev->device),
        at.atomic_cap != IBV_ATOMIC_NONE, 128 << port.active_mtu);
}

static void serve(struct agent* a, int fd) {
  FILE* in = fdopen(fd, "r");
  FILE* out = fdopen(dup(fd), "w");
  static char line[kLine];
  while (in && out && fgets(line, sizeof line, in)) {
    char op[32] = {0};
    sscanf(line, "%31s", op);
    if (!strcmp(op, "caps"))
      do_caps(a, out);
    else if (!strcmp(op, "reg_mr"))
      do_reg_mr(a, line, out);
    else if (!strcmp(op, "write_mr"))
      do_write_mr(a, line, out);
    else if (!strcmp(op, "read_mr"))
      do_read_mr(a, line, out);
    else if (!strcmp(op, "create_qp"))
      do_create_qp(a, line, out);
    else if (!strcmp(op, "destroy_qp"))
      do_destroy_qp(a, line, out);
    else if (!strcmp(op, "post_recv"))
      do_post_recv(a, line, out);
    else if (!strcmp(op, "post_send"))
      do_post_send(a, line, out);
    else if (!strcmp(op, "poll"))
      do_poll(a, line, out);
    else if (!strcmp(op, "query"))
      do_query(a, line, out);
    else if (!strcmp(op, "quit"))
      break;
    else
      reply(out, "err unknown request %s", op);
  }
  if (in) fclose(in);
  if (out) fclose(out);
}

int main(int argc, char** argv) {
  int port = 18516, once = 0;
  const char* devname = NULL;
  struct agent a = {.gid_index = -1};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dev") && i + 1 < argc)
      devname = argv[++i];
    else if (!strcmp(argv[i], "--gid-index") && i + 1 < argc)
      a.gid_index = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--once"))
      once = 1;
    else {
      fprintf(stderr, "usage: %s [--port P] [--dev IBDEV] [--gid-index N] [--once]\n", argv[0]);
      return 2;
    }
  }
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n && !a.dev; i++) {
    if (!devname || !strcmp(devname, ibv_get_device_name(list[i])))
      a.dev = ibv_open_device(list[i]);
  }
  if (list) ibv_free_device_list(list);
  if (!a.dev || !(a.pd = ibv_alloc_pd(a.dev))) {
    fprintf(stderr, "xroce-conform-agent: no RDMA device %s\n", devname ? devname : "");
    return 1;
  }
  int s = socket(AF_INET6, SOCK_STREAM, 0), one = 1, zero = 0;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  struct sockaddr_in6 addr = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
  if (s < 0 || bind(s, (struct sockaddr*)&addr, sizeof addr) || listen(s, 1)) {
    perror("xroce-conform-agent: listen");
    return 1;
  }
  socklen_t addr_len = sizeof addr;
  if (getsockname(s, (struct sockaddr*)&addr, &addr_len) == 0) port = ntohs(addr.sin6_port);
  printf("xroce-conform-agent: %s listening on port %d\n", ibv_get_device_name(a.dev->device),
         port);
  fflush(stdout);
  do {
    int c = accept(s, NULL, NULL);
    if (c < 0) break;
    serve(&a, c);
  } while (!once);
  return 0;
}
