#include "llm/transformer.h"

#include <cinttypes>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/f16.h"
#include "core/kv_type.h"
#include "kernels/dequant.h"
#include "kernels/rope.h"

namespace keel {

using fb::TensorRole;

LayerWeights layer_weights(const Model& m, uint32_t l) {
  const int L = int(l);
  return LayerWeights{
      m.tensor(TensorRole::AttnNorm, L), m.tensor(TensorRole::Wq, L),    m.tensor(TensorRole::Wk, L),
      m.tensor(TensorRole::Wv, L),       m.tensor(TensorRole::Wo, L),    m.tensor(TensorRole::Bq, L),
      m.tensor(TensorRole::Bk, L),       m.tensor(TensorRole::Bv, L),    m.tensor(TensorRole::FfnNorm, L),
      m.tensor(TensorRole::FfnGate, L),  m.tensor(TensorRole::FfnUp, L), m.tensor(TensorRole::FfnDown, L)};
}

void rope_inverse_frequencies(const Model& model, uint32_t rope_dim, double* out) {
  const fb::Hyper* h = model.meta()->hyper();
  const fb::RopeScaling* rs = h->rope_scaling();
  const double theta = h->rope_theta();
  for (uint32_t i = 0; i < rope_dim / 2; ++i) {
    double f = 1.0 / std::pow(theta, double(2 * i) / double(rope_dim));
    if (rs && rs->kind() == fb::RopeScalingKind::Linear) {
      f /= rs->factor();
    } else if (rs && rs->kind() == fb::RopeScalingKind::Llama3) {
      const double pi = 3.14159265358979323846;
      const double orig = rs->original_context_length() ? rs->original_context_length() : 8192;
      const double low_wavelen = orig / rs->low_freq_factor(), high_wavelen = orig / rs->high_freq_factor();
      const double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f /= rs->factor();
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (orig / wavelen - rs->low_freq_factor()) / (rs->high_freq_factor() - rs->low_freq_factor());
        f = (1 - smooth) * f / rs->factor() + smooth * f;
      }
    }
    out[i] = f;
  }
}

Error Transformer::init(const Model& model, Backend& backend, const PlanConfig& config, const RegionMap& regions) {
  KEEL_ENSURE(model.loaded(), Status::InvalidArgument, "model is not loaded");
  KEEL_ENSURE(config.chunk_tokens >= 1 && config.threads >= 1 && config.logit_rows >= 1 &&
                  config.logit_rows <= config.chunk_tokens,
              Status::InvalidArgument,
              "plan config: chunk %" PRIu32 ", threads %" PRIu32 ", logit rows %" PRIu32
              "; expected all >= 1 and logit rows <= chunk",
              config.chunk_tokens, config.threads, config.logit_rows);
  model_ = &model;
  shape_ = model.shape();
  config_ = config;
  backend_ = &backend;
  const fb::Hyper* h = model.meta()->hyper();
  norm_eps_ = h->norm_eps();
  rope_dim_ = h->rope_dim() ? h->rope_dim() : shape_.head_dim;
  rope_halves_ = h->rope_style() == fb::RopeStyle::Halves;
  qkv_bias_ = model.meta()->arch()->qkv_bias();
  token_embd_ = model.tensor(TensorRole::TokenEmbedding);
  output_norm_ = model.tensor(TensorRole::OutputNorm);
  output_ = model.meta()->arch()->tied_output() ? token_embd_ : model.tensor(TensorRole::Output);
  capacity_ = config.kv_budget_tokens + config.chunk_tokens;

  inv_freq_ = regions.get<double>(Region::RopeInvFreq);
  x_ = regions.get<float>(Region::X);
  xb_ = regions.get<float>(Region::Xb);
  q_ = regions.get<float>(Region::Q);
  k_ = regions.get<float>(Region::K);
  v_ = regions.get<float>(Region::V);
  att_ = regions.get<float>(Region::Att);
  hb_ = regions.get<float>(Region::Hb);
  hb2_ = regions.get<float>(Region::Hb2);
  xq_ = regions.get<ActBlock>(Region::Xq);
  cos_ = regions.get<float>(Region::RopeCos);
  sin_ = regions.get<float>(Region::RopeSin);
  att_rows_ = regions.get<float>(Region::AttRows);
  qrot_ = regions.get<float>(Region::QRot);
  shift_cos_ = regions.get<float>(Region::ShiftCos);
  shift_sin_ = regions.get<float>(Region::ShiftSin);
  logit_rows_ = regions.get<float>(Region::LogitRows);
  KEEL_ENSURE(inv_freq_ && x_ && xb_ && q_ && k_ && v_ && att_ && hb_ && hb2_ && xq_ && cos_ && sin_ && att_rows_ &&
                  qrot_ && shift_cos_ && shift_sin_ && logit_rows_,
              Status::Internal, "the plan lacks a buffer of the forward pass");
  rope_inverse_frequencies(model, rope_dim_, inv_freq_);
  return Error();
}

