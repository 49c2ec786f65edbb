// The ref kernels against exact (double) arithmetic, and every SIMD kernel of the build's
// architecture (x86: AVX2, AVX-512; arm64: NEON, dotprod, i8mm) against ref, over many shapes
// (rows 1..100 including partial panels, cols 8..4096 including partial blocks, 1..17 tokens)
// and every dtype.
//
// Tolerances, with u = 2^-24 (f32 unit roundoff):
//  - quantize_act: bit-identical across backends (same f32 divisions, round-to-nearest-even).
//  - quantized matmul: integer dot products are exact, so results differ only in how the
//    n_terms per-block f32 terms (d_w * d_a) * isum (Q4M adds (m_w * d_a) * sum_a) are rounded
//    and summed (FMA or not). Each implementation is within (n_terms + 2) u M of the exact
//    value, M = sum |terms|, so two implementations agree within 2 (n_terms + 2) u M.
//  - float matmul: recursive summation of cols products in any order is within (cols + 1) u S
//    of the exact value, S = sum |w x|; two orders agree within 2 (cols + 1) u S.
//  - vector ops: the same summation bounds; exp (a degree-6 polynomial) within 4 ulp.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "convert/pack.h"
#include "core/f16.h"
#include "kernels/dequant.h"
#if defined(__aarch64__)
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/arm64/arm64_tables.h"
#endif
#include "kernels/kernels.h"
#include "kernels/ref/expf_ref.h"
#include "model/weight_format.h"

namespace keel {
namespace {

using fb::DType;
constexpr double kU = 1.0 / 16777216.0;  // 2^-24

// A zeroed buffer whose data() is 64-byte aligned, as tensors are inside a .keel image.
struct AlignedBytes {
  explicit AlignedBytes(uint64_t n) : size(n), storage(n + 64, 0) {}
  uint8_t* data() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
    return storage.data() + ((64 - p % 64) % 64);
  }
  uint64_t size;
  std::vector<uint8_t> storage;
};

uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// Independent reading of Panel16x4 (docs/format.md) in double.
struct QuantReader {
  DType dt;
  uint32_t cols;
  const uint8_t* t;
  uint32_t nb() const { return (cols + 31) / 32; }
  uint64_t head() const { return (uint64_t(nb()) * 32 * (dt == DType::Q4M ? 2 : 1) + 63) / 64 * 64; }
  uint64_t panel_size() const { return head() + uint64_t(nb()) * (dt == DType::Q8 ? 512 : 256); }
  const uint8_t* panel(uint32_t row) const { return t + (row / 16) * panel_size(); }
  double scale(uint32_t row, uint32_t b) const { return f16_to_f32(get_u16(panel(row) + (b * 16 + row % 16) * 2)); }
  double min(uint32_t row, uint32_t b) const {
    return f16_to_f32(get_u16(panel(row) + uint64_t(nb()) * 32 + (b * 16 + row % 16) * 2));
  }
  int u(uint32_t row, uint32_t col) const {
    const uint8_t* q = panel(row) + head();
    const uint32_t b = col / 32, k = col % 32, lane = row % 16;
    if (dt == DType::Q8) return q[b * 512 + (k / 4) * 64 + lane * 4 + k % 4];
    const uint8_t byte = q[b * 256 + (k / 8) * 64 + lane * 4 + (k % 4)];
    return (k % 8) < 4 ? byte & 15 : byte >> 4;
  }
};

struct TestWeights {
  WeightView view;
  std::shared_ptr<AlignedBytes> bytes;
};

// Random weights: rows of different magnitudes, quantized by the converter (or converted).
TestWeights make_weights(DType dt, uint32_t rows, uint32_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-8.0f, 2.0f);
  std::vector<float> w(uint64_t(rows) * cols);
  for (uint32_t r = 0; r < rows; ++r) {
    const float s = std::exp2(mag(rng));
    const float shift = (r % 3 == 0) ? s * 0.5f : 0.0f;  // some rows off-centre (Q4M mins)
    for (uint32_t c = 0; c < cols; ++c) w[uint64_t(r) * cols + c] = nd(rng) * s + shift;
  }
  auto bytes = std::make_shared<AlignedBytes>(tensor_bytes(dt, rows, cols));
  if (is_quantized(dt)) {
    convert::quantize_pack(w.data(), rows, cols, dt, bytes->data());
  } else {
    convert::convert_float(w.data(), w.size(), dt, bytes->data());
  }
  return {WeightView{dt, rows, cols, bytes->data()}, bytes};
}

