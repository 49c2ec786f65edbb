// Reader for a Hugging Face model directory: config.json (llama, mistral, qwen2, gemma3_text,
// gemma3), safetensors weights (one file, an index with shards, or every *.safetensors in the
// directory), tokenizer.json and, when present, tokenizer_config.json / chat_template.jinja.
//
// Safetensors: u64 little-endian header length N, N bytes of JSON
//   {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data; offsets are relative to the first byte after the header.
//
// Weights keep Hugging Face's layout: q/k rows are not permuted, so rotary pairs are
// (i, i + head_dim / 2) (RopeStyle::Halves, the rotate_half convention).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "convert/source_file.h"
#include "convert/source_model.h"

namespace keel::convert {
namespace {

using json = nlohmann::json;

// Bounds far above any supported model; they keep every product below 2^64 and every
// allocation driven by a file's claims reasonable.
constexpr uint64_t kMaxDim = 1 << 16;
constexpr uint64_t kMaxFfn = 1 << 20;
constexpr uint64_t kMaxLayers = 1 << 10;
constexpr uint64_t kMaxHeads = 1 << 10;
constexpr uint64_t kMaxVocab = 1 << 22;
constexpr uint64_t kMaxContext = 1 << 28;
constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;  // the safetensors format's own limit
constexpr uint64_t kMaxJsonFile = 512u << 20;

// keel.fb.TokenType (GGUF numbering).
constexpr uint8_t kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5, kTokByte = 6;

const char* const kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's word marker

bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

bool parse_json_file(const std::string& path, json& out, std::string& error) {
  std::string text;
  if (!read_file(path, text, error, kMaxJsonFile)) return false;
  out = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) {
    error = "'" + path + "' is not valid JSON";
    return false;
  }
  return true;
}

// obj[key] when obj is an object holding a non-null key, else nullptr.
const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

std::string short_dump(const json& v) {
  std::string s = v.dump();
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

// ---------------------------------------------------------------------------------------------
// config.json

struct ConfigIds {
  int64_t bos = -1, eos = -1, pad = -1;
};

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

// ---------------------------------------------------------------------------------------------
// safetensors

struct StTensor {
  std::string name;
  SrcType type = SrcType::F32;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // absolute, in `file`
  uint64_t n_bytes = 0;
  std::shared_ptr<OpenFile> file;
};

bool read_safetensors(const std::string& path, std::vector<StTensor>& out, std::string& error) {
  auto f = open_file(path, error);
  if (!f) return false;
  auto fail = [&](const std::string& what) {
    error = "safetensors '" + path + "': " + what;
    return false;
  };
  if (f->size < 8) return fail("truncated: " + std::to_string(f->size) + " bytes, the header length needs 8");
  uint8_t b8[8];
  if (!read_at(*f, b8, 8, 0, error)) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b8[i];
  if (n < 2 || n > f->size - 8 || n > kMaxSafetensorsHeader)
    return fail("header length " + std::to_string(n) + " is invalid (file has " + std::to_string(f->size) +
                " bytes; the header must fit after the 8-byte length and " + "be at most " +
                std::to_string(kMaxSafetensorsHeader) + ")");
  std::string text(n, '\0');
  if (!read_at(*f, text.data(), n, 8, error)) return false;
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return fail("header is not a JSON object");
  const uint64_t data_start = 8 + n, data_size = f->size - data_start;

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string& tensor = name;  // clang 14 cannot capture a structured binding
    auto bad = [&](const std::string& what) { return fail("tensor '" + tensor + "': " + what); };
    const json* dtype = member(info, "dtype");
    const json* shape = member(info, "shape");
    const json* offsets = member(info, "data_offsets");
    if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offsets || !offsets->is_array() ||
        offsets->size() != 2)
      return bad("expected {dtype, shape, data_offsets: [begin, end]}, found " + short_dump(info));
    StTensor t;
    t.name = name;
    uint64_t elem_bytes;
    const std::string dt = dtype->get<std::string>();
    if (dt == "F32") {
      t.type = SrcType::F32;
      elem_bytes = 4;
    } else if (dt == "F16") {
      t.type = SrcType::F16;
      elem_bytes = 2;
    } else if (dt == "BF16") {
      t.type = SrcType::BF16;
      elem_bytes = 2;
    } else {
      return bad("dtype " + dt + " is not supported (expected F32, F16 or BF16)");
    }
    uint64_t numel = 1;
    for (const json& d : *shape) {
      uint64_t x;
      if (!as_u64(d, x) || x > (uint64_t(1) << 40) || __builtin_mul_overflow(numel, x, &numel) ||
          numel > (uint64_t(1) << 48))
        return bad("shape " + short_dump(*shape) + " is invalid");
      t.shape.push_back(x);
    }
    uint64_t begin, end;
    if (!as_u64((*offsets)[0], begin) || !as_u64((*offsets)[1], end) || begin > end)
      return bad("data_offsets " + short_dump(*offsets) + " are invalid");
    if (end > data_size)
      return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] pass the end of the data (" + std::to_string(data_size) + " bytes)");
    if (end - begin != numel * elem_bytes)
      return bad(std::to_string(end - begin) + " data bytes, but " + dt + " " + short_dump(*shape) + " needs " +
                 std::to_string(numel * elem_bytes));
    t.offset = data_start + begin;
    t.n_bytes = end - begin;
    t.file = f;
    out.push_back(std::move(t));
  }
  return true;
}

