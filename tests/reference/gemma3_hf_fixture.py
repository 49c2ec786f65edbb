#!/usr/bin/env python3
"""Writes a Hugging Face Gemma 3 270M checkpoint (config.json, model.safetensors in float32,
tokenizer.json, tokenizer_config.json) from the Q4_K_M GGUF that
models/gemma3.recipe fetches, with transformers' own GGUF loader: it dequantizes every tensor
and undoes llama.cpp's +1 on the norm weights, so the directory is what a Hugging Face
gemma3_text checkpoint holds. A generated fixture for tests/reference/gemma3_hf_reference.py and
the hf_gemma3 tests; it lives in the cache, never in the repository.

Idempotent: a directory whose stamp names the same GGUF size and transformers version is kept.
Run by the venv python of scripts/setup.sh (transformers, torch, gguf).

usage: gemma3_hf_fixture.py GGUF OUT_DIR
"""
import json
import os
import shutil
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    gguf_path, out_dir = sys.argv[1], sys.argv[2]
    if not os.path.isfile(gguf_path):
        sys.exit(f"gemma3_hf_fixture: {gguf_path} not found (scripts/setup.sh fetches it)")
    from importlib.metadata import version

    stamp = {"gguf": os.path.basename(gguf_path), "gguf_bytes": os.path.getsize(gguf_path),
             "transformers": version("transformers"), "dtype": "float32"}
    stamp_path = os.path.join(out_dir, "fixture_stamp.json")
    if os.path.isfile(stamp_path):
        with open(stamp_path) as f:
            if json.load(f) == stamp:
                print(f"gemma3_hf_fixture: {out_dir} is up to date")
                return

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, name = os.path.split(os.path.abspath(gguf_path))
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    if model.config.model_type != "gemma3_text":
        sys.exit(f"gemma3_hf_fixture: transformers read model_type {model.config.model_type!r}, expected gemma3_text")

    # The loader dequantized every tensor (the model holds plain float32 Linear weights), but it
    # keeps its GGUF quantizer attached, which refuses to save; what is saved is a float model.
    for mod_name, module in model.named_modules():
        if module.__class__.__module__.split(".")[1:3] == ["integrations", "gguf"]:
            sys.exit(f"gemma3_hf_fixture: {mod_name} is a GGUF module, not a dequantized layer")
    for p_name, param in model.named_parameters():
        if param.dtype != torch.float32 or type(param) is not torch.nn.Parameter:
            sys.exit(f"gemma3_hf_fixture: {p_name} is {type(param).__name__} {param.dtype}, expected float32")
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config

    partial = out_dir + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    with open(os.path.join(partial, "fixture_stamp.json"), "w") as f:
        json.dump(stamp, f)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(partial, out_dir)
    print(f"gemma3_hf_fixture: wrote {out_dir}: {sorted(os.listdir(out_dir))}")


if __name__ == "__main__":
    main()