// Random GGUF blocks with every byte value (Q8_0 q = -128 and 127 included), packed losslessly.
TestWeights make_raw_weights(DType dt, uint32_t rows, uint32_t cols, std::mt19937& rng) {
  const convert::SrcType st = dt == DType::Q8   ? convert::SrcType::Q8_0
                              : dt == DType::Q4 ? convert::SrcType::Q4_0
                                                : convert::SrcType::Q4_1;
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  std::vector<uint8_t> src;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t b = 0; b < cols / 32; ++b) {
      const uint16_t d = f32_to_f16(scale(rng));
      src.push_back(uint8_t(d));
      src.push_back(uint8_t(d >> 8));
      if (dt == DType::Q4M) {
        const uint16_t m = f32_to_f16(scale(rng) * 8);
        src.push_back(uint8_t(m));
        src.push_back(uint8_t(m >> 8));
      }
      for (int i = 0; i < (dt == DType::Q8 ? 32 : 16); ++i) src.push_back(uint8_t(rng()));
    }
  auto bytes = std::make_shared<AlignedBytes>(tensor_bytes(dt, rows, cols));
  std::string err;
  EXPECT_TRUE(
      convert::pack_from_ggml_blocks(st, src.data(), src.size(), rows, cols, dt, bytes->data(), bytes->size, err))
      << err;
  return {WeightView{dt, rows, cols, bytes->data()}, bytes};
}

// Activations with varied block magnitudes, an all-zero block and a tiny block.
std::vector<float> make_acts(uint32_t n_tokens, uint32_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-4.0f, 4.0f);
  std::vector<float> x(uint64_t(n_tokens) * cols);
  for (uint32_t t = 0; t < n_tokens; ++t)
    for (uint32_t c = 0; c < cols; c += 32) {
      const float s = std::exp2(mag(rng));
      for (uint32_t i = c; i < std::min(cols, c + 32); ++i) x[uint64_t(t) * cols + i] = nd(rng) * s;
    }
  if (cols >= 64) {
    for (uint32_t i = 0; i < 32; ++i) x[32 + i] = 0.0f;
  }
  if (cols >= 96 && n_tokens > 1) {
    for (uint32_t i = 64; i < 96; ++i) x[cols + i] = 1e-35f * float(i);
  }
  return x;
}

std::vector<ActBlock> quantize(const MatmulKernels& k, const std::vector<float>& x, uint32_t n_tokens, uint32_t cols) {
  std::vector<ActBlock> a(uint64_t(n_tokens) * act_blocks(cols));
  for (uint32_t t = 0; t < n_tokens; ++t)
    k.quantize_act(&x[uint64_t(t) * cols], cols, &a[uint64_t(t) * act_blocks(cols)]);
  return a;
}

// Exact y and the magnitude M of the f32 terms, for quantized weights and activations.
void exact_quant(const WeightView& w, const std::vector<ActBlock>& a, uint32_t n_tokens, std::vector<double>& y,
                 std::vector<double>& mag) {
  const QuantReader qr{w.dtype, w.cols, w.data};
  const uint32_t nb = act_blocks(w.cols);
  y.assign(uint64_t(n_tokens) * w.rows, 0.0);
  mag.assign(uint64_t(n_tokens) * w.rows, 0.0);
  for (uint32_t t = 0; t < n_tokens; ++t)
    for (uint32_t r = 0; r < w.rows; ++r) {
      double s = 0, m = 0;
      for (uint32_t b = 0; b < nb; ++b) {
        const ActBlock& ab = a[uint64_t(t) * nb + b];
        const int z = w.dtype == DType::Q8 ? 128 : w.dtype == DType::Q4 ? 8 : 0;
        int64_t isum = 0;
        for (uint32_t k = 0; k < 32; ++k) isum += int64_t(qr.u(r, b * 32 + k) - z) * ab.q[k];
        const double term = qr.scale(r, b) * double(ab.d) * double(isum);
        s += term;
        m += std::fabs(term);
        if (w.dtype == DType::Q4M) {
          const double term2 = qr.min(r, b) * double(ab.d) * double(ab.sum);
          s += term2;
          m += std::fabs(term2);
        }
      }
      y[uint64_t(t) * w.rows + r] = s;
      mag[uint64_t(t) * w.rows + r] = m;
    }
}

void exact_float(const WeightView& w, const std::vector<float>& x, uint32_t n_tokens, std::vector<double>& y,
                 std::vector<double>& mag) {
  y.assign(uint64_t(n_tokens) * w.rows, 0.0);
  mag.assign(uint64_t(n_tokens) * w.rows, 0.0);
  std::vector<float> row(w.cols);
  for (uint32_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.dtype, w.data, w.rows, w.cols, r, row.data());
    for (uint32_t t = 0; t < n_tokens; ++t) {
      double s = 0, m = 0;
      for (uint32_t c = 0; c < w.cols; ++c) {
        const double p = double(row[c]) * double(x[uint64_t(t) * w.cols + c]);
        s += p;
        m += std::fabs(p);
      }
      y[uint64_t(t) * w.rows + r] = s;
      mag[uint64_t(t) * w.rows + r] = m;
    }
  }
}

uint32_t n_terms(DType dt, uint32_t cols) {
  if (!is_quantized(dt)) return cols;
  return act_blocks(cols) * (dt == DType::Q4M ? 2 : 1);
}

// Runs a table's matmul on all panels; y has stride rows + 3 (a gap the kernel must not touch).
std::vector<float> run(const MatmulKernels& k, const WeightView& w, const std::vector<float>& x,
                       const std::vector<ActBlock>& a, uint32_t n_tokens, uint32_t y_stride) {
  std::vector<float> y(uint64_t(n_tokens) * y_stride, -12345.0f);
  if (is_quantized(w.dtype)) {
    k.matmul(w, a.data(), n_tokens, y.data(), y_stride, 0, panel_count(w.rows));
  } else {
    k.matmul_f(w, x.data(), n_tokens, w.cols, y.data(), y_stride, 0, panel_count(w.rows));
  }
  return y;
}