bool plain_file_name(const std::string& s) {
  return !s.empty() && s.find('/') == std::string::npos && s != "." && s != "..";
}

bool read_weights(const std::string& dir, std::vector<StTensor>& tensors, std::string& what, std::string& error) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  if (is_file(index_path)) {
    json index;
    if (!parse_json_file(index_path, index, error)) return false;
    const json* wm = member(index, "weight_map");
    if (!wm || !wm->is_object()) {
      error = "'" + index_path + "': missing 'weight_map' object";
      return false;
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : wm->items()) {
      if (!file.is_string() || !plain_file_name(file.get<std::string>())) {
        error = "'" + index_path + "': tensor '" + name + "' maps to " + short_dump(file) +
                ", expected a file name in the same directory";
        return false;
      }
      weight_map[name] = file.get<std::string>();
      shards.insert(file.get<std::string>());
    }
    files.assign(shards.begin(), shards.end());
    what = "model.safetensors.index.json, " + std::to_string(files.size()) + " shards";
  } else if (is_file(dir + "/model.safetensors")) {
    files.push_back("model.safetensors");
    what = "model.safetensors";
  } else {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0 && is_file(e.path().string()))
        files.push_back(name);
    }
    std::sort(files.begin(), files.end());
    what = std::to_string(files.size()) + " *.safetensors files";
  }
  if (files.empty()) {
    error = "no weights in '" + dir + "' (expected model.safetensors, model.safetensors.index.json or *.safetensors)";
    return false;
  }
  std::map<std::string, std::string> seen;  // tensor -> file
  for (const std::string& file : files) {
    std::vector<StTensor> part;
    if (!read_safetensors(dir + "/" + file, part, error)) return false;
    for (StTensor& t : part) {
      auto [it, fresh] = seen.emplace(t.name, file);
      if (!fresh) {
        error = "tensor '" + t.name + "' is in both '" + it->second + "' and '" + file + "'";
        return false;
      }
      tensors.push_back(std::move(t));
    }
  }
  for (const auto& [name, file] : weight_map) {
    auto it = seen.find(name);
    if (it == seen.end() || it->second != file) {
      error = "model.safetensors.index.json places '" + name + "' in '" + file + "', which does not hold it";
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Tensor names

enum class NameKind { Mapped, Ignored, Unknown };

struct Canonical {
  std::string name;
  Role role = Role::TokenEmbedding;
  int layer = -1;
};

// Gemma 3's block tensors where they differ from llama's: its post_attention_layernorm follows
// the attention output (llama's is the FFN's input norm, Gemma's pre_feedforward_layernorm).
const std::pair<const char*, std::pair<const char*, Role>> kGemma3Block[] = {
    {"self_attn.q_norm.weight", {"attn_q_norm.weight", Role::AttnQNorm}},
    {"self_attn.k_norm.weight", {"attn_k_norm.weight", Role::AttnKNorm}},
    {"post_attention_layernorm.weight", {"post_attention_norm.weight", Role::PostAttnNorm}},
    {"pre_feedforward_layernorm.weight", {"ffn_norm.weight", Role::FfnNorm}},
    {"post_feedforward_layernorm.weight", {"post_ffw_norm.weight", Role::PostFfnNorm}},
};

// A multimodal gemma3 checkpoint's text model under its name as transformers 5 ("model.
// language_model.") or 4 ("language_model.model.") saves it; its vision parts are not read.
NameKind strip_multimodal_prefix(std::string& hf) {
  for (const char* part :
       {"model.vision_tower.", "model.multi_modal_projector.", "vision_tower.", "multi_modal_projector."})
    if (hf.rfind(part, 0) == 0) return NameKind::Ignored;
  for (const char* prefix : {"model.language_model.", "language_model.model."}) {
    const std::string p = prefix;
    if (hf.rfind(p, 0) == 0) {
      hf = "model." + hf.substr(p.size());
      return NameKind::Mapped;
    }
  }
  if (hf == "language_model.lm_head.weight") hf = "lm_head.weight";
  return NameKind::Mapped;
}

NameKind canonical_name(std::string hf, bool gemma3, Canonical& out) {
  if (gemma3 && strip_multimodal_prefix(hf) == NameKind::Ignored) return NameKind::Ignored;
  static const std::pair<const char*, std::pair<const char*, Role>> kTop[] = {
      {"model.embed_tokens.weight", {"token_embd.weight", Role::TokenEmbedding}},
      {"model.norm.weight", {"output_norm.weight", Role::OutputNorm}},
      {"lm_head.weight", {"output.weight", Role::Output}},
  };
  static const std::pair<const char*, std::pair<const char*, Role>> kBlock[] = {
      {"input_layernorm.weight", {"attn_norm.weight", Role::AttnNorm}},
      {"self_attn.q_proj.weight", {"attn_q.weight", Role::Wq}},
      {"self_attn.k_proj.weight", {"attn_k.weight", Role::Wk}},
      {"self_attn.v_proj.weight", {"attn_v.weight", Role::Wv}},
      {"self_attn.o_proj.weight", {"attn_output.weight", Role::Wo}},
      {"self_attn.q_proj.bias", {"attn_q.bias", Role::Bq}},
      {"self_attn.k_proj.bias", {"attn_k.bias", Role::Bk}},
      {"self_attn.v_proj.bias", {"attn_v.bias", Role::Bv}},
      {"post_attention_layernorm.weight", {"ffn_norm.weight", Role::FfnNorm}},
      {"mlp.gate_proj.weight", {"ffn_gate.weight", Role::FfnGate}},
      {"mlp.up_proj.weight", {"ffn_up.weight", Role::FfnUp}},
      {"mlp.down_proj.weight", {"ffn_down.weight", Role::FfnDown}},
  };
  static const std::string kInvFreq = ".rotary_emb.inv_freq";
  if (hf.size() >= kInvFreq.size() && hf.compare(hf.size() - kInvFreq.size(), kInvFreq.size(), kInvFreq) == 0)
    return NameKind::Ignored;
  for (const auto& [from, to] : kTop) {
    if (hf == from) {
      out = {to.first, to.second, -1};
      return NameKind::Mapped;
    }
  }
  static const std::string kLayers = "model.layers.";
  if (hf.compare(0, kLayers.size(), kLayers) != 0) return NameKind::Unknown;
  size_t p = kLayers.size(), digits = 0;
  uint64_t layer = 0;
  while (p < hf.size() && hf[p] >= '0' && hf[p] <= '9' && digits < 6) {
    layer = layer * 10 + uint64_t(hf[p] - '0');
    ++p;
    ++digits;
  }
  if (digits == 0 || p >= hf.size() || hf[p] != '.' || (digits > 1 && hf[kLayers.size()] == '0'))
    return NameKind::Unknown;
  const std::string rest = hf.substr(p + 1);
  if (gemma3) {
    for (const auto& [from, to] : kGemma3Block) {
      if (rest == from) {
        out = {"blk." + std::to_string(layer) + "." + to.first, to.second, int(layer)};
        return NameKind::Mapped;
      }
    }
  }
  for (const auto& [from, to] : kBlock) {
    if (rest == from) {
      out = {"blk." + std::to_string(layer) + "." + to.first, to.second, int(layer)};
      return NameKind::Mapped;
    }
  }
  return NameKind::Unknown;
}

std::vector<uint64_t> expected_shape(Role role, const SourceHyper& h) {
  const uint64_t dim = h.dim, q = uint64_t(h.n_heads) * h.head_dim, kv = uint64_t(h.n_kv_heads) * h.head_dim;
  switch (role) {
    case Role::TokenEmbedding:
    case Role::Output: return {h.vocab_size, dim};
    case Role::AttnNorm:
    case Role::FfnNorm:
    case Role::OutputNorm: return {dim};
    case Role::Wq: return {q, dim};
    case Role::Wk:
    case Role::Wv: return {kv, dim};
    case Role::Wo: return {dim, q};
    case Role::Bq: return {q};
    case Role::Bk:
    case Role::Bv: return {kv};
    case Role::FfnGate:
    case Role::FfnUp: return {h.ffn_dim, dim};
    case Role::FfnDown: return {dim, h.ffn_dim};
    case Role::AttnQNorm:
    case Role::AttnKNorm: return {h.head_dim};
    case Role::PostAttnNorm:
    case Role::PostFfnNorm: return {dim};
  }
  return {};
}

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Position of a tensor in the canonical order: embedding, blocks in forward order, final
// norm, classifier.
std::pair<int, int> order_key(const Canonical& c, int n_layers) {
  static const Role kBlockOrder[] = {Role::AttnNorm,  Role::Wq,      Role::Bq,           Role::Wk,
                                     Role::Bk,        Role::Wv,      Role::Bv,           Role::AttnQNorm,
                                     Role::AttnKNorm, Role::Wo,      Role::FfnNorm,      Role::FfnGate,
                                     Role::FfnUp,     Role::FfnDown, Role::PostAttnNorm, Role::PostFfnNorm};
  constexpr int kRoles = int(sizeof kBlockOrder / sizeof kBlockOrder[0]);
  if (c.role == Role::TokenEmbedding) return {-1, 0};
  if (c.role == Role::OutputNorm) return {n_layers, 0};
  if (c.role == Role::Output) return {n_layers, 1};
  int r = 0;
  while (r < kRoles && kBlockOrder[r] != c.role) ++r;
  return {c.layer, r};
}

bool is_norm(Role r) {
  return r == Role::AttnNorm || r == Role::FfnNorm || r == Role::OutputNorm || r == Role::AttnQNorm ||
         r == Role::AttnKNorm || r == Role::PostAttnNorm || r == Role::PostFfnNorm;
}

// Gemma's RMSNorm multiplies by (1 + w) and its checkpoints store w; the engine multiplies by
// the stored weight (GGUF files have the 1 added by their converter), so the reader adds it,
// in f32 as transformers does: the tensor becomes F32 whatever the file's type.
void unit_offset_norm(SourceTensor& t, std::shared_ptr<OpenFile> file, uint64_t offset) {
  const SrcType type = t.type;
  const uint64_t raw_bytes = t.n_bytes, n = t.shape[0];
  t.type = SrcType::F32;
  t.n_bytes = 4 * n;
  auto read_f32 = [file, offset, type, raw_bytes, n](std::vector<float>& out, std::string& err) {
    std::vector<uint8_t> raw(raw_bytes);
    if (!read_at(*file, raw.data(), raw_bytes, offset, err)) return false;
    out.resize(n);
    if (!dequantize(type, raw.data(), raw.size(), out.data(), n)) {
      err = "norm weights do not decode";
      return false;
    }
    for (float& x : out) x += 1.0f;
    return true;
  };
  t.read = [read_f32](std::vector<uint8_t>& out, std::string& err) {
    std::vector<float> v;
    if (!read_f32(v, err)) return false;
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return true;
  };
  t.read_range = [read_f32, n](uint64_t off, uint64_t len, uint8_t* out, std::string& err) {
    if (off > 4 * n || len > 4 * n - off) {
      err = "tensor range outside its bytes";
      return false;
    }
    std::vector<float> v;
    if (!read_f32(v, err)) return false;
    std::memcpy(out, reinterpret_cast<const uint8_t*>(v.data()) + off, len);
    return true;
  };
}

bool build_tensors(std::vector<StTensor>& st, SourceModel& m, std::string& error) {
  const SourceHyper& h = m.hyper;
  const bool gemma3 = h.family == ArchFamily::Gemma3;
  struct Entry {
    Canonical c;
    StTensor* t;
  };
  std::vector<Entry> entries;
  std::map<std::string, std::string> seen;  // canonical -> hf name
  for (StTensor& t : st) {
    Canonical c;
    const NameKind kind = canonical_name(t.name, gemma3, c);
    if (kind == NameKind::Ignored) continue;
    if (kind == NameKind::Unknown) {
      error = "tensor '" + t.name + "' is not a known " + (gemma3 ? "gemma3" : "llama/mistral/qwen2") + " tensor name";
      return false;
    }
    if (c.layer >= int(h.n_layers)) {
      error = "tensor '" + t.name + "' names layer " + std::to_string(c.layer) + ", but config.json has " +
              std::to_string(h.n_layers) + " layers";
      return false;
    }
    if ((c.role == Role::Bq || c.role == Role::Bk || c.role == Role::Bv) && !h.qkv_bias) {
      error = "tensor '" + t.name + "' is a bias, but config.json declares no attention bias";
      return false;
    }
    // A tied model may still ship the classifier (a copy of the embedding): drop it.
    if (c.role == Role::Output && h.tied_output) continue;
    const std::vector<uint64_t> want = expected_shape(c.role, h);
    if (t.shape != want) {
      error = "tensor '" + t.name + "' has shape " + shape_text(t.shape) + ", config.json implies " + shape_text(want);
      return false;
    }
    if (!seen.emplace(c.name, t.name).second) {
      error = "tensor '" + t.name + "' maps to '" + c.name + "', which '" + seen[c.name] + "' already gave";
      return false;
    }
    entries.push_back({c, &t});
  }

  // Every required tensor present.
  std::vector<std::pair<std::string, std::string>> required = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                               {"output_norm.weight", "model.norm.weight"}};
  if (!h.tied_output) required.push_back({"output.weight", "lm_head.weight (tie_word_embeddings is false)"});
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".", hb = "model.layers." + std::to_string(l) + ".";
    std::vector<std::pair<const char*, const char*>> names = {
        {"attn_norm.weight", "input_layernorm.weight"},    {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},      {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},           {"ffn_down.weight", "mlp.down_proj.weight"}};
    if (gemma3) {
      for (const auto& [hf, to] : kGemma3Block) names.push_back({to.first, hf});
    } else {
      names.push_back({"ffn_norm.weight", "post_attention_layernorm.weight"});
    }
    if (h.qkv_bias) {
      names.push_back({"attn_q.bias", "self_attn.q_proj.bias"});
      names.push_back({"attn_k.bias", "self_attn.k_proj.bias"});
      names.push_back({"attn_v.bias", "self_attn.v_proj.bias"});
    }
    for (const auto& [k, hf] : names) required.push_back({b + k, hb + hf});
  }
  for (const auto& [canon, hf] : required) {
    if (!seen.count(canon)) {
      error = "missing tensor " + hf;
      return false;
    }
  }

  std::stable_sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
    return order_key(a.c, int(h.n_layers)) < order_key(b.c, int(h.n_layers));
  });
  for (const Entry& e : entries) {
    SourceTensor t;
    t.name = e.c.name;
    t.role = e.c.role;
    t.layer = e.c.layer;
    t.shape = e.t->shape;
    t.type = e.t->type;
    t.n_bytes = e.t->n_bytes;
    auto file = e.t->file;
    const uint64_t offset = e.t->offset, n = e.t->n_bytes;
    if (gemma3 && is_norm(e.c.role)) {
      unit_offset_norm(t, file, offset);
      m.tensors.push_back(std::move(t));
      continue;
    }
    t.read = [file, offset, n](std::vector<uint8_t>& out, std::string& err) {
      out.resize(n);
      return read_at(*file, out.data(), n, offset, err);
    };
    t.read_range = [file, offset, n](uint64_t off, uint64_t len, uint8_t* out, std::string& err) {
      if (off > n || len > n - off) {
        err = "tensor range outside its bytes";
        return false;
      }
      return read_at(*file, out, len, offset + off, err);
    };
    m.tensors.push_back(std::move(t));
  }
  std::set<const OpenFile*> kept;
  for (const StTensor& t : st) {
    if (kept.insert(t.file.get()).second) m.keep_alive.push_back(t.file);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json

bool is_type(const json* v, const char* type) {
  const json* t = v ? member(*v, "type") : nullptr;
  return t && *t == type;
}

// The pre-tokenizers of `pre` as a flat list (a Sequence is expanded, one level).
std::vector<const json*> pre_tokenizers(const json* pre) {
  std::vector<const json*> out;
  if (!pre) return out;
  if (is_type(pre, "Sequence")) {
    if (const json* list = member(*pre, "pretokenizers"); list && list->is_array())
      for (const json& p : *list) out.push_back(&p);
  } else {
    out.push_back(pre);
  }
  return out;
}

bool contains_type(const json* v, const char* type, const char* list_key) {
  if (!v) return false;
  if (is_type(v, type)) return true;
  if (const json* list = member(*v, list_key); list && list->is_array())
    for (const json& p : *list)
      if (is_type(&p, type)) return true;
  return false;
}

std::string split_regex(const json& p) {
  const json* pat = member(p, "pattern");
  const json* re = pat ? member(*pat, "Regex") : nullptr;
  return re && re->is_string() ? re->get<std::string>() : std::string();
}

bool classify_byte_level(const json* pre, PreTokenizer& out, std::string& error) {
  static const char* const kContractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const std::vector<const json*> parts = pre_tokenizers(pre);
  bool byte_level = false, digits = false;
  std::vector<std::string> regexes;
  std::string found;
  for (const json* p : parts) {
    const json* t = member(*p, "type");
    found += (found.empty() ? "" : ", ") + (t ? short_dump(*t) : std::string("?"));
    if (is_type(p, "ByteLevel")) {
      byte_level = true;
    } else if (is_type(p, "Digits")) {
      const json* ind = member(*p, "individual_digits");
      if (!ind || *ind != true) {
        error = "tokenizer.json: Digits pre-tokenizer without individual_digits is not supported";
        return false;
      }
      digits = true;
    } else if (is_type(p, "Split")) {
      regexes.push_back(split_regex(*p));
      found.append(" ").append(short_dump(regexes.back()));
    } else {
      byte_level = false;
      break;
    }
  }
  if (byte_level && parts.size() == 1) {
    out = PreTokenizer::Gpt2;
    return true;
  }
  if (byte_level && digits && parts.size() == 2) {
    out = PreTokenizer::SmolLM;
    return true;
  }
  if (byte_level && regexes.size() == 1 && parts.size() == 2) {
    const std::string& re = regexes[0];
    if (re.find(kContractions) != std::string::npos) {
      if (re.find("\\p{N}{1,3}") != std::string::npos) {
        out = PreTokenizer::Llama3;
        return true;
      }
      if (re.find("|\\p{N}|") != std::string::npos) {
        out = PreTokenizer::Qwen2;
        return true;
      }
    }
  }
  error =
      "tokenizer.json: byte-level pre-tokenizer not recognized (expected ByteLevel, Digits + "
      "ByteLevel, or a Llama-3 / Qwen2 Split regex + ByteLevel); found: " +
      (found.empty() ? std::string("none") : found);
  return false;
}

// The text of a special token given as a string or as {"content": ...}.
std::string token_text(const json* v) {
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (const json* c = member(*v, "content"); c && c->is_string()) return c->get<std::string>();
  return {};
}

bool read_tokenizer(const json& tj, const json& tcfg, const ConfigIds& ids, uint32_t vocab_rows, SourceTokenizer& tok,
                    std::string& error) {
  auto fail = [&](const std::string& what) {
    error = "tokenizer.json: " + what;
    return false;
  };
  const json* model = member(tj, "model");
  if (!model || !model->is_object()) return fail("missing 'model'");
  const json* mtype = member(*model, "type");
  if (!mtype || *mtype != "BPE")
    return fail("model type " + (mtype ? short_dump(*mtype) : std::string("(none)")) +
                " is not supported (expected \"BPE\")");
  const json* vocab = member(*model, "vocab");
  if (!vocab || !vocab->is_object()) return fail("model.vocab is not an object");

  // id -> text, from the vocabulary and the added tokens.
  std::vector<std::string> texts;
  std::vector<uint8_t> assigned, special, added;
  auto put = [&](const std::string& text, const json& idv, bool is_added, bool is_special) {
    uint64_t id;
    if (!as_u64(idv, id) || id >= vocab_rows)
      return fail("token '" + text + "' has id " + short_dump(idv) + ", outside the " + std::to_string(vocab_rows) +
                  " embedding rows of config.json vocab_size");
    if (id >= texts.size()) {
      texts.resize(id + 1);
      assigned.resize(id + 1, 0);
      special.resize(id + 1, 0);
      added.resize(id + 1, 0);
    }
    if (assigned[id] && texts[id] != text)
      return fail("id " + std::to_string(id) + " is both '" + texts[id] + "' and '" + text + "'");
    texts[id] = text;
    assigned[id] = 1;
    if (is_added) added[id] = 1;
    if (is_special) special[id] = 1;
    return true;
  };
  for (const auto& [text, idv] : vocab->items())
    if (!put(text, idv, false, false)) return false;
  if (const json* at = member(tj, "added_tokens")) {
    if (!at->is_array()) return fail("added_tokens is not a list");
    for (const json& a : *at) {
      const json* content = member(a, "content");
      const json* idv = member(a, "id");
      if (!content || !content->is_string() || !idv)
        return fail("added token " + short_dump(a) + " lacks id or content");
      const json* sp = member(a, "special");
      if (!put(content->get<std::string>(), *idv, true, sp && *sp == true)) return false;
    }
  }
  for (size_t i = 0; i < texts.size(); ++i)
    if (!assigned[i]) return fail("no token has id " + std::to_string(i) + " (ids must be contiguous)");
  std::map<std::string, int32_t> id_of;
  for (size_t i = 0; i < texts.size(); ++i) id_of.emplace(texts[i], int32_t(i));
  auto lookup = [&](const std::string& text) {
    auto it = id_of.find(text);
    return it == id_of.end() ? -1 : it->second;
  };

  // Merges, as "a b" in rank order.
  std::vector<std::string> merges;
  if (const json* mj = member(*model, "merges")) {
    if (!mj->is_array()) return fail("model.merges is not a list");
    merges.reserve(mj->size());
    for (const json& e : *mj) {
      if (e.is_string()) {
        merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        const std::string a = e[0].get<std::string>(), b = e[1].get<std::string>();
        if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
          return fail("merge " + short_dump(e) + " contains a space and cannot be written as \"a b\"");
        merges.push_back(a + " " + b);
      } else {
        return fail("merge " + short_dump(e) + " is neither \"a b\" nor [a, b]");
      }
    }
  }

  const json* pre = member(tj, "pre_tokenizer");
  const json* dec = member(tj, "decoder");
  const json* norm = member(tj, "normalizer");
  const bool byte_level =
      contains_type(pre, "ByteLevel", "pretokenizers") || contains_type(dec, "ByteLevel", "decoders");
  const json* fallback = member(*model, "byte_fallback");
  bool sp_normalizer = false, sp_prefix = false;
  if (norm) {
    std::vector<const json*> ns;
    if (is_type(norm, "Sequence")) {
      if (const json* list = member(*norm, "normalizers"); list && list->is_array())
        for (const json& n : *list) ns.push_back(&n);
    } else {
      ns.push_back(norm);
    }
    for (const json* n : ns) {
      if (is_type(n, "Replace")) {
        const json* content = member(*n, "content");
        if (content && *content == kSpaceMarker) sp_normalizer = true;
      }
      if (is_type(n, "Prepend")) {
        const json* p = member(*n, "prepend");
        if (p && *p == kSpaceMarker) sp_prefix = true;
      }
    }
  }
  for (const json* p : pre_tokenizers(pre)) {
    if (is_type(p, "Metaspace")) {
      sp_normalizer = true;
      const json* scheme = member(*p, "prepend_scheme");
      const json* add = member(*p, "add_prefix_space");
      if ((scheme && (*scheme == "always" || *scheme == "first")) || (!scheme && add && *add == true)) sp_prefix = true;
    }
  }

  tok.tokens = std::move(texts);
  tok.token_types.assign(tok.tokens.size(), kTokNormal);
  for (size_t i = 0; i < tok.tokens.size(); ++i)
    if (added[i]) tok.token_types[i] = special[i] ? kTokControl : kTokUserDefined;

  if (byte_level) {
    tok.kind = TokenizerKind::ByteLevelBpe;
    if (!classify_byte_level(pre, tok.pre, error)) return false;
    tok.merges = std::move(merges);
    tok.add_space_prefix = false;
    for (const json* p : pre_tokenizers(pre)) {
      if (is_type(p, "ByteLevel")) {
        const json* add = member(*p, "add_prefix_space");
        tok.add_space_prefix = add && *add == true;
      }
    }
  } else if (fallback && *fallback == true && sp_normalizer) {
    tok.kind = TokenizerKind::SentencePieceBpe;
    tok.pre = PreTokenizer::None;
    tok.add_space_prefix = sp_prefix;
    // BPE tokenizer.json carries no piece scores; merge priority is the merge rank. A token a
    // merge produces scores -(rank of the first merge producing it); every other token
    // (bytes, single characters, specials) scores -(merge count + id), below every merge
    // result, so a score-driven merger prefers merges in the tokenizer's own order.
    const float n_merges = float(merges.size());
    tok.scores.assign(tok.tokens.size(), 0.0f);
    std::vector<uint8_t> scored(tok.tokens.size(), 0);
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& mrg = merges[r];
      const size_t sp = mrg.find(' ');
      if (sp == std::string::npos) return fail("merge '" + mrg + "' is not \"a b\"");
      const int32_t id = lookup(mrg.substr(0, sp) + mrg.substr(sp + 1));
      if (id >= 0 && !scored[id]) {
        tok.scores[id] = -float(r);
        scored[id] = 1;
      }
    }
    for (size_t i = 0; i < tok.tokens.size(); ++i)
      if (!scored[i]) tok.scores[i] = -(n_merges + float(i));
    for (size_t i = 0; i < tok.tokens.size(); ++i) {
      const std::string& t = tok.tokens[i];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && isxdigit(uint8_t(t[3])) &&
          isxdigit(uint8_t(t[4])))
        tok.token_types[i] = kTokByte;
    }
  } else {
    return fail(
        "neither byte-level BPE (ByteLevel pre-tokenizer or decoder) nor SentencePiece-style "
        "BPE (byte_fallback with a U+2581 Replace normalizer or Metaspace); found pre_tokenizer " +
        (pre ? short_dump(*pre) : std::string("null")) + ", normalizer " +
        (norm ? short_dump(*norm) : std::string("null")));
  }

  if (const json* unk = member(*model, "unk_token"); unk && unk->is_string()) {
    tok.unk_id = lookup(unk->get<std::string>());
    if (tok.unk_id >= 0) tok.token_types[size_t(tok.unk_id)] = kTokUnknown;
  }

  // Special ids: tokenizer_config.json's token texts first (for chat models they name the
  // end-of-turn token), then config.json's ids (the first one when eos_token_id is a list).
  // A pad token missing from the vocabulary only means there is none.
  auto special_id = [&](const char* cfg_key, int64_t from_config, bool required, int32_t& out) {
    const std::string text = token_text(member(tcfg, cfg_key));
    if (!text.empty()) {
      out = lookup(text);
      if (out < 0 && required)
        return fail(std::string("tokenizer_config.json ") + cfg_key + " '" + text + "' is not in the vocabulary");
      return true;
    }
    out = int32_t(from_config);
    return true;
  };
  if (!special_id("bos_token", ids.bos, true, tok.bos_id) || !special_id("eos_token", ids.eos, true, tok.eos_id) ||
      !special_id("pad_token", ids.pad, false, tok.pad_id))
    return false;
  tok.im_start_id = lookup("<|im_start|>");
  tok.im_end_id = lookup("<|im_end|>");
  // Gemma's turn markers serve where a vocabulary has no ChatML ones (keel chat reads which).
  if (tok.im_start_id < 0) tok.im_start_id = lookup("<start_of_turn>");
  if (tok.im_end_id < 0) tok.im_end_id = lookup("<end_of_turn>");

  if (const json* add = member(tcfg, "add_bos_token"); add && add->is_boolean()) {
    tok.add_bos = add->get<bool>();
  } else if (tok.kind == TokenizerKind::SentencePieceBpe) {
    tok.add_bos = true;
  } else {
    // Byte-level tokenizers that add BOS say so with a template starting with a special token.
    tok.add_bos = false;
    const json* post = member(tj, "post_processor");
    std::vector<const json*> posts;
    if (is_type(post, "Sequence")) {
      if (const json* list = member(*post, "processors"); list && list->is_array())
        for (const json& p : *list) posts.push_back(&p);
    } else if (post) {
      posts.push_back(post);
    }
    for (const json* p : posts) {
      const json* single = is_type(p, "TemplateProcessing") ? member(*p, "single") : nullptr;
      if (single && single->is_array() && !single->empty() && member((*single)[0], "SpecialToken")) tok.add_bos = true;
    }
  }

  // config.json's vocab_size counts embedding rows, which models round up past the
  // tokenizer's last id; the rows without a token get "<unused_N>" placeholders of type
  // Unused so the vocabulary matches the embedding. 0 rows: no embedding to match (the
  // tokenizer read on its own).
  if (vocab_rows == 0) vocab_rows = uint32_t(tok.tokens.size());
  if (tok.tokens.size() < vocab_rows) {
    const size_t have = tok.tokens.size();
    for (size_t i = have; i < vocab_rows; ++i) {
      tok.tokens.push_back("<unused_" + std::to_string(i) + ">");
      tok.token_types.push_back(kTokUnused);
      if (tok.kind == TokenizerKind::SentencePieceBpe) tok.scores.push_back(-(float(merges.size()) + float(i)));
    }
  }
  for (auto [name, id] :
       {std::pair<const char*, int32_t>{"bos", tok.bos_id}, {"eos", tok.eos_id}, {"pad", tok.pad_id}}) {
    if (id >= int32_t(vocab_rows))
      return fail(std::string(name) + " id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(vocab_rows));
  }
  return true;
}

