// RocketKV's budget split (arXiv 2502.14051; docs/kv.md, "Sparse decode attention"): how a
// per-step token budget B is spent. Half of it (k = B/2) on the tokens attended exactly; the
// other half on reading the page summaries that choose them. Everything here is constexpr: the
// plan (llm/plan.h) sizes the summaries and the gather buffers from it.
#pragma once

#include <cstdint>

#include "kv/kv_policy.h"

namespace keel {

// What one decode step of sparse attention reads, per (layer, KV head).
struct SparseSplit {
  uint32_t budget = 0;       // B, tokens per step; 0: sparse attention is off
  uint32_t topk = 0;         // k, tokens attended exactly
  uint32_t page = 0;         // P, tokens per page of key summaries (element-wise min and max)
  uint32_t dims = 0;         // r, query dimensions the bound reads
  uint32_t max_pages = 0;    // pages of one (layer, KV head), at most
  uint32_t gather_rows = 0;  // gathered entries of one KV head: k rounded up to whole pages + the query's own
  RocketSelect select = RocketSelect::Group;

  friend constexpr bool operator==(const SparseSplit&, const SparseSplit&) = default;
};

// The per-step budget B the policy runs with: sparse_budget; for rocketkv 0 means budget / 4.
constexpr uint32_t sparse_budget_of(const KvPolicyConfig& c, uint32_t kv_budget) {
  if (c.sparse_budget) return c.sparse_budget;
  if (c.kind != KvPolicyKind::RocketKV) return 0;
  return kv_budget / 4 > 2 ? kv_budget / 4 : 2;
}

// The split over a cache holding up to `kv_budget` entries per head of `head_dim` numbers, a
// key or value row taking `row_bytes`. The estimate reads 2r f32 numbers (min, max) of each of
// kv_budget/P pages; a token attended exactly costs 2 row_bytes (key, value). Spending B - k
// tokens' bytes on it: P / r = c2 * 4 / row_bytes with c2 = kv_budget/(B - k), the compression
// the estimate must reach (r = d: a key per page). RocketKV splits that compression between the
// sequence (pages) and the head dimension (r); Keel splits it evenly: with e = c2 * 4d/row_bytes
// (2 c2 for f16 rows), P is the power of two nearest below sqrt(e) and r = d·P/e rounded, both
// clamped to their ranges. Flags override each part.
constexpr SparseSplit sparse_split(const KvPolicyConfig& c, uint32_t kv_budget, uint32_t head_dim, uint32_t row_bytes) {
  SparseSplit s;
  s.budget = sparse_budget_of(c, kv_budget);
  if (s.budget == 0 || head_dim == 0 || row_bytes == 0) return SparseSplit{};
  s.topk = c.rocket_topk ? c.rocket_topk : s.budget / 2;
  if (s.topk == 0) s.topk = 1;
  const uint32_t estimate = s.budget > s.topk ? s.budget - s.topk : 1;
  const double c2 = double(kv_budget) / double(estimate) * 4.0 * double(head_dim) / double(row_bytes);
  uint32_t page = 1;
  while (double(page) * 2 * double(page) * 2 <= c2 && page * 2 <= kMaxRocketPage) page *= 2;
  s.page = c.rocket_page ? c.rocket_page : page;
  double r = c2 > 1.0 ? double(head_dim) * double(s.page) / c2 : double(head_dim);
  uint32_t dims = uint32_t(r + 0.5);
  dims = dims < 1 ? 1 : dims > head_dim ? head_dim : dims;
  s.dims = c.rocket_r ? (c.rocket_r < head_dim ? c.rocket_r : head_dim) : dims;
  s.max_pages = (kv_budget + s.page - 1) / s.page + 2;  // the prefix's and the ring's last pages may be partial
  s.gather_rows = s.topk + s.page;
  s.select = c.rocket_select;
  return s;
}

// The selection scratch of one KV head, in 4-byte units (plan region sparse_select; layout in
// llm/sparse_attention.cpp): score, order, tokens [max_pages]; dims [2][head_dim]; counts [2];
// head ranking also each query head's estimates [group][max_pages] and the keys' spread
// [head_dim].
constexpr uint64_t sparse_select_counts_offset(const SparseSplit& s, uint32_t head_dim) {
  return 3 * uint64_t(s.max_pages) + 2 * uint64_t(head_dim);
}
constexpr uint64_t sparse_select_stride(const SparseSplit& s, uint32_t head_dim, uint32_t group) {
  const uint64_t head = s.select == RocketSelect::Head ? uint64_t(group) * s.max_pages + head_dim : 0;
  return sparse_select_counts_offset(s, head_dim) + 2 + head;
}

// RocketKV's stage-1 capacity for a sequence of `total` tokens (prompt + new tokens) and a
// per-step budget B: c = max(1, S/B), alpha = min(0.2 + 0.06 log2 c, 0.8), capacity =
// floor(S / c^alpha). The cache's --kv-budget to run rocketkv with.
uint32_t rocketkv_capacity(uint64_t total, uint32_t budget);

}  // namespace keel
