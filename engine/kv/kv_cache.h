// The KV cache of one sequence (slot). For every layer and KV head the same number of entries,
// each a key, a value (IEEE half) and the token's original position. Which tokens they are may
// differ per head (SnapKV selects per KV head). Physical layout of each (layer, head):
//
//   [0, prefix)                 prefix: sinks and SnapKV-kept tokens, compacted in original
//                               order; each key is rotated at its *cache index*
//                               (KvPositions::Cache) or at its original position (Original)
//   [prefix, prefix + ring_len) ring of the most recent tokens (contiguous positions), oldest at
//                               prefix + ring_head; keys rotated at their *original position*
//   [visible, visible + n)      staging: the chunk being computed, appended behind the ring
//
// Attention of a query with true position t and cache index c uses q rotated at c against the
// entries [0, index_rotated()) and at t against the others: with Cache positions every distance
// is then the distance in the cache (StreamingLLM), however long the stream; with Original ones
// every distance is the distance in the text. Until the first eviction the prefix is empty and
// this is plain full attention, bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/kv_type.h"
#include "core/result.h"
#include "kv/kv_cache_size.h"
#include "kv/kv_policy.h"

namespace keel {

struct KvShape {
  uint32_t n_layers = 0;
  uint32_t n_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t capacity = 0;         // budget + one chunk of staging
  uint32_t budget = 0;           // entries kept between forward passes
  uint32_t q_dim = 0;            // n_heads * head_dim, for the observation queries
  uint32_t obs_window = 0;       // SnapKV observation window (0: no observation queries kept)
  KvType kv_type = KvType::F16;  // row format of keys and values (core/kv_type.h)
  // Sparse decode attention's key summaries (kv/kv_pages.cpp): tokens per page, 0 for none.
  uint32_t page_tokens = 0;
  uint32_t max_pages = 0;  // per (layer, head)
  // The hold (docs/kv.md, "The hold"): entries per (layer, head) kept aside, out of attention's
  // sight, for the prompt's last compression to judge again. 0 for none.
  uint32_t hold = 0;
  KvPositions positions = KvPositions::Cache;  // the prefix's rotation
};

// What a compaction does with the hold: nothing; put the entries it evicts there (a compression
// judged by the lookahead); or take the held entries as candidates and empty it (the
// compression judged by the real question).
enum class HoldMode : uint8_t { None, Fill, Take };

// Re-rotates `n` consecutive key rows (the cache's kv_type) by `by` positions (RoPE composes by
// addition); `ctx` is the caller's.
using KeyRotator = void (*)(void* ctx, uint16_t* keys, uint32_t n, int64_t by);

// A slot's buffers, from the memory plan (llm/plan.h regions kv_*).
struct KvBuffers {
  uint16_t* keys_values = nullptr;       // [K,V][layers][kv_heads][capacity] rows of kv_type
  int32_t* positions = nullptr;          // [layers][kv_heads][capacity]
  float* observations = nullptr;         // [layers][obs_window][q_dim]; null when obs_window is 0
  float* lookahead = nullptr;            // same
  float* pages = nullptr;                // [layers][kv_heads][min, max][head_dim][max_pages]; null without pages
  double* key_moments = nullptr;         // [layers][kv_heads][sum, sum of squares][head_dim]; optional
  uint16_t* hold_keys_values = nullptr;  // [K,V][layers][kv_heads][hold] rows; null without a hold
  int32_t* hold_positions = nullptr;     // [layers][kv_heads][position, rotation][hold]
};

class KvCache {
 public:
  Error init(const KvShape& shape, const KvBuffers& buffers);

  const KvShape& shape() const { return shape_; }
  uint32_t prefix() const { return prefix_; }
  uint32_t ring_len() const { return ring_len_; }
  uint32_t ring_capacity() const { return shape_.budget - prefix_; }
  // Entries a new chunk attends to besides itself.
  uint32_t visible() const { return prefix_ + ring_len_; }
  // Entries [0, index_rotated()) hold keys rotated at their cache index: the prefix with Cache
  // positions, none with Original ones (all keys then sit at their positions).
  uint32_t index_rotated() const { return shape_.positions == KvPositions::Cache ? prefix_ : 0; }
  int64_t next_position() const { return next_pos_; }
  // Tokens evicted so far (all heads evict the same number).
  uint64_t evicted() const { return evicted_; }
  void clear();

