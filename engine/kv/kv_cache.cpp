#include "kv/kv_cache.h"

#include <cinttypes>
#include <cstring>

#include "core/check.h"

namespace keel {

Error KvCache::init(const KvShape& s, const KvBuffers& b) {
  KEEL_ENSURE(s.budget >= 1 && s.budget <= s.capacity, Status::InvalidArgument,
              "KV budget %" PRIu32 "; expected 1..capacity %" PRIu32, s.budget, s.capacity);
  KEEL_ENSURE(b.keys_values && b.positions && (s.obs_window == 0 || (b.observations && b.lookahead)),
              Status::InvalidArgument, "KV cache buffers missing from the plan");
  KEEL_ENSURE(kv_type_fits(s.kv_type, s.head_dim), Status::InvalidArgument,
              "KV type %s cannot store heads of %" PRIu32 " numbers", kv_type_name(s.kv_type), s.head_dim);
  row_halves_ = kv_row_halves(s.kv_type, s.head_dim);
  keys_ = b.keys_values;
  values_ = keys_ + uint64_t(s.n_layers) * s.n_kv_heads * s.capacity * row_halves_;
  positions_ = b.positions;
  obs_ = s.obs_window > 0 ? b.observations : nullptr;
  look_ = s.obs_window > 0 ? b.lookahead : nullptr;
  KEEL_ENSURE(s.page_tokens == 0 || (b.pages && s.max_pages >= s.budget / s.page_tokens + 2), Status::InvalidArgument,
              "KV page summaries of %" PRIu32 " pages of %" PRIu32 " tokens do not cover a budget of %" PRIu32,
              s.max_pages, s.page_tokens, s.budget);
  pages_ = s.page_tokens ? b.pages : nullptr;
  moments_ = s.page_tokens ? b.key_moments : nullptr;
  KEEL_ENSURE(s.hold == 0 || (b.hold_keys_values && b.hold_positions), Status::InvalidArgument,
              "the KV hold of %" PRIu32 " entries is missing from the plan", s.hold);
  hold_keys_ = s.hold ? b.hold_keys_values : nullptr;
  hold_values_ = s.hold ? hold_keys_ + uint64_t(s.n_layers) * s.n_kv_heads * s.hold * row_halves_ : nullptr;
  hold_pos_ = s.hold ? b.hold_positions : nullptr;
  shape_ = s;
  clear();
  return Error();
}

void KvCache::clear() {
  prefix_ = 0;
  ring_len_ = 0;
  ring_head_ = 0;
  evicted_ = 0;
  next_pos_ = 0;
  look_count_ = 0;
  drop_hold();
  if (moments_) memset(moments_, 0, uint64_t(shape_.n_layers) * shape_.n_kv_heads * 2 * shape_.head_dim * 8);
}

void KvCache::begin_lookahead() {
  float* t = obs_;
  obs_ = look_;
  look_ = t;
  look_pos0_ = next_pos_;
  look_count_ = 0;
}

void KvCache::end_lookahead(uint32_t n) {
  float* t = obs_;
  obs_ = look_;
  look_ = t;
  next_pos_ = look_pos0_;
  look_count_ = n < shape_.obs_window ? n : shape_.obs_window;
}

uint32_t KvCache::physical(uint32_t logical) const {
  if (logical < prefix_) return logical;
  const uint32_t r = logical - prefix_;
  if (r < ring_len_) return prefix_ + (ring_head_ + r) % ring_capacity();
  return logical;  // staging sits right behind the visible entries
}

int64_t KvCache::rotation_of(uint32_t layer, uint32_t head, uint32_t logical) const {
  if (logical < index_rotated()) return logical;
  return positions(layer, head)[physical(logical)];
}

void KvCache::move_entry(uint32_t layer, uint32_t head, uint32_t from, uint32_t to) {
  if (from == to) return;
  const uint32_t hd = row_halves_;
  uint16_t* k = keys(layer, head);
  uint16_t* v = values(layer, head);
  memcpy(k + uint64_t(to) * hd, k + uint64_t(from) * hd, hd * 2);
  memcpy(v + uint64_t(to) * hd, v + uint64_t(from) * hd, hd * 2);
  positions(layer, head)[to] = positions(layer, head)[from];
}

void KvCache::append_ring(uint32_t n) {
  const uint32_t cap = ring_capacity();
  const uint32_t base = visible();  // where the staged entries are
  if (ring_len_ + n <= cap) {
    // Not full yet: the staged entries are already in place (ring_head_ is 0).
    for (uint32_t l = 0; moments_ && l < shape_.n_layers; ++l) {
      for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
        for (uint32_t j = 0; j < n; ++j) count_key(l, h, base + j, 1.0);
      }
    }
    ring_len_ += n;
    after_append(n);
    return;
  }
  // The newest `cap` of ring + staging survive. Staged entry j goes to ring slot
  // (ring_head_ + ring_len_ + j) % cap, overwriting the oldest.
  const uint32_t first = n > cap ? n - cap : 0;  // staged entries that never make it
  const uint32_t leaving = ring_len_ + n - cap < ring_len_ ? ring_len_ + n - cap : ring_len_;  // oldest ring entries
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      for (uint32_t i = 0; moments_ && i < leaving; ++i) count_key(l, h, prefix_ + (ring_head_ + i) % cap, -1.0);
      for (uint32_t j = first; moments_ && j < n; ++j) count_key(l, h, base + j, 1.0);
      for (uint32_t j = first; j < n; ++j) {
        const uint32_t slot = prefix_ + (ring_head_ + ring_len_ + j) % cap;
        // A staged entry still inside the ring region is already where it belongs.
        move_entry(l, h, base + j, slot);
      }
    }
  }
  const uint32_t total = ring_len_ + n;
  evicted_ += total - cap;
  ring_head_ = (ring_head_ + ring_len_ + n) % cap;  // oldest survivor follows the newest write
  ring_len_ = cap;
  after_append(n);
}

