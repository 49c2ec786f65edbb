// config.json: model_type picks the architecture (llama, mistral and qwen2 share one reading;
// gemma3_text has its own, and gemma3 is its text_config); every count is checked against a
// bound and every value's type before it is used. RoPE is RopeStyle::Halves for all of them: the
// weights keep Hugging Face's q/k layout (hf_tensors.cpp).
#include "convert/hf_config.h"

#include <cmath>
#include <string>

namespace keel::convert::hf {
namespace {

// Bounds far above any supported model; they keep every product below 2^64 and every
// allocation driven by a file's claims reasonable.
constexpr uint64_t kMaxDim = 1 << 16;
constexpr uint64_t kMaxFfn = 1 << 20;
constexpr uint64_t kMaxLayers = 1 << 10;
constexpr uint64_t kMaxHeads = 1 << 10;
constexpr uint64_t kMaxVocab = 1 << 22;
constexpr uint64_t kMaxContext = 1 << 28;

struct ConfigReader {
  const json& c;
  std::string& error;

  bool fail(const std::string& what) {
    error = "config.json: " + what;
    return false;
  }
  bool count(const char* key, bool required, uint64_t def, uint64_t max, uint32_t& out) {
    const json* v = member(c, key);
    uint64_t x = def;
    if (!v) {
      if (required) return fail(std::string("missing '") + key + "'");
    } else if (!as_u64(*v, x)) {
      return fail(std::string("'") + key + "' is " + short_dump(*v) + ", expected a non-negative integer");
    }
    if (x == 0 || x > max)
      return fail(std::string("'") + key + "' = " + std::to_string(x) + " is out of range (1.." + std::to_string(max) +
                  ")");
    out = uint32_t(x);
    return true;
  }
  bool real(const json& obj, const char* key, bool required, double def, double& out) {
    const json* v = member(obj, key);
    out = def;
    if (!v) return required ? fail(std::string("missing '") + key + "'") : true;
    if (!v->is_number()) return fail(std::string("'") + key + "' is " + short_dump(*v) + ", expected a number");
    out = v->get<double>();
    return true;
  }
  bool flag(const char* key, bool def, bool& out) {
    const json* v = member(c, key);
    out = def;
    if (!v) return true;
    if (!v->is_boolean()) return fail(std::string("'") + key + "' is " + short_dump(*v) + ", expected true or false");
    out = v->get<bool>();
    return true;
  }
  // An id, a list of ids (the first is taken) or null.
  bool token_id(const char* key, int64_t& out) {
    const json* v = member(c, key);
    if (!v) return true;
    const json* first = v;
    if (v->is_array()) {
      if (v->empty()) return true;
      first = &(*v)[0];
    }
    uint64_t x;
    if (!as_u64(*first, x) || x >= kMaxVocab)
      return fail(std::string("'") + key + "' is " + short_dump(*v) + ", expected a token id");
    out = int64_t(x);
    return true;
  }
};

// rope_scaling (or one entry of rope_parameters): linear or llama3; "default" is none.
bool parse_rope_scaling(ConfigReader& r, const json& rs, SourceHyper& h) {
  if (!rs.is_object()) return r.fail("rope_scaling is " + short_dump(rs) + ", expected an object");
  const json* type = member(rs, "rope_type");
  if (!type) type = member(rs, "type");
  const std::string kind = type && type->is_string() ? type->get<std::string>() : std::string();
  if (kind == "llama3") {
    double factor, low, high, orig;
    if (!r.real(rs, "factor", true, 0, factor) || !r.real(rs, "low_freq_factor", true, 0, low) ||
        !r.real(rs, "high_freq_factor", true, 0, high) ||
        !r.real(rs, "original_max_position_embeddings", true, 0, orig))
      return false;
    if (!(factor >= 1 && factor < 1e6) || !(low > 0) || !(high > low) || !(orig >= 1 && orig <= kMaxContext))
      return r.fail("llama3 rope_scaling " + short_dump(rs) + " is out of range");
    h.rope_scaling = RopeScalingKind::Llama3;
    h.rope_factor = float(factor);
    h.rope_low_freq_factor = float(low);
    h.rope_high_freq_factor = float(high);
    h.rope_original_context = uint32_t(orig);
  } else if (kind == "linear") {
    double factor;
    if (!r.real(rs, "factor", true, 0, factor)) return false;
    if (!(factor > 0 && factor < 1e6)) return r.fail("linear rope_scaling factor is out of range");
    h.rope_scaling = RopeScalingKind::Linear;
    h.rope_factor = float(factor);
  } else if (kind != "default") {
    return r.fail("rope_scaling " + short_dump(rs) + " is not supported (expected llama3 or linear)");
  }
  return true;
}

// The counts every supported architecture states the same way.
bool parse_counts(ConfigReader& r, const json& c, SourceHyper& h, bool head_dim_required) {
  if (!r.count("hidden_size", true, 0, kMaxDim, h.dim) || !r.count("intermediate_size", true, 0, kMaxFfn, h.ffn_dim) ||
      !r.count("num_hidden_layers", true, 0, kMaxLayers, h.n_layers) ||
      !r.count("num_attention_heads", true, 0, kMaxHeads, h.n_heads) ||
      !r.count("num_key_value_heads", false, h.n_heads, kMaxHeads, h.n_kv_heads) ||
      !r.count("head_dim", head_dim_required, h.dim / h.n_heads, kMaxDim, h.head_dim) ||
      !r.count("vocab_size", true, 0, kMaxVocab, h.vocab_size) ||
      !r.count("max_position_embeddings", true, 0, kMaxContext, h.context_length))
    return false;
  if (!member(c, "head_dim") && h.dim % h.n_heads != 0)
    return r.fail("hidden_size " + std::to_string(h.dim) + " is not a multiple of num_attention_heads " +
                  std::to_string(h.n_heads) + " and no head_dim is given");
  if (h.head_dim % 2 != 0) return r.fail("head_dim " + std::to_string(h.head_dim) + " is odd");
  if (h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0)
    return r.fail("num_attention_heads " + std::to_string(h.n_heads) + " is not a multiple of num_key_value_heads " +
                  std::to_string(h.n_kv_heads));
  h.rope_dim = h.head_dim;
  return true;
}

bool parse_llama_config(const json& c, const std::string& model_type, SourceHyper& h, ConfigIds& ids,
                        std::string& error) {
  ConfigReader r{c, error};
  // Mistral is the llama architecture (its sliding window is handled below).
  h.arch_name = model_type == "qwen2" ? "qwen2" : "llama";

  if (const json* act = member(c, "hidden_act"); act && *act != "silu")
    return r.fail("hidden_act " + short_dump(*act) + " is not supported (expected \"silu\")");
  if (const json* mlp_bias = member(c, "mlp_bias"); mlp_bias && *mlp_bias == true)
    return r.fail("mlp_bias true is not supported");
  if (const json* prf = member(c, "partial_rotary_factor"); prf && *prf != 1 && *prf != 1.0)
    return r.fail("partial_rotary_factor " + short_dump(*prf) + " is not supported (expected 1)");

  if (!parse_counts(r, c, h, false)) return false;

  // transformers' defaults for these three architectures.
  double eps, theta;
  if (!r.real(c, "rms_norm_eps", false, 1e-6, eps) || !r.real(c, "rope_theta", false, 10000.0, theta)) return false;
  if (!(eps > 0 && eps < 1)) return r.fail("rms_norm_eps " + std::to_string(eps) + " is out of range");
  if (!(theta > 0 && theta < 1e12)) return r.fail("rope_theta " + std::to_string(theta) + " is out of range");
  h.norm_eps = float(eps);
  h.rope_theta = float(theta);
  h.rope_style = RopeStyle::Halves;

  if (const json* rs = member(c, "rope_scaling"); rs && !parse_rope_scaling(r, *rs, h)) return false;

  bool attention_bias = false;
  if (!r.flag("attention_bias", false, attention_bias) || !r.flag("tie_word_embeddings", false, h.tied_output))
    return false;
  h.qkv_bias = model_type == "qwen2" || attention_bias;  // Qwen2 always has q/k/v biases

  bool sliding = false;
  if (!r.flag("use_sliding_window", false, sliding)) return false;
  if (model_type == "qwen2" && sliding) return r.fail("use_sliding_window true is not supported");
  if (model_type == "mistral") {
    // Attention restricted to a window equals full attention while the sequence fits in it,
    // so the window is the context this model can be run at exactly.
    uint64_t window;
    if (const json* sw = member(c, "sliding_window");
        sw && as_u64(*sw, window) && window > 0 && window < h.context_length)
      h.context_length = uint32_t(window);
  }

  if (!r.token_id("bos_token_id", ids.bos) || !r.token_id("eos_token_id", ids.eos) ||
      !r.token_id("pad_token_id", ids.pad))
    return false;
  return true;
}

// Gemma 3's text model: model_type "gemma3_text", or "gemma3" (the multimodal checkpoint) whose
// text_config holds it. Attention is local (sliding window) on every layer but each
// sliding_window_pattern-th, which is global; layer_types spells the same out per layer and
// must follow that pattern (the only one the engine plans for). RoPE bases: rope_theta for
// global layers (with rope_scaling, if any), rope_local_base_freq for local ones. transformers
// 5 states both as rope_parameters {full_attention: {...}, sliding_attention: {...}}.
bool parse_gemma3_config(const json& c, SourceHyper& h, ConfigIds& ids, std::string& error) {
  ConfigReader r{c, error};
  h.arch_name = "gemma3";
  h.family = ArchFamily::Gemma3;
  h.rope_style = RopeStyle::Halves;

  const json* act = member(c, "hidden_activation");
  if (!act) act = member(c, "hidden_act");
  if (act && *act != "gelu_pytorch_tanh")
    return r.fail("hidden_activation " + short_dump(*act) + " is not supported (expected \"gelu_pytorch_tanh\")");
  // Gemma 2 capped logits with tanh; Gemma 3's configs leave both caps null.
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (const json* v = member(c, cap))
      return r.fail(std::string("'") + cap + "' is " + short_dump(*v) +
                    "; soft-capping is not supported (expected null)");
  }
  if (const json* bidi = member(c, "use_bidirectional_attention"); bidi && *bidi == true)
    return r.fail("use_bidirectional_attention true (an embedding model) is not supported");
  bool attention_bias = false;
  if (!r.flag("attention_bias", false, attention_bias)) return false;
  if (attention_bias) return r.fail("attention_bias true is not supported for gemma3");