  // [capacity] rows of (layer, head), row_halves() 16-bit units each (f16: head_dim halves)
  uint16_t* keys(uint32_t layer, uint32_t head) { return keys_ + slab(layer, head) * row_halves_; }
  uint16_t* values(uint32_t layer, uint32_t head) { return values_ + slab(layer, head) * row_halves_; }
  const uint16_t* keys(uint32_t layer, uint32_t head) const { return keys_ + slab(layer, head) * row_halves_; }
  const uint16_t* values(uint32_t layer, uint32_t head) const { return values_ + slab(layer, head) * row_halves_; }
  uint32_t row_halves() const { return row_halves_; }
  // [capacity] original positions of (layer, head)
  int32_t* positions(uint32_t layer, uint32_t head) { return positions_ + slab(layer, head); }
  const int32_t* positions(uint32_t layer, uint32_t head) const { return positions_ + slab(layer, head); }

  // Physical index of the entry `logical` (0 = oldest prefix entry, then ring oldest first,
  // then staging).
  uint32_t physical(uint32_t logical) const;

  // After a forward pass wrote `n` staged entries at [visible, visible + n): they join the ring.
  // When the ring overflows, its oldest entries are overwritten (the newest n survive).
  void append_ring(uint32_t n);

  // Turns the first `sinks` ring entries into the prefix (StreamingLLM's attention sinks). Only
  // valid while nothing was evicted and the prefix is empty: their keys were rotated at their
  // original positions 0..sinks-1, which are also their cache indices.
  void pin_sinks(uint32_t sinks);

  // Compaction, one (layer, head) at a time, then finish_compact once: keeps the logical entries
  // keep[0..n_keep) (increasing, over prefix + ring + the `staged` staged entries), in that
  // order. The first n_keep - n_ring become the new prefix; the last n_ring (which must be the
  // newest n_ring logical entries, all from ring or staging) become the ring, oldest first,
  // keeping their rotation. `rotate(ctx, keys, n, by)` re-rotates n consecutive keys (rows of
  // the cache's kv_type) by `by` positions: a key that moves from rotation position `from` to its
  // new cache index `to` is turned by to - from, and the keys that move by the same distance are
  // handed over together (RoPE's angles depend on the distance alone). `scratch` holds
  // compact_scratch_bytes().
  // HoldMode::Fill: the entries not kept go to the hold, the oldest held ones making room.
  // HoldMode::Take: keep[] may also name held entries, as visible() + staged + i for held entry
  // i, in increasing position with the others (no longer increasing ids); the hold is emptied.
  void compact_head(uint32_t layer, uint32_t head, const uint32_t* keep, uint32_t n_keep, uint32_t n_ring,
                    uint32_t staged, KeyRotator rotate, void* rotate_ctx, void* scratch,
                    HoldMode hold = HoldMode::None);
  void finish_compact(uint32_t n_keep, uint32_t n_ring, uint32_t staged, HoldMode hold = HoldMode::None);
  uint64_t compact_scratch_bytes() const { return kv_compact_scratch_bytes(shape_.capacity, row_halves_); }
  // The rotation position of the key at logical index `logical` (below index_rotated(): its
  // index; others: their original position).
  int64_t rotation_of(uint32_t layer, uint32_t head, uint32_t logical) const;

