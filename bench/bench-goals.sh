#!/usr/bin/env bash
# The device's performance goals (bench/README.md "Against every goal in one run": bandwidth
# against the raw path and TCP, latency against UDP, 1,000 QPs, 2 % loss) from one
# run of the three wire benchmarks, then one table of goal, figure, target and whether it was met
# (bench/goals.py):
#   bench-device.sh  bandwidth against the raw path and iperf3, CPU per byte against TCP's, and
#                    2-byte latency against sockperf UDP, as the host is and with both cores kept
#                    out of idle (BUSY_MODES, default "idle busy-schedidle")
#   bench-qps.sh     -q 64 and -q 1000 against -q 1 in the same round, QPS_ROUNDS rounds
#                    (default 3: one round's ratio moved from 0.69x to 0.98x between runs; the
#                    goal is judged on the median), and the retransmissions on the clean link
#   bench-loss.sh    ib_write_bw and ib_read_bw at 2 % loss against the clean rate of the same
#                    round, the loss made by the devices themselves (IMPAIR=device: the rate is
#                    the devices' own), LOSS_ROUNDS rounds (default 3: udp READ's ratio moved
#                    from 0.49x to 0.31x between runs; the goal is judged on the median)
# Each writes its JSON into OUT_DIR (default ./bench-goals-DATE): bench-device.json and .svg,
# qps.json, loss.json, and goals.json with the table's rows. Not a test: figures on a shared
# host move between minutes, so every ratio is to a baseline of the same run. Needs root; about
# twelve minutes on two cores. Wire benchmarks run one at a time on a shared host:
#   flock /tmp/xroce-bench.lock bench/bench-goals.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
build=$(cd "${1:-build}" && pwd)
out=${OUT_DIR:-bench-goals-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

echo "=== bench-device.sh ($(date -u +%T), load $(load_average))"
OUT_DIR=$out LOOPBACK=0 SCALE_KINDS='' BUSY_MODES=${BUSY_MODES:-idle busy-schedidle} \
  "$here/bench-device.sh" "$build" afxdp udp
echo "=== bench-qps.sh ($(date -u +%T), load $(load_average))"
JSON_OUT=$out/qps.json ROUNDS=${QPS_ROUNDS:-3} "$here/bench-qps.sh" "$build" 64 1000
echo "=== bench-loss.sh ($(date -u +%T), load $(load_average))"
JSON_OUT=$out/loss.json IMPAIR=device RTT_SAMPLE_S=0 ROUNDS=${LOSS_ROUNDS:-3} \
  "$here/bench-loss.sh" "$build" 5 0 0.02
echo "=== goals ($(date -u +%T))"
/usr/bin/python3 "$here/goals.py" --device "$out/bench-device.json" --qps "$out/qps.json" \
  --loss "$out/loss.json" --json "$out/goals.json"
echo "wrote $out"
