// verbs_probe's shared pieces: each check prints "check NAME ok|FAILED" and counts failures.
#pragma once

#include <infiniband/verbs.h>

namespace xroce::probe {

void check(bool ok, const char* what);
// RESET -> INIT -> RTR -> RTS for an RC, UC or XRC INI QP (RTR for an XRC TGT QP; every remote
// access and window binds allowed), connected to QP peer_qpn at `gid` through our GID
// sgid_index; rq_psn and sq_psn both `psn`. With this device's own GID and a QP of its own as
// the peer, a loopback pair. Returns success (and prints the failing transition's errno).
bool connect_qp(ibv_qp* qp, uint32_t peer_qpn, const ibv_gid& gid, uint8_t sgid_index = 0,
                uint8_t rnr_retry = 7, uint32_t psn = 1);
int objects(ibv_context* ctx);
// verbs_probe_dma.cc
int dma_regions(ibv_context* ctx, bool hold);
int dma_loopback(ibv_context* ctx, int atomics);
// verbs_probe_transport.cc
int transport(ibv_context* ctx);
// verbs_probe_semantics.cc
int refusals(ibv_context* ctx);
int recv_depth(ibv_context* ctx);
int loopback_semantics(ibv_context* ctx);
int recv_doorbell(ibv_context* ctx);
int channel_cq_ex(ibv_context* ctx);
int poll_sleep(ibv_context* ctx);
// verbs_probe_many.cc: argv after "many_qps"
int many_qps(ibv_context* ctx, int argc, char** argv);

}  // namespace xroce::probe