struct Stats {
  double worst_ratio = 0;  // max |diff| / tolerance
  uint64_t n = 0, identical = 0;
};

const uint32_t kRows[] = {1, 3, 15, 16, 17, 31, 33, 48, 64, 100};
const uint32_t kColsQuant[] = {8, 32, 33, 64, 100, 172, 256, 576, 1000, 1536, 4096};
const uint32_t kColsFloat[] = {1, 7, 8, 9, 16, 31, 32, 64, 100, 172, 576, 1000, 1536, 4096};
const uint32_t kTokens[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17};

std::string dname(DType dt) { return fb::EnumNameDType(dt); }

uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

// ---- ref against exact arithmetic ----

TEST(RefKernels, QuantizeActFollowsItsRule) {
  std::mt19937 rng(3);
  const MatmulKernels& k = kernels_ref();
  for (uint32_t cols : {1u, 5u, 31u, 32u, 33u, 64u, 100u, 576u}) {
    const std::vector<float> x = make_acts(2, cols, rng);
    const std::vector<ActBlock> a = quantize(k, x, 2, cols);
    for (uint32_t t = 0; t < 2; ++t)
      for (uint32_t b = 0; b < act_blocks(cols); ++b) {
        const ActBlock& ab = a[t * act_blocks(cols) + b];
        float amax = 0;
        for (uint32_t i = b * 32; i < std::min(cols, b * 32 + 32); ++i)
          amax = std::max(amax, std::fabs(x[t * cols + i]));
        const float d = amax >= 1e-30f ? amax / 127.0f : 0.0f;
        ASSERT_EQ(ab.d, d);
        int32_t sum = 0;
        for (uint32_t i = 0; i < 32; ++i) {
          const uint32_t c = b * 32 + i;
          sum += ab.q[i];
          ASSERT_GE(ab.q[i], -127);
          if (c >= cols || d == 0.0f) {
            ASSERT_EQ(ab.q[i], 0);
          } else {
            ASSERT_EQ(ab.q[i], int(std::nearbyint(x[t * cols + c] * (1.0f / d))));
          }
        }
        ASSERT_EQ(ab.sum, sum);
      }
  }
  // Ties go to even: with max |x| = 127, d = 1.
  float tie[32] = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f};
  ActBlock ab;
  k.quantize_act(tie, 32, &ab);
  EXPECT_EQ(ab.d, 1.0f);
  const int want[8] = {127, 2, 4, -2, -4, 0, 0, 2};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ab.q[i], want[i]) << i;
}

TEST(RefKernels, QuantizedMatmulIsExactUpToF32Rounding) {
  std::mt19937 rng(17);
  const MatmulKernels& k = kernels_ref();
  for (DType dt : {DType::Q8, DType::Q4, DType::Q4M})
    for (uint32_t rows : {1u, 17u, 33u})
      for (uint32_t cols : {8u, 64u, 172u, 576u}) {
        const uint32_t n_tokens = 1 + rng() % 5;
        SCOPED_TRACE(dname(dt) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " tokens " +
                     std::to_string(n_tokens));
        const TestWeights w = make_weights(dt, rows, cols, rng);
        const std::vector<float> x = make_acts(n_tokens, cols, rng);
        const std::vector<ActBlock> a = quantize(k, x, n_tokens, cols);
        std::vector<double> ye, mag;
        exact_quant(w.view, a, n_tokens, ye, mag);
        const std::vector<float> y = run(k, w.view, x, a, n_tokens, rows);
        for (uint64_t i = 0; i < ye.size(); ++i)
          ASSERT_LE(std::fabs(y[i] - ye[i]), (n_terms(dt, cols) + 2) * kU * mag[i] + 1e-38) << i;
      }
}

TEST(RefKernels, FloatMatmulIsExactUpToF32Rounding) {
  std::mt19937 rng(19);
  const MatmulKernels& k = kernels_ref();
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (uint32_t rows : {1u, 17u, 40u})
      for (uint32_t cols : {1u, 9u, 64u, 172u, 576u}) {
        const uint32_t n_tokens = 1 + rng() % 5;
        SCOPED_TRACE(dname(dt) + " " + std::to_string(rows) + "x" + std::to_string(cols));
        const TestWeights w = make_weights(dt, rows, cols, rng);
        const std::vector<float> x = make_acts(n_tokens, cols, rng);
        std::vector<double> ye, mag;
        exact_float(w.view, x, n_tokens, ye, mag);
        const std::vector<float> y = run(k, w.view, x, {}, n_tokens, rows);
        for (uint64_t i = 0; i < ye.size(); ++i)
          ASSERT_LE(std::fabs(y[i] - ye[i]), (cols + 1) * kU * mag[i] + 1e-38) << i;
      }
}

// ---- the SIMD tables of this architecture against ref ----

// Each level of the build's architecture (x86: avx2, avx512; arm64: neon, dotprod, i8mm); a
// level the CPU lacks is skipped with a message saying so.
#if defined(__x86_64__) || defined(__i386__)
const char* const kSimdLevels[] = {"avx2", "avx512"};
#elif defined(__aarch64__)
const char* const kSimdLevels[] = {"neon", "dotprod", "i8mm"};
#endif

