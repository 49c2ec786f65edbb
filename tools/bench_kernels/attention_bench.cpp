// The attention a decode step of SmolLM2-135M does at one depth, per KV row format: 30 layers x 9
// query heads (3 KV heads) of 64, scores against `depth` cached keys and the weighted sum of as
// many values, with the x86 kernels (kernels/attention.h). Keys and values are random normal
// numbers stored as f16, q8 and q4; every layer has its own cache, so a step reads
// depth x 23,040 bytes in f16 as the engine does, mostly from DRAM past a few hundred tokens.
// Each format runs with each x86 table the CPU has (AVX2; AVX-512 VNNI, which the engine picks
// when present), one query head per call, and through each table's grouped-query entries, which
// the engine runs: a KV head's 3 query heads per call, each row read from memory once.
//
// Times are the thread's CPU time (a shared host's other work does not count; cache and memory
// contention still do), median of 7 steps, formats alternating within each repetition.
//
// Usage: attention_bench [DEPTH ...]   (default 2048 4096 8192)
//        attention_bench --resident [ROWS]   (default 1024)
// --resident runs the grouped entries over one KV head's ROWS rows again and again, so that the
// rows stay in L2 and the times are the kernels' arithmetic: ns per row for the 3 queries.
// Build by hand after keel_engine, one command:
//   g++ -O2 -std=c++20 -I engine tools/bench_kernels/attention_bench.cpp build/engine/libkeel_engine.a
//       -lpthread -o build/attention_bench
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/kv_type.h"
#include "kernels/attention.h"

namespace {

using namespace keel;

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

constexpr uint32_t kHeadDim = 64, kHeads = 9, kKvHeads = 3, kLayers = 30, kReps = 7;
constexpr KvType kTypes[3] = {KvType::F16, KvType::Q8, KvType::Q4};

// One measured row: a format and the kernel table that reads it.
struct Variant {
  int type;  // index into kTypes
  const AttentionKernels* k;
  bool grouped = false;  // the query heads of a KV head in one call
};

struct Cache {
  std::vector<uint16_t> keys, values;  // [layer][kv head][depth] rows
};

Cache make_cache(KvType t, uint32_t depth, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  const uint32_t row = kv_row_halves(t, kHeadDim);
  const uint64_t rows = uint64_t(depth) * kKvHeads * kLayers;
  Cache c;
  c.keys.resize(rows * row);
  c.values.resize(rows * row);
  std::vector<float> x(kHeadDim);
  for (uint64_t j = 0; j < rows; ++j) {
    for (float& v : x) v = nd(rng);
    kv_quantize_row(t, x.data(), kHeadDim, &c.keys[j * row]);
    for (float& v : x) v = nd(rng);
    kv_quantize_row(t, x.data(), kHeadDim, &c.values[j * row]);
  }
  return c;
}

}  // namespace

