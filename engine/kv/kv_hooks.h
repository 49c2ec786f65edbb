// What a KV policy needs from the model it serves, and nothing more: the model's RoPE (to
// rotate observation queries and to re-rotate keys that move), attention score rows of a query
// over one cache head, and word of the work a compression did beside them. The transformer
// implements it with its backend's kernels.
#pragma once

#include <cstdint>

#include "core/snap_compression.h"

namespace keel {

class KvModelHooks {
 public:
  // Rotated pairs per head.
  virtual uint32_t rope_pairs() const = 0;
  // cos/sin [rope_pairs()] of the rotation by `position`.
  virtual void rope_angles(int64_t position, float* cos, float* sin) const = 0;
  // Re-rotates `n` consecutive key rows (the cache's kv_type) by `by` positions (RoPE composes
  // by addition): the angles are formed once for all of them.
  virtual void rotate_keys(uint16_t* keys, uint32_t n, int64_t by) const = 0;
  // One softmaxed attention row over `total` entries of a cache head: the unrotated query q
  // ([head_dim]) rotated by angles_c (cos then sin) against keys [0, prefix) (rotated at their
  // cache index) and by angles_t against keys [prefix, total) (rotated at their position);
  // entries whose position is after `t` are masked (causal). `worker` is the calling worker.
  // `extra` more keys (`extra_keys`, rotated at `extra_positions`, as the ring's) join the same
  // softmax at row[total, total + extra): the hold (docs/kv.md).
  virtual void attention_row(uint32_t worker, const float* q, const float* angles_t, const float* angles_c,
                             const uint16_t* keys, const int32_t* positions, uint32_t prefix, uint32_t total,
                             const uint16_t* extra_keys, const int32_t* extra_positions, uint32_t extra, int64_t t,
                             float* row) = 0;
  // A compression of this shape ran its selection and compaction in the slot's memory, outside
  // the backend's kernels: a model whose backend counts work (the dataflow emulator's) counts it.
  virtual void compacted(const SnapCompression&) {}

 protected:
  ~KvModelHooks() = default;
};

}  // namespace keel