  if (!parse_counts(r, c, h, true)) return false;
  double eps, scalar;
  if (!r.real(c, "rms_norm_eps", false, 1e-6, eps) || !r.real(c, "query_pre_attn_scalar", true, 0, scalar))
    return false;
  if (!(eps > 0 && eps < 1)) return r.fail("rms_norm_eps " + std::to_string(eps) + " is out of range");
  if (!(scalar >= 1 && scalar < 1e9))
    return r.fail("query_pre_attn_scalar " + std::to_string(scalar) + " is out of range (expected >= 1)");
  h.norm_eps = float(eps);
  h.query_scale = float(1.0 / std::sqrt(scalar));

  if (!r.count("sliding_window", true, 0, kMaxContext, h.sliding_window)) return false;
  if (const json* types = member(c, "layer_types")) {
    if (!types->is_array() || types->size() != h.n_layers)
      return r.fail("layer_types is " + short_dump(*types) + ", expected a list of " + std::to_string(h.n_layers) +
                    " \"sliding_attention\" / \"full_attention\" entries");
    uint32_t first_global = 0;
    while (first_global < h.n_layers && (*types)[first_global] == "sliding_attention") ++first_global;
    if (first_global == h.n_layers) return r.fail("layer_types has no \"full_attention\" layer");
    h.sliding_window_pattern = first_global + 1;
    for (uint32_t l = 0; l < h.n_layers; ++l) {
      const bool global = (l + 1) % h.sliding_window_pattern == 0;
      if ((*types)[l] != (global ? "full_attention" : "sliding_attention"))
        return r.fail("layer_types[" + std::to_string(l) + "] is " + short_dump((*types)[l]) + ", expected \"" +
                      (global ? "full_attention" : "sliding_attention") + "\" (every " +
                      std::to_string(h.sliding_window_pattern) + "th layer global is the supported pattern)");
    }
  } else if (member(c, "sliding_window_pattern")) {
    if (!r.count("sliding_window_pattern", true, 0, kMaxLayers, h.sliding_window_pattern)) return false;
  } else {
    return r.fail("missing 'layer_types' (or 'sliding_window_pattern'): which layers attend globally");
  }

