#!/usr/bin/env python3
"""Golden token ids for the stories260K tokenizer, by llama2.c's encode algorithm.

Re-implements llama2.c's `encode` (run.c) over its tokenizer file tok512.bin:
  - tok512.bin: int32 max_token_length, then per token: float32 score, int32 length, bytes.
    Pieces hold spaces as ' ' (the exporter replaced SentencePiece's U+2581), id 1 is "\\n<s>\\n"
    and id 2 "\\n</s>\\n".
  - when the text is not empty, the dummy prefix: the token of " " first;
  - each UTF-8 code point (a lead byte and up to 3 continuation bytes) becomes the token of its
    text, or, when there is none, one token per byte with id byte + 3 (byte fallback);
  - repeatedly merge the adjacent pair whose concatenated text is a token with the highest score
    (strictly greater than -1e10; the leftmost pair on ties), until no pair is a token;
  - BOS (id 1) in front when asked; the golden ids are recorded without BOS.

Usage: python3 tests/reference/llama2c_tokenize.py [--check]
  writes tests/golden/stories260K_tokenizer.json; --check compares instead of writing.
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
TOKENIZER = os.path.join(SHARED, "models", "stories260K", "tok512.bin")
OUT = os.path.join(ROOT, "tests", "golden", "stories260K_tokenizer.json")

SENTENCES = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park with her friends.",
    "One day, she saw a big, red ball. \"Can I play?\" she asked.",
    "Tom and Sue were happy. They ate cake and drank milk!",
    "The dog barked: woof woof.\nThe cat said meow.",
    "  two spaces, a\ttab and numbers 1234567 and 3.14",
    "Zoë's café: naïve façade, 日本語, 🦙 emoji.",
    "hello",
    " ",
    "",
]


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (max_len,) = struct.unpack_from("<i", data, 0)
    off = 4
    pieces, scores = [], []
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        pieces.append(data[off:off + n])
        scores.append(score)
        off += n
    return pieces, scores, max_len


def encode(text, pieces, scores, bos=False):
    lookup = {}
    for i, p in enumerate(pieces):
        lookup.setdefault(p, i)  # llama2.c's sorted lookup finds one of equal pieces
    raw = text.encode("utf-8")
    tokens = []
    if bos:
        tokens.append(1)
    if raw:
        tokens.append(lookup[b" "])
    i = 0
    while i < len(raw):
        j = i + 1
        while j < len(raw) and (raw[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        cp = raw[i:j]
        if cp in lookup:
            tokens.append(lookup[cp])
        else:
            tokens.extend(b + 3 for b in cp)
        i = j
    while True:
        best_score, best_id, best_idx = -1e10, -1, -1
        for k in range(len(tokens) - 1):
            merged = pieces[tokens[k]] + pieces[tokens[k + 1]]
            tid = lookup.get(merged, -1)
            if tid != -1 and scores[tid] > best_score:
                best_score, best_id, best_idx = scores[tid], tid, k
        if best_idx == -1:
            break
        tokens[best_idx:best_idx + 2] = [best_id]
    return tokens


def main():
    pieces, scores, _ = load(TOKENIZER)
    entries = [{"text": s, "ids": encode(s, pieces, scores)} for s in SENTENCES]
    doc = {
        "tokenizer": "models/stories260K/tok512.bin",
        "reference": "llama2.c encode(text, bos=0, eos=0), re-implemented in "
                     "tests/reference/llama2c_tokenize.py",
        "entries": entries,
    }
    text = json.dumps(doc, ensure_ascii=True, indent=0) + "\n"
    if "--check" in sys.argv:
        with open(OUT, encoding="utf-8") as f:
            same = f.read() == text
        print("golden file up to date" if same else "golden file differs")
        return 0 if same else 1
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {len(entries)} entries to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
