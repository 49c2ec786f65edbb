// read_hf_dir on Hugging Face directories written here: a tiny llama in two safetensors shards
// (F32, F16 and BF16 tensors) with SmolLM2's real tokenizer.json, variants (single file,
// unindexed shards, tied, qwen2 biases, mistral window, SentencePiece-style tokenizer), the real
// SmolLM2-135M config.json over sparse weight files, and malformed inputs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "convert/source_model.h"
#include "core/f16.h"
#include "support/test_support.h"

namespace keel::convert {
namespace {

using json = nlohmann::json;
using keel::test::read_bytes;
using keel::test::require_file;
using keel::test::shared_path;
using keel::test::tmp_path;
using keel::test::write_bytes;
namespace fs = std::filesystem;

std::string smollm2_tokenizer_json() {
  return require_file(shared_path("fixtures/smollm2-135m-tokenizer/tokenizer.json"));
}
std::string smollm2_config_json() { return require_file(shared_path("fixtures/smollm2-135m-tokenizer/config.json")); }

// Directories a test wrote; removed after it passes, kept for inspection when it fails.
std::vector<std::string> g_written_dirs;

std::string fresh_dir(const std::string& name) {
  const std::string dir = tmp_path(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  g_written_dirs.push_back(dir);
  return dir;
}

class HfReader : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!HasFailure())
      for (const std::string& dir : g_written_dirs) fs::remove_all(dir);
    g_written_dirs.clear();
  }
};

void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// --- a tiny safetensors writer ----------------------------------------------------------------

struct StEntry {
  std::string name, dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what the bytes decode to
};

std::vector<uint8_t> safetensors_header(const std::vector<StEntry>& es, uint64_t& data_bytes) {
  json h = json::object();
  uint64_t off = 0;
  for (const StEntry& e : es) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + e.bytes.size()}}};
    off += e.bytes.size();
  }
  h["__metadata__"] = {{"format", "pt"}};
  std::string text = h.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::vector<uint8_t> out(8);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(n >> (8 * i));
  out.insert(out.end(), text.begin(), text.end());
  data_bytes = off;
  return out;
}

std::vector<uint8_t> safetensors_bytes(const std::vector<StEntry>& es) {
  uint64_t data_bytes;
  std::vector<uint8_t> out = safetensors_header(es, data_bytes);
  for (const StEntry& e : es) out.insert(out.end(), e.bytes.begin(), e.bytes.end());
  return out;
}

uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Deterministic values n / 1024 with |n| <= 1000, stored in `dtype`.
StEntry make_tensor(const std::string& name, const std::string& dtype, std::vector<uint64_t> shape, uint32_t seed) {
  StEntry e{name, dtype, shape, {}, {}};
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  const size_t width = dtype == "F32" ? 4 : 2;
  e.bytes.resize(n * width);
  e.values.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    const float v = float(int(mix(uint32_t(i) * 2654435761U + seed * 40503U + 1) % 2001) - 1000) / 1024.0f;
    if (dtype == "F32") {
      memcpy(&e.bytes[i * 4], &v, 4);
      e.values[i] = v;
    } else {
      const uint16_t h = dtype == "F16" ? f32_to_f16(v) : f32_to_bf16(v);
      memcpy(&e.bytes[i * 2], &h, 2);
      e.values[i] = dtype == "F16" ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return e;
}

// --- a tiny model directory ------------------------------------------------------------------

enum class Layout { Indexed, Single, Unindexed };

struct Tiny {
  std::string model_type = "llama";
  uint64_t dim = 64, layers = 2, heads = 4, kv_heads = 2, ffn = 128, vocab = 49152;
  bool tied = false, lm_head = true, bias = false, inv_freq = true;
  Layout layout = Layout::Indexed;
  json extra_config = json::object();
  std::string tokenizer_json;  // empty: SmolLM2's
};

struct Written {
  std::string dir;
  std::map<std::string, StEntry> by_hf_name;
  std::vector<std::vector<StEntry>> shards;
};

json tiny_config(const Tiny& t) {
  json c = {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", t.model_type},
            {"hidden_size", t.dim},
            {"intermediate_size", t.ffn},
            {"num_hidden_layers", t.layers},
            {"num_attention_heads", t.heads},
            {"num_key_value_heads", t.kv_heads},
            {"max_position_embeddings", 8192},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 100000},
            {"hidden_act", "silu"},
            {"vocab_size", t.vocab},
            {"tie_word_embeddings", t.tied},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", "bfloat16"}};
  for (const auto& [k, v] : t.extra_config.items()) c[k] = v;
  return c;
}

std::vector<std::vector<StEntry>> tiny_shards(const Tiny& t) {
  const uint64_t hd = t.dim / t.heads, q = t.heads * hd, kv = t.kv_heads * hd;
  std::vector<std::vector<StEntry>> shards(2);
  uint32_t seed = 1;
  shards[0].push_back(make_tensor("model.embed_tokens.weight", "BF16", {t.vocab, t.dim}, seed++));
  for (uint64_t l = 0; l < t.layers; ++l) {
    auto& s = shards[l == 0 ? 0 : 1];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string attn = l == 0 ? "F16" : "BF16", mlp = l == 0 ? "F32" : "F16";
    s.push_back(make_tensor(p + "input_layernorm.weight", "F32", {t.dim}, seed++));
    s.push_back(make_tensor(p + "self_attn.q_proj.weight", attn, {q, t.dim}, seed++));
    s.push_back(make_tensor(p + "self_attn.k_proj.weight", attn, {kv, t.dim}, seed++));
    s.push_back(make_tensor(p + "self_attn.v_proj.weight", attn, {kv, t.dim}, seed++));
    s.push_back(make_tensor(p + "self_attn.o_proj.weight", attn, {t.dim, q}, seed++));
    if (t.bias) {
      s.push_back(make_tensor(p + "self_attn.q_proj.bias", "BF16", {q}, seed++));
      s.push_back(make_tensor(p + "self_attn.k_proj.bias", "BF16", {kv}, seed++));
      s.push_back(make_tensor(p + "self_attn.v_proj.bias", "BF16", {kv}, seed++));
    }
    s.push_back(make_tensor(p + "post_attention_layernorm.weight", "BF16", {t.dim}, seed++));
    s.push_back(make_tensor(p + "mlp.gate_proj.weight", mlp, {t.ffn, t.dim}, seed++));
    s.push_back(make_tensor(p + "mlp.up_proj.weight", mlp, {t.ffn, t.dim}, seed++));
    s.push_back(make_tensor(p + "mlp.down_proj.weight", mlp, {t.dim, t.ffn}, seed++));
    if (t.inv_freq) s.push_back(make_tensor(p + "self_attn.rotary_emb.inv_freq", "F32", {hd / 2}, seed++));
  }
  shards[1].push_back(make_tensor("model.norm.weight", "F32", {t.dim}, seed++));
  if (t.lm_head) shards[1].push_back(make_tensor("lm_head.weight", "F16", {t.vocab, t.dim}, seed++));
  return shards;
}

void write_shards(const std::string& dir, const std::vector<std::vector<StEntry>>& shards, Layout layout) {
  if (layout == Layout::Single) {
    std::vector<StEntry> all;
    for (const auto& s : shards) all.insert(all.end(), s.begin(), s.end());
    write_bytes(dir + "/model.safetensors", safetensors_bytes(all));
    return;
  }
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        "model-0000" + std::to_string(i + 1) + "-of-0000" + std::to_string(shards.size()) + ".safetensors";
    write_bytes(dir + "/" + file, safetensors_bytes(shards[i]));
    for (const StEntry& e : shards[i]) weight_map[e.name] = file;
  }
  if (layout == Layout::Indexed)
    write_text(dir + "/model.safetensors.index.json",
               json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(1));
}

