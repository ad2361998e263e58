#!/usr/bin/env bash
# Device benchmarks beside kernel baselines measured in the same run on the same veth (MTU 9000,
# two namespaces): ib_write_bw with 64 KB messages beside iperf3 (one TCP stream), ib_send_lat and
# ib_write_lat with 2-byte messages beside sockperf ping-pong over UDP and TCP (sockperf's
# smallest message is 14 bytes), and CPU seconds per GB moved (application + daemon on both
# sides). Needs root. Not a test: it prints figures and ratios.
#   bench/bench-device.sh [BUILD_DIR] [PORT_KIND...]     (default: build afxdp udp)
set -euo pipefail
build=${1:-build}
shift || true
kinds=("$@")
[[ ${#kinds[@]} -gt 0 ]] || kinds=(afxdp udp)
xroce=$(cd "$build/bin" && pwd)/xroce
tag=xrbd-$$
ns_a=$tag-a ns_b=$tag-b
ip_a=198.18.220.1 ip_b=198.18.220.2
out=$(mktemp -d)
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

cleanup() {
  in_ns "$ns_a" "$xroce" link del xbd0 >/dev/null 2>&1 || true
  in_ns "$ns_b" "$xroce" link del xbd1 >/dev/null 2>&1 || true
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT

ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add xbd0 netns "$ns_a" type veth peer name xbd1 netns "$ns_b"
in_ns "$ns_a" ip addr add $ip_a/24 dev xbd0
in_ns "$ns_b" ip addr add $ip_b/24 dev xbd1
for ns in "$ns_a" "$ns_b"; do in_ns "$ns" ip link set lo up; done
in_ns "$ns_a" ip link set xbd0 mtu 9000 up
in_ns "$ns_b" ip link set xbd1 mtu 9000 up

wait_listen() {  # namespace, TCP or UDP port
  local i
  for i in $(seq 1 400); do
    [[ -n $(in_ns "$1" ss -Hlntu sport = ":$2") ]] && return 0
    sleep 0.05
  done
  echo "nothing listens on $2 in $1" >&2
  return 1
}

# CPU seconds (user + system) used so far by a pid.
cpu_s() {
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0
}
daemon_pid() {
  local ino
  ino=$(in_ns "$1" stat -L -c %i /proc/self/ns/net)
  cat "/run/xroce/ns-$ino/xroced.lock"
}

# Runs server (a) and client (b) under `times`; prints "<cpu seconds of both>" and leaves the
# client's output in $out/cli.txt.
pair() {
  local port=$1 srv=$2 cli=$3
  in_ns "$ns_a" bash -c "$srv >$out/srv.txt 2>&1; times >$out/srv.times" &
  local spid=$!
  wait_listen "$ns_a" "$port"
  in_ns "$ns_b" bash -c "$cli >$out/cli.txt 2>&1; times >$out/cli.times"
  wait $spid
  /usr/bin/python3 - "$out/srv.times" "$out/cli.times" <<'PY'
import re, sys
total = 0.0
for f in sys.argv[1:]:
    lines = open(f).read().split("\n")
    for m, s in re.findall(r"(\d+)m([\d.]+)s", lines[1]):  # children's user and system time
        total += int(m) * 60 + float(s)
print(f"{total:.2f}")
PY
}

msgs=3000
bytes=$((65536 * msgs))
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
printf '%-7s %-34s %12s %14s\n' port test result "cpu s/GB"

# Baselines: iperf3 one TCP stream, sockperf ping-pong UDP and TCP.
cpu=$(pair 5201 "iperf3 -s -1 -B $ip_a" "iperf3 -c $ip_a -t 5 -J")
read -r tcp_gbps tcp_bytes < <(/usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
e = j["end"]["sum_received"]
print(e["bits_per_second"] / 1000000000, e["bytes"])' "$out/cli.txt")
printf '%-7s %-34s %9.2f Gb/s %14.2f\n' kernel "iperf3 TCP, 1 stream" "$tcp_gbps" \
  "$(echo "$cpu / ($tcp_bytes / 1000000000)" | bc -l)"
for proto in udp tcp; do
  flag=()
  [[ $proto == tcp ]] && flag=(--tcp)
  in_ns "$ns_a" sockperf sr -i $ip_a "${flag[@]}" >"$out/sr.txt" 2>&1 &
  sr_pid=$!
  wait_listen "$ns_a" 11111
  in_ns "$ns_b" sockperf pp -i $ip_a "${flag[@]}" -m 14 -t 5 >"$out/cli.txt" 2>&1
  kill "$sr_pid"
  wait "$sr_pid" 2>/dev/null || true
  lat=$(grep -oE 'avg-latency=[0-9.]+' "$out/cli.txt" | head -n 1 | cut -d= -f2)
  eval "sock_$proto=$lat"
  printf '%-7s %-34s %9s us\n' kernel "sockperf $proto 14 B (one way)" "$lat"
done

for kind in "${kinds[@]}"; do
  in_ns "$ns_a" "$xroce" link add xbd0 netdev xbd0 port "$kind" >/dev/null
  in_ns "$ns_b" "$xroce" link add xbd1 netdev xbd1 port "$kind" >/dev/null
  da=$(daemon_pid "$ns_a") db=$(daemon_pid "$ns_b")
  d0=$(echo "$(cpu_s "$da") + $(cpu_s "$db")" | bc -l)
  cpu=$(pair 18515 "$xroce exec -- ib_write_bw -d xbd0 -x 0 -s 65536 -n $msgs -F" \
    "$xroce exec -- ib_write_bw -d xbd1 -x 0 -s 65536 -n $msgs -F $ip_a")
  d1=$(echo "$(cpu_s "$da") + $(cpu_s "$db")" | bc -l)
  mbs=$(awk '$1 == 65536 {print $4}' "$out/cli.txt" | head -n 1)
  gbps=$(echo "$mbs * 8 * 1048576 / 1000000000" | bc -l)
  printf '%-7s %-34s %9.2f Gb/s %14.2f   (%.3fx iperf3)\n' "$kind" "ib_write_bw 64 KB" "$gbps" \
    "$(echo "($cpu + $d1 - $d0) / ($bytes / 1000000000)" | bc -l)" "$(echo "$gbps / $tcp_gbps" | bc -l)"
  for prog in ib_send_lat ib_write_lat; do
    pair 18515 "$xroce exec -- $prog -d xbd0 -x 0 -s 2 -n 2000 -F" \
      "$xroce exec -- $prog -d xbd1 -x 0 -s 2 -n 2000 -F $ip_a" >/dev/null
    lat=$(awk '$1 == 2 {print $6}' "$out/cli.txt" | head -n 1)
    typ=$(awk '$1 == 2 {print $5}' "$out/cli.txt" | head -n 1)
    printf '%-7s %-34s %9s us   (%.2fx sockperf udp, %.2fx tcp; t_typical %s us)\n' "$kind" \
      "$prog 2 B (t_avg)" "$lat" "$(echo "$lat / $sock_udp" | bc -l)" \
      "$(echo "$lat / $sock_tcp" | bc -l)" "$typ"
  done
  in_ns "$ns_a" "$xroce" link del xbd0 >/dev/null
  in_ns "$ns_b" "$xroce" link del xbd1 >/dev/null
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
