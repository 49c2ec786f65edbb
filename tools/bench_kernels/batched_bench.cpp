// Multi-token (batched decode) rate of the quantized matmul kernels on SmolLM2-135M's shapes:
// G multiply-adds per second of CPU time for 1, 2, 4, 8 and 16 tokens per call, single thread,
// with the weights warm (copies rotating over 48 MB: the last-level cache of a large server
// part, DRAM on a small one) and hot (one copy, when it fits a 2 MB L2). Beside it, the rate at
// which the core issues independent 512-bit `vpdpbusd` and `vfmadd231ps`, alone and mixed: the
// kernels' instruction mix divided by that rate is their compute bound
// (docs/performance.md, "Many sequences at once").
//
// Usage: batched_kernel_bench [--quick]. Thread CPU time, so a shared host's other tenants
// lengthen the wall clock but not the figures (they still share caches and memory bandwidth).
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "convert/pack.h"
#include "core/f16.h"
#include "kernels/kernels.h"
#include "model/weight_format.h"

namespace {

using keel::fb::DType;

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- issue-rate probe: 12 independent accumulators, so latency never limits ----

#define KEEL_ZERO(i) "vpxord %%zmm" #i ", %%zmm" #i ", %%zmm" #i "\n"
#define KEEL_DP(i) "vpdpbusd %%zmm30, %%zmm31, %%zmm" #i "\n"
#define KEEL_FMA(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n"
// All operands start at zero (no denormal assists); the loop runs inside one asm statement so
// nothing the compiler emits sits between the probed instructions.
#define KEEL_PROBE(body)                                                                                               \
  asm volatile(KEEL_ZERO(0) KEEL_ZERO(1) KEEL_ZERO(2) KEEL_ZERO(3) KEEL_ZERO(4) KEEL_ZERO(5) KEEL_ZERO(6) KEEL_ZERO(7) \
                   KEEL_ZERO(8) KEEL_ZERO(9) KEEL_ZERO(10) KEEL_ZERO(11) KEEL_ZERO(30)                                 \
                       KEEL_ZERO(31) "1:\n" body "dec %0\n jnz 1b\n"                                                   \
               : "+r"(iters)                                                                                           \
               :                                                                                                       \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",     \
                 "xmm30", "xmm31", "cc")

// Instructions per ns: 0 = vpdpbusd only, 1 = vfmadd231ps only, 2 = both, alternating.
__attribute__((target("avx512f,avx512vnni"))) double probe(int mode) {
  long iters = 4000000;
  const double n = 12.0 * double(iters);
  const double t0 = cpu_seconds();
  if (mode == 0) {
    KEEL_PROBE(KEEL_DP(0) KEEL_DP(1) KEEL_DP(2) KEEL_DP(3) KEEL_DP(4) KEEL_DP(5) KEEL_DP(6) KEEL_DP(7) KEEL_DP(8)
                   KEEL_DP(9) KEEL_DP(10) KEEL_DP(11));
  } else if (mode == 1) {
    KEEL_PROBE(KEEL_FMA(0) KEEL_FMA(1) KEEL_FMA(2) KEEL_FMA(3) KEEL_FMA(4) KEEL_FMA(5) KEEL_FMA(6) KEEL_FMA(7)
                   KEEL_FMA(8) KEEL_FMA(9) KEEL_FMA(10) KEEL_FMA(11));
  } else {
    KEEL_PROBE(KEEL_DP(0) KEEL_FMA(1) KEEL_DP(2) KEEL_FMA(3) KEEL_DP(4) KEEL_FMA(5) KEEL_DP(6) KEEL_FMA(7) KEEL_DP(8)
                   KEEL_FMA(9) KEEL_DP(10) KEEL_FMA(11));
  }
  return n / (cpu_seconds() - t0) * 1e-9;
}

// ---- the kernels ----

struct Shape {
  DType dt;
  keel::convert::SrcType src;
  uint32_t rows, cols;
  const char* what;
};

// Random GGUF blocks (sane f16 scales, every other byte random), packed losslessly.
void pack_random(const Shape& s, std::mt19937& rng, uint8_t* out) {
  const uint32_t be = keel::convert::block_elems(s.src);
  const uint64_t bb = keel::convert::encoded_bytes(s.src, be), n = uint64_t(s.rows) * s.cols / be;
  std::vector<uint8_t> raw(n * bb);
  for (auto& b : raw) b = uint8_t(rng());
  std::uniform_real_distribution<float> scale(0.0005f, 0.002f);
  for (uint64_t k = 0; k < n; ++k) {
    const uint16_t d = keel::f32_to_f16(scale(rng));
    memcpy(raw.data() + k * bb, &d, 2);
  }
  std::string err;
  if (!keel::convert::pack_from_ggml_blocks(s.src, raw.data(), raw.size(), s.rows, s.cols, s.dt, out,
                                            keel::tensor_bytes(s.dt, s.rows, s.cols), err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    std::exit(1);
  }
}

// Median CPU microseconds per call, over samples of at least `sample_seconds` each.
double time_calls(const keel::MatmulKernels& k, const Shape& s, const uint8_t* copies, uint64_t stride,
                  uint32_t n_copies, const keel::ActBlock* x, uint32_t n_tokens, float* y, int samples,
                  double sample_seconds) {
  const uint32_t panels = keel::panel_count(s.rows);
  uint32_t c = 0;
  auto call = [&] {
    const keel::WeightView w{s.dt, s.rows, s.cols, copies + uint64_t(c) * stride};
    k.matmul(w, x, n_tokens, y, s.rows, 0, panels);
    c = c + 1 == n_copies ? 0 : c + 1;
  };
  for (uint32_t i = 0; i < n_copies; ++i) call();  // faults in and warms every copy
  std::vector<double> us;
  for (int i = 0; i < samples; ++i) {
    const double t0 = cpu_seconds();
    uint64_t calls = 0;
    do {
      call();
      ++calls;
    } while (cpu_seconds() - t0 < sample_seconds);
    us.push_back((cpu_seconds() - t0) / double(calls) * 1e6);
  }
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int samples = quick ? 3 : 7;
  const double sample_seconds = quick ? 0.01 : 0.03;
  const keel::MatmulKernels* k = keel::kernels_x86_avx512();
  if (k == nullptr) {
    std::fprintf(stderr, "batched_kernel_bench: this CPU (or build) has no AVX-512 VNNI kernels\n");
    return 1;
  }
  std::printf("# keel batched_kernel_bench: single thread, CPU time, median of %d samples\n", samples);
  for (int r = 0; r < 3; ++r)
    std::printf("# issue rate per ns: vpdpbusd %.2f, vfmadd231ps %.2f, both alternating %.2f\n", probe(0), probe(1),
                probe(2));

  using keel::convert::SrcType;
  const Shape shapes[] = {{DType::Q4M, SrcType::Q4_1, 576, 576, "attention q/o"},
                          {DType::Q4M, SrcType::Q4_1, 1536, 576, "ffn gate/up"},
                          {DType::Q4M, SrcType::Q4_1, 576, 1536, "ffn down"},
                          {DType::Q8, SrcType::Q8_0, 49152, 576, "output head"}};
  constexpr uint64_t kWarmBytes = 48ull << 20, kHotBytes = 1ull << 20;
  constexpr uint32_t kMaxTokens = 16;
  std::mt19937 rng(5);
  std::printf("\n| matrix | dtype | tokens | warm us/call | warm G mul-add/s | hot us/call | hot G mul-add/s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  for (const Shape& s : shapes) {
    const uint64_t bytes = keel::tensor_bytes(s.dt, s.rows, s.cols);
    const uint64_t stride = (bytes + 4095) / 4096 * 4096;
    const uint32_t n_copies = uint32_t(std::max<uint64_t>(1, kWarmBytes / stride));
    uint8_t* copies = static_cast<uint8_t*>(std::aligned_alloc(4096, stride * n_copies));
    if (copies == nullptr) {
      std::fprintf(stderr, "out of memory allocating %llu bytes\n", (unsigned long long)(stride * n_copies));
      return 1;
    }
    pack_random(s, rng, copies);
    for (uint32_t c = 1; c < n_copies; ++c) memcpy(copies + c * stride, copies, bytes);
    const uint32_t nb = keel::act_blocks(s.cols);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> xf(uint64_t(kMaxTokens) * s.cols);
    for (float& v : xf) v = nd(rng);
    std::vector<keel::ActBlock> x(uint64_t(kMaxTokens) * nb);
    for (uint32_t t = 0; t < kMaxTokens; ++t) k->quantize_act(&xf[uint64_t(t) * s.cols], s.cols, &x[uint64_t(t) * nb]);
    std::vector<float> y(uint64_t(kMaxTokens) * s.rows);
    for (uint32_t n : {1u, 2u, 4u, 8u, 16u}) {
      const double mul_adds = double(s.rows) * s.cols * n;
      const double warm = time_calls(*k, s, copies, stride, n_copies, x.data(), n, y.data(), samples, sample_seconds);
      std::printf("| %u x %u (%s) | %s | %u | %.1f | %.1f |", s.rows, s.cols, s.what, keel::fb::EnumNameDType(s.dt), n,
                  warm, mul_adds / warm * 1e-3);
      if (bytes <= kHotBytes) {
        const double hot = time_calls(*k, s, copies, stride, 1, x.data(), n, y.data(), samples, sample_seconds);
        std::printf(" %.1f | %.1f |\n", hot, mul_adds / hot * 1e-3);
      } else {
        std::printf(" – | – |\n");
      }
      std::fflush(stdout);
    }
    std::free(copies);
  }
  return 0;
}
