#!/usr/bin/env python3
"""Static cycle estimates of the aarch64 decode kernels: Keel's against llama.cpp's, per format.

No ARM hardware is involved: the kernels are cross-compiled, run once under qemu-aarch64 one
instruction at a time to record the instructions they execute for one matrix-vector product,
and that instruction stream is timed by llvm-mca's pipeline models of the Cortex-A76 and
Cortex-A55. These are static pipeline-model estimates, not measurements.

Method, per format and kernel:
  1. A small driver (written below, compiled with the same cross compiler and flags for both
     projects) calls the kernel for one token over 16 weight rows: Keel's dotprod-tier matmul on
     one panel, llama.cpp's ggml_vec_dot_<type>_q8_{0,1,K} once per row (as its mul_mat does for
     a single token), and, where llama.cpp repacks the format on a dotprod CPU such as the
     Raspberry Pi 5's A76, its ggml_gemv_<type>_<n>x4 over the same 16 rows.
  2. qemu-aarch64 -singlestep -d nochain,exec logs the address of every instruction executed
     between two marker calls around the kernel call; llvm-objdump gives each address's text.
  3. llvm-mca -iterations=1 times that straight-line stream (inner loops, scale decoding and
     reductions included as executed; perfect branch prediction and L1 hits, as llvm-mca assumes).
  4. Two widths (--cols, default 2048 and 4096) give a slope: cycles per 32 weights of one row
     = (cycles(B) - cycles(A)) / (16 rows x (B - A) / 32). The intercept, the per-call cost, is
     in the JSON.

The Keel kernels are taken from a git revision (default HEAD: what is committed, not what is
being edited in the work tree): Q8, Q4 and Q4M through the dotprod table's matmul, the wide
formats through matmul_wide_dotprod. A format whose dotprod kernel file still starts with
"// Placeholder", or whose traced path reaches a ref matmul, is reported as a placeholder.

usage: bench/arm/mca.py [--rev REV | --worktree] [--cols A,B] [--formats Q4_0,...] [--out-md F] [--out-json F]
Requires: aarch64-linux-gnu-gcc/g++, qemu-aarch64, llvm-mca, llvm-objdump, flatc, git, and the
llama.cpp sources bench/build_llamacpp.sh unpacks (KEEL_LLAMACPP_SRC overrides the path).
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LCP_VERSION = "0.3.36"  # bench/build_llamacpp.sh pins the same sdist
FLAGS = ["-O3", "-march=armv8.2-a+dotprod+fp16"]
# As engine/CMakeLists.txt builds the engine for aarch64 (-ffp-contract=off since 50dccc3).
KEEL_BASE_FLAGS = ["-O3", "-DNDEBUG", "-march=armv8-a", "-std=c++20", "-fno-exceptions", "-fno-rtti", "-ffp-contract=off"]
TIER_FLAGS = {"_dotprod.cpp": ["-march=armv8.2-a+dotprod+fp16"], "_i8mm.cpp": ["-march=armv8.2-a+dotprod+fp16+i8mm"]}
QEMU_CPU = "cortex-a76"  # dotprod + fp16, as the tier under test needs
MCA_CPUS = ["cortex-a76", "cortex-a55"]
ROWS = 16
# Raspberry Pi 5: ~10 GB/s reached in decode (17 GB/s peak), shared by 4 A76 cores at 2.4 GHz.
DRAM_GBPS, CORES, GHZ = 10.0, 4, 2.4

# (GGUF type, Keel dtype, llama.cpp vec_dot, llama.cpp gemv on a dotprod CPU or None, Keel kernel file)
FORMATS = [
    ("Q4_0", "Q4", "ggml_vec_dot_q4_0_q8_0", "ggml_gemv_q4_0_4x4_q8_0", "matmul_dotprod.cpp"),
    ("Q4_1", "Q4M", "ggml_vec_dot_q4_1_q8_1", None, "matmul_dotprod.cpp"),
    ("Q5_0", "Q5", "ggml_vec_dot_q5_0_q8_0", None, "matmul_wide_dotprod.cpp"),
    ("Q5_1", "Q5M", "ggml_vec_dot_q5_1_q8_1", None, "matmul_wide_dotprod.cpp"),
    ("Q8_0", "Q8", "ggml_vec_dot_q8_0_q8_0", "ggml_gemv_q8_0_4x4_q8_0", "matmul_dotprod.cpp"),
    ("Q4_K", "Q4K", "ggml_vec_dot_q4_K_q8_K", "ggml_gemv_q4_K_8x4_q8_K", "matmul_wide_dotprod.cpp"),
    ("Q5_K", "Q5K", "ggml_vec_dot_q5_K_q8_K", "ggml_gemv_q5_K_8x4_q8_K", "matmul_wide_dotprod.cpp"),
    ("Q6_K", "Q6K", "ggml_vec_dot_q6_K_q8_K", "ggml_gemv_q6_K_8x4_q8_K", "matmul_wide_dotprod.cpp"),
]

# The llama.cpp driver: weight and activation buffers of each type (block sizes from
# ggml-common.h), one kernel call selected by name, between the two trace markers.
LLAMA_DRIVER = r"""
#define GGML_COMMON_DECL_C
#include "ggml-common.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*vec_dot_t)(int, float*, size_t, const void*, size_t, const void*, size_t, int);
typedef void (*gemv_t)(int, float*, size_t, const void*, const void*, int, int);
#define VD(name) void name(int, float*, size_t, const void*, size_t, const void*, size_t, int);
#define GV(name) void name(int, float*, size_t, const void*, const void*, int, int);
VD(ggml_vec_dot_q4_0_q8_0) VD(ggml_vec_dot_q4_1_q8_1) VD(ggml_vec_dot_q5_0_q8_0) VD(ggml_vec_dot_q5_1_q8_1)
VD(ggml_vec_dot_q8_0_q8_0) VD(ggml_vec_dot_q4_K_q8_K) VD(ggml_vec_dot_q5_K_q8_K) VD(ggml_vec_dot_q6_K_q8_K)
GV(ggml_gemv_q4_0_4x4_q8_0) GV(ggml_gemv_q8_0_4x4_q8_0) GV(ggml_gemv_q4_K_8x4_q8_K)
GV(ggml_gemv_q5_K_8x4_q8_K) GV(ggml_gemv_q6_K_8x4_q8_K)