Written write_tiny(const std::string& name, const Tiny& t) {
  Written w;
  w.dir = fresh_dir(name);
  write_text(w.dir + "/config.json", tiny_config(t).dump(2));
  if (t.tokenizer_json.empty())
    fs::copy_file(smollm2_tokenizer_json(), w.dir + "/tokenizer.json");
  else
    write_text(w.dir + "/tokenizer.json", t.tokenizer_json);
  w.shards = tiny_shards(t);
  write_shards(w.dir, w.shards, t.layout);
  for (const auto& s : w.shards)
    for (const StEntry& e : s) w.by_hf_name[e.name] = e;
  return w;
}

SourceModel read_ok(const std::string& dir) {
  std::string error;
  auto m = read_hf_dir(dir, error);
  EXPECT_TRUE(m.has_value()) << error;
  return m ? std::move(*m) : SourceModel{};
}

std::string read_error(const std::string& dir) {
  std::string error;
  auto m = read_hf_dir(dir, error);
  EXPECT_FALSE(m.has_value()) << "accepted " << dir;
  EXPECT_FALSE(error.empty());
  return error;
}

std::vector<uint8_t> bytes_of(const SourceTensor& t) {
  std::vector<uint8_t> b;
  std::string error;
  EXPECT_TRUE(t.read(b, error)) << t.name << ": " << error;
  EXPECT_EQ(b.size(), t.n_bytes) << t.name;
  return b;
}

