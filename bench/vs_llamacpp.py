#!/usr/bin/env python3
"""Keel and llama.cpp's own llama-bench side by side on the same GGUF, in one run.

The peer is llama.cpp's native `llama-bench` (built by bench/build_llamacpp.sh), not a Python
binding: both engines are C++ processes timing their own prefill (ppN) and decode (tgN) loops
on pseudo-random token ids after DEPTH tokens already in the KV cache.

For every repetition, weights file, thread count and depth it runs one `keel bench --json` and
one `llama-bench -o json`, alternating (keel, llama.cpp, keel, llama.cpp, ...), each process
timing a single repetition, so a noisy moment on a shared host hits both engines instead of
one. The repetition loop is the outermost, so it also spreads over every configuration.
Reported: medians of pp and tg t/s, each process's peak RSS, and the decode ceiling: DRAM read
bandwidth (`keel bench --bandwidth`, in a separate process right after each keel run) over the
bytes one decode step reads (weights plus the cached K,V it attends to, as keel bench counts).

Warm-up: llama-bench runs an untimed prompt and one generated token before its timed run.
Keel's untimed depth prefill does the same work at DEPTH > 0; at DEPTH 0 keel runs two
repetitions and the first, cold one is dropped (kept in the JSON as keel warmup samples).

Weights: the GGUF given (e.g. Q4_1) and, with --q4_0, a Q4_0 made from it by
`llama-quantize --allow-requantize` (llama.cpp repacks Q4_0 for AVX2/AVX-512 at load; its
fastest 4-bit CPU path). Keel reads each GGUF converted losslessly (`keel convert --quant keep`).
Keel runs with the full KV cache (--kv-policy full), like llama.cpp.

usage: bench/vs_llamacpp.py --gguf MODEL.gguf [--q4_0] [--keel-bin build/tools/keel]
           [--llama-bin DIR] [-t 1,2] [-r 5] [-p 512] [-n 128] [--depths 0,4096]
           [--work DIR] [--json OUT.json] [--markdown OUT.md]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run_child(cmd):
    """Runs cmd, returns (stdout, stderr)."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode(), proc.stderr.decode(errors="replace")


