#!/usr/bin/env python3
"""SnapKV selection on stories260K, from the paper's definition, as a golden file.

Runs an independent numpy forward pass of stories260K (llama2.c checkpoint, float64, keys and
values rounded to float16 as Keel's cache stores them) over a fixed prompt of pseudo-random
token ids, then for every layer and KV head selects what SnapKV keeps when the prompt is
compressed to a budget B with observation window w:

  - the last w queries attend (causally, softmax over all keys they see) to the prompt;
  - each earlier token's score is the sum of the attention it receives over those w queries
    and over the query heads of its GQA group (SnapKV++: one choice per KV head);
  - scores are smoothed by a 1-D max-pool (kernel k, same padding: window clipped at the ends);
  - the B - w best tokens (ties: earlier token first) are kept in original order, plus the w.

usage: python3 tests/reference/snapkv_reference.py ../shared/models/stories260K/stories260K.bin \
           tests/golden/snapkv_stories260K.json
Needs numpy. The output holds the prompt ids, the kept positions per (layer, KV head), the
pooled scores and the score of the last kept token, so a test can tell real disagreements
from float-level near-ties.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stories260K_reference import read_checkpoint  # noqa: E402

PROMPT_TOKENS = 160
BUDGET = 96
WINDOW = 32
KERNEL = 7
SEED = 21
THETA = 10000.0
EPS = 1e-5


def prompt_ids(n, vocab, seed):
    """xorshift64, the same sequence the C++ test generates."""
    mask = (1 << 64) - 1
    ids = []
    for _ in range(n):
        seed ^= (seed << 13) & mask
        seed ^= seed >> 7
        seed ^= (seed << 17) & mask
        ids.append(seed % vocab)
    return ids


def rmsnorm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope(x, positions, head_dim):
    """Adjacent pairs (2i, 2i+1), as llama2.c: x [T, heads, head_dim]."""
    half = head_dim // 2
    inv = 1.0 / THETA ** (np.arange(half) * 2.0 / head_dim)
    ang = positions[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def forward_keys_queries(h, t, ids):
    T, d, hd = len(ids), h["dim"], h["head_dim"]
    nh, nkv = h["n_heads"], h["n_kv_heads"]
    g = nh // nkv
    pos = np.arange(T, dtype=np.float64)
    x = t["token_embd.weight"][ids].astype(np.float64)
    qs, ks = [], []
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(h["n_layers"]):
        w = lambda n: t[f"blk.{l}.{n}.weight"].astype(np.float64)  # noqa: E731
        xb = rmsnorm(x, w("attn_norm"))
        q = rope((xb @ w("attn_q").T).reshape(T, nh, hd), pos, hd)
        k = rope((xb @ w("attn_k").T).reshape(T, nkv, hd), pos, hd).astype(np.float16).astype(np.float64)
        v = (xb @ w("attn_v").T).reshape(T, nkv, hd).astype(np.float16).astype(np.float64)
        qs.append(q)
        ks.append(k)
        att = np.empty((T, nh, hd))
        for head in range(nh):
            s = q[:, head, :] @ k[:, head // g, :].T / np.sqrt(hd) + mask
            p = np.exp(s - s.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            att[:, head, :] = p @ v[:, head // g, :]
        x = x + att.reshape(T, d) @ w("attn_output").T
        xb = rmsnorm(x, w("ffn_norm"))
        gate, up = xb @ w("ffn_gate").T, xb @ w("ffn_up").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w("ffn_down").T
    return qs, ks


def select(q, k, n_kv, group, hd):
    T = q.shape[0]
    cand = T - WINDOW
    keep_n = BUDGET - WINDOW
    out = []
    for h in range(n_kv):
        score = np.zeros(T)
        for i in range(T - WINDOW, T):
            for gh in range(h * group, (h + 1) * group):
                s = k[: i + 1, h, :] @ q[i, gh, :] / np.sqrt(hd)
                p = np.exp(s - s.max())
                score[: i + 1] += p / p.sum()
        sc = score[:cand]
        half = KERNEL // 2
        pooled = np.array([sc[max(0, j - half): min(cand, j + half + 1)].max() for j in range(cand)])
        order = sorted(range(cand), key=lambda j: (-pooled[j], j))
        kept = sorted(order[:keep_n]) + list(range(cand, T))
        out.append({"kept": kept, "pooled": [float(v) for v in pooled], "cutoff": float(pooled[order[keep_n - 1]])})
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    h, t = read_checkpoint(sys.argv[1])
    ids = prompt_ids(PROMPT_TOKENS, h["vocab"], SEED)
    qs, ks = forward_keys_queries(h, t, ids)
    group = h["n_heads"] // h["n_kv_heads"]
    layers = [select(qs[l], ks[l], h["n_kv_heads"], group, h["head_dim"]) for l in range(h["n_layers"])]
    with open(sys.argv[2], "w") as f:
        json.dump({"prompt_tokens": PROMPT_TOKENS, "budget": BUDGET, "window": WINDOW, "kernel": KERNEL,
                   "seed": SEED, "ids": ids, "layers": layers}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