// The grouped entries of `k` over one KV head's `rows` rows, 400 calls per sample, median of 9.
int resident(const AttentionKernels* k, uint32_t rows) {
  constexpr uint32_t kGroup = kHeads / kKvHeads, kCalls = 400;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::printf("%s table, %u rows of one KV head in cache, %u queries per call: ns per row\n", k->name, rows, kGroup);
  std::printf("%-4s %10s %10s\n", "type", "scores", "sums");
  for (KvType t : kTypes) {
    if (!k->scores_group_of(t) || !k->weighted_sum_group_of(t)) continue;
    // The first KV head of make_cache's first layer: `rows` rows from its start.
    const Cache cache = make_cache(t, rows, rng);
    const uint16_t* keys = cache.keys.data();
    const uint16_t* values = cache.values.data();
    std::vector<float> q(kGroup * kHeadDim), p(uint64_t(kGroup) * rows), out(kGroup * kHeadDim);
    for (float& v : q) v = nd(rng);
    std::vector<double> a, b;
    for (uint32_t rep = 0; rep < 9; ++rep) {
      const double t0 = thread_seconds();
      for (uint32_t c = 0; c < kCalls; ++c)
        k->scores_group_of(t)(q.data(), kGroup, keys, rows, kHeadDim, 0.125f, p.data(), rows);
      const double t1 = thread_seconds();
      std::fill(p.begin(), p.end(), 1.0f / float(rows));
      const double t2 = thread_seconds();
      for (uint32_t c = 0; c < kCalls; ++c)
        k->weighted_sum_group_of(t)(p.data(), rows, kGroup, values, rows, kHeadDim, out.data());
      const double t3 = thread_seconds();
      a.push_back((t1 - t0) * 1e9 / (double(kCalls) * rows));
      b.push_back((t3 - t2) * 1e9 / (double(kCalls) * rows));
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::printf("%-4s %10.2f %10.2f\n", kv_type_name(t), a[4], b[4]);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--resident") {
    const AttentionKernels* k = attention_kernels_x86_avx512();
    if (k == nullptr) k = attention_kernels_x86_avx2();
    if (k == nullptr) {
      std::fprintf(stderr, "attention_bench: this CPU lacks AVX2/F16C/FMA\n");
      return 1;
    }
    return resident(k, argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 1024);
  }
  std::vector<uint32_t> depths;
  for (int i = 1; i < argc; ++i) depths.push_back(uint32_t(std::strtoul(argv[i], nullptr, 10)));
  if (depths.empty()) depths = {2048, 4096, 8192};
  const AttentionKernels* avx2 = attention_kernels_x86_avx2();
  const AttentionKernels* avx512 = attention_kernels_x86_avx512();
  if (avx2 == nullptr) {
    std::fprintf(stderr, "attention_bench: this CPU lacks AVX2/F16C/FMA\n");
    return 1;
  }
  // Per format: each table one query head per call, then each table's grouped entries.
  std::vector<Variant> variants;
  for (int t = 0; t < 3; ++t) {
    for (const AttentionKernels* k : {avx2, avx512}) {
      // The AVX-512 table's f16 single-query entries are the AVX2 ones.
      if (k != nullptr && (t > 0 || k == avx2)) variants.push_back({t, k});
    }
    for (const AttentionKernels* k : {avx2, avx512}) {
      if (k != nullptr && k->scores_group_of(kTypes[t]) && k->weighted_sum_group_of(kTypes[t]))
        variants.push_back({t, k, true});
    }
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  constexpr uint32_t kGroup = kHeads / kKvHeads;
  std::vector<float> q(kHeadDim * kHeads), out(kHeadDim * kGroup);
  for (float& x : q) x = nd(rng);
  std::printf("%-6s %-4s %-18s %12s %12s %12s %14s\n", "depth", "type", "kernels", "scores ms", "sums ms", "step ms",
              "KV bytes/step");
  for (uint32_t depth : depths) {
    std::vector<float> p(uint64_t(depth) * kGroup);
    Cache caches[3];
    for (int t = 0; t < 3; ++t) caches[t] = make_cache(kTypes[t], depth, rng);
    const size_t nv = variants.size();
    std::vector<std::vector<double>> scores_s(nv), sums_s(nv);
    for (uint32_t rep = 0; rep < kReps; ++rep) {
      for (size_t v = 0; v < nv; ++v) {
        const int t = variants[v].type;
        const AttentionKernels* k = variants[v].k;
        const uint64_t row = kv_row_halves(kTypes[t], kHeadDim);
        double a = 0, b = 0;
        for (uint32_t l = 0; l < kLayers; ++l) {
          if (variants[v].grouped) {
            for (uint32_t g = 0; g < kKvHeads; ++g) {
              const uint64_t off = (uint64_t(l) * kKvHeads + g) * depth * row;
              const double t0 = thread_seconds();
              k->scores_group_of(kTypes[t])(&q[g * kGroup * kHeadDim], kGroup, &caches[t].keys[off], depth, kHeadDim,
                                            0.125f, p.data(), depth);
              const double t1 = thread_seconds();
              std::fill(p.begin(), p.end(), 1.0f / float(depth));
              const double t2 = thread_seconds();
              k->weighted_sum_group_of(kTypes[t])(p.data(), depth, kGroup, &caches[t].values[off], depth, kHeadDim,
                                                  out.data());
              b += thread_seconds() - t2;
              a += t1 - t0;
            }
            continue;
          }
          for (uint32_t h = 0; h < kHeads; ++h) {
            const uint64_t off = (uint64_t(l) * kKvHeads + h / (kHeads / kKvHeads)) * depth * row;
            const double t0 = thread_seconds();
            k->scores_of(kTypes[t])(&q[h * kHeadDim], &caches[t].keys[off], depth, kHeadDim, 0.125f, p.data());
            const double t1 = thread_seconds();
            std::fill(p.begin(), p.end(), 1.0f / float(depth));
            const double t2 = thread_seconds();
            k->weighted_sum_of(kTypes[t])(p.data(), &caches[t].values[off], depth, kHeadDim, out.data());
            b += thread_seconds() - t2;
            a += t1 - t0;
          }
        }
        scores_s[v].push_back(a);
        sums_s[v].push_back(b);
      }
    }
    for (size_t v = 0; v < nv; ++v) {
      const int t = variants[v].type;
      std::sort(scores_s[v].begin(), scores_s[v].end());
      std::sort(sums_s[v].begin(), sums_s[v].end());
      const double s = scores_s[v][kReps / 2] * 1e3, w = sums_s[v][kReps / 2] * 1e3;
      const uint64_t bytes = uint64_t(depth) * kLayers * kKvHeads * 2 * kv_row_bytes(kTypes[t], kHeadDim);
      const std::string name = std::string(variants[v].k->name) + (variants[v].grouped ? " grouped" : "");
      std::printf("%-6u %-4s %-18s %12.2f %12.2f %12.2f %14llu\n", depth, kv_type_name(kTypes[t]), name.c_str(), s, w,
                  s + w, (unsigned long long)bytes);
    }
  }
  return 0;
}
