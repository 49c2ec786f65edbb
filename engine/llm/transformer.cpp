#include "llm/transformer.h"

#include <cinttypes>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/f16.h"
#include "core/kv_type.h"
#include "kernels/dequant.h"
#include "kernels/rope.h"
#include "llm/layer_ops.h"

namespace keel {

using fb::TensorRole;

LayerWeights layer_weights(const Model& m, uint32_t l) {
  const int L = int(l);
  return LayerWeights{
      m.tensor(TensorRole::AttnNorm, L),   m.tensor(TensorRole::Wq, L),        m.tensor(TensorRole::Wk, L),
      m.tensor(TensorRole::Wv, L),         m.tensor(TensorRole::Wo, L),        m.tensor(TensorRole::Bq, L),
      m.tensor(TensorRole::Bk, L),         m.tensor(TensorRole::Bv, L),        m.tensor(TensorRole::FfnNorm, L),
      m.tensor(TensorRole::FfnGate, L),    m.tensor(TensorRole::FfnUp, L),     m.tensor(TensorRole::FfnDown, L),
      m.tensor(TensorRole::AttnQNorm, L),  m.tensor(TensorRole::AttnKNorm, L), m.tensor(TensorRole::PostAttnNorm, L),
      m.tensor(TensorRole::PostFfnNorm, L)};
}

void rope_inverse_frequencies(const Model& model, uint32_t rope_dim, double* out, bool local) {
  const fb::Hyper* h = model.meta()->hyper();
  const fb::RopeScaling* rs = local ? nullptr : h->rope_scaling();
  const double theta = local ? h->rope_theta_local() : h->rope_theta();
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
  arch_ = find_architecture(model.meta()->arch()->family());
  KEEL_ENSURE(arch_ != nullptr, Status::UnsupportedArch, "architecture family %u has no forward pass",
              unsigned(model.meta()->arch()->family()));
  const AttentionTraits traits = arch_->attention(model);
  query_scale_ = traits.query_scale;
  sliding_window_ = traits.sliding_window;
  sliding_window_pattern_ = traits.sliding_window_pattern;
  local_layers_ = local_layer_count(shape_.n_layers, sliding_window_pattern_);
  token_embd_ = model.tensor(TensorRole::TokenEmbedding);
  output_norm_ = model.tensor(TensorRole::OutputNorm);
  output_ = model.meta()->arch()->tied_output() ? token_embd_ : model.tensor(TensorRole::Output);
  // Score rows span the larger of the two caches (att_rows is planned so).
  query_rows_ = plan_query_rows(shape_.n_heads, shape_.n_kv_heads);
  capacity_ = uint32_t(regions.bytes(Region::AttRows) / sizeof(float) / config.threads / query_rows_);
  step_rows_ = uint32_t(plan_step_rows(config.chunk_tokens, config.slots));

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
  inv_freq_local_ = inv_freq_ + rope_dim_ / 2;
  rope_inverse_frequencies(model, rope_dim_, inv_freq_);
  if (local_layers_ > 0) rope_inverse_frequencies(model, rope_dim_, inv_freq_local_, true);
  return Error();
}

void Transformer::embed(const int32_t* tokens, uint32_t n, uint32_t row0) {
  for (uint32_t t = 0; t < n; ++t) {
    dequantize_row(token_embd_.dtype, token_embd_.data, token_embd_.rows, token_embd_.cols, uint32_t(tokens[t]),
                   x_ + uint64_t(row0 + t) * shape_.dim);
  }
}

void Transformer::rope_tables(int64_t pos0, uint32_t n, uint32_t row0, bool local) {
  const uint32_t half = rope_dim_ / 2;
  const double* inv_freq = local ? inv_freq_local_ : inv_freq_;
  for (uint32_t t = 0; t < n; ++t) {
    const uint64_t at = uint64_t(row0 + t) * half;
    keel::rope_angles(double(pos0 + t), inv_freq, half, cos_ + at, sin_ + at);
  }
}

void Transformer::segment_rope_tables(const ForwardSegment* segs, uint32_t count, bool local) {
  for (uint32_t i = 0, row0 = 0; i < count; row0 += segs[i].n, ++i)
    rope_tables(segs[i].kv->next_position(), segs[i].n, row0, local);
}

void Transformer::norm_heads(float* rows, uint32_t n, uint32_t n_heads, uint32_t row_stride, const TensorView& w) {
  const uint32_t hd = shape_.head_dim;
  const float* weight = reinterpret_cast<const float*>(w.data);
  for (uint32_t t = 0; t < n; ++t) {
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* head = rows + uint64_t(t) * row_stride + uint64_t(h) * hd;
      backend_->rmsnorm(head, weight, hd, norm_eps_, head);
    }
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

bool Transformer::attention(KvCache& kv, uint32_t layer, uint32_t row0, uint32_t n, uint32_t seg, bool local,
                            AttentionArgs& a) {
  if (n == 1 && sparse_.budget && !local && sparse_attention(kv, layer, row0, seg)) return false;
  const uint64_t q_dim = uint64_t(shape_.n_heads) * shape_.head_dim, pairs = rope_dim_ / 2;
  a = AttentionArgs{};
  a.q = q_ + row0 * q_dim;
  a.out = att_ + row0 * q_dim;
  a.keys = kv.keys(layer, 0);  // `layer` is the index in kv (cache_layer)
  a.values = kv.values(layer, 0);
  a.head_stride = uint64_t(kv.shape().capacity) * kv.row_halves();
  a.kv_type = config_.kv_type;
  a.n = n;
  a.n_heads = shape_.n_heads;
  a.n_kv_heads = shape_.n_kv_heads;
  a.head_dim = shape_.head_dim;
  a.visible = kv.visible();
  a.prefix = kv.index_rotated();
  a.rope_pairs = rope_dim_ / 2;
  a.rope_halves = rope_halves_;
  a.shift_cos = shift_cos_ + seg * pairs;
  a.shift_sin = shift_sin_ + seg * pairs;
  a.attn_scale = query_scale_;
  a.window = local ? sliding_window_ : 0;
  a.positions = kv.positions(layer, 0);
  a.positions_stride = kv.shape().capacity;
  a.rows = att_rows_;
  a.qrot = qrot_;
  a.row_capacity = capacity_;
  a.query_rows = query_rows_;
  return true;
}

ModelKvHooksConfig Transformer::kv_hooks_config() const {
  return ModelKvHooksConfig{backend_,        inv_freq_,    rope_dim_,      rope_halves_,
                            shape_.head_dim, query_scale_, config_.kv_type};
}

Error Transformer::check_segments(const ForwardSegment* segs, uint32_t count, uint32_t* rows) const {
  KEEL_ENSURE(count >= 1 && count <= config_.slots, Status::InvalidArgument,
              "pass of %" PRIu32 " segments; expected 1..%" PRIu32 " (the slots)", count, config_.slots);
  uint32_t total = 0, logit_segments = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const ForwardSegment& g = segs[i];
    KEEL_ENSURE(g.kv != nullptr && g.tokens != nullptr, Status::InvalidArgument,
                "segment %" PRIu32 " has no cache or tokens", i);
    KEEL_ENSURE(g.n >= 1 && g.n <= config_.chunk_tokens, Status::InvalidArgument,
                "chunk of %" PRIu32 " tokens; expected 1..%" PRIu32, g.n, config_.chunk_tokens);
    KEEL_ENSURE(g.kv->visible() + g.n <= g.kv->shape().capacity, Status::KvFull,
                "KV cache shows %" PRIu32 " of %" PRIu32 " entries; %" PRIu32 " more do not fit", g.kv->visible(),
                g.kv->shape().capacity, g.n);
    KEEL_ENSURE(local_layers_ == 0 || (g.local_kv != nullptr && g.local_kv->shape().n_layers == local_layers_ &&
                                       g.local_kv->next_position() == g.kv->next_position()),
                Status::InvalidArgument, "segment %" PRIu32 " lacks the ring of the model's %" PRIu32 " local layers",
                i, local_layers_);
    KEEL_ENSURE(g.kv->shape().n_layers == shape_.n_layers - local_layers_, Status::InvalidArgument,
                "segment %" PRIu32 " has a cache of %" PRIu32 " layers; the model has %" PRIu32 " global layers", i,
                g.kv->shape().n_layers, shape_.n_layers - local_layers_);
    KEEL_ENSURE(local_layers_ == 0 || g.local_kv->visible() + g.n <= g.local_kv->shape().capacity, Status::KvFull,
                "local KV ring shows %" PRIu32 " of %" PRIu32 " entries; %" PRIu32 " more do not fit",
                g.local_kv->visible(), g.local_kv->shape().capacity, g.n);
    KEEL_ENSURE(g.n_logits <= g.n && g.n_logits <= config_.logit_rows && (g.n_logits == 0 || g.logits),
                Status::InvalidArgument, "%" PRIu32 " logit rows requested; expected <= %" PRIu32, g.n_logits,
                config_.logit_rows);
    for (uint32_t j = 0; j < i; ++j) {
      KEEL_ENSURE(segs[j].kv != g.kv, Status::InvalidArgument, "segments %" PRIu32 " and %" PRIu32 " share a cache", j,
                  i);
    }
    KEEL_TRY(model_->check_tokens(Span<const int32_t>(g.tokens, g.n)));
    total += g.n;
    logit_segments += g.n_logits > 0 ? 1 : 0;
    KEEL_ENSURE(logit_segments <= 1 || g.n_logits <= 1, Status::InvalidArgument,
                "segment %" PRIu32 " asks for %" PRIu32 " logit rows beside another segment's; expected 1", i,
                g.n_logits);
  }
  KEEL_ENSURE(total <= step_rows_, Status::InvalidArgument, "pass of %" PRIu32 " rows; the plan holds %" PRIu32, total,
              step_rows_);
  *rows = total;
  return Error();
}

Error Transformer::forward(const ForwardSegment* segs, uint32_t count) {
  uint32_t rows = 0;  // R: the pass's rows, segment after segment
  KEEL_TRY(check_segments(segs, count, &rows));
  const uint32_t pairs = rope_dim_ / 2;
  pass_segments_ = segs;
  pass_count_ = count;
  pass_rows_ = rows;

  // x [R][dim] embeddings; cos_, sin_ [R][pairs] at each row's own position (global layers');
  // shift_cos_, shift_sin_ [segment][pairs] (cache index minus position, the same for a
  // segment's rows).
  for (uint32_t i = 0, row0 = 0; i < count; row0 += segs[i].n, ++i) {
    const ForwardSegment& g = segs[i];
    const int64_t pos0 = g.kv->next_position();
    embed(g.tokens, g.n, row0);
    rope_tables(pos0, g.n, row0, false);
    if (g.kv->index_rotated() > 0) {
      keel::rope_angles(double(int64_t(g.kv->visible()) - pos0), inv_freq_, pairs, shift_cos_ + uint64_t(i) * pairs,
                        shift_sin_ + uint64_t(i) * pairs);
    }
  }
  tables_local_ = false;
  LayerOps ops(*this);
  arch_->forward(ops);
  for (uint32_t i = 0; i < count; ++i) {
    segs[i].kv->advance(segs[i].n);
    if (local_layers_ > 0) segs[i].local_kv->advance(segs[i].n);
  }
  logits(segs, count);
  return Error();
}

void Transformer::rmsnorm_rows(const float* in, const TensorView& weight, float* out) {
  const uint32_t dim = shape_.dim;
  const float* w = reinterpret_cast<const float*>(weight.data);
  for (uint32_t t = 0; t < pass_rows_; ++t)
    backend_->rmsnorm(in + uint64_t(t) * dim, w, dim, norm_eps_, out + uint64_t(t) * dim);
}

void Transformer::scale_rows(float* rows, float s) {
  for (uint64_t i = 0; i < uint64_t(pass_rows_) * shape_.dim; ++i) rows[i] *= s;
}

void Transformer::project_qkv(const LayerWeights& w) {
  Backend& be = *backend_;
  const uint32_t dim = shape_.dim, rows = pass_rows_;
  const uint32_t q_dim = shape_.n_heads * shape_.head_dim, kv_dim = shape_.n_kv_heads * shape_.head_dim;
  // q, k and v read the same normalized input: quantize it once.
  const bool shared_q = is_quantized(w.wq.dtype) && is_quantized(w.wk.dtype) && is_quantized(w.wv.dtype);
  if (shared_q) be.quantize_rows(xb_, rows, dim, dim, xq_);
  be.matmul(w.wq, xb_, dim, xq_, shared_q, rows, q_, q_dim);
  be.matmul(w.wk, xb_, dim, xq_, shared_q, rows, k_, kv_dim);
  be.matmul(w.wv, xb_, dim, xq_, shared_q, rows, v_, kv_dim);
  if (!qkv_bias_) return;
  for (uint32_t t = 0; t < rows; ++t) {
    be.add(q_ + uint64_t(t) * q_dim, reinterpret_cast<const float*>(w.bq.data), q_dim, q_ + uint64_t(t) * q_dim);
    be.add(k_ + uint64_t(t) * kv_dim, reinterpret_cast<const float*>(w.bk.data), kv_dim, k_ + uint64_t(t) * kv_dim);
    be.add(v_ + uint64_t(t) * kv_dim, reinterpret_cast<const float*>(w.bv.data), kv_dim, v_ + uint64_t(t) * kv_dim);
  }
}

void Transformer::norm_qk_heads(const LayerWeights& w) {
  const uint32_t q_dim = shape_.n_heads * shape_.head_dim, kv_dim = shape_.n_kv_heads * shape_.head_dim;
  norm_heads(q_, pass_rows_, shape_.n_heads, q_dim, w.q_norm);
  norm_heads(k_, pass_rows_, shape_.n_kv_heads, kv_dim, w.k_norm);
}

void Transformer::attend(uint32_t l) {
  const ForwardSegment* segs = pass_segments_;
  const uint32_t count = pass_count_, rows = pass_rows_, hd = shape_.head_dim;
  const uint32_t q_dim = shape_.n_heads * hd, kv_dim = shape_.n_kv_heads * hd;
  Backend& be = *backend_;
  const bool local = layer_is_local(l);
  if (local != tables_local_) {
    tables_local_ = local;
    segment_rope_tables(segs, count, local);
  }
  // SnapKV scores a slot's cache with its last queries, kept unrotated (global layers only:
  // the local ring has no observation window).
  const uint32_t cl = cache_layer(l);
  for (uint32_t i = 0, row0 = 0; i < count; row0 += segs[i].n, ++i) {
    layer_cache(segs[i], l).observe(cl, q_ + uint64_t(row0) * q_dim, segs[i].n);
  }
  apply_rope(q_, rows, shape_.n_heads, q_dim);
  apply_rope(k_, rows, shape_.n_kv_heads, kv_dim);
  // Each segment's keys and values (rows of the cache's type) and positions go behind its
  // cache's visible entries; then its rows attend to its cache (segments never share one).
  uint32_t pending = 0;
  for (uint32_t i = 0, row0 = 0; i < count; row0 += segs[i].n, ++i) {
    KvCache& kv = layer_cache(segs[i], l);
    const uint32_t n = segs[i].n, size_before = kv.visible();
    const int64_t pos0 = kv.next_position();
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      uint16_t* kc = kv.keys(cl, h);
      uint16_t* vc = kv.values(cl, h);
      int32_t* pc = kv.positions(cl, h);
      for (uint32_t t = 0; t < n; ++t) {
        const uint64_t at = uint64_t(size_before + t) * kv.row_halves();
        const uint64_t row = uint64_t(row0 + t) * kv_dim + uint64_t(h) * hd;
        if (config_.kv_type == KvType::F16) {
          be.to_half(k_ + row, hd, kc + at);
          be.to_half(v_ + row, hd, vc + at);
        } else {
          kv_quantize_row(config_.kv_type, k_ + row, hd, kc + at);
          kv_quantize_row(config_.kv_type, v_ + row, hd, vc + at);
        }
        pc[size_before + t] = int32_t(pos0 + t);
      }
    }
    if (attention(kv, cl, row0, n, i, local, attention_batch_[pending])) ++pending;  // att [R][q_dim]
    if (pending == kAttentionBatch || (i + 1 == count && pending > 0)) {
      be.attention_many(attention_batch_, pending);
      pending = 0;
    }
  }
}

