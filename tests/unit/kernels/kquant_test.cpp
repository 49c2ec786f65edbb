// The formats kept from GGUF's 5-bit and K-quant blocks (Q5, Q5M, Q4K, Q5K, Q6K):
//  - lossless: packing a GGUF tensor and decoding a row gives the floats PyPI `gguf`'s
//    dequantize gives, bit for bit (quant_blocks.* in the build tree, made by
//    tests/reference/make_quant_golden.py), and the converter's own GGML decoder agrees on
//    many more random blocks and shapes (partial panels, several superblocks);
//  - the ref kernel is exact up to f32 rounding: each block adds n_t f32 terms (Q5, Q6K one;
//    Q5M, Q4K, Q5K two: scale and min), each rounded at most 4 times (d * sc, * d_a, * isum,
//    the add), so |y - exact| <= (4 n_terms + 2) u M with M = sum |terms|, u = 2^-24;
//  - every x86 table agrees with ref within twice that bound (the integer parts are exact).
#include <gtest/gtest.h>

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

std::vector<float> run(const MatmulKernels& k, DType dt, const uint8_t* w, uint32_t rows, uint32_t cols,
                       const std::vector<ActBlock>& a, uint32_t n_tokens) {
  const uint32_t stride = rows + 3;  // a gap the kernel must not write
  std::vector<float> y(uint64_t(n_tokens) * stride, -12345.0f);
  const WeightView v{dt, rows, cols, w};
  // Two calls over a split panel range, as workers do.
  const uint32_t mid = panel_count(rows) / 2;
  k.matmul(v, a.data(), n_tokens, y.data(), stride, 0, mid);
  k.matmul(v, a.data(), n_tokens, y.data(), stride, mid, panel_count(rows));
  for (uint32_t t = 0; t < n_tokens; ++t)
    for (uint32_t r = rows; r < stride; ++r) EXPECT_EQ(y[uint64_t(t) * stride + r], -12345.0f);
  std::vector<float> out(uint64_t(n_tokens) * rows);
  for (uint32_t t = 0; t < n_tokens; ++t)
    for (uint32_t r = 0; r < rows; ++r) out[uint64_t(t) * rows + r] = y[uint64_t(t) * stride + r];
  return out;
}

void check_table(const MatmulKernels& k, bool against_exact) {
  std::mt19937 rng(11);
  for (DType dt : kWide)
    for (uint32_t rows : {1u, 16u, 17u, 33u})
      for (uint32_t cols : {256u, 512u, 2048u})
        for (uint32_t n_tokens : {1u, 2u, 3u, 4u, 5u, 9u}) {
          SCOPED_TRACE(std::string(k.name) + " " + fb::EnumNameDType(dt) + " " + std::to_string(rows) + "x" +
                       std::to_string(cols) + " tokens " + std::to_string(n_tokens));
          const auto raw = raw_blocks(src_of(dt), rows, cols, rng);
          const auto packed = pack(dt, raw, rows, cols);
          const auto a = acts(n_tokens, cols, rng);
          std::vector<double> ye, mag;
          exact(dt, packed->data(), rows, cols, a, n_tokens, ye, mag);
          const double per = (4.0 * n_terms(dt, cols) + 2) * kU;
          const std::vector<float> y = run(k, dt, packed->data(), rows, cols, a, n_tokens);
          if (against_exact) {
            for (uint64_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i] - ye[i]), per * mag[i] + 1e-38) << i;
          } else {
            const std::vector<float> yr = run(kernels_ref(), dt, packed->data(), rows, cols, a, n_tokens);
            for (uint64_t i = 0; i < y.size(); ++i)
              ASSERT_LE(std::fabs(double(y[i]) - yr[i]), 2 * per * mag[i] + 1e-38) << i;
          }
        }
}

TEST(KquantKernels, RefIsExactUpToF32Rounding) { check_table(kernels_ref(), true); }

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

}  // namespace
}  // namespace keel