def run_timed(cmd):
    """Runs cmd, returns (stdout, peak RSS bytes of that child, 1-minute load average before it)."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read().decode(errors='replace')}")
    return out.decode(), usage.ru_maxrss * 1024, load


def llama_bin_dir(args):
    if args.llama_bin:
        return args.llama_bin
    out = subprocess.run(["bash", os.path.join(HERE, "build_llamacpp.sh")], stdout=subprocess.PIPE, check=True)
    return out.stdout.decode().strip().splitlines()[-1]


def newer(path, than):
    return os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(than)


def prepare_models(args, bindir):
    """[(label, gguf, keel)] for every weights file to measure, converting as needed."""
    os.makedirs(args.work, exist_ok=True)
    ggufs = [args.gguf]
    if args.q4_0:
        q40 = os.path.join(args.work, os.path.basename(args.gguf).rsplit(".", 2)[0] + ".Q4_0.gguf")
        if not newer(q40, args.gguf):
            print(f"llama-quantize --allow-requantize {args.gguf} -> {q40} Q4_0", file=sys.stderr)
            run_child([os.path.join(bindir, "llama-quantize"), "--allow-requantize", args.gguf, q40, "Q4_0"])
        ggufs.append(q40)
    models = []
    for gguf in ggufs:
        keel = os.path.join(args.work, os.path.basename(gguf)[: -len(".gguf")] + ".keel")
        if not newer(keel, gguf):
            print(f"keel convert {gguf} -> {keel}", file=sys.stderr)
            run_child([args.keel_bin, "convert", gguf, "-o", keel, "--quant", "keep", "-q"])
        label = gguf.rsplit(".", 2)[-2] if gguf.count(".") >= 2 else os.path.basename(gguf)
        models.append((label, gguf, keel))
    return models


def keel_once(args, keel, threads, depth):
    reps = 2 if depth == 0 else 1
    out, rss, load = run_timed([args.keel_bin, "bench", "-m", keel, "-p", str(args.p), "-n", str(args.n),
                                "-d", str(depth), "-t", str(threads), "-r", str(reps), "--kv-policy", "full", "--json"])
    k = json.loads(out)
    s = {"rss": rss, "load": load, "bytes_per_token": k["bytes_per_token"], "backend": k["backend"],
         "kernels": k["matmul_kernels"]}
    for res in k["results"]:
        key = "pp" if res["test"].startswith("pp") else "tg"
        s[key] = res["samples"][-1]
        if reps > 1:
            s[key + "_warmup"] = res["samples"][:-1]
    # DRAM read bandwidth right after, in its own process: its 1 GiB buffer stays out of the RSS
    # above. The ceiling is that bandwidth over the bytes the timed decode steps read.
    out, _, _ = run_timed([args.keel_bin, "bench", "-m", keel, "-p", "0", "-n", "1", "-t", str(threads), "-r", "1",
                           "--bandwidth", "--json"])
    s["gbps"] = json.loads(out)["dram_read_gbps"]
    s["ceiling"] = s["gbps"] * 1e9 / s["bytes_per_token"]
    return s


def llama_once(bindir, args, gguf, threads, depth):
    out, rss, load = run_timed([os.path.join(bindir, "llama-bench"), "-m", gguf, "-p", str(args.p), "-n", str(args.n),
                          "-d", str(depth), "-t", str(threads), "-r", "1", "-fa", args.llama_fa,
                                "-o", "json"])
    s = {"rss": rss, "load": load}
    for res in json.loads(out):
        key = "pp" if res["n_prompt"] > 0 else "tg"
        s[key] = res["samples_ts"][0]
        s["info"] = {f: res.get(f) for f in ("build_commit", "build_number", "cpu_info", "backends", "model_type",
                                             "model_size", "n_batch", "n_ubatch", "type_k", "type_v", "flash_attn",
                                             "use_mmap", "repack", "poll")}
    return s


def med(samples, key):
    vals = [s[key] for s in samples if key in s]
    return statistics.median(vals) if vals else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--q4_0", action="store_true", help="also measure a Q4_0 requantized from --gguf")
    ap.add_argument("--keel-bin", default="build/tools/keel")
    ap.add_argument("--llama-bin", help="directory with llama-bench and llama-quantize "
                                        "(default: what bench/build_llamacpp.sh builds)")
    ap.add_argument("--llama-fa", default="auto", choices=("auto", "on", "off"),
                    help="llama-bench -fa; auto turns flash attention on, which on this CPU decodes "
                         "3x slower at depth 4096 than off (docs/performance.md)")
    ap.add_argument("-t", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--depths", default="0,4096")
    ap.add_argument("--work", default=os.path.join(os.environ.get("KEEL_CACHE_DIR", os.path.expanduser("~/.cache/keel")),
                                                   "vs_llamacpp"), help="where converted models go")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args()

    bindir = llama_bin_dir(args)
    version = "".join(run_child([os.path.join(bindir, "llama-bench"), "--version"]))
    models = prepare_models(args, bindir)
    threads = [int(t) for t in args.t.split(",")]
    depths = [int(d) for d in args.depths.split(",")]
    configs = [(m, t, d) for m in models for t in threads for d in depths]
    samples = {(m[0], t, d): {"keel": [], "llama.cpp": []} for m, t, d in configs}
    start = time.time()
    for rep in range(args.r):
        for (label, gguf, keel), t, d in configs:
            cell = samples[(label, t, d)]
            cell["keel"].append(keel_once(args, keel, t, d))
            cell["llama.cpp"].append(llama_once(bindir, args, gguf, t, d))
            k, l = cell["keel"][-1], cell["llama.cpp"][-1]
            print(f"rep {rep + 1}/{args.r} {label} t{t} d{d}: keel pp {k['pp']:.1f} tg {k['tg']:.1f} | "
                  f"llama.cpp pp {l['pp']:.1f} tg {l['tg']:.1f} | {time.time() - start:.0f} s", file=sys.stderr)

    rows = []
    for (label, gguf, keel), t, d in configs:
        cell = samples[(label, t, d)]
        ceiling = med(cell["keel"], "ceiling")
        row = {"weights": label, "gguf": os.path.basename(gguf), "threads": t, "depth": d,
               "dram_read_gbps": med(cell["keel"], "gbps"), "decode_ceiling_tps": ceiling,
               "bytes_per_token": cell["keel"][0]["bytes_per_token"]}
        for eng, ss in cell.items():
            row[eng] = {"pp_tps": med(ss, "pp"), "tg_tps": med(ss, "tg"),
                        "peak_rss_bytes": max(s["rss"] for s in ss),
                        "pp_samples": [round(s["pp"], 2) for s in ss], "tg_samples": [round(s["tg"], 2) for s in ss]}
            if eng == "keel" and d == 0:
                row[eng]["pp_warmup_samples"] = [round(x, 2) for s in ss for x in s.get("pp_warmup", [])]
            row[eng]["rss_samples"] = [s["rss"] for s in ss]
            row[eng]["loadavg1_before"] = [round(s["load"], 2) for s in ss]
        row["keel"]["backend"] = cell["keel"][0]["backend"] + " (" + cell["keel"][0]["kernels"] + ")"
        row["dram_gbps_samples"] = [round(s["gbps"], 2) for s in cell["keel"]]
        rows.append(row)
    info = samples[(configs[0][0][0], configs[0][1], configs[0][2])]["llama.cpp"][0]["info"]

    pp, tg = f"pp{args.p}", f"tg{args.n}"
    lines = [f"| weights | threads | depth | engine | {pp} t/s | {tg} t/s | peak RSS | {tg} / ceiling |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        for eng in ("keel", "llama.cpp"):
            r = row[eng]
            lines.append(f"| {row['weights']} | {row['threads']} | {row['depth']} | {eng} | {r['pp_tps']:.1f} | "
                         f"{r['tg_tps']:.1f} | {r['peak_rss_bytes'] / 2**20:.1f} MiB | "
                         f"{100 * r['tg_tps'] / row['decode_ceiling_tps']:.0f}% of {row['decode_ceiling_tps']:.0f} |")
    lines += ["", f"| weights | threads | depth | {pp} keel / llama.cpp | {tg} keel / llama.cpp |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        k, l = row["keel"], row["llama.cpp"]
        lines.append(f"| {row['weights']} | {row['threads']} | {row['depth']} | {k['pp_tps'] / l['pp_tps']:.2f}x | "
                     f"{k['tg_tps'] / l['tg_tps']:.2f}x |")
    text = "\n".join(lines)
    print(text)

    report = {"machine": platform.node(), "cpu_count": os.cpu_count(), "repetitions": args.r,
              "prompt_tokens": args.p, "gen_tokens": args.n, "threads": threads, "depths": depths,
              "llama_cpp_version": version.strip().splitlines(), "llama_bench": info,
              "keel_bin": args.keel_bin, "rows": rows, "table": lines}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