void Transformer::project(const TensorView& w, const float* in, float* out) {
  backend_->matmul(w, in, w.cols, xq_, false, pass_rows_, out, w.rows);
}

void Transformer::residual(const float* delta) {
  const uint32_t dim = shape_.dim;
  for (uint32_t t = 0; t < pass_rows_; ++t)
    backend_->add(x_ + uint64_t(t) * dim, delta + uint64_t(t) * dim, dim, x_ + uint64_t(t) * dim);
}

void Transformer::gated_ffn(const LayerWeights& w, bool gelu) {
  Backend& be = *backend_;
  const uint32_t dim = shape_.dim, ffn = shape_.ffn_dim, rows = pass_rows_;
  const bool shared_f = is_quantized(w.gate.dtype) && is_quantized(w.up.dtype);
  if (shared_f) be.quantize_rows(xb_, rows, dim, dim, xq_);
  be.matmul(w.gate, xb_, dim, xq_, shared_f, rows, hb_, ffn);
  be.matmul(w.up, xb_, dim, xq_, shared_f, rows, hb2_, ffn);
  for (uint32_t t = 0; t < rows; ++t) {
    float* g = hb_ + uint64_t(t) * ffn;
    const float* u = hb2_ + uint64_t(t) * ffn;
    if (gelu) {
      be.gelu_mul(g, u, ffn, g);
    } else {
      be.silu_mul(g, u, ffn, g);
    }
  }
  be.matmul(w.down, hb_, ffn, xq_, false, rows, xb_, dim);
}

