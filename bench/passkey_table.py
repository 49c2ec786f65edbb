#!/usr/bin/env python3
"""Turns `keel passkey --json` outputs into one markdown table: a row per (policy, budget), a
column per prompt length, cells "correct/total (percent)".
usage: bench/passkey_table.py RUN.json [RUN.json ...]"""
import json
import sys
from collections import defaultdict


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cells = defaultdict(lambda: [0, 0])
    lengths = set()
    rows = []
    for path in sys.argv[1:]:
        d = json.load(open(path))
        key = (d["policy"], d["budget"])
        if key not in rows:
            rows.append(key)
        for r in d["results"]:
            # Prompt lengths vary by a few tokens with the key's digits: bucket to the request.
            length = min((1024, 2048, 4096, 8192, 16384, 32768), key=lambda x: abs(x - r["length"]))
            lengths.add(length)
            c = cells[(key, length)]
            c[0] += bool(r["correct"])
            c[1] += 1
    cols = sorted(lengths)
    print("| policy | budget | " + " | ".join(f"{c // 1024}k" for c in cols) + " |")
    print("|---|---:|" + "---:|" * len(cols))
    for key in rows:
        out = []
        for c in cols:
            ok, n = cells[(key, c)]
            out.append(f"{ok}/{n} ({100 * ok / n:.0f}%)" if n else "")
        budget = "prompt" if key[0] == "full" else str(key[1])
        print(f"| {key[0]} | {budget} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