const MatmulKernels* simd_table(const std::string& name) {
  if (name == "avx2") return kernels_x86_avx2();
  if (name == "avx512") return kernels_x86_avx512();
  if (name == "neon") return kernels_arm64_neon();
  if (name == "dotprod") return kernels_arm64_dotprod();
  if (name == "i8mm") return kernels_arm64_i8mm();
  return nullptr;
}

const char* simd_requirement(const std::string& name) {
  if (name == "avx2") return "AVX2 + FMA + F16C";
  if (name == "avx512") return "AVX-512 F/BW/VL/DQ + VNNI";
  if (name == "neon") return "Advanced SIMD (every arm64 CPU has it)";
  if (name == "dotprod") return "Armv8.2 dotprod + fp16 (HWCAP_ASIMDDP, HWCAP_ASIMDHP)";
  return "i8mm (HWCAP2_I8MM) besides dotprod";
}

// The tables of this build's architecture that this CPU can run, narrowest first.
std::vector<const MatmulKernels*> simd_tables_here() {
  std::vector<const MatmulKernels*> ks;
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  for (const char* level : kSimdLevels)
    if (const MatmulKernels* k = simd_table(level)) ks.push_back(k);
#endif
  return ks;
}

class SimdKernels : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    k_ = simd_table(GetParam());
    if (k_ == nullptr) {
      std::printf("[  SKIP    ] this CPU lacks %s: the %s kernels cannot run here\n", simd_requirement(GetParam()),
                  GetParam());
      GTEST_SKIP() << "CPU lacks " << simd_requirement(GetParam());
    }
  }
  const MatmulKernels* k_ = nullptr;
};

TEST_P(SimdKernels, QuantizeActIsBitIdenticalToRef) {
  std::mt19937 rng(23);
  for (uint32_t cols = 1; cols <= 300; cols += (cols < 70 ? 1 : 37)) {
    std::vector<float> x = make_acts(3, cols, rng);
    if (cols > 40) {
      x[1] = 127.0f;  // ties: x * (1/d) lands exactly on .5 for these
      x[2] = 2.5f;
      x[3] = -3.5f;
      x[4] = 1e-31f;
    }
    const std::vector<ActBlock> want = quantize(kernels_ref(), x, 3, cols);
    const std::vector<ActBlock> got = quantize(*k_, x, 3, cols);
    ASSERT_EQ(memcmp(want.data(), got.data(), want.size() * sizeof(ActBlock)), 0) << "cols " << cols;
  }
}

void compare_to_ref(const MatmulKernels& k, DType dt, bool raw, Stats& st) {
  std::mt19937 rng(31 + int(dt) + (raw ? 100 : 0));
  const bool quant = is_quantized(dt);
  const auto& cols_list = quant ? std::vector<uint32_t>(std::begin(kColsQuant), std::end(kColsQuant))
                                : std::vector<uint32_t>(std::begin(kColsFloat), std::end(kColsFloat));
  uint32_t pick = 0;
  for (uint32_t rows : kRows)
    for (uint32_t cols : cols_list) {
      if (raw && cols % 32 != 0) continue;  // GGUF blocks need whole blocks
      for (int rep = 0; rep < 2; ++rep) {
        const uint32_t n_tokens = rep == 0 ? kTokens[pick++ % 10] : (rng() % 2 ? 1u : 17u);
        SCOPED_TRACE(dname(dt) + (raw ? " raw" : "") + " rows " + std::to_string(rows) + " cols " +
                     std::to_string(cols) + " tokens " + std::to_string(n_tokens));
        const TestWeights w = raw ? make_raw_weights(dt, rows, cols, rng) : make_weights(dt, rows, cols, rng);
        const std::vector<float> x = make_acts(n_tokens, cols, rng);
        const std::vector<ActBlock> a = quant ? quantize(kernels_ref(), x, n_tokens, cols) : std::vector<ActBlock>{};
        std::vector<double> ye, mag;
        if (quant)
          exact_quant(w.view, a, n_tokens, ye, mag);
        else
          exact_float(w.view, x, n_tokens, ye, mag);
        const uint32_t y_stride = rows + 3;
        const std::vector<float> yr = run(kernels_ref(), w.view, x, a, n_tokens, y_stride);
        const std::vector<float> yk = run(k, w.view, x, a, n_tokens, y_stride);
        const double factor = 2.0 * (n_terms(dt, cols) + 2) * kU;
        for (uint32_t t = 0; t < n_tokens; ++t) {
          for (uint32_t r = 0; r < rows; ++r) {
            const uint64_t i = uint64_t(t) * y_stride + r;
            const double tol = factor * mag[uint64_t(t) * rows + r] + 1e-38;
            const double diff = std::fabs(double(yk[i]) - double(yr[i]));
            ASSERT_LE(diff, tol) << "token " << t << " row " << r << ": " << yk[i] << " vs ref " << yr[i];
            st.worst_ratio = std::max(st.worst_ratio, diff / tol);
            ++st.n;
            st.identical += (yk[i] == yr[i]);
          }
          for (uint32_t r = rows; r < y_stride; ++r)
            ASSERT_EQ(yk[uint64_t(t) * y_stride + r], -12345.0f) << "wrote past the rows";
        }
      }
    }
}

