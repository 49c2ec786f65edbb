#!/usr/bin/env python3
"""Independent Gemma 3 reference for tests/golden/gemma3_reference.json: a float64 NumPy forward
pass over the weights of the Gemma 3 270M GGUF as PyPI `gguf` dequantizes them (no Keel code),
following the architecture as the Gemma 3 report and Hugging Face's modeling_gemma3 describe it:
embedding * sqrt(dim); per layer RMSNorm -> q/k/v -> per-head q/k RMSNorm -> RoPE (NEOX halves;
base 10,000 on local layers, 1,000,000 on every sixth, global, layer) -> attention scaled by
1/sqrt(query_pre_attn_scalar = 256), local layers seeing the last 512 positions -> output
projection -> RMSNorm -> residual; RMSNorm -> GELU(tanh)(gate) * up -> down -> RMSNorm ->
residual; final RMSNorm; logits against the tied embedding. GGUF stores Gemma's norm weights
with the +1 folded in (llama.cpp's converter adds it), so they multiply as they are.

For each prompt (token ids, as llama.cpp's llama-tokenize gives them, with BOS) it records the
greedy continuation and, at every step, the top-5 logits and the margin between the first two.
Requires numpy and gguf (pip); takes minutes (every step recomputes the whole sequence).

usage: gemma3_reference.py GGUF OUT.json ESSAY_IDS.json
  ESSAY_IDS.json: `llama-tokenize -m GGUF -f EXCERPT --ids --log-disable` of the first 2996
  bytes of ../shared/data/paul_graham_essays/addiction.txt (a JSON list).
"""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

# Prompts: text (or an excerpt of a shared essay: its first `bytes` bytes) with the ids
# `llama-tokenize -m gemma-3-270m-q4_k_m.gguf -p TEXT --ids` gave (BOS = 2), and how many greedy
# steps to record. The essay excerpt is 699 tokens, longer than the 512-token sliding window.
CASES = [
    {"text": "The capital of France is", "steps": 8,
     "ids": [2, 818, 5279, 529, 7001, 563]},
    {"text": "1, 2, 3, 4, 5,", "steps": 8,
     "ids": [2, 236770, 236764, 236743, 236778, 236764, 236743, 236800, 236764, 236743, 236812, 236764,
             236743, 236810, 236764]},
    {"text": "def fibonacci(n):", "steps": 8,
     "ids": [2, 2063, 10779, 78113, 236769, 236749, 1473]},
    {"essay": "addiction.txt", "bytes": 2996, "steps": 3, "ids": "long_ids.json"},
]


def load(path):
    r = GGUFReader(path)
    w = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape([int(x) for x in reversed(t.shape)]) if a.ndim > 1 else a.reshape(-1)
    return w


def rmsnorm(x, weight, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope_halves(x, pos, base):
    # x [T, heads, hd]; pairs (i, i + hd/2)
    hd = x.shape[-1]
    half = hd // 2
    inv = 1.0 / base ** (np.arange(half) * 2.0 / hd)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def gelu_tanh(g):
    return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))


def forward(w, ids, n_layers=18, n_heads=4, hd=256, window=512, pattern=6):
    T = len(ids)
    dim = w["token_embd.weight"].shape[1]
    x = w["token_embd.weight"][ids] * np.sqrt(dim)
    pos = np.arange(T, dtype=np.float64)
    for l in range(n_layers):
        p = f"blk.{l}."
        local = (l + 1) % pattern != 0
        h = rmsnorm(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T).reshape(T, n_heads, hd)
        k = (h @ w[p + "attn_k.weight"].T).reshape(T, 1, hd)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, 1, hd)
        q = rmsnorm(q, w[p + "attn_q_norm.weight"])
        k = rmsnorm(k, w[p + "attn_k_norm.weight"])
        base = 10000.0 if local else 1000000.0
        q, k = rope_halves(q, pos, base), rope_halves(k, pos, base)
        scores = np.einsum("thd,sd->hts", q, k[:, 0, :]) / np.sqrt(256.0)
        ti, si = np.arange(T)[:, None], np.arange(T)[None, :]
        mask = si > ti
        if local:
            mask = mask | (ti - si >= window)
        scores = np.where(mask[None], -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        pr = np.exp(scores)
        pr /= pr.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,sd->thd", pr, v[:, 0, :]).reshape(T, n_heads * hd)
        o = rmsnorm(att @ w[p + "attn_output.weight"].T, w[p + "post_attention_norm.weight"])
        x = x + o
        h = rmsnorm(x, w[p + "ffn_norm.weight"])
        f = gelu_tanh(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)
        f = rmsnorm(f @ w[p + "ffn_down.weight"].T, w[p + "post_ffw_norm.weight"])
        x = x + f
    x = rmsnorm(x[-1:], w["output_norm.weight"])
    return (x @ w["token_embd.weight"].T)[0]


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    essay_ids = sys.argv[3] if len(sys.argv) > 3 else None
    w = load(gguf_path)
    cases = []
    for case in CASES:
        ids = case["ids"]
        if isinstance(ids, str):
            ids = json.load(open(essay_ids))  # the ids of the essay excerpt, from llama-tokenize -f
        seq = list(ids)
        steps = []
        for _ in range(case["steps"]):
            logits = forward(w, seq)
            top = np.argsort(-logits)[:5]
            steps.append({"top_ids": [int(i) for i in top],
                          "top_logits": [round(float(logits[i]), 5) for i in top],
                          "margin": round(float(logits[top[0]] - logits[top[1]]), 5)})
            seq.append(int(top[0]))
        out = {k: case[k] for k in ("text", "essay", "bytes") if k in case}
        out.update({"prompt_ids": ids, "greedy": seq[len(ids):], "steps": steps})
        cases.append(out)
        print(out.get("text", case.get("essay")), "->", out["greedy"], [s["margin"] for s in steps],
              file=sys.stderr)
    json.dump({"model": "gemma-3-270m-q4_k_m.gguf",
               "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
               "made_by": "tests/reference/gemma3_reference.py (float64 NumPy over gguf dequantize)",
               "cases": cases}, open(out_path, "w"), indent=None, separators=(",", ":"))


if __name__ == "__main__":
    main()