  double theta = 1e6, theta_local = 1e4;
  if (const json* rp = member(c, "rope_parameters"); rp && member(*rp, "full_attention")) {
    const json* full = member(*rp, "full_attention");
    const json* local = member(*rp, "sliding_attention");
    if (!local) return r.fail("rope_parameters has no 'sliding_attention' entry");
    if (!r.real(*full, "rope_theta", true, 0, theta) || !r.real(*local, "rope_theta", true, 0, theta_local) ||
        !parse_rope_scaling(r, *full, h))
      return false;
    const json* local_type = member(*local, "rope_type");
    if (local_type && *local_type != "default")
      return r.fail("rope_parameters.sliding_attention " + short_dump(*local) +
                    " is not supported (local layers rotate without scaling)");
  } else {
    if (!r.real(c, "rope_theta", false, 1e6, theta) || !r.real(c, "rope_local_base_freq", false, 1e4, theta_local))
      return false;
    if (const json* rs = member(c, "rope_scaling"); rs && !parse_rope_scaling(r, *rs, h)) return false;
  }
  if (!(theta > 0 && theta < 1e12)) return r.fail("rope_theta " + std::to_string(theta) + " is out of range");
  if (!(theta_local > 0 && theta_local < 1e12))
    return r.fail("rope_local_base_freq " + std::to_string(theta_local) + " is out of range");
  h.rope_theta = float(theta);
  h.rope_theta_local = float(theta_local);

