#!/usr/bin/env python3
"""Decode time per token against position from `keel bench --json -d DEPTH` runs, one line per
KV policy, as a PNG. usage: bench/plot_depth.py OUT.png LABEL=RUN.json [LABEL=RUN.json ...]"""
import collections
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    series = collections.defaultdict(list)
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        d = json.load(open(path))
        tg = [r for r in d["results"] if r["test"].startswith("tg")][0]
        series[label].append((d["depth"], 1000.0 / tg["tps_median"]))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for label, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("tokens already in the sequence (position)")
    ax.set_ylabel("decode time per token (ms)")
    ax.set_title("SmolLM2-135M-Instruct, one thread: full cache vs snapstream (budget 1024)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
