#!/usr/bin/env python3
"""Golden tensor statistics of a llama2.c legacy checkpoint, read independently with numpy.

Usage: llama2c_golden.py CHECKPOINT.bin TOKENIZER.bin OUT.json

The checkpoint is read by run.c's documented legacy layout: 7 int32 (dim, hidden_dim,
n_layers, n_heads, n_kv_heads, vocab_size, seq_len; vocab_size < 0 means an unshared
classifier), then f32 token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim],
wk [L, kv_dim, dim], wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim],
w1 [L, hidden, dim], w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim],
freq_cis_real and freq_cis_imag [seq_len, head_dim / 2], wcls [vocab, dim] if unshared.

For each tensor (canonical .keel names) it records the shape, the first and last values and
the float64 sum taken sequentially from the first element to the last (np.cumsum, so a C++
loop `double s = 0; for (x : t) s += x;` reproduces it bit for bit). It also records the
tokenizer's token count and a few tokens (their bytes in hex, as stored in the file) with their
scores.
"""
import json
import sys

import numpy as np


def main():
    ckpt, tok, out = sys.argv[1:4]
    raw = open(ckpt, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = np.frombuffer(raw[:28], "<i4")
    shared = vocab > 0
    vocab = abs(int(vocab))
    head_dim = dim // n_heads
    kv_dim = head_dim * n_kv_heads
    data = np.frombuffer(raw[28:], "<f4")
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = data[pos:pos + n].reshape(shape)
        pos += n
        return a

    tensors = {}
    tensors["token_embd.weight"] = take(vocab, dim)
    per_layer = [
        ("attn_norm.weight", (dim,)),
        ("attn_q.weight", (dim, dim)),
        ("attn_k.weight", (kv_dim, dim)),
        ("attn_v.weight", (kv_dim, dim)),
        ("attn_output.weight", (dim, dim)),
        ("ffn_norm.weight", (dim,)),
        ("ffn_gate.weight", (hidden, dim)),
        ("ffn_down.weight", (dim, hidden)),
        ("ffn_up.weight", (hidden, dim)),
    ]
    for name, shape in per_layer:
        block = take(n_layers, *shape)
        for layer in range(n_layers):
            tensors[f"blk.{layer}.{name}"] = block[layer]
    tensors["output_norm.weight"] = take(dim)
    take(seq_len, head_dim // 2)
    take(seq_len, head_dim // 2)
    if not shared:
        tensors["output.weight"] = take(vocab, dim)
    assert pos == data.size, (pos, data.size)

    stats = {}
    for name, a in tensors.items():
        flat = a.reshape(-1)
        stats[name] = {
            "shape": [int(d) for d in a.shape],
            "first": float(flat[0]),
            "last": float(flat[-1]),
            "sum": float(np.cumsum(flat.astype(np.float64))[-1]),
        }

    traw = open(tok, "rb").read()
    tpos = 4
    tokens = []
    while tpos < len(traw):
        score = np.frombuffer(traw[tpos:tpos + 4], "<f4")[0]
        length = int(np.frombuffer(traw[tpos + 4:tpos + 8], "<i4")[0])
        tpos += 8
        tokens.append((traw[tpos:tpos + length].hex(), float(score)))
        tpos += length
    sample = {str(i): {"hex": tokens[i][0], "score": tokens[i][1]}
              for i in (0, 1, 2, 3, 258, 259, 300, len(tokens) - 1)}

    golden = {
        "source": "stories260K.bin + tok512.bin via tests/reference/llama2c_golden.py",
        "hyper": {"dim": int(dim), "hidden_dim": int(hidden), "n_layers": int(n_layers),
                  "n_heads": int(n_heads), "n_kv_heads": int(n_kv_heads), "vocab_size": vocab,
                  "seq_len": int(seq_len), "shared_classifier": bool(shared)},
        "tensors": stats,
        "tokenizer": {"count": len(tokens), "sample": sample},
    }
    with open(out, "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
