// The formats kept from GGUF's 5-bit and K-quant blocks (Q5, Q5M, Q4K, Q5K, Q6K):
//  - lossless: packing a GGUF tensor and decoding a row gives the floats PyPI `gguf`'s
//    dequantize gives, bit for bit (quant_blocks.* in the build tree, made by
//    tests/reference/make_quant_golden.py), and the converter's own GGML decoder agrees on
//    many more random blocks and shapes (partial panels, several superblocks);
//  - the ref kernel is exact up to f32 rounding: each block adds n_t f32 terms (Q5, Q6K one;
//    Q5M, Q4K, Q5K two: scale and min), each rounded at most 4 times (d * sc, * d_a, * isum,
//    the add), so |y - exact| <= (4 n_terms + 2) u M with M = sum |terms|, u = 2^-24;
//  - every x86 table agrees with ref within twice that bound (the integer parts are exact);
//  - on arm64, the NEON and (where the CPU has it) dotprod kernels do too, on the shapes above
//    and on random odd shapes (rows not a multiple of 16, Q5/Q5M columns not a multiple of 32,
//    partial panel ranges), stay exact at the int16 limits of the NEON tier, and give the same
//    bits as each other and for a token alone or among others;
//  - the SIMD kernels of both architectures give the same bits on the same inputs (hashes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "convert/pack.h"
#include "convert/source_model.h"
#include "core/f16.h"
#include "kernels/dequant.h"
#include "kernels/kernels.h"
#include "kernels/panel_quants.h"
#include "model/weight_format.h"
#include "support/test_support.h"

#if defined(KEEL_HAVE_ARM64)
#include "kernels/arm64/arm64_tables.h"
#include "kernels/kquant_kernels.h"
#endif

namespace keel {
namespace {

using convert::SrcType;
using fb::DType;
constexpr double kU = 1.0 / 16777216.0;

struct AlignedBytes {
  explicit AlignedBytes(uint64_t n) : size(n), storage(n + 64, 0) {}
  uint8_t* data() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
    return storage.data() + ((64 - p % 64) % 64);
  }
  uint64_t size;
  std::vector<uint8_t> storage;
};

const DType kWide[] = {DType::Q5, DType::Q5M, DType::Q4K, DType::Q5K, DType::Q6K};

SrcType src_of(DType dt) {
  switch (dt) {
    case DType::Q5: return SrcType::Q5_0;
    case DType::Q5M: return SrcType::Q5_1;
    case DType::Q4K: return SrcType::Q4_K;
    case DType::Q5K: return SrcType::Q5_K;
    default: return SrcType::Q6_K;
  }
}

bool wide_src(SrcType s, DType& dt) {
  for (DType d : kWide)
    if (src_of(d) == s) return dt = d, true;
  return false;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h);
  p[1] = uint8_t(h >> 8);
}

// Random GGUF blocks: every quant and scale byte random, f16 fields set to sane magnitudes.
std::vector<uint8_t> raw_blocks(SrcType st, uint32_t rows, uint32_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const uint64_t n_blocks = uint64_t(rows) * cols / convert::block_elems(st);
  const uint64_t bb = convert::encoded_bytes(st, convert::block_elems(st));
  std::vector<uint8_t> src(n_blocks * bb);
  for (auto& b : src) b = uint8_t(rng());
  for (uint64_t k = 0; k < n_blocks; ++k) {
    uint8_t* b = src.data() + k * bb;
    if (st == SrcType::Q6_K) {
      put_f16(b + 208, scale(rng) * 0.01f);
    } else {
      put_f16(b, scale(rng) * (st == SrcType::Q5_0 || st == SrcType::Q5_1 ? 1.0f : 0.02f));
      if (st != SrcType::Q5_0) put_f16(b + 2, scale(rng) * (st == SrcType::Q5_1 ? 8.0f : 0.1f));
    }
  }
  return src;
}

