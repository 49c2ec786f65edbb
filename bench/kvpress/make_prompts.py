#!/usr/bin/env python3
"""RULER-style long-context prompts on the essay haystack, one JSONL file per task and length.

Four tasks, after RULER (arXiv 2404.06654), written for a base model: the prompt ends in the
start of the answer, so a greedy continuation states it.

  single      one needle "One of the special magic numbers for KEY is: VALUE." at a random
              depth; asked for KEY's number.
  multikey    four needles with four different keys; asked for one of them.
  multivalue  four needles with one key and four values; asked for all of them.
  vt          variable tracking: a chain "VAR A = 12345." then "VAR B = VAR A." ... over five
              variables at increasing depths; asked for every variable holding the value.

Every prompt's length is counted with the Gemma 3 tokenizer, BOS included: the tokenizer.json
that transformers' GGUF loader (5.23) writes from the same GGUF the engine converts
(tests/reference/gemma3_hf_fixture.py makes ~/.cache/keel/gemma3_270m_hf; its ids equal the
engine's over whole essays, tests/hf_gemma3). The transformers kvpress 0.5.5 accepts (< 5.3)
builds a different, wrong tokenizer from this GGUF (no BOS, pieces without merges), so it is
not used. A prompt of target length L has between L - 96 and L tokens. The
haystack is a run of whole sentences (long ones cut every 40 words) of the essays starting at a random sentence; the needles
are inserted between sentences. One seed fixes every prompt: the same command writes the same
files byte for byte.

Each line: {"id", "task", "length", "prompt" (text without BOS), "prompt_tokens" (with BOS),
"answers" (list of strings), "max_new_tokens", "depths"}.

usage: make_prompts.py [--tokenizer DIR] [--essays DIR] [--lengths 4096,8192,16384]
                       [--per-cell 20] [--seed 7] [--tasks single,multikey,multivalue,vt]
                       [-o bench/kvpress/prompts]
Run with the kvpress venv's python (bench/kvpress/setup.sh), which has transformers and gguf.
"""

import argparse
import json
import os
import random
import re
import string
import sys

TASKS = ("single", "multikey", "multivalue", "vt")
SLACK = 96

# Keys are two words, as RULER's are: common enough to be one or two tokens each, distinct
# enough that a key is never a substring of another one's answer.
ADJECTIVES = ("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy",
              "jolly", "keen", "lofty", "mellow", "narrow", "odd", "polite", "quiet", "rapid",
              "silent", "tidy", "urban", "vivid", "wary", "young", "zealous", "bitter", "clever",
              "golden", "humble", "lucky")
NOUNS = ("anchor", "badger", "candle", "dolphin", "engine", "falcon", "garden", "harbor",
         "island", "jacket", "kettle", "lantern", "meadow", "needle", "orchard", "pepper",
         "quarry", "river", "saddle", "tunnel", "umbrella", "violin", "walnut", "yacht",
         "zipper", "basket", "cactus", "donkey", "feather", "glacier")

HEADER = {
    "number": ("Some special magic numbers are hidden within the following text. Make sure to "
               "memorize them. I will quiz you about the numbers afterwards.\n"),
    "vt": ("Memorize and track the chain of variable assignment hidden in the following text.\n"),
}


def sentences_of(essays_dir):
    names = sorted(n for n in os.listdir(essays_dir) if n.endswith(".txt"))
    if not names:
        raise SystemExit(f"expected essays (*.txt) in {essays_dir}, found none")
    out = []
    for name in names:
        with open(os.path.join(essays_dir, name), encoding="utf-8") as f:
            text = re.sub(r"\s+", " ", f.read()).strip()
        # A sentence ends at . ? or ! followed by a space; the essays' run-together paragraphs
        # ("accelerating.We") are split too, so a needle never lands inside a word.
        parts = re.split(r"(?<=[.?!])\s+|(?<=[a-z][.?!])(?=[A-Z])", text)
        for p in (p.strip() for p in parts):
            # Long runs (lists, footnotes) are cut every 40 words, so the length can be met to
            # within a few dozen tokens.
            words = p.split()
            out += [" ".join(words[i:i + 40]) for i in range(0, len(words), 40)]
    return out


def key_pool(rng, n):
    keys = set()
    while len(keys) < n:
        keys.add(f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}")
    return sorted(keys)


def number(rng, digits=7):
    return str(rng.randrange(10 ** (digits - 1), 10 ** digits))


def var_name(rng):
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(5))


