// Stage 2 of RocketKV at a decode step (docs/kv.md, "Sparse decode attention"): per KV head, the
// group's query picks pages of the cache by the upper bound of q.k their key summaries give
// (kv/rocketkv_select.h), their entries are gathered, in cache order, into a small buffer with
// the query's own entry last, and the backend's exact attention runs over that buffer.
//
// Prefix pages are bounded with the query rotated at its cache index and ring pages with it at
// its position, as exact attention scores them (docs/kv.md, "Positions"); pages never straddle
// the two. Gathered prefix entries come first, so the gathered buffer is a small cache of the
// same layout and the backend needs nothing new. When every page is chosen the gathered buffer
// is the cache in its own order, and the result is exact attention's bit for bit.
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/rope.h"
#include "kv/rocketkv_select.h"
#include "llm/transformer.h"

namespace keel {

struct Transformer::SparseJob {
  Transformer* self;
  KvCache* kv;
  uint32_t layer;
  const float* q;  // [n_heads][head_dim], rotated at the token's position
  const float* shift_cos;
  const float* shift_sin;
};

Error Transformer::enable_sparse(const SparseSplit& split, const RegionMap& regions, const ThreadPool* pool) {
  if (split.budget == 0) return Error();
  sparse_gather_ = regions.get<uint16_t>(Region::SparseGather);
  sparse_positions_ = regions.get<int32_t>(Region::SparsePositions);
  sparse_select_ = regions.get<float>(Region::SparseSelect);
  KEEL_ENSURE(sparse_gather_ && sparse_positions_ && sparse_select_ && split.page >= 1 && split.topk >= 1 &&
                  split.dims >= 1 && split.dims <= shape_.head_dim,
              Status::InvalidArgument, "sparse attention without its buffers in the plan");
  KEEL_ENSURE(
      regions.bytes(Region::SparseSelect) >=
          (sparse_select_stride(split, shape_.head_dim, shape_.n_heads / shape_.n_kv_heads) * shape_.n_kv_heads +
           uint64_t(shape_.n_heads) * shape_.head_dim) *
              4,
      Status::Internal, "sparse_select region smaller than its use");
  KEEL_ENSURE(split.select != RocketSelect::Head || regions.bytes(Region::KvKeyMoments) > 0, Status::Internal,
              "head ranking without the key moments in the plan");
  sparse_ = split;
  pool_ = pool;
  return Error();
}

void Transformer::sparse_task(void* ctx, size_t kv_head) {
  const SparseJob& j = *static_cast<const SparseJob*>(ctx);
  Transformer& t = *j.self;
  const KvCache& kv = *j.kv;
  const SparseSplit& sp = t.sparse_;
  const uint32_t h = uint32_t(kv_head), hd = t.shape_.head_dim, group = t.shape_.n_heads / t.shape_.n_kv_heads;
  const uint32_t pairs = t.rope_dim_ / 2, stride = kv.shape().max_pages, r = sp.dims;
  // The scratch of this head (kv/rocketkv_split.h, sparse_select_stride): score, order,
  // tokens [max_pages]; dims [2][head_dim]; counts [2]; head ranking: estimates
  // [group][max_pages], spread [head_dim].
  float* sel = t.sparse_select_ + h * sparse_select_stride(sp, hd, group);
  float* score = sel;
  uint32_t* order = reinterpret_cast<uint32_t*>(sel + stride);
  uint32_t* tokens = order + stride;
  uint32_t* dims = tokens + stride;
  uint32_t* counts = dims + 2 * hd;
  float* est = reinterpret_cast<float*>(counts + 2);
  float* spread = est + uint64_t(group) * stride;
  const float* qt = j.q + uint64_t(h) * group * hd;
  float* qc = t.sparse_select_ + sparse_select_stride(sp, hd, group) * t.shape_.n_kv_heads + uint64_t(h) * group * hd;
  const float scale = t.query_scale_ > 0.0f ? t.query_scale_ : 1.0f / std::sqrt(float(hd));

  // Head ranking: both frames' estimates go into one row per head, whose best page is taken
  // over all.
  const uint32_t pre = kv.index_rotated_pages(), n_pages = kv.page_count();
  const float* mins = kv.page_min(j.layer, h);
  const float* maxs = kv.page_max(j.layer, h);
  const bool per_head = sp.select == RocketSelect::Head;
  if (per_head) kv.key_spread(j.layer, h, spread);
  if (pre > 0) {
    memcpy(qc, qt, uint64_t(group) * hd * sizeof(float));
    for (uint32_t g = 0; g < group; ++g) rope_rotate(qc + g * hd, pairs, t.rope_halves_, j.shift_cos, j.shift_sin);
    rocketkv_choose_dims(qc, group, hd, per_head ? spread : nullptr, r, dims);
    if (per_head) {
      rocketkv_head_estimates(qc, group, hd, dims, r, scale, mins, maxs, stride, pre, est, stride);
    } else {
      rocketkv_group_bounds(qc, group, hd, dims, r, mins, maxs, stride, pre, score);
    }
  }
  rocketkv_choose_dims(qt, group, hd, per_head ? spread : nullptr, r, dims + hd);
  if (per_head) {
    rocketkv_head_estimates(qt, group, hd, dims + hd, r, scale, mins + pre, maxs + pre, stride, n_pages - pre,
                            est + pre, stride);
    rocketkv_page_scores(est, group, stride, n_pages, score);
  } else {
    rocketkv_group_bounds(qt, group, hd, dims + hd, r, mins + pre, maxs + pre, stride, n_pages - pre, score + pre);
  }
  kv.page_sizes(tokens);
  const uint32_t m = rocketkv_select_pages(score, tokens, n_pages, sp.topk, order);

  const uint64_t row = kv.row_halves(), rows = sp.gather_rows;
  uint16_t* gk = t.sparse_gather_ + uint64_t(h) * 2 * rows * row;
  uint16_t* gv = gk + rows * row;
  int32_t* gp = t.sparse_positions_ + uint64_t(h) * rows;
  const uint16_t* k = kv.keys(j.layer, h);
  const uint16_t* v = kv.values(j.layer, h);
  const int32_t* pos = kv.positions(j.layer, h);
  // Chosen pages that follow each other are consecutive rows (the prefix's last page ends where
  // the ring's first begins): one copy per run of them. Prefix rows stay first. The pages are
  // scattered over the cache, so each is fetched kPagesAhead chosen pages before its copy: left
  // to the hardware, every copy would wait for its rows.
  const uint32_t prefix_rows = pre > 0 ? kv.prefix() : 0;
  const uint64_t row_bytes = row * 2;
  uint32_t ahead = 0;  // chosen pages fetched so far
  const auto fetch_until = [&](uint32_t until) {
    for (; ahead < until && ahead < m; ++ahead) {
      uint32_t b, e;
      kv.page_range(order[ahead], &b, &e);
      const char* kb = reinterpret_cast<const char*>(k + b * row);
      const char* vb = reinterpret_cast<const char*>(v + b * row);
      for (uint64_t at = 0; at < (e - b) * row_bytes; at += 64) {
        // Into the outer caches: the L1's few fill buffers would stall the loop on them.
        __builtin_prefetch(kb + at, 0, 1);
        __builtin_prefetch(vb + at, 0, 1);
      }
    }
  };
  constexpr uint32_t kPagesAhead = 8;
  uint32_t n = 0, n_prefix = 0;
  for (uint32_t i = 0; i < m;) {
    fetch_until(i + kPagesAhead);
    uint32_t b, e, b_next, e_next;
    kv.page_range(order[i], &b, &e);
    for (++i; i < m && order[i] == order[i - 1] + 1; ++i) {
      kv.page_range(order[i], &b_next, &e_next);
      if (b_next != e) break;
      e = e_next;
    }
    memcpy(gk + n * row, k + b * row, (e - b) * row_bytes);
    memcpy(gv + n * row, v + b * row, (e - b) * row_bytes);
    memcpy(gp + n, pos + b, (e - b) * 4);
    n += e - b;
    if (b < prefix_rows) n_prefix += (e < prefix_rows ? e : prefix_rows) - b;
  }
  const uint32_t own = kv.visible();  // the decode token's staged entry
  memcpy(gk + n * row, k + own * row, row * 2);
  memcpy(gv + n * row, v + own * row, row * 2);
  gp[n] = pos[own];
  counts[0] = n;
  counts[1] = n_prefix;
}

bool Transformer::sparse_attention(KvCache& kv, uint32_t layer, uint32_t row0, uint32_t seg) {
  const KvShape& ks = kv.shape();
  if (kv.page_count() == 0 || ks.page_tokens != sparse_.page || ks.max_pages != sparse_.max_pages) return false;
  const uint64_t q_dim = uint64_t(shape_.n_heads) * shape_.head_dim, pairs = rope_dim_ / 2;
  const uint32_t hd = shape_.head_dim, group = shape_.n_heads / shape_.n_kv_heads;
  SparseJob job{this, &kv, layer, q_ + row0 * q_dim, shift_cos_ + seg * pairs, shift_sin_ + seg * pairs};
  parallel_for(pool_, shape_.n_kv_heads, sparse_task, &job);

  const uint64_t row = kv.row_halves(), rows = sparse_.gather_rows;
  SparseSelection selection;
  selection.group = group;
  selection.head_dim = hd;
  selection.frames = kv.index_rotated_pages() > 0 ? 2 : 1;
  selection.dims = sparse_.dims;
  selection.pages = kv.page_count();
  selection.head_ranking = sparse_.select == RocketSelect::Head;
  for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
    backend_->sparse_selected(selection);
    const uint32_t* counts = reinterpret_cast<const uint32_t*>(
        sparse_select_ + h * sparse_select_stride(sparse_, hd, group) + sparse_select_counts_offset(sparse_, hd));
    AttentionArgs a{};
    a.q = q_ + row0 * q_dim + uint64_t(h) * group * hd;
    a.out = att_ + row0 * q_dim + uint64_t(h) * group * hd;
    a.keys = sparse_gather_ + uint64_t(h) * 2 * rows * row;
    a.values = a.keys + rows * row;
    a.head_stride = 0;
    a.kv_type = config_.kv_type;
    a.n = 1;
    a.n_heads = group;
    a.n_kv_heads = 1;
    a.head_dim = hd;
    a.visible = counts[0];
    a.prefix = counts[1];
    a.rope_pairs = rope_dim_ / 2;
    a.rope_halves = rope_halves_;
    a.shift_cos = shift_cos_ + seg * pairs;
    a.shift_sin = shift_sin_ + seg * pairs;
    a.attn_scale = query_scale_;
    a.window = 0;
    a.positions = sparse_positions_ + uint64_t(h) * rows;
    a.positions_stride = rows;
    a.rows = att_rows_;
    a.qrot = qrot_;
    a.row_capacity = capacity_;
    a.query_rows = query_rows_;
    backend_->attention(a);
  }
  return true;
}

}  // namespace keel