std::shared_ptr<AlignedBytes> pack(DType dt, const std::vector<uint8_t>& src, uint32_t rows, uint32_t cols) {
  auto out = std::make_shared<AlignedBytes>(tensor_bytes(dt, rows, cols));
  std::string err;
  EXPECT_TRUE(
      convert::pack_from_ggml_blocks(src_of(dt), src.data(), src.size(), rows, cols, dt, out->data(), out->size, err))
      << err;
  return out;
}

uint32_t bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

// ---- lossless ----

TEST(KquantPack, GoldenTensorsDecodeBitForBitAsGguf) {
  const auto path = test::require_file(test::quant_blocks_path("quant_blocks.gguf"));
  const auto bin = test::read_bytes(test::require_file(test::quant_blocks_path("quant_blocks.expected.bin")));
  std::string error;
  auto m = convert::read_gguf(path, error);
  ASSERT_TRUE(m.has_value()) << error;
  const auto index =
      nlohmann::json::parse(test::read_bytes(test::require_file(test::quant_blocks_path("quant_blocks.index.json"))));
  int checked[5] = {};
  for (size_t k = 0; k < m->tensors.size(); ++k) {
    const convert::SourceTensor& t = m->tensors[k];
    DType dt;
    if (!wide_src(t.type, dt)) continue;
    const uint32_t rows = t.shape.size() == 1 ? 1 : uint32_t(t.shape[0]);
    const uint32_t cols = uint32_t(t.shape.back());
    std::vector<uint8_t> raw;
    ASSERT_TRUE(t.read(raw, error)) << error;
    const auto packed = pack(dt, raw, rows, cols);
    const uint64_t first = index["tensors"][k]["first"].get<uint64_t>();
    std::vector<float> row(cols);
    for (uint32_t r = 0; r < rows; ++r) {
      dequantize_row(dt, packed->data(), rows, cols, r, row.data());
      for (uint32_t c = 0; c < cols; ++c) {
        uint32_t want;
        memcpy(&want, bin.data() + (first + uint64_t(r) * cols + c) * 4, 4);
        ASSERT_EQ(bits(row[c]), want) << t.name << " row " << r << " col " << c;
      }
    }
    checked[int(dt) - int(DType::Q5)]++;
  }
  for (int i = 0; i < 5; ++i) EXPECT_GT(checked[i], 0) << fb::EnumNameDType(kWide[i]) << " not in the golden file";
}