  if (!r.flag("tie_word_embeddings", true, h.tied_output)) return false;
  return r.token_id("bos_token_id", ids.bos) && r.token_id("eos_token_id", ids.eos) &&
         r.token_id("pad_token_id", ids.pad);
}

}  // namespace

bool parse_config(const json& c, SourceHyper& h, ConfigIds& ids, std::string& error) {
  ConfigReader r{c, error};
  if (!c.is_object()) return r.fail("expected a JSON object");
  const json* mt = member(c, "model_type");
  if (!mt || !mt->is_string()) return r.fail("missing 'model_type'");
  const std::string model_type = mt->get<std::string>();
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2")
    return parse_llama_config(c, model_type, h, ids, error);
  if (model_type == "gemma3_text") return parse_gemma3_config(c, h, ids, error);
  if (model_type == "gemma3") {
    const json* text = member(c, "text_config");
    if (!text || !text->is_object()) return r.fail("model_type gemma3 without a 'text_config' object");
    // The outer config may state what the text one leaves to its defaults.
    json merged = *text;
    for (const char* key : {"tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"})
      if (const json* v = member(c, key); v && !member(merged, key)) merged[key] = *v;
    if (!parse_gemma3_config(merged, h, ids, error)) {
      error = "config.json: text_config: " + error.substr(std::string("config.json: ").size());
      return false;
    }
    return true;
  }
  return r.fail("model_type '" + model_type +
                "' is not supported (expected llama, mistral, qwen2, gemma3_text or gemma3)");
}

}  // namespace keel::convert::hf
