#!/usr/bin/env python3
"""Greedy continuations of Gemma 3 270M by llama.cpp, for tests/golden/gemma3_llamacpp_greedy.json.

Runs bench/build_llamacpp.sh's `llama-completion -m GGUF -p PROMPT -n 16 --temp 0 -no-cnv` on
each prompt and keeps what it printed after the prompt, trailing whitespace removed (the tool
ends its output with newlines of its own). The Gemma3.GreedyTextMatchesLlamaCpp test compares
the engine's greedy text with it for as long as the engine's top-1 leads by a clear margin.

usage: gemma3_llamacpp_greedy.py GGUF OUT.json
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Plain-text continuations: the engine's StreamDecoder and llama.cpp print special tokens (which
# a base model may emit after a short answer) differently.
PROMPTS = [
    "The capital of France is",
    "1, 2, 3, 4, 5,",
    "def fibonacci(n):",
    "Water boils at a temperature of",
]
TOKENS = 16


def main():
    gguf, out_path = sys.argv[1:3]
    bindir = subprocess.run(["bash", os.path.join(ROOT, "bench", "build_llamacpp.sh")], check=True,
                            capture_output=True, text=True).stdout.strip()
    cases = []
    for p in PROMPTS:
        r = subprocess.run([os.path.join(bindir, "llama-completion"), "-m", gguf, "-p", p, "-n", str(TOKENS),
                            "--temp", "0", "-no-cnv", "-t", "1"], check=True, capture_output=True, text=True)
        if not r.stdout.startswith(p):
            sys.exit(f"llama-completion did not echo the prompt {p!r}: {r.stdout[:200]!r}")
        cases.append({"prompt": p, "tokens": TOKENS, "continuation": r.stdout[len(p):].rstrip()})
    with open(out_path, "w") as f:
        json.dump({"source": "llama-completion (bench/build_llamacpp.sh), " + os.path.basename(gguf),
                   "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
