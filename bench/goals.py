#!/usr/bin/python3
"""The device's performance goals against the figures of one bench-goals.sh run: one row per goal and port
kind (and per latency mode, QP count, round), the figure, the target, and whether it was met.

Reads what the wire benchmarks wrote: bench-device.sh's bench-device.json (bandwidth against the
raw path and iperf3, CPU per byte against TCP's, latency against sockperf UDP and p99 against
typical; given more than once, one file per round, the bandwidth goals are judged on the median
of the rounds' ratios and the latency rows come from the rounds that measured latency),
bench-qps.sh's JSON_OUT (many QPs against one, and retransmissions on a clean link) and
bench-loss.sh's JSON_OUT (2 % loss against the clean rate). A file not given, or a figure
a file does not hold, gives no row: the table says what was measured, never a default.

  bench/goals.py [--device FILE]... [--qps FILE] [--loss FILE] [--json OUT]

Prints the table, then "goals: N met, N not met"; --json writes the rows and those counts.
Exit status 0 whether goals were met or not (a benchmark, not a test); 2 on unreadable input.
"""
import argparse
import json
import sys

# The goals' thresholds (bench/README.md "Against every goal in one run").
RAW_RATIO = 0.9  # ib_write_bw >= 0.9x the raw frame rate of the same path
IPERF_RATIO = 1.0  # ... and >= 1.0x iperf3 once the path allows it
CPU_RATIO = 1.5  # CPU s/GB <= 1.5x TCP's
LATENCY_RATIO = 1.0  # typical <= 1.0x sockperf UDP, as the host is and with cores kept busy
P99_RATIO = 3.0  # p99 <= 3x typical
QPS_RATIO = 0.9  # aggregate >= 90 % of the one-QP rate
LOSS_RATIO = 0.5  # >= 50 % of the lossless rate at 2 % loss
LOSS = 0.02
# Counters that grow only when a packet is sent again: none may on a clean link.
RETRANSMISSIONS = ("adaptive_retransmits", "tail_probes", "completer_retry_err")


def row(goal, port, measured, target, met, detail=""):
    return {"goal": goal, "port": port, "measured": measured, "target": target, "met": met,
            "detail": detail}


def clean_link_row(goal, r):
    """Nothing is sent again on a clean link: the RETRANSMISSIONS counters of row `r`."""
    resent = {name: r.get(name, 0) for name in RETRANSMISSIONS}
    return row(goal, r["port"], sum(resent.values()), "0", sum(resent.values()) == 0,
               ", ".join(f"{k} {v}" for k, v in resent.items()))


def bandwidth_figures(doc):
    """One bench-device.json's iperf3 figure (None if absent), its raw rate per port kind (the
    fastest of the raw path's variants) and its `ib_write_bw 64 KB` figures."""
    figures = doc.get("figures", [])
    tcp = next((f for f in figures if f["kind"] == "kernel" and f["test"].startswith("iperf3")),
               None)
    raw = {}
    for f in figures:
        if f["test"].startswith("raw 4 KB frames"):
            raw[f["kind"]] = max(raw.get(f["kind"], 0.0), f["value"])
    bw = [f for f in figures
          if f["kind"] not in ("host", "kernel") and f["test"] == "ib_write_bw 64 KB"]
    return tcp, raw, bw


def device_rows(docs):
    """The bandwidth rows of one round's figures, or over several rounds (bench-goals.sh
    BW_ROUNDS) the median of the rounds' ratios, which the goals are judged on; then the latency
    rows of every round that measured latency."""
    rows = bandwidth_rows(docs[0]) if len(docs) == 1 else bandwidth_median_rows(docs)
    for doc in docs:
        rows += latency_rows(doc)
    return rows


def by_round(figures, key):
    """`key` of each round's figure, two decimals, "-" for a round without one."""
    return " ".join("-" if f is None else f"{f[key]:.2f}" for f in figures)


def bandwidth_median_rows(docs):
    rounds = [bandwidth_figures(doc) for doc in docs]
    ports = list(dict.fromkeys(f["kind"] for _, _, bw in rounds for f in bw))
    rows = []
    for port in ports:
        # Per round: (ib_write_bw's figure of this port, raw rate, iperf3 figure), or None.
        per_round = []
        for tcp, raw, bw in rounds:
            f = next((f for f in bw if f["kind"] == port), None)
            per_round.append((f, raw.get(port, 0.0), tcp))
        figs = [f for f, _, _ in per_round]
        tcps = [t for _, _, t in per_round]

        def ratios(key):
            return [None if f is None or not f.get(key, 0) > 0 else f[key] for f in figs]

        gbps = by_round(figs, "value")
        raw_shown = " ".join(f"{r:.2f}" for _, r, _ in per_round)
        rows.append(median_row("ib_write_bw 64 KB vs the raw path", port, ratios("ratio_raw"),
                               RAW_RATIO, f"; by round: Gb/s {gbps}, raw {raw_shown}"))
        if all(t is None for t in tcps):
            continue
        rows.append(median_row("ib_write_bw 64 KB vs iperf3", port, ratios("ratio_iperf3"),
                               IPERF_RATIO,
                               f"; by round: Gb/s {gbps}, iperf3 {by_round(tcps, 'value')}"))
        rows.append(median_row("ib_write_bw CPU s/GB vs TCP's", port, ratios("ratio_cpu_tcp"),
                               CPU_RATIO,
                               f"; by round: s/GB {by_round(figs, 'cpu_s_per_gb')}, "
                               f"TCP {by_round(tcps, 'cpu_s_per_gb')}", at_most=True))
    return rows