TEST(KquantPack, RandomBlocksDecodeAsTheGgmlDecoder) {
  std::mt19937 rng(5);
  for (DType dt : kWide)
    for (uint32_t rows : {1u, 16u, 17u, 40u})
      for (uint32_t cols : {256u, 512u, 2048u}) {
        SCOPED_TRACE(std::string(fb::EnumNameDType(dt)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
        const auto raw = raw_blocks(src_of(dt), rows, cols, rng);
        std::vector<float> want(uint64_t(rows) * cols);
        ASSERT_TRUE(convert::dequantize(src_of(dt), raw.data(), raw.size(), want.data(), want.size()));
        const auto packed = pack(dt, raw, rows, cols);
        std::vector<float> row(cols);
        for (uint32_t r = 0; r < rows; ++r) {
          dequantize_row(dt, packed->data(), rows, cols, r, row.data());
          for (uint32_t c = 0; c < cols; ++c)
            ASSERT_EQ(bits(row[c]), bits(want[uint64_t(r) * cols + c])) << "row " << r << " col " << c;
        }
      }
}

TEST(KquantPack, RefusesWrongShapesAndPairs) {
  std::vector<uint8_t> raw(144 * 2);
  AlignedBytes out(tensor_bytes(DType::Q4K, 1, 512));
  std::string err;
  EXPECT_FALSE(convert::pack_from_ggml_blocks(SrcType::Q4_K, raw.data(), raw.size(), 1, 512, DType::Q6K, out.data(),
                                              out.size, err));
  EXPECT_NE(err.find("Q4K"), std::string::npos) << err;
  EXPECT_FALSE(convert::pack_from_ggml_blocks(SrcType::Q4_K, raw.data(), raw.size(), 2, 288, DType::Q4K, out.data(),
                                              out.size, err));
  EXPECT_NE(err.find("multiple of 256"), std::string::npos) << err;
  EXPECT_FALSE(convert::pack_from_ggml_blocks(SrcType::Q4_K, raw.data(), raw.size() - 1, 1, 512, DType::Q4K, out.data(),
                                              out.size, err));
  EXPECT_NE(err.find("should be 288 bytes"), std::string::npos) << err;
}

// ---- kernels ----

std::vector<ActBlock> acts(uint32_t n_tokens, uint32_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-4.0f, 4.0f);
  std::vector<float> x(uint64_t(n_tokens) * cols);
  for (uint64_t c = 0; c < x.size(); c += 32) {
    const float s = std::exp2(mag(rng));
    for (uint64_t i = c; i < c + 32 && i < x.size(); ++i) x[i] = nd(rng) * s;
  }
  for (uint32_t i = 0; i < 32 && i < cols; ++i) x[i] = 0.0f;  // an all-zero block
  std::vector<ActBlock> a(uint64_t(n_tokens) * act_blocks(cols));
  for (uint32_t t = 0; t < n_tokens; ++t)
    kernels_ref().quantize_act(&x[uint64_t(t) * cols], cols, &a[uint64_t(t) * act_blocks(cols)]);
  return a;
}

// Exact y and M from the packed integers and parameters, in double.
void exact(DType dt, const uint8_t* w, uint32_t rows, uint32_t cols, const std::vector<ActBlock>& a, uint32_t n_tokens,
           std::vector<double>& y, std::vector<double>& mag) {
  const uint32_t nb = act_blocks(cols);
  y.assign(uint64_t(n_tokens) * rows, 0.0);
  mag = y;
  for (uint32_t r = 0; r < rows; ++r) {
    const uint8_t* panel = w + (r / kPanelRows) * panel_bytes(dt, cols);
    for (uint32_t b = 0; b < nb; ++b) {
      uint8_t u[32];
      unpack_block_u(dt, panel + panel_quants_offset(dt, cols) + uint64_t(b) * quant_block_bytes(dt), r % 16, u);
      const BlockParams p = block_params(dt, panel, cols, b, r % 16);
      for (uint32_t t = 0; t < n_tokens; ++t) {
        const ActBlock& ab = a[uint64_t(t) * nb + b];
        double terms[2] = {0, 0};
        int64_t isum = 0, h[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {
          isum += int64_t(u[i]) * ab.q[i];
          h[i / 16] += (int64_t(u[i]) - 32) * ab.q[i];
        }
        if (dt == DType::Q5) terms[0] = double(p.d) * ab.d * double(isum - 16 * int64_t(ab.sum));
        if (dt == DType::Q5M) {
          terms[0] = double(p.d) * ab.d * double(isum);
          terms[1] = double(p.m) * ab.d * double(ab.sum);
        }
        if (dt == DType::Q4K || dt == DType::Q5K) {
          terms[0] = double(p.d) * p.sc[0] * ab.d * double(isum);
          terms[1] = -double(p.m) * p.mn * ab.d * double(ab.sum);
        }
        if (dt == DType::Q6K) terms[0] = double(p.d) * ab.d * double(p.sc[0] * h[0] + p.sc[1] * h[1]);
        y[uint64_t(t) * rows + r] += terms[0] + terms[1];
        mag[uint64_t(t) * rows + r] += std::fabs(terms[0]) + std::fabs(terms[1]);
      }
    }
  }
}

uint32_t n_terms(DType dt, uint32_t cols) { return act_blocks(cols) * ((dt == DType::Q5 || dt == DType::Q6K) ? 1 : 2); }

using MatmulFn = void (*)(const WeightView& w, const ActBlock* x, uint32_t n_tokens, float* y, uint32_t y_stride,
                          uint32_t panel_begin, uint32_t panel_end);

std::vector<float> run(MatmulFn matmul, DType dt, const uint8_t* w, uint32_t rows, uint32_t cols,
                       const std::vector<ActBlock>& a, uint32_t n_tokens) {
  const uint32_t stride = rows + 3;  // a gap the kernel must not write
  std::vector<float> y(uint64_t(n_tokens) * stride, -12345.0f);
  const WeightView v{dt, rows, cols, w};
  // Two calls over a split panel range, as workers do.
  const uint32_t mid = panel_count(rows) / 2;
  matmul(v, a.data(), n_tokens, y.data(), stride, 0, mid);
  matmul(v, a.data(), n_tokens, y.data(), stride, mid, panel_count(rows));
  for (uint32_t t = 0; t < n_tokens; ++t)
    for (uint32_t r = rows; r < stride; ++r) EXPECT_EQ(y[uint64_t(t) * stride + r], -12345.0f);
  std::vector<float> out(uint64_t(n_tokens) * rows);
  for (uint32_t t = 0; t < n_tokens; ++t)
    for (uint32_t r = 0; r < rows; ++r) out[uint64_t(t) * rows + r] = y[uint64_t(t) * stride + r];
  return out;
}

std::vector<float> run(const MatmulKernels& k, DType dt, const uint8_t* w, uint32_t rows, uint32_t cols,
                       const std::vector<ActBlock>& a, uint32_t n_tokens) {
  return run(k.matmul, dt, w, rows, cols, a, n_tokens);
}

void check_fn(const char* name, MatmulFn matmul, bool against_exact) {
  std::mt19937 rng(11);
  for (DType dt : kWide)
    for (uint32_t rows : {1u, 16u, 17u, 33u})
      for (uint32_t cols : {256u, 512u, 2048u})
        for (uint32_t n_tokens : {1u, 2u, 3u, 4u, 5u, 9u}) {
          SCOPED_TRACE(std::string(name) + " " + fb::EnumNameDType(dt) + " " + std::to_string(rows) + "x" +
                       std::to_string(cols) + " tokens " + std::to_string(n_tokens));
          const auto raw = raw_blocks(src_of(dt), rows, cols, rng);
          const auto packed = pack(dt, raw, rows, cols);
          const auto a = acts(n_tokens, cols, rng);
          std::vector<double> ye, mag;
          exact(dt, packed->data(), rows, cols, a, n_tokens, ye, mag);
          const double per = (4.0 * n_terms(dt, cols) + 2) * kU;
          const std::vector<float> y = run(matmul, dt, packed->data(), rows, cols, a, n_tokens);
          if (against_exact) {
            for (uint64_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i] - ye[i]), per * mag[i] + 1e-38) << i;
          } else {
            const std::vector<float> yr = run(kernels_ref(), dt, packed->data(), rows, cols, a, n_tokens);
            for (uint64_t i = 0; i < y.size(); ++i)
              ASSERT_LE(std::fabs(double(y[i]) - yr[i]), 2 * per * mag[i] + 1e-38) << i;
          }
        }
}