std::string chat_template(const json& tcfg, const std::string& dir) {
  if (const json* ct = member(tcfg, "chat_template")) {
    if (ct->is_string()) return ct->get<std::string>();
    // A list of named templates: the "default" one, else the first.
    if (ct->is_array()) {
      std::string first;
      for (const json& e : *ct) {
        const json* name = member(e, "name");
        const json* t = member(e, "template");
        if (!t || !t->is_string()) continue;
        if (name && *name == "default") return t->get<std::string>();
        if (first.empty()) first = t->get<std::string>();
      }
      return first;
    }
  }
  const std::string path = dir + "/chat_template.jinja";
  if (is_file(path)) {
    std::string text, error;
    if (read_file(path, text, error, kMaxJsonFile)) return text;
  }
  return {};
}

std::optional<SourceModel> read_dir(const std::string& dir, std::string& error) {
  const std::string config_path = dir + "/config.json";
  if (!is_file(config_path)) {
    error = "config.json not found in '" + dir + "'";
    return std::nullopt;
  }
  json config;
  if (!parse_json_file(config_path, config, error)) return std::nullopt;
  SourceModel m;
  ConfigIds ids;
  if (!parse_config(config, m.hyper, ids, error)) return std::nullopt;

  const std::string tok_path = dir + "/tokenizer.json";
  if (!is_file(tok_path)) {
    error = "tokenizer.json not found in '" + dir + "' (tokenizer.model alone is not supported)";
    return std::nullopt;
  }
  json tj, tcfg = json::object();
  if (!parse_json_file(tok_path, tj, error)) return std::nullopt;
  const std::string tcfg_path = dir + "/tokenizer_config.json";
  if (is_file(tcfg_path) && !parse_json_file(tcfg_path, tcfg, error)) return std::nullopt;
  if (!read_tokenizer(tj, tcfg, ids, m.hyper.vocab_size, m.tokenizer, error)) return std::nullopt;
  m.chat_template = chat_template(tcfg, dir);

  std::vector<StTensor> st;
  std::string what;
  if (!read_weights(dir, st, what, error)) return std::nullopt;
  if (!build_tensors(st, m, error)) return std::nullopt;

  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const size_t slash = base.find_last_of('/');
  if (slash != std::string::npos) base = base.substr(slash + 1);
  const json* mt = member(config, "model_type");
  m.source_description = "Hugging Face " + mt->get<std::string>() + " (" + what + "): " + base;
  return m;
}

}  // namespace

