#!/usr/bin/env python3
"""Plots per-token NLL curves from `keel ppl --json` outputs (a moving mean over a window of
tokens) as one PNG.
usage: bench/plot_ppl.py OUT.png RUN.json [RUN.json ...]
environment: PLOT_TITLE (default: the essays), PLOT_WINDOW (moving-mean tokens, default 256)"""
import os
import json
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    window = int(os.environ.get("PLOT_WINDOW", "256"))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for path in sys.argv[2:]:
        d = json.load(open(path))
        nll = np.array(d["nll"], dtype=np.float64)
        smooth = np.convolve(nll, np.ones(window) / window, mode="valid")
        label = f"{d['policy']} (budget {d['budget']}): PPL {d['ppl']:.2f} over {d['tokens']} tokens"
        ax.plot(np.arange(window, window + len(smooth)), smooth, label=label, linewidth=1.2)
    ax.set_xlabel("token position")
    ax.set_ylabel(f"NLL, mean over {window} tokens")
    ax.set_title(os.environ.get("PLOT_TITLE", "SmolLM2-135M-Instruct on the essays: bounded KV policies vs full context"))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)


if __name__ == "__main__":
    main()
