#!/usr/bin/env bash
# Packet rate of the AF_XDP port, the UDP (io_uring) port and kernel UDP sockets
# (sendmmsg/recvmmsg, the baseline) between two namespaces joined by a veth pair, MTU 9000,
# at the given frame sizes, all in the same run. Needs root. Not a test: it prints figures.
#   bench/bench-ports.sh [BUILD_DIR] [SIZES...]     (default: build 64 4096)
# FRAMES=N sets the frames per run (default 1,000,000, and 200,000 above 1500 bytes);
# JSON_OUT=FILE appends one JSON object per measurement to FILE (bench-device.sh reads them);
# KINDS="baseline udp afxdp afxdp-skb" (the default) chooses what is measured; also
# baseline-gso (kernel UDP, 16 datagrams per send with UDP segmentation offload, as the UDP
# port sends a 64 KiB message, read with UDP receive offload, as the UDP port reads), udp-nogso
# (the UDP port, one send per frame) and udp-nogro (the UDP port, one datagram per receive);
# BUSY_POLL_US=N makes every receiver busy-poll (SO_BUSY_POLL, and SO_PREFER_BUSY_POLL on the
# AF_XDP socket) for up to N us per empty receive.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
build=${1:-build}
shift || true
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(64 4096)
bin=$(cd "$build/bin" && pwd)
tag=xrbench-$$
ns_a=$tag-a ns_b=$tag-b
if_a=xba$$ if_b=xbb$$
ip_a=198.18.200.1 ip_b=198.18.200.2
out=$(mktemp -d)
cleanup() {
  kill_netns_processes "$ns_a" "$ns_b"
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$if_a" netns "$ns_a" type veth peer name "$if_b" netns "$ns_b"
ip -n "$ns_a" link set "$if_a" mtu 9000 up
ip -n "$ns_b" link set "$if_b" mtu 9000 up
ip -n "$ns_a" addr add $ip_a/24 dev "$if_a"
ip -n "$ns_b" addr add $ip_b/24 dev "$if_b"
mac_b=$(ip -n "$ns_b" -br link show dev "$if_b" | awk '{print $3}')
mac_a=$(ip -n "$ns_a" -br link show dev "$if_a" | awk '{print $3}')
ip -n "$ns_a" neigh replace $ip_b lladdr "$mac_b" dev "$if_a" nud permanent
ip -n "$ns_b" neigh replace $ip_a lladdr "$mac_a" dev "$if_b" nud permanent

# nsenter keeps the host's /sys (and its bpffs), unlike `ip netns exec`.
in_ns() { local ns=$1; shift; nsenter --net=/var/run/netns/"$ns" "$@"; }

wait_ready() {  # the receiver prints "ready" on stderr once it listens
  for _ in $(seq 1 200); do
    grep -q '^ready' "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "receiver did not start:"; cat "$1"; return 1
}

run_pair() {  # kind size frames
  local kind=$1 size=$2 frames=$3 rx tx
  if [[ $kind == baseline* ]]; then
    rx=("$bin/bench/xroce-udp-baseline" --role rx)
    tx=("$bin/bench/xroce-udp-baseline" --role tx --dst "$ip_b")
    if [[ $kind == baseline-gso ]]; then
      tx+=(--gso-segments 16)
      rx+=(--gro)
    fi
  else
    local port=$kind mode=()
    if [[ $kind == afxdp-skb ]]; then port=afxdp mode=(--xdp-mode skb); fi
    if [[ $kind == udp-nogso ]]; then port=udp mode=(--no-gso); fi
    if [[ $kind == udp-nogro ]]; then port=udp mode=(--no-gro); fi
    rx=("$bin/xroce" bench port --dev "$if_b" --port "$port" "${mode[@]}" --role rx)
    tx=("$bin/xroce" bench port --dev "$if_a" --port "$port" "${mode[@]}" --role tx --dst "$ip_b"
      --dst-mac "$mac_b")
  fi
  [[ ${BUSY_POLL_US:-0} == 0 ]] || rx+=(--busy-poll-us "$BUSY_POLL_US")
  in_ns "$ns_b" "${rx[@]}" --frames "$frames" --size "$size" --idle-ms 1000 --json \
    >"$out/rx.json" 2>"$out/rx.err" &
  local rx_pid=$!
  wait_ready "$out/rx.err"
  in_ns "$ns_a" "${tx[@]}" --frames "$frames" --size "$size" --json >"$out/tx.json" 2>"$out/tx.err"
  wait $rx_pid
  /usr/bin/python3 - "$kind" "$size" "$out/tx.json" "$out/rx.json" "${JSON_OUT:-}" <<'PY'
import json, sys
kind, size, txf, rxf, json_out = sys.argv[1:]
tx = json.load(open(txf)); rx = json.load(open(rxf))
lost = tx["packets"] - rx["packets"]
if json_out:
    with open(json_out, "a") as f:
        f.write(json.dumps({"kind": kind, "size": int(size), "tx": tx, "rx": rx,
                            "load": open("/proc/loadavg").read().split()[:3]}) + "\n")
print(f"{kind:10} {size:>5} B  mode {rx['mode']:<18} tx {tx['pps']/1e6:7.3f} Mpps  "
      f"rx {rx['pps']/1e6:7.3f} Mpps {rx['gbps']:7.2f} Gbit/s  sent {tx['packets']} "
      f"received {rx['packets']} lost {lost} rx-drops {rx['drops']}")
PY
}

for size in "${sizes[@]}"; do
  frames=${FRAMES:-1000000}
  [[ -z ${FRAMES:-} && $size -gt 1500 ]] && frames=200000
  for kind in ${KINDS:-baseline udp afxdp afxdp-skb}; do
    run_pair "$kind" "$size" "$frames"
  done
done
