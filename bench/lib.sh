# shellcheck shell=bash
# Shell helpers the wire benchmarks share (sourced, never run). A benchmark cleans up as a test
# does: every process it started, in its own namespaces or beside them, is gone when it exits,
# also after Ctrl-C or an error.

# Kills every process still running in the given network namespaces (the run's own, uniquely
# named: nothing else runs there), SIGTERM first, then SIGKILL for what is left after 2 s, and
# waits until none is left. The daemon of a namespace counts: it is the run's too.
kill_netns_processes() {
  local ns pids
  for ns in "$@"; do
    [[ -e /var/run/netns/$ns ]] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [[ -n ${pids// /} ]] || continue
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 40); do
      [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break
      sleep 0.05
    done
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    # shellcheck disable=SC2086
    [[ -z ${pids// /} ]] || kill -KILL $pids 2>/dev/null || true
  done
}

# Kills the given pids (processes this script started outside its namespaces: load spinners)
# and reaps them.
kill_pids() {
  local pid
  for pid in "$@"; do
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# Waits until something in namespace $1 listens on TCP or UDP port $2, for at most $3 seconds
# (default 20); says what it waited for when it gives up.
wait_listen() {
  local deadline=$((SECONDS + ${3:-20}))
  while ((SECONDS < deadline)); do
    [[ -n $(ip netns exec "$1" ss -Hlntu sport = ":$2") ]] && return 0
    sleep 0.05  # polling a condition with a deadline
  done
  echo "nothing listens on $2 in $1" >&2
  return 1
}

# The host's load average over 1, 5 and 15 minutes, as "A B C": every figure is reported with it.
load_average() { cut -d' ' -f1-3 /proc/loadavg; }

# json_row KEY=VALUE...: one JSON object on one line, for a script's rows file. A value that
# reads as an integer or a number is one; several numbers separated by spaces are a list (a load
# average); anything else is a string ("FAILED", "-", a command line).
json_row() {
  /usr/bin/python3 - "$@" <<'PY'
import json, re, sys
number = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
def value(text):
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if number.match(text):
        return float(text)
    words = text.split()
    if len(words) > 1 and all(number.match(w) for w in words):
        return [float(w) for w in words]
    return text
row = {}
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    row[k] = value(v)
print(json.dumps(row))
PY
}

# json_document SCRIPT LOAD_START ROWS_FILE: the document a script's JSON_OUT receives: the
# script, the commit, the date, the host (kernel, cores), its load at the start and now, and the
# rows json_row wrote.
json_document() {
  /usr/bin/python3 - "$1" "$2" "$(load_average)" "$3" \
    "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import json, os, platform, sys, time
script, start, end, rows, commit = sys.argv[1:]
json.dump({
    "script": script, "commit": commit,
    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "kernel": platform.release(), "cores": os.cpu_count(),
    "load_start": [float(x) for x in start.split()], "load_end": [float(x) for x in end.split()],
    "rows": [json.loads(line) for line in open(rows)],
}, sys.stdout, indent=1)
print()
PY
}