std::optional<SourceTokenizer> read_hf_tokenizer(const std::string& dir, std::string& error) {
  try {
    ConfigIds ids;
    uint32_t vocab_rows = 0;
    const std::string config_path = dir + "/config.json";
    if (is_file(config_path)) {
      json config;
      SourceHyper h;
      if (!parse_json_file(config_path, config, error) || !parse_config(config, h, ids, error)) return std::nullopt;
      vocab_rows = h.vocab_size;
    }
    const std::string tok_path = dir + "/tokenizer.json";
    if (!is_file(tok_path)) {
      error = "tokenizer.json not found in '" + dir + "'";
      return std::nullopt;
    }
    json tj, tcfg = json::object();
    if (!parse_json_file(tok_path, tj, error)) return std::nullopt;
    const std::string tcfg_path = dir + "/tokenizer_config.json";
    if (is_file(tcfg_path) && !parse_json_file(tcfg_path, tcfg, error)) return std::nullopt;
    SourceTokenizer tok;
    if (!read_tokenizer(tj, tcfg, ids, vocab_rows, tok, error)) return std::nullopt;
    return tok;
  } catch (const std::exception& e) {
    error = "Hugging Face tokenizer in '" + dir + "': " + e.what();
    return std::nullopt;
  }
}

std::optional<SourceModel> read_hf_dir(const std::string& dir, std::string& error) {
  // Every access above checks types first; this only turns a missed case into an error.
  try {
    return read_dir(dir, error);
  } catch (const std::exception& e) {
    error = "Hugging Face directory '" + dir + "': " + e.what();
    return std::nullopt;
  }
}

}  // namespace keel::convert
