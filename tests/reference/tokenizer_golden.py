#!/usr/bin/env python3
"""Golden token ids for the SmolLM2 byte-level BPE tokenizer, from the Hugging Face reference.

Reads ../shared/fixtures/smollm2-135m-tokenizer/tokenizer.json with the PyPI `tokenizers`
package and encodes a varied corpus with add_special_tokens=False. Special added tokens in the
text (e.g. "<|im_start|>") are still split out as single ids by the reference: that is what
the engine reproduces with EncodeOptions::parse_special = true. Each entry also records whether
decoding the ids gives the text back.

Usage: python3 tests/reference/tokenizer_golden.py [--check]
  writes tests/golden/smollm2_tokenizer.json; --check compares instead of writing.
"""
import json
import os
import sys

from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
TOKENIZER = os.path.join(SHARED, "fixtures", "smollm2-135m-tokenizer", "tokenizer.json")
ESSAY = os.path.join(SHARED, "data", "paul_graham_essays", "addiction.txt")
OUT = os.path.join(ROOT, "tests", "golden", "smollm2_tokenizer.json")

CORPUS = [
    # English prose
    "Hello world",
    "Hello, world!",
    " Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily. She loved to play outside.",
    "It was the best of times, it was the worst of times.",
    "In 1492, Columbus sailed the ocean blue.",
    # contractions, in various cases
    "I'm sure you'll see it's fine, isn't it? We'd've known; they're here, we've won.",
    "I'M SURE YOU'LL SEE IT'S FINE. THEY'RE HERE, WE'VE WON, HE'D GO.",
    "don't Don't DON'T 's 't 'll 'S 'T 'LL 'Re 'rE",
    "rock'n'roll o'clock 'quoted' ''double'' '",
    # code
    "def add(a, b):\n    return a + b\n",
    "int main(int argc, char** argv) {\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{:?}\", v); }",
    "const f = async (x) => { await fetch(`/api/${x}`); };",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i)\n",
    "x=1;y=2;z=x+y;//comment\n/* block */",
    "<html><body><div class=\"main\">Hi &amp; bye</div></body></html>",
    # Unicode
    "Bonjour, ça va? Très bien, merci. Œuvre, naïve, façade.",
    "Grüße aus Köln: Äpfel, Öl, Übermut, Straße.",
    "Привет, как дела? Всё хорошо.",
    "日本語のテキストを処理します。東京は大きい都市です。",
    "我想在apple工作1314151天～",
    "中文字符和English混合在一起。",
    "한국어 텍스트도 있습니다.",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "e\u0301 a\u0300 o\u0308 n\u0303: combining marks",
    "\u0915\u094d\u0937 \u0924\u094d\u0930 \u091c\u094d\u091e",
    "Ελληνικά: αβγδε ΑΒΓΔΕ",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "ſtraße 'ſ 'S",
    # emoji incl. ZWJ sequences and flags
    "I love 🦙 and 🚀!",
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag",
    "😶‍🌫️ (multiple emojis concatenated) ✅ 🇫🇷🇯🇵",
    "🦙🦙🦙",
    # whitespace runs
    "  two leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "tab\there\t\tand\t\t\tmore",
    "line1\nline2\n\nline4\n\n\n",
    "\n\n\n",
    "   \n   \n",
    "\r\nwindows\r\nline endings\r\n",
    " ",
    "  ",
    "\t",
    "mixed \t\n whitespace \n\t end",
    "\u00a0non-breaking\u00a0space and\u3000ideographic\u2028line sep",
    "\x1c\x1d\x1e\x1f info separators \x85 next line",
    "zero\u200bwidth\u200cjoiner\u200d",
    # digits and numbers
    "1234567",
    "3.14 2.71828 -0.5 1e10 0x1F",
    "The year 2024 had 366 days; 1,000,000 people.",
    "a1b2c3 123abc abc123",
    "phone: +1 (555) 123-4567",
    "٣٤٥ ² ³ ½ ① ② Ⅻ 一二三",
    # punctuation runs
    "!!!!!!",
    "...?!?!... --- === *** ###",
    "(((nested)))[[brackets]]{{braces}}",
    "@user #hashtag $100 50% ^caret& ~tilde` |pipe\\ back",
    "\"quoted\" 'single' «guillemets» “curly” ‘quotes’",
    "— – - … • · ¶ § © ® ™",
    # special tokens
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start |> not special <|im_end",
    "<filename>main.py<file_sep><reponame>keel",
    # edge cases
    "",
    "a",
    "'",
    "''",
    "\u2581leading block",
]


def essay_chunk():
    with open(ESSAY, encoding="utf-8") as f:
        return f.read()[:3000]


def mt_bench_turns(count):
    turns = []
    with open(os.path.join(SHARED, "data", "mt_bench.jsonl"), encoding="utf-8") as f:
        for line in f:
            turns.extend(json.loads(line)["turns"])
            if len(turns) >= count:
                break
    return turns[:count]


def main():
    tok = Tokenizer.from_file(TOKENIZER)
    texts = CORPUS + [essay_chunk()] + mt_bench_turns(6)
    entries = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        decoded = tok.decode(ids, skip_special_tokens=False)
        entries.append({"text": text, "ids": ids, "roundtrip": decoded == text})
    doc = {
        "tokenizer": "smollm2-135m-tokenizer/tokenizer.json",
        "reference": f"tokenizers {__import__('tokenizers').__version__}, "
                     "encode(text, add_special_tokens=False)",
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