float decode(SrcType type, const std::vector<uint8_t>& b, size_t i) {
  if (type == SrcType::F32) {
    float v;
    memcpy(&v, &b[i * 4], 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, &b[i * 2], 2);
  return type == SrcType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

SrcType type_of(const std::string& dtype) {
  return dtype == "F32" ? SrcType::F32 : dtype == "F16" ? SrcType::F16 : SrcType::BF16;
}

const std::map<std::string, std::string> kHfOf = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

std::string hf_name_of(const std::string& canonical) {
  if (canonical.rfind("blk.", 0) == 0) {
    const size_t dot = canonical.find('.', 4);
    return "model.layers." + canonical.substr(4, dot - 4) + "." + kHfOf.at(canonical.substr(dot + 1));
  }
  return kHfOf.at(canonical);
}

// Every tensor of `m` has the bytes, dtype and shape written for its Hugging Face name.
void expect_written_tensors(const SourceModel& m, const Written& w) {
  for (const SourceTensor& t : m.tensors) {
    SCOPED_TRACE(t.name);
    const StEntry& e = w.by_hf_name.at(hf_name_of(t.name));
    EXPECT_EQ(t.shape, e.shape);
    EXPECT_EQ(t.type, type_of(e.dtype));
    EXPECT_EQ(t.n_bytes, e.bytes.size());
    const std::vector<uint8_t> b = bytes_of(t);
    ASSERT_EQ(b, e.bytes);
    for (size_t i : {size_t(0), size_t(1), e.values.size() / 2, e.values.size() - 1})
      EXPECT_EQ(decode(t.type, b, i), e.values[i]) << "element " << i;
  }
}

// --- the tiny llama ----------------------------------------------------------------------------

TEST_F(HfReader, TinyLlamaShardedHyperAndTensors) {
  Tiny spec;
  spec.extra_config["rope_scaling"] = {{"rope_type", "llama3"},
                                       {"factor", 8.0},
                                       {"low_freq_factor", 1.0},
                                       {"high_freq_factor", 4.0},
                                       {"original_max_position_embeddings", 4096}};
  const Written w = write_tiny("hf_tiny", spec);
  SourceModel m = read_ok(w.dir);
  const SourceHyper& h = m.hyper;
  EXPECT_EQ(h.arch_name, "llama");
  EXPECT_EQ(h.dim, 64u);
  EXPECT_EQ(h.n_layers, 2u);
  EXPECT_EQ(h.n_heads, 4u);
  EXPECT_EQ(h.n_kv_heads, 2u);
  EXPECT_EQ(h.head_dim, 16u);
  EXPECT_EQ(h.rope_dim, 16u);
  EXPECT_EQ(h.ffn_dim, 128u);
  EXPECT_EQ(h.vocab_size, 49152u);
  EXPECT_EQ(h.context_length, 8192u);
  EXPECT_EQ(h.rope_theta, 100000.0f);
  EXPECT_EQ(h.norm_eps, 1e-5f);
  EXPECT_EQ(h.rope_style, RopeStyle::Halves);
  EXPECT_EQ(h.rope_scaling, RopeScalingKind::Llama3);
  EXPECT_EQ(h.rope_factor, 8.0f);
  EXPECT_EQ(h.rope_low_freq_factor, 1.0f);
  EXPECT_EQ(h.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(h.rope_original_context, 4096u);
  EXPECT_FALSE(h.qkv_bias);
  EXPECT_FALSE(h.tied_output);
  EXPECT_NE(m.source_description.find("2 shards"), std::string::npos) << m.source_description;

  const std::vector<std::string> want_names = {
      "token_embd.weight",     "blk.0.attn_norm.weight",   "blk.0.attn_q.weight",      "blk.0.attn_k.weight",
      "blk.0.attn_v.weight",   "blk.0.attn_output.weight", "blk.0.ffn_norm.weight",    "blk.0.ffn_gate.weight",
      "blk.0.ffn_up.weight",   "blk.0.ffn_down.weight",    "blk.1.attn_norm.weight",   "blk.1.attn_q.weight",
      "blk.1.attn_k.weight",   "blk.1.attn_v.weight",      "blk.1.attn_output.weight", "blk.1.ffn_norm.weight",
      "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight",      "blk.1.ffn_down.weight",    "output_norm.weight",
      "output.weight"};
  std::vector<std::string> names;
  for (const SourceTensor& t : m.tensors) names.push_back(t.name);
  EXPECT_EQ(names, want_names);
  expect_written_tensors(m, w);

  const SourceTensor& q1 = m.tensors[11];
  EXPECT_EQ(q1.role, Role::Wq);
  EXPECT_EQ(q1.layer, 1);
  EXPECT_EQ(q1.type, SrcType::BF16);
  EXPECT_EQ(q1.shape, (std::vector<uint64_t>{64, 64}));
  EXPECT_EQ(m.tensors[3].shape, (std::vector<uint64_t>{32, 64}));  // blk.0.attn_k
  EXPECT_EQ(m.tensors[3].type, SrcType::F16);
  EXPECT_EQ(m.tensors[9].shape, (std::vector<uint64_t>{64, 128}));  // blk.0.ffn_down
  EXPECT_EQ(m.tensors[9].type, SrcType::F32);
  EXPECT_EQ(m.tensors[9].role, Role::FfnDown);
  EXPECT_EQ(m.tensors.front().role, Role::TokenEmbedding);
  EXPECT_EQ(m.tensors.back().role, Role::Output);
  EXPECT_EQ(m.tensors.back().type, SrcType::F16);
  EXPECT_EQ(m.tensors[19].role, Role::OutputNorm);
  for (const SourceTensor& t : m.tensors) EXPECT_EQ(t.layer, t.name.rfind("blk.", 0) == 0 ? t.name[4] - '0' : -1);

  // Tensors read through the files the model keeps open, not through the paths.
  fs::remove_all(w.dir);
  EXPECT_EQ(bytes_of(m.tensors[5]), w.by_hf_name.at("model.layers.0.self_attn.o_proj.weight").bytes);
}

TEST_F(HfReader, SmolLM2Tokenizer) {
  const Written w = write_tiny("hf_tiny_tok", Tiny{});
  SourceModel m = read_ok(w.dir);
  const SourceTokenizer& t = m.tokenizer;
  EXPECT_EQ(t.kind, TokenizerKind::ByteLevelBpe);
  EXPECT_EQ(t.pre, PreTokenizer::SmolLM);
  ASSERT_EQ(t.tokens.size(), 49152u);
  ASSERT_EQ(t.token_types.size(), 49152u);
  EXPECT_TRUE(t.scores.empty());
  ASSERT_EQ(t.merges.size(), 48900u);
  EXPECT_EQ(t.merges.front(), "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(t.tokens[0], "<|endoftext|>");
  EXPECT_EQ(t.tokens[1], "<|im_start|>");
  EXPECT_EQ(t.tokens[2], "<|im_end|>");
  EXPECT_EQ(t.im_start_id, 1);
  EXPECT_EQ(t.im_end_id, 2);
  // No tokenizer_config.json: ids from config.json.
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, -1);
  EXPECT_FALSE(t.add_bos);  // no post-processor template
  EXPECT_FALSE(t.add_space_prefix);
  for (int i = 0; i < 17; ++i) EXPECT_EQ(t.token_types[i], 3) << t.tokens[i];  // special added
  int normal = 0;
  for (size_t i = 17; i < t.token_types.size(); ++i) normal += t.token_types[i] == 1;
  EXPECT_EQ(normal, 49152 - 17);
  EXPECT_TRUE(m.chat_template.empty());

  // The same tokens through their ids in the file.
  const std::vector<uint8_t> raw = read_bytes(smollm2_tokenizer_json());
  const json tj = json::parse(raw.begin(), raw.end());
  for (const auto& [text, id] : tj["model"]["vocab"].items()) ASSERT_EQ(t.tokens[id.get<size_t>()], text) << id;
  EXPECT_EQ(t.merges.back(), tj["model"]["merges"].back().get<std::string>());
}

TEST_F(HfReader, TokenizerConfigOverridesIdsAndCarriesChatTemplate) {
  const Written w = write_tiny("hf_tiny_tokcfg", Tiny{});
  write_text(w.dir + "/tokenizer_config.json",
             json{{"bos_token", "<|im_start|>"},
                  {"eos_token", {{"content", "<|endoftext|>"}, {"special", true}}},
                  {"pad_token", "<|no_such_token|>"},
                  {"add_bos_token", true},
                  {"chat_template", "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"}}
                 .dump());
  SourceModel m = read_ok(w.dir);
  EXPECT_EQ(m.tokenizer.bos_id, 1);
  EXPECT_EQ(m.tokenizer.eos_id, 0);
  EXPECT_EQ(m.tokenizer.pad_id, -1);
  EXPECT_TRUE(m.tokenizer.add_bos);
  EXPECT_EQ(m.chat_template, "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}");

  write_text(w.dir + "/tokenizer_config.json", json{{"eos_token", "<|nope|>"}}.dump());
  const std::string e = read_error(w.dir);
  EXPECT_TRUE(test::mentions(e, {"eos_token", "'<|nope|>'", "vocabulary"}));
}

TEST_F(HfReader, EosListTakesTheFirst) {
  Tiny spec;
  spec.extra_config["eos_token_id"] = {2, 0};
  const Written w = write_tiny("hf_tiny_eoslist", spec);
  EXPECT_EQ(read_ok(w.dir).tokenizer.eos_id, 2);
}

TEST_F(HfReader, SingleFileAndUnindexedShards) {
  for (Layout layout : {Layout::Single, Layout::Unindexed}) {
    Tiny spec;
    spec.layout = layout;
    const Written w = write_tiny(layout == Layout::Single ? "hf_single" : "hf_unindexed", spec);
    SourceModel m = read_ok(w.dir);
    EXPECT_EQ(m.tensors.size(), 21u);
    EXPECT_NE(m.source_description.find(layout == Layout::Single ? "model.safetensors" : "2 *.safetensors"),
              std::string::npos)
        << m.source_description;
    expect_written_tensors(m, w);
  }
}

TEST_F(HfReader, TiedModelDropsShippedClassifier) {
  Tiny spec;
  spec.tied = true;  // lm_head.weight still written
  const Written w = write_tiny("hf_tied", spec);
  SourceModel m = read_ok(w.dir);
  EXPECT_TRUE(m.hyper.tied_output);
  EXPECT_EQ(m.tensors.size(), 20u);
  for (const SourceTensor& t : m.tensors) EXPECT_NE(t.role, Role::Output) << t.name;
  EXPECT_EQ(m.tensors.back().name, "output_norm.weight");
}

TEST_F(HfReader, Qwen2BiasesAndMistralWindow) {
  Tiny qwen;
  qwen.model_type = "qwen2";
  qwen.bias = true;
  qwen.tied = true;
  qwen.lm_head = false;
  qwen.extra_config["rope_theta"] = 1000000.0;
  qwen.extra_config["rms_norm_eps"] = 1e-6;
  qwen.extra_config["use_sliding_window"] = false;
  qwen.extra_config["sliding_window"] = 4096;
  const Written w = write_tiny("hf_qwen2", qwen);
  SourceModel m = read_ok(w.dir);
  EXPECT_EQ(m.hyper.arch_name, "qwen2");
  EXPECT_TRUE(m.hyper.qkv_bias);
  EXPECT_EQ(m.hyper.rope_theta, 1e6f);
  EXPECT_EQ(m.hyper.norm_eps, 1e-6f);
  EXPECT_EQ(m.hyper.context_length, 8192u);
  EXPECT_EQ(m.tensors.size(), 1u + 2 * 12 + 1);
  EXPECT_EQ(m.tensors[3].name, "blk.0.attn_q.bias");
  EXPECT_EQ(m.tensors[3].role, Role::Bq);
  EXPECT_EQ(m.tensors[3].shape, (std::vector<uint64_t>{64}));
  EXPECT_EQ(m.tensors[5].name, "blk.0.attn_k.bias");
  EXPECT_EQ(m.tensors[5].shape, (std::vector<uint64_t>{32}));
  EXPECT_EQ(m.tensors[7].role, Role::Bv);
  expect_written_tensors(m, w);

  // Biases a llama config does not declare.
  Tiny llama_bias = qwen;
  llama_bias.model_type = "llama";
  llama_bias.extra_config = json::object();
  std::string e = read_error(write_tiny("hf_llama_bias", llama_bias).dir);
  EXPECT_NE(e.find("declares no attention bias"), std::string::npos) << e;
  // qwen2 without biases.
  Tiny qwen_nobias = qwen;
  qwen_nobias.bias = false;
  e = read_error(write_tiny("hf_qwen2_nobias", qwen_nobias).dir);
  EXPECT_TRUE(test::mentions(e, {"missing", "model.layers.0.self_attn.q_proj.bias"}));

  Tiny mistral;
  mistral.model_type = "mistral";
  mistral.extra_config["sliding_window"] = 4096;
  mistral.extra_config["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  SourceModel mm = read_ok(write_tiny("hf_mistral", mistral).dir);
  EXPECT_EQ(mm.hyper.arch_name, "llama");
  EXPECT_EQ(mm.hyper.context_length, 4096u);
  EXPECT_EQ(mm.hyper.rope_scaling, RopeScalingKind::Linear);
  EXPECT_EQ(mm.hyper.rope_factor, 2.0f);
}

TEST_F(HfReader, PadsShortTokenizerAndRejectsLongOne) {
  Tiny spec;
  spec.vocab = 49152 + 64;  // embedding rows rounded up past the tokenizer
  const Written w = write_tiny("hf_padded", spec);
  SourceModel m = read_ok(w.dir);
  ASSERT_EQ(m.tokenizer.tokens.size(), 49216u);
  ASSERT_EQ(m.tokenizer.token_types.size(), 49216u);
  EXPECT_EQ(m.tokenizer.tokens[49152], "<unused_49152>");
  EXPECT_EQ(m.tokenizer.tokens[49215], "<unused_49215>");
  EXPECT_EQ(m.tokenizer.token_types[49215], 5);
  EXPECT_EQ(m.tokenizer.token_types[49151], 1);
  EXPECT_EQ(m.tensors.front().shape, (std::vector<uint64_t>{49216, 64}));

  spec.vocab = 49000;
  const std::string e = read_error(write_tiny("hf_short_rows", spec).dir);
  EXPECT_TRUE(test::mentions(e, {"49000", "embedding"}));
}

// A SentencePiece-style tokenizer.json: byte fallback, "▁" normalizer, no scores.
std::string spm_tokenizer_json(uint32_t& n_tokens) {
  const std::string sp = "\xE2\x96\x81";
  json vocab = json::object();
  int id = 0;
  for (const char* s : {"<unk>", "<s>", "</s>"}) vocab[s] = id++;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = id++;
  }
  for (const std::string& s : {sp, std::string("a"), std::string("b"), sp + "a", std::string("ab"), sp + "ab"})
    vocab[s] = id++;
  n_tokens = uint32_t(id);
  json added = json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i}, {"content", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>"}, {"special", true}});
  json tj = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", sp}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}}}}},
      {"pre_tokenizer", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", json::array({json::array({sp, "a"}), json::array({"a", "b"}), json::array({sp + "a", "b"})})}}}};
  return tj.dump();
}

TEST_F(HfReader, SentencePieceStyleTokenizer) {
  Tiny spec;
  uint32_t n = 0;
  spec.tokenizer_json = spm_tokenizer_json(n);
  spec.vocab = n;
  const Written w = write_tiny("hf_spm", spec);
  SourceModel m = read_ok(w.dir);
  const SourceTokenizer& t = m.tokenizer;
  EXPECT_EQ(t.kind, TokenizerKind::SentencePieceBpe);
  EXPECT_EQ(t.pre, PreTokenizer::None);
  ASSERT_EQ(t.tokens.size(), 265u);
  ASSERT_EQ(t.scores.size(), 265u);
  EXPECT_TRUE(t.merges.empty());
  EXPECT_TRUE(t.add_space_prefix);
  EXPECT_TRUE(t.add_bos);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.token_types[0], 2);
  EXPECT_EQ(t.token_types[1], 3);
  EXPECT_EQ(t.token_types[2], 3);
  EXPECT_EQ(t.token_types[3], 6);
  EXPECT_EQ(t.token_types[258], 6);
  EXPECT_EQ(t.token_types[259], 1);
  // Merge results score -(merge rank); everything else below all of them.
  EXPECT_EQ(t.tokens[262],
            "\xE2\x96\x81"
            "a");
  EXPECT_EQ(t.scores[262], -0.0f);
  EXPECT_EQ(t.scores[263], -1.0f);  // "ab"
  EXPECT_EQ(t.scores[264], -2.0f);  // "▁ab"
  EXPECT_EQ(t.scores[259], -(3.0f + 259));
  EXPECT_EQ(t.scores[0], -3.0f);
}

// --- the real SmolLM2-135M config over sparse weight files -------------------------------------

TEST_F(HfReader, RealSmolLM2ConfigWithSparseWeights) {
  const std::string dir = fresh_dir("hf_smollm2_config");
  fs::copy_file(smollm2_config_json(), dir + "/config.json");
  fs::copy_file(smollm2_tokenizer_json(), dir + "/tokenizer.json");
  const std::vector<uint8_t> cfg_raw = read_bytes(smollm2_config_json());
  const json cfg = json::parse(cfg_raw.begin(), cfg_raw.end());
  const uint64_t dim = cfg["hidden_size"], ffn = cfg["intermediate_size"], layers = cfg["num_hidden_layers"];
  const uint64_t heads = cfg["num_attention_heads"], kv = cfg["num_key_value_heads"], vocab = cfg["vocab_size"];
  const uint64_t hd = dim / heads;
  // Shapes only: the data regions are holes, so ~270 MB of BF16 costs no disk.
  json h = json::object();
  uint64_t off = 0;
  auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
    uint64_t n = 2;
    for (uint64_t d : shape) n *= d;
    h[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  };
  add("model.embed_tokens.weight", {vocab, dim});
  for (uint64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {dim});
    add(p + "self_attn.q_proj.weight", {heads * hd, dim});
    add(p + "self_attn.k_proj.weight", {kv * hd, dim});
    add(p + "self_attn.v_proj.weight", {kv * hd, dim});
    add(p + "self_attn.o_proj.weight", {dim, heads * hd});
    add(p + "post_attention_layernorm.weight", {dim});
    add(p + "mlp.gate_proj.weight", {ffn, dim});
    add(p + "mlp.up_proj.weight", {ffn, dim});
    add(p + "mlp.down_proj.weight", {dim, ffn});
  }
  add("model.norm.weight", {dim});
  const std::string text = h.dump();
  std::vector<uint8_t> head(8);
  for (int i = 0; i < 8; ++i) head[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  head.insert(head.end(), text.begin(), text.end());
  const std::string path = dir + "/model.safetensors";
  write_bytes(path, head);
  fs::resize_file(path, head.size() + off);

  SourceModel m = read_ok(dir);
  const SourceHyper& hy = m.hyper;
  EXPECT_EQ(hy.dim, 576u);
  EXPECT_EQ(hy.n_layers, 30u);
  EXPECT_EQ(hy.n_heads, 9u);
  EXPECT_EQ(hy.n_kv_heads, 3u);
  EXPECT_EQ(hy.head_dim, 64u);
  EXPECT_EQ(hy.ffn_dim, 1536u);
  EXPECT_EQ(hy.vocab_size, 49152u);
  EXPECT_EQ(hy.context_length, 8192u);
  EXPECT_EQ(hy.rope_theta, 100000.0f);
  EXPECT_EQ(hy.norm_eps, 1e-5f);
  EXPECT_EQ(hy.rope_style, RopeStyle::Halves);
  EXPECT_EQ(hy.rope_scaling, RopeScalingKind::None);
  EXPECT_TRUE(hy.tied_output);
  EXPECT_FALSE(hy.qkv_bias);
  EXPECT_EQ(m.tokenizer.bos_id, 1);
  EXPECT_EQ(m.tokenizer.eos_id, 2);
  EXPECT_EQ(m.tokenizer.pad_id, 2);
  ASSERT_EQ(m.tensors.size(), 1u + 30 * 9 + 1);
  const SourceTensor& down = m.tensors[m.tensors.size() - 2];
  EXPECT_EQ(down.name, "blk.29.ffn_down.weight");
  EXPECT_EQ(down.shape, (std::vector<uint64_t>{576, 1536}));
  EXPECT_EQ(down.n_bytes, 576u * 1536 * 2);
  const std::vector<uint8_t> b = bytes_of(down);
  EXPECT_EQ(std::count(b.begin(), b.end(), 0), ptrdiff_t(b.size()));
}

// --- malformed input ---------------------------------------------------------------------------

TEST_F(HfReader, RejectsMissingConfigAndTokenizer) {
  const Written w = write_tiny("hf_missing", Tiny{});
  fs::remove(w.dir + "/config.json");
  std::string e = read_error(w.dir);
  EXPECT_NE(e.find("config.json not found"), std::string::npos) << e;

  write_text(w.dir + "/config.json", "{\"model_type\": \"llama\", ");
  e = read_error(w.dir);
  EXPECT_NE(e.find("is not valid JSON"), std::string::npos) << e;

  write_text(w.dir + "/config.json", tiny_config(Tiny{}).dump());
  fs::remove(w.dir + "/tokenizer.json");
  e = read_error(w.dir);
  EXPECT_NE(e.find("tokenizer.json not found"), std::string::npos) << e;

  e = read_error(tmp_path("hf_no_such_dir"));
  EXPECT_NE(e.find("config.json not found"), std::string::npos) << e;
}

TEST_F(HfReader, RejectsBadConfigs) {
  struct Case {
    json patch;
    const char* expect;
  };
  const Case cases[] = {
      {{{"model_type", "gemma"}}, "model_type 'gemma' is not supported"},
      {{{"hidden_size", nullptr}}, "missing 'hidden_size'"},
      {{{"hidden_size", -64}}, "'hidden_size' is -64, expected a non-negative integer"},
      {{{"num_hidden_layers", 100000}}, "'num_hidden_layers' = 100000 is out of range"},
      {{{"num_key_value_heads", 3}}, "is not a multiple of num_key_value_heads 3"},
      {{{"hidden_act", "gelu"}}, "hidden_act \"gelu\" is not supported"},
      {{{"rope_scaling", {{"type", "yarn"}, {"factor", 4.0}}}}, "is not supported (expected llama3 or linear)"},
      {{{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, "missing 'low_freq_factor'"},
      {{{"tie_word_embeddings", "yes"}}, "'tie_word_embeddings' is \"yes\", expected true or false"},
      {{{"vocab_size", 1u << 30}}, "'vocab_size' = 1073741824 is out of range"},
  };
  const Written w = write_tiny("hf_bad_config", Tiny{});
  for (const Case& c : cases) {
    json cfg = tiny_config(Tiny{});
    for (const auto& [k, v] : c.patch.items()) {
      if (v.is_null())
        cfg.erase(k);
      else
        cfg[k] = v;
    }
    write_text(w.dir + "/config.json", cfg.dump());
    const std::string e = read_error(w.dir);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.patch.dump() << ": " << e;
  }
}

std::string shard1(const Written& w) { return w.dir + "/model-00001-of-00002.safetensors"; }

TEST_F(HfReader, RejectsBadSafetensorsHeaderLength) {
  const Written w = write_tiny("hf_bad_len", Tiny{});
  std::vector<uint8_t> b = read_bytes(shard1(w));
  for (uint64_t n : {uint64_t(1) << 62, uint64_t(b.size()), uint64_t(0), uint64_t(1)}) {
    for (int i = 0; i < 8; ++i) b[i] = uint8_t(n >> (8 * i));
    write_bytes(shard1(w), b);
    const std::string e = read_error(w.dir);
    EXPECT_NE(e.find("header length " + std::to_string(n) + " is invalid"), std::string::npos) << e;
  }
  write_bytes(shard1(w), {1, 2, 3});
  std::string e = read_error(w.dir);
  EXPECT_NE(e.find("truncated: 3 bytes"), std::string::npos) << e;

  // A header length inside the file whose text is not JSON.
  b = read_bytes(shard1(w));
  std::vector<uint8_t> garbage(64, 'x');
  for (int i = 0; i < 8; ++i) garbage[i] = uint8_t(uint64_t(40) >> (8 * i));
  write_bytes(shard1(w), garbage);
  e = read_error(w.dir);
  EXPECT_NE(e.find("header is not a JSON object"), std::string::npos) << e;
}

TEST_F(HfReader, RejectsOffsetsPastEnd) {
  const Written w = write_tiny("hf_bad_offsets", Tiny{});
  std::vector<uint8_t> b = read_bytes(shard1(w));
  b.resize(b.size() - 10);
  write_bytes(shard1(w), b);
  std::string e = read_error(w.dir);
  EXPECT_NE(e.find("pass the end of the data"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.self_attn.rotary_emb.inv_freq"), std::string::npos) << e;

  // Offsets that disagree with dtype and shape.
  std::vector<StEntry> es = {make_tensor("model.norm.weight", "F32", {64}, 7)};
  es[0].shape = {65};
  Tiny spec;
  spec.layout = Layout::Single;
  const Written s = write_tiny("hf_bad_size", spec);
  write_bytes(s.dir + "/model.safetensors", safetensors_bytes(es));
  e = read_error(s.dir);
  EXPECT_TRUE(test::mentions(e, {"256", "F32 [65]", "260"}));
}

TEST_F(HfReader, RejectsUnknownDtype) {
  Tiny spec;
  spec.layout = Layout::Single;
  const Written w = write_tiny("hf_bad_dtype", spec);
  std::vector<StEntry> es;
  for (const auto& s : w.shards)
    for (const StEntry& x : s)
      if (x.name != "model.layers.0.mlp.up_proj.weight") es.push_back(x);
  StEntry i8 = make_tensor("model.layers.0.mlp.up_proj.weight", "F16", {128, 32}, 9);  // 8192 bytes
  i8.dtype = "I8";
  i8.shape = {128, 64};
  es.push_back(i8);
  write_bytes(w.dir + "/model.safetensors", safetensors_bytes(es));
  const std::string e = read_error(w.dir);
  EXPECT_TRUE(test::mentions(e, {"model.layers.0.mlp.up_proj.weight", "I8"}));
}

TEST_F(HfReader, RejectsUnknownMissingAndMisshapenTensors) {
  Tiny spec;
  spec.layout = Layout::Single;
  const Written w = write_tiny("hf_bad_names", spec);
  std::vector<StEntry> all;
  for (const auto& s : w.shards) all.insert(all.end(), s.begin(), s.end());
  auto error_with = [&](std::vector<StEntry> es) {
    write_bytes(w.dir + "/model.safetensors", safetensors_bytes(es));
    return read_error(w.dir);
  };

  std::vector<StEntry> es = all;
  es.push_back(make_tensor("model.layers.0.mlp.extra_proj.weight", "F32", {4}, 3));
  std::string e = error_with(es);
  EXPECT_TRUE(test::mentions(e, {"model.layers.0.mlp.extra_proj.weight", "known"}));

  es = all;
  es.push_back(make_tensor("vision_tower.patch_embed.weight", "F32", {4}, 3));
  e = error_with(es);
  EXPECT_TRUE(test::mentions(e, {"vision_tower.patch_embed.weight", "known"}));

  es = all;
  es.push_back(make_tensor("model.layers.2.input_layernorm.weight", "F32", {64}, 3));
  e = error_with(es);
  EXPECT_TRUE(test::mentions(e, {"layer 2", "config.json", "2 layers"}));

  es.clear();
  for (const StEntry& x : all)
    if (x.name != "model.layers.1.mlp.up_proj.weight") es.push_back(x);
  e = error_with(es);
  EXPECT_TRUE(test::mentions(e, {"missing", "model.layers.1.mlp.up_proj.weight"}));

  es.clear();
  for (const StEntry& x : all)
    if (x.name != "lm_head.weight") es.push_back(x);
  e = error_with(es);
  EXPECT_NE(e.find("missing tensor lm_head.weight"), std::string::npos) << e;

  es = all;
  for (StEntry& x : es)
    if (x.name == "model.layers.0.self_attn.k_proj.weight") x = make_tensor(x.name, "F16", {64, 64}, 5);
  e = error_with(es);
  EXPECT_TRUE(test::mentions(e, {"model.layers.0.self_attn.k_proj.weight", "[64, 64]", "[32, 64]"}));
}

TEST_F(HfReader, RejectsInconsistentShards) {
  const Written w = write_tiny("hf_bad_shards", Tiny{});
  // A tensor in both shards.
  std::vector<StEntry> s2 = w.shards[1];
  s2.push_back(w.shards[0][0]);
  write_bytes(w.dir + "/model-00002-of-00002.safetensors", safetensors_bytes(s2));
  std::string e = read_error(w.dir);
  EXPECT_TRUE(test::mentions(e, {"model.embed_tokens.weight", "both"}));

  // The index names a shard that is not there, or escapes the directory.
  write_text(w.dir + "/model.safetensors.index.json",
             json{{"weight_map", {{"model.norm.weight", "model-00003-of-00003.safetensors"}}}}.dump());
  e = read_error(w.dir);
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
  write_text(w.dir + "/model.safetensors.index.json",
             json{{"weight_map", {{"model.norm.weight", "../elsewhere.safetensors"}}}}.dump());
  e = read_error(w.dir);
  EXPECT_TRUE(test::mentions(e, {"../elsewhere.safetensors", "same directory"}));

  // No weights at all.
  const Written n = write_tiny("hf_no_weights", Tiny{});
  for (const auto& entry : fs::directory_iterator(n.dir))
    if (entry.path().filename().string().find("safetensors") != std::string::npos) fs::remove(entry.path());
  e = read_error(n.dir);
  EXPECT_NE(e.find("no weights in"), std::string::npos) << e;
}

TEST_F(HfReader, RejectsUnsupportedTokenizers) {
  const std::vector<uint8_t> raw = read_bytes(smollm2_tokenizer_json());
  const json base = json::parse(raw.begin(), raw.end());
  struct Case {
    std::function<void(json&)> patch;
    const char* expect;
  };
  const Case cases[] = {
      {[](json& t) { t["model"]["type"] = "Unigram"; }, "model type \"Unigram\" is not supported"},
      {[](json& t) {
         t["pre_tokenizer"] = {{"type", "Whitespace"}};
         t["decoder"] = nullptr;
       },
       "neither byte-level BPE"},
      {[](json& t) {
         t["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}}, {{"type", "ByteLevel"}}}}};
       },
       "byte-level pre-tokenizer not recognized"},
      {[](json& t) { t["added_tokens"][0]["id"] = 5; }, "id 5 is both"},
      {[](json& t) {
         t["model"]["vocab"].erase("<|im_end|>");
         t["added_tokens"].erase(2);
       },
       "no token has id 2"},
      {[](json& t) { t["model"]["merges"][3] = 17; }, "merge 17 is neither"},
  };
  const Written w = write_tiny("hf_bad_tok", Tiny{});
  for (const Case& c : cases) {
    json t = base;
    c.patch(t);
    write_text(w.dir + "/tokenizer.json", t.dump());
    const std::string e = read_error(w.dir);
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
  }
}

TEST_F(HfReader, RecognizesLlama3AndQwen2PreTokenizers) {
  const std::vector<uint8_t> raw = read_bytes(smollm2_tokenizer_json());
  const json base = json::parse(raw.begin(), raw.end());
  const std::string llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const std::string qwen2 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const Written w = write_tiny("hf_pretok", Tiny{});
  for (const auto& [re, want] :
       {std::pair<std::string, PreTokenizer>{llama3, PreTokenizer::Llama3}, {qwen2, PreTokenizer::Qwen2}}) {
    json t = base;
    t["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    t["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
    write_text(w.dir + "/tokenizer.json", t.dump());
    SourceModel m = read_ok(w.dir);
    EXPECT_EQ(m.tokenizer.pre, want);
    EXPECT_TRUE(m.tokenizer.add_bos);
  }
  json t = base;
  t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  write_text(w.dir + "/tokenizer.json", t.dump());
  EXPECT_EQ(read_ok(w.dir).tokenizer.pre, PreTokenizer::Gpt2);
}

}  // namespace
}  // namespace keel::convert

namespace keel {
namespace {

// The tokenizer on its own, as tools and tests read it from a model directory.
TEST(HfTokenizer, SmolLM2FixtureReadsOnItsOwn) {
  std::string err;
  test::require_file(test::shared_path("fixtures/smollm2-135m-tokenizer/tokenizer.json"));
  auto tok = convert::read_hf_tokenizer(test::shared_path("fixtures/smollm2-135m-tokenizer"), err);
  ASSERT_TRUE(tok.has_value()) << err;
  EXPECT_EQ(tok->kind, convert::TokenizerKind::ByteLevelBpe);
  EXPECT_EQ(tok->pre, convert::PreTokenizer::SmolLM);
  EXPECT_EQ(tok->tokens.size(), 49152u);
  EXPECT_EQ(tok->merges.size(), 48900u);
  EXPECT_EQ(tok->im_start_id, 1);
  EXPECT_EQ(tok->im_end_id, 2);
  auto missing = convert::read_hf_tokenizer(test::tmp_path("no_such_dir"), err);
  EXPECT_FALSE(missing.has_value());
  EXPECT_NE(err.find("tokenizer.json not found"), std::string::npos) << err;
}

}  // namespace
}  // namespace keel
