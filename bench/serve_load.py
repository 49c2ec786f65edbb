#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (keel serve, llama.cpp's llama-server): C
concurrent clients each stream completions (/v1/completions, "stream": true, greedy) one after
another until R requests are done. Reports time to first token and time between tokens (p50,
p99 over all requests; a token is one server-sent event carrying text), aggregate tokens/s, and
the server's RSS sampled from /proc every 0.2 s: peak, and the peak over the first and last
tenth of the requests, which must agree if memory does not grow with requests served.

usage: serve_load.py --url http://127.0.0.1:8080 --pid PID [--clients 16] [--requests 1000]
                     [--max-tokens 32] [--prompt-words 20,60] [--text FILE] [--json]

Prompts are slices of --text (default: the first Paul Graham essay under ../shared/data),
different for every request, --prompt-words long (default 20 to 60 words). Not a test: numbers go to docs/performance.md.
"""
import argparse
import glob
import http.client
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (RSS)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", default=None)
    ap.add_argument("--text", default=None)
    ap.add_argument("--prompt-words", default="20,60", help="MIN,MAX words per prompt")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    text_path = a.text
    if not text_path:
        here = os.path.dirname(os.path.abspath(__file__))
        shared = os.environ.get("KEEL_SHARED_DIR", os.path.join(here, "..", "..", "shared"))
        found = sorted(glob.glob(os.path.join(shared, "data", "paul_graham_essays", "*")))
        if not found:
            sys.exit(f"serve_load: no text under {shared}/data/paul_graham_essays (give --text)")
        text_path = found[0]
    words = open(text_path, encoding="utf-8", errors="replace").read().split()
    if len(words) < 200:
        sys.exit(f"serve_load: {text_path} has too few words")

    lo, hi = (int(x) for x in a.prompt_words.split(","))
    u = urllib.parse.urlparse(a.url)
    lock = threading.Lock()
    next_request = [0]
    ttft, gaps, tokens, errors = [], [], [0], []
    done_at = []  # (request index, finish time)
    rss_samples = []  # (time, completed requests, KiB)
    completed = [0]
    stop_sampling = threading.Event()

    def sampler():
        while not stop_sampling.is_set():
            try:
                rss_samples.append((time.time(), completed[0], rss_kib(a.pid)))
            except OSError:
                break
            time.sleep(0.2)

    # A connection per request: servers close kept-alive connections after a few requests
    # (httplib's default is 5), which a reused connection would see as a failed request.
    def client():
        while True:
            with lock:
                i = next_request[0]
                if i >= a.requests:
                    return
                next_request[0] += 1
            n = lo + (i * 7) % (hi - lo + 1)
            start = (i * 131) % (len(words) - n)
            body = {"prompt": " ".join(words[start:start + n]), "max_tokens": a.max_tokens, "temperature": 0,
                    "stream": True}
            if a.model:
                body["model"] = a.model
            t0 = time.time()
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
            try:
                conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
                r = conn.getresponse()
                if r.status != 200:
                    errors.append(f"{r.status} {r.read()[:200]!r}")
                    conn.close()
                    continue
                last, n_tok, my_gaps, first = None, 0, [], None
                while True:
                    line = r.readline()
                    if not line:
                        break
                    line = line.strip()
                    if not line.startswith(b"data: "):
                        continue
                    payload = line[6:]
                    if payload == b"[DONE]":
                        break
                    ev = json.loads(payload)
                    if not ev.get("choices") or not ev["choices"][0].get("text"):
                        continue
                    now = time.time()
                    if first is None:
                        first = now - t0
                    else:
                        my_gaps.append(now - last)
                    last = now
                    n_tok += 1
                conn.close()
            except (OSError, http.client.HTTPException, ValueError) as e:
                errors.append(repr(e))
                conn.close()
                continue
            with lock:
                if first is not None:
                    ttft.append(first)
                gaps.extend(my_gaps)
                tokens[0] += n_tok
                completed[0] += 1
                done_at.append((i, time.time()))

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    t0 = time.time()
    clients = [threading.Thread(target=client) for _ in range(a.clients)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    seconds = time.time() - t0
    stop_sampling.set()
    th.join()

    tenth = max(1, a.requests // 10)
    early = [k for _, c, k in rss_samples if c <= tenth]
    late = [k for _, c, k in rss_samples if c >= a.requests - tenth]
    res = {
        "requests": completed[0], "errors": len(errors), "clients": a.clients, "max_tokens": a.max_tokens,
        "seconds": seconds, "tokens": tokens[0], "tokens_per_second": tokens[0] / seconds,
        "ttft_p50_ms": percentile(ttft, 50) * 1000, "ttft_p99_ms": percentile(ttft, 99) * 1000,
        "itl_p50_ms": percentile(gaps, 50) * 1000, "itl_p99_ms": percentile(gaps, 99) * 1000,
        "rss_peak_mib": max(k for _, _, k in rss_samples) / 1024 if rss_samples else None,
        "rss_peak_first_tenth_mib": max(early) / 1024 if early else None,
        "rss_peak_last_tenth_mib": max(late) / 1024 if late else None,
        # Peak RSS within each tenth of the requests served, in order.
        "rss_peak_by_tenth_mib": [round(max([k for _, c, k in rss_samples if d * tenth < c <= (d + 1) * tenth]
                                            or [0]) / 1024, 2) for d in range(10)],
    }
    if errors:
        res["first_error"] = errors[0]
    if a.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:26} {v:.2f}" if isinstance(v, float) else f"{k:26} {v}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