void check_table(const MatmulKernels& k, bool against_exact) { check_fn(k.name, k.matmul, against_exact); }

TEST(KquantKernels, RefIsExactUpToF32Rounding) { check_table(kernels_ref(), true); }

#if defined(KEEL_HAVE_X86)

TEST(KquantKernels, Avx2MatchesRef) {
  const MatmulKernels* k = kernels_x86_avx2();
  if (k == nullptr) GTEST_SKIP() << "CPU lacks AVX2 + FMA + F16C";
  check_table(*k, false);
}

TEST(KquantKernels, Avx512TableMatchesRef) {
  const MatmulKernels* k = kernels_x86_avx512();
  if (k == nullptr) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_table(*k, false);
}

// A token's outputs do not depend on the kernel or on the tokens beside it (batched decode
// relies on it): AVX-512 over 9 tokens, AVX2 over 9, and AVX2 one token at a time agree bit for bit.
TEST(KquantKernels, TokensGiveTheSameBitsAloneOrTogether) {
  const MatmulKernels* k512 = kernels_x86_avx512();
  const MatmulKernels* k2 = kernels_x86_avx2();
  if (k512 == nullptr || k2 == nullptr) GTEST_SKIP() << "needs AVX2 and AVX-512 VNNI";
  std::mt19937 rng(23);
  const uint32_t rows = 33, cols = 512, n_tokens = 9;
  for (DType dt : kWide) {
    SCOPED_TRACE(fb::EnumNameDType(dt));
    const auto raw = raw_blocks(src_of(dt), rows, cols, rng);
    const auto packed = pack(dt, raw, rows, cols);
    const auto a = acts(n_tokens, cols, rng);
    const std::vector<float> y512 = run(*k512, dt, packed->data(), rows, cols, a, n_tokens);
    const std::vector<float> y2 = run(*k2, dt, packed->data(), rows, cols, a, n_tokens);
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const std::vector<ActBlock> one(a.begin() + t * act_blocks(cols), a.begin() + (t + 1) * act_blocks(cols));
      const std::vector<float> y1 = run(*k512, dt, packed->data(), rows, cols, one, 1);
      for (uint32_t r = 0; r < rows; ++r) {
        ASSERT_EQ(bits(y512[t * rows + r]), bits(y2[t * rows + r])) << "token " << t << " row " << r;
        ASSERT_EQ(bits(y512[t * rows + r]), bits(y1[r])) << "token " << t << " row " << r;
      }
    }
  }
}

