#!/usr/bin/env python3
"""Golden greedy continuation of stories260K by llama.cpp (PyPI llama-cpp-python).

The llama2.c checkpoint is rewritten as a temporary F32 GGUF (llama architecture) with
gguf-py's GGUFWriter in a temporary directory that is deleted afterwards; llama.cpp then
decodes greedily (argmax, the lowest id on ties) from BOS (id 1) for 200 tokens without
stopping at EOS, and the ids go to tests/golden/stories260K_greedy.json.

Checkpoint layout relied on (llama2.c legacy "version 0" export, as run.c reads it), all
little endian:
  int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
        (vocab_size < 0 would mean an unshared classifier at the end)
  float32, each block for all layers at once, layer-major:
    token_embedding [vocab, dim]
    rms_att [L, dim]; wq [L, dim, dim]; wk [L, kv_dim, dim]; wv [L, kv_dim, dim];
    wo [L, dim, dim]; rms_ffn [L, dim]; w1 [L, hidden, dim]; w2 [L, dim, hidden];
    w3 [L, hidden, dim]; rms_final [dim];
    freq_cis_real, freq_cis_imag [seq_len, head_dim / 2] (unused: RoPE is recomputed);
    wcls [vocab, dim] only when unshared.
  Matrices are [out, in] row-major, i.e. the GGUF/ggml convention of y = W x. llama2.c rotates
  adjacent pairs (x[2i], x[2i+1]), the rotation llama.cpp uses for the "llama" architecture,
  so q and k are written without the permutation Hugging Face checkpoints need.
Tokenizer tok512.bin: int32 max_token_length, then per token: float32 score, int32 length,
  bytes. Pieces hold ' ' where SentencePiece has U+2581 (mapped back here); id 0 is <unk>,
  1 "\\n<s>\\n" and 2 "\\n</s>\\n" (named <s> and </s> here), 3..258 the byte tokens <0xNN>.

Usage: python3 tests/reference/stories260K_reference.py [--n 200]
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
CHECKPOINT = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")
TOKENIZER = os.path.join(SHARED, "models", "stories260K", "tok512.bin")
OUT = os.path.join(ROOT, "tests", "golden", "stories260K_greedy.json")
EXPECTED_START = "Once upon a time, there was a little girl named Lily"

# gguf token types
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


def read_checkpoint(path):
    raw = open(path, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = (int(v) for v in np.frombuffer(raw[:28], "<i4"))
    shared = vocab > 0
    vocab = abs(vocab)
    head_dim = dim // n_heads
    kv_dim = head_dim * n_kv_heads
    data = np.frombuffer(raw[28:], "<f4")
    pos = 0

    def take(*shape):
        nonlocal pos
        count = int(np.prod(shape))
        a = data[pos:pos + count].reshape(shape)
        pos += count
        return a

    t = {"token_embd.weight": take(vocab, dim)}
    for name, shape in [("attn_norm", (dim,)), ("attn_q", (dim, dim)), ("attn_k", (kv_dim, dim)),
                        ("attn_v", (kv_dim, dim)), ("attn_output", (dim, dim)), ("ffn_norm", (dim,)),
                        ("ffn_gate", (hidden, dim)), ("ffn_down", (dim, hidden)), ("ffn_up", (hidden, dim))]:
        block = take(n_layers, *shape)
        for layer in range(n_layers):
            t[f"blk.{layer}.{name}.weight"] = block[layer]
    t["output_norm.weight"] = take(dim)
    take(seq_len, head_dim // 2)
    take(seq_len, head_dim // 2)
    t["output.weight"] = t["token_embd.weight"] if shared else take(vocab, dim)
    assert pos == data.size, (pos, data.size)
    hyper = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                 vocab=vocab, seq_len=seq_len, head_dim=head_dim)
    return hyper, t


def read_tokenizer(path):
    raw = open(path, "rb").read()
    off = 4
    pieces, scores = [], []
    while off < len(raw):
        score, n = struct.unpack_from("<fi", raw, off)
        off += 8
        pieces.append(raw[off:off + n])
        scores.append(score)
        off += n
    tokens, types = [], []
    for i, p in enumerate(pieces):
        if i == 0:
            tokens.append("<unk>"); types.append(UNKNOWN)
        elif i == 1:
            tokens.append("<s>"); types.append(CONTROL)
        elif i == 2:
            tokens.append("</s>"); types.append(CONTROL)
        elif p.startswith(b"<0x") and p.endswith(b">") and len(p) == 6:
            tokens.append(p.decode()); types.append(BYTE)
        else:
            tokens.append(p.decode("utf-8").replace(" ", "\u2581")); types.append(NORMAL)
    return tokens, scores, types


def write_gguf(path, hyper, tensors, tokens, scores, types):
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("stories260K")
    w.add_context_length(hyper["seq_len"])
    w.add_embedding_length(hyper["dim"])
    w.add_block_count(hyper["n_layers"])
    w.add_feed_forward_length(hyper["hidden"])
    w.add_head_count(hyper["n_heads"])
    w.add_head_count_kv(hyper["n_kv_heads"])
    w.add_rope_dimension_count(hyper["head_dim"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    for name, a in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def detokenize(ids, pieces_path):
    raw = open(pieces_path, "rb").read()
    off = 4
    pieces = []
    while off < len(raw):
        _, n = struct.unpack_from("<fi", raw, off)
        off += 8
        pieces.append(raw[off:off + n])
        off += n
    out = bytearray()
    for i in ids:
        p = pieces[i]
        if i in (0, 1, 2):
            continue
        if p.startswith(b"<0x") and p.endswith(b">") and len(p) == 6:
            out.append(int(p[3:5], 16))
        else:
            out += p
    text = out.decode("utf-8", errors="replace")
    return text[1:] if text.startswith(" ") else text  # the SentencePiece dummy prefix


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    import llama_cpp

    hyper, tensors = read_checkpoint(CHECKPOINT)
    tokens, scores, types = read_tokenizer(TOKENIZER)
    assert len(tokens) == hyper["vocab"], (len(tokens), hyper["vocab"])
    prompt = [1]
    ids = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "stories260K.gguf")
        write_gguf(path, hyper, tensors, tokens, scores, types)
        # logits_all: this binding keeps logits (llm.scores) only in that mode.
        llm = llama_cpp.Llama(model_path=path, n_ctx=hyper["seq_len"], n_batch=64, n_threads=1,
                              logits_all=True, verbose=False)
        llm.eval(prompt)
        for step in range(args.n):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            nxt = int(np.argmax(logits))  # first (lowest) id among equal maxima
            ids.append(nxt)
            if step + 1 < args.n:
                llm.eval([nxt])
        del llm
    text = detokenize(ids, TOKENIZER)
    assert text.startswith(EXPECTED_START), text[:80]
    doc = {"description": "greedy continuation of stories260K from BOS by llama.cpp "
                          f"(llama-cpp-python {llama_cpp.__version__}, F32 GGUF); written by "
                          "tests/reference/stories260K_reference.py",
           "prompt_ids": prompt, "ids": ids, "text": text}
    with open(args.out, "w") as f:
        # One key a line, each list on its line.
        f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()) + "\n}\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
