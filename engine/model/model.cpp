#include "model/model.h"

#include <cinttypes>
#include <cstring>

#include "core/check.h"
#include "core/crc32c.h"
#include "model/file_checksums.h"
#include "core/format.h"
#include "flatbuffers/flatbuffers.h"
#include "model/weight_format.h"

namespace keel {
namespace {

using fb::DType;
using fb::TensorRole;

const char* role_suffix(TensorRole r) {
  switch (r) {
    case TensorRole::TokenEmbedding: return "token_embd.weight";
    case TensorRole::AttnNorm: return "attn_norm.weight";
    case TensorRole::Wq: return "attn_q.weight";
    case TensorRole::Wk: return "attn_k.weight";
    case TensorRole::Wv: return "attn_v.weight";
    case TensorRole::Wo: return "attn_output.weight";
    case TensorRole::Bq: return "attn_q.bias";
    case TensorRole::Bk: return "attn_k.bias";
    case TensorRole::Bv: return "attn_v.bias";
    case TensorRole::FfnNorm: return "ffn_norm.weight";
    case TensorRole::FfnGate: return "ffn_gate.weight";
    case TensorRole::FfnDown: return "ffn_down.weight";
    case TensorRole::FfnUp: return "ffn_up.weight";
    case TensorRole::OutputNorm: return "output_norm.weight";
    case TensorRole::Output: return "output.weight";
    case TensorRole::AttnQNorm: return "attn_q_norm.weight";
    case TensorRole::AttnKNorm: return "attn_k_norm.weight";
    case TensorRole::PostAttnNorm: return "post_attention_norm.weight";
    case TensorRole::PostFfnNorm: return "post_ffw_norm.weight";
  }
  return "?";
}

bool role_is_gemma3(TensorRole r) {
  return r == TensorRole::AttnQNorm || r == TensorRole::AttnKNorm || r == TensorRole::PostAttnNorm ||
         r == TensorRole::PostFfnNorm;
}

bool role_is_vector(TensorRole r) {
  return r == TensorRole::AttnNorm || r == TensorRole::FfnNorm || r == TensorRole::OutputNorm || r == TensorRole::Bq ||
         r == TensorRole::Bk || r == TensorRole::Bv || role_is_gemma3(r);
}

bool dtype_known(DType t) { return static_cast<unsigned>(t) <= static_cast<unsigned>(DType::Q6K); }

// Expected [rows, cols] of a role given the hyper-parameters.
void expected_shape(TensorRole r, const ModelShape& s, uint64_t& rows, uint64_t& cols) {
  const uint64_t q = uint64_t(s.n_heads) * s.head_dim, kv = uint64_t(s.n_kv_heads) * s.head_dim;
  rows = 1;
  switch (r) {
    case TensorRole::TokenEmbedding:
    case TensorRole::Output:
      rows = s.vocab_size;
      cols = s.dim;
      return;
    case TensorRole::AttnNorm:
    case TensorRole::FfnNorm:
    case TensorRole::OutputNorm: cols = s.dim; return;
    case TensorRole::Wq:
      rows = q;
      cols = s.dim;
      return;
    case TensorRole::Wk:
    case TensorRole::Wv:
      rows = kv;
      cols = s.dim;
      return;
    case TensorRole::Wo:
      rows = s.dim;
      cols = q;
      return;
    case TensorRole::Bq: cols = q; return;
    case TensorRole::Bk:
    case TensorRole::Bv: cols = kv; return;
    case TensorRole::FfnGate:
    case TensorRole::FfnUp:
      rows = s.ffn_dim;
      cols = s.dim;
      return;
    case TensorRole::FfnDown:
      rows = s.dim;
      cols = s.ffn_dim;
      return;
    case TensorRole::AttnQNorm:
    case TensorRole::AttnKNorm: cols = s.head_dim; return;
    case TensorRole::PostAttnNorm:
    case TensorRole::PostFfnNorm: cols = s.dim; return;
  }
  cols = 0;
}

Error check_hyper(const fb::Model* m, ModelShape& s) {
  const fb::Hyper* h = m->hyper();
  KEEL_ENSURE(h != nullptr, Status::ModelMissingField, "model has no hyper-parameters table");
  KEEL_ENSURE(m->arch() != nullptr, Status::ModelMissingField, "model has no architecture table");
  KEEL_ENSURE(m->arch()->family() == fb::ArchFamily::Llama || m->arch()->family() == fb::ArchFamily::Gemma3,
              Status::UnsupportedArch, "architecture family %u is unknown; expected Llama (0) or Gemma3 (1)",
              unsigned(m->arch()->family()));
  s.vocab_size = h->vocab_size();
  s.dim = h->dim();
  s.n_layers = h->n_layers();
  s.n_heads = h->n_heads();
  s.n_kv_heads = h->n_kv_heads();
  s.head_dim = h->head_dim();
  s.ffn_dim = h->ffn_dim();
  s.context_length = h->context_length();
  struct Bound {
    const char* name;
    uint32_t v, max;
  } bounds[] = {
      {"vocab_size", s.vocab_size, kMaxVocab}, {"dim", s.dim, kMaxDim},
      {"n_layers", s.n_layers, kMaxLayers},    {"n_heads", s.n_heads, kMaxHeads},
      {"n_kv_heads", s.n_kv_heads, kMaxHeads}, {"head_dim", s.head_dim, kMaxHeadDim},
      {"ffn_dim", s.ffn_dim, kMaxFfnDim},      {"context_length", s.context_length, kMaxContext},
  };
  for (const Bound& b : bounds) {
    KEEL_ENSURE(b.v >= 1 && b.v <= b.max, Status::ModelBadHyper,
                "hyper-parameter %s = %" PRIu32 "; expected 1..%" PRIu32, b.name, b.v, b.max);
  }
  KEEL_ENSURE(s.n_heads % s.n_kv_heads == 0, Status::ModelBadHyper,
              "n_heads = %" PRIu32 " is not a multiple of n_kv_heads = %" PRIu32, s.n_heads, s.n_kv_heads);
  KEEL_ENSURE(s.head_dim % 2 == 0, Status::ModelBadHyper, "head_dim = %" PRIu32 "; expected even", s.head_dim);
  KEEL_ENSURE(h->rope_dim() <= s.head_dim && h->rope_dim() % 2 == 0, Status::ModelBadHyper,
              "rope_dim = %" PRIu32 "; expected even and <= head_dim = %" PRIu32, h->rope_dim(), s.head_dim);
  KEEL_ENSURE(static_cast<unsigned>(h->rope_style()) <= 1, Status::ModelBadHyper, "rope_style = %u is unknown",
              unsigned(h->rope_style()));
  KEEL_ENSURE(h->rope_theta() > 0.0f && h->rope_theta() < 1e12f, Status::ModelBadHyper,
              "rope_theta = %g; expected a positive finite value", double(h->rope_theta()));
  KEEL_ENSURE(h->norm_eps() > 0.0f && h->norm_eps() < 1.0f, Status::ModelBadHyper, "norm_eps = %g; expected in (0, 1)",
              double(h->norm_eps()));
  if (m->arch()->family() == fb::ArchFamily::Gemma3) {
    KEEL_ENSURE(h->sliding_window() >= 1 && h->sliding_window() <= kMaxContext && h->sliding_window_pattern() >= 1 &&
                    h->sliding_window_pattern() <= kMaxLayers,
                Status::ModelBadHyper,
                "Gemma 3 sliding window %" PRIu32 " every %" PRIu32 " layers; expected 1..%" PRIu32 " and 1..%" PRIu32,
                h->sliding_window(), h->sliding_window_pattern(), kMaxContext, kMaxLayers);
    KEEL_ENSURE(h->rope_theta_local() > 0.0f && h->rope_theta_local() < 1e12f, Status::ModelBadHyper,
                "rope_theta_local = %g; expected a positive finite value", double(h->rope_theta_local()));
    KEEL_ENSURE(h->query_scale() > 0.0f && h->query_scale() <= 1.0f, Status::ModelBadHyper,
                "query_scale = %g; expected in (0, 1]", double(h->query_scale()));
  }
  if (const fb::RopeScaling* rs = h->rope_scaling()) {
    KEEL_ENSURE(static_cast<unsigned>(rs->kind()) <= 2, Status::ModelBadHyper, "rope scaling kind %u is unknown",
                unsigned(rs->kind()));
    KEEL_ENSURE(rs->kind() == fb::RopeScalingKind::None || (rs->factor() >= 1.0f && rs->factor() < 1e6f),
                Status::ModelBadHyper, "rope scaling factor %g; expected >= 1", double(rs->factor()));
  }
  return Error();
}

Error check_tokenizer(const fb::Model* m, const ModelShape& s) {
  const fb::Tokenizer* t = m->tokenizer();
  KEEL_ENSURE(t != nullptr, Status::ModelMissingField, "model has no tokenizer table");
  KEEL_ENSURE(static_cast<unsigned>(t->kind()) <= 1, Status::ModelBadTokenizer, "tokenizer kind %u is unknown",
              unsigned(t->kind()));
  KEEL_ENSURE(static_cast<unsigned>(t->pre()) <= 4, Status::ModelBadTokenizer, "pre-tokenizer %u is unknown",
              unsigned(t->pre()));
  const uint32_t n = t->tokens() ? t->tokens()->size() : 0;
  KEEL_ENSURE(n == s.vocab_size, Status::ModelBadTokenizer,
              "tokenizer has %" PRIu32 " tokens; expected vocab_size = %" PRIu32, n, s.vocab_size);
  if (t->scores()) {
    KEEL_ENSURE(t->scores()->size() == n, Status::ModelBadTokenizer,
                "tokenizer has %" PRIu32 " scores; expected %" PRIu32, t->scores()->size(), n);
  }
  if (t->token_types()) {
    KEEL_ENSURE(t->token_types()->size() == n, Status::ModelBadTokenizer,
                "tokenizer has %" PRIu32 " token types; expected %" PRIu32, t->token_types()->size(), n);
    for (uint32_t i = 0; i < n; ++i) {
      KEEL_ENSURE(static_cast<unsigned>(t->token_types()->Get(i)) <= 6, Status::ModelBadTokenizer,
                  "token %" PRIu32 " has unknown type %u", i, unsigned(t->token_types()->Get(i)));
    }
  }
  if (t->kind() == fb::TokenizerKind::SentencePieceBpe) {
    KEEL_ENSURE(t->scores() != nullptr, Status::ModelBadTokenizer, "SentencePiece tokenizer has no scores");
    KEEL_ENSURE(t->merges() == nullptr || t->merges()->size() == 0, Status::ModelBadTokenizer,
                "SentencePiece tokenizer carries %" PRIu32 " merges; expected none", t->merges()->size());
  } else {
    KEEL_ENSURE(t->merges() != nullptr && t->merges()->size() > 0, Status::ModelBadTokenizer,
                "byte-level BPE tokenizer has no merges");
  }
  for (uint32_t i = 0; i < n; ++i) {
    KEEL_ENSURE(t->tokens()->Get(i) != nullptr, Status::ModelBadTokenizer, "token %" PRIu32 " is null", i);
  }
  struct Id {
    const char* name;
    int32_t v;
  } ids[] = {
      {"bos_id", t->bos_id()}, {"eos_id", t->eos_id()},           {"pad_id", t->pad_id()},
      {"unk_id", t->unk_id()}, {"im_start_id", t->im_start_id()}, {"im_end_id", t->im_end_id()},
  };
  for (const Id& id : ids) {
    KEEL_ENSURE(id.v >= -1 && id.v < int64_t(n), Status::ModelBadTokenizer,
                "tokenizer %s = %" PRId32 "; expected -1 or 0..%" PRIu32, id.name, id.v, n - 1);
  }
  return Error();
}

}  // namespace

bool role_is_per_layer(TensorRole r) {
  return !(r == TensorRole::TokenEmbedding || r == TensorRole::OutputNorm || r == TensorRole::Output);
}

const char* canonical_tensor_name(TensorRole role, int layer, char* buf, size_t cap) {
  if (role_is_per_layer(role)) {
    format(buf, cap, "blk.%d.%s", layer, role_suffix(role));
  } else {
    format(buf, cap, "%s", role_suffix(role));
  }
  return buf;
}

Error Model::load(Span<const uint8_t> image, bool verify_sums) {
  // The trailer's sums are checked before a byte of the metadata is trusted, so that a flipped
  // byte anywhere is reported as a checksum mismatch naming its part, not as whatever the
  // structural checks make of it.
  const bool trailer_first = verify_sums && trailer_bytes(image) > 0;
  if (trailer_first) {
    meta_ = nullptr;
    KEEL_TRY(verify_trailer(image));
  }
  KEEL_TRY(load_structure(image));
  if (verify_sums) {
    // The trailer's parts were hashed above; hashing them again would only cost time.
    const Error e = trailer_first ? verify_data_checksums() : verify_checksums();
    if (!e.ok()) {
      meta_ = nullptr;
      return e;
    }
  }
  return Error();
}

Error Model::load_structure(Span<const uint8_t> image) {
  meta_ = nullptr;
  data_ = nullptr;
  data_size_ = 0;
  image_ = Span<const uint8_t>();
  memset(index_, 0, sizeof index_);
  const uint8_t* p = image.data();
  const size_t n = image.size();

  KEEL_ENSURE(p != nullptr && n >= 8, Status::ModelTruncated, "file is %zu bytes; a .keel file has at least 8", n);
  KEEL_ENSURE(reinterpret_cast<uintptr_t>(p) % 8 == 0, Status::ModelMisaligned,
              "image address is not 8-byte aligned; map or place the file on a 64-byte boundary");
  KEEL_ENSURE(flatbuffers::BufferHasIdentifier(p, fb::ModelIdentifier()), Status::ModelBadIdentifier,
              "file identifier is '%.4s'; expected 'KEEL'", reinterpret_cast<const char*>(p + 4));
  const size_t fb_len = n < size_t(FLATBUFFERS_MAX_BUFFER_SIZE) ? n : size_t(FLATBUFFERS_MAX_BUFFER_SIZE) - 1;
  {
    flatbuffers::Verifier v(p, fb_len);
    KEEL_ENSURE(fb::VerifyModelBuffer(v), Status::ModelVerifyFailed,
                "metadata is not a valid keel.fb.Model FlatBuffer (file %zu bytes; truncated or corrupted)", n);
  }
  const fb::Model* m = fb::GetModel(p);
  KEEL_ENSURE(m->format_version() >= kOldestFormatVersion && m->format_version() <= kFormatVersion,
              Status::ModelBadVersion, "format version %" PRIu32 "; this engine reads versions %" PRIu32 "..%" PRIu32,
              m->format_version(), kOldestFormatVersion, kFormatVersion);
  const uint64_t doff = m->data_offset(), dsize = m->data_size();
  KEEL_ENSURE(doff % 64 == 0 && doff >= 8, Status::ModelMisaligned,
              "data section offset %llu; expected a non-zero multiple of 64", (unsigned long long)doff);
  KEEL_ENSURE(doff <= n && dsize <= n - doff, Status::ModelTruncated,
              "data section [%llu, +%llu) ends past the end of the file (%zu bytes)", (unsigned long long)doff,
              (unsigned long long)dsize, n);
  // Version 3 files end with the checksum trailer (file_checksums.h), whose parts tile the
  // metadata [0, doff) in order; earlier versions end with the data section.
  size_t trailer = 0;
  if (m->format_version() >= kFirstTrailerVersion) {
    const size_t end = size_t(doff + dsize);
    trailer = trailer_bytes_at(image, end);
    // No trailer where the data section ends: either the sizes in the metadata are wrong (the
    // file still ends with a trailer) or the file was cut or damaged at its end.
    KEEL_ENSURE(trailer > 0 || trailer_bytes(image) == 0, Status::ModelBadOffset,
                "data section ends at byte %zu, but the checksum trailer starts at byte %zu", end,
                n - trailer_bytes(image));
    KEEL_ENSURE(trailer > 0, Status::ModelTruncated,
                "format version %" PRIu32
                " has a checksum trailer where the data section ends (byte %zu), but the "
                "%zu bytes there hold none (a part count of 1..%" PRIu32
                ", a sum, 'KEELSUMS'): truncated or "
                "corrupted",
                m->format_version(), end, n - end, kMaxTrailerParts);
    KEEL_ENSURE(end + trailer == n, Status::ModelBadOffset,
                "%zu bytes follow the checksum trailer, which ends at byte %zu; a .keel file ends with it",
                n - end - trailer, end + trailer);
    uint64_t covered = 0;
    for (uint32_t i = 0; i < trailer_part_count(image); ++i) {
      const TrailerPart part = trailer_part(image, i);
      KEEL_ENSURE(part.offset == covered && part.size <= doff - covered, Status::ModelVerifyFailed,
                  "checksum trailer part %" PRIu32
                  " (%s) covers [%llu, +%llu); expected it to start at %llu and "
                  "end by the data section at %llu",
                  i, file_part_name(part.kind), (unsigned long long)part.offset, (unsigned long long)part.size,
                  (unsigned long long)covered, (unsigned long long)doff);
      covered += part.size;
    }
    KEEL_ENSURE(covered == doff, Status::ModelVerifyFailed,
                "checksum trailer parts cover [0, %llu); expected the metadata [0, %llu)", (unsigned long long)covered,
                (unsigned long long)doff);
  }
  KEEL_ENSURE(doff + dsize + trailer == n, Status::ModelBadOffset,
              "data section ends at %llu%s but the file has %zu bytes", (unsigned long long)(doff + dsize),
              trailer ? " (then the checksum trailer)" : "", n);
  {
    // No metadata may lie inside the data section.
    flatbuffers::Verifier v(p, doff < fb_len ? doff : fb_len);
    KEEL_ENSURE(fb::VerifyModelBuffer(v), Status::ModelVerifyFailed,
                "metadata extends past the data section offset %llu", (unsigned long long)doff);
  }

  ModelShape s;
  KEEL_TRY(check_hyper(m, s));
  KEEL_TRY(check_tokenizer(m, s));
  // The default KV policy is applied by whoever runs the model without choosing one (the CLI):
  // like every enum of the format, a value this engine does not know is refused here.
  if (const fb::KvDefaults* kv = m->kv_defaults()) {
    KEEL_ENSURE(static_cast<unsigned>(kv->policy()) <= static_cast<unsigned>(fb::KvPolicy::SnapStream),
                Status::ModelBadHyper, "kv_defaults.policy = %u is unknown; expected 0..%u", unsigned(kv->policy()),
                unsigned(fb::KvPolicy::SnapStream));
  }
  const bool tied = m->arch()->tied_output();
  const bool qkv_bias = m->arch()->qkv_bias();
  const bool gemma3 = m->arch()->family() == fb::ArchFamily::Gemma3;

  const auto* tensors = m->tensors();
  KEEL_ENSURE(tensors != nullptr && tensors->size() > 0, Status::ModelMissingTensor, "model has no tensors");
  uint64_t prev_end = 0;
  char want[64];
  for (uint32_t i = 0; i < tensors->size(); ++i) {
    const fb::Tensor* t = tensors->Get(i);
    const char* name = t->name()->c_str();
    const unsigned role_v = static_cast<unsigned>(t->role());
    KEEL_ENSURE(role_v < kRoleCount, Status::ModelBadDType, "tensor %s has unknown role %u", name, role_v);
    const TensorRole role = t->role();
    const int layer = t->layer();
    if (role_is_per_layer(role)) {
      KEEL_ENSURE(layer >= 0 && uint32_t(layer) < s.n_layers, Status::ModelShapeMismatch,
                  "tensor %s has layer %d; expected 0..%" PRIu32, name, layer, s.n_layers - 1);
    } else {
      KEEL_ENSURE(layer == -1, Status::ModelShapeMismatch, "tensor %s has layer %d; expected -1", name, layer);
    }
    canonical_tensor_name(role, layer, want, sizeof want);
    KEEL_ENSURE(strcmp(name, want) == 0, Status::ModelShapeMismatch,
                "tensor %" PRIu32 " is named '%s' but its role and layer make it '%s'", i, name, want);
    KEEL_ENSURE(dtype_known(t->dtype()), Status::ModelBadDType, "tensor %s has unknown dtype %u", name,
                unsigned(t->dtype()));
    KEEL_ENSURE(t->layout() == layout_for(t->dtype()), Status::ModelBadDType,
                "tensor %s has layout %u; dtype %s requires layout %s", name, unsigned(t->layout()),
                fb::EnumNameDType(t->dtype()), fb::EnumNameLayout(layout_for(t->dtype())));
    if (is_quantized(t->dtype())) {
      KEEL_ENSURE(t->block_size() == kQuantBlock, Status::ModelBadDType,
                  "tensor %s has block size %" PRIu32 "; expected %" PRIu32, name, t->block_size(), kQuantBlock);
    }
    if (role_is_vector(role)) {
      KEEL_ENSURE(t->dtype() == DType::F32, Status::ModelBadDType, "tensor %s is %s; norms and biases are F32", name,
                  fb::EnumNameDType(t->dtype()));
    }
    if (role == TensorRole::Bq || role == TensorRole::Bk || role == TensorRole::Bv) {
      KEEL_ENSURE(qkv_bias, Status::ModelShapeMismatch, "tensor %s present but arch.qkv_bias is false", name);
    }
    if (role_is_gemma3(role)) {
      KEEL_ENSURE(gemma3, Status::ModelShapeMismatch, "tensor %s belongs to the Gemma3 family, not to this model's",
                  name);
    }
    if (role == TensorRole::Output) {
      KEEL_ENSURE(!tied, Status::ModelShapeMismatch, "tensor %s present but arch.tied_output is true", name);
    }

    uint64_t rows = 0, cols = 0;
    expected_shape(role, s, rows, cols);
    const auto* shape = t->shape();
    const uint32_t rank = shape ? shape->size() : 0;
    const bool vec = role_is_vector(role);
    const bool shape_ok =
        vec ? (rank == 1 && shape->Get(0) == cols) : (rank == 2 && shape->Get(0) == rows && shape->Get(1) == cols);
    KEEL_ENSURE(shape_ok, Status::ModelShapeMismatch,
                "tensor %s has shape [%" PRIu32 "%s%" PRIu32 "]; hyper-parameters require [%llu%s%llu]", name,
                rank > 0 ? shape->Get(0) : 0, rank > 1 ? ", " : "", rank > 1 ? shape->Get(1) : 0,
                vec ? (unsigned long long)cols : (unsigned long long)rows, vec ? "" : ", ",
                vec ? 0ull : (unsigned long long)cols);
    // The K-quant kernels walk whole superblocks; their headers hold no padding scales.
    KEEL_ENSURE(!is_kquant(t->dtype()) || cols % kSuperBlock == 0, Status::ModelBadDType,
                "tensor %s is %s with %llu columns; %s needs a multiple of %" PRIu32, name,
                fb::EnumNameDType(t->dtype()), (unsigned long long)cols, fb::EnumNameDType(t->dtype()), kSuperBlock);

    const uint64_t off = t->offset(), size = t->size();
    KEEL_ENSURE(off % 64 == 0, Status::ModelMisaligned, "tensor %s at data offset %llu; expected a multiple of 64",
                name, (unsigned long long)off);
    KEEL_ENSURE(off <= dsize && size <= dsize - off, Status::ModelBadOffset,
                "tensor %s spans [%llu, %llu) but the data section has %llu bytes", name, (unsigned long long)off,
                (unsigned long long)off + size, (unsigned long long)dsize);
    KEEL_ENSURE(off >= prev_end, Status::ModelDuplicateTensor,
                "tensor %s starts at %llu, inside the previous tensor (ends at %llu); tensors must be "
                "in increasing offset order without overlap",
                name, (unsigned long long)off, (unsigned long long)prev_end);
    prev_end = off + size;
    const uint64_t want_bytes = tensor_bytes(t->dtype(), rows, cols);
    KEEL_ENSURE(size == want_bytes, Status::ModelBadSize, "tensor %s is %llu bytes; %s [%llu, %llu] takes %llu", name,
                (unsigned long long)size, fb::EnumNameDType(t->dtype()), (unsigned long long)rows,
                (unsigned long long)cols, (unsigned long long)want_bytes);

    uint16_t& slot = index_[role_is_per_layer(role) ? layer : kMaxLayers][role_v];
    KEEL_ENSURE(slot == 0, Status::ModelDuplicateTensor, "tensor %s appears twice", name);
    KEEL_ENSURE(i < 0xffff, Status::ModelBadHyper, "too many tensors (%" PRIu32 ")", tensors->size());
    slot = uint16_t(i + 1);
  }

  // Every required tensor present.
  const TensorRole per_layer[] = {TensorRole::AttnNorm, TensorRole::Wq,      TensorRole::Wk,
                                  TensorRole::Wv,       TensorRole::Wo,      TensorRole::FfnNorm,
                                  TensorRole::FfnGate,  TensorRole::FfnDown, TensorRole::FfnUp};
  const TensorRole biases[] = {TensorRole::Bq, TensorRole::Bk, TensorRole::Bv};
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    for (TensorRole r : per_layer) {
      KEEL_ENSURE(index_[l][unsigned(r)] != 0, Status::ModelMissingTensor, "tensor %s is missing",
                  canonical_tensor_name(r, int(l), want, sizeof want));
    }
    for (TensorRole r :
         {TensorRole::AttnQNorm, TensorRole::AttnKNorm, TensorRole::PostAttnNorm, TensorRole::PostFfnNorm}) {
      KEEL_ENSURE(!gemma3 || index_[l][unsigned(r)] != 0, Status::ModelMissingTensor, "tensor %s is missing",
                  canonical_tensor_name(r, int(l), want, sizeof want));
    }
    if (qkv_bias) {
      for (TensorRole r : biases) {
        KEEL_ENSURE(index_[l][unsigned(r)] != 0, Status::ModelMissingTensor, "tensor %s is missing",
                    canonical_tensor_name(r, int(l), want, sizeof want));
      }
    }
  }
  KEEL_ENSURE(index_[kMaxLayers][unsigned(TensorRole::TokenEmbedding)] != 0, Status::ModelMissingTensor,
              "tensor token_embd.weight is missing");
  KEEL_ENSURE(index_[kMaxLayers][unsigned(TensorRole::OutputNorm)] != 0, Status::ModelMissingTensor,
              "tensor output_norm.weight is missing");
  KEEL_ENSURE(tied || index_[kMaxLayers][unsigned(TensorRole::Output)] != 0, Status::ModelMissingTensor,
              "tensor output.weight is missing and arch.tied_output is false");

