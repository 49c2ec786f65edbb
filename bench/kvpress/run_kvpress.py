#!/usr/bin/env python3
"""Runs prompt files through kvpress 0.5.5 on transformers: no press, SnapKVPress, StreamingLLMPress.

The model is Gemma 3 270M read from its Q4_K_M GGUF by transformers' GGUF loader (it dequantizes
every tensor to float32; weights and logits equal those of the Hugging Face directory the
project's reference tests use, to the bit). The tokenizer is that directory's tokenizer.json:
the GGUF tokenizer transformers < 5.3 builds is wrong (make_prompts.py says how).

Each prompt is prefilled whole, in one forward pass, inside the presses' hooks, then decoded
greedily token by token with the compressed cache, as kvpress's own pipeline does (one prefill
serves every method: see SharedPrefill); the press
sees the whole prompt, question included, so its observation window holds the question, as
SnapKV's paper has it and as the engine's policies do. The budget B becomes kvpress's
compression ratio per prompt, 1 - B / prompt_tokens, so the cache keeps B entries per layer
(int(n * (1 - ratio)) rounded down; never more than B).

Which layers are compressed: kvpress skips Gemma 3's sliding-window layers only when the model
is its multimodal class (BasePress.__call__); for the text-only Gemma3ForCausalLM it would
compress the 512-token local layers too, which then lose most of the window every token is
still allowed to see. The hooks are registered here exactly as BasePress.__call__ registers
them for the multimodal class: on the global layers only, the layers the engine's budget
governs. --all-layers registers them on every layer instead (kvpress's behaviour for this
class).

Times: seconds is the wall time of prefill plus the method's own scoring and decode (the other
methods' scoring inside the shared prefill taken out), cpu_seconds the process's CPU time over
the same spans (all torch threads).

usage: run_kvpress.py --prompts FILE.jsonl [FILE ...] --methods none,snapkv:1024,streaming:1024,...
                      [--gguf FILE] [--tokenizer DIR] [-t THREADS] [--limit N] [--all-layers]
Run with the kvpress venv's python (bench/kvpress/setup.sh).
"""

import argparse
import contextlib
import copy
import os
import sys
import time

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


class SharedPrefill:
    """One prefill for every method of a prompt.

    kvpress compresses a layer's cache in a hook after that layer's attention, so the prefill's
    own computation never depends on the press: every layer attends to the whole prompt. The
    hooks here call each press's own compress() on the layer's full keys and values (kvpress's
    forward_hook does the same, then writes the result into the cache) and keep each result
    apart; each method then decodes from a copy of the cache holding its own compressed layers.
    The hooks sit on the global layers only, unless all_layers (see the module's note).
    """

    def __init__(self, model, presses, all_layers):
        self.model, self.presses, self.all_layers = model, presses, all_layers
        self.kept = {}
        self.compress_seconds = {}

    def hook(self, module, inputs, kwargs, output):
        from kvpress.presses.base_press import is_prefilling
        from kvpress.utils import extract_keys_and_values

        hidden_states = kwargs["hidden_states"]
        if not is_prefilling(kwargs["cache_position"], hidden_states.shape[1]):
            return output
        keys, values = extract_keys_and_values(kwargs["past_key_values"], module.layer_idx)
        for name, press in self.presses.items():
            t0 = time.monotonic()
            k, v = press.compress(module, hidden_states, keys, values, output[1], kwargs)
            self.compress_seconds[name] = self.compress_seconds.get(name, 0.0) + time.monotonic() - t0
            self.kept.setdefault(name, {})[module.layer_idx] = (k, v)
        return output

    @contextlib.contextmanager
    def hooks(self):
        language_model = self.model.model
        handles = []
        for press in self.presses.values():
            press.post_init_from_model(self.model)
        try:
            for layer in language_model.layers:
                if not self.all_layers and layer.self_attn.is_sliding:
                    continue
                layer.self_attn.rotary_emb = language_model.rotary_emb
                handles.append(layer.self_attn.register_forward_hook(self.hook, with_kwargs=True))
            yield
        finally:
            for h in handles:
                h.remove()


def make_press(method, budget, n_tokens):
    from kvpress import SnapKVPress, StreamingLLMPress

    ratio = 1.0 - budget / n_tokens
    if ratio <= 0:
        raise SystemExit(f"budget {budget} holds the whole {n_tokens}-token prompt: nothing to compare")
    if method == "snapkv":
        return SnapKVPress(compression_ratio=ratio)
    if method == "streaming":
        return StreamingLLMPress(compression_ratio=ratio)
    raise SystemExit(f"unknown method {method!r}; expected none, snapkv or streaming")


