// Single-thread matrix-vector micro-benchmark, DRAM-cold: every call reads a weight copy that
// was evicted from the caches (the copies rotate over more than kColdBytes, well past the LLC).
// Reports the median of many calls: microseconds per call and GB/s of weight bytes read, against
// the ceiling for one thread: a plain sequential read (256-bit loads, no compute) of the same
// rotating copies, measured right before the kernels (the 1 GB read is printed for reference).
//
// Also times a row-major int8 GEMV over GGUF Q8_0 blocks (34 bytes: f16 d + 32 x i8, one row
// after the other) to compare with the Panel16x4 layout on the same data.
//
// Usage: kernel_bench [--quick]; kernel_bench --formats [--quick] compares every quantized
// format (decode GB/s, prefill us/token) on Gemma 3's matrix shapes. Builds without ISA flags: the row-major comparison
// kernels use per-function target attributes and run only when the CPU has the features (the same ones the engine's x86
// tables need).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "convert/pack.h"
#include "core/f16.h"
#include "kernels/kernels.h"
#include "model/weight_format.h"

namespace {

using keel::fb::DType;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kColdBytes = 256ull << 20;

struct Buffer {
  explicit Buffer(uint64_t n) : size(n) {
    ptr = static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096));
    if (ptr == nullptr) {
      std::fprintf(stderr, "out of memory allocating %llu bytes\n", (unsigned long long)n);
      std::exit(1);
    }
  }
  ~Buffer() { std::free(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  uint64_t size;
  uint8_t* ptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- plain read bandwidth ----

uint64_t sum_bytes_scalar(const uint8_t* p, uint64_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  for (uint64_t i = 0; i + 4 <= n / 8; i += 4) {
    s0 += q[i];
    s1 += q[i + 1];
    s2 += q[i + 2];
    s3 += q[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

// 256-bit loads: on the reference machine (Zen 4) they stream faster than 512-bit ones.
__attribute__((target("avx2"))) uint64_t sum_bytes_avx2(const uint8_t* p, uint64_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (uint64_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t l[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), s);
  return l[0] + l[1] + l[2] + l[3];
}

bool g_avx2 = false;  // set in main from the CPU features

uint64_t sum_bytes(const uint8_t* p, uint64_t n) { return g_avx2 ? sum_bytes_avx2(p, n) : sum_bytes_scalar(p, n); }

volatile uint64_t g_sink;

// GB/s reading `bytes` with `threads` threads (each its own contiguous part), median of reps.
double read_bandwidth(const Buffer& buf, int threads, int reps) {
  std::vector<double> gbs;
  for (int r = 0; r < reps; ++r) {
    const uint64_t part = buf.size / threads / 128 * 128;
    std::vector<uint64_t> sums(threads);
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back([&, t] { sums[t] = sum_bytes(buf.ptr + t * part, part); });
    sums[0] = sum_bytes(buf.ptr, part);
    for (auto& th : pool) th.join();
    const double s = seconds_since(t0);
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    g_sink = total;
    gbs.push_back(double(part) * threads / s / 1e9);
  }
  return median(gbs);
}

// ---- row-major Q8_0 GEMV (GGUF block order), for the layout comparison ----

struct RowMajorQ8 {
  uint32_t rows, cols;
  const uint8_t* data;  // rows x (cols / 32) blocks of 34 bytes
};

__attribute__((target("f16c"))) inline float f16_bits_to_f32(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// One row at a time, AVX2: the same sign trick as the panel kernel (|q_w| x sign(a, q_w)).
__attribute__((target("avx2,fma,f16c"))) void rowmajor_q8_avx2(const RowMajorQ8& w, const keel::ActBlock* x, float* y) {
  const uint32_t nb = w.cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  for (uint32_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = w.data + uint64_t(r) * nb * 34;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * 34;
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q)), ones);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_bits_to_f32(blk) * x[b].d), _mm256_cvtepi32_ps(p), acc);
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    y[r] = _mm_cvtss_f32(s);
  }
}

// One row at a time, 256-bit VNNI: u = q ^ 0x80 (u8) x a (s8), minus 128 * sum(a) per block.
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) void rowmajor_q8_vnni(
    const RowMajorQ8& w, const keel::ActBlock* x, float* y) {
  const uint32_t nb = w.cols / 32;
  const __m256i bias = _mm256_set1_epi8(char(0x80));
  for (uint32_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = w.data + uint64_t(r) * nb * 34;
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * 34;
      const __m256i u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), bias);
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
      __m256i i = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, a);
      i = _mm256_sub_epi32(i, _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, 128 * x[b].sum));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_bits_to_f32(blk) * x[b].d), _mm256_cvtepi32_ps(i), acc);
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    y[r] = _mm_cvtss_f32(s);
  }
}

