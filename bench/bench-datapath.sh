#!/bin/sh
# bench/bench-datapath.sh [BUILD_DIR] [PACKETS]
#
# The data path in one process (bench/datapath_bench.cc: two workers over an in-memory port, the
# real DMA paths), every case: nanoseconds per data packet from Google Benchmark (CPU and wall
# time of the benchmark thread), then instructions per data packet from callgrind, which counts
# user-space instructions exactly (the same figure on every run of the same binary; perf has no
# instruction counter in this VM). PACKETS (default 20000) data packets are counted per case,
# after a warm-up. Needs valgrind.
set -eu

build=${1:-build}
packets=${2:-20000}
bin=$build/bin/bench/bench_datapath
[ -x "$bin" ] || { echo "bench-datapath.sh: no $bin (build the bench_datapath target)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "bench-datapath.sh: valgrind is not installed" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "== time per data packet (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
"$bin" --benchmark_min_time=0.5

echo
echo "== instructions per data packet (callgrind, $packets data packets per case)"
printf '%-22s %14s %14s\n' case instructions frames/packet
for c in $("$bin" --list-cases); do
  line=$(valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$tmp/out" \
           "$bin" --packets="$packets" --case="$c" 2>/dev/null)
  ir=$(sed -n 's/^summary: //p' "$tmp/out")
  # "case NAME data_packets N frames F turns T"
  echo "$line" | awk -v ir="$ir" '{ printf "%-22s %14.0f %14.3f\n", $2, ir / $4, $6 / $4 }'
done
