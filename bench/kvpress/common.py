"""What the runners and the table share: reading prompt files, RULER's score, the run records.

A run record is one JSONL line per prompt in bench/kvpress/runs/ENGINE_METHOD_BUDGET/TASK_LENGTH.jsonl:
{"id", "output", "score", "seconds", "cpu_seconds", "prompt_tokens"}; a runner skips the ids a file already
holds, so an interrupted or extended run continues where it stopped.
Python standard library only.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.join(HERE, "runs")


def read_prompts(path):
    with open(path, encoding="utf-8") as f:
        prompts = [json.loads(line) for line in f if line.strip()]
    for p in prompts:
        missing = [k for k in ("id", "task", "length", "prompt", "answers", "max_new_tokens")
                   if k not in p]
        if missing:
            raise SystemExit(f"{path}: prompt {p.get('id', '?')} lacks {missing}")
    return prompts


def score(output, answers):
    """RULER's string_match_all: the share of the expected strings the output contains."""
    text = output.lower()
    return sum(1 for a in answers if a.lower() in text) / len(answers)


def run_path(engine, method, budget, task, length):
    name = f"{engine}_{method}" + (f"_{budget}" if budget else "")
    return os.path.join(RUNS, name, f"{task}_{length}.jsonl")


def done_ids(path):
    if not os.path.isfile(path):
        return set()
    with open(path, encoding="utf-8") as f:
        return {json.loads(line)["id"] for line in f if line.strip()}


def append(path, record):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