def bandwidth_rows(doc):
    tcp, raw, bw = bandwidth_figures(doc)
    rows = []
    for f in bw:
        port = f["kind"]
        if f.get("ratio_raw", 0) > 0:
            rows.append(row("ib_write_bw 64 KB vs the raw path", port, f["ratio_raw"],
                            f">= {RAW_RATIO}x", f["ratio_raw"] >= RAW_RATIO,
                            f"{f['value']:.2f} Gb/s, raw {raw.get(port, 0):.2f}"))
        if tcp is not None:
            allows = raw.get(port, 0) >= tcp["value"]
            detail = f"{f['value']:.2f} Gb/s, iperf3 {tcp['value']:.2f}"
            if not allows:
                detail += "; raw path below iperf3" if port in raw else "; raw path not measured"
            rows.append(row("ib_write_bw 64 KB vs iperf3", port, f["ratio_iperf3"],
                            f">= {IPERF_RATIO}x", f["ratio_iperf3"] >= IPERF_RATIO, detail))
            rows.append(row("ib_write_bw CPU s/GB vs TCP's", port, f["ratio_cpu_tcp"],
                            f"<= {CPU_RATIO}x", f["ratio_cpu_tcp"] <= CPU_RATIO,
                            f"{f['cpu_s_per_gb']:.2f} s/GB, TCP {tcp['cpu_s_per_gb']:.2f}"))
    return rows


def latency_rows(doc):
    rows = []
    for f in doc.get("figures", []):
        test = f["test"]
        if f["kind"] in ("host", "kernel") or "2 B" not in test or test.startswith("loopback"):
            continue
        prog, spinner = test.split(" 2 B ")[0], f.get("spinner", test.rsplit(" ", 1)[-1])
        if "ratio_sockperf_udp" in f:
            rows.append(row(f"{prog} 2 B typical vs sockperf UDP, {spinner}", f["kind"],
                            f["ratio_sockperf_udp"], f"<= {LATENCY_RATIO}x",
                            f["ratio_sockperf_udp"] <= LATENCY_RATIO,
                            f"{f['value']:.1f} us" + (
                                f", {f['ratio_relay_floor']:.2f}x the relay floor"
                                if f.get("ratio_relay_floor") else "")))
        if f.get("value", 0) > 0 and "p99" in f:
            p99 = f["p99"] / f["value"]
            rows.append(row(f"{prog} 2 B p99 vs typical, {spinner}", f["kind"], p99,
                            f"<= {P99_RATIO}x", p99 <= P99_RATIO,
                            f"p99 {f['p99']:.1f} us, typical {f['value']:.1f}"))
    return rows


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def median_row(goal, port, ratios, bound, detail="", at_most=False):
    """A goal judged on the median of several rounds' ratios, each round's in the detail: met when
    the median is >= `bound` (or <= it, `at_most`). A round given as None (it did not complete, or
    had nothing to compare with) ranks as the worst of the rounds."""
    worst = float("inf") if at_most else -1.0
    ranked = sorted(worst if x is None else x for x in ratios)
    m = median(ranked)
    shown = " ".join("failed" if x == worst else f"{x:.2f}" for x in ranked)
    failed = m == worst
    met = not failed and (m <= bound if at_most else m >= bound)
    return row(f"{goal}, median of {len(ratios)} rounds", port, None if failed else m,
               f"{'<=' if at_most else '>='} {bound}x", met, f"rounds {shown}{detail}")


def summed_clean_link_row(goal, port, runs):
    """clean_link_row over several rounds: the retransmissions of those that completed, summed."""
    summed = {"port": port}
    for name in RETRANSMISSIONS:
        summed[name] = sum(r.get(name, 0) for r in runs if r["mbps"] != "FAILED")
    return clean_link_row(f"{goal}, {len(runs)} rounds", summed)


def qps_rows(doc):
    """One row per QP count and port, and one for its retransmissions: a single round's figures,
    or over several rounds (QPS_ROUNDS) the median ratio, which the goal is judged on, with every
    round's ratio in the detail, and the retransmissions of all rounds summed (none may occur)."""
    rows = []
    runs = {}
    for r in doc.get("rows", []):
        if r["qps"] != 1:
            runs.setdefault((r["port"], r["qps"]), []).append(r)
    for (port, qps), rounds in runs.items():
        if len(rounds) == 1:
            r = rounds[0]
            label = f"ib_write_bw -q {qps} vs -q 1, round {r['round']}"
            if r["mbps"] == "FAILED":
                rows.append(row(label, port, None, f">= {QPS_RATIO}x", False, "did not complete"))
                continue
            rows.append(row(label, port, r["ratio"], f">= {QPS_RATIO}x",
                            r["ratio"] != "-" and r["ratio"] >= QPS_RATIO,
                            f"{r['mbps']:.0f} MB/s"))
            rows.append(clean_link_row(
                f"-q {qps} retransmissions on a clean link, round {r['round']}", r))
            continue
        rows.append(median_row(
            f"ib_write_bw -q {qps} vs -q 1", port,
            [None if r["mbps"] == "FAILED" or r["ratio"] == "-" else r["ratio"] for r in rounds],
            QPS_RATIO))
        rows.append(summed_clean_link_row(f"-q {qps} retransmissions on a clean link", port,
                                          rounds))
    return rows