void report(const char* what, const Stats& st) {
  std::printf("    %s: %llu outputs, %.1f%% bit-identical to ref, worst |diff| = %.3g of the tolerance\n", what,
              (unsigned long long)st.n, 100.0 * double(st.identical) / double(st.n ? st.n : 1), st.worst_ratio);
}

TEST_P(SimdKernels, Q8MatchesRef) {
  Stats st;
  compare_to_ref(*k_, DType::Q8, false, st);
  compare_to_ref(*k_, DType::Q8, true, st);
  report("Q8", st);
}
TEST_P(SimdKernels, Q4MatchesRef) {
  Stats st;
  compare_to_ref(*k_, DType::Q4, false, st);
  compare_to_ref(*k_, DType::Q4, true, st);
  report("Q4", st);
}
TEST_P(SimdKernels, Q4MMatchesRef) {
  Stats st;
  compare_to_ref(*k_, DType::Q4M, false, st);
  compare_to_ref(*k_, DType::Q4M, true, st);
  report("Q4M", st);
}
TEST_P(SimdKernels, F32MatchesRef) {
  Stats st;
  compare_to_ref(*k_, DType::F32, false, st);
  report("F32", st);
}
TEST_P(SimdKernels, F16MatchesRef) {
  Stats st;
  compare_to_ref(*k_, DType::F16, false, st);
  report("F16", st);
}
TEST_P(SimdKernels, BF16MatchesRef) {
  Stats st;
  compare_to_ref(*k_, DType::BF16, false, st);
  report("BF16", st);
}

// Weights at the int16 limits of the kernels that widen products to int16 (x86 vpmaddubsw, arm64
// SMULL/SMLAL + SADALP): Q8 q_w = -128 or 127, Q4 / Q4M nibbles 15 (or 0) against |q_a| = 127
// with matching signs, for one token and for a tile of 5. A saturating kernel would be off by
// thousands of units per block.
void check_extremes(const MatmulKernels& k, DType dt) {
  const uint32_t rows = 32, cols = 256, n_tokens = 5;
  const convert::SrcType st = dt == DType::Q8   ? convert::SrcType::Q8_0
                              : dt == DType::Q4 ? convert::SrcType::Q4_0
                                                : convert::SrcType::Q4_1;
  for (int pattern = 0; pattern < 4; ++pattern) {
    std::vector<uint8_t> src;
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t b = 0; b < cols / 32; ++b) {
        src.push_back(0x00);
        src.push_back(0x3c);  // d = 1
        if (dt == DType::Q4M) {
          src.push_back(0x00);
          src.push_back(0xbc);  // m = -1
        }
        for (uint32_t i = 0; i < (dt == DType::Q8 ? 32u : 16u); ++i) {
          const bool neg = pattern == 0 || (pattern == 2 && (i + r) % 2) || (pattern == 3 && (i / 2 + r) % 2);
          if (dt == DType::Q8) {
            src.push_back(neg ? 0x80 : 0x7f);  // q = -128 or 127
          } else {
            src.push_back(neg ? 0x00 : 0xff);  // nibbles 0 or 15
          }
        }
      }
    AlignedBytes bytes(tensor_bytes(dt, rows, cols));
    std::string err;
    ASSERT_TRUE(
        convert::pack_from_ggml_blocks(st, src.data(), src.size(), rows, cols, dt, bytes.data(), bytes.size, err))
        << err;
    const WeightView w{dt, rows, cols, bytes.data()};
    for (float sign : {1.0f, -1.0f}) {
      std::vector<float> x(uint64_t(n_tokens) * cols);
      for (uint32_t t = 0; t < n_tokens; ++t)
        for (uint32_t c = 0; c < cols; ++c)
          x[t * cols + c] = (pattern == 1 ? 1.0f : (c % 2 ? -1.0f : 1.0f)) * (t % 2 ? -sign : sign);
      const std::vector<ActBlock> a = quantize(kernels_ref(), x, n_tokens, cols);
      std::vector<double> ye, mag;
      exact_quant(w, a, n_tokens, ye, mag);
      for (uint32_t n : {1u, n_tokens}) {
        const std::vector<float> yk = run(k, w, x, a, n, rows);
        for (uint32_t i = 0; i < n * rows; ++i)
          ASSERT_NEAR(yk[i], ye[i], 2 * (n_terms(dt, cols) + 2) * kU * mag[i])
              << dname(dt) << " pattern " << pattern << " tokens " << n << " output " << i;
      }
    }
  }
}

TEST_P(SimdKernels, Q8ExtremesDoNotSaturate) { check_extremes(*k_, DType::Q8); }
TEST_P(SimdKernels, Q4ExtremesDoNotSaturate) {
  check_extremes(*k_, DType::Q4);
  check_extremes(*k_, DType::Q4M);
}

