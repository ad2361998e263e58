#!/usr/bin/env bash
# The device beside kernel baselines measured in the same run on a veth (MTU 9000) between two
# namespaces. Needs root. Not a test: it prints figures and ratios, and writes them all (with each
# figure's command and the host's load when it was taken) to JSON and an SVG chart.
#
#   bench/bench-device.sh [BUILD_DIR] [PORT_KIND...]     (default: build afxdp udp)
#
# In order: memcpy GB/s and the copy-limit line (copies per byte on each path); the raw frame
# rate of each path with 4 KB frames (bench-ports.sh: kernel UDP sendmmsg/recvmmsg, the UDP
# port, the AF_XDP port); iperf3 (one TCP stream) and its CPU seconds per GB; sockperf
# ping-pong over UDP and TCP (14 B, its smallest message) and the relay floor (the least
# one-way latency of a daemon-shaped path here, bench/relay_floor.cc); then per port kind
# `ib_write_bw -s 65536` (Gb/s, CPU seconds per GB of applications and both daemons, ratios to
# the raw rate of the same path and to iperf3) and `ib_send_lat` / `ib_write_lat -s 2` (typical
# = perftest's median, p99; ratios to sockperf UDP and to the relay floor). Every latency is
# measured three times: with the host as it is ("idle"), and with both cores kept out of idle
# by a spinner per core (an idle vCPU's wakeup takes tens of us and would otherwise dominate
# every round trip), once a `nice 19` busy loop ("busy": a fair-class task, which a woken task
# preempts only when the scheduler finds it eligible, else it runs to the next tick) and once a
# SCHED_IDLE one ("busy-schedidle": preempted by any woken task at once).
#
# Environment: OUT_DIR (default .) receives bench-device.json and bench-device.svg;
# MSGS (default 40000: a second or more at the rates reached, so the start does not dominate)
# ib_write_bw iterations; LAT_ITERS (default 2000); SECONDS_TCP (default 5);
# BUSY_MODES (default "idle busy busy-schedidle"; set and empty: none) picks the latency rows
# (sockperf, the relay floor and perftest's); PROFILE=1 records
# `perf record -g` of both daemons during each ib_write_bw and prints the top
# symbols; RAW=0 skips the raw frame rates; LOOPBACK=0 skips the one-device (loopback) rows;
# WORKER_CPUS=LIST adds `cpus LIST` to both devices' `xroce link add` (their workers bound to
# those CPUs; engine/daemon/README.md, "Where the workers run"), recorded in the JSON.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
build=${1:-build}
shift || true
kinds=("$@")
[[ ${#kinds[@]} -gt 0 ]] || kinds=(afxdp udp)
build=$(cd "$build" && pwd)
xroce=$build/bin/xroce
out_dir=$(mkdir -p "${OUT_DIR:-.}" && cd "${OUT_DIR:-.}" && pwd)
msgs=${MSGS:-40000}
lat_iters=${LAT_ITERS:-2000}
tcp_seconds=${SECONDS_TCP:-5}
read -r -a busy_modes <<<"${BUSY_MODES-idle busy busy-schedidle}"
worker_cpus=${WORKER_CPUS:-}
cpus_words=()
[[ -z $worker_cpus ]] || cpus_words=(cpus "$worker_cpus")
tag=xrbd-$$
ns_a=$tag-a ns_b=$tag-b
if_a=xbd$$a if_b=xbd$$b
ip_a=198.18.220.1 ip_b=198.18.220.2
tmp=$(mktemp -d)
figures=$tmp/figures.jsonl
spinners=()
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

cleanup() {
  local rc=$?
  kill_pids "${spinners[@]}"
  spinners=()
  kill_netns_processes "$ns_a" "$ns_b"
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b"
in_ns "$ns_a" ip addr add $ip_a/24 dev "$if_a"
in_ns "$ns_b" ip addr add $ip_b/24 dev "$if_b"
for ns in "$ns_a" "$ns_b"; do in_ns "$ns" ip link set lo up; done
in_ns "$ns_a" ip link set "$if_a" mtu 9000 up
in_ns "$ns_b" ip link set "$if_b" mtu 9000 up

# record KIND TEST VALUE UNIT COMMAND [KEY=VALUE...]: one figure for the JSON and the chart.
record() {
  local kind=$1 test=$2 value=$3 unit=$4 cmd=$5
  shift 5
  json_row kind="$kind" test="$test" value="$value" unit="$unit" command="$cmd" load="$(load_average)" \
    "$@" >>"$figures"
}
ratio() { echo "$1 / $2" | bc -l; }

cpu_s() {  # CPU seconds (user + system) used so far by a pid
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0
}
daemon_pid() {
  local ino
  ino=$(in_ns "$1" stat -L -c %i /proc/self/ns/net)
  cat "/run/xroce/ns-$ino/xroced.lock"
}

# ib_write_bw's average for 64 KB messages in $tmp/cli.txt, in Gb/s.
bw_gbps() {
  echo "$(awk '$1 == 65536 {print $4; exit}' "$tmp/cli.txt") * 8 * 1048576 / 1000000000" | bc -l
}
# A perftest latency row for 2 B in $tmp/cli.txt (#bytes #iterations t_min t_max t_typical t_avg
# t_stdev 99% 99.9%): typical, average and p99 in us.
lat_row() { awk '$1 == 2 {print $5, $6, $8; exit}' "$tmp/cli.txt"; }

# Runs server (a) and client (b, or the namespace in $cli_ns) under `times`; prints the CPU
# seconds of both and leaves the client's output in $tmp/cli.txt. `ip netns exec` execs bash, so
# $! is the server's shell.
pair() {
  local port=$1 srv=$2 cli=$3 cli_ns=${cli_ns:-$ns_b}
  ip netns exec "$ns_a" bash -c "$srv >$tmp/srv.txt 2>&1; times >$tmp/srv.times" &
  local spid=$!
  wait_listen "$ns_a" "$port" || { kill_pids "$spid"; cat "$tmp/srv.txt" >&2; return 1; }
  ip netns exec "$cli_ns" bash -c "$cli >$tmp/cli.txt 2>&1; times >$tmp/cli.times" ||
    { cat "$tmp/cli.txt" >&2; return 1; }
  wait $spid || { cat "$tmp/srv.txt" >&2; return 1; }
  /usr/bin/python3 - "$tmp/srv.times" "$tmp/cli.times" <<'PY'
import re, sys
total = 0.0
for f in sys.argv[1:]:
    lines = open(f).read().split("\n")
    for m, s in re.findall(r"(\d+)m([\d.]+)s", lines[1]):  # children's user and system time
        total += int(m) * 60 + float(s)
print(f"{total:.2f}")
PY
}

# Both cores out of idle for the latency runs: a busy loop pinned to each core, nice 19 (mode
# "busy") or SCHED_IDLE ("busy-schedidle"); mode "idle" starts none.
spin_start() {
  local c policy
  case $1 in
    idle) return ;;
    busy) policy=(nice -n 19) ;;
    busy-schedidle) policy=(chrt -i 0) ;;
    *) echo "unknown busy mode $1" >&2 && exit 2 ;;
  esac
  for c in $(seq 0 $(($(nproc) - 1))); do
    "${policy[@]}" taskset -c "$c" bash -c 'while :; do :; done' &
    spinners+=($!)
  done
}
spin_stop() {
  kill_pids "${spinners[@]}"
  spinners=()
}

