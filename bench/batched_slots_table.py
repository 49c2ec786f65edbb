#!/usr/bin/env python3
"""Markdown table of bench/batched_slots.sh's output: per thread count and sequence count, the
median aggregate decode tokens/s of Keel and llama.cpp over the rounds, each engine's speed-up
over its own single sequence, and Keel's ratio to llama.cpp. With GBPS (DRAM read bandwidth,
GB/s, from `keel bench --bandwidth`) it adds Keel's decode ceiling: slots * bandwidth / bytes
one step reads (weights once + each slot's cached K and V).

usage: bench/batched_slots_table.py OUT.jsonl [GBPS_1THREAD GBPS_2THREADS]
"""
import json
import statistics
import sys
from collections import defaultdict


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    gbps = {1: float(sys.argv[2]), 2: float(sys.argv[3])} if len(sys.argv) == 4 else {}
    keel, llama = defaultdict(list), defaultdict(list)
    step_bytes = {}
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r["engine"] == "keel":
            key = (r["threads"], r["slots"])
            keel[key].append(r["results"][0]["tps_median"])
            # bytes_per_token is per generated token: one step reads slots times that.
            step_bytes[key] = r["results"][0]["bytes_per_token"] * r["slots"]
        else:
            llama[(r["threads"], r["pl"])].append(r["speed_tg"])
    head = "| threads | sequences | Keel t/s | x Keel@1 | llama.cpp t/s | x llama@1 | Keel / llama.cpp |"
    if gbps:
        head += " Keel ceiling t/s | of ceiling |"
    print(head)
    print("|" + "|".join(["---:"] * (head.count("|") - 1)) + "|")
    for t, n in sorted(keel):
        k = statistics.median(keel[(t, n)])
        k1 = statistics.median(keel[(t, 1)])
        l = statistics.median(llama[(t, n)]) if llama[(t, n)] else float("nan")
        l1 = statistics.median(llama[(t, 1)]) if llama[(t, 1)] else float("nan")
        row = f"| {t} | {n} | {k:.1f} | {k / k1:.2f} | {l:.1f} | {l / l1:.2f} | {k / l:.2f} |"
        if gbps:
            ceiling = n * gbps[t] * 1e9 / step_bytes[(t, n)]
            row += f" {ceiling:.0f} | {100 * k / ceiling:.0f}% |"
        print(row)
    rounds = max(len(v) for v in keel.values())
    print(f"\nmedians of {rounds} alternating rounds")


if __name__ == "__main__":
    main()