void KvCache::pin_sinks(uint32_t sinks) {
  if (prefix_ != 0 || evicted_ != 0 || ring_head_ != 0) return;
  const uint32_t s = sinks < ring_len_ ? sinks : ring_len_;
  prefix_ = s;
  ring_len_ -= s;
  if (pages_) {
    for (uint32_t l = 0; l < shape_.n_layers; ++l) {
      for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) refresh_all_pages(l, h, prefix_, ring_len_);
    }
  }
}

void KvCache::hold_to_positions(uint32_t l, uint32_t h, KeyRotator rotate, void* rotate_ctx) {
  uint16_t* hk = hold_keys_ + slab_hold(l, h) * row_halves_;
  int32_t* hp = hold_pos_ + 2 * slab_hold(l, h);
  int32_t* hr = hp + shape_.hold;
  for (uint32_t i = 0; i < hold_len_; ++i) {
    if (hr[i] != hp[i]) rotate(rotate_ctx, hk + uint64_t(i) * row_halves_, 1, int64_t(hp[i]) - hr[i]);
    hr[i] = hp[i];
  }
}

void KvCache::compact_head(uint32_t l, uint32_t h, const uint32_t* keep, uint32_t n_keep, uint32_t n_ring,
                           uint32_t staged, KeyRotator rotate, void* rotate_ctx, void* scratch, HoldMode hold) {
  const uint32_t hd = row_halves_;
  const uint32_t total = visible() + staged;
  const uint32_t cap_hold = hold_keys_ ? shape_.hold : 0;
  uint16_t* hk = cap_hold ? hold_keys_ + slab_hold(l, h) * hd : nullptr;
  uint16_t* hv = cap_hold ? hold_values_ + slab_hold(l, h) * hd : nullptr;
  int32_t* hp = cap_hold ? hold_pos_ + 2 * slab_hold(l, h) : nullptr;
  // Gather into scratch first: kept entries may sit anywhere (ring order wraps), so moving them
  // in place could overwrite an entry before it is read.
  uint16_t* kbuf = static_cast<uint16_t*>(scratch);
  uint16_t* vbuf = kbuf + uint64_t(n_keep) * hd;
  int32_t* pbuf = reinterpret_cast<int32_t*>(vbuf + uint64_t(n_keep) * hd);
  uint16_t* k = keys(l, h);
  uint16_t* v = values(l, h);
  int32_t* p = positions(l, h);
  const bool index_rotated_prefix = shape_.positions == KvPositions::Cache;
  // Keys that move by the same distance are rotated as one run: between two evicted entries every
  // kept key moves by as much as its neighbour, so a compaction has about as many runs as
  // evictions, not keys.
  uint32_t run_begin = 0, run_len = 0;
  int64_t run_by = 0;
  for (uint32_t i = 0; i < n_keep; ++i) {
    int64_t was;
    if (hold == HoldMode::Take && cap_hold && keep[i] >= total && keep[i] - total < hold_len_) {
      const uint32_t from = keep[i] - total;
      memcpy(kbuf + uint64_t(i) * hd, hk + uint64_t(from) * hd, hd * 2);
      memcpy(vbuf + uint64_t(i) * hd, hv + uint64_t(from) * hd, hd * 2);
      pbuf[i] = hp[from];
      was = hp[cap_hold + from];
    } else {
      const uint32_t logical = keep[i] < total ? keep[i] : total - 1;
      const uint32_t from = physical(logical);
      memcpy(kbuf + uint64_t(i) * hd, k + uint64_t(from) * hd, hd * 2);
      memcpy(vbuf + uint64_t(i) * hd, v + uint64_t(from) * hd, hd * 2);
      pbuf[i] = p[from];
      was = rotation_of(l, h, logical);
    }
    // The new prefix's keys go to their cache index (Cache positions) or stay at their position;
    // ring entries keep the rotation of their position.
    const int64_t to = i < n_keep - n_ring && index_rotated_prefix ? int64_t(i) : int64_t(pbuf[i]);
    const int64_t by = to - was;
    if (run_len > 0 && by != run_by) {
      rotate(rotate_ctx, kbuf + uint64_t(run_begin) * hd, run_len, run_by);
      run_len = 0;
    }
    if (by != 0) {
      if (run_len == 0) run_begin = i, run_by = by;
      ++run_len;
    }
  }
  if (run_len > 0) rotate(rotate_ctx, kbuf + uint64_t(run_begin) * hd, run_len, run_by);
  if (hold == HoldMode::Fill && cap_hold) {
    // The evicted entries (not in the increasing keep[]) join the hold behind its newest; when
    // more leave than it holds, the newest of them (the nearest the question) stay.
    const uint32_t evicted = total - n_keep;
    const uint32_t skip = evicted > cap_hold ? evicted - cap_hold : 0;
    uint32_t kept = 0, e = 0;
    for (uint32_t logical = 0; logical < total; ++logical) {
      if (kept < n_keep && keep[kept] == logical) {
        ++kept;
        continue;
      }
      if (e++ < skip) continue;
      const uint32_t slot = (hold_head_ + hold_len_ + e - 1) % cap_hold;
      const uint32_t from = physical(logical);
      memcpy(hk + uint64_t(slot) * hd, k + uint64_t(from) * hd, hd * 2);
      memcpy(hv + uint64_t(slot) * hd, v + uint64_t(from) * hd, hd * 2);
      hp[slot] = p[from];
      hp[cap_hold + slot] = int32_t(rotation_of(l, h, logical));
    }
  }
  memcpy(k, kbuf, uint64_t(n_keep) * hd * 2);
  memcpy(v, vbuf, uint64_t(n_keep) * hd * 2);
  memcpy(p, pbuf, uint64_t(n_keep) * 4);
  if (pages_) {
    refresh_all_pages(l, h, n_keep - n_ring, n_ring);
    if (moments_) recount_keys(l, h, n_keep);
  }
}

void KvCache::finish_compact(uint32_t n_keep, uint32_t n_ring, uint32_t staged, HoldMode hold) {
  const uint32_t cap_hold = hold_keys_ ? shape_.hold : 0;
  if (hold == HoldMode::Fill && cap_hold) {
    const uint32_t evicted = visible() + staged - n_keep;
    if (hold_len_ + evicted <= cap_hold) {
      hold_len_ += evicted;
    } else {
      // As the ring: the oldest survivor follows the newest write.
      hold_head_ = uint32_t((uint64_t(hold_head_) + hold_len_ + evicted) % cap_hold);
      hold_len_ = cap_hold;
    }
  } else if (hold == HoldMode::Take) {
    drop_hold();
  }
  evicted_ += visible() + staged - n_keep;
  prefix_ = n_keep - n_ring;
  ring_len_ = n_ring;
  ring_head_ = 0;
}

}  // namespace keel
