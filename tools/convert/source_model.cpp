#include "convert/source_model.h"

namespace keel::convert {

const char* src_type_name(SrcType t) {
  switch (t) {
    case SrcType::F32: return "F32";
    case SrcType::F16: return "F16";
    case SrcType::BF16: return "BF16";
    case SrcType::Q8_0: return "Q8_0";
    case SrcType::Q4_0: return "Q4_0";
    case SrcType::Q4_1: return "Q4_1";
    case SrcType::Q5_0: return "Q5_0";
    case SrcType::Q5_1: return "Q5_1";
    case SrcType::Q4_K: return "Q4_K";
    case SrcType::Q5_K: return "Q5_K";
    case SrcType::Q6_K: return "Q6_K";
  }
  return "?";
}

const char* role_name(Role r) {
  switch (r) {
    case Role::TokenEmbedding: return "token_embedding";
    case Role::AttnNorm: return "attn_norm";
    case Role::Wq: return "wq";
    case Role::Wk: return "wk";
    case Role::Wv: return "wv";
    case Role::Wo: return "wo";
    case Role::Bq: return "bq";
    case Role::Bk: return "bk";
    case Role::Bv: return "bv";
    case Role::FfnNorm: return "ffn_norm";
    case Role::FfnGate: return "ffn_gate";
    case Role::FfnDown: return "ffn_down";
    case Role::FfnUp: return "ffn_up";
    case Role::OutputNorm: return "output_norm";
    case Role::Output: return "output";
    case Role::AttnQNorm: return "attn_q_norm";
    case Role::AttnKNorm: return "attn_k_norm";
    case Role::PostAttnNorm: return "post_attention_norm";
    case Role::PostFfnNorm: return "post_ffw_norm";
  }
  return "?";
}

}  // namespace keel::convert
