// read_llama2c on stories260K (legacy layout) against golden statistics from
// tests/reference/llama2c_golden.py, on versioned (v1 fp32, v2 int8) files written here from
// the same weights, and on malformed checkpoints and tokenizers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convert/source_model.h"
#include "support/test_support.h"

namespace keel::convert {
namespace {

using keel::test::read_bytes;
using keel::test::require_file;
using keel::test::shared_path;
using keel::test::source_path;
using keel::test::tmp_path;
using keel::test::write_bytes;

std::string checkpoint() { return require_file(shared_path("models/stories260K/stories260K.bin")); }
std::string tokenizer() { return require_file(shared_path("models/stories260K/tok512.bin")); }

std::vector<float> floats_of(const SourceTensor& t) {
  std::vector<uint8_t> bytes;
  std::string error;
  EXPECT_TRUE(t.read(bytes, error)) << t.name << ": " << error;
  EXPECT_EQ(bytes.size(), t.n_bytes) << t.name;
  std::vector<float> v(bytes.size() / 4);
  if (!v.empty()) memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

const SourceTensor* find(const SourceModel& m, const std::string& name) {
  for (const SourceTensor& t : m.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SourceModel read_ok(const std::string& ckpt, const std::string& tok) {
  std::string error;
  auto m = read_llama2c(ckpt, tok, error);
  EXPECT_TRUE(m.has_value()) << error;
  return m ? std::move(*m) : SourceModel{};
}

std::string read_error(const std::string& ckpt, const std::string& tok) {
  std::string error;
  auto m = read_llama2c(ckpt, tok, error);
  EXPECT_FALSE(m.has_value()) << "accepted " << ckpt;
  EXPECT_FALSE(error.empty());
  return error;
}

nlohmann::json golden() {
  const std::string path = require_file(source_path("tests/golden/stories260K_tensors.json"));
  const std::vector<uint8_t> bytes = read_bytes(path);
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

std::string from_hex(const std::string& hex) {
  std::string s;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) s += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return s;
}

// --- tiny writers of the llama2.c layouts ------------------------------------------------------

struct Bytes {
  std::vector<uint8_t> b;
  void i32(int32_t v) { raw(&v, 4); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u8(uint8_t v) { b.push_back(v); }
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  void f32s(const std::vector<float>& v) { raw(v.data(), v.size() * 4); }
  void pad_to(size_t n) { b.resize(n, 0); }
};

struct Weights {
  int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
  std::map<std::string, std::vector<float>> t;  // canonical name -> values
  std::vector<float>& layer(int l, const char* what) { return t["blk." + std::to_string(l) + "." + what]; }
};

Weights weights_of(const SourceModel& m) {
  Weights w;
  w.dim = int32_t(m.hyper.dim);
  w.hidden = int32_t(m.hyper.ffn_dim);
  w.n_layers = int32_t(m.hyper.n_layers);
  w.n_heads = int32_t(m.hyper.n_heads);
  w.n_kv_heads = int32_t(m.hyper.n_kv_heads);
  w.vocab = int32_t(m.hyper.vocab_size);
  w.seq_len = int32_t(m.hyper.context_length);
  for (const SourceTensor& t : m.tensors) w.t[t.name] = floats_of(t);
  return w;
}

const char* const kMatrices[] = {"attn_q.weight",   "attn_k.weight",   "attn_v.weight", "attn_output.weight",
                                 "ffn_gate.weight", "ffn_down.weight", "ffn_up.weight"};

void header7(Bytes& out, const Weights& w, int32_t vocab_field) {
  for (int32_t v : {w.dim, w.hidden, w.n_layers, w.n_heads, w.n_kv_heads, vocab_field, w.seq_len}) out.i32(v);
}

std::vector<uint8_t> write_legacy(Weights& w, bool shared) {
  Bytes out;
  header7(out, w, shared ? w.vocab : -w.vocab);
  out.f32s(w.t["token_embd.weight"]);
  for (int l = 0; l < w.n_layers; ++l) out.f32s(w.layer(l, "attn_norm.weight"));
  for (const char* k : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"})
    for (int l = 0; l < w.n_layers; ++l) out.f32s(w.layer(l, k));
  for (int l = 0; l < w.n_layers; ++l) out.f32s(w.layer(l, "ffn_norm.weight"));
  for (const char* k : {"ffn_gate.weight", "ffn_down.weight", "ffn_up.weight"})
    for (int l = 0; l < w.n_layers; ++l) out.f32s(w.layer(l, k));
  out.f32s(w.t["output_norm.weight"]);
  const int head_dim = w.dim / w.n_heads;
  out.f32s(std::vector<float>(size_t(2) * w.seq_len * (head_dim / 2), 0.5f));  // freq_cis
  if (!shared) out.f32s(w.t["output.weight"]);
  return out.b;
}

void versioned_header(Bytes& out, const Weights& w, int version, bool shared, int32_t group) {
  out.u32(0x616b3432);
  out.i32(version);
  header7(out, w, w.vocab);
  out.u8(shared ? 1 : 0);
  if (version == 2) out.i32(group);  // unaligned, right after the flag
  out.pad_to(256);
}

std::vector<std::vector<float>*> matrices_in_export_order(Weights& w, bool shared) {
  std::vector<std::vector<float>*> m{&w.t["token_embd.weight"]};
  for (const char* k : kMatrices)
    for (int l = 0; l < w.n_layers; ++l) m.push_back(&w.layer(l, k));
  if (!shared) m.push_back(&w.t["output.weight"]);
  return m;
}

void write_norms(Bytes& out, Weights& w) {
  for (int l = 0; l < w.n_layers; ++l) out.f32s(w.layer(l, "attn_norm.weight"));
  for (int l = 0; l < w.n_layers; ++l) out.f32s(w.layer(l, "ffn_norm.weight"));
  out.f32s(w.t["output_norm.weight"]);
}

std::vector<uint8_t> write_v1(Weights& w, bool shared) {
  Bytes out;
  versioned_header(out, w, 1, shared, 0);
  write_norms(out, w);
  for (auto* m : matrices_in_export_order(w, shared)) out.f32s(*m);
  return out.b;
}

// Quantizes like export.py's quantize_q80: scale = max|group| / 127, q = round(w / scale).
// Returns the file; `dequantized` receives q * scale per tensor, in export order.
std::vector<uint8_t> write_v2(Weights& w, bool shared, int32_t group, std::vector<std::vector<float>>& dequantized) {
  Bytes out;
  versioned_header(out, w, 2, shared, group);
  write_norms(out, w);
  dequantized.clear();
  for (auto* m : matrices_in_export_order(w, shared)) {
    const std::vector<float>& x = *m;
    std::vector<int8_t> q(x.size());
    std::vector<float> s(x.size() / size_t(group));
    std::vector<float> deq(x.size());
    for (size_t g = 0; g < s.size(); ++g) {
      float amax = 0;
      for (int i = 0; i < group; ++i) amax = std::max(amax, std::fabs(x[g * group + i]));
      s[g] = amax / 127.0f;
      for (int i = 0; i < group; ++i) {
        const size_t k = g * group + i;
        q[k] = s[g] == 0 ? 0 : int8_t(std::lround(x[k] / s[g]));
        deq[k] = float(q[k]) * s[g];
      }
    }
    out.raw(q.data(), q.size());
    out.f32s(s);
    dequantized.push_back(std::move(deq));
  }
  return out.b;
}

// A copy of stories260K's weights with a distinct classifier, for the unshared layouts.
Weights with_classifier(const Weights& shared) {
  Weights w = shared;
  std::vector<float> cls = w.t["token_embd.weight"];
  for (size_t i = 0; i < cls.size(); ++i) cls[i] = cls[i] * -2.0f + float(i % 7) * 0.125f;
  w.t["output.weight"] = cls;
  return w;
}

void expect_same_tensors(const SourceModel& got, Weights& want) {
  ASSERT_EQ(got.tensors.size(), want.t.size());
  for (const SourceTensor& t : got.tensors) {
    ASSERT_TRUE(want.t.count(t.name)) << t.name;
    EXPECT_EQ(floats_of(t), want.t[t.name]) << t.name;
  }
}

// --- stories260K, legacy layout ----------------------------------------------------------------

TEST(Llama2cReader, Stories260KHyperParameters) {
  SourceModel m = read_ok(checkpoint(), tokenizer());
  const SourceHyper& h = m.hyper;
  EXPECT_EQ(h.arch_name, "llama");
  EXPECT_EQ(h.dim, 64u);
  EXPECT_EQ(h.ffn_dim, 172u);
  EXPECT_EQ(h.n_layers, 5u);
  EXPECT_EQ(h.n_heads, 8u);
  EXPECT_EQ(h.n_kv_heads, 4u);
  EXPECT_EQ(h.head_dim, 8u);
  EXPECT_EQ(h.rope_dim, 8u);
  EXPECT_EQ(h.vocab_size, 512u);
  EXPECT_EQ(h.context_length, 512u);
  EXPECT_EQ(h.rope_theta, 10000.0f);
  EXPECT_EQ(h.norm_eps, 1e-5f);
  EXPECT_EQ(h.rope_style, RopeStyle::Interleaved);
  EXPECT_EQ(h.rope_scaling, RopeScalingKind::None);
  EXPECT_FALSE(h.qkv_bias);
  EXPECT_TRUE(h.tied_output);
  EXPECT_NE(m.source_description.find("stories260K.bin"), std::string::npos);
  EXPECT_FALSE(m.keep_alive.empty());
}

TEST(Llama2cReader, Stories260KTensorsMatchGolden) {
  const nlohmann::json g = golden();
  SourceModel m = read_ok(checkpoint(), tokenizer());
  const auto& gt = g.at("tensors");
  ASSERT_EQ(m.tensors.size(), gt.size());
  ASSERT_EQ(m.tensors.size(), 47u);
  EXPECT_EQ(m.tensors.front().name, "token_embd.weight");
  EXPECT_EQ(m.tensors[1].name, "blk.0.attn_norm.weight");
  EXPECT_EQ(m.tensors.back().name, "output_norm.weight");
  EXPECT_EQ(find(m, "output.weight"), nullptr);
  for (const SourceTensor& t : m.tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_TRUE(gt.contains(t.name));
    const auto& e = gt.at(t.name);
    EXPECT_EQ(t.shape, e.at("shape").get<std::vector<uint64_t>>());
    EXPECT_EQ(t.type, SrcType::F32);
    const std::vector<float> v = floats_of(t);
    ASSERT_FALSE(v.empty());
    EXPECT_EQ(double(v.front()), e.at("first").get<double>());
    EXPECT_EQ(double(v.back()), e.at("last").get<double>());
    double sum = 0;
    for (float x : v) sum += x;
    EXPECT_EQ(sum, e.at("sum").get<double>());
  }
  const SourceTensor* wk = find(m, "blk.3.attn_k.weight");
  ASSERT_NE(wk, nullptr);
  EXPECT_EQ(wk->role, Role::Wk);
  EXPECT_EQ(wk->layer, 3);
  const SourceTensor* down = find(m, "blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->role, Role::FfnDown);
  EXPECT_EQ(down->shape, (std::vector<uint64_t>{64, 172}));
}

TEST(Llama2cReader, Stories260KTokenizer) {
  const nlohmann::json g = golden();
  SourceModel m = read_ok(checkpoint(), tokenizer());
  const SourceTokenizer& t = m.tokenizer;
  EXPECT_EQ(t.kind, TokenizerKind::SentencePieceBpe);
  ASSERT_EQ(t.tokens.size(), 512u);
  ASSERT_EQ(t.scores.size(), 512u);
  ASSERT_EQ(t.token_types.size(), 512u);
  EXPECT_EQ(g.at("tokenizer").at("count").get<size_t>(), 512u);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_TRUE(t.add_bos);
  EXPECT_TRUE(t.add_space_prefix);
  EXPECT_EQ(t.tokens[0], "<unk>");
  EXPECT_EQ(t.tokens[1], "<s>");
  EXPECT_EQ(t.tokens[2], "</s>");
  EXPECT_EQ(t.token_types[0], 2);
  EXPECT_EQ(t.token_types[1], 3);
  EXPECT_EQ(t.token_types[2], 3);
  for (int i = 3; i < 259; ++i) EXPECT_EQ(t.token_types[i], 6) << t.tokens[i];
  EXPECT_EQ(t.tokens[3], "<0x00>");
  EXPECT_EQ(t.tokens[258], "<0xFF>");
  for (int i = 259; i < 512; ++i) EXPECT_EQ(t.token_types[i], 1) << t.tokens[i];
  // The file spells the word marker U+2581 as a space; the reader restores it.
  EXPECT_EQ(t.tokens[259], "\xE2\x96\x81t");
  for (const auto& [id_text, e] : g.at("tokenizer").at("sample").items()) {
    const int id = std::stoi(id_text);
    std::string want = from_hex(e.at("hex").get<std::string>());
    if (id == 1) want = "<s>";
    if (id == 2) want = "</s>";
    std::string restored;
    for (char c : want) restored += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    EXPECT_EQ(t.tokens[id], restored) << id;
    EXPECT_EQ(double(t.scores[id]), e.at("score").get<double>()) << id;
  }
}

// --- layouts written here from the same weights ------------------------------------------------

TEST(Llama2cReader, LegacyUnsharedClassifier) {
  Weights w = with_classifier(weights_of(read_ok(checkpoint(), tokenizer())));
  const std::string path = tmp_path("llama2c_legacy_unshared.bin");
  write_bytes(path, write_legacy(w, false));
  SourceModel m = read_ok(path, tokenizer());
  EXPECT_FALSE(m.hyper.tied_output);
  EXPECT_EQ(m.hyper.vocab_size, 512u);
  ASSERT_NE(find(m, "output.weight"), nullptr);
  EXPECT_EQ(find(m, "output.weight")->role, Role::Output);
  EXPECT_EQ(m.tensors.back().name, "output.weight");
  expect_same_tensors(m, w);
}

TEST(Llama2cReader, Version1MatchesLegacy) {
  Weights w = weights_of(read_ok(checkpoint(), tokenizer()));
  const std::string path = tmp_path("llama2c_v1.bin");
  write_bytes(path, write_v1(w, true));
  SourceModel m = read_ok(path, tokenizer());
  EXPECT_TRUE(m.hyper.tied_output);
  EXPECT_EQ(m.hyper.context_length, 512u);
  EXPECT_NE(m.source_description.find("v1"), std::string::npos);
  // The tensors read through the file kept open by the model, not through the path.
  ASSERT_EQ(unlink(path.c_str()), 0);
  expect_same_tensors(m, w);

  Weights u = with_classifier(w);
  write_bytes(path, write_v1(u, false));
  SourceModel mu = read_ok(path, tokenizer());
  EXPECT_FALSE(mu.hyper.tied_output);
  expect_same_tensors(mu, u);
}

TEST(Llama2cReader, Version2DequantizesWithinHalfAStep) {
  for (bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared" : "unshared");
    Weights w = weights_of(read_ok(checkpoint(), tokenizer()));
    if (!shared) w = with_classifier(w);
    std::vector<std::vector<float>> deq;
    const std::string path = tmp_path("llama2c_v2.bin");
    const int32_t group = 64;
    write_bytes(path, write_v2(w, shared, group, deq));
    SourceModel m = read_ok(path, tokenizer());
    EXPECT_EQ(m.hyper.tied_output, shared);
    EXPECT_NE(m.source_description.find("group 64"), std::string::npos);
    ASSERT_EQ(m.tensors.size(), w.t.size());

    const auto order = matrices_in_export_order(w, shared);
    std::map<const std::vector<float>*, size_t> index;
    for (size_t i = 0; i < order.size(); ++i) index[order[i]] = i;
    for (const SourceTensor& t : m.tensors) {
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.type, SrcType::F32);
      const std::vector<float> got = floats_of(t);
      const std::vector<float>& orig = w.t.at(t.name);
      ASSERT_EQ(got.size(), orig.size());
      auto it = index.find(&w.t.at(t.name));
      if (it == index.end()) {  // norms stay f32
        EXPECT_EQ(got, orig);
        continue;
      }
      // Exactly q * scale, and within half a quantization step (max|group| / 254) of the
      // original, up to float rounding of the division and the product.
      EXPECT_EQ(got, deq[it->second]);
      for (size_t g = 0; g < got.size() / group; ++g) {
        float amax = 0;
        for (int i = 0; i < group; ++i) amax = std::max(amax, std::fabs(orig[g * group + i]));
        const float bound = amax / 254.0f * (1.0f + 1e-5f) + amax * 1e-7f;
        for (int i = 0; i < group; ++i) {
          const size_t k = g * group + i;
          ASSERT_LE(std::fabs(got[k] - orig[k]), bound) << "element " << k;
        }
      }
    }
  }
}

// --- malformed input ---------------------------------------------------------------------------

std::vector<uint8_t> stories_bytes() { return read_bytes(checkpoint()); }

void put_i32(std::vector<uint8_t>& b, size_t at, int32_t v) { memcpy(b.data() + at, &v, 4); }

std::string error_for(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string path = tmp_path(name);
  write_bytes(path, bytes);
  return read_error(path, tokenizer());
}

TEST(Llama2cReader, RejectsTruncatedCheckpoint) {
  std::vector<uint8_t> b = stories_bytes();
  ASSERT_EQ(b.size(), 1056540u);
  b.resize(b.size() / 2);
  const std::string e = error_for(b, "llama2c_truncated.bin");
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("implies 1056540 bytes"), std::string::npos) << e;

  const std::string tiny = error_for({1, 2, 3}, "llama2c_tiny.bin");
  EXPECT_NE(tiny.find("truncated: 3 bytes"), std::string::npos) << tiny;

  std::vector<uint8_t> v1(100, 0);
  memcpy(v1.data(), "24ka", 4);  // 0x616b3432 little-endian
  const std::string short_v = error_for(v1, "llama2c_short_versioned.bin");
  EXPECT_TRUE(test::mentions(short_v, {"header", "256 bytes"}));
}

TEST(Llama2cReader, RejectsTrailingBytes) {
  std::vector<uint8_t> b = stories_bytes();
  b.resize(b.size() + 4, 0);
  const std::string e = error_for(b, "llama2c_trailing.bin");
  EXPECT_NE(e.find("trailing data"), std::string::npos) << e;
}

TEST(Llama2cReader, RejectsAbsurdHeaders) {
  struct Case {
    size_t field;
    int32_t value;
    const char* expect;
  };
  const Case cases[] = {
      {0, 1 << 30, "dim = 1073741824 is out of range"},
      {0, 0, "dim = 0 is out of range"},
      {1, -5, "hidden_dim = -5 is out of range"},
      {2, 0x7fffffff, "n_layers = 2147483647 is out of range"},
      {3, 7, "is not n_heads 7 times an even head size"},
      {4, 3, "n_heads 8 is not a multiple of n_kv_heads 3"},
      {5, INT32_MIN, "vocab_size = -2147483648 is out of range"},
      {6, 1 << 30, "seq_len = 1073741824 is out of range"},
      // Plausible fields whose sizes the file cannot hold: caught before any allocation.
      {5, 1 << 22, "truncated"},
      {2, 1000, "truncated"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = stories_bytes();
    put_i32(b, c.field * 4, c.value);
    const std::string e = error_for(b, "llama2c_absurd.bin");
    EXPECT_NE(e.find(c.expect), std::string::npos) << "field " << c.field << ": " << e;
  }
}

TEST(Llama2cReader, RejectsBadVersionedHeaders) {
  Weights w = weights_of(read_ok(checkpoint(), tokenizer()));
  std::vector<uint8_t> v1 = write_v1(w, true);

  std::vector<uint8_t> b = v1;
  put_i32(b, 4, 3);
  std::string e = error_for(b, "llama2c_v3.bin");
  EXPECT_TRUE(test::mentions(e, {"version 3"}));

  b = v1;
  b[36] = 7;
  e = error_for(b, "llama2c_flag.bin");
  EXPECT_NE(e.find("shared_classifier flag is 7"), std::string::npos) << e;

  b = v1;
  b[36] = 0;  // claims an unshared classifier the file does not hold
  e = error_for(b, "llama2c_v1_noclassifier.bin");
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  std::vector<std::vector<float>> deq;
  std::vector<uint8_t> v2 = write_v2(w, true, 64, deq);
  for (int32_t group : {0, -64, 48, 1 << 20}) {
    b = v2;
    memcpy(b.data() + 37, &group, 4);
    e = error_for(b, "llama2c_v2_group.bin");
    EXPECT_NE(e.find("group_size " + std::to_string(group) + " is invalid"), std::string::npos) << e;
  }
  b = v2;
  const int32_t group32 = 32;  // valid divisor, but the file was written with 64
  memcpy(b.data() + 37, &group32, 4);
  e = error_for(b, "llama2c_v2_group32.bin");
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(Llama2cReader, RejectsBadTokenizer) {
  const std::vector<uint8_t> tok = read_bytes(tokenizer());
  ASSERT_FALSE(tok.empty());
  auto tok_error = [&](const std::vector<uint8_t>& bytes) {
    const std::string path = tmp_path("llama2c_bad_tok.bin");
    write_bytes(path, bytes);
    return read_error(checkpoint(), path);
  };
  // Drop the last token (3 text bytes + 8): one token short.
  std::vector<uint8_t> short_tok(tok.begin(), tok.end() - 11);
  std::string e = tok_error(short_tok);
  EXPECT_TRUE(test::mentions(e, {"511 tokens", "vocab_size", "512"}));

  std::vector<uint8_t> extra = tok;
  const float score = -1;
  const int32_t len = 1;
  extra.insert(extra.end(), reinterpret_cast<const uint8_t*>(&score), reinterpret_cast<const uint8_t*>(&score) + 4);
  extra.insert(extra.end(), reinterpret_cast<const uint8_t*>(&len), reinterpret_cast<const uint8_t*>(&len) + 4);
  extra.push_back('x');
  e = tok_error(extra);
  EXPECT_NE(e.find("has 513 tokens"), std::string::npos) << e;

  std::vector<uint8_t> cut(tok.begin(), tok.end() - 1);
  e = tok_error(cut);
  EXPECT_NE(e.find("truncated in token 511"), std::string::npos) << e;

  std::vector<uint8_t> bad_len = tok;
  put_i32(bad_len, 4 + 4, -3);  // length of token 0
  e = tok_error(bad_len);
  EXPECT_NE(e.find("token 0 has length -3"), std::string::npos) << e;

  std::vector<uint8_t> bad_max = tok;
  put_i32(bad_max, 0, 0x7fffffff);
  e = tok_error(bad_max);
  EXPECT_TRUE(test::mentions(e, {"max_token_length", "2147483647"}));

  std::vector<uint8_t> huge(tok.size() * 20, 0);
  memcpy(huge.data(), tok.data(), 4);
  e = tok_error(huge);
  EXPECT_NE(e.find("does not match vocab_size 512"), std::string::npos) << e;

  e = read_error(checkpoint(), tmp_path("llama2c_no_such_tokenizer.bin"));
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
  e = read_error(tmp_path("llama2c_no_such_checkpoint.bin"), tokenizer());
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

}  // namespace
}  // namespace keel::convert
