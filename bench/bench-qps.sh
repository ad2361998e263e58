#!/usr/bin/env bash
# Many QPs: ib_write_bw (64 KiB WRITEs, 4096-byte MTU, -F) with -q 1, then each QP count given,
# between two namespaces joined by a veth (MTU 9000), on each port kind; for each, the MB/s, the
# ratio to -q 1 of the same kind in the same round, and the counters of both devices that tell a
# clean run from a struggling one: sent_pkts (the responder's are its ACKs), rx_port_drops,
# completer_retry_err (Local ACK Timeouts), adaptive_retransmits, tail_probes,
# duplicate_request, rcvd_seq_err. Every QP count moves the same bytes, 120,000 messages (7.9
# GB, about three seconds here: the steady rate): -n is 120000 / QPS per QP, and -t (messages
# each QP keeps posted) is 128, or less where QPS x 128 would pass 16,384, since perftest puts
# every QP on one CQ and the device has 32,767 CQEs (-q 1000 -t 16 -n 120). Short runs made the
# ratios wrong both ways: one QP at 2,000 iterations (128 MiB) ended before its rate settled,
# and 1,000 QPs at 20 (1.3 GB, under a second) spent a tenth of the run starting; at 40 (2.6 GB)
# the 16 messages each QP posts at the start were 40 % of its run, and -q 1000 moved 14 % less
# than at 120 while -q 1 moved the same (bench/README.md "Many QPs"). ITERS_<QPS> and DEPTH_<QPS>
# (ITERS_64=...) override one; ROUNDS=N (default 1) runs the whole series N times, the QP counts
# of a round right after its one-QP run, since this host's rate moves by half between minutes.
# JSON_OUT=FILE also writes every row there (port, round, qps, iters, depth, mbps, ratio, the
# sender's in-flight budget in PSNs, budget_psns, and the counters' growth by name;
# bench/goals.py reads it), with the commit and the host's load.
# Needs root. Not a test: it prints figures (bench/README.md "Many QPs"). Wire benchmarks run one
# at a time on a shared host: flock /tmp/xroce-bench.lock bench/bench-qps.sh ...
#   bench/bench-qps.sh [BUILD_DIR] [QPS...]   (default: build 64 1000; PORTS="afxdp udp")
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
build=${1:-build}
shift || true
qp_counts=("$@")
[[ ${#qp_counts[@]} -gt 0 ]] || qp_counts=(64 1000)
read -r -a ports <<<"${PORTS:-afxdp udp}"
bin=$(cd "$build/bin" && pwd)
xroce=$bin/xroce
tag=xrbq-$$
ns_a=$tag-a ns_b=$tag-b
if_a=xqa$$ if_b=xqb$$
ip_a=198.18.222.1 ip_b=198.18.222.2
out=$(mktemp -d)
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

del_devices() {
  in_ns "$ns_a" "$xroce" link del xbq0 >/dev/null 2>&1 || true
  in_ns "$ns_b" "$xroce" link del xbq1 >/dev/null 2>&1 || true
}
cleanup() {
  del_devices
  for ns in "$ns_a" "$ns_b"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$out"
}
trap cleanup EXIT

for ns in "$ns_a" "$ns_b"; do
  ip netns add "$ns"
  in_ns "$ns" ip link set lo up
done
ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b"
in_ns "$ns_a" ip link set dev "$if_a" mtu 9000 up
in_ns "$ns_b" ip link set dev "$if_b" mtu 9000 up
in_ns "$ns_a" ip addr add $ip_a/24 dev "$if_a"
in_ns "$ns_b" ip addr add $ip_b/24 dev "$if_b"

names=(sent_pkts rx_port_drops completer_retry_err adaptive_retransmits tail_probes
  duplicate_request rcvd_seq_err)
# Both devices' counters, summed, as "name value ..." in the order of `names`.
counters() {
  { in_ns "$ns_a" "$xroce" stat xbq0 --json; in_ns "$ns_b" "$xroce" stat xbq1 --json; } |
    /usr/bin/python3 -c '
import json, sys
names = sys.argv[1:]
text = sys.stdin.read()
decoder, at, total = json.JSONDecoder(), 0, dict.fromkeys(names, 0)
while at < len(text):
    while at < len(text) and text[at].isspace(): at += 1
    if at >= len(text): break
    doc, at = decoder.raw_decode(text, at)
    for n in names: total[n] += doc["counters"].get(n, 0)
print(" ".join(str(total[n]) for n in names))' "${names[@]}"
}

# The sending device's in-flight budget in PSNs (`xroce stat`'s inflight_budget_psns: a quarter
# of the frames its port holds received), for the record: it sets how many QPs send at once.
budget() {
  in_ns "$ns_b" "$xroce" stat xbq1 --json | /usr/bin/python3 -c '
import json, sys
print(json.load(sys.stdin).get("port", {}).get("inflight_budget_psns", "-"))'
}

# One ib_write_bw run, server in a, client in b; prints its average MB/s (or FAILED).
bandwidth() {  # qps iterations depth
  local port=18516
  # -N: perftest works out a peak rate after the run by comparing every pair of its iterations'
  # timestamps when each QP runs 20,000 or fewer (all but -q 1 here), 15 s of one core at -q 1000
  # (120,000 iterations), outside the average it reports. Only the average is read.
  local args=(-x 0 -F -N -s 65536 -q "$1" -n "$2" -t "$3" -p "$port")
  in_ns "$ns_a" "$xroce" exec -- ib_write_bw -d xbq0 "${args[@]}" >"$out/srv.txt" 2>&1 &
  local srv=$!
  wait_listen "$ns_a" $port
  if in_ns "$ns_b" timeout 600 "$xroce" exec -- ib_write_bw -d xbq1 "${args[@]}" $ip_a \
    >"$out/cli.txt" 2>&1 && wait $srv; then
    awk '$1 == 65536 { print $4 }' "$out/cli.txt"
  else
    kill $srv 2>/dev/null || true
    wait $srv 2>/dev/null || true
    { echo "--- -q $1 failed; client:"; tail -20 "$out/cli.txt"; echo "--- server:";
      tail -20 "$out/srv.txt"; } >&2
    echo FAILED
  fi
}

iterations() {  # qps: -n for that many QPs
  local var=ITERS_$1
  if [[ -n ${!var:-} ]]; then echo "${!var}"; return; fi
  echo $(((120000 + $1 - 1) / $1))
}
depth() {  # qps: -t for that many QPs
  local var=DEPTH_$1
  if [[ -n ${!var:-} ]]; then echo "${!var}"; return; fi
  local t=$((16384 / $1))
  ((t > 128)) && t=128
  ((t < 1)) && t=1
  echo $t
}

load_start=$(load_average)
rows=$out/rows.jsonl
: >"$rows"
printf '%-6s %5s %6s %6s %5s %10s %7s' port round qps iters depth MB/s ratio
printf ' %s' "${names[@]}"
echo
for kind in "${ports[@]}"; do
  in_ns "$ns_a" "$xroce" link add xbq0 netdev "$if_a" port "$kind" queues 1 >/dev/null
  in_ns "$ns_b" "$xroce" link add xbq1 netdev "$if_b" port "$kind" queues 1 >/dev/null
  budget_psns=$(budget)
  echo "in-flight budget on $kind: $budget_psns PSNs" >&2
  for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
    one=
    for qps in 1 "${qp_counts[@]}"; do
      iters=$(iterations "$qps")
      tx_depth=$(depth "$qps")
      ((tx_depth > iters)) && tx_depth=$iters
      read -r -a before <<<"$(counters)"
      echo "load before -q $qps on $kind: $(uptime)" >&2
      mbps=$(bandwidth "$qps" "$iters" "$tx_depth")
      read -r -a after <<<"$(counters)"
      [[ $qps == 1 ]] && one=$mbps
      ratio=-
      if [[ $mbps != FAILED && -n $one && $one != FAILED ]]; then
        ratio=$(awk -v a="$mbps" -v b="$one" 'BEGIN { printf "%.2f", a / b }')
      fi
      printf '%-6s %5s %6s %6s %5s %10s %7s' "$kind" "$round" "$qps" "$iters" "$tx_depth" \
        "$mbps" "$ratio"
      grown=()
      for i in "${!names[@]}"; do grown+=("${names[i]}=$((after[i] - before[i]))"); done
      printf ' %s' "${grown[@]#*=}"
      echo
      json_row port="$kind" round="$round" qps="$qps" iters="$iters" depth="$tx_depth" \
        mbps="$mbps" ratio="$ratio" budget_psns="$budget_psns" load="$(load_average)" \
        "${grown[@]}" >>"$rows"
    done
  done
  del_devices
done
echo "load after: $(uptime)" >&2
if [[ -n ${JSON_OUT:-} ]]; then
  json_document bench/bench-qps.sh "$load_start" "$rows" >"$JSON_OUT"
  echo "wrote $JSON_OUT" >&2
fi