def lossy_rows(key, clean_runs, lossy_runs):
    """The 2 % loss ratio of one port and program: one round's, or the median of several."""
    port, program = key
    label = f"{program} at {LOSS:.0%} loss vs clean"
    if len(lossy_runs) == 1:
        r = lossy_runs[0]
        if r["mbps"] == "FAILED" or r["ratio_clean"] == "-":
            return [row(label, port, None, f">= {LOSS_RATIO}x", False,
                        "did not complete" if r["mbps"] == "FAILED" else "no clean run")]
        return [row(label, port, r["ratio_clean"], f">= {LOSS_RATIO}x",
                    r["ratio_clean"] >= LOSS_RATIO,
                    f"{r['mbps']:.0f} of {clean_runs[-1]['mbps']:.0f} MB/s, "
                    f"Local ACK Timeouts {r.get('completer_retry_err', 0)}")]
    if not lossy_runs:
        return []
    timeouts = sum(r.get("completer_retry_err", 0) for r in lossy_runs)
    return [median_row(
        label, port,
        [None if r["mbps"] == "FAILED" or r["ratio_clean"] == "-" else r["ratio_clean"]
         for r in lossy_runs],
        LOSS_RATIO, f", Local ACK Timeouts {timeouts}")]


def loss_rows(doc):
    """Per port and program, a row for the clean runs' retransmissions and one for the 2 % loss
    ratio: a single round's figures, or over several rounds (bench-loss.sh ROUNDS) the median
    ratio, which the goal is judged on, with every round's ratio in the detail, and the clean
    runs' retransmissions summed (none may occur)."""
    rows = []
    clean_runs, lossy_runs = {}, {}
    for r in doc.get("rows", []):
        key = (r["port"], r["program"])
        if float(r["loss"]) == 0:
            clean_runs.setdefault(key, []).append(r)
        elif abs(float(r["loss"]) - LOSS) < 1e-9:
            lossy_runs.setdefault(key, []).append(r)
    # Per port, the clean runs' rows first, then the lossy ones, as bench-loss.sh runs them.
    keys = list(dict.fromkeys(list(clean_runs) + list(lossy_runs)))
    for port in dict.fromkeys(k[0] for k in keys):
        for key in [k for k in keys if k[0] == port]:
            runs = clean_runs.get(key, [])
            goal = f"{key[1]} retransmissions on a clean link"
            if len(runs) == 1 and runs[0]["mbps"] != "FAILED":
                rows.append(clean_link_row(goal, runs[0]))
            elif any(r["mbps"] != "FAILED" for r in runs) and len(runs) > 1:
                rows.append(summed_clean_link_row(goal, port, runs))
        for key in [k for k in keys if k[0] == port]:
            rows += lossy_rows(key, clean_runs.get(key, []), lossy_runs.get(key, []))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", action="append",
                    help="bench-device.json; once per round when there were several")
    ap.add_argument("--qps")
    ap.add_argument("--loss")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows, sources = [], {}
    devices = args.device or []
    inputs = [(f"device round {i + 1}" if len(devices) > 1 else "device", path, "device")
              for i, path in enumerate(devices)]
    inputs += [("qps", args.qps, "qps"), ("loss", args.loss, "loss")]
    docs = {}
    for name, path, kind in inputs:
        if not path:
            continue
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"goals.py: {path}: {e}", file=sys.stderr)
            return 2
        sources[name] = {k: doc.get(k) for k in ("commit", "date", "load_start", "load_end")}
        docs.setdefault(kind, []).append(doc)
    if "device" in docs:
        rows += device_rows(docs["device"])
    if "qps" in docs:
        rows += qps_rows(docs["qps"][0])
    if "loss" in docs:
        rows += loss_rows(docs["loss"][0])
    for name, s in sources.items():
        print(f"{name}: commit {s['commit']}, {s['date']}, load {s['load_start']} -> {s['load_end']}")
    print(f"{'goal':<58} {'port':<6} {'measured':>9} {'target':>8}  met  detail")
    for r in rows:
        m = r["measured"]
        shown = "-" if m is None else (f"{m:.2f}x" if isinstance(m, float) else str(m))
        print(f"{r['goal']:<58} {r['port']:<6} {shown:>9} {r['target']:>8}  "
              f"{'yes' if r['met'] else 'no ':<4} {r['detail']}")
    met = sum(r["met"] for r in rows)
    print(f"goals: {met} met, {len(rows) - met} not met")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sources": sources, "rows": rows, "met": met, "not_met": len(rows) - met},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
