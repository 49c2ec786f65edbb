#include "llm/transformer.h"

#include <cinttypes>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/dequant.h"
#include "llm/rope.h"
#if defined(KEEL_HAVE_XNNPACK)
#include "kernels/xnnpack/xnn_memory.h"
#include "kernels/xnnpack/xnn_model_ops.h"
#endif

namespace keel {
namespace {

using fb::TensorRole;

WeightView as_weight(const TensorView& t) { return WeightView{t.dtype, t.rows, t.cols, t.data}; }

struct MatmulJob {
  const MatmulKernels* k;
  WeightView w;
  const ActBlock* xq;
  const float* xf;
  uint32_t x_stride;
  uint32_t n;
  float* y;
  uint32_t y_stride;
  uint32_t panels;
  uint32_t tasks;
};

void matmul_task(void* ctx, size_t i) {
  const MatmulJob& j = *static_cast<const MatmulJob*>(ctx);
  const uint32_t begin = uint32_t(uint64_t(j.panels) * i / j.tasks);
  const uint32_t end = uint32_t(uint64_t(j.panels) * (i + 1) / j.tasks);
  if (begin == end) return;
  if (j.xq) {
    j.k->matmul(j.w, j.xq, j.n, j.y, j.y_stride, begin, end);
  } else {
    j.k->matmul_f(j.w, j.xf, j.n, j.x_stride, j.y, j.y_stride, begin, end);
  }
}

struct AttentionJob {
  Transformer* self;
  KvCache* kv;
  const Backend* backend;
  xnn::ModelOps* xnn;
  uint32_t layer, n, n_heads, group, head_dim, tasks, capacity;
  uint32_t visible;          // entries before the chunk
  uint32_t prefix;           // of which the first `prefix` are rotated at their cache index
  uint32_t rope_pairs;       // rotated pairs per head
  bool rope_halves;
  const float* shift_cos;    // rotation by (cache index - position), per pair
  const float* shift_sin;
  const float* q;
  float* att;
  float* rows;               // [tasks][capacity]
  float* qrot;               // [tasks][head_dim]
};

// out = q rotated by the angle table (c, s): moves a query from its position to its cache index
// for the prefix keys (docs/kv.md).
void rotate_query(const float* q, const float* c, const float* s, uint32_t pairs, uint32_t hd, bool halves,
                  float* out) {
  for (uint32_t i = 0; i < hd; ++i) out[i] = q[i];
  for (uint32_t i = 0; i < pairs; ++i) {
    const uint32_t a = halves ? i : 2 * i, b = halves ? i + pairs : 2 * i + 1;
    out[a] = q[a] * c[i] - q[b] * s[i];
    out[b] = q[a] * s[i] + q[b] * c[i];
  }
}

void attention_task(void* ctx, size_t task) {
  const AttentionJob& j = *static_cast<const AttentionJob*>(ctx);
  const uint32_t total = j.n * j.n_heads;
  const uint32_t begin = uint32_t(uint64_t(total) * task / j.tasks);
  const uint32_t end = uint32_t(uint64_t(total) * (task + 1) / j.tasks);
  float* scores = j.rows + uint64_t(task) * j.capacity;
  float* qc = j.qrot + uint64_t(task) * j.head_dim;
  const float scale = 1.0f / std::sqrt(float(j.head_dim));
  const uint32_t q_dim = j.n_heads * j.head_dim;
  const uint64_t hd = j.head_dim;
  for (uint32_t item = begin; item < end; ++item) {
    const uint32_t t = item / j.n_heads, h = item % j.n_heads;
    const uint32_t kvh = h / j.group;
    // Causal: token t of the chunk sees the visible entries and chunk tokens <= t.
    const uint32_t len = j.visible + t + 1;
    const float* qh = j.q + uint64_t(t) * q_dim + uint64_t(h) * j.head_dim;
    const uint16_t* keys = j.kv->keys(j.layer, kvh);
    if (j.prefix > 0) {
      rotate_query(qh, j.shift_cos, j.shift_sin, j.rope_pairs, j.head_dim, j.rope_halves, qc);
      j.backend->attention->scores(qc, keys, j.prefix, j.head_dim, scale, scores);
    }
    j.backend->attention->scores(qh, keys + j.prefix * hd, len - j.prefix, j.head_dim, scale, scores + j.prefix);
#if defined(KEEL_HAVE_XNNPACK)
    if (!(j.xnn && j.xnn->softmax(uint32_t(task), scores, len))) j.backend->vector->softmax(scores, len);
#else
    j.backend->vector->softmax(scores, len);
#endif
    j.backend->attention->weighted_sum(scores, j.kv->values(j.layer, kvh), len, j.head_dim,
                                       j.att + uint64_t(t) * q_dim + uint64_t(h) * j.head_dim);
  }
}

#if defined(KEEL_HAVE_XNNPACK)
// The XNNPACK operators the transformer creates for a backend's ops and this model.
xnn::ModelOpsConfig xnnpack_config(const Model& model, const PlanConfig& config, uint32_t ops) {
  xnn::ModelOpsConfig c;
  c.fully_connected_f32 = (ops & kXnnFullyConnectedF32) != 0 && xnn::ModelOps::f32_matrix_count(model) > 0;
  c.softmax = (ops & kXnnSoftmax) != 0;
  c.workers = config.threads;
  c.capacity_tokens = config.kv_budget_tokens + config.chunk_tokens;
  return c;
}
#endif

}  // namespace

Result<uint64_t> xnnpack_persistent_bytes(const Model& model, const PlanConfig& config, BackendKind kind,
                                          Span<uint8_t> work) {
  KEEL_ENSURE(model.loaded(), Status::InvalidArgument, "model is not loaded");
  Result<Backend> b = select_backend(kind);
  if (!b.ok()) return b.error();
#if defined(KEEL_HAVE_XNNPACK)
  const xnn::ModelOpsConfig c = xnnpack_config(model, config, b.value().xnnpack_ops);
  if (!c.fully_connected_f32 && !c.softmax) return uint64_t(0);
  // Auto runs natively where XNNPACK cannot start (xnnpack itself fails in select_backend).
  if (kind == BackendKind::Auto && !xnn::initialize().ok()) return uint64_t(0);
  return xnn::ModelOps::measure(model, c, work);
#else
  return uint64_t(0);
#endif
}

uint64_t xnnpack_work_bytes(const Model& model, const PlanConfig& config, BackendKind kind) {
#if defined(KEEL_HAVE_XNNPACK)
  Result<Backend> b = select_backend(kind);
  if (!b.ok() || !model.loaded()) return 0;
  return xnn::ModelOps::work_bytes(model, xnnpack_config(model, config, b.value().xnnpack_ops));
#else
  return 0;
#endif
}

LayerWeights layer_weights(const Model& m, uint32_t l) {
  const int L = int(l);
  return LayerWeights{m.tensor(TensorRole::AttnNorm, L), m.tensor(TensorRole::Wq, L),  m.tensor(TensorRole::Wk, L),
                      m.tensor(TensorRole::Wv, L),       m.tensor(TensorRole::Wo, L),  m.tensor(TensorRole::Bq, L),
                      m.tensor(TensorRole::Bk, L),       m.tensor(TensorRole::Bv, L),  m.tensor(TensorRole::FfnNorm, L),
                      m.tensor(TensorRole::FfnGate, L),  m.tensor(TensorRole::FfnUp, L), m.tensor(TensorRole::FfnDown, L)};
}

Error Transformer::init(const Model& model, const Backend& backend, const PlanConfig& config, Arena& persistent,
                        Arena& scratch, const ThreadPool* pool) {
  KEEL_ENSURE(model.loaded(), Status::InvalidArgument, "model is not loaded");
  KEEL_ENSURE(backend.matmul && backend.vector && backend.attention, Status::InvalidArgument, "backend is incomplete");
  KEEL_ENSURE(config.chunk_tokens >= 1 && config.threads >= 1 && config.logit_rows >= 1 &&
                  config.logit_rows <= config.chunk_tokens,
              Status::InvalidArgument,
              "plan config: chunk %" PRIu32 ", threads %" PRIu32 ", logit rows %" PRIu32
              "; expected all >= 1 and logit rows <= chunk",
              config.chunk_tokens, config.threads, config.logit_rows);
  model_ = &model;
  shape_ = model.shape();
  config_ = config;
  backend_ = backend;
  pool_ = pool;
  const fb::Hyper* h = model.meta()->hyper();
  norm_eps_ = h->norm_eps();
  rope_dim_ = h->rope_dim() ? h->rope_dim() : shape_.head_dim;
  rope_halves_ = h->rope_style() == fb::RopeStyle::Halves;
  qkv_bias_ = model.meta()->arch()->qkv_bias();
  token_embd_ = model.tensor(TensorRole::TokenEmbedding);
  output_norm_ = model.tensor(TensorRole::OutputNorm);
  output_ = model.meta()->arch()->tied_output() ? token_embd_ : model.tensor(TensorRole::Output);
  capacity_ = config.kv_budget_tokens + config.chunk_tokens;

  // RoPE inverse frequencies in double, with Llama-3 / linear scaling folded in.
  inv_freq_ = persistent.allocate_array<double>(shape_.head_dim / 2);
  KEEL_ENSURE(inv_freq_, Status::ArenaTooSmall, "persistent arena too small for the RoPE table");
  const fb::RopeScaling* rs = h->rope_scaling();
  const double theta = h->rope_theta();
  for (uint32_t i = 0; i < rope_dim_ / 2; ++i) {
    double f = 1.0 / std::pow(theta, double(2 * i) / double(rope_dim_));
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
        const double smooth = (orig / wavelen - rs->low_freq_factor()) / (rs->high_freq_factor() - rs->low_freq_factor());
        f = (1 - smooth) * f / rs->factor() + smooth * f;
      }
    }
    inv_freq_[i] = f;
  }

  // The backend block (XNNPACK operators), right after the RoPE table as plan.h lays it out.
  xnn_ = nullptr;
  if (config.backend_bytes > 0) {
    const uint64_t block_bytes = plan_align(config.backend_bytes);
    uint8_t* block = static_cast<uint8_t*>(persistent.allocate(block_bytes));
    KEEL_ENSURE(block, Status::ArenaTooSmall, "persistent arena too small for the %llu-byte backend block",
                (unsigned long long)block_bytes);
#if defined(KEEL_HAVE_XNNPACK)
    const xnn::ModelOpsConfig xc = xnnpack_config(model, config, backend.xnnpack_ops);
    if (xc.fully_connected_f32 || xc.softmax) {
      Result<xnn::ModelOps*> ops = xnn::ModelOps::create(model, xc, Span<uint8_t>(block, block_bytes),
                                                         pool ? static_cast<pthreadpool*>(pool->native) : nullptr);
      if (!ops.ok()) return ops.error();
      xnn_ = ops.value();
    }
#endif
  }
  KEEL_ENSURE(backend.kind != BackendKind::Xnnpack || xnn_ != nullptr, Status::ArenaTooSmall,
              "backend 'xnnpack' keeps its operators in the persistent arena, but the plan reserved no bytes for "
              "them: set PlanConfig::backend_bytes from xnnpack_persistent_bytes()");

  const uint64_t chunk = config.chunk_tokens;
  const uint64_t q_dim = uint64_t(shape_.n_heads) * shape_.head_dim;
  const uint64_t kv_dim = uint64_t(shape_.n_kv_heads) * shape_.head_dim;
  uint64_t widest = shape_.dim;
  if (q_dim > widest) widest = q_dim;
  if (shape_.ffn_dim > widest) widest = shape_.ffn_dim;
  x_ = scratch.allocate_array<float>(chunk * shape_.dim);
  xb_ = scratch.allocate_array<float>(chunk * shape_.dim);
  q_ = scratch.allocate_array<float>(chunk * q_dim);
  k_ = scratch.allocate_array<float>(chunk * kv_dim);
  v_ = scratch.allocate_array<float>(chunk * kv_dim);
  att_ = scratch.allocate_array<float>(chunk * q_dim);
  hb_ = scratch.allocate_array<float>(chunk * shape_.ffn_dim);
  hb2_ = scratch.allocate_array<float>(chunk * shape_.ffn_dim);
  xq_ = scratch.allocate_array<ActBlock>(chunk * act_blocks(uint32_t(widest)));
  cos_ = scratch.allocate_array<float>(chunk * (shape_.head_dim / 2));
  sin_ = scratch.allocate_array<float>(chunk * (shape_.head_dim / 2));
  att_rows_ = scratch.allocate_array<float>(uint64_t(config.threads) * capacity_);
  qrot_ = scratch.allocate_array<float>(uint64_t(config.threads) * shape_.head_dim);
  shift_cos_ = scratch.allocate_array<float>(shape_.head_dim / 2);
  shift_sin_ = scratch.allocate_array<float>(shape_.head_dim / 2);
  // A runtime may be initialised again with another plan: nothing may point into old arenas.
  snap_row_ = snap_acc_ = snap_pool_ = nullptr;
  snap_order_ = snap_keep_ = nullptr;
  snap_compact_ = nullptr;
  snap_rope_ = nullptr;
  if (config.obs_window > 0) {
    const uint64_t per = uint64_t(config.threads) * capacity_;
    snap_row_ = scratch.allocate_array<float>(per);
    snap_acc_ = scratch.allocate_array<float>(per);
    snap_pool_ = scratch.allocate_array<float>(per);
    snap_order_ = scratch.allocate_array<uint32_t>(per);
    snap_keep_ = scratch.allocate_array<uint32_t>(per);
    snap_compact_ = scratch.allocate(per * (uint64_t(shape_.head_dim) * 4 + 4));
    snap_rope_ = scratch.allocate_array<float>(uint64_t(config.obs_window) * 2 * 4 * (shape_.head_dim / 2));
    KEEL_ENSURE(snap_row_ && snap_acc_ && snap_pool_ && snap_order_ && snap_keep_ && snap_compact_ && snap_rope_,
                Status::ArenaTooSmall, "scratch arena too small for SnapKV buffers");
  }
  logit_rows_ = scratch.allocate_array<float>(uint64_t(config.logit_rows) * shape_.vocab_size);
  KEEL_ENSURE(x_ && xb_ && q_ && k_ && v_ && att_ && hb_ && hb2_ && xq_ && cos_ && sin_ && att_rows_ && qrot_ &&
                  shift_cos_ && shift_sin_ && logit_rows_,
              Status::ArenaTooSmall, "scratch arena of %zu bytes is too small for chunk %" PRIu32, scratch.capacity(),
              config.chunk_tokens);
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
    rope_angles(double(pos0 + t), inv_freq_, half, cos_ + uint64_t(t) * half, sin_ + uint64_t(t) * half);
  }
}

