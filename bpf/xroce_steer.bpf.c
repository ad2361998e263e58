// SPDX-License-Identifier: GPL-2.0
// xroce_steer: steers RoCEv2 frames (UDP destination port 4791, addressed to one of the
// device's own IP addresses) into the AF_XDP socket of the receiving queue. Everything else,
// and any frame for a queue with no socket, goes on to the kernel (XDP_PASS).
//
// Multi-buffer: the program is built for xdp.frags so that a 9000-byte link can carry
// 4096-byte RoCE MTU frames; it only reads headers, which lie in the first buffer.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>

// libbpf's helpers need the kernel types above.
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "xroce_steer.h"

// Configuration, fixed at load time by the loader (skeleton rodata).
const volatile __u16 cfg_roce_udp_port = XROCE_ROCE_UDP_PORT;

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, XROCE_MAX_LOCAL_IPS);
  __type(key, __u32);  // IPv4 address, network byte order
  __type(value, __u8);
} local_ipv4 SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, XROCE_MAX_LOCAL_IPS);
  __type(key, struct xroce_ipv6_key);
  __type(value, __u8);
} local_ipv6 SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, XROCE_MAX_QUEUES);
  __type(key, __u32);  // rx queue index
  __type(value, __u32);
} xsks SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, XROCE_COUNTER_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

// One frame can carry at most one 802.1Q or 802.1ad tag and one inner 802.1Q tag.
#define MAX_VLAN_TAGS 2

struct vlan_hdr {
  __be16 tci;
  __be16 encapsulated_proto;
};

static __always_inline void count(__u32 which) {
  __u64* c = bpf_map_lookup_elem(&counters, &which);
  if (c) *c += 1;
}

static __always_inline int pass(void) {
  count(XROCE_COUNTER_PASSED);
  return XDP_PASS;
}

static __always_inline int malformed(void) {
  count(XROCE_COUNTER_MALFORMED);
  return XDP_PASS;
}

// Returns the UDP header when the L3 destination is one of ours, else NULL; sets *bad on a
// truncated header.
static __always_inline struct udphdr* parse_ipv4(void* l3, void* end, int* bad) {
  struct iphdr* ip = l3;
  if ((void*)(ip + 1) > end) {
    *bad = 1;
    return NULL;
  }
  if (ip->version != 4 || ip->ihl < 5) {
    *bad = 1;
    return NULL;
  }
  if (ip->protocol != IPPROTO_UDP) return NULL;
  if (ip->frag_off & bpf_htons(0x3FFF)) return NULL;  // fragments belong to the kernel
  __u32 dst = ip->daddr;
  if (!bpf_map_lookup_elem(&local_ipv4, &dst)) return NULL;
  struct udphdr* udp = l3 + ip->ihl * 4;
  if ((void*)(udp + 1) > end) {
    *bad = 1;
    return NULL;
  }
  return udp;
}

static __always_inline struct udphdr* parse_ipv6(void* l3, void* end, int* bad) {
  struct ipv6hdr* ip6 = l3;
  if ((void*)(ip6 + 1) > end) {
    *bad = 1;
    return NULL;
  }
  // RoCEv2 carries no extension headers (rxe_net.c prepare6; docs/protocol.md §1.2): UDP must
  // follow directly.
  if (ip6->nexthdr != IPPROTO_UDP) return NULL;
  struct xroce_ipv6_key key;
  __builtin_memcpy(key.addr, &ip6->daddr, sizeof(key.addr));
  if (!bpf_map_lookup_elem(&local_ipv6, &key)) return NULL;
  struct udphdr* udp = (void*)(ip6 + 1);
  if ((void*)(udp + 1) > end) {
    *bad = 1;
    return NULL;
  }
  return udp;
}

SEC("xdp.frags")
int xroce_steer(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return malformed();

  __u16 proto = eth->h_proto;
  void* l3 = eth + 1;
#pragma unroll
  for (int i = 0; i < MAX_VLAN_TAGS; i++) {
    if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD)) break;
    struct vlan_hdr* vh = l3;
    if ((void*)(vh + 1) > end) return malformed();
    proto = vh->encapsulated_proto;
    l3 = vh + 1;
  }

  int bad = 0;
  struct udphdr* udp = NULL;
  if (proto == bpf_htons(ETH_P_IP)) {
    udp = parse_ipv4(l3, end, &bad);
  } else if (proto == bpf_htons(ETH_P_IPV6)) {
    udp = parse_ipv6(l3, end, &bad);
  }
  if (bad) return malformed();
  if (!udp || udp->dest != bpf_htons(cfg_roce_udp_port)) return pass();

  // The XDP_PASS in the flags is what happens when the queue has no socket.
  int action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
  count(action == XDP_REDIRECT ? XROCE_COUNTER_REDIRECTED : XROCE_COUNTER_PASSED);
  return action;
}

char _license[] SEC("license") = "GPL";