  // The unrotated query of the token at `position` in layer `layer` ([q_dim] floats), kept for
  // the last obs_window positions (a ring indexed by position).
  float* observation(uint32_t layer, int64_t position) {
    return obs_ + (uint64_t(layer) * shape_.obs_window + uint64_t(position % shape_.obs_window)) * shape_.q_dim;
  }
  // Keeps the unrotated queries of the `n` tokens being staged (q: [n][q_dim]) that SnapKV
  // will score with: the last obs_window of them. Nothing when the cache keeps no observations.
  void observe(uint32_t layer, const float* q, uint32_t n) {
    const uint32_t w = shape_.obs_window;
    for (uint32_t t = n > w ? n - w : 0; w > 0 && t < n; ++t) {
      memcpy(observation(layer, next_pos_ + t), q + uint64_t(t) * shape_.q_dim, uint64_t(shape_.q_dim) * 4);
    }
  }

  // Advances positions after `n` tokens went through the model.
  void advance(uint32_t n) { next_pos_ += n; }

  // Page summaries (docs/kv.md, "Sparse decode attention"): the prefix and the ring are cut
  // into pages of page_tokens physical entries each, counted from the start of each (so no page
  // straddles the two; the last page of each may be partial). For every page the element-wise
  // minimum and maximum of its keys, kept equal to a recomputation after every mutation
  // (append_ring, pin_sinks, compact_head). Pages [0, prefix_pages()) are the prefix's;
  // [0, index_rotated_pages()) those whose keys are rotated at their cache index.
  uint32_t prefix_pages() const { return pages_ ? (prefix_ + shape_.page_tokens - 1) / shape_.page_tokens : 0; }
  uint32_t index_rotated_pages() const { return shape_.positions == KvPositions::Cache ? prefix_pages() : 0; }
  uint32_t page_count() const {
    return pages_ ? prefix_pages() + (ring_len_ + shape_.page_tokens - 1) / shape_.page_tokens : 0;
  }
  // Physical entries [begin, end) of page `page`.
  void page_range(uint32_t page, uint32_t* begin, uint32_t* end) const {
    const uint32_t p = shape_.page_tokens, pre = prefix_pages();
    if (page < pre) {
      *begin = page * p;
      *end = (page + 1) * p < prefix_ ? (page + 1) * p : prefix_;
      return;
    }
    const uint32_t r = page - pre;
    *begin = prefix_ + r * p;
    *end = prefix_ + ((r + 1) * p < ring_len_ ? (r + 1) * p : ring_len_);
  }
  // tokens[j] = the entries of page j, for j in [0, page_count()).
  void page_sizes(uint32_t* tokens) const;
  // [head_dim][max_pages]: dimension i of page j at i * max_pages + j.
  const float* page_min(uint32_t layer, uint32_t head) const {
    return pages_ + slab_pages(layer, head) * 2 * shape_.head_dim;
  }
  const float* page_max(uint32_t layer, uint32_t head) const {
    return page_min(layer, head) + uint64_t(shape_.head_dim) * shape_.max_pages;
  }
  // Key moments, kept with the pages when the plan gives them (only `--rocket-select head`
  // reads them): per dimension the sum and the sum of squares of the visible keys of (layer,
  // head) ([2][head_dim]), equal to a recomputation after every mutation up to rounding.
  const double* key_moments(uint32_t layer, uint32_t head) const {
    return moments_ + (uint64_t(layer) * shape_.n_kv_heads + head) * 2 * shape_.head_dim;
  }
  // spread[head_dim]: the standard deviation of each dimension over the visible keys of
  // (layer, head); zeros when none is visible.
  void key_spread(uint32_t layer, uint32_t head, float* spread) const;

  // The hold: entries [0, hold_len()) of each (layer, head), in no particular order, each with
  // its original position and the position its key is rotated at (its cache index when it left
  // the prefix, its position when it left the ring).
  uint32_t hold_len() const { return hold_len_; }
  void drop_hold() {
    hold_len_ = 0;
    hold_head_ = 0;
  }
  const uint16_t* hold_keys(uint32_t layer, uint32_t head) const {
    return hold_keys_ + slab_hold(layer, head) * row_halves_;
  }
  const int32_t* hold_positions(uint32_t layer, uint32_t head) const { return hold_pos_ + 2 * slab_hold(layer, head); }
  const int32_t* hold_rotations(uint32_t layer, uint32_t head) const {
    return hold_positions(layer, head) + shape_.hold;
  }
  // Re-rotates the held keys of (layer, head) to their original positions, where a query scores
  // them as it scores the ring (docs/kv.md, "The hold").
  void hold_to_positions(uint32_t layer, uint32_t head, KeyRotator rotate, void* rotate_ctx);

