// Source model -> .keel -> dequantized rows, compared with the source's own dequantization:
// bit-exact for kept formats (GGUF Q8_0/Q4_1/F16/F32), within the quantization bound otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "convert/keel_writer.h"
#include "convert/source_model.h"
#include "kernels/dequant.h"
#include "model/model.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

// Largest |a - b| relative to the block's absolute maximum, over blocks of 32 of every row.
struct Diff {
  size_t mismatches = 0;
  double worst_block_rel = 0;
};

Diff compare_tensor(const convert::SourceTensor& st, const Model& m) {
  Diff d;
  std::vector<uint8_t> raw;
  std::string err;
  EXPECT_TRUE(st.read(raw, err)) << err;
  const uint64_t rows = st.shape.size() == 2 ? st.shape[0] : 1, cols = st.shape.back();
  std::vector<float> want(rows * cols);
  EXPECT_TRUE(convert::dequantize(st.type, raw.data(), raw.size(), want.data(), want.size())) << st.name;
  const TensorView v = m.tensor(static_cast<fb::TensorRole>(st.role), st.layer);
  EXPECT_TRUE(v.present()) << st.name;
  if (!v.present()) return d;
  std::vector<float> got(cols);
  for (uint64_t r = 0; r < rows; ++r) {
    dequantize_row(v.dtype, v.data, v.rows, v.cols, uint32_t(r), got.data());
    for (uint64_t c0 = 0; c0 < cols; c0 += 32) {
      double amax = 0, worst = 0;
      for (uint64_t c = c0; c < std::min<uint64_t>(cols, c0 + 32); ++c) {
        const float w = want[r * cols + c], g = got[c];
        if (memcmp(&w, &g, 4) != 0) ++d.mismatches;
        amax = std::max(amax, std::fabs(double(w)));
        worst = std::max(worst, std::fabs(double(w) - double(g)));
      }
      if (amax > 0) d.worst_block_rel = std::max(d.worst_block_rel, worst / amax);
    }
  }
  return d;
}

TEST(Roundtrip, SmolLM2KeepIsBitExact) {
  const convert::SourceModel* src = test::smollm2_source();
  ASSERT_NE(src, nullptr);
  auto c = test::convert_and_load(*src, convert::QuantMode::Keep, "rt_smollm2_keep.keel");
  ASSERT_TRUE(c && c->model.loaded());
  size_t checked = 0;
  for (const auto& st : src->tensors) {
    // Every tensor of a few layers plus the embedding: all three source types are covered.
    if (st.layer > 1 && st.layer != 29) continue;
    const Diff d = compare_tensor(st, c->model);
    EXPECT_EQ(d.mismatches, 0u) << st.name << " (" << convert::src_type_name(st.type) << ")";
    ++checked;
  }
  EXPECT_GE(checked, 28u);
}

TEST(Roundtrip, TinyRandomF16KeepIsBitExact) {
  std::string err;
  auto src = convert::read_gguf(test::require_file(test::shared_path("fixtures/llama-2-tiny-random.gguf")), err);
  ASSERT_TRUE(src.has_value()) << err;
  auto c = test::convert_and_load(*src, convert::QuantMode::Keep, "rt_tiny_keep.keel");
  ASSERT_TRUE(c && c->model.loaded());
  for (const auto& st : src->tensors) EXPECT_EQ(compare_tensor(st, c->model).mismatches, 0u) << st.name;
}

TEST(Roundtrip, StoriesRequantizedWithinBound) {
  const convert::SourceModel* src = test::stories260k_source();
  ASSERT_NE(src, nullptr);
  // f32 keep: exact. q8: error <= half a quantization step (amax/254) plus f16 rounding of the
  // scale. q4 (Q4, as GGUF Q4_0: d = signed max / -8, levels d * (u - 8) for u in 0..15) covers
  // [-amax, 7/8 amax] on the side of the max, so values near -amax on the other side clamp at
  // 7/8 amax: the worst error is amax/8.
  struct Case {
    convert::QuantMode mode;
    const char* name;
    double bound;
  };
  for (const Case& k : {Case{convert::QuantMode::Keep, "rt_st_keep.keel", 0.0},
                        Case{convert::QuantMode::F16, "rt_st_f16.keel", 1.0 / 1024},
                        Case{convert::QuantMode::Q8, "rt_st_q8.keel", 1.0 / 254 * 1.01},
                        Case{convert::QuantMode::Q4, "rt_st_q4.keel", 1.0 / 8 * 1.01}}) {
    auto c = test::convert_and_load(*src, k.mode, k.name);
    ASSERT_TRUE(c && c->model.loaded());
    double worst = 0;
    for (const auto& st : src->tensors) {
      const Diff d = compare_tensor(st, c->model);
      if (k.bound == 0.0) {
        EXPECT_EQ(d.mismatches, 0u) << st.name;
      }
      worst = std::max(worst, d.worst_block_rel);
    }
    EXPECT_LE(worst, k.bound) << k.name;
  }
}

}  // namespace
}  // namespace keel
