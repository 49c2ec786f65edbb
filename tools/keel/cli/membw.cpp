#include "keel/cli/membw.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace keel::cli {
namespace {

// Combines wide loads so the loop is bound by loads, not by arithmetic.
#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t read_range(const uint8_t* p, uint64_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (uint64_t i = 0; i + 128 <= n; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return uint64_t(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}
#elif defined(__aarch64__)
uint64_t read_range(const uint8_t* p, uint64_t n) {
  uint8x16_t a = vdupq_n_u8(0), b = a, c = a, d = a;
  for (uint64_t i = 0; i + 64 <= n; i += 64) {
    a = veorq_u8(a, vld1q_u8(p + i));
    b = veorq_u8(b, vld1q_u8(p + i + 16));
    c = veorq_u8(c, vld1q_u8(p + i + 32));
    d = veorq_u8(d, vld1q_u8(p + i + 48));
  }
  const uint64x2_t x = vreinterpretq_u64_u8(veorq_u8(veorq_u8(a, b), veorq_u8(c, d)));
  return vgetq_lane_u64(x, 0) ^ vgetq_lane_u64(x, 1);
}
#else
uint64_t read_range(const uint8_t* p, uint64_t n) {
  uint64_t a = 0, b = 0;
  for (uint64_t i = 0; i + 16 <= n; i += 16) {
    uint64_t v[2];
    memcpy(v, p + i, 16);
    a ^= v[0];
    b ^= v[1];
  }
  return a ^ b;
}
#endif

// GB/s of one timing: each of `threads` reads its part of buf[0, bytes) `passes` times.
double timed_read(const uint8_t* buf, uint64_t bytes, unsigned threads, uint64_t passes) {
  std::vector<uint64_t> partial(threads);
  const uint64_t per = bytes / threads / 128 * 128;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      uint64_t x = 0;
      for (uint64_t k = 0; k < passes; ++k) {
        x ^= read_range(buf + t * per, per);
        asm volatile("" ::: "memory");
      }
      partial[t] = x;
    });
  }
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile uint64_t sink = 0;
  for (uint64_t v : partial) sink = sink ^ v;
  return double(per) * threads * double(passes) / s / 1e9;
}

}  // namespace

std::vector<std::vector<double>> measure_read_curve_gbps(const std::vector<uint64_t>& sizes, unsigned threads,
                                                         unsigned rounds) {
  std::vector<std::vector<double>> out(sizes.size());
  uint64_t largest = 0;
  for (uint64_t b : sizes) largest = std::max(largest, b / 4096 * 4096);
  if (largest == 0) return out;
  uint8_t* buf = static_cast<uint8_t*>(aligned_alloc(4096, largest));
  if (!buf) return out;
  memset(buf, 1, largest);
  if (threads == 0) threads = 1;
  for (unsigned r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const uint64_t bytes = sizes[i] / 4096 * 4096;
      // A size that fits a cache is read once untimed first: the previous size, read last, may
      // have evicted it. Each timing moves at least 64 MiB (a cached buffer reads in less time
      // than starting the threads takes).
      const uint64_t passes = bytes >= (64ull << 20) ? 1 : ((64ull << 20) + bytes - 1) / bytes;
      if (bytes < (256ull << 20)) timed_read(buf, bytes, threads, 1);
      out[i].push_back(timed_read(buf, bytes, threads, passes));
    }
  }
  free(buf);
  return out;
}

double measure_read_bandwidth_gbps(uint64_t bytes, unsigned threads, unsigned reps) {
  bytes = bytes / 4096 * 4096;
  uint8_t* buf = static_cast<uint8_t*>(aligned_alloc(4096, bytes));
  if (!buf) return 0;
  memset(buf, 1, bytes);
  if (threads == 0) threads = 1;
  std::vector<double> gbps;
  volatile uint64_t sink = 0;
  // A buffer that sits in a cache reads in microseconds, less than starting a thread takes:
  // each thread reads its part this many times, so that a pass moves at least 64 MiB.
  const uint64_t passes = bytes >= (64ull << 20) ? 1 : ((64ull << 20) + bytes - 1) / bytes;
  for (unsigned r = 0; r < reps; ++r) {
    std::vector<uint64_t> partial(threads);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    const uint64_t per = bytes / threads / 128 * 128;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        uint64_t x = 0;
        for (uint64_t k = 0; k < passes; ++k) {
          x ^= read_range(buf + t * per, per);
          asm volatile("" ::: "memory");  // every pass reads the memory again
        }
        partial[t] = x;
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (uint64_t v : partial) sink = sink ^ v;
    gbps.push_back(double(per) * threads * double(passes) / s / 1e9);
  }
  free(buf);
  std::sort(gbps.begin(), gbps.end());
  return gbps[gbps.size() / 2];
}

}  // namespace keel::cli
