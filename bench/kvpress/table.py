#!/usr/bin/env python3
"""Scores the run records under bench/kvpress/runs/ into tables and into bench/results/kvpress.json.

Every cell of a (task, length) row is scored over the same prompts: the ids that every method
shown in that row has run (a run stopped early leaves fewer; the table says how many). A task's
score is RULER's: the mean over its prompts of the share of expected strings the greedy output
contains, in percent. Seconds per prompt are the means over the same prompts, wall and CPU.

usage: table.py                      print the markdown tables (for docs/notes/kvpress.md)
       table.py --json --commit C --host H --date D
                                     also write bench/results/kvpress.json, one claim per
                                     (task, length, budget), then run bench/results_table.py
Python standard library only.
"""

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REPO = os.path.dirname(os.path.dirname(common.HERE))
TASKS = ("single", "multikey", "multivalue", "vt")
BUDGETS = (1024, 2048)
# (engine, method name in runs/, label); budget-less methods first.
FULL = (("keel", "full", "Keel full"), ("kvpress", "none", "kvpress no press"))
BOUNDED = (("keel", "streaming", "Keel streaming"), ("kvpress", "streaming", "kvpress StreamingLLM"),
           ("keel", "snapkv", "Keel snapkv"), ("kvpress", "snapkv", "kvpress SnapKV"),
           ("keel", "snapstream", "Keel snapstream"), ("keel", "rocketkv", "Keel rocketkv"))


def load(engine, method, budget, task, length):
    path = common.run_path(engine, method, budget or "", task, length)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return {r["id"]: r for r in (json.loads(line) for line in f if line.strip())}


def lengths_run():
    found = set()
    for path in glob.glob(os.path.join(common.RUNS, "*", "*.jsonl")):
        found.add(int(os.path.basename(path).rsplit("_", 1)[1].split(".")[0]))
    return sorted(found)


def cell_rows(task, length, budget):
    """{(label, budget): records by id} for every method with records, and the common ids."""
    have = {}
    for engine, method, label in FULL:
        have[(label, None)] = load(engine, method, None, task, length)
    for engine, method, label in BOUNDED:
        have[(label, budget)] = load(engine, method, budget, task, length)
    have = {k: v for k, v in have.items() if v}
    ids = set.intersection(*(set(v) for v in have.values())) if have else set()
    return have, sorted(ids)


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def stats(records, ids):
    rs = [records[i] for i in ids]
    return (100 * mean([r["score"] for r in rs]), mean([r["seconds"] for r in rs]),
            mean([r.get("cpu_seconds", float("nan")) for r in rs]))


def columns(budget):
    return [(label, None) for _, _, label in FULL] + [(label, budget) for _, _, label in BOUNDED]


def markdown():
    out = []
    for length in lengths_run():
        for budget in BUDGETS:
            out += [f"{length // 1024}k tokens, KV budget {budget}: score in percent, then wall / "
                    f"CPU seconds per prompt; n = prompts every column of the row ran.", "",
                    "| task | n | " + " | ".join(label for label, _ in columns(budget)) + " |",
                    "|---|---:|" + "---:|" * len(columns(budget))]
            for task in TASKS:
                have, ids = cell_rows(task, length, budget)
                if not ids:
                    continue
                cells = []
                for col in columns(budget):
                    if col not in have:
                        cells.append("not run")
                        continue
                    sc, sec, cpu = stats(have[col], ids)
                    cells.append(f"{sc:.0f} ({sec:.1f} / {cpu:.1f} s)")
                out.append(f"| {task} | {len(ids)} | " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def variants():
    """Rows for the run directories outside the main grid (a --tag'd Keel variant, kvpress on
    every layer), each against the full cache and its untagged policy on the same prompts."""
    main = {f"{engine}_{method}" for engine, method, _ in FULL + BOUNDED}
    out = []
    for d in sorted(glob.glob(os.path.join(common.RUNS, "*"))):
        name = os.path.basename(d)
        base, _, budget = name.rpartition("_")
        if not budget.isdigit():
            base, budget = name, ""
        if base in main:
            continue
        engine, _, method = base.partition("_")
        plain = method.split("-")[0]
        for path in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
            task, length = os.path.basename(path)[:-6].rsplit("_", 1)
            mine = load(engine, method, budget, task, length)
            full = load("keel", "full", None, task, length)
            base_recs = load(engine, plain, budget, task, length)
            ids = sorted(set(mine) & set(full) & set(base_recs))
            if not ids:
                continue
            out.append(f"| {name} | {task} | {int(length) // 1024}k | {len(ids)} | "
                       f"{stats(mine, ids)[0]:.0f} | {plain} {stats(base_recs, ids)[0]:.0f} | "
                       f"{stats(full, ids)[0]:.0f} |")
    if not out:
        return ""
    return "\n".join(["Variants (score in percent on the same prompts):", "",
                      "| run | task | length | n | score | untagged | Keel full |",
                      "|---|---|---|---:|---:|---:|---:|"] + out + [""])


def claims(commit, host, date):
    result = []
    for length in lengths_run():
        for task in TASKS:
            for budget in BUDGETS:
                have, ids = cell_rows(task, length, budget)
                parts = []
                for col in columns(budget):
                    if col in have and ids:
                        sc, sec, _ = stats(have[col], ids)
                        parts.append(f"{col[0]} {sc:.0f} ({sec:.1f} s)")
                if len(parts) <= 2:
                    continue
                result.append({
                    "claim": f"{task}, {length // 1024}k tokens, KV budget {budget}: score in "
                             f"percent (wall seconds per prompt), {len(ids)} prompts",
                    "figure": "; ".join(parts),
                    "command": f"bench/kvpress/run_all.sh {length} {len(ids)} && "
                               f"bench/kvpress/table.py",
                    "commit": commit, "host": host, "date": date,
                    "section": "Results"})
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--commit", default="not recorded")
    ap.add_argument("--host", default="not recorded")
    ap.add_argument("--date", default="not recorded")
    args = ap.parse_args()
    print(markdown())
    print(variants())
    if args.json:
        data = {"topic": "Long-context accuracy against kvpress (Gemma 3 270M, RULER-style tasks)",
                "order": 11, "note": "docs/notes/kvpress.md",
                "claims": claims(args.commit, args.host, args.date)}
        path = os.path.join(REPO, "bench", "results", "kvpress.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        print(f"wrote {path}: {len(data['claims'])} claims", file=sys.stderr)


if __name__ == "__main__":
    main()
