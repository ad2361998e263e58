#!/usr/bin/env bash
# RC under random loss on the wire: two namespaces joined through xroce-switch (tools/switch) in a
# third, which drops each RoCE frame with probability LOSS; for each port kind and loss,
# ib_write_bw and ib_read_bw (64 KiB, -D seconds) between two xroce devices, their average MB/s,
# and the device counters that show how losses were repaired: completer_retry_err (Local ACK
# Timeouts), adaptive_retransmits, resend_timeouts (of both, the expiries after a resend went
# unanswered), tail_probes (single packets resent after silence with no NAK), duplicate_request
# (requests the responders had already executed: a probe after a lost ACK, a resend's repeated
# first packet, a replayed READ), probe_gaps (go-back-Ns a probe's own short answer started: the
# probe found a loss no NAK had reported, as after a lost NAK), resend_repeats (first resent
# packets sent twice), replays_reordered (duplicate READs whose replay the responder sent ahead of
# later READs' replies), replay_gap_retries (READ retries the responses started without a timer),
# read_responses_ahead and read_ranges_asked (READ responses placed after a gap, and the missing
# ranges asked for again, each by one duplicate READ: selective READ repair),
# rcvd_seq_err (PSN-sequence NAKs received), out_of_seq_request (requests the responders dropped
# out of sequence), rx_port_drops (frames the hosts' receive rings dropped), rx_reads and
# rx_empty_reads (the udp port's reads of its socket, and those that found nothing);
# what the switch dropped (at random, queue full, its receive ring full); and, sampled from
# `xroce qp show` every RTT_SAMPLE_S seconds (default 2; 0: never) while the program runs, the
# client's (the requester's) round trips: the largest rtt_peak_us and rtt_us and the smallest
# rtt_min_us seen (transport/rtt.h). A sample costs a python start and a daemon query: at two a
# second the udp port's rate at 2 % loss measured 12 % lower than with none. Needs root. Not a
# test: it prints figures (bench/README.md).
# IMPAIR=device joins the namespaces with one veth and has each device drop LOSS of the packets it
# receives (`xroce impair`) instead: no switch, so the rate is the devices' own, and the
# switch line gives way to rx_impair_drops.
# ROUNDS=N (default 1) measures every loss N times in turn on each port, so that a busy minute of
# this host shows as one round among several (bench-goals.sh judges the goal on the median).
# FAMILY=ipv6 runs the QPs over the devices' IPv6 GIDs (2001:2:0:dd::1 and ::2) instead of the
# IPv4-mapped ones (the default, ipv4); perftest's own TCP exchange stays on IPv4 either way.
# SIZE=BYTES (default 65536) sets the messages' size and PROGRAMS (default "ib_write_bw
# ib_read_bw") the perftest programs, so that small messages can be measured the same way: there
# the counters to read are rcvd_rnr_err (RNR NAKs the requesters received: a SEND found no
# receive posted) and worker_sleeps (how often the devices' workers went to sleep, each a wake-up
# later: bench/README.md "Small messages").
# ARGS="..." (default none) passes more options to both ends of every perftest program, as
# ARGS=--use-srq to receive through a shared receive queue.
# JSON_OUT=FILE also writes every run there (port, round, loss, program, mbps, ratio_clean: the MB/s
# against the same program's at loss 0 on the same port in the same round, when one was measured
# first; and the counters' growth by name; bench/goals.py reads it), with the commit and load.
#   [IMPAIR=switch|device] [PORTS="afxdp udp"] [ROUNDS=N] [FAMILY=ipv4|ipv6] [SIZE=BYTES]
#   [PROGRAMS="ib_write_bw ib_read_bw"] [ARGS="..."] bench/bench-loss.sh [BUILD_DIR] [SECONDS] [LOSS...]
#   (default: switch build 5 0 0.02)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
build=${1:-build}
seconds=${2:-5}
shift 2 || shift $# || true
losses=("$@")
impair=${IMPAIR:-switch}
read -r -a kinds <<<"${PORTS:-afxdp udp}"
rtt_period=${RTT_SAMPLE_S:-2}
[[ $impair == switch || $impair == device ]] || { echo "IMPAIR is switch or device" >&2; exit 2; }
family=${FAMILY:-ipv4}
[[ $family == ipv4 || $family == ipv6 ]] || { echo "FAMILY is ipv4 or ipv6" >&2; exit 2; }
[[ ${#losses[@]} -gt 0 ]] || losses=(0 0.02)
rounds=${ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS is a count of rounds" >&2; exit 2; }
size=${SIZE:-65536}
[[ $size =~ ^[1-9][0-9]*$ ]] || { echo "SIZE is a message size in bytes" >&2; exit 2; }
read -r -a programs <<<"${PROGRAMS:-ib_write_bw ib_read_bw}"
read -r -a extra_args <<<"${ARGS:-}"
runs=()
for ((round = 1; round <= rounds; round++)); do
  for loss in "${losses[@]}"; do runs+=("$round:$loss"); done
done
bin=$(cd "$build/bin" && pwd)
xroce=$bin/xroce
tag=xrbl-$$
ns_a=$tag-a ns_m=$tag-m ns_b=$tag-b
ip_a=198.18.221.1 ip_b=198.18.221.2
ip6_a=2001:2:0:dd::1 ip6_b=2001:2:0:dd::2
out=$(mktemp -d)
switch_pid=
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

stop_switch() {
  if [[ -n $switch_pid ]]; then
    kill "$switch_pid" 2>/dev/null || true
    wait "$switch_pid" 2>/dev/null || true
    switch_pid=
  fi
}
del_devices() {
  in_ns "$ns_a" "$xroce" link del xbl0 >/dev/null 2>&1 || true
  in_ns "$ns_b" "$xroce" link del xbl1 >/dev/null 2>&1 || true
}
sampler=
cleanup() {
  if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null || true; fi
  del_devices
  stop_switch
  # Whatever still runs in this run's namespaces (a real-time switch left spinning would take a
  # core from everyone) goes with them.
  for ns in "$ns_a" "$ns_m" "$ns_b"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$out"
}
trap cleanup EXIT

for ns in "$ns_a" "$ns_m" "$ns_b"; do
  ip netns add "$ns"
  in_ns "$ns" ip link set lo up
done
if [[ $impair == switch ]]; then
  ip link add va netns "$ns_a" type veth peer name ma netns "$ns_m"
  ip link add mb netns "$ns_m" type veth peer name vb netns "$ns_b"
  in_ns "$ns_m" ip link set dev ma mtu 9000 up
  in_ns "$ns_m" ip link set dev mb mtu 9000 up
else
  ip link add va netns "$ns_a" type veth peer name vb netns "$ns_b"
fi
in_ns "$ns_a" ip link set dev va mtu 9000 up
in_ns "$ns_b" ip link set dev vb mtu 9000 up
in_ns "$ns_a" ip addr add $ip_a/24 dev va
in_ns "$ns_b" ip addr add $ip_b/24 dev vb
in_ns "$ns_a" ip addr add $ip6_a/64 dev va nodad
in_ns "$ns_b" ip addr add $ip6_b/64 dev vb nodad

# The GID index of an address on a device (ibv_devinfo -v: "GID[  1]:  2001:2:0:dd::1, RoCE v2").
gid_index() {  # namespace device address
  in_ns "$1" "$xroce" exec -- ibv_devinfo -v -d "$2" |
    sed -nE "s/.*GID\[ *([0-9]+)\]:[[:space:]]*$3, RoCE v2.*/\1/p" | head -1
}

start_switch() {  # loss
  # Real-time priority, as a switch has its own silicon (tools/switch/README.md).
  # Not through in_ns: a backgrounded function is a subshell, and $! would be its pid, not the
  # switch's (ip netns exec and chrt exec the switch in place).
  ip netns exec "$ns_m" chrt -f 10 "$bin/xroce-switch" --port ma --port mb --loss "$1" --seed 1 \
    --stats-json "$out/switch.json" >"$out/switch.txt" 2>&1 &
  switch_pid=$!
  local deadline=$((SECONDS + 10))
  while ((SECONDS < deadline)); do
    grep -q ready "$out/switch.txt" 2>/dev/null && return 0
    sleep 0.05  # polling a condition with a deadline
  done
  echo "xroce-switch did not start" >&2
  return 1
}

counter() {  # namespace, device, name
  in_ns "$1" "$xroce" stat "$2" --json | /usr/bin/python3 -c \
    "import json,sys; d=json.load(sys.stdin); print(d['counters'].get('$3', d.get('port', {}).get('$3', 0)))"
}
counters() {  # the repair counters of both devices together
  local name total
  for name in completer_retry_err adaptive_retransmits resend_timeouts tail_probes duplicate_request probe_gaps resend_repeats replays_reordered replay_gap_retries read_responses_ahead read_ranges_asked rcvd_seq_err out_of_seq_request rcvd_rnr_err rx_port_drops rx_impair_drops rx_reads rx_empty_reads worker_sleeps; do
    total=$(( $(counter "$ns_a" xbl0 $name) + $(counter "$ns_b" xbl1 $name) ))
    printf ' %s %s' "$name" "$total"
  done
}

# Until killed: every $rtt_period seconds, the largest rtt_peak_us and rtt_us and the smallest
# rtt_min_us of the requester QPs (those that measured a round trip) of device $2 in namespace
# $1, one "peak smoothed min" line each.
sample_rtt() {  # namespace, device
  [[ $rtt_period != 0 ]] || return 0
  while :; do
    in_ns "$1" "$xroce" qp show "$2" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
try:
    qps = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
qps = qps.get("qps", []) if isinstance(qps, dict) else qps
timed = [q for q in qps if q.get("rtt_samples", 0) > 0]
if timed:
    print(max(q["rtt_peak_us"] for q in timed), max(q["rtt_us"] for q in timed),
          min(q["rtt_min_us"] for q in timed))
' || true
    sleep "$rtt_period"  # a sampling period, not a wait for a condition
  done
}
rtt_summary() {  # file of sample_rtt lines
  awk '{ if ($1 > p) p = $1; if ($2 > s) s = $2; if (NR == 1 || $3 < m) m = $3 }
    END { if (NR == 0) printf "round trips not sampled"
          else printf "rtt_peak_us %.0f rtt_us %.0f rtt_min_us %.0f", p, s, m }' "$1"
}

# One perftest program, server in a, client in b; prints its average MB/s (or FAILED).
bandwidth() {  # program
  local port=18515
  in_ns "$ns_a" "$xroce" exec -- "$1" -d xbl0 -x "$gid_a" -s "$size" -D "$seconds" -p $port \
    "${extra_args[@]}" >"$out/srv.txt" 2>&1 &
  local srv=$!
  wait_listen "$ns_a" $port
  if in_ns "$ns_b" "$xroce" exec -- "$1" -d xbl1 -x "$gid_b" -s "$size" -D "$seconds" -p $port $ip_a \
    "${extra_args[@]}" >"$out/cli.txt" 2>&1 && wait $srv; then
    awk -v size="$size" '$1 == size { print $4 }' "$out/cli.txt"
  else
    wait $srv 2>/dev/null || true
    { echo "--- $1 failed; client:"; cat "$out/cli.txt"; echo "--- server:"; cat "$out/srv.txt"; } >&2
    echo FAILED
  fi
}

echo "impair: $impair; family: $family; load: $(uptime)"
load_start=$(load_average)
rows=$out/rows.jsonl
: >"$rows"
declare -A clean_mbps=()
for kind in "${kinds[@]}"; do
  in_ns "$ns_a" "$xroce" link add xbl0 netdev va port "$kind" queues 1 >/dev/null
  in_ns "$ns_b" "$xroce" link add xbl1 netdev vb port "$kind" queues 1 >/dev/null
  gid_a=0 gid_b=0
  if [[ $family == ipv6 ]]; then
    gid_a=$(gid_index "$ns_a" xbl0 $ip6_a)
    gid_b=$(gid_index "$ns_b" xbl1 $ip6_b)
    [[ -n $gid_a && -n $gid_b ]] || { echo "no IPv6 GID on the devices" >&2; exit 1; }
  fi
  # Each round measures every loss in turn, the clean rate first: a lossy run's ratio_clean is
  # against the clean run of its own round.
  for run in "${runs[@]}"; do
    round=${run%%:*} loss=${run#*:}
    if [[ $impair == switch ]]; then
      start_switch "$loss"
    else
      in_ns "$ns_a" "$xroce" impair set xbl0 "loss=$loss" seed=1 >/dev/null
      in_ns "$ns_b" "$xroce" impair set xbl1 "loss=$loss" seed=2 >/dev/null
    fi
    for program in "${programs[@]}"; do
      before=$(counters)
      : >"$out/rtt.txt"
      sample_rtt "$ns_b" xbl1 >>"$out/rtt.txt" &
      sampler=$!
      mbps=$(bandwidth "$program")
      kill "$sampler" 2>/dev/null || true
      wait "$sampler" 2>/dev/null || true
      after=$(counters)
      label=$kind
      ((rounds == 1)) || label+=" round $round"
      echo "$label loss $loss $program ${mbps} MB/s; counters before:$before after:$after;" \
        "client $(rtt_summary "$out/rtt.txt")"
      read -r -a b <<<"$before"
      read -r -a a <<<"$after"
      grown=()
      for ((i = 0; i < ${#a[@]}; i += 2)); do grown+=("${a[i]}=$((a[i + 1] - b[i + 1]))"); done
      lossy=1
      awk -v l="$loss" 'BEGIN { exit !(l + 0 == 0) }' && lossy=0
      ((lossy)) || clean_mbps[$kind.$program]=$mbps
      ratio=-
      clean=${clean_mbps[$kind.$program]:-}
      if ((lossy)) && [[ -n $clean && $clean != FAILED && $mbps != FAILED ]]; then
        ratio=$(awk -v a="$mbps" -v b="$clean" 'BEGIN { printf "%.3f", a / b }')
      fi
      json_row port="$kind" round="$round" loss="$loss" program="$program" seconds="$seconds" \
        impair="$impair" family="$family" size="$size" mbps="$mbps" ratio_clean="$ratio" \
        load="$(load_average)" \
        "${grown[@]}" >>"$rows"
    done
    [[ $impair == switch ]] || continue
    stop_switch
    # What the switch dropped: at random (--loss), for a full queue, or because its receive ring
    # was full (a loss the host made, not the link).
    /usr/bin/python3 -c '
import json, sys
ports = json.load(open(sys.argv[1]))["ports"]
print("  switch:", " ".join("%s %d" % (k, sum(p.get(k, 0) for p in ports))
      for k in ("rx", "dropped_impair", "dropped_full", "rx_ring_drops")))' "$out/switch.json"
  done
  del_devices
done
if [[ -n ${JSON_OUT:-} ]]; then
  json_document bench/bench-loss.sh "$load_start" "$rows" >"$JSON_OUT"
  echo "wrote $JSON_OUT"
fi
