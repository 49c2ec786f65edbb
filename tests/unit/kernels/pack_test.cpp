// Packing from GGUF blocks is lossless, quantization follows its stated rule, and the
// Panel16x4 bytes are where docs/format.md says (read here with an independent decoder).
#include "convert/pack.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/f16.h"
#include "kernels/dequant.h"
#include "model/weight_format.h"

namespace keel::convert {
namespace {

using fb::DType;

uint32_t bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

void put_u16(std::vector<uint8_t>& v, uint16_t x) {
  v.push_back(uint8_t(x & 0xff));
  v.push_back(uint8_t(x >> 8));
}

uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// Independent reading of the Panel16x4 layout of docs/format.md.
struct PanelReader {
  DType dt;
  uint32_t cols;
  const uint8_t* t;
  uint32_t nb() const { return (cols + 31) / 32; }
  uint64_t panel_size() const {
    const uint64_t head = uint64_t(nb()) * 32 * (dt == DType::Q4M ? 2 : 1);
    return (head + 63) / 64 * 64 + uint64_t(nb()) * (dt == DType::Q8 ? 512 : 256);
  }
  const uint8_t* panel(uint32_t row) const { return t + (row / 16) * panel_size(); }
  uint16_t scale(uint32_t row, uint32_t b) const { return get_u16(panel(row) + (b * 16 + row % 16) * 2); }
  uint16_t min(uint32_t row, uint32_t b) const {
    return get_u16(panel(row) + uint64_t(nb()) * 32 + (b * 16 + row % 16) * 2);
  }
  uint8_t u(uint32_t row, uint32_t col) const {
    const uint64_t head = uint64_t(nb()) * 32 * (dt == DType::Q4M ? 2 : 1);
    const uint8_t* q = panel(row) + (head + 63) / 64 * 64;
    const uint32_t b = col / 32, k = col % 32, lane = row % 16;
    if (dt == DType::Q8) return q[b * 512 + (k / 4) * 64 + lane * 4 + k % 4];
    const uint32_t c = k / 8, j = k % 8;
    const uint8_t byte = q[b * 256 + c * 64 + lane * 4 + (j % 4)];
    return j < 4 ? byte & 15 : byte >> 4;
  }
};

// Random f16 scale bits: finite, any sign, normal or subnormal, sometimes zero.
uint16_t random_f16(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 9);
  const int kind = pick(rng);
  if (kind == 0) return 0;
  if (kind == 1) return uint16_t(std::uniform_int_distribution<int>(1, 0x3ff)(rng));  // subnormal
  const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
  const uint16_t exp = uint16_t(std::uniform_int_distribution<int>(1, 30)(rng));
  return uint16_t(sign | (exp << 10) | (rng() & 0x3ff));
}

struct GgmlTensor {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // GGUF's own dequantization: Q8_0 q*d, Q4_0 (n-8)*d, Q4_1 n*d+m
};

GgmlTensor make_ggml(SrcType t, uint32_t rows, uint32_t cols, std::mt19937& rng) {
  GgmlTensor g;
  g.values.resize(uint64_t(rows) * cols);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t b = 0; b < cols / 32; ++b) {
      const uint16_t d16 = random_f16(rng);
      const float d = f16_to_f32(d16);
      put_u16(g.bytes, d16);
      float* v = &g.values[uint64_t(r) * cols + b * 32];
      if (t == SrcType::Q8_0) {
        for (int i = 0; i < 32; ++i) {
          const int8_t q = int8_t(rng() & 0xff);  // includes -128, which GGUF can hold
          g.bytes.push_back(uint8_t(q));
          v[i] = float(q) * d;
        }
      } else {
        float m = 0.0f;
        if (t == SrcType::Q4_1) {
          const uint16_t m16 = random_f16(rng);
          m = f16_to_f32(m16);
          put_u16(g.bytes, m16);
        }
        for (int i = 0; i < 16; ++i) {
          const uint8_t lo = rng() & 15, hi = rng() & 15;
          g.bytes.push_back(uint8_t(lo | (hi << 4)));
          if (t == SrcType::Q4_0) {
            v[i] = float(int(lo) - 8) * d;
            v[i + 16] = float(int(hi) - 8) * d;
          } else {
            v[i] = float(lo) * d + m;
            v[i + 16] = float(hi) * d + m;
          }
        }
      }
    }
  return g;
}

DType dst_of(SrcType t) { return t == SrcType::Q8_0 ? DType::Q8 : t == SrcType::Q4_0 ? DType::Q4 : DType::Q4M; }