void Transformer::embed(const int32_t* tokens, uint32_t n) {
  for (uint32_t t = 0; t < n; ++t) {
    dequantize_row(token_embd_.dtype, token_embd_.data, token_embd_.rows, token_embd_.cols, uint32_t(tokens[t]),
                   x_ + uint64_t(t) * shape_.dim);
  }
}

void Transformer::rope_tables(int64_t pos0, uint32_t n) {
  const uint32_t half = rope_dim_ / 2;
  for (uint32_t t = 0; t < n; ++t) {
    keel::rope_angles(double(pos0 + t), inv_freq_, half, cos_ + uint64_t(t) * half, sin_ + uint64_t(t) * half);
  }
}

void Transformer::apply_rope(float* rows, uint32_t n, uint32_t n_heads, uint32_t row_stride) {
  const uint32_t half = rope_dim_ / 2, hd = shape_.head_dim;
  for (uint32_t t = 0; t < n; ++t) {
    const float* c = cos_ + uint64_t(t) * half;
    const float* s = sin_ + uint64_t(t) * half;
    for (uint32_t h = 0; h < n_heads; ++h)
      rope_rotate(rows + uint64_t(t) * row_stride + uint64_t(h) * hd, half, rope_halves_, c, s);
  }
}

void Transformer::attention(KvCache& kv, uint32_t layer, uint32_t n) {
  AttentionArgs a{};
  a.q = q_;
  a.out = att_;
  a.keys = kv.keys(layer, 0);
  a.values = kv.values(layer, 0);
  a.head_stride = uint64_t(kv.shape().capacity) * kv.row_halves();
  a.kv_type = config_.kv_type;
  a.n = n;
  a.n_heads = shape_.n_heads;
  a.n_kv_heads = shape_.n_kv_heads;
  a.head_dim = shape_.head_dim;
  a.visible = kv.visible();
  a.prefix = kv.prefix();
  a.rope_pairs = rope_dim_ / 2;
  a.rope_halves = rope_halves_;
  a.shift_cos = shift_cos_;
  a.shift_sin = shift_sin_;
  a.rows = att_rows_;
  a.qrot = qrot_;
  a.row_capacity = capacity_;
  backend_->attention(a);
}

void Transformer::rope_angles(int64_t position, float* cos, float* sin) const {
  keel::rope_angles(double(position), inv_freq_, rope_dim_ / 2, cos, sin);
}

void Transformer::rotate_key(uint16_t* key, int64_t from, int64_t to) const {
  float tmp[kMaxHeadDim], cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
  const uint32_t hd = shape_.head_dim, pairs = rope_dim_ / 2;
  kv_dequantize_row(config_.kv_type, key, hd, tmp);
  keel::rope_angles(double(to - from), inv_freq_, pairs, cs, sn);
  rope_rotate(tmp, pairs, rope_halves_, cs, sn);
  kv_quantize_row(config_.kv_type, tmp, hd, key);
}