def task_parts(task, rng):
    """(header, needles in order of depth, question+answer start, answers, max_new_tokens)."""
    if task == "single":
        key = key_pool(rng, 1)[0]
        value = number(rng)
        needles = [f"One of the special magic numbers for {key} is: {value}."]
        question = (f"What is the special magic number for {key} mentioned in the provided "
                    f"text? The special magic number for {key} mentioned in the provided text is")
        return HEADER["number"], needles, question, [value], 24
    if task == "multikey":
        keys = key_pool(rng, 4)
        values = [number(rng) for _ in keys]
        order = list(range(4))
        rng.shuffle(order)
        needles = [f"One of the special magic numbers for {keys[i]} is: {values[i]}." for i in order]
        asked = rng.randrange(4)
        key = keys[asked]
        question = (f"What is the special magic number for {key} mentioned in the provided "
                    f"text? The special magic number for {key} mentioned in the provided text is")
        return HEADER["number"], needles, question, [values[asked]], 24
    if task == "multivalue":
        key = key_pool(rng, 1)[0]
        values = []
        while len(values) < 4:
            v = number(rng)
            if v not in values:
                values.append(v)
        needles = [f"One of the special magic numbers for {key} is: {v}." for v in values]
        question = (f"What are all the special magic numbers for {key} mentioned in the provided "
                    f"text? The special magic numbers for {key} mentioned in the provided text are")
        return HEADER["number"], needles, question, values, 64
    if task == "vt":
        value = number(rng, 5)
        names = []
        while len(names) < 5:
            v = var_name(rng)
            if v not in names:
                names.append(v)
        needles = [f"VAR {names[0]} = {value}."]
        needles += [f"VAR {names[i]} = VAR {names[i - 1]}." for i in range(1, 5)]
        question = (f"Question: Find all variables that are assigned the value {value} in the "
                    f"text above. Answer: According to the chain of variable assignment in the "
                    f"text above, 5 variables are assigned the value {value}, they are:")
        return HEADER["vt"], needles, question, names, 48
    raise ValueError(task)


def build(sentences, start, count, needles, depths):
    """The haystack sentences[start:start+count] with needle i before the sentence at depth i."""
    hay = [sentences[(start + i) % len(sentences)] for i in range(count)]
    slots = sorted((min(int(d * count), count), i) for i, d in enumerate(depths))
    out = []
    k = 0
    for pos in range(count + 1):
        while k < len(slots) and slots[k][0] == pos:
            out.append(needles[slots[k][1]])
            k += 1
        if pos < count:
            out.append(hay[pos])
    return " ".join(out)


def make_prompt(task, length, rng, sentences, sentence_tokens, tok):
    header, needles, question, answers, max_new = task_parts(task, rng)
    n = len(needles)
    if task == "vt":
        # The chain in order, spread over the text: hop i in the i-th fifth.
        depths = [(i + rng.random()) / n for i in range(n)]
    else:
        depths = sorted(rng.random() for _ in range(n))
    start = rng.randrange(len(sentences))

    def count(text):
        return len(tok(text, add_special_tokens=True)["input_ids"])

    fixed = count(header + " ".join(needles) + "\n" + question)
    # Grow by per-sentence counts (close to the joined text's), then trim on the exact count.
    total, m = fixed, 0
    while total < length:
        total += sentence_tokens[(start + m) % len(sentences)]
        m += 1
    while True:
        text = header + build(sentences, start, m, needles, depths) + "\n" + question
        n_tok = count(text)
        if n_tok <= length:
            break
        # Drop just enough sentences off the end, by their own counts, to cover the excess.
        excess = n_tok - length
        while excess > 0 and m > 1:
            m -= 1
            excess -= sentence_tokens[(start + m) % len(sentences)]
    if n_tok < length - SLACK:
        raise SystemExit(f"{task} at {length}: prompt of {n_tok} tokens, expected within "
                         f"[{length - SLACK}, {length}]")
    return {"task": task, "length": length, "prompt": text, "prompt_tokens": n_tok,
            "answers": answers, "max_new_tokens": max_new, "depths": [round(d, 4) for d in depths]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default=os.path.expanduser("~/.cache/keel/gemma3_270m_hf"),
                    help="a directory with Gemma 3's tokenizer.json")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--essays", default=os.path.join(
        here, "..", "..", "..", "shared", "data", "paul_graham_essays"))
    ap.add_argument("--lengths", default="4096,8192,16384")
    ap.add_argument("--per-cell", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("-o", "--out-dir", default=os.path.join(here, "prompts"))
    args = ap.parse_args()

    from transformers import AutoTokenizer

    if not os.path.isfile(os.path.join(args.tokenizer, "tokenizer.json")):
        raise SystemExit(f"expected Gemma 3's tokenizer.json in {args.tokenizer}, found none "
                         f"(tests/reference/gemma3_hf_fixture.py writes it)")
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    sentences = sentences_of(args.essays)
    sentence_tokens = [len(tok(s, add_special_tokens=False)["input_ids"]) for s in sentences]
    os.makedirs(args.out_dir, exist_ok=True)
    for task in args.tasks.split(","):
        if task not in TASKS:
            raise SystemExit(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
        for length in (int(x) for x in args.lengths.split(",")):
            # One stream per (task, length): adding a cell never changes another's prompts.
            rng = random.Random(f"{args.seed}/{task}/{length}")
            path = os.path.join(args.out_dir, f"{task}_{length}.jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for i in range(args.per_cell):
                    p = make_prompt(task, length, rng, sentences, sentence_tokens, tok)
                    p = {"id": f"{task}-{length}-{i:03d}", **p}
                    f.write(json.dumps(p) + "\n")
            print(f"wrote {path}: {args.per_cell} prompts", file=sys.stderr)


if __name__ == "__main__":
    main()