  // Lookahead (docs/kv.md, "Chunked prefill"): the observation queries of a prompt's last
  // tokens, computed before the prompt is prefilled so that every chunk's compression can
  // already ask what the end of the prompt (the question) will attend to. Between
  // begin_lookahead and end_lookahead a forward pass of `n` tokens (n <= obs_window) writes its
  // queries here instead of into the observation ring; end_lookahead discards its staged keys
  // and values and its positions, leaving the cache as it was.
  void begin_lookahead();
  void end_lookahead(uint32_t n);
  uint32_t lookahead_count() const { return look_count_; }
  void drop_lookahead() { look_count_ = 0; }
  // The unrotated query of lookahead token i (0 = earliest) in layer `layer`.
  const float* lookahead(uint32_t layer, uint32_t i) const {
    return look_ +
           (uint64_t(layer) * shape_.obs_window + uint64_t((look_pos0_ + i) % shape_.obs_window)) * shape_.q_dim;
  }

 private:
  uint64_t slab(uint32_t layer, uint32_t head) const {
    return (uint64_t(layer) * shape_.n_kv_heads + head) * shape_.capacity;
  }
  void move_entry(uint32_t layer, uint32_t head, uint32_t from, uint32_t to);
  uint64_t slab_hold(uint32_t layer, uint32_t head) const {
    return (uint64_t(layer) * shape_.n_kv_heads + head) * shape_.hold;
  }
  uint64_t slab_pages(uint32_t layer, uint32_t head) const {
    return (uint64_t(layer) * shape_.n_kv_heads + head) * shape_.max_pages;
  }
  // Recomputes the summaries of pages [first, last) of (layer, head) under the geometry
  // (prefix, ring_len); the after_* calls say which pages a mutation touched.
  void refresh_pages(uint32_t layer, uint32_t head, uint32_t prefix, uint32_t ring_len, uint32_t first, uint32_t last);
  void refresh_all_pages(uint32_t layer, uint32_t head, uint32_t prefix, uint32_t ring_len);
  void after_append(uint32_t n);
  // Adds (sign 1) or removes (sign -1) physical entry e of (layer, head) to or from the moments.
  void count_key(uint32_t layer, uint32_t head, uint32_t e, double sign);
  void recount_keys(uint32_t layer, uint32_t head, uint32_t n);  // the moments of entries [0, n)

  KvShape shape_;
  uint32_t row_halves_ = 0;
  uint16_t* keys_ = nullptr;
  uint16_t* values_ = nullptr;
  int32_t* positions_ = nullptr;
  float* obs_ = nullptr;   // [layers][obs_window][q_dim]
  float* look_ = nullptr;  // [layers][obs_window][q_dim], indexed like obs_ by position
  float* pages_ = nullptr;
  double* moments_ = nullptr;        // with pages_, optional
  uint16_t* hold_keys_ = nullptr;    // [layers][kv_heads][hold] rows
  uint16_t* hold_values_ = nullptr;  // same
  int32_t* hold_pos_ = nullptr;      // [layers][kv_heads][position, rotation][hold]
  uint32_t hold_len_ = 0;            // held entries per (layer, head); all heads hold as many
  uint32_t hold_head_ = 0;           // the oldest held entry; 0 whenever the hold is not full
  int64_t look_pos0_ = 0;
  uint32_t look_count_ = 0;
  uint32_t prefix_ = 0;
  uint32_t ring_len_ = 0;
  uint32_t ring_head_ = 0;  // ring index of the oldest entry; 0 whenever the ring is not full
  uint64_t evicted_ = 0;
  int64_t next_pos_ = 0;
};

}  // namespace keel