void Transformer::attention_row(uint32_t worker, const float* q, const float* angles_t, const float* angles_c,
                                const uint16_t* keys, const int32_t* positions, uint32_t prefix, uint32_t total,
                                int64_t t, float* row) {
  float qt[kMaxHeadDim], qc[kMaxHeadDim];
  const uint32_t hd = shape_.head_dim, pairs = rope_dim_ / 2;
  const float scale = 1.0f / std::sqrt(float(hd));
  memcpy(qt, q, hd * sizeof(float));
  memcpy(qc, q, hd * sizeof(float));
  rope_rotate(qt, pairs, rope_halves_, angles_t, angles_t + pairs);
  rope_rotate(qc, pairs, rope_halves_, angles_c, angles_c + pairs);
  const KvType type = config_.kv_type;
  if (prefix > 0) backend_->scores(type, qc, keys, prefix, hd, scale, row);
  backend_->scores(type, qt, keys + uint64_t(prefix) * kv_row_halves(type, hd), total - prefix, hd, scale,
                   row + prefix);
  for (uint32_t p = prefix; p < total; ++p) {
    if (positions[p] > t) row[p] = -INFINITY;
  }
  backend_->softmax(worker, row, total);
}

Error Transformer::forward(KvCache& kv, const int32_t* tokens, uint32_t n, float* logits, uint32_t n_logits) {
  KEEL_ENSURE(n >= 1 && n <= config_.chunk_tokens, Status::InvalidArgument,
              "chunk of %" PRIu32 " tokens; expected 1..%" PRIu32, n, config_.chunk_tokens);
  KEEL_ENSURE(kv.visible() + n <= kv.shape().capacity, Status::KvFull,
              "KV cache shows %" PRIu32 " of %" PRIu32 " entries; %" PRIu32 " more do not fit", kv.visible(),
              kv.shape().capacity, n);
  KEEL_ENSURE(n_logits <= n && n_logits <= config_.logit_rows, Status::InvalidArgument,
              "%" PRIu32 " logit rows requested; expected <= %" PRIu32, n_logits, config_.logit_rows);
  KEEL_TRY(model_->check_tokens(Span<const int32_t>(tokens, n)));
  Backend& be = *backend_;
  const uint32_t dim = shape_.dim, hd = shape_.head_dim, ffn = shape_.ffn_dim;
  const uint32_t q_dim = shape_.n_heads * hd, kv_dim = shape_.n_kv_heads * hd;
  const uint32_t size_before = kv.visible();
  const int64_t pos0 = kv.next_position();
  const uint32_t obs_window = kv.shape().obs_window;

  embed(tokens, n);
  rope_tables(pos0, n);
  if (kv.prefix() > 0) {
    // Cache index minus position is the same for every token of the chunk.
    keel::rope_angles(double(int64_t(size_before) - pos0), inv_freq_, rope_dim_ / 2, shift_cos_, shift_sin_);
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    const LayerWeights w = layer_weights(*model_, l);
    const float* attn_norm = reinterpret_cast<const float*>(w.attn_norm.data);
    for (uint32_t t = 0; t < n; ++t)
      be.rmsnorm(x_ + uint64_t(t) * dim, attn_norm, dim, norm_eps_, xb_ + uint64_t(t) * dim);
    // q, k and v read the same normalized input: quantize it once.
    const bool shared_q = is_quantized(w.wq.dtype) && is_quantized(w.wk.dtype) && is_quantized(w.wv.dtype);
    if (shared_q) be.quantize_rows(xb_, n, dim, dim, xq_);
    be.matmul(w.wq, xb_, dim, xq_, shared_q, n, q_, q_dim);
    be.matmul(w.wk, xb_, dim, xq_, shared_q, n, k_, kv_dim);
    be.matmul(w.wv, xb_, dim, xq_, shared_q, n, v_, kv_dim);
    if (qkv_bias_) {
      for (uint32_t t = 0; t < n; ++t) {
        be.add(q_ + uint64_t(t) * q_dim, reinterpret_cast<const float*>(w.bq.data), q_dim, q_ + uint64_t(t) * q_dim);
        be.add(k_ + uint64_t(t) * kv_dim, reinterpret_cast<const float*>(w.bk.data), kv_dim, k_ + uint64_t(t) * kv_dim);
        be.add(v_ + uint64_t(t) * kv_dim, reinterpret_cast<const float*>(w.bv.data), kv_dim, v_ + uint64_t(t) * kv_dim);
      }
    }
    // SnapKV scores the cache with the last queries, kept unrotated.
    for (uint32_t t = (n > obs_window ? n - obs_window : 0); obs_window > 0 && t < n; ++t) {
      memcpy(kv.observation(l, pos0 + t), q_ + uint64_t(t) * q_dim, uint64_t(q_dim) * 4);
    }
    apply_rope(q_, n, shape_.n_heads, q_dim);
    apply_rope(k_, n, shape_.n_kv_heads, kv_dim);
    // Append this chunk's keys and values (rows of the cache's type) and positions to every KV head.
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      uint16_t* kc = kv.keys(l, h);
      uint16_t* vc = kv.values(l, h);
      int32_t* pc = kv.positions(l, h);
      for (uint32_t t = 0; t < n; ++t) {
        const uint64_t at = uint64_t(size_before + t) * kv.row_halves();
        const float* kt = k_ + uint64_t(t) * kv_dim + uint64_t(h) * hd;
        const float* vt = v_ + uint64_t(t) * kv_dim + uint64_t(h) * hd;
        if (config_.kv_type == KvType::F16) {
          be.to_half(kt, hd, kc + at);
          be.to_half(vt, hd, vc + at);
        } else {
          kv_quantize_row(config_.kv_type, kt, hd, kc + at);
          kv_quantize_row(config_.kv_type, vt, hd, vc + at);
        }
        pc[size_before + t] = int32_t(pos0 + t);
      }
    }
    attention(kv, l, n);
    be.matmul(w.wo, att_, q_dim, xq_, false, n, xb_, dim);
    for (uint32_t t = 0; t < n; ++t)
      be.add(x_ + uint64_t(t) * dim, xb_ + uint64_t(t) * dim, dim, x_ + uint64_t(t) * dim);

    const float* ffn_norm = reinterpret_cast<const float*>(w.ffn_norm.data);
    for (uint32_t t = 0; t < n; ++t)
      be.rmsnorm(x_ + uint64_t(t) * dim, ffn_norm, dim, norm_eps_, xb_ + uint64_t(t) * dim);
    const bool shared_f = is_quantized(w.gate.dtype) && is_quantized(w.up.dtype);
    if (shared_f) be.quantize_rows(xb_, n, dim, dim, xq_);
    be.matmul(w.gate, xb_, dim, xq_, shared_f, n, hb_, ffn);
    be.matmul(w.up, xb_, dim, xq_, shared_f, n, hb2_, ffn);
    for (uint32_t t = 0; t < n; ++t)
      be.silu_mul(hb_ + uint64_t(t) * ffn, hb2_ + uint64_t(t) * ffn, ffn, hb_ + uint64_t(t) * ffn);
    be.matmul(w.down, hb_, ffn, xq_, false, n, xb_, dim);
    for (uint32_t t = 0; t < n; ++t)
      be.add(x_ + uint64_t(t) * dim, xb_ + uint64_t(t) * dim, dim, x_ + uint64_t(t) * dim);
  }
  kv.advance(n);

  if (logits && n_logits > 0) {
    const uint32_t first = n - n_logits;
    const float* onorm = reinterpret_cast<const float*>(output_norm_.data);
    for (uint32_t t = 0; t < n_logits; ++t) {
      be.rmsnorm(x_ + uint64_t(first + t) * dim, onorm, dim, norm_eps_, xb_ + uint64_t(t) * dim);
    }
    be.matmul(output_, xb_, dim, xq_, false, n_logits, logits, shape_.vocab_size);
  }
  return Error();
}

}  // namespace keel