// ---- the measurement loop ----

struct Result {
  double us = 0;
  double gbs = 0;
  uint64_t calls = 0;
};

// Calls fn(copy_index) over rotating copies; returns the median time per call.
template <typename F>
Result time_cold(uint64_t bytes_per_call, uint32_t n_copies, double min_seconds, uint32_t min_calls, F&& fn) {
  std::vector<double> t;
  // One untimed pass faults in everything and evicts whatever was cached before.
  for (uint32_t c = 0; c < n_copies; ++c) fn(c);
  const auto start = Clock::now();
  uint32_t i = 0;
  while (t.size() < min_calls || seconds_since(start) < min_seconds) {
    const auto t0 = Clock::now();
    fn(i % n_copies);
    t.push_back(seconds_since(t0));
    ++i;
    if (t.size() > 200000) break;
  }
  Result r;
  r.calls = t.size();
  const double s = median(t);
  r.us = s * 1e6;
  r.gbs = double(bytes_per_call) / s / 1e9;
  return r;
}

struct Shape {
  uint32_t rows, cols;
  const char* what;
};

// Random GGUF blocks of `src` (sane f16 scales, every other byte random), packed losslessly.
void pack_random(keel::convert::SrcType src, DType dt, uint32_t rows, uint32_t cols, std::mt19937& rng, uint8_t* out) {
  const uint32_t be = keel::convert::block_elems(src);
  const uint64_t bb = keel::convert::encoded_bytes(src, be), n = uint64_t(rows) * cols / be;
  std::vector<uint8_t> raw(n * bb);
  for (auto& b : raw) b = uint8_t(rng());
  const uint16_t d = keel::f32_to_f16(0.001f);
  for (uint64_t k = 0; k < n; ++k) memcpy(raw.data() + k * bb + (src == keel::convert::SrcType::Q6_K ? 208 : 0), &d, 2);
  std::string err;
  if (!keel::convert::pack_from_ggml_blocks(src, raw.data(), raw.size(), rows, cols, dt, out,
                                            keel::tensor_bytes(dt, rows, cols), err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    std::exit(1);
  }
}

// Every quantized format on the matrix shapes of Gemma 3 270M (K-quant rows need cols % 256 == 0):
// decode GB/s (one token) and prefill cost per token (16 tokens per pass over the panel).
int run_formats(bool quick) {
  using keel::convert::SrcType;
  const double min_seconds = quick ? 0.2 : 1.0;
  const keel::MatmulKernels* tables[] = {keel::kernels_x86_avx2(), keel::kernels_x86_avx512()};
  g_avx2 = tables[0] != nullptr;
  const Shape shapes[] = {{640, 1024, "Gemma 3 attn output"}, {640, 2048, "Gemma 3 ffn down"}, {4096, 2048, "large"}};
  const struct {
    DType dt;
    SrcType src;
  } formats[] = {{DType::Q8, SrcType::Q8_0},  {DType::Q4, SrcType::Q4_0},  {DType::Q4M, SrcType::Q4_1},
                 {DType::Q5, SrcType::Q5_0},  {DType::Q5M, SrcType::Q5_1}, {DType::Q4K, SrcType::Q4_K},
                 {DType::Q5K, SrcType::Q5_K}, {DType::Q6K, SrcType::Q6_K}};
  std::printf("# keel kernel_bench --formats: single thread, DRAM-cold, median of calls\n");
  std::printf(
      "| shape (rows x cols) | dtype | bits/weight | kernel | GB/s (1 token) | %% of plain read | us/token (16 tokens) "
      "|\n");
  std::printf("|---|---|---:|---|---:|---:|---:|\n");
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    for (const auto& f : formats) {
      const uint64_t bytes = keel::tensor_bytes(f.dt, s.rows, s.cols);
      const uint32_t n_copies = uint32_t(std::max<uint64_t>(2, (kColdBytes + bytes - 1) / bytes));
      const uint64_t stride = (bytes + 4095) / 4096 * 4096;
      Buffer copies(stride * n_copies);
      pack_random(f.src, f.dt, s.rows, s.cols, rng, copies.ptr);
      for (uint32_t c = 1; c < n_copies; ++c) memcpy(copies.ptr + c * stride, copies.ptr, bytes);
      const Result ceiling = time_cold(bytes, n_copies, min_seconds, 50, [&](uint32_t c) {
        g_sink = sum_bytes(copies.ptr + c * stride, bytes / 128 * 128);
      });
      for (const keel::MatmulKernels* k : tables) {
        if (k == nullptr) continue;
        double us_per_token[2] = {0, 0};
        double gbs = 0;
        const uint32_t token_counts[2] = {1, 16};
        for (int i = 0; i < 2; ++i) {
          const uint32_t n_tokens = token_counts[i];
          std::vector<float> x(uint64_t(n_tokens) * s.cols), y(uint64_t(n_tokens) * s.rows);
          for (float& v : x) v = nd(rng);
          std::vector<keel::ActBlock> xa(uint64_t(n_tokens) * keel::act_blocks(s.cols));
          for (uint32_t t = 0; t < n_tokens; ++t)
            k->quantize_act(&x[uint64_t(t) * s.cols], s.cols, &xa[uint64_t(t) * keel::act_blocks(s.cols)]);
          const Result r = time_cold(bytes, n_copies, min_seconds / 2, 20, [&](uint32_t c) {
            const keel::WeightView w{f.dt, s.rows, s.cols, copies.ptr + c * stride};
            k->matmul(w, xa.data(), n_tokens, y.data(), s.rows, 0, keel::panel_count(s.rows));
          });
          us_per_token[i] = r.us / n_tokens;
          if (i == 0) gbs = r.gbs;
        }
        std::printf("| %u x %u (%s) | %s | %.3f | %s | %.1f | %.0f%% | %.2f |\n", s.rows, s.cols, s.what,
                    keel::fb::EnumNameDType(f.dt), 8.0 * double(bytes) / (double(s.rows) * s.cols), k->name, gbs,
                    100.0 * gbs / ceiling.gbs, us_per_token[1]);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--formats") return run_formats(argc > 2);
  const double min_seconds = quick ? 0.2 : 1.0;

  std::printf("# keel kernel_bench: single thread, DRAM-cold (weights rotate over >= %llu MB), median of calls\n",
              (unsigned long long)(kColdBytes >> 20));
  const keel::MatmulKernels* avx2 = keel::kernels_x86_avx2();
  const keel::MatmulKernels* avx512 = keel::kernels_x86_avx512();
  g_avx2 = avx2 != nullptr;
  std::printf("# kernels: ref%s%s\n", avx2 ? ", avx2" : "", avx512 ? ", avx512vnni" : "");

  double bw1 = 0, bw2 = 0;
  {
    Buffer mem(1ull << 30);
    for (uint64_t i = 0; i < mem.size; i += 8) {
      const uint64_t v = i * 0x9e3779b97f4a7c15ull;
      memcpy(mem.ptr + i, &v, 8);
    }
    bw1 = read_bandwidth(mem, 1, quick ? 3 : 7);
    bw2 = read_bandwidth(mem, 2, quick ? 3 : 7);
  }
  std::printf("# plain read of 1 GB: %.1f GB/s (1 thread), %.1f GB/s (2 threads), median\n\n", bw1, bw2);

  const Shape shapes[] = {{576, 576, "attn q/o"},
                          {192, 576, "attn k/v"},
                          {1536, 576, "ffn gate/up"},
                          {576, 1536, "ffn down"},
                          {49152, 576, "output"}};
  const DType dtypes[] = {DType::Q8, DType::Q4, DType::Q4M, DType::F32};

  std::printf("| shape (rows x cols) | dtype | kernel | weight MB | us/call | GB/s | %% of ceiling |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|\n");

  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<float> wf(uint64_t(s.rows) * s.cols);
    for (float& v : wf) v = nd(rng) * 0.05f;
    std::vector<float> x(s.cols);
    for (float& v : x) v = nd(rng);
    std::vector<float> y(s.rows);
    std::vector<keel::ActBlock> xa(keel::act_blocks(s.cols));

    auto print = [&](const char* dt, const char* kernel, uint64_t bytes, const Result& r, double ceiling_gbs) {
      std::printf("| %u x %u (%s) | %s | %s | %.2f | %.1f | %.1f | %.0f%% |\n", s.rows, s.cols, s.what, dt, kernel,
                  double(bytes) / 1e6, r.us, r.gbs, 100.0 * r.gbs / ceiling_gbs);
      std::fflush(stdout);
    };

    for (DType dt : dtypes) {
      const uint64_t bytes = keel::tensor_bytes(dt, s.rows, s.cols);
      const uint32_t n_copies = uint32_t(std::max<uint64_t>(2, (kColdBytes + bytes - 1) / bytes));
      const uint64_t stride = (bytes + 4095) / 4096 * 4096;
      Buffer copies(stride * n_copies);
      if (keel::is_quantized(dt)) {
        keel::convert::quantize_pack(wf.data(), s.rows, s.cols, dt, copies.ptr);
      } else {
        keel::convert::convert_float(wf.data(), wf.size(), dt, copies.ptr);
      }
      for (uint32_t c = 1; c < n_copies; ++c) memcpy(copies.ptr + c * stride, copies.ptr, bytes);

      // The ceiling for this buffer set: a plain 256-bit sequential read of the same copies.
      const Result ceiling = time_cold(bytes, n_copies, min_seconds, 50, [&](uint32_t c) {
        g_sink = sum_bytes(copies.ptr + c * stride, bytes / 128 * 128);
      });
      print(keel::fb::EnumNameDType(dt), "plain read (ceiling)", bytes, ceiling, ceiling.gbs);
      const keel::MatmulKernels* tables[] = {&keel::kernels_ref(), avx2, avx512};
      for (const keel::MatmulKernels* k : tables) {
        if (k == nullptr) continue;
        const bool ref = k == &keel::kernels_ref();
        k->quantize_act(x.data(), s.cols, xa.data());
        const uint32_t panels = keel::panel_count(s.rows);
        const Result r = time_cold(bytes, n_copies, ref ? min_seconds / 2 : min_seconds, ref ? 5 : 50, [&](uint32_t c) {
          const keel::WeightView w{dt, s.rows, s.cols, copies.ptr + c * stride};
          if (keel::is_quantized(dt)) {
            k->matmul(w, xa.data(), 1, y.data(), s.rows, 0, panels);
          } else {
            k->matmul_f(w, x.data(), 1, s.cols, y.data(), s.rows, 0, panels);
          }
        });
        print(keel::fb::EnumNameDType(dt), k->name, bytes, r, ceiling.gbs);
      }
    }

    // Row-major Q8_0 (GGUF block order) on the same quantized values.
    {
      const uint32_t nb = s.cols / 32;
      const uint64_t bytes = uint64_t(s.rows) * nb * 34;
      const uint32_t n_copies = uint32_t(std::max<uint64_t>(2, (kColdBytes + bytes - 1) / bytes));
      const uint64_t stride = (bytes + 4095) / 4096 * 4096;
      Buffer copies(stride * n_copies);
      for (uint32_t r = 0; r < s.rows; ++r)
        for (uint32_t b = 0; b < nb; ++b) {
          const float* v = &wf[uint64_t(r) * s.cols + b * 32];
          float amax = 0;
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
          const float d = amax / 127.0f;
          uint8_t* blk = copies.ptr + (uint64_t(r) * nb + b) * 34;
          const uint16_t h = keel::f32_to_f16(d);
          memcpy(blk, &h, 2);
          for (int i = 0; i < 32; ++i) blk[2 + i] = uint8_t(int8_t(d > 0 ? std::lround(v[i] / d) : 0));
        }
      for (uint32_t c = 1; c < n_copies; ++c) memcpy(copies.ptr + c * stride, copies.ptr, bytes);
      keel::kernels_ref().quantize_act(x.data(), s.cols, xa.data());
      const Result ceiling = time_cold(bytes, n_copies, min_seconds, 50, [&](uint32_t c) {
        g_sink = sum_bytes(copies.ptr + c * stride, bytes / 128 * 128);
      });
      print("Q8_0 row-major", "plain read (ceiling)", bytes, ceiling, ceiling.gbs);
      if (avx2 != nullptr) {
        const Result r2 = time_cold(bytes, n_copies, min_seconds, 50, [&](uint32_t c) {
          rowmajor_q8_avx2(RowMajorQ8{s.rows, s.cols, copies.ptr + c * stride}, xa.data(), y.data());
        });
        print("Q8_0 row-major", "avx2 row-at-a-time", bytes, r2, ceiling.gbs);
      }
      if (avx512 != nullptr) {
        const Result r3 = time_cold(bytes, n_copies, min_seconds, 50, [&](uint32_t c) {
          rowmajor_q8_vnni(RowMajorQ8{s.rows, s.cols, copies.ptr + c * stride}, xa.data(), y.data());
        });
        print("Q8_0 row-major", "vnni-256 row-at-a-time", bytes, r3, ceiling.gbs);
      }
    }
  }

  // Prefill: one pass over a (cold) panel feeds several tokens.
  std::printf(
      "\n| prefill 1536 x 576 | dtype | kernel | tokens | us/call | us/token "
      "|\n|---|---|---|---:|---:|---:|\n");
  for (DType dt : {DType::Q8, DType::Q4M}) {
    const uint32_t rows = 1536, cols = 576;
    std::vector<float> wf(uint64_t(rows) * cols);
    for (float& v : wf) v = nd(rng) * 0.05f;
    const uint64_t bytes = keel::tensor_bytes(dt, rows, cols);
    const uint32_t n_copies = uint32_t((kColdBytes + bytes - 1) / bytes);
    const uint64_t stride = (bytes + 4095) / 4096 * 4096;
    Buffer copies(stride * n_copies);
    keel::convert::quantize_pack(wf.data(), rows, cols, dt, copies.ptr);
    for (uint32_t c = 1; c < n_copies; ++c) memcpy(copies.ptr + c * stride, copies.ptr, bytes);
    for (const keel::MatmulKernels* k : {avx2, avx512}) {
      if (k == nullptr) continue;
      for (uint32_t n_tokens : {1u, 4u, 16u, 64u}) {
        std::vector<float> x(uint64_t(n_tokens) * cols), y(uint64_t(n_tokens) * rows);
        for (float& v : x) v = nd(rng);
        std::vector<keel::ActBlock> xa(uint64_t(n_tokens) * keel::act_blocks(cols));
        for (uint32_t t = 0; t < n_tokens; ++t)
          k->quantize_act(&x[uint64_t(t) * cols], cols, &xa[uint64_t(t) * keel::act_blocks(cols)]);
        const Result r = time_cold(bytes, n_copies, min_seconds / 2, 20, [&](uint32_t c) {
          const keel::WeightView w{dt, rows, cols, copies.ptr + c * stride};
          k->matmul(w, xa.data(), n_tokens, y.data(), rows, 0, keel::panel_count(rows));
        });
        std::printf("| | %s | %s | %u | %.1f | %.2f |\n", keel::fb::EnumNameDType(dt), k->name, n_tokens, r.us,
                    r.us / n_tokens);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