def decode(model, tok, cache, logits, n, max_new):
    import torch

    out = []
    token = int(logits[0, -1].argmax())
    for step in range(max_new):
        if token == tok.eos_token_id:
            break
        out.append(token)
        if step + 1 == max_new:
            break
        logits = model(input_ids=torch.tensor([[token]]), past_key_values=cache,
                       cache_position=torch.tensor([n + step]), use_cache=True).logits
        token = int(logits[0, -1].argmax())
    return tok.decode(out, skip_special_tokens=True)


def run_prompt(model, tok, p, methods, all_layers):
    """{method name: (output, seconds, cpu_seconds, global cache entries after the answer)}."""
    import torch
    from transformers import DynamicCache

    presses = {name: make_press(m, b, p["prompt_tokens"]) for name, (m, b) in methods.items()
               if m != "none"}
    shared = SharedPrefill(model, presses, all_layers)
    ids = tok(p["prompt"], return_tensors="pt")["input_ids"]
    n = ids.shape[1]
    if n != p["prompt_tokens"]:
        raise SystemExit(f"{p['id']}: {n} prompt tokens, the file says {p['prompt_tokens']}: "
                         f"not the tokenizer that made it")
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        start, cpu0 = time.monotonic(), time.process_time()
        with shared.hooks():
            logits = model(input_ids=ids, past_key_values=cache, use_cache=True,
                           logits_to_keep=1).logits
        prefill = time.monotonic() - start
        prefill_cpu = time.process_time() - cpu0
        compress_total = sum(shared.compress_seconds.values())
        results = {}
        for name, (method, _) in methods.items():
            mine = copy.deepcopy(cache)
            for idx, (k, v) in shared.kept.get(name, {}).items():
                mine.layers[idx].keys, mine.layers[idx].values = k, v
            start, cpu0 = time.monotonic(), time.process_time()
            text = decode(model, tok, mine, logits, n, p["max_new_tokens"])
            own = shared.compress_seconds.get(name, 0.0)
            # This method's run: the prefill without the other presses' scoring, plus its own
            # scoring and its decode.
            seconds = prefill - compress_total + own + time.monotonic() - start
            cpu = prefill_cpu - compress_total + own + time.process_time() - cpu0
            kept = next(mine.layers[i].keys.shape[2] for i, layer in enumerate(model.model.layers)
                        if not layer.self_attn.is_sliding)
            results[name] = (text, seconds, cpu, kept)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", nargs="+", required=True)
    ap.add_argument("--methods", required=True)
    ap.add_argument("--gguf", default=os.path.expanduser(
        "~/.cache/keel/gemma3_270m/gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--tokenizer", default=os.path.expanduser("~/.cache/keel/gemma3_270m_hf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--all-layers", action="store_true")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(args.gguf), gguf_file=os.path.basename(args.gguf), dtype=torch.float32,
        attn_implementation="sdpa")
    model.eval()
    kinds = {p.dtype for p in model.parameters()}
    if kinds != {torch.float32}:
        raise SystemExit(f"expected the GGUF dequantized to float32 weights, found {kinds}")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{type(model).__name__}, {torch.get_num_threads()} threads", file=sys.stderr)

    tag = "-all" if args.all_layers else ""
    methods = {}
    for spec in args.methods.split(","):
        method, _, budget = spec.partition(":")
        methods[method + tag + (f"_{budget}" if budget else "")] = (method, int(budget or 0))
    for path in args.prompts:
        prompts = common.read_prompts(path)
        if args.limit:
            prompts = prompts[:args.limit]
        task, length = prompts[0]["task"], prompts[0]["length"]
        outs = {name: common.run_path("kvpress", m + tag, b or "", task, length)
                for name, (m, b) in methods.items()}
        done = {name: common.done_ids(path) for name, path in outs.items()}
        for p in prompts:
            todo = {name: mb for name, mb in methods.items() if p["id"] not in done[name]}
            if not todo:
                continue
            for name, (text, seconds, cpu, kept) in run_prompt(model, tok, p, todo,
                                                               args.all_layers).items():
                record = {"id": p["id"], "output": text, "score": common.score(text, p["answers"]),
                          "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
                          "prompt_tokens": p["prompt_tokens"], "global_cache_entries": kept}
                common.append(outs[name], record)
                print(f"kvpress {name} {p['id']}: score {record['score']:.2f}, {seconds:.1f} s, "
                      f"kept {kept}: {text[:60]!r}", flush=True)


if __name__ == "__main__":
    main()
