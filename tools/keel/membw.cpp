#include "keel/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace keel::cli {
namespace {

// Sums 32-byte loads so the loop is bound by loads, not by arithmetic.
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

}  // namespace

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
