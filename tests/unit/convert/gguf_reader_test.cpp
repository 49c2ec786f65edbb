// GGUF reader and GGML dequantizers: real files (a tiny random llama, SmolLM2-135M Q4_1), a
// fixture covering every supported element type against gguf-py's dequantizers
// (tests/reference/make_quant_golden.py), and hostile files made by truncating or patching a
// valid one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "convert/source_model.h"
#include "support/test_support.h"

namespace keel::convert {
namespace {

using keel::test::read_bytes;
using keel::test::require_file;
using keel::test::write_bytes;

std::optional<SourceModel> read_or_fail(const std::string& path) {
  std::string error;
  auto m = read_gguf(path, error);
  EXPECT_TRUE(m.has_value()) << error;
  return m;
}

const SourceTensor* find_tensor(const SourceModel& m, const std::string& name) {
  for (const auto& t : m.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

uint64_t elems(const SourceTensor& t) {
  uint64_t n = 1;
  for (uint64_t d : t.shape) n *= d;
  return n;
}

std::vector<float> dequantized(const SourceTensor& t) {
  std::vector<uint8_t> raw;
  std::string error;
  EXPECT_TRUE(t.read(raw, error)) << t.name << ": " << error;
  EXPECT_EQ(raw.size(), t.n_bytes) << t.name;
  std::vector<float> out(elems(t));
  EXPECT_TRUE(dequantize(t.type, raw.data(), raw.size(), out.data(), out.size())) << t.name;
  return out;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// ---- (a) tiny random llama ------------------------------------------------------------------

TEST(GgufReader, TinyLlama) {
  const auto path = require_file(keel::test::shared_path("fixtures/llama-2-tiny-random.gguf"));
  ASSERT_FALSE(path.empty());
  auto m = read_or_fail(path);
  ASSERT_TRUE(m);
  const SourceHyper& h = m->hyper;
  EXPECT_EQ(h.arch_name, "llama");
  EXPECT_EQ(h.dim, 8u);
  EXPECT_EQ(h.n_layers, 1u);
  EXPECT_EQ(h.n_heads, 2u);
  EXPECT_EQ(h.n_kv_heads, 2u);
  EXPECT_EQ(h.head_dim, 4u);
  EXPECT_EQ(h.ffn_dim, 32u);
  EXPECT_EQ(h.rope_dim, 4u);
  EXPECT_EQ(h.context_length, 4096u);
  EXPECT_EQ(h.vocab_size, 32000u);
  EXPECT_EQ(h.norm_eps, 1e-5f);
  EXPECT_EQ(h.rope_theta, 10000.0f);  // freq_base absent: default
  EXPECT_EQ(h.rope_style, RopeStyle::Interleaved);
  EXPECT_EQ(h.rope_scaling, RopeScalingKind::None);
  EXPECT_FALSE(h.qkv_bias);
  EXPECT_FALSE(h.tied_output);

  struct Want {
    const char* name;
    Role role;
    int layer;
    std::vector<uint64_t> shape;
    SrcType type;
  };
  const std::vector<Want> want = {
      {"token_embd.weight", Role::TokenEmbedding, -1, {32000, 8}, SrcType::F16},
      {"blk.0.attn_q.weight", Role::Wq, 0, {8, 8}, SrcType::F16},
      {"blk.0.attn_k.weight", Role::Wk, 0, {8, 8}, SrcType::F16},
      {"blk.0.attn_v.weight", Role::Wv, 0, {8, 8}, SrcType::F16},
      {"blk.0.attn_output.weight", Role::Wo, 0, {8, 8}, SrcType::F16},
      {"blk.0.ffn_gate.weight", Role::FfnGate, 0, {32, 8}, SrcType::F16},
      {"blk.0.ffn_up.weight", Role::FfnUp, 0, {32, 8}, SrcType::F16},
      {"blk.0.ffn_down.weight", Role::FfnDown, 0, {8, 32}, SrcType::F16},
      {"blk.0.attn_norm.weight", Role::AttnNorm, 0, {8}, SrcType::F32},
      {"blk.0.ffn_norm.weight", Role::FfnNorm, 0, {8}, SrcType::F32},
      {"output_norm.weight", Role::OutputNorm, -1, {8}, SrcType::F32},
      {"output.weight", Role::Output, -1, {32000, 8}, SrcType::F16},
  };
  ASSERT_EQ(m->tensors.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const SourceTensor& t = m->tensors[k];
    EXPECT_EQ(t.name, want[k].name);
    EXPECT_EQ(t.role, want[k].role) << t.name;
    EXPECT_EQ(t.layer, want[k].layer) << t.name;
    EXPECT_EQ(t.shape, want[k].shape) << t.name;
    EXPECT_EQ(t.type, want[k].type) << t.name;
    EXPECT_EQ(t.n_bytes, elems(t) * (t.type == SrcType::F32 ? 4 : 2)) << t.name;
    const auto v = dequantized(t);
    for (float x : v) ASSERT_TRUE(std::isfinite(x)) << t.name;
  }

  const SourceTokenizer& tok = m->tokenizer;
  EXPECT_EQ(tok.kind, TokenizerKind::SentencePieceBpe);
  EXPECT_EQ(tok.pre, PreTokenizer::None);
  ASSERT_EQ(tok.tokens.size(), 32000u);
  EXPECT_EQ(tok.scores.size(), 32000u);
  EXPECT_EQ(tok.token_types.size(), 32000u);
  EXPECT_TRUE(tok.merges.empty());
  EXPECT_EQ(tok.tokens[1], "<s>");
  EXPECT_EQ(tok.tokens[2], "</s>");
  EXPECT_EQ(tok.tokens[3], "<0x00>");
  EXPECT_EQ(tok.token_types[3], 6);  // BYTE
  EXPECT_EQ(tok.bos_id, 1);
  EXPECT_EQ(tok.eos_id, 2);
  EXPECT_EQ(tok.unk_id, 0);
  EXPECT_EQ(tok.pad_id, -1);
  EXPECT_EQ(tok.im_start_id, -1);
  EXPECT_TRUE(tok.add_bos);           // default for SentencePiece
  EXPECT_TRUE(tok.add_space_prefix);  // default for SentencePiece
  EXPECT_EQ(m->source_description, "GGUF v3 (llama): llama-2-tiny-random.gguf");
}

// ---- (b) SmolLM2-135M-Instruct Q4_1 ------------------------------------------------------------

TEST(GgufReader, SmolLM2Metadata) {
  const auto path = require_file(keel::test::smollm2_gguf());
  ASSERT_FALSE(path.empty());
  auto m = read_or_fail(path);
  ASSERT_TRUE(m);
  const SourceHyper& h = m->hyper;
  EXPECT_EQ(h.arch_name, "llama");
  EXPECT_EQ(h.n_layers, 30u);
  EXPECT_EQ(h.n_heads, 9u);
  EXPECT_EQ(h.n_kv_heads, 3u);
  EXPECT_EQ(h.head_dim, 64u);
  EXPECT_EQ(h.rope_dim, 64u);
  EXPECT_EQ(h.dim, 576u);
  EXPECT_EQ(h.ffn_dim, 1536u);
  EXPECT_EQ(h.vocab_size, 49152u);
  EXPECT_EQ(h.context_length, 8192u);
  EXPECT_EQ(h.rope_theta, 100000.0f);
  EXPECT_EQ(h.rope_style, RopeStyle::Interleaved);
  EXPECT_TRUE(h.tied_output);
  EXPECT_FALSE(h.qkv_bias);
  EXPECT_EQ(m->tensors.size(), 272u);  // 2 + 30 * 9, no output.weight

  const SourceTokenizer& tok = m->tokenizer;
  EXPECT_EQ(tok.kind, TokenizerKind::ByteLevelBpe);
  EXPECT_EQ(tok.pre, PreTokenizer::SmolLM);
  EXPECT_EQ(tok.tokens.size(), 49152u);
  EXPECT_EQ(tok.merges.size(), 48900u);
  EXPECT_TRUE(tok.scores.empty());
  EXPECT_EQ(tok.token_types.size(), 49152u);
  EXPECT_EQ(tok.bos_id, 1);
  EXPECT_EQ(tok.eos_id, 2);
  EXPECT_EQ(tok.pad_id, 2);
  EXPECT_EQ(tok.unk_id, 0);
  ASSERT_GE(tok.im_start_id, 0);
  ASSERT_GE(tok.im_end_id, 0);
  EXPECT_EQ(tok.tokens[size_t(tok.im_start_id)], "<|im_start|>");
  EXPECT_EQ(tok.tokens[size_t(tok.im_end_id)], "<|im_end|>");
  EXPECT_FALSE(tok.add_bos);
  EXPECT_FALSE(tok.add_space_prefix);
  EXPECT_NE(m->chat_template.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(m->source_description, "GGUF v3 (llama): SmolLM2-135M-Instruct.Q4_1.gguf");
}

// Sums are accumulated in double here sequentially and by numpy pairwise there, so they agree
// only up to accumulation order: |Δsum| <= 1e-9 * Σ|x| and |Δsumsq| <= 1e-9 * sumsq. Any
// dequantization error (one wrong block of 32 in 28M values) is orders of magnitude larger;
// the first 8 values must match bit for bit.
TEST(GgufReader, SmolLM2DequantMatchesReference) {
  const auto path = require_file(keel::test::smollm2_gguf());
  const auto golden_path = require_file(keel::test::source_path("tests/golden/smollm2_dequant.json"));
  ASSERT_FALSE(path.empty());
  ASSERT_FALSE(golden_path.empty());
  auto m = read_or_fail(path);
  ASSERT_TRUE(m);
  const auto golden = read_json(golden_path);
  const auto& gt = golden.at("tensors");
  ASSERT_EQ(gt.size(), m->tensors.size());
  for (size_t k = 0; k < gt.size(); ++k) {
    const SourceTensor& t = m->tensors[k];
    const auto& g = gt[k];
    ASSERT_EQ(t.name, g.at("name").get<std::string>());
    EXPECT_STREQ(src_type_name(t.type), g.at("type").get<std::string>().c_str()) << t.name;
    EXPECT_EQ(t.shape, g.at("shape").get<std::vector<uint64_t>>()) << t.name;
    const auto v = dequantized(t);
    double sum = 0, sumsq = 0, sumabs = 0;
    for (float x : v) {
      sum += x;
      sumsq += double(x) * double(x);
      sumabs += std::fabs(double(x));
    }
    EXPECT_NEAR(sum, g.at("sum").get<double>(), 1e-9 * sumabs) << t.name;
    EXPECT_NEAR(sumsq, g.at("sumsq").get<double>(), 1e-9 * sumsq) << t.name;
    const auto first8 = g.at("first8").get<std::vector<double>>();
    ASSERT_EQ(first8.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(bits(v[i]), bits(float(first8[i]))) << t.name << "[" << i << "]";
    }
  }
}

// ---- (c) every element type against gguf-py --------------------------------------------------

// All types, K-quants included, are compared bit for bit: the dequantizers perform the same
// float32 operations in the same order as the reference (d * sc, dmin * m, then d1 * q - m1,
// with floating-point contraction disabled), so no tolerance is needed.
TEST(GgufReader, QuantBlocksBitExact) {
  const auto path = require_file(keel::test::quant_blocks_path("quant_blocks.gguf"));
  const auto bin_path = require_file(keel::test::quant_blocks_path("quant_blocks.expected.bin"));
  const auto index_path = require_file(keel::test::quant_blocks_path("quant_blocks.index.json"));
  ASSERT_FALSE(path.empty() || bin_path.empty() || index_path.empty());
  auto m = read_or_fail(path);
  ASSERT_TRUE(m);
  const auto bin = read_bytes(bin_path);
  const auto index = read_json(index_path).at("tensors");
  ASSERT_EQ(index.size(), m->tensors.size());
  std::map<std::string, int> types_seen;
  uint64_t total = 0;
  for (size_t k = 0; k < index.size(); ++k) {
    const auto& e = index[k];
    const SourceTensor& t = m->tensors[k];
    ASSERT_EQ(t.name, e.at("name").get<std::string>());
    EXPECT_STREQ(src_type_name(t.type), e.at("type").get<std::string>().c_str()) << t.name;
    EXPECT_EQ(t.shape, e.at("shape").get<std::vector<uint64_t>>()) << t.name;
    const uint64_t first = e.at("first").get<uint64_t>(), count = e.at("count").get<uint64_t>();
    ASSERT_EQ(count, elems(t)) << t.name;
    ASSERT_LE((first + count) * 4, bin.size());
    const auto v = dequantized(t);
    uint64_t mismatches = 0;
    for (uint64_t i = 0; i < count; ++i) {
      uint32_t want;
      std::memcpy(&want, bin.data() + (first + i) * 4, 4);
      if (bits(v[i]) != want && mismatches++ < 3) {
        ADD_FAILURE() << t.name << " (" << src_type_name(t.type) << ") element " << i << ": got " << v[i]
                      << " want bits " << std::hex << want;
      }
    }
    EXPECT_EQ(mismatches, 0u) << t.name;
    types_seen[src_type_name(t.type)]++;
    total += count;
  }
  EXPECT_EQ(total * 4, bin.size());
  EXPECT_EQ(types_seen.size(), 11u);  // every SrcType appears
}

TEST(GgufReader, QuantBlocksMetadata) {
  const auto path = require_file(keel::test::quant_blocks_path("quant_blocks.gguf"));
  ASSERT_FALSE(path.empty());
  auto m = read_or_fail(path);
  ASSERT_TRUE(m);
  const SourceHyper& h = m->hyper;
  EXPECT_EQ(h.dim, 256u);
  EXPECT_EQ(h.n_layers, 2u);
  EXPECT_EQ(h.n_heads, 1u);
  EXPECT_EQ(h.head_dim, 4u);  // attention.key_length, not dim / n_heads
  EXPECT_EQ(h.vocab_size, 5u);
  EXPECT_TRUE(h.qkv_bias);
  EXPECT_FALSE(h.tied_output);
  const SourceTensor* bk = find_tensor(*m, "blk.1.attn_k.bias");
  ASSERT_NE(bk, nullptr);
  EXPECT_EQ(bk->role, Role::Bk);
  EXPECT_EQ(bk->layer, 1);
  const SourceTokenizer& tok = m->tokenizer;
  EXPECT_EQ(tok.kind, TokenizerKind::ByteLevelBpe);
  EXPECT_EQ(tok.pre, PreTokenizer::Gpt2);
  EXPECT_EQ(tok.merges, std::vector<std::string>{"a b"});
  EXPECT_EQ(tok.im_start_id, 3);
  EXPECT_EQ(tok.im_end_id, 4);
  EXPECT_EQ(tok.bos_id, 0);
  EXPECT_EQ(tok.eos_id, 4);
  EXPECT_FALSE(tok.add_bos);           // default for gpt2
  EXPECT_FALSE(tok.add_space_prefix);  // default for gpt2
}

TEST(GgmlDequant, SizesAndArgumentChecks) {
  EXPECT_EQ(block_elems(SrcType::F32), 1u);
  EXPECT_EQ(block_elems(SrcType::Q4_1), 32u);
  EXPECT_EQ(block_elems(SrcType::Q6_K), 256u);
  EXPECT_EQ(encoded_bytes(SrcType::F16, 3), 6u);
  EXPECT_EQ(encoded_bytes(SrcType::Q8_0, 64), 68u);
  EXPECT_EQ(encoded_bytes(SrcType::Q4_0, 32), 18u);
  EXPECT_EQ(encoded_bytes(SrcType::Q4_1, 32), 20u);
  EXPECT_EQ(encoded_bytes(SrcType::Q5_0, 32), 22u);
  EXPECT_EQ(encoded_bytes(SrcType::Q5_1, 32), 24u);
  EXPECT_EQ(encoded_bytes(SrcType::Q4_K, 256), 144u);
  EXPECT_EQ(encoded_bytes(SrcType::Q5_K, 256), 176u);
  EXPECT_EQ(encoded_bytes(SrcType::Q6_K, 512), 420u);
  EXPECT_EQ(encoded_bytes(SrcType::Q4_K, 255), 0u);
  EXPECT_EQ(encoded_bytes(SrcType::F32, ~0ull), 0u);  // overflow
  std::vector<uint8_t> src(18, 0);
  std::vector<float> dst(32, 1.0f);
  EXPECT_FALSE(dequantize(SrcType::Q4_0, src.data(), 17, dst.data(), 32));
  EXPECT_FALSE(dequantize(SrcType::Q4_0, src.data(), 18, dst.data(), 31));
  EXPECT_TRUE(dequantize(SrcType::Q4_0, src.data(), 18, dst.data(), 32));
  EXPECT_EQ(dst[0], 0.0f);
}

// ---- (d) hostile inputs ---------------------------------------------------------------------

class GgufHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = require_file(keel::test::quant_blocks_path("quant_blocks.gguf"));
    ASSERT_FALSE(path.empty());
    base_ = read_bytes(path);
    ASSERT_GT(base_.size(), 1000u);
  }

  // Offset of the first occurrence of `s` in the base file.
  size_t find(const std::string& s) const {
    auto it = std::search(base_.begin(), base_.end(), s.begin(), s.end());
    EXPECT_NE(it, base_.end()) << s;
    return size_t(it - base_.begin());
  }

  static void put_u32(std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(&b[off], &v, 4); }
  static void put_u64(std::vector<uint8_t>& b, size_t off, uint64_t v) { std::memcpy(&b[off], &v, 8); }
  static uint64_t get_u64(const std::vector<uint8_t>& b, size_t off) {
    uint64_t v;
    std::memcpy(&v, &b[off], 8);
    return v;
  }

  // Writes `bytes` to a temporary file and returns read_gguf's error ("" if it succeeded).
  std::string error_for(const std::vector<uint8_t>& bytes, const std::string& tag = "hostile") {
    const std::string path = keel::test::tmp_path("gguf_" + tag + ".gguf");
    write_bytes(path, bytes);
    std::string error;
    auto m = read_gguf(path, error);
    if (m) return "";
    EXPECT_FALSE(error.empty());
    return error;
  }

  void expect_error(const std::vector<uint8_t>& bytes, const std::string& substring) {
    const std::string e = error_for(bytes);
    EXPECT_NE(e.find(substring), std::string::npos)
        << "expected an error containing \"" << substring << "\", got: \"" << e << "\"";
  }

  // Byte offsets inside tensor info of `name`: n_dims, ne[0], type (for a 2-D tensor), offset.
  struct InfoFields {
    size_t n_dims, ne0, type, offset;
  };
  InfoFields info_fields(const std::string& name, int n_dims) const {
    const size_t n = find(name) + name.size();
    return {n, n + 4, n + 4 + 8 * size_t(n_dims), n + 8 + 8 * size_t(n_dims)};
  }

  // Start of the data section: the end of the last tensor info, aligned to 32.
  size_t data_start() const {
    const size_t end = info_fields("blk.1.ffn_down.weight", 2).offset + 8;
    return (end + 31) / 32 * 32;
  }

  std::vector<uint8_t> base_;
};

TEST_F(GgufHostile, BaseFileIsValid) { EXPECT_EQ(error_for(base_), ""); }

TEST_F(GgufHostile, MissingEmptyAndDirectory) {
  std::string error;
  EXPECT_FALSE(read_gguf(keel::test::tmp_path("does_not_exist.gguf"), error));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
  EXPECT_FALSE(read_gguf(keel::test::tmp_path(""), error));
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;
  expect_error({}, "file truncated: magic");
}

TEST_F(GgufHostile, WrongMagic) {
  auto b = base_;
  b[0] = 'X';
  expect_error(b, "not a GGUF file");
}

TEST_F(GgufHostile, Versions) {
  auto b = base_;
  put_u32(b, 4, 1);
  expect_error(b, "GGUF version 1 is not supported");
  put_u32(b, 4, 4);
  expect_error(b, "unsupported GGUF version 4");
  put_u32(b, 4, 0x03000000);
  expect_error(b, "big-endian");
  put_u32(b, 4, 2);  // v2 has the same layout as v3
  EXPECT_EQ(error_for(b), "");
}

TEST_F(GgufHostile, TruncatedEverywhere) {
  // Cut points: every byte of the header, metadata and tensor infos, then through the data.
  const size_t infos = find("token_embd.weight") - 8;
  const size_t data = data_start();
  std::vector<size_t> cuts;
  for (size_t n = 0; n < data + 100; ++n) cuts.push_back(n);
  for (size_t n = data + 100; n < base_.size(); n += 97) cuts.push_back(n);
  cuts.push_back(base_.size() - 1);
  for (size_t n : cuts) {
    std::vector<uint8_t> b(base_.begin(), base_.begin() + std::ptrdiff_t(n));
    const std::string e = error_for(b, "trunc");
    ASSERT_NE(e, "") << "truncated at " << n << " was accepted";
    if (n < 24) {
      EXPECT_NE(e.find("of the header"), std::string::npos) << n << ": " << e;
    } else if (n < infos) {
      EXPECT_NE(e.find("truncated"), std::string::npos) << n << ": " << e;
      EXPECT_TRUE(e.find("metadata key") != std::string::npos || e.find("count") != std::string::npos)
          << n << ": " << e;
    } else if (n < data) {
      EXPECT_NE(e.find("truncated"), std::string::npos) << n << ": " << e;
    } else {
      EXPECT_TRUE(test::mentions(e, {"past the end"})) << "cut at " << n;
    }
  }
  // A cut inside the tensor infos names the tensor being read.
  std::vector<uint8_t> b(base_.begin(), base_.begin() + std::ptrdiff_t(infos + 8 + 17 + 6));
  const std::string e = error_for(b);
  EXPECT_TRUE(test::mentions(e, {"#0", "token_embd.weight"}));
}

TEST_F(GgufHostile, AbsurdCounts) {
  auto b = base_;
  put_u64(b, 8, 1ull << 40);
  expect_error(b, "tensor count 1099511627776 is impossible");
  b = base_;
  put_u64(b, 16, ~0ull);
  expect_error(b, "metadata key/value count 18446744073709551615 is impossible");
  // One tensor more than the file holds: the extra info runs into the data section, which does
  // not parse as a tensor info.
  b = base_;
  put_u64(b, 8, get_u64(base_, 8) + 1);
  EXPECT_NE(error_for(b), "");
}

TEST_F(GgufHostile, AbsurdStringLength) {
  auto b = base_;
  put_u64(b, 24, 1ull << 62);  // length of the first key
  expect_error(b, "string length 4611686018427387904 of key in metadata key #0");
  b = base_;
  put_u64(b, 24, 60000);  // under the key limit but past the end of the file
  expect_error(b, "file truncated: key of metadata key #0 needs 60000 bytes");
  b = base_;
  const size_t arch_value = find("general.architecture") + 20 + 4;  // after key and type
  put_u64(b, arch_value, ~0ull);
  expect_error(b, "string length 18446744073709551615 of string value in metadata key 'general.architecture'");
  b = base_;
  const size_t name_len = find("token_embd.weight") - 8;
  put_u64(b, name_len, 1ull << 33);
  expect_error(b, "of tensor name in tensor info #0 at offset");
}

TEST_F(GgufHostile, AbsurdArrayCount) {
  const size_t count_at = find("tokenizer.ggml.tokens") + 21 + 4 + 4;  // key, type, elem type
  auto b = base_;
  ASSERT_EQ(get_u64(b, count_at), 5u);
  put_u64(b, count_at, 1ull << 50);
  expect_error(b, "'tokenizer.ggml.tokens': array length 1125899906842624 of STRING");
  put_u64(b, count_at, 100000);  // below the fixed limit, above what the file can hold
  expect_error(b, "array length 100000 of STRING");
  b = base_;
  put_u32(b, count_at - 4, 77);  // element type
  expect_error(b, "array of unknown value type 77");
  b = base_;
  put_u32(b, count_at - 8, 42);  // value type
  expect_error(b, "unknown value type 42");
}

TEST_F(GgufHostile, AbsurdTensorInfo) {
  const auto f = info_fields("token_embd.weight", 2);
  auto b = base_;
  put_u32(b, f.n_dims, 5);
  expect_error(b, "'token_embd.weight' has n_dims = 5");
  put_u32(b, f.n_dims, 0);
  expect_error(b, "'token_embd.weight' has n_dims = 0");
  put_u32(b, f.n_dims, 0xffffffffu);
  expect_error(b, "n_dims = 4294967295");
  b = base_;
  put_u64(b, f.ne0, 1ull << 63);
  expect_error(b, "'token_embd.weight' has an invalid dimension 0");
  put_u64(b, f.ne0, 0);
  expect_error(b, "'token_embd.weight' has an invalid dimension 0 = 0");
  b = base_;
  put_u64(b, f.ne0 + 8, 6);  // 6 rows: shape no longer matches the vocabulary
  expect_error(b, "tensor token_embd.weight has shape [6, 256], expected [5, 256]");
}

TEST_F(GgufHostile, UnsupportedTensorType) {
  const auto f = info_fields("token_embd.weight", 2);
  auto b = base_;
  ASSERT_EQ(b[f.type], 12);  // Q4_K
  put_u32(b, f.type, 16);
  expect_error(b, "tensor token_embd.weight has type IQ2_XXS (16), supported: F32, F16, BF16");
  put_u32(b, f.type, 99);
  expect_error(b, "tensor token_embd.weight has type unknown (99)");
}

TEST_F(GgufHostile, TensorDataOutOfBounds) {
  const auto f = info_fields("blk.1.ffn_down.weight", 2);  // the last tensor
  auto b = base_;
  put_u64(b, f.offset, get_u64(base_, f.offset) + 32);
  expect_error(b, "tensor blk.1.ffn_down.weight data");
  expect_error(b, "extends past the end of the file");
  put_u64(b, f.offset, ~0ull << 5);  // aligned, and begin + offset would overflow
  expect_error(b, "extends past the end of the file");
  put_u64(b, f.offset, get_u64(base_, f.offset) + 1);
  expect_error(b, "is not a multiple of the alignment 32");
  b = base_;
  put_u64(b, f.offset, 0);  // on top of token_embd.weight
  expect_error(b, "overlap");
}

TEST_F(GgufHostile, NamesAndValues) {
  auto patch = [&](const std::string& from, const std::string& to) {
    EXPECT_EQ(from.size(), to.size());
    auto b = base_;
    std::copy(to.begin(), to.end(), b.begin() + std::ptrdiff_t(find(from)));
    return b;
  };
  expect_error(patch("token_embd.weight", "token_embx.weight"), "unknown tensor 'token_embx.weight'");
  expect_error(patch("blk.0.attn_q.bias", "rope_freqs.weight"), "rope_freqs.weight");
  expect_error(patch("blk.1.ffn_up.weight", "blk.7.ffn_up.weight"), "names layer 7 but block_count is 2");
  expect_error(patch("blk.1.ffn_up.weight", "blk.0.ffn_up.weight"), "duplicate tensor 'blk.0.ffn_up.weight'");
  expect_error(patch("blk.1.ffn_up.weight", "blk.1.ffn_up.weighx"), "unknown tensor");
  expect_error(patch("blk.1.attn_q.bias", "blk.1.attn_q.biax"), "unknown tensor");
  expect_error(patch("llama", "gemma"), "unsupported architecture 'gemma' (supported: llama, qwen2, gemma3)");
  expect_error(patch("gpt2", "bert"), "unsupported tokenizer model 'bert'");
  expect_error(patch("gpt-2", "gpt-9"), "unsupported pre-tokenizer tokenizer.ggml.pre = 'gpt-9'");
  expect_error(patch("general.architecture", "general.architectur_"), "missing metadata key 'general.architecture'");
  expect_error(patch("llama.block_count", "llama.block_counx"), "missing metadata key 'llama.block_count'");
  expect_error(patch("tokenizer.ggml.merges", "tokenizer.ggml.merge_"), "missing metadata key 'tokenizer.ggml.merges'");
  expect_error(patch("tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"), "duplicate metadata key");
  // A key of the wrong type.
  auto b = base_;
  put_u32(b, find("llama.block_count") + 17, 8);  // UINT32 -> STRING: length would be garbage
  EXPECT_NE(error_for(b), "");
  // An out-of-range special token id.
  b = base_;
  put_u32(b, find("tokenizer.ggml.eos_token_id") + 27 + 4, 5);
  expect_error(b, "tokenizer.ggml.eos_token_id = 5 is outside the vocabulary of 5 tokens");
}

// Random byte flips in the metadata and tensor infos: every outcome is a model or an error,
// never a crash (meaningful under -fsanitize=address,undefined).
// Random corruption of the header, metadata and tensor table: every file is either refused with
// a message or accepted as a model whose every tensor is consistent with its shape and type and
// reads and dequantizes in full, without reaching past the file. A crash, a silent acceptance of
// an inconsistent tensor or a read failure after acceptance each fail the test.
TEST_F(GgufHostile, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(12345);
  const size_t header_end = data_start();
  const std::string path = keel::test::tmp_path("gguf_fuzz.gguf");
  int accepted = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = base_;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % header_end;
      b[at] = (rng() % 2) ? uint8_t(rng()) : uint8_t(b[at] ^ (1u << (rng() % 8)));
    }
    write_bytes(path, b);
    std::string error;
    auto m = read_gguf(path, error);
    if (!m) {
      ++refused;
      ASSERT_FALSE(error.empty()) << "iteration " << iter << ": refused without a message";
      continue;
    }
    ++accepted;
    for (const SourceTensor& t : m->tensors) {
      SCOPED_TRACE("iteration " + std::to_string(iter) + ", tensor " + t.name);
      uint64_t n = 1;
      for (uint64_t d : t.shape) n *= d;
      ASSERT_GT(n, 0u);
      ASSERT_EQ(t.n_bytes, encoded_bytes(t.type, n)) << "size disagrees with shape and type";
      ASSERT_LE(t.n_bytes, b.size()) << "tensor larger than the file";
      std::vector<uint8_t> raw;
      std::string read_error;
      ASSERT_TRUE(t.read(raw, read_error)) << read_error;
      ASSERT_EQ(raw.size(), t.n_bytes);
      std::vector<float> values(n);
      ASSERT_TRUE(dequantize(t.type, raw.data(), raw.size(), values.data(), n));
    }
  }
  // Both outcomes occur, so both branches above were exercised.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);
  std::printf("random corruption: %d refused, %d accepted and read in full\n", refused, accepted);
}

}  // namespace
}  // namespace keel::convert
