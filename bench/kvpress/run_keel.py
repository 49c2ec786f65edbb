#!/usr/bin/env python3
"""Runs prompt files through the keel CLI: one greedy `keel run --json` per prompt and policy.

For each prompt file and each METHOD[:BUDGET] it writes the run records of common.py under
bench/kvpress/runs/keel_METHOD[_BUDGET]/ (skipping prompts already there). `full` runs without
a budget (the CLI sizes the cache to prompt + answer); every other policy with --kv-budget B and
the model's defaults for everything else. seconds is the wall time of the whole command
(model load included, tens of ms with --no-verify) and cpu_seconds its user + system time, which
a shared machine disturbs less; the kvpress runner's are those of prefill plus decode.

usage: run_keel.py --keel BIN --model MODEL.keel --prompts FILE.jsonl [FILE ...]
                   --methods full,streaming:1024,snapkv:1024,... [-t THREADS] [--limit N]
                   [--extra "ARGS"]   (more keel options, recorded in the method's name)
Python standard library only.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keel", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", nargs="+", required=True)
    ap.add_argument("--methods", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="first N prompts of each file (0 = all)")
    ap.add_argument("--extra", default="", help="more keel run options, e.g. '--kv-positions original'")
    ap.add_argument("--tag", default="", help="suffix of the method's name when --extra is given")
    args = ap.parse_args()
    if args.extra and not args.tag:
        raise SystemExit("--extra changes what runs: give it a --tag naming the variant")

    for spec in args.methods.split(","):
        method, _, budget = spec.partition(":")
        name = method + (f"-{args.tag}" if args.tag else "")
        for path in args.prompts:
            prompts = common.read_prompts(path)
            if args.limit:
                prompts = prompts[:args.limit]
            task, length = prompts[0]["task"], prompts[0]["length"]
            out = common.run_path("keel", name, budget, task, length)
            done = common.done_ids(out)
            for p in prompts:
                if p["id"] in done:
                    continue
                with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
                    f.write(p["prompt"])
                cmd = [args.keel, "run", "-m", args.model, "-f", f.name, "--json", "--no-verify",
                       "--temp", "0", "-n", str(p["max_new_tokens"]), "-t", str(args.threads),
                       "--kv-policy", method]
                if budget:
                    cmd += ["--kv-budget", budget]
                cmd += args.extra.split()
                start = time.monotonic()
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                proc = subprocess.run(cmd, capture_output=True, text=True)
                seconds = time.monotonic() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                os.unlink(f.name)
                if proc.returncode != 0:
                    raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                record = {"id": p["id"], "output": result["text"],
                          "score": common.score(result["text"], p["answers"]),
                          "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
                          "prompt_tokens": result["prompt_tokens"]}
                common.append(out, record)
                print(f"keel {name} {budget or '-'} {p['id']}: score {record['score']:.2f}, "
                      f"{seconds:.1f} s, {result['prompt_tokens']} tokens: {result['text'][:60]!r}",
                      flush=True)


if __name__ == "__main__":
    main()