// Panel ranges: only rows of [16 * begin, 16 * end) are written, for every dtype, and each
// panel's result is the same whichever range it is computed in (threads may split anywhere).
TEST_P(SimdKernels, WritesOnlyItsPanels) {
  std::mt19937 rng(41);
  const uint32_t rows = 70, cols = 96, n_tokens = 3, y_stride = 80;
  for (DType dt : {DType::Q8, DType::Q4, DType::Q4M, DType::F32, DType::F16, DType::BF16}) {
    const TestWeights w = make_weights(dt, rows, cols, rng);
    const std::vector<float> x = make_acts(n_tokens, cols, rng);
    const std::vector<ActBlock> a = quantize(kernels_ref(), x, n_tokens, cols);
    const std::vector<float> full = run(*k_, w.view, x, a, n_tokens, y_stride);
    for (uint32_t begin = 0; begin <= panel_count(rows); ++begin)
      for (uint32_t end = begin; end <= panel_count(rows); ++end) {
        std::vector<float> y(n_tokens * y_stride, -7.0f);
        if (is_quantized(dt))
          k_->matmul(w.view, a.data(), n_tokens, y.data(), y_stride, begin, end);
        else
          k_->matmul_f(w.view, x.data(), n_tokens, cols, y.data(), y_stride, begin, end);
        for (uint32_t t = 0; t < n_tokens; ++t)
          for (uint32_t r = 0; r < y_stride; ++r) {
            const bool inside = r >= begin * 16 && r < std::min(end * 16, rows);
            const float v = y[t * y_stride + r];
            if (!inside) {
              ASSERT_EQ(v, -7.0f) << dname(dt) << " panels [" << begin << "," << end << ") row " << r;
            } else {
              ASSERT_EQ(v, full[t * y_stride + r]) << "a panel's result depends on the range it is in";
            }
          }
      }
  }
}

TEST(SimdDispatch, PicksTheWidestSupportedLevel) {
#if defined(__x86_64__) || defined(__i386__)
  const MatmulKernels* best = kernels_x86();
  ASSERT_NE(best, nullptr) << "this CPU lacks AVX2 + FMA + F16C";
  EXPECT_STREQ(best->name, kernels_x86_avx512() != nullptr ? "avx512vnni" : "avx2");
#elif defined(__aarch64__)
  const MatmulKernels* best = kernels_arm64();
  ASSERT_NE(best, nullptr) << "every arm64 CPU has NEON";
  EXPECT_STREQ(best->name, kernels_arm64_i8mm() != nullptr      ? "neon-i8mm"
                           : kernels_arm64_dotprod() != nullptr ? "neon-dotprod"
                                                                : "neon");
#else
  const MatmulKernels* best = kernels_native();
  ASSERT_EQ(best, nullptr) << "no SIMD tables are built for this architecture";
  return;
#endif
  EXPECT_EQ(kernels_native(), best);
  EXPECT_EQ(&kernels_best(), best);
}

// A token's outputs do not depend on the tokens multiplied beside it nor on the SIMD table
// (batched decode relies on it: a request's tokens are the same alone or batched): for Q8, Q4 and
// Q4M, every token of a call over 1..17 tokens (every tile size and its remainders) gets the bits
// it gets alone, from every table of this architecture the CPU runs (x86: AVX-512 and AVX2;
// arm64: i8mm, dotprod and NEON).
TEST(SimdTokenTiles, TokensGiveTheSameBitsAloneOrTogether) {
  const std::vector<const MatmulKernels*> ks = simd_tables_here();
  if (ks.empty()) {
    std::printf("[  SKIP    ] no SIMD table of this build runs on this CPU\n");
    GTEST_SKIP() << "no SIMD table runs here";
  }
  std::mt19937 rng(41);
  for (DType dt : {DType::Q8, DType::Q4, DType::Q4M}) {
    for (uint32_t cols : {64u, 576u, 1000u}) {
      const uint32_t rows = 37;
      const TestWeights w = make_weights(dt, rows, cols, rng);
      const uint32_t n_max = 17, nb = act_blocks(cols);
      const std::vector<float> x = make_acts(n_max, cols, rng);
      const std::vector<ActBlock> a = quantize(kernels_ref(), x, n_max, cols);
      std::vector<std::vector<float>> alone(n_max);
      for (uint32_t t = 0; t < n_max; ++t) {
        const std::vector<ActBlock> one(a.begin() + t * nb, a.begin() + (t + 1) * nb);
        alone[t] = run(*ks[0], w.view, {}, one, 1, rows);
        for (const MatmulKernels* k : ks) {
          const std::vector<float> yk = run(*k, w.view, {}, one, 1, rows);
          for (uint32_t r = 0; r < rows; ++r)
            ASSERT_EQ(bits(yk[r]), bits(alone[t][r])) << dname(dt) << " " << k->name << " vs " << ks[0]->name
                                                      << " cols " << cols << " token " << t << " row " << r;
        }
      }
      for (uint32_t n : {2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 12u, 16u, 17u}) {
        for (const MatmulKernels* k : ks) {
          const std::vector<float> y = run(*k, w.view, {}, a, n, rows);
          for (uint32_t t = 0; t < n; ++t)
            for (uint32_t r = 0; r < rows; ++r)
              ASSERT_EQ(bits(y[uint64_t(t) * rows + r]), bits(alone[t][r]))
                  << dname(dt) << " " << k->name << " cols " << cols << ", " << n << " tokens: token " << t << " row "
                  << r;
        }
      }
    }
  }
}