#endif  // KEEL_HAVE_X86

// One FNV-1a hash of the output bits of every SIMD wide kernel of this build over fixed inputs
// that are the same bytes on every architecture (integers from mt19937 only: no libm, no
// floating-point distributions). The x86 and arm64 kernels perform the same f32 operations in
// the same order, so they must produce the same hashes: a model's logits do not depend on the
// CPU it runs on.
uint64_t portable_hash(MatmulFn matmul, DType dt) {
  std::mt19937 rng(43);
  const uint32_t rows = 40, cols = 768, n_tokens = 3;
  auto w = std::make_shared<AlignedBytes>(tensor_bytes(dt, rows, cols));
  for (uint64_t i = 0; i < w->size; ++i) w->data()[i] = uint8_t(rng());
  const uint32_t nb = act_blocks(cols), ns = cols / kSuperBlock;
  const uint32_t n_f16 = dt == DType::Q5 ? nb : dt == DType::Q5M ? 2 * nb : dt == DType::Q6K ? ns : 2 * ns;
  for (uint32_t p = 0; p < panel_count(rows); ++p)
    for (uint32_t i = 0; i < n_f16 * kPanelRows; ++i)
      put_f16(w->data() + p * panel_bytes(dt, cols) + 2 * i, float(int(rng() % 2001) - 1000) / 65536.0f);
  std::vector<float> x(uint64_t(n_tokens) * cols);
  for (float& v : x) v = float(int(rng() % 2001) - 1000) / 256.0f;
  std::vector<ActBlock> a(uint64_t(n_tokens) * nb);
  for (uint32_t t = 0; t < n_tokens; ++t)
    kernels_ref().quantize_act(&x[uint64_t(t) * cols], cols, &a[uint64_t(t) * nb]);
  const std::vector<float> y = run(matmul, dt, w->data(), rows, cols, a, n_tokens);
  uint64_t h = 1469598103934665603ull;
  for (float f : y) h = (h ^ bits(f)) * 1099511628211ull;
  return h;
}

