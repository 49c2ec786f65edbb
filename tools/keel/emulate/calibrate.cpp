#include "keel/emulate/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
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
#include "keel/cli/cli_util.h"
#include "keel/cli/membw.h"

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

// The largest data cache of a level (all levels: 0) cpu0 reports under /sys, 0 if none.
uint64_t cache_bytes_of_level(int level) {
  uint64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream size(dir + "size"), type(dir + "type"), lv(dir + "level");
    std::string s, t;
    int l = 0;
    if (!(size >> s) || !(type >> t) || !(lv >> l) || t == "Instruction") continue;
    if (level != 0 && l != level) continue;
    uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (!s.empty() && (s.back() == 'K')) v <<= 10;
    if (!s.empty() && (s.back() == 'M')) v <<= 20;
    best = std::max(best, v);
  }
  return best;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
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
  const uint64_t llc = cache_bytes_of_level(0);
  if (llc == 0) return fail("emulate", "cannot read the cache sizes under /sys/devices/system/cpu/cpu0/cache");
  const uint64_t private_cache = std::max<uint64_t>(cache_bytes_of_level(2), 256 << 10);
  // Read bandwidth against size, from well within the last-level cache to well beyond it: sizes
  // in steps of sqrt(2) from 1 MiB up to 4x the reported cache (at least 1 GiB, at most a
  // quarter of the memory), every size timed in each of kRounds interleaved rounds, medians
  // kept. A single timing per size classed a 92 MiB model as cache or as DRAM from one minute
  // to the next on a shared host; the medians of the curve move a few percent.
  constexpr unsigned kRounds = 5;
  const uint64_t top =
      std::min(std::max(4 * llc, uint64_t(1) << 30), std::max(memory_bytes() / 4, uint64_t(256) << 20));
  std::vector<uint64_t> sizes;
  for (double b = double(1 << 20); b <= double(top) * 1.0001; b *= std::sqrt(2.0))
    if (sizes.size() < kHwCurvePoints) sizes.push_back(uint64_t(b) / 4096 * 4096);
  const std::vector<std::vector<double>> samples = measure_read_curve_gbps(sizes, threads, kRounds);
  std::vector<double> med(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) med[i] = median(samples[i]);
  // DRAM: every sample of the sizes at least twice the reported cache (the largest if none is).
  std::vector<double> beyond, within;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] >= 2 * llc) beyond.insert(beyond.end(), samples[i].begin(), samples[i].end());
    // In cache: beyond the private cache, well within the shared one.
    if (sizes[i] >= 2 * private_cache && sizes[i] <= 8 * private_cache && sizes[i] <= llc / 4)
      within.insert(within.end(), samples[i].begin(), samples[i].end());
  }
  if (beyond.empty()) beyond = samples.back();
  if (within.empty()) within = samples.front();
  const double dram_gbps = median(beyond), cache_gbps = median(within);
  // The last-level cache as this process gets it (a virtual machine's reported one may be
  // shared with other guests): the size at which the median curve falls through the geometric
  // mean of the in-cache and DRAM rates, interpolated in log size between the probes. On a
  // shared host it moves with the neighbours' load (50-106 MiB in one afternoon here), and a
  // forward pass, which touches more than its weights between two reads of them, keeps less
  // than a read loop re-reading one buffer at once: a footprint is costed as cached only when
  // well within it (up to half), as streamed from DRAM every pass from the measured size on,
  // and in between by its log size (cache.share_curve: share 1 at half, 0 at the size). So a
  // model is classed by its size against the measured cache, not by one timing near the edge.
  // The on-chip memory (what the schedule may keep resident) is that half, at the curve's rate.
  const double mid_gbps = std::sqrt(cache_gbps * dram_gbps);
  double llc_measured = 0;
  for (size_t i = 1; i < sizes.size() && llc_measured == 0; ++i) {
    if (sizes[i] < 2 * private_cache || med[i] >= mid_gbps || med[i - 1] < mid_gbps) continue;
    const double t = (med[i - 1] - mid_gbps) / (med[i - 1] - med[i]);
    llc_measured =
        std::exp(std::log(double(sizes[i - 1])) + t * (std::log(double(sizes[i])) - std::log(double(sizes[i - 1]))));
  }
  auto curve_gbps = [&](double bytes) {
    if (bytes <= double(sizes[0])) return med[0];
    for (size_t i = 1; i < sizes.size(); ++i) {
      if (bytes > double(sizes[i])) continue;
      const double t = std::log(bytes / double(sizes[i - 1])) / std::log(double(sizes[i]) / double(sizes[i - 1]));
      return med[i - 1] + t * (med[i] - med[i - 1]);
    }
    return med.back();
  };
  uint64_t effective = 256 << 10;
  double llc_gbps = dram_gbps;
  if (llc_measured > 0 && cache_gbps > 1.15 * dram_gbps) {
    h.cache_bytes = uint64_t(llc_measured) / 4096 * 4096;
    h.cache_bandwidth_bytes_per_s = cache_gbps * 1e9;
    h.cache_share_points = 2;
    h.cache_share_bytes[0] = h.cache_bytes / 2, h.cache_share[0] = 1;
    h.cache_share_bytes[1] = h.cache_bytes, h.cache_share[1] = 0;
    effective = std::max<uint64_t>(h.cache_bytes / 2 / 4096 * 4096, effective);
    llc_gbps = curve_gbps(double(effective));
  }
  h.sram_bytes = effective;
  h.sram_bytes_per_cycle = llc_gbps;  // GB/s = bytes per ns
  h.tier_count = 1;
  snprintf(h.tiers[0].name, sizeof h.tiers[0].name, "dram");
  h.tiers[0].capacity_bytes = memory_bytes();
  h.tiers[0].bandwidth_bytes_per_s = dram_gbps * 1e9;
  h.tiers[0].latency_ns = 100;
  h.dma_engines = threads;
  // One core waits for what it streams from DRAM between its own computations (no DMA engine
  // beside it), so its ops cost compute plus transfer. With several threads each streams its own
  // rows while the others compute, and the read curve's rate is what they stream together:
  // transfer and compute overlap, as on a double-buffered accelerator.
  h.serial = threads == 1;

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
  // A 4-bit matmul of one token (decode) unpacks every weight for one multiply-add: the time of
  // that call beyond its MACs at the int8 rate is the unpacking, per weight element (Q4M, the
  // 4-bit format with minimums GGUF's Q4_1 converts to).
  {
    std::vector<uint8_t> w(tensor_bytes(fb::DType::Q4M, rows, cols) + 64, 0);
    const WeightView wv{fb::DType::Q4M, rows, cols, w.data()};
    const double one = median_time(31, [&] { mk.matmul(wv, xq.data(), 1, y.data(), rows, 0, panel_count(rows)); });
    const double elems = double(rows) * cols;
    const double unpack = one - elems / (h.macs_per_cycle_int8 / threads * 1e9);
    h.weight_elems_per_cycle = elems / (std::max(unpack, one * 0.05) * 1e9) * threads;
  }
  // What a one-token 4-bit matmul pays per byte beyond its compute when its weights come from
  // DRAM (a matrix of twice the reported cache or more): the bandwidth a serial core adds to its
  // compute, which is not a read loop's (the kernel's loads overlap part of its arithmetic).
  // Measured on one thread only; with more, the read loop's rate stays.
  double kernel_dram_gbps = 0;
  if (threads == 1) {
    const double per_elem = 1 / (h.macs_per_cycle_int8 * 1e9) + 1 / (h.weight_elems_per_cycle * 1e9);
    auto gbps = [&](uint64_t bytes, int reps) {
      const uint32_t kcols = 1024;
      const uint64_t panel = tensor_bytes(fb::DType::Q4M, kPanelRows, kcols);
      const uint32_t krows = uint32_t(std::max<uint64_t>(bytes / panel, 1)) * kPanelRows;
      std::vector<uint8_t> w(tensor_bytes(fb::DType::Q4M, krows, kcols) + 64, 0x11);
      std::vector<float> yk(krows);
      const WeightView wv{fb::DType::Q4M, krows, kcols, w.data()};
      const double t = median_time(reps, [&] { mk.matmul(wv, xq.data(), 1, yk.data(), krows, 0, panel_count(krows)); });
      const double beyond = t - double(krows) * kcols * per_elem;
      return beyond > 0 ? double(tensor_bytes(fb::DType::Q4M, krows, kcols)) / beyond / 1e9 : 0.0;
    };
    kernel_dram_gbps = gbps(std::min(std::max(2 * llc, uint64_t(256) << 20), top), 5);
    if (kernel_dram_gbps > 0) h.tiers[0].bandwidth_bytes_per_s = kernel_dram_gbps * 1e9;
  }
  const VectorKernels& vk = vector_kernels_best();
  std::vector<float> v(1 << 16, 0.25f), g(1 << 16, 1.0f);
  const double vs = median_time(21, [&] { vk.rmsnorm(v.data(), g.data(), uint32_t(v.size()), 1e-5f, v.data()); });
  h.vector_elems_per_cycle = double(v.size()) / (vs * 1e9) * threads;

  char sources[1100];
  snprintf(sources, sizeof sources,
           "keel emulate --calibrate with %u threads: read bandwidth of %zu sizes from 1 MiB to %llu bytes, %u "
           "interleaved rounds, medians: DRAM %.2f GB/s (sizes >= 2x the reported cache of %llu bytes), in cache "
           "%.2f GB/s (sizes 2-8x the private cache of %llu bytes); last-level cache as measured %llu bytes (where "
           "the curve falls through %.2f GB/s): a footprint up to half of it is cached, one beyond it streams "
           "from DRAM, by log size between (cache.share_curve); SRAM half of it, %llu bytes, at %.2f GB/s; a one-token "
           "Q4M matmul streams beyond "
           "its compute at %.2f GB/s from DRAM (the tier's bandwidth; 0 = not measured, the read rate kept); "
           "native kernels '%s' MAC rates on one thread times %u, 4-bit unpacking from a one-token Q4M matmul; "
           "latency 100 ns assumed; %s; one cycle = 1 ns",
           threads, sizes.size(), (unsigned long long)sizes.back(), kRounds, dram_gbps, (unsigned long long)llc,
           cache_gbps, (unsigned long long)private_cache, (unsigned long long)h.cache_bytes, mid_gbps,
           (unsigned long long)effective, llc_gbps, kernel_dram_gbps, mk.name, threads,
           h.serial ? "serial (compute plus transfer)" : "threads overlap transfer and compute");
  const std::string path = hw::host_hw_path();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream f(path);
  f << hw::hw_to_json(h, sources);
  if (!f) return fail("emulate", "cannot write " + path);
  printf("wrote %s\n%s\n", path.c_str(), sources);
  printf("MACs/ns: int8 %.1f, f16 %.1f, f32 %.1f; vector %.1f elements/ns; 4-bit weights unpacked %.1f/ns\n",
         h.macs_per_cycle_int8, h.macs_per_cycle_bf16, h.macs_per_cycle_f32, h.vector_elems_per_cycle,
         h.weight_elems_per_cycle);
  printf("read GB/s by size:");
  for (size_t i = 0; i < sizes.size(); ++i) printf(" %s %.1f", human_bytes(sizes[i]).c_str(), med[i]);
  printf("\n");
  return 0;
}

}  // namespace keel::cli