void check_lossless(SrcType t) {
  std::mt19937 rng(1234 + int(t));
  const DType dt = dst_of(t);
  const uint8_t z = dt == DType::Q8 ? 128 : dt == DType::Q4 ? 8 : 0;
  for (uint32_t rows : {1u, 7u, 15u, 16u, 17u, 33u, 50u}) {
    for (uint32_t cols : {32u, 64u, 96u, 576u}) {
      SCOPED_TRACE(std::string(src_type_name(t)) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols));
      const GgmlTensor g = make_ggml(t, rows, cols, rng);
      std::vector<uint8_t> out(tensor_bytes(dt, rows, cols), 0xcd);
      std::string err;
      ASSERT_TRUE(pack_from_ggml_blocks(t, g.bytes.data(), g.bytes.size(), rows, cols, dt, out.data(), out.size(), err))
          << err;
      std::vector<float> row(cols);
      for (uint32_t r = 0; r < rows; ++r) {
        dequantize_row(dt, out.data(), rows, cols, r, row.data());
        for (uint32_t c = 0; c < cols; ++c)
          ASSERT_EQ(bits(row[c]), bits(g.values[uint64_t(r) * cols + c]))
              << "row " << r << " col " << c << ": " << row[c] << " vs " << g.values[uint64_t(r) * cols + c];
      }
      // Rows padding the last panel: scale 0, min 0, u = zero point.
      const PanelReader pr{dt, cols, out.data()};
      for (uint32_t r = rows; r < (rows + 15) / 16 * 16; ++r)
        for (uint32_t b = 0; b < cols / 32; ++b) {
          EXPECT_EQ(pr.scale(r, b), 0);
          if (dt == DType::Q4M) {
            EXPECT_EQ(pr.min(r, b), 0);
          }
          for (uint32_t k = 0; k < 32; ++k) ASSERT_EQ(pr.u(r, b * 32 + k), z) << "padding row " << r;
        }
    }
  }
}

TEST(PackFromGgml, Q8_0IsLossless) { check_lossless(SrcType::Q8_0); }
TEST(PackFromGgml, Q4_0IsLossless) { check_lossless(SrcType::Q4_0); }
TEST(PackFromGgml, Q4_1IsLossless) { check_lossless(SrcType::Q4_1); }

TEST(PackFromGgml, StoresBiasedBytesWhereTheFormatSays) {
  // One Q8_0 row whose element k is k - 16 with d = 1: u(row 0, col k) = k - 16 + 128.
  std::vector<uint8_t> src;
  put_u16(src, 0x3c00);  // 1.0
  for (int k = 0; k < 32; ++k) src.push_back(uint8_t(int8_t(k - 16)));
  std::vector<uint8_t> out(tensor_bytes(DType::Q8, 1, 32));
  std::string err;
  ASSERT_TRUE(
      pack_from_ggml_blocks(SrcType::Q8_0, src.data(), src.size(), 1, 32, DType::Q8, out.data(), out.size(), err));
  const uint64_t qoff = 64;  // 1 block x 16 rows x 2 bytes of scales, padded to 64
  for (int k = 0; k < 32; ++k) EXPECT_EQ(out[qoff + (k / 4) * 64 + k % 4], uint8_t(k - 16 + 128)) << k;
  EXPECT_EQ(get_u16(out.data()), 0x3c00);
  EXPECT_EQ(get_u16(out.data() + 2), 0);  // lane 1 is padding
}

