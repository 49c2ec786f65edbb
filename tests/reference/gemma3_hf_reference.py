#!/usr/bin/env python3
"""transformers' own forward pass over a Hugging Face Gemma 3 checkpoint (the directory
tests/reference/gemma3_hf_fixture.py writes), as the reference the hf_gemma3 tests hold a
`keel convert`-ed copy of that directory to.

For each prompt it records the ids transformers' tokenizer gives (BOS included), and at every
greedy step the top-20 logits, the margin between the first two and the token taken. Float32
weights, eager attention (the sliding window masked explicitly), transformers' own KV cache
from one step to the next.

Idempotent: an OUT.json written by this same script (its SHA-256) over the same checkpoint
(the fixture's stamp) and essay is kept, so the Release and sanitizer suites share one run.

usage: gemma3_hf_reference.py HF_DIR ESSAY OUT.json
  ESSAY: a long English text; its first 2996 bytes are a prompt longer than the 512-token window.
"""
import hashlib
import json
import os
import sys

TOP = 20
ESSAY_BYTES = 2996
PROMPTS = [
    {"name": "capital", "text": "The capital of France is", "steps": 8},
    {"name": "counting", "text": "1, 2, 3, 4, 5,", "steps": 8},
    {"name": "code", "text": "def fibonacci(n):", "steps": 8},
    {"name": "chat", "chat": "Write a haiku about the sea.", "steps": 8},
    {"name": "essay", "essay_bytes": ESSAY_BYTES, "steps": 3},
]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    hf_dir, essay_path, out_path = sys.argv[1:]
    with open(__file__, "rb") as f:
        script_sha = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(hf_dir, "fixture_stamp.json")) as f:
        fixture = json.load(f)
    with open(essay_path, "rb") as f:
        essay_sha = hashlib.sha256(f.read()[:ESSAY_BYTES]).hexdigest()
    inputs = {"script_sha256": script_sha, "fixture": fixture, "essay_sha256": essay_sha}
    if os.path.isfile(out_path):
        try:
            with open(out_path) as f:
                if json.load(f).get("inputs") == inputs:
                    print(f"gemma3_hf_reference: {out_path} is up to date")
                    return
        except (OSError, ValueError):
            pass
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    with open(essay_path, "rb") as f:
        essay = f.read()[:ESSAY_BYTES].decode("utf-8")

    cases = []
    for p in PROMPTS:
        case = {"name": p["name"], "steps": []}
        if "chat" in p:
            # Gemma's chat format with the turn for the model opened; it starts with <bos> itself.
            # (The GGUF, and so the checkpoint made from it, carries no chat template.)
            text = f"<bos><start_of_turn>user\n{p['chat']}<end_of_turn>\n<start_of_turn>model\n"
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            case["parse_special"] = True
        else:
            text = essay if "essay_bytes" in p else p["text"]
            ids = tokenizer(text)["input_ids"]
            case["parse_special"] = False
        case["text"] = text
        case["prompt_ids"] = list(ids)
        continuation = []
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True, logits_to_keep=1)
            for _ in range(p["steps"]):
                values, order = torch.topk(out.logits[0, -1].double(), TOP)
                case["steps"].append({"top_ids": order.tolist(), "top_logits": values.tolist(),
                                      "margin": float(values[0] - values[1])})
                continuation.append(int(order[0]))
                out = model(torch.tensor([[continuation[-1]]]), past_key_values=out.past_key_values, use_cache=True)
        case["continuation"] = continuation
        print(f"{p['name']}: {len(ids)} prompt ids, continuation {tokenizer.decode(case['continuation'])!r}")
        cases.append(case)

    out = {"description": "transformers forward of a Hugging Face Gemma 3 checkpoint; written by "
                          "tests/reference/gemma3_hf_reference.py",
           "transformers": transformers.__version__, "torch": torch.__version__, "inputs": inputs, "top": TOP,
           "cases": cases}
    with open(out_path + ".part", "w") as f:
        json.dump(out, f)
    os.replace(out_path + ".part", out_path)


if __name__ == "__main__":
    main()