struct kernel {
  const char* name;
  vec_dot_t dot;
  gemv_t gemv;
  size_t w_block, a_block;  // bytes of one weight block and one activation block
  int qk;                   // weights per block
};
#define E(f, wb, ab, qk) {#f, f, 0, sizeof(wb), sizeof(ab), qk}
#define G(f, wb, ab, qk) {#f, 0, f, sizeof(wb), sizeof(ab), qk}
static const struct kernel kernels[] = {
    E(ggml_vec_dot_q4_0_q8_0, block_q4_0, block_q8_0, QK4_0), E(ggml_vec_dot_q4_1_q8_1, block_q4_1, block_q8_1, QK4_1),
    E(ggml_vec_dot_q5_0_q8_0, block_q5_0, block_q8_0, QK5_0), E(ggml_vec_dot_q5_1_q8_1, block_q5_1, block_q8_1, QK5_1),
    E(ggml_vec_dot_q8_0_q8_0, block_q8_0, block_q8_0, QK8_0), E(ggml_vec_dot_q4_K_q8_K, block_q4_K, block_q8_K, QK_K),
    E(ggml_vec_dot_q5_K_q8_K, block_q5_K, block_q8_K, QK_K), E(ggml_vec_dot_q6_K_q8_K, block_q6_K, block_q8_K, QK_K),
    G(ggml_gemv_q4_0_4x4_q8_0, block_q4_0, block_q8_0, QK4_0), G(ggml_gemv_q8_0_4x4_q8_0, block_q8_0, block_q8_0, QK8_0),
    G(ggml_gemv_q4_K_8x4_q8_K, block_q4_K, block_q8_K, QK_K), G(ggml_gemv_q5_K_8x4_q8_K, block_q5_K, block_q8_K, QK_K),
    G(ggml_gemv_q6_K_8x4_q8_K, block_q6_K, block_q8_K, QK_K),
};

