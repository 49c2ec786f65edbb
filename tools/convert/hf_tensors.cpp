// Tensor names: Hugging Face's mapped to the converter's, checked against config.json's shapes
// and ordered as the engine walks them.
//
// Weights keep Hugging Face's layout: q/k rows are not permuted, so rotary pairs are
// (i, i + head_dim / 2) (RopeStyle::Halves, the rotate_half convention).
#include "convert/hf_tensors.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "convert/source_file.h"

namespace keel::convert::hf {
namespace {

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

}  // namespace

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

}  // namespace keel::convert::hf