echo "bench-device.sh: $(date -u +%FT%TZ), $(uname -r), $(nproc) cores, load average $(load_average)"
start_load=$(load_average)

# --- memcpy and the copy limit ------------------------------------------------------------
# A 64 MiB bytearray slice assignment is one libc memcpy; best of 5.
memcpy_gbs=$(/usr/bin/python3 -c '
import time
n = 64 << 20
a = bytearray(b"\x5a" * n); b = bytearray(n)
best = 0.0
for _ in range(5):
    t = time.perf_counter(); b[:] = a; dt = time.perf_counter() - t
    best = max(best, n / dt / 1e9)
print(f"{best:.2f}")')
record host "memcpy 64 MiB" "$memcpy_gbs" GB/s "/usr/bin/python3: bytearray slice copy, best of 5"
# Copies of each payload byte from the sender's buffer to the receiver's, counted on the code
# path (bench/README.md "Copies per byte"); the bound is memcpy's rate divided by the copies.
# afxdp (copy mode on veth, 4096-byte MTU frames of 4170 B): the MR into the frame being
# encoded (the transport writes the payload in place, engine/daemon/worker_egress.h); the frame
# to UMEM (the port's transmit); UMEM to an skb (the sendto kick); the skb to page-pool pages
# (veth's XDP receive needs headroom: skb_pp_cow_data); the XDP buffer to the peer's UMEM; into
# the MR (the frame's two UMEM buffers are joined in place, engine/net/afxdp_port.h). udp: the
# frame, into the socket, out of it, into the MR (a segmented send is cut without a copy).
declare -A copies=([tcp]=2 [afxdp]=5 [udp]=4)
printf 'copy limit: memcpy %.2f GB/s; copies per byte and the rate memcpy alone allows:' "$memcpy_gbs"
for p in tcp afxdp udp; do
  printf ' %s %s -> %.1f Gb/s;' "$p" "${copies[$p]}" "$(echo "$memcpy_gbs * 8 / ${copies[$p]}" | bc -l)"
done
echo
printf '%-7s %-40s %14s %10s  %s\n' path test result "cpu s/GB" ratios

# --- raw frame rates, 4 KB frames ---------------------------------------------------------
# Each path twice: plain, and with its receiver busy-polling (BUSY_POLL_US, default 50); the
# faster of the two is the path's ceiling that ib_write_bw is compared with.
declare -A raw_gbps=()
if [[ ${RAW:-1} != 0 ]]; then
  for busy_us in 0 "${BUSY_POLL_US:-50}"; do
    rm -f "$tmp/raw.jsonl"
    FRAMES=${RAW_FRAMES:-200000} JSON_OUT=$tmp/raw.jsonl \
      KINDS="baseline baseline-gso udp udp-nogso afxdp" \
      BUSY_POLL_US=$busy_us "$here/bench-ports.sh" "$build" 4096 >"$tmp/raw.txt" 2>&1 ||
      { cat "$tmp/raw.txt" >&2; exit 1; }
    while read -r k ports_kind g lost; do
      [[ $(echo "$g > ${raw_gbps[$k]:-0}" | bc -l) == 1 ]] && raw_gbps[$k]=$g
      variant=""
      [[ $ports_kind == *-gso ]] && variant=" GSO"
      [[ $ports_kind == *-nogso ]] && variant=" no GSO"
      printf '%-7s %-40s %9.2f Gb/s %10s  lost %s\n' "$k" \
        "raw 4 KB frames$variant, busy poll ${busy_us} us" "$g" "" "$lost"
      record "$k" "raw 4 KB frames$variant busy-poll ${busy_us}us" "$g" Gb/s \
        "FRAMES=${RAW_FRAMES:-200000} KINDS=$ports_kind BUSY_POLL_US=$busy_us bench/bench-ports.sh BUILD 4096" \
        lost="$lost" busy_poll_us="$busy_us"
    done < <(/usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    kind = {"baseline": "kernel", "baseline-gso": "kernel", "udp-nogso": "udp"}.get(r["kind"], r["kind"])
    print(kind, r["kind"], r["rx"]["gbps"], r["tx"]["packets"] - r["rx"]["packets"])' "$tmp/raw.jsonl")
  done
fi

# --- kernel baselines ---------------------------------------------------------------------
cmd="iperf3 -c $ip_a -t $tcp_seconds -J (server iperf3 -s -1)"
cpu=$(pair 5201 "iperf3 -s -1 -B $ip_a" "iperf3 -c $ip_a -t $tcp_seconds -J")
read -r tcp_gbps tcp_bytes < <(/usr/bin/python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))["end"]["sum_received"]
print(e["bits_per_second"] / 1e9, e["bytes"])' "$tmp/cli.txt")
tcp_cpu=$(echo "$cpu / ($tcp_bytes / 1000000000)" | bc -l)
printf '%-7s %-40s %9.2f Gb/s %10.2f\n' kernel "iperf3 TCP, 1 stream" "$tcp_gbps" "$tcp_cpu"
record kernel "iperf3 TCP 1 stream" "$tcp_gbps" Gb/s "$cmd" cpu_s_per_gb="$tcp_cpu"

declare -A sock_typ=() relay_typ_of=()
for busy in "${busy_modes[@]}"; do
  spin_start "$busy"
  for proto in udp tcp; do
    flag=()
    [[ $proto == tcp ]] && flag=(--tcp)
    ip netns exec "$ns_a" sockperf sr -i $ip_a "${flag[@]}" >"$tmp/sr.txt" 2>&1 &
    sr_pid=$!
    wait_listen "$ns_a" 11111
    in_ns "$ns_b" sockperf pp -i $ip_a "${flag[@]}" -m 14 -t 5 >"$tmp/cli.txt" 2>&1
    kill_pids "$sr_pid"
    avg=$(grep -oE 'avg-latency=[0-9.]+' "$tmp/cli.txt" | head -n 1 | cut -d= -f2)
    p50=$(awk '/percentile 50.000/ {print $NF}' "$tmp/cli.txt" | head -n 1)
    p99=$(awk '/percentile 99.000/ {print $NF}' "$tmp/cli.txt" | head -n 1)
    sock_typ[$proto-$busy]=$p50
    printf '%-7s %-40s %11s us %10s  avg %s us, p99 %s us\n' kernel \
      "sockperf $proto 14 B one way, $busy" "$p50" "" "$avg" "$p99"
    record kernel "sockperf $proto 14 B $busy" "$p50" us \
      "sockperf pp -i $ip_a ${flag[*]} -m 14 -t 5 (server sockperf sr)" avg="$avg" p99="$p99" \
      busy="$([[ $busy == idle ]] && echo 0 || echo 1)" spinner="$busy"
  done
  # The floor of a daemon-shaped path on this host (relay_floor.cc): two polling applications
  # and two workers in processes of their own that sleep as xroced's do, 14 B over loopback UDP,
  # each message acknowledged as an RC responder does ("relay-ack"; "relay-sleep" without the
  # ACK), beside its own two-thread ping-pong on the same loopback. What the device adds above
  # relay-ack is its own.
  relay=("$build/bin/bench/xroce-relay-floor" --mode all --round-trips $((lat_iters * 5)) --json)
  "${relay[@]}" >"$tmp/relay.json"
  read -r relay_direct relay_noack relay_typ relay_p99 < <(/usr/bin/python3 -c '
import json, sys
m = {f["mode"]: f for f in json.load(open(sys.argv[1]))["one_way"]}
print(m["direct"]["typical_us"], m["relay-sleep"]["typical_us"], m["relay-ack"]["typical_us"],
      m["relay-ack"]["p99_us"])' "$tmp/relay.json")
  relay_typ_of[$busy]=$relay_typ
  printf '%-7s %-40s %11.1f us %10s  %.2fx its ping-pong (%.1f us), %.2fx sockperf udp; p99 %.1f us; without the ACK %.1f us\n' \
    kernel "relay floor 14 B one way, $busy" "$relay_typ" "" "$(ratio "$relay_typ" "$relay_direct")" \
    "$relay_direct" "$(ratio "$relay_typ" "${sock_typ[udp-$busy]}")" "$relay_p99" "$relay_noack"
  record kernel "relay floor 14 B $busy" "$relay_typ" us "${relay[*]}" p99="$relay_p99" \
    direct_us="$relay_direct" without_ack_us="$relay_noack" \
    ratio_direct="$(ratio "$relay_typ" "$relay_direct")" \
    ratio_sockperf_udp="$(ratio "$relay_typ" "${sock_typ[udp-$busy]}")" \
    busy="$([[ $busy == idle ]] && echo 0 || echo 1)" spinner="$busy"
  spin_stop
done

# --- the device ---------------------------------------------------------------------------
bytes=$((65536 * msgs))
for kind in "${kinds[@]}"; do
  in_ns "$ns_a" "$xroce" link add xbd0 netdev "$if_a" port "$kind" "${cpus_words[@]}" >/dev/null
  in_ns "$ns_b" "$xroce" link add xbd1 netdev "$if_b" port "$kind" "${cpus_words[@]}" >/dev/null
  da=$(daemon_pid "$ns_a") db=$(daemon_pid "$ns_b")
  # perftest polls its CQ without pause (a whole core for the run, as on a hardware NIC). Its
  # -e (sleep on a completion channel) is refused for WRITE, so the sleeping variant is
  # ib_send_bw -e: the applications then take little CPU and the CPU per GB is the device's.
  for ev in "" "-e"; do
    prog=ib_write_bw
    [[ -n $ev ]] && prog=ib_send_bw
    label="$prog 64 KB${ev:+ $ev}"
    # perftest spends ~0.2 CPU s per process before it moves a byte (its clock calibration
    # spins on gettimeofday): measured with a 5-message run and left out of the applications'
    # CPU per GB, which is the transfer's.
    startup=$(pair 18515 "$xroce exec -- $prog -d xbd0 -x 0 -s 65536 -n 5 -F $ev" \
      "$xroce exec -- $prog -d xbd1 -x 0 -s 65536 -n 5 -F $ev $ip_a") || startup=0
    d0=$(echo "$(cpu_s "$da") + $(cpu_s "$db")" | bc -l)
    if [[ ${PROFILE:-0} == 1 && -z $ev ]]; then
      perf record -g -o "$tmp/perf-$kind.data" -p "$da,$db" >/dev/null 2>&1 &
      perf_pid=$!
    fi
    cmd="$prog -d xbd1 -x 0 -s 65536 -n $msgs -F $ev $ip_a (xroce exec; server -d xbd0)"
    if ! cpu=$(pair 18515 "$xroce exec -- $prog -d xbd0 -x 0 -s 65536 -n $msgs -F $ev" \
      "$xroce exec -- $prog -d xbd1 -x 0 -s 65536 -n $msgs -F $ev $ip_a"); then
      echo "$kind $label: failed (its output above)"
      continue
    fi
    d1=$(echo "$(cpu_s "$da") + $(cpu_s "$db")" | bc -l)
    if [[ ${PROFILE:-0} == 1 && -z $ev ]]; then
      kill -INT "$perf_pid"
      wait "$perf_pid" || true
      echo "perf record -g -p <both daemons> during ib_write_bw, $kind: top symbols (self)"
      { perf report -i "$tmp/perf-$kind.data" --no-children --sort symbol --stdio 2>/dev/null |
        grep -E '^ +[0-9.]+%' | head -n 30 | cut -c1-100; } || true  # head closes the pipe
      cp "$tmp/perf-$kind.data" "$out_dir/perf-$kind.data"
    fi
    gbps=$(bw_gbps)
    app_cpu=$(echo "a = $cpu - $startup; if (a < 0) a = 0; a" | bc -l)
    cpu_gb=$(echo "($app_cpu + $d1 - $d0) / ($bytes / 1000000000)" | bc -l)
    app_gb=$(echo "$app_cpu / ($bytes / 1000000000)" | bc -l)
    raw=${raw_gbps[$kind]:-0}
    raw_ratio=0
    [[ $raw != 0 ]] && raw_ratio=$(ratio "$gbps" "$raw")
    printf '%-7s %-40s %9.2f Gb/s %10.2f  %.3fx raw %s, %.3fx iperf3; cpu %.2fx TCP (applications %.2f s/GB, daemons %.2f)\n' \
      "$kind" "$label" "$gbps" "$cpu_gb" "$raw_ratio" "$kind" \
      "$(ratio "$gbps" "$tcp_gbps")" "$(ratio "$cpu_gb" "$tcp_cpu")" "$app_gb" \
      "$(echo "$cpu_gb - $app_gb" | bc -l)"
    record "$kind" "$label" "$gbps" Gb/s "$cmd" cpu_s_per_gb="$cpu_gb" \
      app_cpu_s_per_gb="$app_gb" perftest_startup_cpu_s="$startup" ratio_raw="$raw_ratio" \
      ratio_iperf3="$(ratio "$gbps" "$tcp_gbps")" ratio_cpu_tcp="$(ratio "$cpu_gb" "$tcp_cpu")"
  done
  for busy in "${busy_modes[@]}"; do
    spin_start "$busy"
    for prog in ib_send_lat ib_write_lat; do
      if ! pair 18515 "$xroce exec -- $prog -d xbd0 -x 0 -s 2 -n $lat_iters -F" \
        "$xroce exec -- $prog -d xbd1 -x 0 -s 2 -n $lat_iters -F $ip_a" >/dev/null; then
        echo "$kind $prog $busy: failed (its output above)"
        continue
      fi
      read -r typ avg p99 < <(lat_row)
      printf '%-7s %-40s %11s us %10s  %.2fx sockperf udp, %.2fx the relay floor; p99 %s us = %.1fx typical; avg %s us\n' \
        "$kind" "$prog 2 B typical, $busy" "$typ" "" "$(ratio "$typ" "${sock_typ[udp-$busy]}")" \
        "$(ratio "$typ" "${relay_typ_of[$busy]}")" "$p99" "$(ratio "$p99" "$typ")" "$avg"
      record "$kind" "$prog 2 B $busy" "$typ" us \
        "$prog -d xbd1 -x 0 -s 2 -n $lat_iters -F $ip_a (xroce exec; server -d xbd0)" avg="$avg" \
        p99="$p99" ratio_sockperf_udp="$(ratio "$typ" "${sock_typ[udp-$busy]}")" \
        ratio_relay_floor="$(ratio "$typ" "${relay_typ_of[$busy]}")" \
        busy="$([[ $busy == idle ]] && echo 0 || echo 1)" spinner="$busy"
    done
    spin_stop
  done
  # Loopback: server and client on the one device xbd0 (its own GID; the daemon loops the frames
  # back, none reaches the veth), beside the two-namespace figures above. LOOPBACK=0 skips it.
  if [[ ${LOOPBACK:-1} == 1 ]]; then
    if cpu=$(cli_ns=$ns_a pair 18515 "$xroce exec -- ib_write_bw -d xbd0 -x 0 -s 65536 -n $msgs -F" \
      "$xroce exec -- ib_write_bw -d xbd0 -x 0 -s 65536 -n $msgs -F $ip_a"); then
      gbps=$(bw_gbps)
      printf '%-7s %-40s %9.2f Gb/s %10s  applications %.2f CPU s\n' "$kind" \
        "loopback ib_write_bw 64 KB, one device" "$gbps" "" "$cpu"
      record "$kind" "loopback ib_write_bw 64 KB" "$gbps" Gb/s \
        "ib_write_bw -d xbd0 -x 0 -s 65536 -n $msgs -F $ip_a (xroce exec; server -d xbd0, same namespace)"
    else
      echo "$kind loopback ib_write_bw: failed (its output above)"
    fi
    for busy in "${busy_modes[@]}"; do
      spin_start "$busy"
      if cli_ns=$ns_a pair 18515 "$xroce exec -- ib_send_lat -d xbd0 -x 0 -s 2 -n $lat_iters -F" \
        "$xroce exec -- ib_send_lat -d xbd0 -x 0 -s 2 -n $lat_iters -F $ip_a" >/dev/null; then
        read -r typ avg p99 < <(lat_row)
        printf '%-7s %-40s %11s us %10s  %.2fx sockperf udp; p99 %s us; avg %s us\n' "$kind" \
          "loopback ib_send_lat 2 B typical, $busy" "$typ" "" \
          "$(ratio "$typ" "${sock_typ[udp-$busy]}")" "$p99" "$avg"
        record "$kind" "loopback ib_send_lat 2 B $busy" "$typ" us \
          "ib_send_lat -d xbd0 -x 0 -s 2 -n $lat_iters -F $ip_a (xroce exec; server -d xbd0, same namespace)" \
          avg="$avg" p99="$p99" busy="$([[ $busy == idle ]] && echo 0 || echo 1)" spinner="$busy"
      else
        echo "$kind loopback ib_send_lat $busy: failed (its output above)"
      fi
      spin_stop
    done
  fi
  in_ns "$ns_a" "$xroce" link del xbd0 >/dev/null
  in_ns "$ns_b" "$xroce" link del xbd1 >/dev/null
done
# --- scaling with workers: 2 flows on a veth with 2 queues, 1 worker vs 2 ---------------------
# A second veth pair with 2 tx and 2 rx queues; `xroce link add ... queues Q` gives one worker
# per queue. The two flows are two ib_write_bw processes at once (-D SCALE_S seconds each, ports
# 18515 and 18516), not one `ib_write_bw -q 2`: perftest gives all of a process's QPs one CQ, and
# a device keeps the QPs of one CQ on one worker (a CQ ring has one producer), so -q 2 never used
# the second worker. Each process's QP goes to its device's least loaded worker; the row says on
# how many workers the RC QPs of each side ran (`xroce qp show`, sampled while they run) and
# whether the aggregate (the sum of the two averages) grows with the workers on this host.
# SCALE_KINDS (default afxdp; empty: none) says which port kinds are measured.
scale_s=${SCALE_S:-4}
# Distinct workers with RC QPs on device $2 in namespace $1 (qp show's "worker").
qp_workers() {
  in_ns "$1" "$xroce" qp show "$2" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
try:
    qps = json.load(sys.stdin)
except ValueError:
    qps = []
print(len({q.get("worker", 0) for q in qps if q.get("type") == "RC"}))'
}
# Two ib_write_bw pairs at once between devices xbq0 (a) and xbq1 (b); prints "GBPS WA WB": the
# sum of their average Gb/s and the workers the RC QPs of a and of b ran on, or fails.
two_flows() {
  local i pids=() wa=0 wb=0 n
  for i in 0 1; do
    in_ns "$ns_a" "$xroce" exec -- ib_write_bw -d xbq0 -x 0 -s 65536 -D "$scale_s" -F \
      -p $((18515 + i)) >"$tmp/srv$i.txt" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do wait_listen "$ns_a" $((18515 + i)) || { kill_pids "${pids[@]}"; return 1; }; done
  for i in 0 1; do
    in_ns "$ns_b" "$xroce" exec -- ib_write_bw -d xbq1 -x 0 -s 65536 -D "$scale_s" -F \
      -p $((18515 + i)) 198.18.221.1 >"$tmp/cli$i.txt" 2>&1 &
    pids+=($!)
  done
  # Sampled while the flows run (every 0.2 s until both sides show two workers or the clients
  # end): the QPs exist from the connection on, the workers they run on do not change.
  while kill -0 "${pids[2]}" 2>/dev/null && kill -0 "${pids[3]}" 2>/dev/null; do
    n=$(qp_workers "$ns_a" xbq0); ((n > wa)) && wa=$n
    n=$(qp_workers "$ns_b" xbq1); ((n > wb)) && wb=$n
    ((wa >= 2 && wb >= 2)) && break
    sleep 0.2  # a sampling period, not a wait for a condition
  done
  local failed=0
  for i in "${pids[@]}"; do wait "$i" || failed=1; done
  if ((failed)); then
    cat "$tmp"/srv[01].txt "$tmp"/cli[01].txt >&2
    return 1
  fi
  awk -v wa="$wa" -v wb="$wb" '$1 == 65536 { s += $4; n++ }
    END { if (n != 2) exit 1; printf "%.2f %d %d\n", s * 8 * 1048576 / 1e9, wa, wb }' \
    "$tmp/cli0.txt" "$tmp/cli1.txt"
}
ip link add "${if_a}q" netns "$ns_a" numtxqueues 2 numrxqueues 2 type veth peer name "${if_b}q" \
  netns "$ns_b" numtxqueues 2 numrxqueues 2
in_ns "$ns_a" ip addr add 198.18.221.1/24 dev "${if_a}q"
in_ns "$ns_b" ip addr add 198.18.221.2/24 dev "${if_b}q"
in_ns "$ns_a" ip link set "${if_a}q" mtu 9000 up
in_ns "$ns_b" ip link set "${if_b}q" mtu 9000 up
for kind in ${SCALE_KINDS-afxdp}; do
  for queues in 1 2; do
    in_ns "$ns_a" "$xroce" link add xbq0 netdev "${if_a}q" port "$kind" queues $queues >/dev/null
    in_ns "$ns_b" "$xroce" link add xbq1 netdev "${if_b}q" port "$kind" queues $queues >/dev/null
    da=$(daemon_pid "$ns_a") db=$(daemon_pid "$ns_b")
    d0=$(echo "$(cpu_s "$da") + $(cpu_s "$db")" | bc -l)
    if ! read -r gbps wa wb < <(two_flows); then
      echo "$kind two ib_write_bw flows, queues $queues: failed (their output above)"
    else
      # The daemons' CPU seconds per GB moved (the flows' own processes not counted).
      d1=$(echo "$(cpu_s "$da") + $(cpu_s "$db")" | bc -l)
      cpu_gb=$(echo "($d1 - $d0) / ($gbps * $scale_s / 8)" | bc -l)
      printf '%-7s %-40s %9.2f Gb/s %10.2f   QPs on %d and %d worker(s)\n' "$kind" \
        "2 x ib_write_bw, $queues worker(s) a side" "$gbps" "$cpu_gb" "$wa" "$wb"
      record "$kind" "ib_write_bw 64 KB, 2 processes, queues $queues" "$gbps" Gb/s \
        "2 x ib_write_bw -d xbq1 -x 0 -s 65536 -D $scale_s -F -p 18515|18516 (xroce link add ... queues $queues; veth numtxqueues 2 numrxqueues 2)" \
        daemons_cpu_s_per_gb="$cpu_gb" queues="$queues" workers_a="$wa" workers_b="$wb"
    fi
    in_ns "$ns_a" "$xroce" link del xbq0 >/dev/null
    in_ns "$ns_b" "$xroce" link del xbq1 >/dev/null
  done
done

end_load=$(load_average)
echo "load average at the end: $end_load on $(nproc) cores; workers bound to CPUs: ${worker_cpus:-none}"

/usr/bin/python3 - "$figures" "$out_dir/bench-device.json" "$start_load" "$end_load" \
  "$memcpy_gbs" "tcp=${copies[tcp]} afxdp=${copies[afxdp]} udp=${copies[udp]}" \
  "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$worker_cpus" <<'PY'
import json, os, platform, sys, time
figures, path, start, end, memcpy, copies, commit, worker_cpus = sys.argv[1:]
doc = {
    "script": "bench/bench-device.sh", "commit": commit,
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "kernel": platform.release(), "cores": os.cpu_count(),
    "load_start": [float(x) for x in start.split()], "load_end": [float(x) for x in end.split()],
    "memcpy_gbs": float(memcpy), "worker_cpus": worker_cpus,
    "copies_per_byte": {k: int(v) for k, v in (kv.split("=") for kv in copies.split())},
    "figures": [json.loads(line) for line in open(figures)],
}
json.dump(doc, open(path, "w"), indent=1)
PY
/usr/bin/python3 "$here/bench_svg.py" "$out_dir/bench-device.json" "$out_dir/bench-device.svg"
echo "wrote $out_dir/bench-device.json and $out_dir/bench-device.svg"