// The hashes as the AVX2 kernel computes them (DType order Q5, Q5M, Q4K, Q5K, Q6K).
const uint64_t kPortableHash[5] = {0x7a82aeb94b3a1014, 0x66e1c27646ec9f90, 0x068529a4bf2b64a3, 0x67a49eadc1b7aadf,
                                   0x995c950edd9b9dfd};

void check_portable(const char* name, MatmulFn matmul) {
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(portable_hash(matmul, kWide[i]), kPortableHash[i])
        << name << " " << fb::EnumNameDType(kWide[i]) << ": 0x" << std::hex << portable_hash(matmul, kWide[i]);
}

TEST(KquantKernels, SameBitsOnEveryArchitecture) {
#if defined(KEEL_HAVE_X86)
  const MatmulKernels* k2 = kernels_x86_avx2();
  if (k2 == nullptr) GTEST_SKIP() << "CPU lacks AVX2 + FMA + F16C";
  check_portable("avx2", k2->matmul);
  if (const MatmulKernels* k512 = kernels_x86_avx512()) check_portable("avx512vnni", k512->matmul);
#elif defined(KEEL_HAVE_ARM64)
  check_portable("neon", arm64::matmul_wide_neon);
  if (arm64::cpu_has_dotprod()) check_portable("neon-dotprod", arm64::matmul_wide_dotprod);
#else
  GTEST_SKIP() << "no SIMD wide kernels in this build";
#endif
}

#if defined(KEEL_HAVE_ARM64)

struct Arm64Wide {
  const char* name;
  MatmulFn fn;
};

// The arm64 wide kernels this CPU can run: NEON always, dotprod where the CPU has SDOT.
std::vector<Arm64Wide> arm64_wide_kernels() {
  std::vector<Arm64Wide> ks = {{"neon", arm64::matmul_wide_neon}};
  if (arm64::cpu_has_dotprod()) ks.push_back({"neon-dotprod", arm64::matmul_wide_dotprod});
  return ks;
}

TEST(KquantKernels, Arm64NeonMatchesRef) { check_fn("neon", arm64::matmul_wide_neon, false); }

TEST(KquantKernels, Arm64DotprodMatchesRef) {
  if (!arm64::cpu_has_dotprod()) GTEST_SKIP() << "CPU lacks dotprod (SDOT); the NEON kernel is checked instead";
  check_fn("neon-dotprod", arm64::matmul_wide_dotprod, false);
}