  meta_ = m;
  data_ = p + doff;
  data_size_ = dsize;
  shape_ = s;
  image_ = image;
  return Error();
}

TensorView Model::tensor(TensorRole role, int layer) const {
  TensorView v;
  if (!meta_) return v;
  const unsigned r = static_cast<unsigned>(role);
  if (r >= kRoleCount) return v;
  uint16_t slot;
  if (role_is_per_layer(role)) {
    if (layer < 0 || uint32_t(layer) >= shape_.n_layers) return v;
    slot = index_[layer][r];
  } else {
    slot = index_[kMaxLayers][r];
  }
  if (slot == 0) return v;
  const fb::Tensor* t = meta_->tensors()->Get(slot - 1u);
  v.dtype = t->dtype();
  v.rows = t->shape()->size() == 2 ? t->shape()->Get(0) : 1;
  v.cols = t->shape()->size() == 2 ? t->shape()->Get(1) : t->shape()->Get(0);
  v.data = data_ + t->offset();
  v.bytes = t->size();
  return v;
}

Error Model::verify_checksums() const {
  KEEL_ENSURE(meta_ != nullptr, Status::InvalidArgument, "model is not loaded");
  if (meta_->format_version() >= kFirstTrailerVersion) KEEL_TRY(verify_trailer(image_));
  return verify_data_checksums();
}

