"""Draws the benchmarks' JSON as a PNG: ours beside the peers, TFLOP/s or GB/s per shape.

    python -m tokamax_cpp.plot FILE.json... [-o out.png] [--peak-tflops X] [--peak-gbs Y]

Reads what the tools write with --json: rows with "impl" (ours: tokamax-attention-bench,
-glu-bench, -ragged-dot-bench, -cross-entropy-bench), rows with "backend" (the peers:
bench/peers/*.py), each with "shape", "pass", optional "causal" / "op", and "tflops" or
"gbs"; and tokamax-bench's flat {"<what>_gbs_<shape>": value} (its "memcpy_dtod_gbs" is
drawn as the copy line). Rows whose status is not "ok" are left out. One panel per
metric; a group of bars per (op, shape, pass); --peak-* draw a roofline. Needs
matplotlib (a clear message and exit status 1 without it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass

METRICS = {"tflops": "TFLOP/s", "gbs": "GB/s"}
_FLAT_KEY = re.compile(r"^(?P<what>.+)_(?P<metric>gbs|tflops)_(?P<shape>[^_]+)$")


@dataclass(frozen=True)
class Point:
    group: str    # what the bars of one place on the x axis share: op, shape, pass
    series: str   # who: "ours: tile", "peer: flash", ...
    ours: bool
    metric: str   # "tflops" or "gbs"
    value: float


def _group(row: dict) -> str:
    parts = [row.get("op"), row.get("shape"), "causal" if row.get("causal") else None, row.get("pass")]
    return " ".join(str(p) for p in parts if p)


def points_of(doc, source: str = "") -> tuple[list[Point], dict]:
    """The bars of one JSON document, and the lines it implies ({metric: (label, value)})."""
    points, lines = [], {}
    if isinstance(doc, dict) and "rows" in doc:
        for row in doc["rows"]:
            if row.get("status", "ok") != "ok":
                continue
            ours = "impl" in row
            who = row.get("impl") if ours else row.get("backend", source or "peer")
            for metric in METRICS:
                if isinstance(row.get(metric), (int, float)) and row[metric] > 0:
                    points.append(Point(_group(row), f"{'ours' if ours else 'peer'}: {who}", ours, metric,
                                        float(row[metric])))
    elif isinstance(doc, dict):  # tokamax-bench's flat report
        for key, value in doc.items():
            if key == "memcpy_dtod_gbs":
                lines["gbs"] = ("copy (cuMemcpyDtoD)", float(value))
                continue
            m = _FLAT_KEY.match(key)
            if m and isinstance(value, (int, float)):
                # "layer_norm fwd": the op and its pass, grouped as the peers' rows are.
                op, _, what = m["what"].partition(" ")
                group = _group({"op": op, "shape": m["shape"], "pass": what or None})
                points.append(Point(group, "ours", True, m["metric"], float(value)))
    else:
        raise ValueError(f"{source}: not a benchmark JSON (expected an object)")
    return points, lines


def load(paths) -> tuple[list[Point], dict]:
    points, lines = [], {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        p, l = points_of(doc, path)
        points += p
        lines.update(l)
    return points, lines


def draw(points, lines, output: str, title: str = "") -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("tokamax_cpp.plot needs matplotlib, which is not installed "
                         "(Debian: apt install python3-matplotlib)") from None
    metrics = [m for m in METRICS if any(p.metric == m for p in points)]
    if not metrics:
        raise SystemExit("tokamax_cpp.plot: no TFLOP/s or GB/s figures in the files")
    fig, axes = plt.subplots(len(metrics), 1, figsize=(12, 4.5 * len(metrics)), squeeze=False)
    ours_colors = plt.get_cmap("Blues")
    peer_colors = plt.get_cmap("Oranges")
    for ax, metric in zip(axes[:, 0], metrics):
        mine = [p for p in points if p.metric == metric]
        groups = list(dict.fromkeys(p.group for p in mine))
        series = sorted(dict.fromkeys(p.series for p in mine), key=lambda s: (not s.startswith("ours"), s))
        ours_series = [s for s in series if s.startswith("ours")]
        width = 0.8 / len(series)
        values = {(p.group, p.series): p.value for p in mine}
        for k, s in enumerate(series):
            is_ours = s.startswith("ours")
            shade = (k + 1) / (len(ours_series) + 1) if is_ours else (k - len(ours_series) + 1) / (
                len(series) - len(ours_series) + 1)
            color = (ours_colors if is_ours else peer_colors)(0.35 + 0.55 * shade)
            xs = [g + (k - (len(series) - 1) / 2) * width for g in range(len(groups))]
            ys = [values.get((group, s), 0.0) for group in groups]
            bars = ax.bar(xs, ys, width, label=s, color=color, hatch=None if is_ours else "//", edgecolor="white")
            ax.bar_label(bars, labels=[f"{y:.0f}" if y else "" for y in ys], fontsize=7, padding=1)
        top = max(p.value for p in mine)
        if metric in lines:
            label, value = lines[metric]
            top = max(top, value)
            ax.axhline(value, color="black", linestyle="--", linewidth=1)
            ax.text(-0.45, value, f"{label}: {value:.0f}", va="bottom", ha="left", fontsize=8)
        ax.set_ylim(0, top * 1.25)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(METRICS[metric])
        ax.legend(fontsize=8, ncol=min(len(series), 4), loc="upper right")
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tokamax_cpp.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="JSON written by the bench tools / bench/peers scripts")
    parser.add_argument("-o", "--output", default="plot.png", help="the PNG to write (default plot.png)")
    parser.add_argument("--title", default="")
    parser.add_argument("--peak-tflops", type=float, help="draw the compute roofline at this TFLOP/s")
    parser.add_argument("--peak-gbs", type=float, help="draw the memory roofline at this GB/s")
    args = parser.parse_args(argv)
    points, lines = load(args.files)
    if args.peak_tflops:
        lines["tflops"] = ("roofline", args.peak_tflops)
    if args.peak_gbs:
        lines["gbs"] = ("roofline", args.peak_gbs)
    draw(points, lines, args.output, args.title)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
