#!/usr/bin/env bash
# The device's performance goals (bench/README.md "Against every goal in one run": bandwidth
# against the raw path and TCP, latency against UDP, 1,000 QPs, 2 % loss) from one
# run of the three wire benchmarks, then one table of goal, figure, target and whether it was met
# (bench/goals.py):
#   bench-device.sh  bandwidth against the raw path and iperf3, CPU per byte against TCP's, and
#                    2-byte latency against sockperf UDP, as the host is and with both cores kept
#                    out of idle (BUSY_MODES, default "idle busy-schedidle"); the bandwidth part
#                    BW_ROUNDS times (default 3: afxdp ib_write_bw moved from 8.64 to 13.65 Gb/s
#                    between two runs of 2026-12-06; the goals are judged on the median of the
#                    rounds' ratios), the latency rows in the first round only
#   bench-qps.sh     -q 64 and -q 1000 against -q 1 in the same round, QPS_ROUNDS rounds
#                    (default 3: one round's ratio moved from 0.69x to 0.98x between runs; the
#                    goal is judged on the median), and the retransmissions on the clean link
#   bench-loss.sh    ib_write_bw and ib_read_bw at 2 % loss against the clean rate of the same
#                    round, the loss made by the devices themselves (IMPAIR=device: the rate is
#                    the devices' own), LOSS_ROUNDS rounds (default 3: udp READ's ratio moved
#                    from 0.49x to 0.31x between runs; the goal is judged on the median)
# Each writes its JSON into OUT_DIR (default ./bench-goals-DATE): bench-device.json and .svg
# (bandwidth-round-N/bench-device.json for the rounds after the first), qps.json, loss.json,
# and goals.json with the table's rows. Not a test: figures on a shared host move between
# minutes, so every ratio is to a baseline of the same round. Needs root; about 13 minutes on
# two cores. Wire benchmarks run one at a time on a shared host:
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
device=(--device "$out/bench-device.json")
for ((round = 2; round <= ${BW_ROUNDS:-3}; round++)); do
  echo "=== bench-device.sh, bandwidth round $round ($(date -u +%T), load $(load_average))"
  OUT_DIR=$out/bandwidth-round-$round LOOPBACK=0 SCALE_KINDS='' BUSY_MODES='' \
    "$here/bench-device.sh" "$build" afxdp udp
  device+=(--device "$out/bandwidth-round-$round/bench-device.json")
done
echo "=== bench-qps.sh ($(date -u +%T), load $(load_average))"
JSON_OUT=$out/qps.json ROUNDS=${QPS_ROUNDS:-3} "$here/bench-qps.sh" "$build" 64 1000
echo "=== bench-loss.sh ($(date -u +%T), load $(load_average))"
JSON_OUT=$out/loss.json IMPAIR=device RTT_SAMPLE_S=0 ROUNDS=${LOSS_ROUNDS:-3} \
  "$here/bench-loss.sh" "$build" 5 0 0.02
echo "=== goals ($(date -u +%T))"
/usr/bin/python3 "$here/goals.py" "${device[@]}" --qps "$out/qps.json" \
  --loss "$out/loss.json" --json "$out/goals.json"
echo "wrote $out"