Error Model::verify_data_checksums() const {
  KEEL_ENSURE(has_checksums(), Status::ModelNoChecksums,
              "format version %" PRIu32 " carries no tensor checksums; expected version >= %" PRIu32
              " (convert the source again)",
              meta_->format_version(), kFirstChecksumVersion);
  const bool whole_file = meta_->format_version() >= kFirstTrailerVersion;
  const auto* tensors = meta_->tensors();
  uint64_t prev_end = 0;
  for (uint32_t i = 0; i < tensors->size(); ++i) {
    const fb::Tensor* t = tensors->Get(i);
    if (whole_file) {
      // The padding before each tensor is zero by the layout rule (docs/format.md).
      for (uint64_t at = prev_end; at < t->offset(); ++at) {
        KEEL_ENSURE(data_[at] == 0, Status::ModelChecksumMismatch,
                    "padding before tensor %s: byte %llu of the data section is 0x%02x; expected 0", t->name()->c_str(),
                    (unsigned long long)at, data_[at]);
      }
      prev_end = t->offset() + t->size();
    }
    const uint32_t actual = crc32c(data_ + t->offset(), size_t(t->size()));
    KEEL_ENSURE(actual == t->crc32c(), Status::ModelChecksumMismatch,
                "tensor %s: CRC-32C of its %llu bytes is %08" PRIx32 "; the file says %08" PRIx32, t->name()->c_str(),
                (unsigned long long)t->size(), actual, t->crc32c());
  }
  return Error();
}

Error Model::check_tokens(Span<const int32_t> tokens) const {
  const uint32_t vocab = shape_.vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    KEEL_ENSURE(tokens[i] >= 0 && uint32_t(tokens[i]) < vocab, Status::InvalidArgument,
                "token id %" PRId32 " at %zu; expected 0..%" PRIu32, tokens[i], i, vocab - 1);
  }
  return Error();
}

}  // namespace keel