void Transformer::logits(const ForwardSegment* segs, uint32_t count) {
  // The rows that need logits, normalized into xb [L][dim], L <= max(logit_rows, slots); one
  // matmul over all of them. A lone segment gets its logits in place; several go through
  // logit_rows [L][vocab] and are copied to their slots.
  Backend& be = *backend_;
  const uint32_t dim = shape_.dim, vocab = shape_.vocab_size;
  const float* onorm = reinterpret_cast<const float*>(output_norm_.data);
  uint32_t n_rows = 0, with_logits = 0;
  const ForwardSegment* lone = nullptr;
  for (uint32_t i = 0, row0 = 0; i < count; row0 += segs[i].n, ++i) {
    const ForwardSegment& g = segs[i];
    if (g.n_logits == 0) continue;
    lone = &g;
    ++with_logits;
    for (uint32_t t = g.n - g.n_logits; t < g.n; ++t, ++n_rows) {
      be.rmsnorm(x_ + uint64_t(row0 + t) * dim, onorm, dim, norm_eps_, xb_ + uint64_t(n_rows) * dim);
    }
  }
  if (n_rows == 0) return;
  float* out = with_logits == 1 ? lone->logits : logit_rows_;
  be.matmul(output_, xb_, dim, xq_, false, n_rows, out, vocab);
  if (out == lone->logits) return;
  for (uint32_t i = 0, r = 0; i < count; ++i) {
    if (segs[i].n_logits == 0) continue;
    memcpy(segs[i].logits, logit_rows_ + uint64_t(r) * vocab, uint64_t(vocab) * sizeof(float));
    ++r;
  }
}

}  // namespace keel