// A packed tensor made directly in the panel layout (so Q5/Q5M columns need not be a multiple
// of 32 as GGUF's blocks are): every quant and u8/i8 scale byte random, f16 fields of sane
// magnitude, padding columns as docs/format.md has them (u = zero point, so with q = 0 there
// they add nothing in any kernel).
std::shared_ptr<AlignedBytes> random_panels(DType dt, uint32_t rows, uint32_t cols, std::mt19937& rng) {
  auto out = std::make_shared<AlignedBytes>(tensor_bytes(dt, rows, cols));
  uint8_t* w = out->data();
  for (uint64_t i = 0; i < out->size; ++i) w[i] = uint8_t(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const uint32_t nb = act_blocks(cols), ns = uint32_t(ceil_div(cols, kSuperBlock));
  // f16 fields of the header: (count, magnitude) in order.
  uint32_t n_f16[2] = {nb * kPanelRows, 0};
  float mag[2] = {1.0f, 8.0f};
  if (dt == DType::Q5M) n_f16[1] = nb * kPanelRows;
  if (dt == DType::Q4K || dt == DType::Q5K) n_f16[0] = n_f16[1] = ns * kPanelRows, mag[0] = 0.02f, mag[1] = 0.1f;
  if (dt == DType::Q6K) n_f16[0] = ns * kPanelRows, mag[0] = 0.01f;
  for (uint32_t p = 0; p < panel_count(rows); ++p) {
    uint8_t* panel = w + p * panel_bytes(dt, cols);
    uint8_t* f = panel;
    for (int k = 0; k < 2; ++k)
      for (uint32_t i = 0; i < n_f16[k]; ++i, f += 2) put_f16(f, scale(rng) * mag[k]);
    // Columns past `cols` in the last block: nibble and high bits of u = zero point (Q5: 16).
    for (uint32_t c = cols; c < nb * kQuantBlock; ++c) {
      uint8_t* qb = panel + panel_quants_offset(dt, cols) + uint64_t(c / 32) * quant_block_bytes(dt);
      const uint32_t i = c % 32, chunk = i / 8, h = (i % 8) / 4, j = i % 4;
      const uint8_t z = uint8_t(panel_zero_point(dt));
      for (uint32_t lane = 0; lane < kPanelRows; ++lane) {
        uint8_t& nib = qb[chunk * 64 + lane * 4 + j];
        nib = uint8_t(h ? (nib & 0x0f) | ((z & 15) << 4) : (nib & 0xf0) | (z & 15));
        if (high_bits(dt) == 1) {
          uint8_t& hb = qb[256 + lane * 4 + j];
          hb = uint8_t((hb & ~(1u << (2 * chunk + h))) | (((z >> 4) & 1u) << (2 * chunk + h)));
        }
      }
    }
  }
  return out;
}

// Random shapes and panel ranges, every wide dtype, every tier the CPU has, against ref.
TEST(KquantKernels, Arm64RandomShapesMatchRef) {
  std::mt19937 rng(29);
  for (const Arm64Wide& k : arm64_wide_kernels())
    for (int iter = 0; iter < 60; ++iter) {
      const DType dt = kWide[iter % 5];
      const uint32_t rows = 1 + rng() % 70;
      const uint32_t cols =
          is_kquant(dt) ? kSuperBlock * (1 + rng() % 5) : (iter % 3 == 0 ? 32 * (1 + rng() % 24) : 1 + rng() % 700);
      const uint32_t n_tokens = 1 + rng() % 9;
      const uint32_t np = panel_count(rows);
      const uint32_t pb = rng() % np, pe = pb + 1 + rng() % (np - pb);
      SCOPED_TRACE(std::string(k.name) + " " + fb::EnumNameDType(dt) + " " + std::to_string(rows) + "x" +
                   std::to_string(cols) + " tokens " + std::to_string(n_tokens) + " panels [" + std::to_string(pb) +
                   ", " + std::to_string(pe) + ")");
      const auto packed = random_panels(dt, rows, cols, rng);
      const auto a = acts(n_tokens, cols, rng);
      std::vector<double> ye, mag;
      exact(dt, packed->data(), rows, cols, a, n_tokens, ye, mag);
      const double per = (4.0 * n_terms(dt, cols) + 2) * kU;
      const uint32_t stride = rows + 1 + rng() % 5;
      const WeightView v{dt, rows, cols, packed->data()};
      std::vector<float> y(uint64_t(n_tokens) * stride, -12345.0f), yr = y;
      k.fn(v, a.data(), n_tokens, y.data(), stride, pb, pe);
      matmul_wide_ref(v, a.data(), n_tokens, yr.data(), stride, pb, pe);
      const uint32_t r_begin = pb * kPanelRows, r_end = std::min(pe * kPanelRows, rows);
      for (uint32_t t = 0; t < n_tokens; ++t)
        for (uint32_t r = 0; r < stride; ++r) {
          const uint64_t i = uint64_t(t) * stride + r;
          if (r < r_begin || r >= r_end) {
            ASSERT_EQ(y[i], -12345.0f) << "token " << t << " row " << r << " is outside the panels";
            continue;
          }
          const uint64_t e = uint64_t(t) * rows + r;
          ASSERT_LE(std::fabs(double(y[i]) - yr[i]), 2 * per * mag[e] + 1e-38) << "token " << t << " row " << r;
          ASSERT_LE(std::fabs(double(y[i]) - ye[e]), 2 * per * mag[e] + 1e-38) << "token " << t << " row " << r;
        }
    }
}

// The NEON tier's int16 sums reach their bounds (31496 for 5-bit u, 32004 for Q6K's halves)
// when every u is at its maximum and every q is +-127: all quant bytes 0xff, activations of one
// sign, or of signs alternating per 4 columns.
TEST(KquantKernels, Arm64ExtremeQuantsStayExact) {
  std::mt19937 rng(31);
  const uint32_t rows = 20, cols = 512, n_tokens = 3;
  std::vector<float> x(uint64_t(n_tokens) * cols);
  for (uint32_t c = 0; c < cols; ++c) {
    x[c] = 1.0f;
    x[cols + c] = -1.0f;
    x[2 * cols + c] = (c / 4) % 2 ? 1.0f : -1.0f;
  }
  std::vector<ActBlock> a(uint64_t(n_tokens) * act_blocks(cols));
  for (uint32_t t = 0; t < n_tokens; ++t)
    kernels_ref().quantize_act(&x[uint64_t(t) * cols], cols, &a[uint64_t(t) * act_blocks(cols)]);
  ASSERT_EQ(a[0].q[0], 127);
  ASSERT_EQ(a[act_blocks(cols)].q[0], -127);
  for (const Arm64Wide& k : arm64_wide_kernels())
    for (DType dt : kWide) {
      SCOPED_TRACE(std::string(k.name) + " " + fb::EnumNameDType(dt));
      auto packed = random_panels(dt, rows, cols, rng);
      const uint64_t qoff = panel_quants_offset(dt, cols);
      for (uint32_t p = 0; p < panel_count(rows); ++p) {
        uint8_t* panel = packed->data() + p * panel_bytes(dt, cols);
        memset(panel + qoff, 0xff, act_blocks(cols) * quant_block_bytes(dt));
      }
      std::vector<double> ye, mag;
      exact(dt, packed->data(), rows, cols, a, n_tokens, ye, mag);
      const double per = (4.0 * n_terms(dt, cols) + 2) * kU;
      const std::vector<float> y = run(k.fn, dt, packed->data(), rows, cols, a, n_tokens);
      for (uint64_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i] - ye[i]), 2 * per * mag[i] + 1e-38) << i;
    }
}

