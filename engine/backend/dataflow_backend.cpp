#include "backend/dataflow_backend.h"

#include <cinttypes>
#include <cmath>
#include <cstring>
#include <new>

#include "core/check.h"
#include "kernels/rope.h"

namespace keel {

Result<DfSchedule> DataflowBackend::plan_schedule(const Model& model, const BackendPlan& plan) {
  KEEL_ENSURE(plan.memory != nullptr, Status::UnsupportedBackend,
              "backend 'dataflow' needs a hardware description (--hw NAME|FILE)");
  // The schedule, the tiles and the counters are written for f16 rows; quantized rows would
  // need their own tile sizes and a tiled continuation of their weighted sums.
  KEEL_ENSURE(plan.kv_type == KvType::F16, Status::UnsupportedBackend,
              "backend 'dataflow' models an f16 KV cache; kv_type %s is not emulated", kv_type_name(plan.kv_type));
  DfScheduleInput in;
  in.model = df_model(model);
  in.memory = *plan.memory;
  in.kv_capacity_tokens = plan.capacity_tokens;
  in.local_capacity_tokens = plan.local_capacity_tokens;
  in.kv_pages = plan.kv_pages;
  in.slots = plan.slots;
  in.chunk_tokens = plan.chunk_tokens;
  KEEL_ENSURE(in.model.shape.n_kv_heads > 0 && in.model.shape.n_heads % in.model.shape.n_kv_heads == 0,
              Status::UnsupportedArch, "heads %" PRIu32 " not a multiple of KV heads %" PRIu32, in.model.shape.n_heads,
              in.model.shape.n_kv_heads);
  DfSchedule s = df_schedule(in);
  KEEL_ENSURE(s.fits, Status::ArenaTooSmall, "hardware '%s': %s", plan.memory->name, s.refusal);
  return s;
}

Result<uint64_t> DataflowBackend::measure_state(const Model& model, const BackendPlan& plan, Span<uint8_t>) const {
  Result<DfSchedule> s = plan_schedule(model, plan);
  if (!s.ok()) return s.error();
  return state_header_bytes() + plan.memory->sram_bytes;
}

Error DataflowBackend::create_state(const Model& model, const BackendPlan& plan, Span<uint8_t> block) {
  Result<DfSchedule> s = plan_schedule(model, plan);
  if (!s.ok()) return s.error();
  const uint64_t need = state_header_bytes() + plan.memory->sram_bytes;
  KEEL_ENSURE(block.size() >= need, Status::ArenaTooSmall,
              "dataflow state is %zu bytes; the schedule needs %" PRIu64 " (SRAM %" PRIu64 ")", block.size(), need,
              plan.memory->sram_bytes);
  state_ = new (block.data()) State();
  state_->memory = *plan.memory;
  state_->schedule = s.value();
  state_->model = df_model(model);
  sram_ = block.data() + state_header_bytes();
  shape_ = model.shape();
  norm_weight_ = nullptr;
  return Error();
}

void DataflowBackend::charge(DfCounters& c, bool onchip, uint32_t tier, uint64_t bytes) {
  if (onchip) {
    c.sram_bytes += bytes;
  } else {
    c.tier_bytes[tier] += bytes;
    c.tier_transfers[tier] += 1;
  }
}

DfOp DataflowBackend::classify(const TensorView& w) {
  if (w.rows == shape_.vocab_size && w.cols == shape_.dim) return DfOp::LmHead;
  if (w.cols == shape_.ffn_dim && w.rows == shape_.dim) return DfOp::FfnDown;
  if (w.rows == shape_.ffn_dim) return DfOp::FfnIn;
  if (after_attention_) {
    after_attention_ = false;
    return DfOp::OutProj;
  }
  return DfOp::QkvProj;
}

void DataflowBackend::quantize_rows(const float* x, uint32_t n, uint32_t cols, uint32_t x_stride, ActBlock* xq) {
  DfCounters& c = ctr(DfOp::Quantize);
  c.calls += 1;
  KernelBackend::quantize_rows(x, n, cols, x_stride, xq);
  c.vector_elems += uint64_t(n) * cols;
  c.sram_bytes += uint64_t(n) * cols * 4 + uint64_t(n) * act_blocks(cols) * sizeof(ActBlock);
}

void DataflowBackend::matmul(const TensorView& w, const float* x, uint32_t x_stride, ActBlock* xq, bool x_quantized,
                             uint32_t n, float* y, uint32_t y_stride) {
  const DfSchedule& s = state_->schedule;
  DfCounters& c = ctr(classify(w));
  c.calls += 1;
  const bool quant = is_quantized(w.dtype);
  uint8_t* in = buf(DfBuf::MatIn);
  norm_weight_ = nullptr;
  if (quant) {
    if (!x_quantized) {
      KernelBackend::quantize_rows(x, n, w.cols, x_stride, xq);
      c.vector_elems += uint64_t(n) * w.cols;
      c.sram_bytes += uint64_t(n) * w.cols * 4 + uint64_t(n) * act_blocks(w.cols) * sizeof(ActBlock);
    }
    const uint64_t bytes = df_matmul_input_bytes(w.dtype, n, w.cols);
    memcpy(in, xq, bytes);
    c.sram_bytes += bytes;
  } else {
    for (uint32_t t = 0; t < n; ++t) memcpy(in + uint64_t(t) * w.cols * 4, x + uint64_t(t) * x_stride, w.cols * 4ull);
    c.sram_bytes += uint64_t(n) * w.cols * 4;
  }
  float* out = reinterpret_cast<float*>(buf(DfBuf::MatOut));
  const uint32_t panels = panel_count(w.rows);
  uint32_t tile = 0;
  for (uint32_t p = 0; p < panels; p += s.tile_panels, ++tile) {
    const uint32_t end = p + s.tile_panels < panels ? p + s.tile_panels : panels;
    const uint32_t row0 = p * kPanelRows, row1 = end * kPanelRows < w.rows ? end * kPanelRows : w.rows;
    const uint32_t rows = row1 - row0;
    const uint64_t bytes = df_weight_rows_bytes(w.dtype, rows, w.cols);
    const uint64_t src =
        quant ? uint64_t(p) * panel_bytes(w.dtype, w.cols) : uint64_t(row0) * w.cols * float_elem_bytes(w.dtype);
    uint8_t* wt = buf(s.double_buffered && (tile & 1) ? DfBuf::WeightTile1 : DfBuf::WeightTile0);
    memcpy(wt, w.data + src, bytes);
    charge(c, s.weights_onchip, s.weight_tier, bytes);
    c.weight_elems += df_unpacked_elems(w.dtype, rows, w.cols);
    const WeightView tv{w.dtype, rows, w.cols, wt};
    if (quant) {
      mk_.matmul(tv, reinterpret_cast<const ActBlock*>(in), n, out, rows, 0, panel_count(rows));
    } else {
      mk_.matmul_f(tv, reinterpret_cast<const float*>(in), n, w.cols, out, rows, 0, panel_count(rows));
    }
    for (uint32_t t = 0; t < n; ++t) memcpy(y + uint64_t(t) * y_stride + row0, out + uint64_t(t) * rows, rows * 4ull);
    c.sram_bytes += uint64_t(n) * rows * 4;
  }
  const uint64_t macs = uint64_t(n) * w.rows * w.cols;
  if (quant) {
    c.macs_int8 += macs;
  } else if (w.dtype == fb::DType::F32) {
    c.macs_f32 += macs;
  } else {
    c.macs_bf16 += macs;
  }
}

void DataflowBackend::attention(const AttentionArgs& a) {
  const DfSchedule& s = state_->schedule;
  DfCounters& c = ctr(DfOp::Attention);
  c.calls += 1;
  after_attention_ = true;
  const uint32_t hd = a.head_dim, group = a.n_heads / a.n_kv_heads, q_dim = a.n_heads * hd;
  const float scale = a.attn_scale > 0.0f ? a.attn_scale : 1.0f / std::sqrt(float(hd));
  float* qbuf = reinterpret_cast<float*>(buf(DfBuf::AttnQ));
  float* qrot = qbuf + uint64_t(s.q_block) * group * hd;
  float* scores = reinterpret_cast<float*>(buf(DfBuf::AttnScores));
  float* acc = reinterpret_cast<float*>(buf(DfBuf::AttnAcc));
  const uint32_t row_len = s.score_row_tokens;
  for (uint32_t kvh = 0; kvh < a.n_kv_heads; ++kvh) {
    const uint16_t* keys = a.keys + kvh * a.head_stride;
    const uint16_t* values = a.values + kvh * a.head_stride;
    const int32_t* positions = a.window > 0 ? a.positions + kvh * a.positions_stride : nullptr;
    for (uint32_t t0 = 0; t0 < a.n; t0 += s.q_block) {
      const uint32_t t1 = t0 + s.q_block < a.n ? t0 + s.q_block : a.n;
      const uint32_t rows = (t1 - t0) * group, len_max = a.visible + t1;
      for (uint32_t t = t0; t < t1; ++t) {
        for (uint32_t g = 0; g < group; ++g) {
          const uint32_t r = (t - t0) * group + g;
          const float* q = a.q + uint64_t(t) * q_dim + uint64_t(kvh * group + g) * hd;
          memcpy(qbuf + uint64_t(r) * hd, q, hd * 4ull);
          if (a.prefix > 0) {
            memcpy(qrot + uint64_t(r) * hd, q, hd * 4ull);
            rope_rotate(qrot + uint64_t(r) * hd, a.rope_pairs, a.rope_halves, a.shift_cos, a.shift_sin);
          }
        }
      }
      c.sram_bytes += uint64_t(rows) * hd * 4;
      if (a.prefix > 0) c.vector_elems += uint64_t(rows) * hd;
      for (int pass = 0; pass < 2; ++pass) {
        const uint16_t* src = pass == 0 ? keys : values;
        uint32_t tile = 0;
        for (uint32_t j = 0; j < len_max; j += s.kv_tile_tokens, ++tile) {
          const uint32_t len = j + s.kv_tile_tokens < len_max ? s.kv_tile_tokens : len_max - j;
          uint16_t* kb =
              reinterpret_cast<uint16_t*>(buf(s.double_buffered && (tile & 1) ? DfBuf::KvTile1 : DfBuf::KvTile0));
          memcpy(kb, src + uint64_t(j) * hd, uint64_t(len) * hd * 2);
          charge(c, s.kv_onchip, s.kv_tier, uint64_t(len) * hd * 2);
          for (uint32_t t = t0; t < t1; ++t) {
            const uint32_t visible_t = a.visible + t + 1;
            const uint32_t used = visible_t <= j ? 0 : (visible_t - j < len ? visible_t - j : len);
            if (used == 0) continue;
            c.macs_bf16 += uint64_t(used) * hd * group;
            for (uint32_t g = 0; g < group; ++g) {
              const uint32_t r = (t - t0) * group + g;
              float* row = scores + uint64_t(r) * row_len;
              if (pass == 0) {
                const uint32_t a0 = j, a1 = j + used;
                if (a0 < a.prefix) {
                  const uint32_t e = a1 < a.prefix ? a1 : a.prefix;
                  ak_.scores(qrot + uint64_t(r) * hd, kb, e - a0, hd, scale, row + a0);
                }
                if (a1 > a.prefix) {
                  const uint32_t b0 = a0 > a.prefix ? a0 : a.prefix;
                  ak_.scores(qbuf + uint64_t(r) * hd, kb + uint64_t(b0 - j) * hd, a1 - b0, hd, scale, row + b0);
                }
              } else if (j == 0) {
                ak_.weighted_sum(row, kb, used, hd, acc + uint64_t(r) * hd);
              } else {
                // Continues the sum where the previous tile left it (bit-identical to one
                // untiled sum where the kernel table says so).
                ak_.weighted_sum_more(row + j, kb, used, hd, acc + uint64_t(r) * hd);
              }
            }
          }
          if (pass == 0 && j + len >= len_max) {
            for (uint32_t t = t0; t < t1; ++t) {
              const uint32_t seen = a.visible + t + 1;
              for (uint32_t g = 0; g < group; ++g) {
                float* row = scores + uint64_t((t - t0) * group + g) * row_len;
                // A local layer's token sees the positions above its own minus the window (the
                // ring holds a chunk more than the window), as the kernel backend masks them.
                if (positions) {
                  const int64_t oldest_seen = int64_t(positions[a.visible + t]) - int64_t(a.window);
                  for (uint32_t e = 0; e < seen; ++e)
                    if (positions[e] <= oldest_seen) row[e] = -INFINITY;
                }
                vk_.softmax(row, seen);
              }
              c.vector_elems += uint64_t(seen) * group * (positions ? 2 : 1);
            }
          }
        }
      }
      for (uint32_t t = t0; t < t1; ++t) {
        for (uint32_t g = 0; g < group; ++g) {
          const uint32_t r = (t - t0) * group + g;
          memcpy(a.out + uint64_t(t) * q_dim + uint64_t(kvh * group + g) * hd, acc + uint64_t(r) * hd, hd * 4ull);
        }
      }
      c.sram_bytes += uint64_t(rows) * hd * 4;
    }
  }
}

void DataflowBackend::rmsnorm(const float* x, const float* w, uint32_t n, float eps, float* out) {
  const DfSchedule& s = state_->schedule;
  DfCounters& c = ctr(DfOp::Norm);
  c.calls += 1;
  float* in = reinterpret_cast<float*>(buf(DfBuf::MatIn));
  float* o = reinterpret_cast<float*>(buf(DfBuf::MatOut));
  memcpy(in, x, n * 4ull);
  // The rows of a chunk are normalized one after another with one weight, which stays behind
  // the row in MatIn until another op takes MatIn over.
  if (norm_weight_ != w || norm_weight_elems_ != n) {
    memcpy(in + n, w, n * 4ull);
    charge(c, s.weights_onchip, s.weight_tier, n * 4ull);
    norm_weight_ = w, norm_weight_elems_ = n;
  }
  vk_.rmsnorm(in, in + n, n, eps, o);
  memcpy(out, o, n * 4ull);
  c.sram_bytes += 2ull * n * 4;
  c.vector_elems += n;
}

// Residual adds, biases and SwiGLU: both operands into MatIn (it holds two of the widest rows),
// the result out of MatOut; 12 bytes of SRAM traffic per element.
template <typename Op>
void DataflowBackend::elementwise(const float* a, const float* b, uint32_t n, float* out, Op op) {
  DfCounters& c = ctr(DfOp::Residual);
  c.calls += 1;
  float* in = reinterpret_cast<float*>(buf(DfBuf::MatIn));
  norm_weight_ = nullptr;
  float* o = reinterpret_cast<float*>(buf(DfBuf::MatOut));
  memcpy(in, a, n * 4ull);
  memcpy(in + n, b, n * 4ull);
  op(in, in + n, n, o);
  memcpy(out, o, n * 4ull);
  c.vector_elems += n;
  c.sram_bytes += 12ull * n;
}

void DataflowBackend::add(const float* a, const float* b, uint32_t n, float* out) {
  elementwise(a, b, n, out, vk_.add);
}

void DataflowBackend::silu_mul(const float* gate, const float* up, uint32_t n, float* out) {
  elementwise(gate, up, n, out, vk_.silu_mul);
}

void DataflowBackend::gelu_mul(const float* gate, const float* up, uint32_t n, float* out) {
  elementwise(gate, up, n, out, vk_.gelu_mul);
}

void DataflowBackend::softmax(uint32_t, float* x, uint32_t n) {
  // SnapKV scoring calls this from several workers at once.
  __atomic_fetch_add(&ctr(DfOp::KvPolicy).vector_elems, uint64_t(n), __ATOMIC_RELAXED);
  vk_.softmax(x, n);
}

void DataflowBackend::scores(KvType type, const float* q, const uint16_t* keys, uint32_t n, uint32_t head_dim,
                             float scale, float* out) {
  const DfSchedule& s = state_->schedule;
  // SnapKV scoring calls this from several workers at once.
  DfCounters& c = ctr(DfOp::KvPolicy);
  const uint64_t bytes = uint64_t(n) * kv_row_bytes(type, head_dim);
  __atomic_fetch_add(&c.calls, uint64_t(1), __ATOMIC_RELAXED);
  __atomic_fetch_add(&c.macs_bf16, uint64_t(n) * head_dim, __ATOMIC_RELAXED);
  if (s.kv_onchip) {
    __atomic_fetch_add(&c.sram_bytes, bytes, __ATOMIC_RELAXED);
  } else {
    __atomic_fetch_add(&c.tier_bytes[s.kv_tier], bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c.tier_transfers[s.kv_tier], uint64_t(1), __ATOMIC_RELAXED);
  }
  ak_.scores_of(type)(q, keys, n, head_dim, scale, out);
}

void DataflowBackend::to_half(const float* x, uint32_t n, uint16_t* out) {
  const DfSchedule& s = state_->schedule;
  DfCounters& c = ctr(DfOp::KvWrite);
  c.calls += 1;
  c.vector_elems += n;
  charge(c, s.kv_onchip, s.kv_tier, uint64_t(n) * 2);
  ak_.to_half(x, n, out);
}

void DataflowBackend::snap_compacted(const SnapCompression& shape) {
  df_count_snap_compaction(state_->schedule, state_->model, shape, ctr(DfOp::KvCompact));
}

void DataflowBackend::sparse_selected(const SparseSelection& shape) {
  df_count_sparse_selection(state_->schedule, shape, ctr(DfOp::KvSelect));
}

}  // namespace keel
