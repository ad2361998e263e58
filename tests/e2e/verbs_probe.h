// verbs_probe's shared pieces: each check prints "check NAME ok|FAILED" and counts failures.
#pragma once

#include <infiniband/verbs.h>

namespace xroce::probe {

void check(bool ok, const char* what);
int objects(ibv_context* ctx);
// verbs_probe_dma.cc
int dma_regions(ibv_context* ctx, bool hold);
int dma_loopback(ibv_context* ctx, int atomics);
// verbs_probe_transport.cc
bool connect_qp(ibv_qp* qp, uint32_t peer_qpn, const ibv_gid& gid);
int transport(ibv_context* ctx);

}  // namespace xroce::probe