// As on x86: a token's outputs do not depend on the tier nor on the tokens beside it: each tier
// over 11 tokens (full tiles of 2 or 3 tokens and a partial one) and one token at a time agree
// with the NEON kernel over 11 tokens bit for bit.
TEST(KquantKernels, Arm64TokensGiveTheSameBitsAloneOrTogether) {
  std::mt19937 rng(37);
  const uint32_t rows = 33, cols = 512, n_tokens = 11;
  for (DType dt : kWide) {
    SCOPED_TRACE(fb::EnumNameDType(dt));
    const auto packed = random_panels(dt, rows, cols, rng);
    const auto a = acts(n_tokens, cols, rng);
    const std::vector<float> want = run(arm64::matmul_wide_neon, dt, packed->data(), rows, cols, a, n_tokens);
    for (const Arm64Wide& k : arm64_wide_kernels()) {
      SCOPED_TRACE(k.name);
      const std::vector<float> y = run(k.fn, dt, packed->data(), rows, cols, a, n_tokens);
      for (uint32_t t = 0; t < n_tokens; ++t) {
        const std::vector<ActBlock> one(a.begin() + t * act_blocks(cols), a.begin() + (t + 1) * act_blocks(cols));
        const std::vector<float> y1 = run(k.fn, dt, packed->data(), rows, cols, one, 1);
        for (uint32_t r = 0; r < rows; ++r) {
          ASSERT_EQ(bits(y[t * rows + r]), bits(want[t * rows + r])) << "token " << t << " row " << r;
          ASSERT_EQ(bits(y1[r]), bits(want[t * rows + r])) << "token " << t << " row " << r;
        }
      }
    }
  }
}

#endif  // KEEL_HAVE_ARM64

}  // namespace
}  // namespace keel
