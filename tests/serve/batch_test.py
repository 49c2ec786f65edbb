#!/usr/bin/env python3
"""keel batch: results in input order, error lines naming the line, the summary, and greedy
answers that do not depend on how many slots run side by side.

usage: batch_test.py KEEL STORIES260K.keel TMPDIR
"""
import json
import os
import subprocess
import sys

KEEL, MODEL, TMP = sys.argv[1:4]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


LINES = [
    {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0},
    {"prompt": "The cat sat", "max_tokens": 12, "temperature": 0, "stop": ["."]},
    "not json at all",
    {"prompt": 5},
    "",
    {"prompt": "Lily and Tom", "max_tokens": 30, "temperature": 0},
    {"prompt": "One day", "max_tokens": 9, "temperature": 0.8, "seed": 7},
    {"messages": [{"role": "user", "content": "hi"}]},
    {"prompt": "A big dog", "max_tokens": 16, "temperature": 0, "model": "another-model"},
    {"prompt": "The sun", "max_tokens": 25, "temperature": 0},
]
path = os.path.join(TMP, "batch_requests.jsonl")
os.makedirs(TMP, exist_ok=True)
with open(path, "w") as f:
    for item in LINES:
        f.write((item if isinstance(item, str) else json.dumps(item)) + "\n")


def run(slots):
    out = subprocess.run([KEEL, "batch", "-m", MODEL, "-f", path, "--slots", str(slots), "--json", "-t", "1"],
                         capture_output=True, text=True, timeout=300)
    check(out.returncode == 0, f"--slots {slots}: exit 0 ({out.stderr.strip()})")
    return [json.loads(line) for line in out.stdout.splitlines()]


results = {}
for slots in (1, 3):
    rows = run(slots)
    summary = rows[-1].get("summary")
    rows = rows[:-1]
    check([r["line"] for r in rows] == [1, 2, 3, 4, 6, 7, 8, 9, 10], f"--slots {slots}: one line per request, in order")
    errors = {r["line"]: r["error"] for r in rows if "error" in r}
    check(sorted(errors) == [3, 4, 8, 9], f"--slots {slots}: error lines 3, 4, 8, 9 ({sorted(errors)})")
    check(errors.get(3, {}).get("code") == "invalid_json" and errors.get(4, {}).get("param") == "prompt"
          and "chat template" in errors.get(8, {}).get("message", "")
          and errors.get(9, {}).get("code") == "model_not_found", f"--slots {slots}: each error names the problem")
    ok = [r for r in rows if "text" in r]
    check(all(isinstance(r["tokens"], int) and r["time_to_first_token"] >= 0 and r["tokens_per_second"] >= 0
              for r in ok), f"--slots {slots}: text, tokens, time_to_first_token, tokens_per_second")
    by_line = {r["line"]: r for r in ok}
    check(by_line[1]["tokens"] == 20 and by_line[1]["finish_reason"] == "length", f"--slots {slots}: max_tokens")
    check("." not in by_line[2]["text"], f"--slots {slots}: stop string trimmed ({by_line[2]['text']!r})")
    check(summary is not None and summary["requests"] == 5 and summary["errors"] == 4
          and summary["tokens"] == sum(r["tokens"] for r in ok) and summary["seconds"] > 0
          and 0 < summary["slot_occupancy"] <= 1 and summary["tokens_per_second"] > 0,
          f"--slots {slots}: summary {summary}")
    results[slots] = {line: r["text"] for line, r in by_line.items()}
check(results[1] == results[3], "greedy and seeded answers are the same with 1 and 3 slots")

bad = subprocess.run([KEEL, "batch", "-m", MODEL, "-f", os.path.join(TMP, "no_such_file.jsonl")],
                     capture_output=True, text=True)
check(bad.returncode == 1 and "no_such_file" in bad.stderr, "a missing file: exit 1 naming it")
if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("all checks passed")