__attribute__((noinline)) void keel_mca_begin(void) { __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void keel_mca_end(void) { __asm__ volatile("" ::: "memory"); }

// f16 fields get 0x3c3c (1.06) so that no scale is a NaN or infinity; quants are arbitrary.
static void fill(uint8_t* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (i % 2 == 0 && (seed >> 16) % 4 == 0) ? 0x3c : (uint8_t)(seed >> 16);
  }
}

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s KERNEL COLS\n", argv[0]); return 2; }
  const int cols = atoi(argv[2]);
  for (size_t k = 0; k < sizeof(kernels) / sizeof(kernels[0]); ++k) {
    const struct kernel* e = &kernels[k];
    if (strcmp(e->name, argv[1]) != 0) continue;
    if (cols <= 0 || cols % e->qk != 0) { fprintf(stderr, "COLS must be a multiple of %d\n", e->qk); return 2; }
    const size_t nb = (size_t)(cols / e->qk), row_bytes = nb * e->w_block;
    uint8_t* w = aligned_alloc(64, row_bytes * 16);
    uint8_t* a = aligned_alloc(64, (nb * e->a_block + 63) / 64 * 64);
    float y[16];
    fill(w, row_bytes * 16, 1);
    fill(a, nb * e->a_block, 2);
    keel_mca_begin();
    if (e->dot) {
      for (int r = 0; r < 16; ++r) e->dot(cols, &y[r], 0, w + r * row_bytes, 0, a, 0, 1);
    } else {
      e->gemv(cols, y, 16, w, a, 1, 16);
    }
    keel_mca_end();
    printf("bytes_per_32 %.4f\n", (double)e->w_block * 32.0 / e->qk);
    printf("y0 %g\n", (double)y[0]);
    return 0;
  }
  fprintf(stderr, "unknown kernel %s\n", argv[1]);
  return 2;
}
"""

# The Keel driver: one panel of 16 rows of the given dtype, one token, through the dotprod
# tier's table (the table the dispatcher picks on an A76).
KEEL_DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/arm64/arm64_tables.h"
#include "kernels/kquant_kernels.h"

extern "C" __attribute__((noinline)) void keel_mca_begin() { __asm__ volatile("" ::: "memory"); }
extern "C" __attribute__((noinline)) void keel_mca_end() { __asm__ volatile("" ::: "memory"); }

int main(int argc, char** argv) {
  using keel::fb::DType;
  static const struct { const char* name; DType t; } kTypes[] = {
      {"Q8", DType::Q8}, {"Q4", DType::Q4}, {"Q4M", DType::Q4M}, {"Q5", DType::Q5},
      {"Q5M", DType::Q5M}, {"Q4K", DType::Q4K}, {"Q5K", DType::Q5K}, {"Q6K", DType::Q6K}};
  if (argc != 3) { std::fprintf(stderr, "usage: %s DTYPE COLS\n", argv[0]); return 2; }
  const uint32_t cols = uint32_t(std::atoi(argv[2]));
  for (const auto& e : kTypes) {
    if (std::strcmp(e.name, argv[1]) != 0) continue;
    if (cols == 0 || cols % 256 != 0) { std::fprintf(stderr, "COLS must be a multiple of 256\n"); return 2; }
    const uint64_t bytes = keel::panel_bytes(e.t, cols);
    const uint64_t header = keel::panel_quants_offset(e.t, cols);
    auto* w = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
    // Header (f16 scales and mins, K-quant scale bytes): 0x3c, so every f16 is 1.06, no NaN.
    std::memset(w, 0x3c, header);
    uint32_t s = 1;
    for (uint64_t i = header; i < bytes; ++i) w[i] = uint8_t((s = s * 1103515245u + 12345u) >> 16);
    const uint32_t nb = keel::act_blocks(cols);
    auto* x = static_cast<keel::ActBlock*>(std::aligned_alloc(64, (nb * sizeof(keel::ActBlock) + 63) / 64 * 64));
    for (uint32_t b = 0; b < nb; ++b) {
      x[b].d = 0.01f;
      x[b].sum = 0;
      for (int i = 0; i < 32; ++i) {
        x[b].q[i] = int8_t(int((s = s * 1103515245u + 12345u) >> 16) % 255 - 127);
        x[b].sum += x[b].q[i];
      }
    }
    const keel::WeightView wv{e.t, 16, cols, w};
    // The wide formats' kernel directly: a placeholder table hands them to the ref kernel even
    // when the tier's wide kernel exists.
    const keel::MatmulKernels& k = keel::arm64::matmul_dotprod_table();
    float y[16];
    keel_mca_begin();
    if (keel::is_wide_quant(e.t)) {
      keel::arm64::matmul_wide_dotprod(wv, x, 1, y, 16, 0, 1);
    } else {
      k.matmul(wv, x, 1, y, 16, 0, 1);
    }
    keel_mca_end();
    std::printf("bytes_per_32 %.4f\n", double(bytes) / 16.0 / double(nb));
    std::printf("table %s\n", k.name);
    std::printf("y0 %g\n", double(y[0]));
    return 0;
  }
  std::fprintf(stderr, "unknown dtype %s\n", argv[1]);
  return 2;
}
"""


