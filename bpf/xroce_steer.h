/* Shared between the XDP program (bpf/xroce_steer.bpf.c) and its loader
 * (engine/net/xdp_steering.cc): map sizes, key layouts and counter indices. */
#ifndef XROCE_BPF_XROCE_STEER_H
#define XROCE_BPF_XROCE_STEER_H

#define XROCE_ROCE_UDP_PORT 4791 /* IANA "RoCEv2" */
#define XROCE_MAX_LOCAL_IPS 64
#define XROCE_MAX_QUEUES 64

struct xroce_ipv6_key {
  unsigned char addr[16];
};

enum xroce_counter {
  XROCE_COUNTER_REDIRECTED = 0, /* handed to an AF_XDP socket */
  XROCE_COUNTER_PASSED = 1,     /* not ours, or ours for a queue with no socket */
  XROCE_COUNTER_MALFORMED = 2,  /* a header ran past the end of the first buffer */
  XROCE_COUNTER_COUNT = 3,
};

#endif
