// xroce_attack_probe: the attacks of the security tests (tests/e2e/security_test.cc), each a
// mode of one program. It speaks the control protocol itself (include/xroce, like a client that
// does not use the provider) for the attacks on the daemon, and libibverbs for those that need a
// device as an application uses it. Every mode prints "key value" lines the test reads:
//
//   attack_probe inherit-after-exec DEV PROGRAM...   a context, then fork: the parent exec()s
//                          PROGRAM (a setuid one in the test) keeping the connection; the child
//                          registers over the parent's memory and says what it got
//   attack_probe orphan DEV                          a context whose opener exits while a child
//                          keeps it; the child waits for "go" on stdin, then tries it
//   attack_probe drop-privileges DEV                 (root) a context, then a child that becomes
//                          nobody probes mapped and unmapped addresses of its parent through it
//   attack_probe fd-flood DEV N                      N messages that carry descriptors and are
//                          wrong in every way the daemon must survive
//   attack_probe forge SRC DST SPORT QPN PSN RKEY VA LEN BYTE [flush]  one RDMA WRITE datagram
//                          (or a FLUSH of LEN bytes at VA), sent from SRC:SPORT to DST:4791
//                          through the kernel's UDP socket
//   attack_probe target DEV PEER NQPS [flush]        a region and NQPS RC QPs in RTR towards PEER
//                          (with "flush" the QPs allow FLUSH_GLOBAL, the region never does);
//                          prints them, then the async events; "dump" says what the region holds
//   attack_probe qps DEV N [CONTEXTS]                N QPs (over CONTEXTS contexts), with the
//                          process's descriptor limit at 1024; "ready"; waits for EOF on stdin
//   attack_probe flush DEV PEER                      outstanding sends and receives, "posted";
//                          then the completions and DEVICE_FATAL the device's death brings
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace xroce::attack {

// A verbs context on the named device, or nullptr.
ibv_context* open_device(const char* name);
// Monotonic nanoseconds (CLOCK_MONOTONIC: comparable between processes).
uint64_t monotonic_ns();

// attack_probe_verbs.cc
int target(const char* dev, const char* peer, int nqps, bool allow_flush);
int qps(const char* dev, int count, int contexts);
int flush(const char* dev, const char* peer);
// attack_probe_forge.cc
int forge(int argc, char** argv);

}  // namespace xroce::attack