def die(msg):
    print(f"mca.py: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        die(f"{' '.join(cmd[:6])}{' ...' if len(cmd) > 6 else ''} failed ({r.returncode}):\n{r.stderr[-4000:]}")
    return r.stdout


def check_tools():
    for t in ["aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "qemu-aarch64", "llvm-mca", "llvm-objdump", "flatc", "git"]:
        if shutil.which(t) is None:
            die(f"{t} is required (scripts/setup_arm64.sh installs the cross toolchain and qemu; llvm from Debian's llvm)")
    r = subprocess.run(["llvm-mca", "-mtriple=aarch64", "-mcpu=help"], capture_output=True, text=True)
    for cpu in MCA_CPUS:
        if cpu not in r.stdout + r.stderr:
            die(f"this llvm-mca has no {cpu} model (llvm-mca -mtriple=aarch64 -mcpu=help)")


def llama_src():
    env = os.environ.get("KEEL_LLAMACPP_SRC")
    cache = os.environ.get("KEEL_CACHE_DIR", os.path.expanduser("~/.cache/keel"))
    src = env or os.path.join(cache, f"llama.cpp-{LCP_VERSION}", "src", f"llama_cpp_python-{LCP_VERSION}", "vendor", "llama.cpp")
    if not os.path.isfile(os.path.join(src, "ggml", "src", "ggml-cpu", "arch", "arm", "quants.c")):
        die(f"llama.cpp sources not found at {src} (bench/build_llamacpp.sh unpacks them; or set KEEL_LLAMACPP_SRC)")
    return src


def keel_snapshot(rev, worktree, tmp):
    """The engine and schema of a git revision (or the work tree) in tmp/keel."""
    dst = os.path.join(tmp, "keel")
    os.makedirs(dst)
    if worktree:
        for d in ["engine", "schema"]:
            shutil.copytree(os.path.join(REPO, d), os.path.join(dst, d))
        desc = "work tree"
    else:
        archive = subprocess.run(["git", "-C", REPO, "archive", rev, "engine", "schema"], capture_output=True)
        if archive.returncode != 0:
            die(f"git archive {rev} failed: {archive.stderr.decode()[-2000:]}")
        subprocess.run(["tar", "-x", "-C", dst], input=archive.stdout, check=True)
        desc = run(["git", "-C", REPO, "log", "-1", "--format=%h %cI", rev]).strip()
    gen = os.path.join(dst, "generated")
    run(["flatc", "--cpp", "--scoped-enums", "--gen-mutable", "-o", gen, os.path.join(dst, "schema", "keel.fbs")])
    return dst, desc


def compile_all(jobs):
    """jobs: list of (compiler, flags, source, object). Two at a time (the machine is shared)."""
    with ThreadPoolExecutor(max_workers=2) as ex:
        list(ex.map(lambda j: run([j[0], *j[1], "-c", j[2], "-o", j[3]]), jobs))


def build_llama(src, tmp):
    d = os.path.join(tmp, "llama")
    os.makedirs(d)
    g = os.path.join(src, "ggml")
    inc = [f"-I{g}/include", f"-I{g}/src", f"-I{g}/src/ggml-cpu", "-D_GNU_SOURCE", "-DNDEBUG", "-ffunction-sections"]
    drv = os.path.join(d, "driver.c")
    with open(drv, "w") as f:
        f.write(LLAMA_DRIVER)
    jobs = [
        ("aarch64-linux-gnu-gcc", FLAGS + ["-std=c11"] + inc, f"{g}/src/ggml-cpu/arch/arm/quants.c", f"{d}/quants.o"),
        ("aarch64-linux-gnu-g++", FLAGS + ["-std=c++17"] + inc, f"{g}/src/ggml-cpu/arch/arm/repack.cpp", f"{d}/repack.o"),
        ("aarch64-linux-gnu-gcc", FLAGS + ["-std=c11"] + inc, drv, f"{d}/driver.o"),
    ]
    compile_all(jobs)
    exe = os.path.join(d, "llama_driver")
    # --gc-sections drops the kernels of other CPU levels, whose portable fallbacks live in files
    # not compiled here.
    run(["aarch64-linux-gnu-g++", "-static", "-Wl,--gc-sections", "-o", exe, f"{d}/driver.o", f"{d}/quants.o", f"{d}/repack.o"])
    return exe


def build_keel(snap, tmp):
    d = os.path.join(tmp, "keelobj")
    os.makedirs(d)
    # KEEL_HAVE_ARM64: as engine/CMakeLists.txt defines it, so kernels.cpp leaves the arm64
    # entry points to dispatch.cpp.
    inc = [f"-I{snap}/engine", f"-I{snap}/generated", "-DKEEL_HAVE_ARM64=1", "-ffunction-sections"]
    sources = []
    for sub in ["kernels", "kernels/ref", "kernels/arm64", "core"]:
        p = os.path.join(snap, "engine", sub)
        if os.path.isdir(p):
            sources += [os.path.join(p, f) for f in sorted(os.listdir(p)) if f.endswith(".cpp")]
    jobs = []
    for i, s in enumerate(sources):
        extra = next((v for k, v in TIER_FLAGS.items() if s.endswith(k)), [])
        jobs.append(("aarch64-linux-gnu-g++", KEEL_BASE_FLAGS + extra + inc, s, f"{d}/{i}_{os.path.basename(s)}.o"))
    drv = os.path.join(d, "driver.cpp")
    with open(drv, "w") as f:
        f.write(KEEL_DRIVER)
    jobs.append(("aarch64-linux-gnu-g++", KEEL_BASE_FLAGS + inc, drv, f"{d}/driver.o"))
    compile_all(jobs)
    exe = os.path.join(tmp, "keel_driver")
    # An archive: only the objects the driver reaches are linked.
    lib = os.path.join(d, "libkeel_kernels.a")
    run(["aarch64-linux-gnu-ar", "rcs", lib, *[j[3] for j in jobs[:-1]]])
    run(["aarch64-linux-gnu-g++", "-static", "-pthread", "-Wl,--gc-sections", "-o", exe, f"{d}/driver.o", lib])
    return exe


class Disasm:
    """Address -> instruction text of a static aarch64 binary, in a form llvm-mca parses."""

    LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S.*)$")
    TARGET = re.compile(r"0x[0-9a-f]+(\s+<.*>)?$")
    PCREL = {"b", "bl", "cbz", "cbnz", "tbz", "tbnz", "adr", "adrp", "ldr", "ldrsw", "prfm"}

    def __init__(self, exe):
        out = run(["llvm-objdump", "-d", "-C", "--no-show-raw-insn", "--mattr=+dotprod,+fullfp16,+i8mm,+sve", exe])
        self.text, self.syms = {}, {}
        sym = None
        for line in out.splitlines():
            m = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
            if m:
                sym = m.group(2)
                self.syms[sym] = int(m.group(1), 16)
                continue
            m = self.LINE.match(line)
            if not m:
                continue
            ins = m.group(2).split("//")[0].strip()
            mnem = ins.split()[0] if ins else ""
            if mnem in self.PCREL or mnem.startswith("b."):
                ins = self.TARGET.sub(".Ltgt", ins)
            self.text[int(m.group(1), 16)] = (ins, sym)


def trace(exe, args, dis, tmp, tag):
    """The instructions exe executes between keel_mca_begin and keel_mca_end, and its stdout."""
    log = os.path.join(tmp, f"{tag}.log")
    r = subprocess.run(["qemu-aarch64", "-cpu", QEMU_CPU, "-singlestep", "-d", "nochain,exec", "-D", log, exe, *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        die(f"{os.path.basename(exe)} {' '.join(args)} failed under qemu ({r.returncode}): {r.stderr[-2000:]}")
    begin, end = dis.syms["keel_mca_begin"], dis.syms["keel_mca_end"]
    pcs, on = [], False
    pat = re.compile(r"^Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")
    with open(log) as f:
        for line in f:
            m = pat.match(line)
            if not m:
                continue
            pc = int(m.group(1), 16)
            if pc == begin:
                on = True
                pcs = []
                continue
            if pc == end:
                on = False
                break
            if on:
                pcs.append(pc)
    os.remove(log)
    if not pcs:
        die(f"no instructions traced between the markers for {' '.join(args)}")
    ins = []
    for pc in pcs:
        if pc not in dis.text:
            die(f"traced address {pc:#x} is not in the disassembly of {exe}")
        ins.append(dis.text[pc])
    return ins, r.stdout


def mca_cycles(ins, cpu, path):
    with open(path, "w") as f:
        f.write(".Ltgt:\n")
        for text, _ in ins:
            f.write(f"  {text}\n")
    out = run(["llvm-mca", "-mtriple=aarch64", f"-mcpu={cpu}", "-iterations=1", path])
    m = re.search(r"Total Cycles:\s+(\d+)", out)
    if not m:
        die(f"llvm-mca printed no total cycles for {path}")
    return int(m.group(1))


def measure(exe, args_for_cols, dis, cols, tmp, tag):
    """Slope and intercept of cycles against width, for each CPU model."""
    res, info = {}, {}
    traces = {}
    for c in cols:
        ins, out = trace(exe, args_for_cols(c), dis, tmp, f"{tag}_{c}")
        traces[c] = ins
        info = dict(line.split(" ", 1) for line in out.strip().splitlines())
    blocks = {c: ROWS * c / 32 for c in cols}  # units of 32 weights of one row
    a, b = cols
    for cpu in MCA_CPUS:
        cy = {c: mca_cycles(traces[c], cpu, os.path.join(tmp, f"{tag}_{c}_{cpu}.s")) for c in cols}
        slope = (cy[b] - cy[a]) / (blocks[b] - blocks[a])
        res[cpu] = {"cycles_per_32": round(slope, 3), "call_cycles_16_rows": round(cy[a] - slope * blocks[a], 1),
                    "total_cycles": cy}
    sdot = sum(1 for t, _ in traces[b] if t.startswith("sdot") or t.startswith("udot"))
    syms = sorted({s for _, s in traces[b] if s})
    return {"mca": res, "instructions": {c: len(traces[c]) for c in cols}, "sdot_per_32": round(sdot / blocks[b], 3),
            "functions": syms, "bytes_per_32": float(info.get("bytes_per_32", "nan")), "table": info.get("table")}


def dram_cycles(bytes_per_32):
    # One core's share of the bandwidth when 4 cores stream together, in core cycles.
    return bytes_per_32 / (DRAM_GBPS * 1e9 / CORES) * GHZ * 1e9


def fmt(v):
    return f"{v:.1f}"


def table_md(rows):
    a76, a55 = MCA_CPUS
    lines = [
        "| Format (GGUF / Keel) | llama.cpp vec_dot A76 / A55 | llama.cpp repacked gemv A76 / A55 | Keel A76 / A55 "
        "| bytes / 32 weights (Keel / llama.cpp) | DRAM cycles at 10 GB/s, 4 cores, 2.4 GHz |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ld = r["llama_vec_dot"]["mca"]
        g = r["llama_gemv"]
        gs = f"{fmt(g['mca'][a76]['cycles_per_32'])} / {fmt(g['mca'][a55]['cycles_per_32'])}" if g else "not repacked"
        k = r["keel"]
        if k.get("placeholder"):
            ks = "placeholder (ref)"
        else:
            ks = f"{fmt(k['mca'][a76]['cycles_per_32'])} / {fmt(k['mca'][a55]['cycles_per_32'])}"
        lines.append(
            f"| {r['gguf']} / {r['keel_dtype']} | {fmt(ld[a76]['cycles_per_32'])} / {fmt(ld[a55]['cycles_per_32'])} | {gs} "
            f"| {ks} | {r['keel_bytes_per_32']:.2f} / {r['llama_bytes_per_32']:.2f} | {r['dram_cycles_per_32']:.1f} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", default="HEAD", help="git revision whose engine/kernels are timed (default HEAD)")
    ap.add_argument("--worktree", action="store_true", help="time the work tree's kernels instead of a revision")
    ap.add_argument("--cols", default="2048,4096", help="the two widths of the slope (multiples of 256)")
    ap.add_argument("--formats", default="", help="comma-separated GGUF types to time (default all)")
    ap.add_argument("--out-md", default=os.path.join(REPO, "bench", "arm", "mca_results.md"))
    ap.add_argument("--out-json", default=os.path.join(REPO, "bench", "arm", "mca_results.json"))
    args = ap.parse_args()
    cols = [int(c) for c in args.cols.split(",")]
    if len(cols) != 2 or cols[0] >= cols[1] or any(c <= 0 or c % 256 for c in cols):
        die(f"--cols wants two increasing multiples of 256, got {args.cols}")
    wanted = [f for f in args.formats.split(",") if f]
    for f in wanted:
        if f not in [x[0] for x in FORMATS]:
            die(f"unknown format {f} (one of {', '.join(x[0] for x in FORMATS)})")
    check_tools()
    src = llama_src()
    with tempfile.TemporaryDirectory(prefix="keel-mca-") as tmp:
        snap, desc = keel_snapshot(args.rev, args.worktree, tmp)
        print(f"Keel kernels: {desc}; llama.cpp: {src}", file=sys.stderr)
        lexe = build_llama(src, tmp)
        kexe = build_keel(snap, tmp)
        ldis, kdis = Disasm(lexe), Disasm(kexe)
        rows = []
        for gguf, kd, vd, gv, kfile in FORMATS:
            if wanted and gguf not in wanted:
                continue
            print(f"  {gguf} / {kd}", file=sys.stderr)
            row = {"gguf": gguf, "keel_dtype": kd, "llama_vec_dot_kernel": vd, "llama_gemv_kernel": gv}
            row["llama_vec_dot"] = measure(lexe, lambda c, vd=vd: [vd, str(c)], ldis, cols, tmp, vd)
            row["llama_gemv"] = measure(lexe, lambda c, gv=gv: [gv, str(c)], ldis, cols, tmp, gv) if gv else None
            kpath = os.path.join(snap, "engine", "kernels", "arm64", kfile)
            with open(kpath) as f:
                placeholder = f.readline().startswith("// Placeholder")
            row["keel_kernel_file"] = f"engine/kernels/arm64/{kfile}"
            if not placeholder:
                row["keel"] = measure(kexe, lambda c, kd=kd: [kd, str(c)], kdis, cols, tmp, "keel_" + kd)
                # A tier file may be real while the path from it still ends in a ref kernel.
                ref = [f for f in row["keel"]["functions"] if re.search(r"\bmatmul\w*_ref\(", f)]
                if ref:
                    print(f"mca.py: Keel's {kd} runs {ref[0]}: reported as a placeholder", file=sys.stderr)
                    placeholder = True
            if placeholder:
                row["keel"] = {"placeholder": True}
            else:
                if row["keel"]["sdot_per_32"] == 0:
                    print(f"mca.py: warning: Keel's {kd} kernel executed no SDOT", file=sys.stderr)
            # Bytes of the format Keel streams (its panel, with scales and padding): what DRAM delivers.
            kb = subprocess.run(["qemu-aarch64", "-cpu", QEMU_CPU, kexe, kd, str(cols[1])], capture_output=True, text=True)
            row["keel_bytes_per_32"] = float(re.search(r"bytes_per_32 (\S+)", kb.stdout).group(1))
            row["llama_bytes_per_32"] = row["llama_vec_dot"]["bytes_per_32"]
            row["dram_cycles_per_32"] = round(dram_cycles(row["keel_bytes_per_32"]), 2)
            rows.append(row)
    meta = {
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "keel_revision": desc,
        "llama_cpp": f"llama-cpp-python {LCP_VERSION} sdist, vendor/llama.cpp (ggml-cpu/arch/arm/quants.c, repack.cpp)",
        "compiler": run(["aarch64-linux-gnu-gcc", "--version"]).splitlines()[0],
        "llama_flags": " ".join(FLAGS) + " -DNDEBUG (C11 for quants.c, C++17 for repack.cpp)",
        "keel_flags": " ".join(KEEL_BASE_FLAGS) + " (+ -march=armv8.2-a+dotprod+fp16 for *_dotprod.cpp, as engine/CMakeLists.txt)",
        "llvm_mca": next((l.strip() for l in run(["llvm-mca", "--version"]).splitlines() if "version" in l), "?"),
        "qemu_cpu": QEMU_CPU,
        "cols": cols,
        "rows": ROWS,
        "dram": f"{DRAM_GBPS} GB/s over {CORES} cores at {GHZ} GHz",
        "note": "No ARM hardware was available: static pipeline-model estimates (llvm-mca), not measurements.",
    }
    with open(args.out_json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
        f.write("\n")
    md = (f"Cycles per 32 weights of one row (llvm-mca; no ARM hardware was available: static pipeline-model "
          f"estimates, not measurements). Keel: {desc}. Generated {meta['generated']} by bench/arm/mca.py.\n\n"
          + table_md(rows)
          + f"\n- compiler: {meta['compiler']}; llama.cpp: {meta['llama_flags']}; Keel: {meta['keel_flags']}\n"
          f"- {meta['llvm_mca']}; traced under qemu-aarch64 -cpu {QEMU_CPU}; slope between {cols[0]} and {cols[1]} "
          f"columns, {ROWS} rows\n"
          f"- DRAM cycles: the format's bytes at {DRAM_GBPS:g} GB/s shared by {CORES} cores, in cycles of one "
          f"{GHZ:g} GHz core (Raspberry Pi 5)\n")
    with open(args.out_md, "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
