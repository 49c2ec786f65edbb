#!/usr/bin/env python3
"""Perplexity of one GGUF in Keel and in llama.cpp's llama-perplexity on the same tokens.

llama-perplexity splits the text into chunks of CTX tokens, puts BOS first in each and scores
only the second half of every chunk (tokens CTX/2 + 1 .. CTX - 1, each predicted from all the
chunk's tokens before it). This runs it on the first chunk (--chunks 1) and `keel ppl --ctx
CTX --json` on the same first CTX tokens, and takes Keel's per-token NLL over the same
positions, so both numbers are exp(mean NLL) of the same tokens with the same context.

usage: ppl_vs_llamacpp.py KEEL_BINARY MODEL.keel GGUF TEXT CTX [THREADS]
  llama-perplexity is read from bench/build_llamacpp.sh's build.
Prints one JSON line: ctx, tokens scored, keel_ppl, llamacpp_ppl, relative difference.
"""
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    keel, model, gguf, text, ctx = sys.argv[1:6]
    ctx = int(ctx)
    threads = sys.argv[6] if len(sys.argv) > 6 else "1"
    bindir = subprocess.run(["bash", os.path.join(ROOT, "bench", "build_llamacpp.sh")], check=True,
                            capture_output=True, text=True).stdout.strip()
    # --no-repack: on hosts with AMX (Sapphire Rapids) this llama.cpp's AMX matmul, which repacked
    # weights select, dies with SIGSEGV (ggml_backend_amx_mul_mat); its AVX-512 kernels run instead.
    out = subprocess.run([os.path.join(bindir, "llama-perplexity"), "-m", gguf, "-f", text, "-c", str(ctx),
                          "--chunks", "1", "-t", threads, "-b", str(min(ctx, 2048)), "--no-repack"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"llama-perplexity failed: {out.stderr[-2000:]}")
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr)
    if not m:
        sys.exit("llama-perplexity printed no final estimate")
    ref = float(m.group(1))
    k = subprocess.run([keel, "ppl", "-m", model, "-f", text, "--ctx", str(ctx), "--kv-policy", "full",
                        "--kv-budget", str(ctx), "-t", threads, "--json"], check=True, capture_output=True, text=True)
    nll = json.loads(k.stdout)["nll"]  # nll[i] is the NLL of token i + 1
    first = ctx // 2
    scored = nll[first:ctx - 1]
    ppl = math.exp(sum(scored) / len(scored))
    print(json.dumps({"ctx": ctx, "tokens_scored": len(scored), "keel_ppl": round(ppl, 4),
                      "llamacpp_ppl": round(ref, 4), "rel_diff": round(ppl / ref - 1, 5)}))


if __name__ == "__main__":
    main()
