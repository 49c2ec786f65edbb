#include "keel/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "emulate/hw_json.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "keel/cli_util.h"
#include "keel/membw.h"

namespace keel::cli {
namespace {

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Median seconds of `reps` calls of fn.
template <typename F>
double median_time(int reps, F fn) {
  std::vector<double> t;
  fn();
  for (int i = 0; i < reps; ++i) {
    const double a = seconds();
    fn();
    t.push_back(seconds() - a);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

uint64_t last_level_cache_bytes() {
  uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream size(dir + "size"), type(dir + "type");
    std::string s, t;
    if (!(size >> s) || !(type >> t) || t == "Instruction") continue;
    uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (!s.empty() && (s.back() == 'K')) v <<= 10;
    if (!s.empty() && (s.back() == 'M')) v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

uint64_t memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

}  // namespace

int run_calibrate(uint32_t threads_opt) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const unsigned threads = threads_opt ? threads_opt : unsigned(cores > 0 ? cores : 1);
  HwDesc h;
  snprintf(h.name, sizeof h.name, "host");
  h.clock_hz = 1e9;  // one cycle = one nanosecond
  const uint64_t llc = last_level_cache_bytes();
  if (llc == 0) return fail("emulate", "cannot read the cache sizes under /sys/devices/system/cpu/cpu0/cache");
  const double dram_gbps = measure_read_bandwidth_gbps(512ull << 20, threads, 5);
  // The on-chip memory is the largest buffer that still reads clearly faster than DRAM (1.5x):
  // a virtual machine's reported last-level cache may be shared with other guests. The cache
  // tier is the largest that reads faster at all (1.15x), at the rate of that size.
  double llc_gbps = 0, cache_gbps = 0;
  uint64_t effective = 0, cache = 0;
  bool sram_done = false;
  for (uint64_t bytes = 256 << 10; bytes <= llc; bytes *= 2) {
    const double gbps = measure_read_bandwidth_gbps(bytes, threads, 11);
    if (gbps < 1.15 * dram_gbps) break;
    cache = bytes, cache_gbps = gbps;
    if (sram_done || gbps < 1.5 * dram_gbps) {
      sram_done = true;
      continue;
    }
    effective = bytes;
    if (llc_gbps == 0 || gbps < llc_gbps) llc_gbps = gbps;
  }
  if (effective == 0) effective = 256 << 10, llc_gbps = dram_gbps;
  if (cache > effective) h.cache_bytes = cache, h.cache_bandwidth_bytes_per_s = cache_gbps * 1e9;
  h.sram_bytes = effective;
  h.sram_bytes_per_cycle = llc_gbps;  // GB/s = bytes per ns
  h.tier_count = 1;
  snprintf(h.tiers[0].name, sizeof h.tiers[0].name, "dram");
  h.tiers[0].capacity_bytes = memory_bytes();
  h.tiers[0].bandwidth_bytes_per_s = dram_gbps * 1e9;
  h.tiers[0].latency_ns = 100;
  h.dma_engines = threads;
  // A core waits for what it streams from DRAM between its own computations (no DMA engine
  // beside it), so its ops cost compute plus transfer.
  h.serial = true;

  // The native kernels' MAC rates on one thread over weights that stay in cache, times threads.
  const MatmulKernels& mk = kernels_best();
  const uint32_t rows = 512, cols = 1024, n = 16;
  std::vector<float> x(uint64_t(n) * cols, 0.5f), y(uint64_t(n) * rows);
  std::vector<ActBlock> xq(uint64_t(n) * act_blocks(cols));
  for (uint32_t t = 0; t < n; ++t)
    mk.quantize_act(x.data() + uint64_t(t) * cols, cols, xq.data() + uint64_t(t) * act_blocks(cols));
  auto rate = [&](fb::DType t) {
    std::vector<uint8_t> w(tensor_bytes(t, rows, cols) + 64, 0);
    const WeightView wv{t, rows, cols, w.data()};
    const double s = median_time(9, [&] {
      if (is_quantized(t))
        mk.matmul(wv, xq.data(), n, y.data(), rows, 0, panel_count(rows));
      else
        mk.matmul_f(wv, x.data(), n, cols, y.data(), rows, 0, panel_count(rows));
    });
    return double(n) * rows * cols / (s * 1e9) * threads;
  };
  h.macs_per_cycle_int8 = rate(fb::DType::Q8);
  h.macs_per_cycle_bf16 = rate(fb::DType::F16);
  h.macs_per_cycle_f32 = rate(fb::DType::F32);
  const VectorKernels& vk = vector_kernels_best();
  std::vector<float> v(1 << 16, 0.25f), g(1 << 16, 1.0f);
  const double vs = median_time(21, [&] { vk.rmsnorm(v.data(), g.data(), uint32_t(v.size()), 1e-5f, v.data()); });
  h.vector_elems_per_cycle = double(v.size()) / (vs * 1e9) * threads;

  char sources[640];
  snprintf(sources, sizeof sources,
           "keel emulate --calibrate with %u threads: DRAM read %.2f GB/s (512 MiB buffer); cache reported %llu "
           "bytes, of which %llu read at >= 1.5x DRAM speed (%.2f GB/s, the slowest of those sizes) and %llu at >= "
           "1.15x (%.2f GB/s at that size: the cache tier); native "
           "kernels '%s' MAC rates on one thread times %u; latency 100 ns assumed; serial (compute plus transfer); "
           "one cycle = 1 ns",
           threads, dram_gbps, (unsigned long long)llc, (unsigned long long)effective, llc_gbps,
           (unsigned long long)cache, cache_gbps, mk.name, threads);
  const std::string path = hw::host_hw_path();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream f(path);
  f << hw::hw_to_json(h, sources);
  if (!f) return fail("emulate", "cannot write " + path);
  printf("wrote %s\n%s\n", path.c_str(), sources);
  printf("MACs/ns: int8 %.1f, f16 %.1f, f32 %.1f; vector %.1f elements/ns\n", h.macs_per_cycle_int8,
         h.macs_per_cycle_bf16, h.macs_per_cycle_f32, h.vector_elems_per_cycle);
  return 0;
}

}  // namespace keel::cli