#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
INSTANTIATE_TEST_SUITE_P(Levels, SimdKernels, ::testing::ValuesIn(kSimdLevels),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });
#else
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SimdKernels);
#endif

#if defined(__aarch64__)
// CI runs this binary under qemu with one CPU per tier and names the tier it expects; the
// dispatcher must pick exactly that one (a CPU feature read wrongly would pick a narrower tier,
// or a wider one that dies).
TEST(ArmTier, DispatcherPicksTheTierTheCpuHas) {
  const char* want = std::getenv("KEEL_EXPECT_ARM64_TIER");
  if (want == nullptr || *want == '\0') {
    std::printf("[  SKIP    ] KEEL_EXPECT_ARM64_TIER is not set: no expected tier to check %s against\n",
                kernels_arm64()->name);
    GTEST_SKIP() << "KEEL_EXPECT_ARM64_TIER not set";
  }
  const std::string w = want;
  ASSERT_TRUE(w == "neon" || w == "neon-dotprod" || w == "neon-i8mm")
      << "KEEL_EXPECT_ARM64_TIER is '" << w << "', expected neon, neon-dotprod or neon-i8mm";
  EXPECT_EQ(std::string(kernels_arm64()->name), w);
  EXPECT_EQ(kernels_arm64_dotprod() != nullptr, w != "neon");
  EXPECT_EQ(kernels_arm64_i8mm() != nullptr, w == "neon-i8mm");
}

// The reason the dispatcher exists: on a CPU without dotprod (KEEL_EXPECT_ARM64_TIER=neon, e.g.
// qemu -cpu cortex-a72) the dotprod table's SDOT is an undefined instruction, so the kernel kills
// its process with SIGILL. The table is reached directly here, past the dispatcher's check, in a
// child process. The child is made by the raw clone system call, not by EXPECT_EXIT: gtest's
// death tests fork through glibc's fork(), whose child never returns under qemu-user 7.2 with the
// cross toolchain's C library (qemu-aarch64 -L /usr/aarch64-linux-gnu; Debian's libc6:arm64
// forks fine); the child runs only the kernel, which touches no glibc state, and exit_group.
TEST(ArmTierDeathTest, DotprodKernelDiesWithSigillWithoutDotprod) {
  const char* want = std::getenv("KEEL_EXPECT_ARM64_TIER");
  if (want == nullptr || std::string(want) != "neon") {
    std::printf("[  SKIP    ] needs a CPU without dotprod, named by KEEL_EXPECT_ARM64_TIER=neon\n");
    GTEST_SKIP() << "KEEL_EXPECT_ARM64_TIER is not neon";
  }
  ASSERT_EQ(kernels_arm64_dotprod(), nullptr) << "KEEL_EXPECT_ARM64_TIER=neon but the CPU reports dotprod";
  std::mt19937 rng(43);
  const TestWeights w = make_weights(DType::Q8, 16, 64, rng);
  const std::vector<float> x = make_acts(1, 64, rng);
  const std::vector<ActBlock> a = quantize(kernels_ref(), x, 1, 64);
  std::vector<float> y(16);
  const MatmulKernels& dot = arm64::matmul_dotprod_table();
  const long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  ASSERT_GE(pid, 0) << "clone failed";
  if (pid == 0) {
    dot.matmul(w.view, a.data(), 1, y.data(), 16, 0, 1);
    syscall(SYS_exit_group, 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid_t(pid), &status, 0), pid_t(pid));
  ASSERT_TRUE(WIFSIGNALED(status)) << "the dotprod kernel ran to the end (exit status " << WEXITSTATUS(status)
                                   << ") on a CPU the dispatcher says lacks dotprod";
  EXPECT_EQ(WTERMSIG(status), SIGILL) << "killed by signal " << WTERMSIG(status) << ", expected SIGILL";
  // The NEON table runs the same call to the end.
  std::vector<float> yn(16), yr(16);
  arm64::matmul_neon_table().matmul(w.view, a.data(), 1, yn.data(), 16, 0, 1);
  kernels_ref().matmul(w.view, a.data(), 1, yr.data(), 16, 0, 1);
  for (int r = 0; r < 16; ++r) EXPECT_NEAR(yn[r], yr[r], 1e-3f * std::fabs(yr[r]) + 1e-30f) << r;
}
#endif

// ---- vector ops ----

class VectorOps : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "ref") {
      v_ = &vector_kernels_ref();
      return;
    }
    // The SIMD table of the build's architecture (AVX2 on x86, NEON on arm64).
    v_ = vector_kernels_native();
    if (v_ == nullptr) {
      std::printf("[  SKIP    ] this CPU or build has no SIMD vector kernels (x86 AVX2, arm64 NEON)\n");
      GTEST_SKIP() << "no SIMD vector kernels";
    }
  }
  const VectorKernels* v_ = nullptr;
};

const uint32_t kVecLens[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 576, 1536, 4097};

std::vector<float> randv(uint32_t n, std::mt19937& rng, float s = 1.0f) {
  std::normal_distribution<float> nd(0.0f, s);
  std::vector<float> v(n);
  for (float& f : v) f = nd(rng);
  return v;
}