void Transformer::apply_rope(float* rows, uint32_t n, uint32_t n_heads, uint32_t row_stride) {
  const uint32_t half = rope_dim_ / 2, hd = shape_.head_dim;
  for (uint32_t t = 0; t < n; ++t) {
    const float* c = cos_ + uint64_t(t) * half;
    const float* s = sin_ + uint64_t(t) * half;
    for (uint32_t h = 0; h < n_heads; ++h) {
      float* v = rows + uint64_t(t) * row_stride + uint64_t(h) * hd;
      for (uint32_t i = 0; i < half; ++i) {
        const uint32_t a = rope_halves_ ? i : 2 * i;
        const uint32_t b = rope_halves_ ? i + rope_dim_ / 2 : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

bool Transformer::quantize_input(const float* x, uint32_t n, uint32_t cols, uint32_t x_stride) {
  const uint32_t nb = act_blocks(cols);
  for (uint32_t t = 0; t < n; ++t) backend_.matmul->quantize_act(x + uint64_t(t) * x_stride, cols, xq_ + uint64_t(t) * nb);
  return true;
}

void Transformer::matmul(const TensorView& w, const float* x, uint32_t x_stride, bool x_quantized, uint32_t n, float* y,
                         uint32_t y_stride) {
#if defined(KEEL_HAVE_XNNPACK)
  if (xnn_ && w.dtype == fb::DType::F32 && xnn_->fully_connected(w.data, x, x_stride, n, y, y_stride)) return;
#endif
  MatmulJob j{};
  j.k = backend_.matmul;
  j.w = as_weight(w);
  const bool quant = is_quantized(w.dtype);
  if (quant && !x_quantized) quantize_input(x, n, w.cols, x_stride);
  j.xq = quant ? xq_ : nullptr;
  j.xf = x;
  j.x_stride = x_stride;
  j.n = n;
  j.y = y;
  j.y_stride = y_stride;
  j.panels = panel_count(w.rows);
  // A few items per thread, so a worker that gets descheduled mid-matmul leaves work the
  // others can take instead of a tail everyone waits on.
  const uint32_t threads = pool_ ? uint32_t(pool_->threads) : 1;
  const uint32_t items = threads > 1 ? threads * 4 : 1;
  j.tasks = j.panels < items ? j.panels : items;
  if (j.tasks == 0) return;
  parallel_for(pool_, j.tasks, matmul_task, &j);
}

void Transformer::attention(KvCache& kv, uint32_t layer, uint32_t n) {
  AttentionJob j{};
  j.self = this;
  j.kv = &kv;
  j.backend = &backend_;
  j.xnn = xnn_;
  j.layer = layer;
  j.n = n;
  j.n_heads = shape_.n_heads;
  j.group = shape_.n_heads / shape_.n_kv_heads;
  j.head_dim = shape_.head_dim;
  j.capacity = capacity_;
  j.visible = kv.visible();
  j.prefix = kv.prefix();
  j.rope_pairs = rope_dim_ / 2;
  j.rope_halves = rope_halves_;
  j.shift_cos = shift_cos_;
  j.shift_sin = shift_sin_;
  j.qrot = qrot_;
  j.q = q_;
  j.att = att_;
  j.rows = att_rows_;
  const uint32_t threads = pool_ ? uint32_t(pool_->threads) : 1;
  const uint32_t items = n * shape_.n_heads;
  j.tasks = items < threads ? items : threads;
  parallel_for(pool_, j.tasks, attention_task, &j);
}

Error Transformer::forward(KvCache& kv, const int32_t* tokens, uint32_t n, float* logits, uint32_t n_logits) {
  KEEL_ENSURE(n >= 1 && n <= config_.chunk_tokens, Status::InvalidArgument,
              "chunk of %" PRIu32 " tokens; expected 1..%" PRIu32, n, config_.chunk_tokens);
  KEEL_ENSURE(kv.visible() + n <= kv.shape().capacity, Status::KvFull,
              "KV cache shows %" PRIu32 " of %" PRIu32 " entries; %" PRIu32 " more do not fit", kv.visible(),
              kv.shape().capacity, n);
  KEEL_ENSURE(n_logits <= n && n_logits <= config_.logit_rows, Status::InvalidArgument,
              "%" PRIu32 " logit rows requested; expected <= %" PRIu32, n_logits, config_.logit_rows);
  for (uint32_t t = 0; t < n; ++t) {
    KEEL_ENSURE(tokens[t] >= 0 && uint32_t(tokens[t]) < shape_.vocab_size, Status::InvalidArgument,
                "token id %" PRId32 " at %" PRIu32 "; expected 0..%" PRIu32, tokens[t], t, shape_.vocab_size - 1);
  }
  const VectorKernels& vk = *backend_.vector;
  const uint32_t dim = shape_.dim, hd = shape_.head_dim, ffn = shape_.ffn_dim;
  const uint32_t q_dim = shape_.n_heads * hd, kv_dim = shape_.n_kv_heads * hd;
  const uint32_t size_before = kv.visible();
  const int64_t pos0 = kv.next_position();
  const uint32_t obs_window = kv.shape().obs_window;

  embed(tokens, n);
  rope_tables(pos0, n);
  if (kv.prefix() > 0) {
    // Cache index minus position is the same for every token of the chunk.
    rope_angles(double(int64_t(size_before) - pos0), inv_freq_, rope_dim_ / 2, shift_cos_, shift_sin_);
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    const LayerWeights w = layer_weights(*model_, l);
    const float* attn_norm = reinterpret_cast<const float*>(w.attn_norm.data);
    for (uint32_t t = 0; t < n; ++t) vk.rmsnorm(x_ + uint64_t(t) * dim, attn_norm, dim, norm_eps_, xb_ + uint64_t(t) * dim);
    // q, k and v read the same normalized input: quantize it once.
    const bool shared_q = is_quantized(w.wq.dtype) && is_quantized(w.wk.dtype) && is_quantized(w.wv.dtype);
    if (shared_q) quantize_input(xb_, n, dim, dim);
    matmul(w.wq, xb_, dim, shared_q, n, q_, q_dim);
    matmul(w.wk, xb_, dim, shared_q, n, k_, kv_dim);
    matmul(w.wv, xb_, dim, shared_q, n, v_, kv_dim);
    if (qkv_bias_) {
      for (uint32_t t = 0; t < n; ++t) {
        vk.add(q_ + uint64_t(t) * q_dim, reinterpret_cast<const float*>(w.bq.data), q_dim, q_ + uint64_t(t) * q_dim);
        vk.add(k_ + uint64_t(t) * kv_dim, reinterpret_cast<const float*>(w.bk.data), kv_dim, k_ + uint64_t(t) * kv_dim);
        vk.add(v_ + uint64_t(t) * kv_dim, reinterpret_cast<const float*>(w.bv.data), kv_dim, v_ + uint64_t(t) * kv_dim);
      }
    }
    // SnapKV scores the cache with the last queries, kept unrotated.
    for (uint32_t t = (n > obs_window ? n - obs_window : 0); obs_window > 0 && t < n; ++t) {
      memcpy(kv.observation(l, pos0 + t), q_ + uint64_t(t) * q_dim, uint64_t(q_dim) * 4);
    }
    apply_rope(q_, n, shape_.n_heads, q_dim);
    apply_rope(k_, n, shape_.n_kv_heads, kv_dim);
    // Append this chunk's keys and values (f16) and positions to every KV head.
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      uint16_t* kc = kv.keys(l, h);
      uint16_t* vc = kv.values(l, h);
      int32_t* pc = kv.positions(l, h);
      for (uint32_t t = 0; t < n; ++t) {
        const uint64_t at = uint64_t(size_before + t) * hd;
        backend_.attention->to_half(k_ + uint64_t(t) * kv_dim + uint64_t(h) * hd, hd, kc + at);
        backend_.attention->to_half(v_ + uint64_t(t) * kv_dim + uint64_t(h) * hd, hd, vc + at);
        pc[size_before + t] = int32_t(pos0 + t);
      }
    }
    attention(kv, l, n);
    matmul(w.wo, att_, q_dim, false, n, xb_, dim);
    for (uint32_t t = 0; t < n; ++t) vk.add(x_ + uint64_t(t) * dim, xb_ + uint64_t(t) * dim, dim, x_ + uint64_t(t) * dim);

    const float* ffn_norm = reinterpret_cast<const float*>(w.ffn_norm.data);
    for (uint32_t t = 0; t < n; ++t) vk.rmsnorm(x_ + uint64_t(t) * dim, ffn_norm, dim, norm_eps_, xb_ + uint64_t(t) * dim);
    const bool shared_f = is_quantized(w.gate.dtype) && is_quantized(w.up.dtype);
    if (shared_f) quantize_input(xb_, n, dim, dim);
    matmul(w.gate, xb_, dim, shared_f, n, hb_, ffn);
    matmul(w.up, xb_, dim, shared_f, n, hb2_, ffn);
    for (uint32_t t = 0; t < n; ++t) vk.silu_mul(hb_ + uint64_t(t) * ffn, hb2_ + uint64_t(t) * ffn, ffn, hb_ + uint64_t(t) * ffn);
    matmul(w.down, hb_, ffn, false, n, xb_, dim);
    for (uint32_t t = 0; t < n; ++t) vk.add(x_ + uint64_t(t) * dim, xb_ + uint64_t(t) * dim, dim, x_ + uint64_t(t) * dim);
  }
  kv.advance(n);

  if (logits && n_logits > 0) {
    const uint32_t first = n - n_logits;
    const float* onorm = reinterpret_cast<const float*>(output_norm_.data);
    for (uint32_t t = 0; t < n_logits; ++t) {
      vk.rmsnorm(x_ + uint64_t(first + t) * dim, onorm, dim, norm_eps_, xb_ + uint64_t(t) * dim);
    }
    matmul(output_, xb_, dim, false, n_logits, logits, shape_.vocab_size);
  }
  return Error();
}

}  // namespace keel
