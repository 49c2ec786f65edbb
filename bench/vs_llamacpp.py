#!/usr/bin/env python3
"""Keel and llama.cpp side by side on the same GGUF, threads and token ids, in one run.

For each depth and repetition it runs `keel bench` (on the .keel converted from the GGUF) and
llama.cpp (PyPI llama-cpp-python, built from source) in separate processes, alternating, and
records prefill t/s (ppN), decode t/s (tgN) and each process's peak RSS. It also measures DRAM
read bandwidth with `keel bench --bandwidth` and reports the fraction of the decode ceiling
(bandwidth / bytes read per token) each engine reaches. Medians over repetitions.

usage: bench/vs_llamacpp.py --gguf MODEL.gguf --keel MODEL.keel [--keel-bin build/tools/keel]
           [-t 2] [-r 5] [-p 512] [-n 128] [--depths 0,4096] [--json OUT.json] [--markdown OUT.md]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def run_child(cmd):
    """Runs cmd, returns (stdout, peak RSS bytes of that child)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err.decode(errors='replace')}")
    return out.decode(), usage.ru_maxrss * 1024


def token_ids(count, vocab):
    """The same xorshift sequence `keel bench` uses, so both engines see the same ids."""
    x = 0x2545F4914F6CDD1D
    mask = (1 << 64) - 1
    ids = []
    for _ in range(count):
        x ^= (x << 13) & mask
        x ^= x >> 7
        x ^= (x << 17) & mask
        ids.append(x % vocab)
    return ids


def llamacpp_worker(args):
    from llama_cpp import Llama

    need = args.depth + max(args.p, args.n) + 16
    llm = Llama(model_path=args.gguf, n_ctx=need, n_threads=args.t, n_threads_batch=args.t, n_batch=512,
                n_ubatch=512, verbose=False)
    ids = token_ids(args.depth + max(args.p, args.n), llm.n_vocab())
    result = {}

    def fill():
        llm.reset()
        if args.depth:
            llm.eval(ids[: args.depth])

    if args.p:
        fill()
        t0 = time.perf_counter()
        llm.eval(ids[args.depth: args.depth + args.p])
        result["pp"] = args.p / (time.perf_counter() - t0)
    if args.n:
        fill()
        t0 = time.perf_counter()
        for i in range(args.n):
            llm.eval([ids[args.depth + i]])
        result["tg"] = args.n / (time.perf_counter() - t0)
    print(json.dumps(result))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--keel", required=True)
    ap.add_argument("--keel-bin", default="build/tools/keel")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--depths", default="0,4096")
    ap.add_argument("--depth", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--llamacpp-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llamacpp_worker:
        return llamacpp_worker(args)

    import llama_cpp

    depths = [int(d) for d in args.depths.split(",")]
    rows = []
    for depth in depths:
        keel_pp, keel_tg, keel_rss, lc_pp, lc_tg, lc_rss = [], [], [], [], [], []
        for rep in range(args.r):
            out, rss = run_child([args.keel_bin, "bench", "-m", args.keel, "-p", str(args.p), "-n", str(args.n),
                                  "-d", str(depth), "-t", str(args.t), "-r", "1", "--json"])
            k = json.loads(out)
            for res in k["results"]:
                (keel_pp if res["test"].startswith("pp") else keel_tg).append(res["tps_median"])
            keel_rss.append(rss)
            out, rss = run_child([sys.executable, __file__, "--llamacpp-worker", "--gguf", args.gguf, "--keel", args.keel,
                                  "-t", str(args.t), "-p", str(args.p), "-n", str(args.n), "--depth", str(depth)])
            lc = json.loads(out.strip().splitlines()[-1])
            lc_pp.append(lc["pp"])
            lc_tg.append(lc["tg"])
            lc_rss.append(rss)
            print(f"depth {depth} rep {rep + 1}/{args.r}: keel pp {keel_pp[-1]:.1f} tg {keel_tg[-1]:.1f} | "
                  f"llama.cpp pp {lc_pp[-1]:.1f} tg {lc_tg[-1]:.1f}", file=sys.stderr)
        rows.append({"depth": depth,
                     "keel": {"pp_tps": statistics.median(keel_pp), "tg_tps": statistics.median(keel_tg),
                              "pp_samples": keel_pp, "tg_samples": keel_tg, "peak_rss_bytes": max(keel_rss)},
                     "llamacpp": {"pp_tps": statistics.median(lc_pp), "tg_tps": statistics.median(lc_tg),
                                  "pp_samples": lc_pp, "tg_samples": lc_tg, "peak_rss_bytes": max(lc_rss)}})

    out, _ = run_child([args.keel_bin, "bench", "-m", args.keel, "-p", "0", "-n", "16", "-t", str(args.t), "-r", "1",
                        "--bandwidth", "--json"])
    bw = json.loads(out)
    weights = bw["weights_bytes"]
    report = {"machine": platform.node(), "cpu_count": os.cpu_count(), "threads": args.t, "repetitions": args.r,
              "llama_cpp_python": llama_cpp.__version__, "gguf": os.path.basename(args.gguf),
              "dram_read_gbps": bw["dram_read_gbps"], "prompt_tokens": args.p, "gen_tokens": args.n, "rows": rows}
    lines = ["| depth | engine | pp%d t/s | tg%d t/s | peak RSS | tg / ceiling |" % (args.p, args.n),
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        # Bytes one decode step reads: every weight once plus the cached K,V (f16) at the mean
        # depth of the tg test; the ceiling is what the measured bandwidth allows.
        per_token = weights + bw["kv_bytes_per_cached_token"] * (row["depth"] + args.n / 2)
        row["decode_ceiling_tps"] = bw["dram_read_gbps"] * 1e9 / per_token
        for name, key in (("keel", "keel"), ("llama.cpp", "llamacpp")):
            r = row[key]
            r["fraction_of_ceiling"] = r["tg_tps"] / row["decode_ceiling_tps"]
            lines.append(f"| {row['depth']} | {name} | {r['pp_tps']:.1f} | {r['tg_tps']:.1f} | "
                         f"{r['peak_rss_bytes'] / 2**20:.1f} MiB | {100 * r['fraction_of_ceiling']:.0f}% of "
                         f"{row['decode_ceiling_tps']:.0f} |")
    report["table"] = lines
    text = "\n".join(lines)
    print(text)
    print(f"\nDRAM read bandwidth ({args.t} threads): {bw['dram_read_gbps']:.1f} GB/s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