TEST(ExpPoly, WithinFourUlpOfExp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.00731f) {
    const double want = std::exp(double(x));
    const double got = expf_poly::exp_ref(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  std::printf("    exp: worst relative error %.3g (= %.2f x 2^-23)\n", worst, worst * 8388608.0);
  EXPECT_LE(worst, 4.0 / 8388608.0);
  EXPECT_EQ(expf_poly::exp_ref(-INFINITY), 0.0f);
  EXPECT_EQ(expf_poly::exp_ref(-100.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(expf_poly::exp_ref(1000.0f)));
  EXPECT_EQ(expf_poly::exp_ref(0.0f), 1.0f);
}

TEST_P(VectorOps, RmsNorm) {
  std::mt19937 rng(51);
  for (uint32_t n : kVecLens) {
    const std::vector<float> x = randv(n, rng, 3.0f), w = randv(n, rng);
    std::vector<float> out(n);
    v_->rmsnorm(x.data(), w.data(), n, 1e-5f, out.data());
    double ss = 0;
    for (float f : x) ss += double(f) * f;
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (uint32_t i = 0; i < n; ++i) {
      const double want = x[i] * inv * w[i];
      // sum of squares: n u relative; sqrt halves it; 4 more roundings.
      ASSERT_NEAR(out[i], want, (n / 2.0 + 5) * 2 * kU * std::fabs(want) + 1e-37) << n << " " << i;
    }
    std::vector<float> inplace = x;
    v_->rmsnorm(inplace.data(), w.data(), n, 1e-5f, inplace.data());
    ASSERT_EQ(memcmp(inplace.data(), out.data(), n * 4), 0);
  }
}

TEST_P(VectorOps, Softmax) {
  std::mt19937 rng(53);
  for (uint32_t n : kVecLens) {
    std::vector<float> x = randv(n, rng, 4.0f);
    if (n > 3) x[2] = -INFINITY;  // a masked position
    x[0] += 50.0f;                // a dominant entry: the max is subtracted first
    const std::vector<float> in = x;
    std::vector<double> want(n);
    double mx = -INFINITY, sum = 0;
    for (float f : x) mx = std::max(mx, double(f));
    for (uint32_t i = 0; i < n; ++i) sum += (want[i] = std::exp(double(x[i]) - mx));
    v_->softmax(x.data(), n);
    double total = 0;
    for (uint32_t i = 0; i < n; ++i) {
      want[i] /= sum;
      total += x[i];
      // exp within 4 ulp (2^-23 each), a sum of n positive terms, 2 roundings; and the f32
      // rounding of x - max, which exp turns into a relative error of |x - max| u.
      const double arg = std::isfinite(in[i]) ? std::fabs(double(in[i]) - mx) : 0.0;
      ASSERT_NEAR(x[i], want[i], (8.0 + n + 2 + arg) * kU * want[i] + 1e-38) << n << " " << i;
    }
    if (n > 3) {
      ASSERT_EQ(x[2], 0.0f);
    }
    ASSERT_NEAR(total, 1.0, (n + 10) * kU);
  }
}

TEST_P(VectorOps, SiluMul) {
  std::mt19937 rng(57);
  for (uint32_t n : kVecLens) {
    const std::vector<float> g = randv(n, rng, 6.0f), u = randv(n, rng);
    std::vector<float> out(n);
    v_->silu_mul(g.data(), u.data(), n, out.data());
    for (uint32_t i = 0; i < n; ++i) {
      const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
      // exp 8 u, then 1 + e, the division and the product: 3 more roundings.
      ASSERT_NEAR(out[i], want, 12 * kU * std::fabs(want) + 1e-38) << n << " " << i;
    }
  }
  float big[3] = {-200.0f, 200.0f, 0.0f}, one[3] = {1, 1, 1}, out[3];
  v_->silu_mul(big, one, 3, out);
  EXPECT_NEAR(out[0], 0.0f, 1e-30f);
  EXPECT_EQ(out[1], 200.0f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST_P(VectorOps, AddScaleAxpyDot) {
  std::mt19937 rng(59);
  for (uint32_t n : kVecLens) {
    const std::vector<float> a = randv(n, rng), b = randv(n, rng);
    std::vector<float> out(n);
    v_->add(a.data(), b.data(), n, out.data());
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
    std::vector<float> s = a;
    v_->scale(s.data(), n, 0.125f);
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(s[i], a[i] * 0.125f);
    std::vector<float> y = b;
    v_->axpy(0.3f, a.data(), n, y.data());
    for (uint32_t i = 0; i < n; ++i) {
      const double want = 0.3f * double(a[i]) + b[i];
      ASSERT_NEAR(y[i], want, 2 * kU * (std::fabs(0.3f * a[i]) + std::fabs(b[i])) + 1e-38);
    }
    double want = 0, mag = 0;
    for (uint32_t i = 0; i < n; ++i) {
      want += double(a[i]) * b[i];
      mag += std::fabs(double(a[i]) * b[i]);
    }
    ASSERT_NEAR(v_->dot(a.data(), b.data(), n), want, (n + 1) * kU * mag) << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, VectorOps, ::testing::Values("ref", "native"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace keel
