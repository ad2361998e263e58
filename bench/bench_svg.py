#!/usr/bin/python3
"""Draws bench-device.sh's JSON as one SVG: three panels of horizontal bars comparing the kinds
(kernel baselines, afxdp, udp): throughput in Gb/s, CPU seconds per GB, and latency (typical as a
bar, p99 as a tick; host as it is and with both cores kept out of idle). Standard library only.

    bench/bench_svg.py bench-device.json bench-device.svg
"""
import json
import sys
from xml.sax.saxutils import escape

COLOURS = {"kernel": "#777777", "host": "#777777", "afxdp": "#1f77b4", "udp": "#ff7f0e"}
LABEL_W, BAR_W, ROW_H, PANEL_GAP, MARGIN = 300, 420, 20, 36, 12


def panel(title, rows, unit, y):
    """rows: (label, kind, value, tick or None). Returns (svg parts, height)."""
    parts = [f'<text x="{MARGIN}" y="{y + 14}" font-weight="bold">{escape(title)}</text>']
    top = max([r[2] for r in rows] + [r[3] or 0 for r in rows] + [1e-9])
    y += 24
    for label, kind, value, tick in rows:
        w = BAR_W * value / top
        colour = COLOURS.get(kind, "#2ca02c")
        parts.append(f'<text x="{MARGIN}" y="{y + 14}">{escape(label)}</text>')
        parts.append(f'<rect x="{LABEL_W}" y="{y + 3}" width="{w:.1f}" height="{ROW_H - 6}" '
                     f'fill="{colour}"/>')
        text = f"{value:.3g} {unit}" + (f" (p99 {tick:.3g})" if tick else "")
        if tick:
            tx = LABEL_W + BAR_W * tick / top
            parts.append(f'<line x1="{tx:.1f}" y1="{y + 1}" x2="{tx:.1f}" y2="{y + ROW_H - 1}" '
                         f'stroke="black" stroke-width="2"/>')
        parts.append(f'<text x="{LABEL_W + BAR_W + 8}" y="{y + 14}">{escape(text)}</text>')
        y += ROW_H
    return parts, 24 + ROW_H * len(rows)


def main(src, dst):
    doc = json.load(open(src))
    figs = doc["figures"]

    def label(f):
        return f'{f["kind"]}: {f["test"]}'

    rate = [(label(f), f["kind"], f["value"], None) for f in figs if f["unit"] == "Gb/s"]
    cpu = [(label(f), f["kind"], f["cpu_s_per_gb"], None) for f in figs if "cpu_s_per_gb" in f]
    lat = [(label(f), f["kind"], f["value"], f.get("p99")) for f in figs if f["unit"] == "us"]
    parts, y = [], MARGIN
    header = (f'bench-device.sh {doc["date"]} commit {doc["commit"]}, {doc["cores"]} cores, '
              f'load {doc["load_start"][0]} -> {doc["load_end"][0]}, memcpy {doc["memcpy_gbs"]} GB/s')
    parts.append(f'<text x="{MARGIN}" y="{y + 12}">{escape(header)}</text>')
    y += 24
    for title, rows, unit in (("Throughput (higher is better)", rate, "Gb/s"),
                              ("CPU seconds per GB moved (lower is better)", cpu, "s/GB"),
                              ("One-way latency, typical; tick = p99 (lower is better)", lat, "us")):
        if not rows:
            continue
        p, h = panel(title, rows, unit, y)
        parts += p
        y += h + PANEL_GAP
    width = LABEL_W + BAR_W + 220
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{y}" fill="white"/>'] + parts + ["</svg>"]
    open(dst, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
