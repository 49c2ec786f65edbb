#include "backend/dataflow_schedule.h"

#include <cinttypes>

#include "core/format.h"
#include "kernels/kernels.h"

namespace keel {
namespace {

using fb::DType;
using fb::TensorRole;

constexpr uint64_t kAlign = 64;
constexpr uint64_t up64(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
constexpr uint64_t kActBlock = sizeof(ActBlock);

uint32_t max3(uint32_t a, uint32_t b, uint32_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

// Per-matrix sizes of one layer plus the head.
struct Mat {
  DfOp op;
  DType dtype;
  uint32_t rows, cols;
};

// Matrix `w` of `layer`: its op class, format and shape.
Mat layer_mat(const DfModel& m, uint32_t layer, DfMat w) {
  const ModelShape& sh = m.shape;
  const uint32_t q_dim = sh.n_heads * sh.head_dim, kv_dim = sh.n_kv_heads * sh.head_dim;
  const DType t = m.dtype(layer, w);
  switch (w) {
    case DfMat::Wq: return {DfOp::QkvProj, t, q_dim, sh.dim};
    case DfMat::Wk:
    case DfMat::Wv: return {DfOp::QkvProj, t, kv_dim, sh.dim};
    case DfMat::Wo: return {DfOp::OutProj, t, sh.dim, q_dim};
    case DfMat::Gate:
    case DfMat::Up: return {DfOp::FfnIn, t, sh.ffn_dim, sh.dim};
    default: return {DfOp::FfnDown, t, sh.dim, sh.ffn_dim};
  }
}

uint64_t panel_row_bytes(DType t, uint32_t cols) {
  return is_quantized(t) ? panel_bytes(t, cols) : uint64_t(kPanelRows) * cols * float_elem_bytes(t);
}

void count_macs(DfCounters& c, DType t, uint64_t macs) {
  if (is_quantized(t)) {
    c.macs_int8 += macs;
  } else if (t == DType::F32) {
    c.macs_f32 += macs;
  } else {
    c.macs_bf16 += macs;
  }
}

struct Walker {
  const DfSchedule& s;
  const DfModel& m;
  DfCounterSet& out;

  void offchip_or_sram(DfCounters& c, bool onchip, uint32_t tier, uint64_t bytes) {
    if (onchip) {
      c.sram_bytes += bytes;
    } else {
      c.tier_bytes[tier] += bytes;
      c.tier_transfers[tier] += 1;
    }
  }
  // `rows` rows of `n` one after another: the weight is loaded with the first and stays.
  void norm(uint32_t rows, uint32_t n) {
    DfCounters& c = out.op[uint32_t(DfOp::Norm)];
    c.calls += rows;
    c.vector_elems += uint64_t(rows) * n;
    c.sram_bytes += uint64_t(rows) * 2 * n * 4;  // row in, row out
    offchip_or_sram(c, s.weights_onchip, s.weight_tier, uint64_t(n) * 4);
  }
  void quantize(uint32_t n, uint32_t cols) {
    DfCounters& c = out.op[uint32_t(DfOp::Quantize)];
    c.calls += 1;
    c.vector_elems += uint64_t(n) * cols;
    c.sram_bytes += uint64_t(n) * cols * 4 + uint64_t(n) * act_blocks(cols) * kActBlock;
  }
  void residual(DfOp op, uint32_t count, uint32_t n) {
    DfCounters& c = out.op[uint32_t(op)];
    c.calls += count;
    c.vector_elems += uint64_t(count) * n;
    c.sram_bytes += uint64_t(count) * n * 12;
  }
  void matmul(const Mat& w, uint32_t n, bool x_quantized) {
    DfCounters& c = out.op[uint32_t(w.op)];
    c.calls += 1;
    if (is_quantized(w.dtype) && !x_quantized) {
      c.vector_elems += uint64_t(n) * w.cols;
      c.sram_bytes += uint64_t(n) * w.cols * 4 + uint64_t(n) * act_blocks(w.cols) * kActBlock;
    }
    c.sram_bytes += df_matmul_input_bytes(w.dtype, n, w.cols);
    const uint32_t panels = panel_count(w.rows);
    for (uint32_t p = 0; p < panels; p += s.tile_panels) {
      const uint32_t end = p + s.tile_panels < panels ? p + s.tile_panels : panels;
      const uint32_t row0 = p * kPanelRows, row1 = end * kPanelRows < w.rows ? end * kPanelRows : w.rows;
      offchip_or_sram(c, s.weights_onchip, s.weight_tier, df_weight_rows_bytes(w.dtype, row1 - row0, w.cols));
      c.weight_elems += df_unpacked_elems(w.dtype, row1 - row0, w.cols);
      c.sram_bytes += uint64_t(n) * (row1 - row0) * 4;
    }
    count_macs(c, w.dtype, uint64_t(n) * w.rows * w.cols);
  }
  void kv_write(uint32_t n) {
    DfCounters& c = out.op[uint32_t(DfOp::KvWrite)];
    const uint32_t hd = m.shape.head_dim;
    for (uint32_t h = 0; h < m.shape.n_kv_heads; ++h) {
      for (uint32_t t = 0; t < n; ++t) {
        for (int kv = 0; kv < 2; ++kv) {
          c.calls += 1;
          c.vector_elems += hd;
          offchip_or_sram(c, s.kv_onchip, s.kv_tier, uint64_t(hd) * 2);
        }
      }
    }
  }
  // One attention call over every KV head of the model; `window`: a local layer's, whose scores
  // outside the sliding window are masked before the softmax.
  void attention(uint32_t n, uint32_t visible, uint32_t prefix, bool window) {
    DfCounters& c = out.op[uint32_t(DfOp::Attention)];
    c.calls += 1;
    for (uint32_t kvh = 0; kvh < m.shape.n_kv_heads; ++kvh) attention_head(c, n, visible, prefix, window);
  }
  // A decode token's sparse attention: per KV head, its page selection and an attention call of
  // its own over the gathered entries.
  void sparse_attention(const DfSparseDecode& d) {
    DfCounters& c = out.op[uint32_t(DfOp::Attention)];
    for (uint32_t kvh = 0; kvh < m.shape.n_kv_heads; ++kvh) {
      df_count_sparse_selection(s, d.select, out.op[uint32_t(DfOp::KvSelect)]);
      c.calls += 1;
      attention_head(c, 1, d.gathered, d.gathered_prefix ? 1 : 0, false);
    }
  }
  void attention_head(DfCounters& c, uint32_t n, uint32_t visible, uint32_t prefix, bool window) {
    const uint32_t hd = m.shape.head_dim, group = m.shape.n_heads / m.shape.n_kv_heads;
    for (uint32_t t0 = 0; t0 < n; t0 += s.q_block) {
      const uint32_t t1 = t0 + s.q_block < n ? t0 + s.q_block : n;
      const uint32_t rows = (t1 - t0) * group;
      const uint32_t len_max = visible + t1;
      c.sram_bytes += uint64_t(rows) * hd * 4;                // queries in
      if (prefix > 0) c.vector_elems += uint64_t(rows) * hd;  // re-rotation for the prefix
      for (int pass = 0; pass < 2; ++pass) {                  // keys, then values
        for (uint32_t j = 0; j < len_max; j += s.kv_tile_tokens) {
          const uint32_t len = j + s.kv_tile_tokens < len_max ? s.kv_tile_tokens : len_max - j;
          offchip_or_sram(c, s.kv_onchip, s.kv_tier, uint64_t(len) * hd * 2);
          for (uint32_t t = t0; t < t1; ++t) {
            const uint32_t visible_t = visible + t + 1;
            const uint32_t used = visible_t <= j ? 0 : (visible_t - j < len ? visible_t - j : len);
            c.macs_bf16 += uint64_t(used) * hd * group;
          }
        }
      }
      // The softmax, and a local layer's window mask before it.
      for (uint32_t t = t0; t < t1; ++t) c.vector_elems += uint64_t(visible + t + 1) * group * (window ? 2 : 1);
      c.sram_bytes += uint64_t(rows) * hd * 4;  // outputs
    }
  }
};

}  // namespace

const char* df_op_name(DfOp op) {
  switch (op) {
    case DfOp::Norm: return "norm";
    case DfOp::Quantize: return "quantize";
    case DfOp::QkvProj: return "qkv_proj";
    case DfOp::Attention: return "attention";
    case DfOp::OutProj: return "out_proj";
    case DfOp::FfnIn: return "ffn_gate_up";
    case DfOp::FfnDown: return "ffn_down";
    case DfOp::LmHead: return "lm_head";
    case DfOp::Residual: return "residual_act";
    case DfOp::KvWrite: return "kv_write";
    case DfOp::KvPolicy: return "kv_policy";
    case DfOp::KvCompact: return "kv_compact";
    case DfOp::KvSelect: return "kv_select";
    case DfOp::Count: break;
  }
  return "?";
}

const char* df_buf_name(DfBuf b) {
  switch (b) {
    case DfBuf::KvResident: return "kv_resident";
    case DfBuf::WeightsResident: return "weights_resident";
    case DfBuf::Activations: return "activations";
    case DfBuf::MatIn: return "matmul_in";
    case DfBuf::WeightTile0: return "weight_tile0";
    case DfBuf::WeightTile1: return "weight_tile1";
    case DfBuf::MatOut: return "matmul_out";
    case DfBuf::AttnQ: return "attn_queries";
    case DfBuf::AttnScores: return "attn_scores";
    case DfBuf::AttnAcc: return "attn_accumulators";
    case DfBuf::KvTile0: return "kv_tile0";
    case DfBuf::KvTile1: return "kv_tile1";
    case DfBuf::Count: break;
  }
  return "?";
}

void DfCounters::add(const DfCounters& o) {
  calls += o.calls;
  macs_int8 += o.macs_int8;
  macs_bf16 += o.macs_bf16;
  macs_f32 += o.macs_f32;
  vector_elems += o.vector_elems;
  weight_elems += o.weight_elems;
  sram_bytes += o.sram_bytes;
  for (uint32_t i = 0; i < kHwMaxTiers; ++i) {
    tier_bytes[i] += o.tier_bytes[i];
    tier_transfers[i] += o.tier_transfers[i];
  }
}

void DfCounters::subtract(const DfCounters& o) {
  calls -= o.calls;
  macs_int8 -= o.macs_int8;
  macs_bf16 -= o.macs_bf16;
  macs_f32 -= o.macs_f32;
  vector_elems -= o.vector_elems;
  weight_elems -= o.weight_elems;
  sram_bytes -= o.sram_bytes;
  for (uint32_t i = 0; i < kHwMaxTiers; ++i) {
    tier_bytes[i] -= o.tier_bytes[i];
    tier_transfers[i] -= o.tier_transfers[i];
  }
}

bool DfCounters::operator==(const DfCounters& o) const {
  bool same = calls == o.calls && macs_int8 == o.macs_int8 && macs_bf16 == o.macs_bf16 && macs_f32 == o.macs_f32 &&
              vector_elems == o.vector_elems && sram_bytes == o.sram_bytes && weight_elems == o.weight_elems;
  for (uint32_t i = 0; i < kHwMaxTiers; ++i)
    same = same && tier_bytes[i] == o.tier_bytes[i] && tier_transfers[i] == o.tier_transfers[i];
  return same;
}

bool DfCounters::within(const DfCounters& o) const {
  bool ok = calls == o.calls && macs_int8 <= o.macs_int8 && macs_bf16 <= o.macs_bf16 && macs_f32 <= o.macs_f32 &&
            vector_elems <= o.vector_elems && sram_bytes <= o.sram_bytes && weight_elems <= o.weight_elems;
  for (uint32_t i = 0; i < kHwMaxTiers; ++i)
    ok = ok && tier_bytes[i] <= o.tier_bytes[i] && tier_transfers[i] <= o.tier_transfers[i];
  return ok;
}

DfCounters DfCounterSet::total() const {
  DfCounters t;
  for (const DfCounters& c : op) t.add(c);
  return t;
}

DfModel df_model(const Model& model) {
  DfModel m;
  m.shape = model.shape();
  constexpr TensorRole kRoles[kDfMats] = {TensorRole::Wq,      TensorRole::Wk,    TensorRole::Wv,     TensorRole::Wo,
                                          TensorRole::FfnGate, TensorRole::FfnUp, TensorRole::FfnDown};
  for (uint32_t l = 0; l < m.shape.n_layers && l < kMaxLayers; ++l)
    for (uint32_t i = 0; i < kDfMats; ++i) m.dtypes[l][i] = model.tensor(kRoles[i], int(l)).dtype;
  m.lm_head_dtype = model.meta()->arch()->tied_output() ? model.tensor(TensorRole::TokenEmbedding).dtype
                                                        : model.tensor(TensorRole::Output).dtype;
  m.qkv_bias = model.meta()->arch()->qkv_bias();
  if (model.meta()->arch()->family() == fb::ArchFamily::Gemma3) {
    m.qk_norm = m.post_norms = true;
    m.window_pattern = model.meta()->hyper()->sliding_window_pattern();
    m.sliding_window = model.meta()->hyper()->sliding_window();
  }
  return m;
}

uint32_t DfModel::local_layers() const { return local_layer_count(shape.n_layers, window_pattern); }

void DfModel::set_dtypes(DType attn, DType ffn) {
  for (uint32_t l = 0; l < kMaxLayers; ++l)
    for (uint32_t i = 0; i < kDfMats; ++i) dtypes[l][i] = i < uint32_t(DfMat::Gate) ? attn : ffn;
}

uint64_t df_weight_rows_bytes(DType t, uint32_t rows, uint32_t cols) {
  if (is_quantized(t)) return uint64_t(panel_count(rows)) * panel_bytes(t, cols);
  return uint64_t(rows) * cols * float_elem_bytes(t);
}

uint64_t df_unpacked_elems(DType t, uint32_t rows, uint32_t cols) {
  return t == DType::Q8 || t == DType::F32 ? 0 : uint64_t(rows) * cols;
}

uint64_t df_matmul_input_bytes(DType t, uint32_t n, uint32_t cols) {
  return is_quantized(t) ? uint64_t(n) * act_blocks(cols) * kActBlock : uint64_t(n) * cols * 4;
}

DfSchedule df_schedule(const DfScheduleInput& in) {
  DfSchedule s;
  const ModelShape& sh = in.model.shape;
  const DfModel& m = in.model;
  const uint32_t hd = sh.head_dim, q_dim = sh.n_heads * hd, kv_dim = sh.n_kv_heads * hd;
  const uint32_t group = sh.n_kv_heads ? sh.n_heads / sh.n_kv_heads : 1;
  const uint32_t chunk = in.chunk_tokens ? in.chunk_tokens : 1;
  const uint32_t local = m.local_layers(), global = m.global_layers();
  const uint32_t local_cap = local > 0 ? in.local_capacity_tokens : 0;
  s.kv_capacity_tokens = in.kv_capacity_tokens;
  s.local_capacity_tokens = local_cap;
  s.score_row_tokens = in.kv_capacity_tokens > local_cap ? in.kv_capacity_tokens : local_cap;
  s.slots = in.slots ? in.slots : 1;
  s.chunk_tokens = chunk;
  s.sram_bytes = in.memory.sram_bytes;
  // Page summaries sit beside the global layers' keys only (sparse decode runs there).
  s.kv_summary_bytes = uint64_t(s.slots) * global * sh.n_kv_heads * in.kv_pages * 2 * hd * 4;
  const uint64_t entries = uint64_t(global) * in.kv_capacity_tokens + uint64_t(local) * local_cap;
  s.kv_total_bytes = uint64_t(s.slots) * entries * 2 * kv_dim * 2 + s.kv_summary_bytes;
  uint64_t weights = 0, max_panel = 0;
  uint32_t max_panels = 1;
  for (uint32_t l = 0; l < sh.n_layers; ++l) {
    for (uint32_t i = 0; i < kDfMats; ++i) {
      const Mat w = layer_mat(m, l, DfMat(i));
      weights += df_weight_rows_bytes(w.dtype, w.rows, w.cols);
      if (panel_row_bytes(w.dtype, w.cols) > max_panel) max_panel = panel_row_bytes(w.dtype, w.cols);
      if (panel_count(w.rows) > max_panels) max_panels = panel_count(w.rows);
    }
  }
  // Per layer the attention and FFN norms, with Gemma 3's post norms and q / k head norms.
  const uint64_t layer_norms = (m.post_norms ? 4ull : 2ull) * sh.dim * 4 + (m.qk_norm ? 2ull * hd * 4 : 0);
  weights += uint64_t(sh.n_layers) * layer_norms + uint64_t(sh.dim) * 4;
  weights += df_weight_rows_bytes(m.lm_head_dtype, sh.vocab_size, sh.dim);
  if (panel_row_bytes(m.lm_head_dtype, sh.dim) > max_panel) max_panel = panel_row_bytes(m.lm_head_dtype, sh.dim);
  if (panel_count(sh.vocab_size) > max_panels) max_panels = panel_count(sh.vocab_size);
  s.weight_bytes = weights;

  const uint32_t widest = max3(sh.dim, q_dim, sh.ffn_dim);
  const uint64_t activations =
      uint64_t(chunk) * (2ull * sh.dim + 2ull * q_dim + 2ull * kv_dim + 2ull * sh.ffn_dim) * 4 +
      uint64_t(chunk) * act_blocks(widest) * kActBlock;
  // Norms pass a row and the weight through MatIn, residual adds and SwiGLU their two operands;
  // matmuls their whole input.
  const uint64_t mat_in =
      uint64_t(chunk) * widest * 4 > 2ull * widest * 4 ? uint64_t(chunk) * widest * 4 : 2ull * widest * 4;

  auto layout = [&](bool dbl, uint32_t tile_panels, uint32_t kv_tile, uint32_t q_block) {
    s.bytes[uint32_t(DfBuf::KvResident)] = s.kv_onchip ? s.kv_total_bytes : 0;
    s.bytes[uint32_t(DfBuf::WeightsResident)] = s.weights_onchip ? s.weight_bytes : 0;
    s.bytes[uint32_t(DfBuf::Activations)] = activations;
    s.bytes[uint32_t(DfBuf::MatIn)] = mat_in;
    s.bytes[uint32_t(DfBuf::WeightTile0)] = max_panel * tile_panels;
    s.bytes[uint32_t(DfBuf::WeightTile1)] = dbl ? max_panel * tile_panels : 0;
    const uint64_t out_rows = uint64_t(tile_panels) * kPanelRows;
    s.bytes[uint32_t(DfBuf::MatOut)] = (uint64_t(chunk) * out_rows > widest ? uint64_t(chunk) * out_rows : widest) * 4;
    s.bytes[uint32_t(DfBuf::AttnQ)] = 2ull * q_block * group * hd * 4;
    s.bytes[uint32_t(DfBuf::AttnScores)] = uint64_t(q_block) * group * s.score_row_tokens * 4;
    s.bytes[uint32_t(DfBuf::AttnAcc)] = uint64_t(q_block) * group * hd * 4;
    s.bytes[uint32_t(DfBuf::KvTile0)] = uint64_t(kv_tile) * hd * 2;
    s.bytes[uint32_t(DfBuf::KvTile1)] = dbl ? uint64_t(kv_tile) * hd * 2 : 0;
    uint64_t at = 0;
    for (uint32_t b = 0; b < kDfBufs; ++b) {
      s.offset[b] = at;
      at += up64(s.bytes[b]);
    }
    s.peak_bytes = at;
    s.double_buffered = dbl;
    s.tile_panels = tile_panels;
    s.kv_tile_tokens = kv_tile;
    s.q_block = q_block;
    return at <= in.memory.sram_bytes;
  };

  const uint32_t rows_max = s.score_row_tokens;
  const uint32_t min_kv_tile = rows_max < 16 ? (rows_max ? rows_max : 1) : 16;
  if (!layout(false, 1, min_kv_tile, 1)) {
    // Name the largest buffer of the smallest schedule: that is what does not fit.
    uint32_t worst = 0;
    for (uint32_t b = 1; b < kDfBufs; ++b)
      if (s.bytes[b] > s.bytes[worst]) worst = b;
    format(s.refusal, sizeof(s.refusal),
           "the smallest schedule needs %" PRIu64 " bytes of SRAM, the hardware has %" PRIu64 "; largest: %s (%" PRIu64
           " bytes: chunk %" PRIu32 ", 1 query, 1 panel, %" PRIu32 " keys of %" PRIu32 " capacity)",
           s.peak_bytes, in.memory.sram_bytes, df_buf_name(DfBuf(worst)), s.bytes[worst], chunk, min_kv_tile, rows_max);
    s.fits = false;
    return s;
  }
  s.fits = true;
  // Residency: the KV cache first (it is what a bounded policy keeps small), then the weights.
  s.kv_onchip = true;
  if (!layout(false, 1, min_kv_tile, 1)) s.kv_onchip = false;
  s.weights_onchip = true;
  if (!layout(false, 1, min_kv_tile, 1)) s.weights_onchip = false;
  uint64_t weight_tier_bytes = s.weights_onchip ? 0 : s.weight_bytes;
  if (in.memory.tier_count > 1 && in.memory.tiers[0].capacity_bytes < weight_tier_bytes) s.weight_tier = 1;
  if (in.memory.tier_count > 1 && !s.kv_onchip &&
      in.memory.tiers[0].capacity_bytes < (s.weight_tier == 0 ? weight_tier_bytes : 0) + s.kv_total_bytes)
    s.kv_tier = 1;

  // What is not on chip must fit its tier.
  uint64_t held[kHwMaxTiers] = {};
  if (!s.weights_onchip) held[s.weight_tier] += s.weight_bytes;
  if (!s.kv_onchip) held[s.kv_tier] += s.kv_total_bytes;
  for (uint32_t t = 0; t < kHwMaxTiers && t < in.memory.tier_count; ++t) {
    if (held[t] > in.memory.tiers[t].capacity_bytes) {
      format(s.refusal, sizeof(s.refusal),
             "off-chip tier '%s' would hold %" PRIu64 " bytes (weights %" PRIu64 ", KV %" PRIu64 " for %" PRIu32
             " slots); it has %" PRIu64,
             in.memory.tiers[t].name, held[t], s.weights_onchip || s.weight_tier != t ? 0 : s.weight_bytes,
             s.kv_onchip || s.kv_tier != t ? 0 : s.kv_total_bytes, s.slots, in.memory.tiers[t].capacity_bytes);
      s.fits = false;
      return s;
    }
  }
  // Grow the tiles while they fit: double buffering, then weight tiles, keys per tile, queries.
  bool dbl = layout(true, 1, min_kv_tile, 1);
  uint32_t tp = 1, kt = min_kv_tile, qb = 1;
  for (bool grew = true; grew;) {
    grew = false;
    if (tp * 2 <= max_panels && layout(dbl, tp * 2, kt, qb)) tp *= 2, grew = true;
    if (kt * 2 <= rows_max && layout(dbl, tp, kt * 2, qb)) kt *= 2, grew = true;
    if (qb * 2 <= chunk && layout(dbl, tp, kt, qb * 2)) qb *= 2, grew = true;
  }
  layout(dbl, tp, kt, qb);
  return s;
}

void df_count_forward(const DfSchedule& s, const DfModel& m, const DfPass& pass, DfCounterSet& out,
                      const DfSparseDecode* sparse) {
  Walker w{s, m, out};
  const ModelShape& sh = m.shape;
  const uint32_t n = pass.n, hd = sh.head_dim, q_dim = sh.n_heads * hd, kv_dim = sh.n_kv_heads * hd;
  const Mat head{DfOp::LmHead, m.lm_head_dtype, sh.vocab_size, sh.dim};
  for (uint32_t l = 0; l < sh.n_layers; ++l) {
    auto mat = [&](DfMat which) { return layer_mat(m, l, which); };
    w.norm(n, sh.dim);
    // As the transformer does: q, k and v read one quantized input when all three are quantized.
    const bool shared_q = is_quantized(m.dtype(l, DfMat::Wq)) && is_quantized(m.dtype(l, DfMat::Wk)) &&
                          is_quantized(m.dtype(l, DfMat::Wv));
    if (shared_q) w.quantize(n, sh.dim);
    w.matmul(mat(DfMat::Wq), n, shared_q);
    w.matmul(mat(DfMat::Wk), n, shared_q);
    w.matmul(mat(DfMat::Wv), n, shared_q);
    if (m.qkv_bias) {
      w.residual(DfOp::Residual, n, q_dim);
      w.residual(DfOp::Residual, 2 * n, kv_dim);
    }
    if (m.qk_norm) {  // every query head of every row with one weight, then every key head
      w.norm(n * sh.n_heads, hd);
      w.norm(n * sh.n_kv_heads, hd);
    }
    w.kv_write(n);
    if (layer_is_local(l, m.window_pattern)) {
      w.attention(n, pass.local_visible, 0, true);
    } else if (sparse && n == 1) {
      w.sparse_attention(*sparse);
    } else {
      w.attention(n, pass.visible, pass.prefix, false);
    }
    w.matmul(mat(DfMat::Wo), n, false);
    if (m.post_norms) w.norm(n, sh.dim);
    w.residual(DfOp::Residual, n, sh.dim);
    w.norm(n, sh.dim);
    const bool shared_f = is_quantized(m.dtype(l, DfMat::Gate)) && is_quantized(m.dtype(l, DfMat::Up));
    if (shared_f) w.quantize(n, sh.dim);
    w.matmul(mat(DfMat::Gate), n, shared_f);
    w.matmul(mat(DfMat::Up), n, shared_f);
    w.residual(DfOp::Residual, n, sh.ffn_dim);  // the gate's activation times up
    w.matmul(mat(DfMat::Down), n, false);
    if (m.post_norms) w.norm(n, sh.dim);
    w.residual(DfOp::Residual, n, sh.dim);
  }
  if (pass.n_logits > 0) {
    w.norm(pass.n_logits, sh.dim);
    w.matmul(head, pass.n_logits, false);
  }
}

void df_count_snap_scoring(const DfSchedule& s, const DfModel& m, const SnapCompression& j, DfCounterSet& out) {
  DfCounters& c = out.op[uint32_t(DfOp::KvPolicy)];
  const ModelShape& sh = m.shape;
  const uint32_t hd = sh.head_dim, group = sh.n_kv_heads ? sh.n_heads / sh.n_kv_heads : 1;
  const uint64_t rows = uint64_t(m.global_layers()) * sh.n_kv_heads * j.queries * group;
  const uint64_t calls_per_row = j.prefix > 0 ? 2 : 1;
  c.calls += rows * calls_per_row;
  c.macs_bf16 += rows * j.total * hd;
  c.vector_elems += rows * j.total;
  const uint64_t bytes = rows * j.total * hd * 2;
  if (s.kv_onchip) {
    c.sram_bytes += bytes;
  } else {
    c.tier_bytes[s.kv_tier] += bytes;
    c.tier_transfers[s.kv_tier] += rows * calls_per_row;
  }
}

void df_count_snap_compaction(const DfSchedule& s, const DfModel& m, const SnapCompression& j, DfCounters& c) {
  const ModelShape& sh = m.shape;
  const uint64_t pairs = uint64_t(m.global_layers()) * sh.n_kv_heads;
  const uint64_t group = sh.n_kv_heads ? sh.n_heads / sh.n_kv_heads : 1;
  const uint64_t hd = sh.head_dim, row_bytes = hd * 2;
  c.calls += pairs;
  c.vector_elems += pairs * (uint64_t(j.queries) * group * j.total + uint64_t(j.candidates) * (j.pool_kernel + 2) +
                             uint64_t(j.rotated) * hd * 3);
  // The kept keys and values into SRAM and back; the rotated keys read and written there.
  const uint64_t gathered = pairs * j.kept * 2 * row_bytes;
  c.sram_bytes += 2 * gathered + pairs * j.rotated * row_bytes * 2;
  if (!s.kv_onchip) {
    c.tier_bytes[s.kv_tier] += 2 * gathered;
    c.tier_transfers[s.kv_tier] += 2 * pairs;
  }
}

void df_count_snap_compression(const DfSchedule& s, const DfModel& m, const SnapCompression& j, DfCounterSet& out) {
  df_count_snap_scoring(s, m, j, out);
  df_count_snap_compaction(s, m, j, out.op[uint32_t(DfOp::KvCompact)]);
}

void df_count_sparse_selection(const DfSchedule& s, const SparseSelection& j, DfCounters& c) {
  const uint64_t hd = j.head_dim;
  c.calls += 1;
  c.vector_elems += uint64_t(j.frames) * j.group * hd + uint64_t(j.pages) * j.group * j.dims * 2 + j.pages;
  const uint64_t bytes = uint64_t(j.pages) * 2 * j.dims * 4 + (j.head_ranking ? hd * 4 : 0);
  if (s.kv_onchip) {
    c.sram_bytes += bytes;
  } else {
    c.tier_bytes[s.kv_tier] += bytes;
    c.tier_transfers[s.kv_tier] += 1;
  }
}

}  // namespace keel
