#!/usr/bin/env python3
"""Golden pre-token splits for every pre-tokenizer the engine implements by hand.

The reference is the PyPI `tokenizers` package configured as each family's tokenizer.json does:
  Gpt2    ByteLevel(add_prefix_space=False, use_regex=True)
  SmolLM  Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]
  Llama3  Split(Regex(LLAMA3), behavior="isolated")   (then ByteLevel with use_regex=False)
  Qwen2   Split(Regex(QWEN2), behavior="isolated")
The corpus is the one of tokenizer_golden.py plus strings aimed at the differences between the
patterns. Pieces are recorded as substrings of the original text.

Usage: python3 tests/reference/pretokenize_golden.py [--check]
  writes tests/golden/pretokenize_splits.json; --check compares instead of writing.
"""
import json
import os
import sys

from tokenizers import Regex, pre_tokenizers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_golden  # noqa: E402  (its corpus)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "pretokenize_splits.json")

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

EXTRA = [
    "1234567890 12 1 123 1234",
    "abc123def 4567 x89",
    "(hello) [world] {x} 'quote' \"dq\"",
    "\thello\n\nworld  \n  foo\r\n\r\nbar",
    "a\n\n b  \n\t c",
    "...\n\n!!!\r\n",
    " !!! ??? ",
    "I'VE WE'LL HE'D she's 'RE 'Ll",
    "x \n y \r\n z",
    "   \n",
    "word\u00a0\u00a0next \u3000 \u2003x",
    "١٢٣٤ ²³ ¼½ ⅠⅡⅢ",
    "emoji👍🏽text 🎉🎉 done",
    "tab\t\tdigits\t123\t",
    "end with space ",
    "end with newline\n",
]

KINDS = {
    "Gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    "SmolLM": pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ]),
    "Llama3": pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
    "Qwen2": pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
}


def main():
    texts = [t for t in tokenizer_golden.CORPUS + EXTRA
             if "<|" not in t and "<file" not in t and t]
    entries = []
    for text in texts:
        splits = {}
        for name, pt in KINDS.items():
            splits[name] = [text[b:e] for _, (b, e) in pt.pre_tokenize_str(text)]
        entries.append({"text": text, "splits": splits})
    doc = {"reference": f"tokenizers {__import__('tokenizers').__version__}", "entries": entries}
    out = json.dumps(doc, ensure_ascii=True, indent=0) + "\n"
    if "--check" in sys.argv:
        with open(OUT, encoding="utf-8") as f:
            same = f.read() == out
        print("golden file up to date" if same else "golden file differs")
        return 0 if same else 1
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(out)
    print(f"wrote {len(entries)} entries to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