TEST(PackFromGgml, RejectsMismatchedInput) {
  std::mt19937 rng(7);
  const GgmlTensor g = make_ggml(SrcType::Q8_0, 4, 64, rng);
  std::vector<uint8_t> out(tensor_bytes(DType::Q8, 4, 64));
  std::string err;
  EXPECT_FALSE(pack_from_ggml_blocks(SrcType::Q8_0, g.bytes.data(), g.bytes.size(), 4, 64, DType::Q4, out.data(),
                                     out.size(), err));
  EXPECT_NE(err.find("Q8_0"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(pack_from_ggml_blocks(SrcType::Q8_0, g.bytes.data(), g.bytes.size() - 1, 4, 64, DType::Q8, out.data(),
                                     out.size(), err));
  EXPECT_NE(err.find("bytes"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(pack_from_ggml_blocks(SrcType::Q8_0, g.bytes.data(), g.bytes.size(), 4, 64, DType::Q8, out.data(),
                                     out.size() - 64, err));
  EXPECT_FALSE(err.empty());
  err.clear();
  EXPECT_FALSE(pack_from_ggml_blocks(SrcType::Q8_0, g.bytes.data(), g.bytes.size(), 8, 32 + 16, DType::Q8, out.data(),
                                     out.size(), err));
  EXPECT_NE(err.find("multiple of 32"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(pack_from_ggml_blocks(SrcType::Q4_K, g.bytes.data(), g.bytes.size(), 4, 64, DType::Q4, out.data(),
                                     out.size(), err));
  EXPECT_FALSE(err.empty());
}

std::vector<float> random_matrix(uint32_t rows, uint32_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(-6.0f, 2.0f);
  std::vector<float> m(uint64_t(rows) * cols);
  for (uint32_t r = 0; r < rows; ++r) {
    const float s = std::exp2(scale(rng));  // rows of different magnitudes
    for (uint32_t c = 0; c < cols; ++c) m[uint64_t(r) * cols + c] = nd(rng) * s;
  }
  if (!m.empty()) m[0] = 0.0f;
  if (rows > 2)  // an all-zero row and a constant row
    for (uint32_t c = 0; c < cols; ++c) {
      m[uint64_t(1) * cols + c] = 0.0f;
      m[uint64_t(2) * cols + c] = -0.75f;
    }
  return m;
}

// Checks the stated rule of quantize_pack, block by block, from the raw packed bytes.
void check_quantize_rule(DType dt) {
  std::mt19937 rng(99 + int(dt));
  for (uint32_t rows : {1u, 3u, 16u, 17u, 40u}) {
    for (uint32_t cols : {8u, 32u, 40u, 172u, 576u}) {
      SCOPED_TRACE(std::string(fb::EnumNameDType(dt)) + " rows " + std::to_string(rows) + " cols " +
                   std::to_string(cols));
      const std::vector<float> w = random_matrix(rows, cols, rng);
      std::vector<uint8_t> out(tensor_bytes(dt, rows, cols), 0xcd);
      quantize_pack(w.data(), rows, cols, dt, out.data());
      const PanelReader pr{dt, cols, out.data()};
      const uint32_t nb = (cols + 31) / 32;
      std::vector<float> deq(cols);
      for (uint32_t r = 0; r < rows; ++r) {
        dequantize_row(dt, out.data(), rows, cols, r, deq.data());
        for (uint32_t b = 0; b < nb; ++b) {
          const uint32_t n = std::min(32u, cols - b * 32);
          const float* x = &w[uint64_t(r) * cols + b * 32];
          float amax = 0, mx = 0, mn = x[0], hi = x[0];
          for (uint32_t i = 0; i < n; ++i) {
            if (std::fabs(x[i]) > amax) {
              amax = std::fabs(x[i]);
              mx = x[i];
            }
            mn = std::min(mn, x[i]);
            hi = std::max(hi, x[i]);
          }
          const uint16_t want_d = dt == DType::Q8   ? f32_to_f16(amax / 127.0f)
                                  : dt == DType::Q4 ? f32_to_f16(mx / -8.0f)
                                                    : f32_to_f16((hi - mn) / 15.0f);
          ASSERT_EQ(pr.scale(r, b), want_d) << "row " << r << " block " << b;
          const float d = f16_to_f32(want_d);
          float m = 0.0f;
          if (dt == DType::Q4M) {
            ASSERT_EQ(pr.min(r, b), f32_to_f16(mn));
            m = f16_to_f32(f32_to_f16(mn));
          }
          for (uint32_t i = 0; i < n; ++i) {
            const uint8_t u = pr.u(r, b * 32 + i);
            int want;
            if (d == 0.0f) {
              want = dt == DType::Q8 ? 128 : dt == DType::Q4 ? 8 : 0;
            } else if (dt == DType::Q8) {
              want = 128 + std::clamp(int(std::round(x[i] / d)), -127, 127);
            } else if (dt == DType::Q4) {
              want = std::clamp(int(std::floor(x[i] / d + 8.5f)), 0, 15);
            } else {
              want = std::clamp(int(std::round((x[i] - m) / d)), 0, 15);
            }
            ASSERT_EQ(int(u), want) << "row " << r << " col " << b * 32 + i << " x " << x[i];
            // Error bound: half a step (Q4: a full step where u clamps at 15), plus the f16
            // rounding of m for Q4M.
            const float err = std::fabs(deq[b * 32 + i] - x[i]);
            const float ad = std::fabs(d);
            float bound = (dt == DType::Q4 && u == 15) ? ad : 0.5f * ad;
            if (dt == DType::Q4M) bound += std::fabs(m - mn);
            bound = bound * (1.0f + 1e-5f) + 1e-30f;
            if (d != 0.0f) {
              ASSERT_LE(err, bound) << "row " << r << " col " << b * 32 + i;
            }
          }
          // Columns past the logical shape: Q8/Q4 hold the zero point, Q4M u = 0.
          for (uint32_t i = n; i < 32; ++i)
            ASSERT_EQ(pr.u(r, b * 32 + i), dt == DType::Q8 ? 128 : dt == DType::Q4 ? 8 : 0);
        }
      }
    }
  }
}

TEST(QuantizePack, Q8FollowsItsRule) { check_quantize_rule(DType::Q8); }
TEST(QuantizePack, Q4FollowsItsRule) { check_quantize_rule(DType::Q4); }
TEST(QuantizePack, Q4MFollowsItsRule) { check_quantize_rule(DType::Q4M); }

TEST(QuantizePack, RepresentableValuesRoundTripExactly) {
  std::mt19937 rng(5);
  const uint32_t rows = 19, cols = 172;
  for (DType dt : {DType::Q8, DType::Q4, DType::Q4M}) {
    SCOPED_TRACE(fb::EnumNameDType(dt));
    std::vector<float> w(uint64_t(rows) * cols);
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t b = 0; b < (cols + 31) / 32; ++b) {
        const float d = std::ldexp(1.0f, -int(rng() % 12));
        const float m = -d * float(rng() % 64);
        const uint32_t n = std::min(32u, cols - b * 32);
        for (uint32_t i = 0; i < n; ++i) {
          float v;
          if (dt == DType::Q8)
            v = d * float(int(rng() % 255) - 127);
          else if (dt == DType::Q4)
            v = d * float(int(rng() % 16) - 8);
          else
            v = d * float(rng() % 16) + m;
          w[uint64_t(r) * cols + b * 32 + i] = v;
        }
        // Pin the block's extremes so the scale comes out as exactly d.
        float* x = &w[uint64_t(r) * cols + b * 32];
        if (dt == DType::Q8) x[0] = 127 * d;
        if (dt == DType::Q4) x[0] = -8 * d;
        if (dt == DType::Q4M) {
          x[0] = m;
          x[n - 1] = 15 * d + m;
        }
      }
    std::vector<uint8_t> out(tensor_bytes(dt, rows, cols));
    quantize_pack(w.data(), rows, cols, dt, out.data());
    std::vector<float> deq(cols);
    for (uint32_t r = 0; r < rows; ++r) {
      dequantize_row(dt, out.data(), rows, cols, r, deq.data());
      for (uint32_t c = 0; c < cols; ++c) ASSERT_EQ(deq[c], w[uint64_t(r) * cols + c]) << r << "," << c;
    }
  }
}

TEST(ConvertFloat, MatchesTheScalarConversions) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const uint32_t rows = 5, cols = 37;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = nd(rng);
  x[3] = 1e-6f;    // f16 subnormal
  x[4] = 70000.f;  // f16 overflow
  x[5] = -0.0f;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(fb::EnumNameDType(dt));
    std::vector<uint8_t> out(tensor_bytes(dt, rows, cols));
    convert_float(x.data(), x.size(), dt, out.data());
    std::vector<float> row(cols);
    for (uint32_t r = 0; r < rows; ++r) {
      dequantize_row(dt, out.data(), rows, cols, r, row.data());
      for (uint32_t c = 0; c < cols; ++c) {
        const float v = x[r * cols + c];
        const float want = dt == DType::F32   ? v
                           : dt == DType::F16 ? f16_to_f32(f32_to_f16(v))
                                              : bf16_to_f32(f32_to_bf16(v));
        ASSERT_EQ(bits(row[c]), bits(want)) << r << "," << c;
      }
    }
  }
}

TEST(WeightFormat, SizesFollowTheSpec) {
  // Q8 [576, 576]: 36 panels of align64(18 * 32) + 18 * 512 bytes.
  EXPECT_EQ(tensor_bytes(DType::Q8, 576, 576), 36u * (576u + 18u * 512u));
  // Q4M [17, 172]: 2 panels, 6 blocks: align64(6 * 64) + 6 * 256.
  EXPECT_EQ(tensor_bytes(DType::Q4M, 17, 172), 2u * (384u + 1536u));
  EXPECT_EQ(tensor_bytes(DType::Q4, 1, 8), 64u + 256u);
  EXPECT_EQ(tensor_bytes(DType::BF16, 3, 5), 30u);
}

}  // namespace
}  // namespace keel::convert
