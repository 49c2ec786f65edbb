// read_hf_dir on small Gemma 3 directories written here: gemma3_text as transformers 5 writes it
// (rope_parameters, layer_types) and as transformers 4 did (rope_theta, rope_local_base_freq,
// sliding_window_pattern, rope_scaling), the multimodal gemma3 whose text_config holds the text
// model (weights under both prefixes, vision tensors skipped), and configs that lack or break
// what Gemma 3 needs. The real 270M checkpoint runs in tests/hf_gemma3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
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
namespace fs = std::filesystem;

constexpr uint64_t kDim = 64, kLayers = 6, kHeads = 4, kKvHeads = 1, kHeadDim = 32, kFfn = 128, kVocab = 49152;

void write_text(const std::string& path, const std::string& text) {
  test::write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = test::tmp_path(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(test::require_file(test::shared_path("fixtures/smollm2-135m-tokenizer/tokenizer.json")),
                dir + "/tokenizer.json");
  return dir;
}

// The 270M model's config.json as transformers 5 writes it, with smaller sizes: global
// attention on every third layer, head_dim unlike hidden_size / heads.
json text_config() {
  json types = json::array();
  for (uint64_t l = 0; l < kLayers; ++l) types.push_back((l + 1) % 3 == 0 ? "full_attention" : "sliding_attention");
  return {{"architectures", {"Gemma3ForCausalLM"}},
          {"model_type", "gemma3_text"},
          {"attention_bias", false},
          {"attn_logit_softcapping", nullptr},
          {"final_logit_softcapping", nullptr},
          {"bos_token_id", 2},
          {"eos_token_id", 1},
          {"pad_token_id", 0},
          {"head_dim", kHeadDim},
          {"hidden_activation", "gelu_pytorch_tanh"},
          {"hidden_size", kDim},
          {"intermediate_size", kFfn},
          {"layer_types", types},
          {"max_position_embeddings", 32768},
          {"num_attention_heads", kHeads},
          {"num_hidden_layers", kLayers},
          {"num_key_value_heads", kKvHeads},
          {"query_pre_attn_scalar", 24},
          {"rms_norm_eps", 1e-6},
          {"rope_parameters",
           {{"full_attention", {{"rope_theta", 1000000.0}, {"rope_type", "default"}}},
            {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}}},
          {"sliding_window", 16},
          {"tie_word_embeddings", true},
          {"use_bidirectional_attention", false},
          {"vocab_size", kVocab}};
}

struct Tensor {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<float> values;  // exactly representable in bf16
};

// One safetensors file of BF16 tensors with values n / 256, |n| <= 100.
void write_safetensors(const std::string& path, const std::vector<Tensor>& ts) {
  json h = json::object();
  std::vector<uint8_t> data;
  for (const Tensor& t : ts) {
    const uint64_t begin = data.size();
    for (float v : t.values) {
      const uint16_t b = f32_to_bf16(v);
      data.push_back(uint8_t(b));
      data.push_back(uint8_t(b >> 8));
    }
    h[t.name] = {{"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string header = h.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  test::write_bytes(path, out);
}

Tensor make(const std::string& name, std::vector<uint64_t> shape, uint32_t seed) {
  Tensor t{name, shape, {}};
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  t.values.resize(n);
  for (uint64_t i = 0; i < n; ++i) t.values[i] = float(int((i * 2654435761u + seed * 40503u) % 201) - 100) / 256.0f;
  return t;
}

// The text model's tensors under `prefix` ("model." for gemma3_text).
std::vector<Tensor> text_tensors(const std::string& prefix) {
  const uint64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  std::vector<Tensor> ts;
  uint32_t seed = 1;
  ts.push_back(make(prefix + "embed_tokens.weight", {kVocab, kDim}, seed++));
  for (uint64_t l = 0; l < kLayers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    ts.push_back(make(p + "input_layernorm.weight", {kDim}, seed++));
    ts.push_back(make(p + "self_attn.q_proj.weight", {q, kDim}, seed++));
    ts.push_back(make(p + "self_attn.k_proj.weight", {kv, kDim}, seed++));
    ts.push_back(make(p + "self_attn.v_proj.weight", {kv, kDim}, seed++));
    ts.push_back(make(p + "self_attn.o_proj.weight", {kDim, q}, seed++));
    ts.push_back(make(p + "self_attn.q_norm.weight", {kHeadDim}, seed++));
    ts.push_back(make(p + "self_attn.k_norm.weight", {kHeadDim}, seed++));
    ts.push_back(make(p + "post_attention_layernorm.weight", {kDim}, seed++));
    ts.push_back(make(p + "pre_feedforward_layernorm.weight", {kDim}, seed++));
    ts.push_back(make(p + "post_feedforward_layernorm.weight", {kDim}, seed++));
    ts.push_back(make(p + "mlp.gate_proj.weight", {kFfn, kDim}, seed++));
    ts.push_back(make(p + "mlp.up_proj.weight", {kFfn, kDim}, seed++));
    ts.push_back(make(p + "mlp.down_proj.weight", {kDim, kFfn}, seed++));
  }
  ts.push_back(make(prefix + "norm.weight", {kDim}, seed++));
  return ts;
}

// Canonical name -> the Hugging Face block suffix it comes from.
const std::map<std::string, std::string> kHfOf = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

std::string hf_name_of(const std::string& canonical, const std::string& prefix) {
  if (canonical == "token_embd.weight") return prefix + "embed_tokens.weight";
  if (canonical == "output_norm.weight") return prefix + "norm.weight";
  const size_t dot = canonical.find('.', 4);
  return prefix + "layers." + canonical.substr(4, dot - 4) + "." + kHfOf.at(canonical.substr(dot + 1));
}

SourceModel read_ok(const std::string& dir) {
  std::string error;
  auto m = read_hf_dir(dir, error);
  EXPECT_TRUE(m.has_value()) << error;
  return m ? std::move(*m) : SourceModel{};
}

std::string read_error(const std::string& dir) {
  std::string error;
  EXPECT_FALSE(read_hf_dir(dir, error).has_value()) << "accepted " << dir;
  return error;
}

// Every tensor read back as written, norms as 1 + w in F32, in their Gemma roles.
void expect_tensors(const SourceModel& m, const std::vector<Tensor>& written, const std::string& prefix) {
  std::map<std::string, const Tensor*> by_name;
  for (const Tensor& t : written) by_name[t.name] = &t;
  ASSERT_EQ(m.tensors.size(), 2 + kLayers * 13);
  size_t norms = 0;
  for (const SourceTensor& t : m.tensors) {
    SCOPED_TRACE(t.name);
    const Tensor& w = *by_name.at(hf_name_of(t.name, prefix));
    EXPECT_EQ(t.shape, w.shape);
    std::vector<uint8_t> b;
    std::string err;
    ASSERT_TRUE(t.read(b, err)) << err;
    ASSERT_EQ(b.size(), t.n_bytes);
    const bool norm = t.shape.size() == 1;
    EXPECT_EQ(t.type, norm ? SrcType::F32 : SrcType::BF16);
    std::vector<float> got(w.values.size());
    ASSERT_TRUE(dequantize(t.type, b.data(), b.size(), got.data(), got.size()));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], w.values[i] + (norm ? 1.0f : 0.0f)) << "element " << i;
    if (!norm) continue;
    ++norms;
    std::vector<uint8_t> part(8);
    ASSERT_TRUE(t.read_range(4, 8, part.data(), err)) << err;
    EXPECT_EQ(0, std::memcmp(part.data(), b.data() + 4, 8));
    EXPECT_FALSE(t.read_range(b.size() - 4, 8, part.data(), err));
  }
  EXPECT_EQ(norms, 1 + kLayers * 6);
  auto role_of = [&](const std::string& name) {
    for (const SourceTensor& t : m.tensors)
      if (t.name == name) return t.role;
    ADD_FAILURE() << "no tensor " << name;
    return Role::TokenEmbedding;
  };
  EXPECT_EQ(role_of("blk.1.post_attention_norm.weight"), Role::PostAttnNorm);
  EXPECT_EQ(role_of("blk.1.ffn_norm.weight"), Role::FfnNorm);
  EXPECT_EQ(role_of("blk.1.post_ffw_norm.weight"), Role::PostFfnNorm);
  EXPECT_EQ(role_of("blk.1.attn_q_norm.weight"), Role::AttnQNorm);
  EXPECT_EQ(role_of("blk.1.attn_k_norm.weight"), Role::AttnKNorm);
}

TEST(HfGemma3Reader, TextModelHyperAndTensors) {
  const std::string dir = fresh_dir("hf_gemma3_text");
  write_text(dir + "/config.json", text_config().dump(2));
  const std::vector<Tensor> ts = text_tensors("model.");
  write_safetensors(dir + "/model.safetensors", ts);
  const SourceModel m = read_ok(dir);
  const SourceHyper& h = m.hyper;
  EXPECT_EQ(h.family, ArchFamily::Gemma3);
  EXPECT_EQ(h.arch_name, "gemma3");
  EXPECT_EQ(h.dim, kDim);
  EXPECT_EQ(h.head_dim, kHeadDim);
  EXPECT_EQ(h.rope_dim, kHeadDim);
  EXPECT_EQ(h.n_kv_heads, kKvHeads);
  EXPECT_EQ(h.rope_style, RopeStyle::Halves);
  EXPECT_EQ(h.sliding_window, 16u);
  EXPECT_EQ(h.sliding_window_pattern, 3u);
  EXPECT_FLOAT_EQ(h.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(h.rope_theta_local, 1e4f);
  EXPECT_EQ(h.rope_scaling, RopeScalingKind::None);
  EXPECT_FLOAT_EQ(h.query_scale, float(1.0 / std::sqrt(24.0)));
  EXPECT_FLOAT_EQ(h.norm_eps, 1e-6f);
  EXPECT_TRUE(h.tied_output);
  EXPECT_FALSE(h.qkv_bias);
  expect_tensors(m, ts, "model.");
}

// transformers 4's keys (the published Gemma 3 configs): the bases and the pattern by name, and
// the 4B-and-up models' linear scaling of the global layers.
TEST(HfGemma3Reader, Transformers4Keys) {
  const std::string dir = fresh_dir("hf_gemma3_v4");
  json c = text_config();
  c.erase("rope_parameters");
  c.erase("layer_types");
  c["rope_theta"] = 500000.0;
  c["rope_local_base_freq"] = 20000.0;
  c["sliding_window_pattern"] = 3;
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  write_text(dir + "/config.json", c.dump());
  write_safetensors(dir + "/model.safetensors", text_tensors("model."));
  const SourceHyper h = read_ok(dir).hyper;
  EXPECT_FLOAT_EQ(h.rope_theta, 5e5f);
  EXPECT_FLOAT_EQ(h.rope_theta_local, 2e4f);
  EXPECT_EQ(h.sliding_window_pattern, 3u);
  EXPECT_EQ(h.rope_scaling, RopeScalingKind::Linear);
  EXPECT_FLOAT_EQ(h.rope_factor, 8.0f);
}

// model_type gemma3: the text model in text_config, its weights under the multimodal prefix
// (transformers 5's and 4's), the vision tower's and projector's tensors skipped.
TEST(HfGemma3Reader, MultimodalCheckpointReadsItsTextModel) {
  for (const std::string prefix : {"model.language_model.", "language_model.model."}) {
    SCOPED_TRACE(prefix);
    const std::string dir = fresh_dir("hf_gemma3_mm");
    json text = text_config();
    text.erase("tie_word_embeddings");
    json c = {{"model_type", "gemma3"}, {"text_config", text}, {"tie_word_embeddings", true}};
    write_text(dir + "/config.json", c.dump());
    std::vector<Tensor> ts = text_tensors(prefix);
    const std::string vision = prefix == "model.language_model." ? "model." : "";
    ts.push_back(make(vision + "vision_tower.vision_model.embeddings.patch_embedding.weight", {8, 3, 2, 2}, 99));
    ts.push_back(make(vision + "multi_modal_projector.mm_input_projection_weight", {8, kDim}, 98));
    write_safetensors(dir + "/model.safetensors", ts);
    const SourceModel m = read_ok(dir);
    EXPECT_EQ(m.hyper.family, ArchFamily::Gemma3);
    EXPECT_TRUE(m.hyper.tied_output);
    EXPECT_EQ(m.hyper.sliding_window_pattern, 3u);
    expect_tensors(m, ts, prefix);
  }
}

TEST(HfGemma3Reader, RejectsConfigsWithoutWhatGemma3Needs) {
  struct Case {
    json patch;  // null erases the key
    const char* expect;
  };
  json shifted = text_config()["layer_types"];
  shifted[3] = "full_attention";
  const Case cases[] = {
      {{{"query_pre_attn_scalar", nullptr}}, "config.json: missing 'query_pre_attn_scalar'"},
      {{{"sliding_window", nullptr}}, "config.json: missing 'sliding_window'"},
      {{{"head_dim", nullptr}}, "config.json: missing 'head_dim'"},
      {{{"hidden_size", nullptr}}, "config.json: missing 'hidden_size'"},
      {{{"layer_types", nullptr}}, "missing 'layer_types' (or 'sliding_window_pattern')"},
      {{{"final_logit_softcapping", 30.0}}, "'final_logit_softcapping' is 30.0; soft-capping is not supported"},
      {{{"attn_logit_softcapping", 50}}, "'attn_logit_softcapping' is 50; soft-capping is not supported"},
      {{{"hidden_activation", "gelu"}}, "hidden_activation \"gelu\" is not supported"},
      {{{"layer_types", shifted}}, "layer_types[3] is \"full_attention\", expected \"sliding_attention\""},
      {{{"layer_types", {"full_attention"}}}, "expected a list of 6"},
      {{{"layer_types", json::array({"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                                     "sliding_attention", "sliding_attention"})}},
       "layer_types has no \"full_attention\" layer"},
      {{{"query_pre_attn_scalar", 0}}, "query_pre_attn_scalar 0.000000 is out of range"},
      {{{"rope_parameters", {{"full_attention", {{"rope_theta", 1e6}}}}}},
       "rope_parameters has no 'sliding_attention' entry"},
      {{{"rope_parameters",
         {{"full_attention", {{"rope_theta", 1e6}, {"rope_type", "yarn"}}},
          {"sliding_attention", {{"rope_theta", 1e4}, {"rope_type", "default"}}}}}},
       "is not supported (expected llama3 or linear)"},
      {{{"rope_parameters",
         {{"full_attention", {{"rope_theta", 1e6}, {"rope_type", "default"}}},
          {"sliding_attention", {{"rope_theta", 1e4}, {"rope_type", "linear"}, {"factor", 2}}}}}},
       "local layers rotate without scaling"},
      {{{"attention_bias", true}}, "attention_bias true is not supported for gemma3"},
      {{{"use_bidirectional_attention", true}}, "use_bidirectional_attention true"},
  };
  const std::string dir = fresh_dir("hf_gemma3_bad_config");
  write_safetensors(dir + "/model.safetensors", text_tensors("model."));
  for (const Case& c : cases) {
    json cfg = text_config();
    for (const auto& [k, v] : c.patch.items()) {
      if (v.is_null())
        cfg.erase(k);
      else
        cfg[k] = v;
    }
    write_text(dir + "/config.json", cfg.dump());
    const std::string e = read_error(dir);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.patch.dump() << ": " << e;
  }
  // The multimodal config names the text_config's missing key, and a missing text_config.
  json text = text_config();
  text.erase("query_pre_attn_scalar");
  write_text(dir + "/config.json", json{{"model_type", "gemma3"}, {"text_config", text}}.dump());
  std::string e = read_error(dir);
  EXPECT_TRUE(test::mentions(e, {"text_config", "query_pre_attn_scalar"}));
  write_text(dir + "/config.json", json{{"model_type", "gemma3"}}.dump());
  e = read_error(dir);
  EXPECT_TRUE(test::mentions(e, {"gemma3", "text_config"}));
}

TEST(HfGemma3Reader, RejectsMissingAndMisshapenGemmaTensors) {
  const std::string dir = fresh_dir("hf_gemma3_bad_tensors");
  write_text(dir + "/config.json", text_config().dump());
  std::vector<Tensor> ts = text_tensors("model.");
  std::vector<Tensor> without;
  for (const Tensor& t : ts)
    if (t.name != "model.layers.4.post_feedforward_layernorm.weight") without.push_back(t);
  write_safetensors(dir + "/model.safetensors", without);
  std::string e = read_error(dir);
  EXPECT_TRUE(test::mentions(e, {"missing", "model.layers.4.post_feedforward_layernorm.weight"}));

  for (Tensor& t : ts)
    if (t.name == "model.layers.2.self_attn.k_norm.weight") t = make(t.name, {kDim}, 7);
  write_safetensors(dir + "/model.safetensors", ts);
  e = read_error(dir);
  EXPECT_TRUE(test::mentions(e, {"model.layers.2.self_attn.k_norm.weight", "[64]", "[32]"}));

  ts = text_tensors("model.");
  ts.push_back(make("model.layers.0.self_attn.q_proj.bias", {kHeads * kHeadDim}, 5));
  write_safetensors(dir + "/model.safetensors", ts);
  e = read_error(dir);
  EXPECT_TRUE(test::mentions(e, {"model.layers.0.self_attn.q_proj.bias", "attention bias"}));
}

}  // namespace
}  // namespace keel::convert
