// The model as a KV policy sees it (kv/kv_hooks.h): its RoPE, to rotate observation queries and
// re-rotate keys that move, and one attention score row through the backend's kernels. Kept
// apart from the forward pass, which it shares only the RoPE frequencies and the backend with.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/kv_type.h"
#include "kv/kv_hooks.h"

namespace keel {

// What the hooks read of the model and the run; the pointers outlive the hooks.
struct ModelKvHooksConfig {
  Backend* backend = nullptr;
  const double* inv_freq = nullptr;  // [rope_dim / 2] the global layers' RoPE frequencies
  uint32_t rope_dim = 0;
  bool rope_halves = false;
  uint32_t head_dim = 0;
  float query_scale = 0.0f;  // 0 = 1/sqrt(head_dim)
  KvType kv_type = KvType::F16;
};

class ModelKvHooks final : public KvModelHooks {
 public:
  void init(const ModelKvHooksConfig& config) { c_ = config; }

  uint32_t rope_pairs() const override { return c_.rope_dim / 2; }
  void rope_angles(int64_t position, float* cos, float* sin) const override;
  void rotate_keys(uint16_t* keys, uint32_t n, int64_t by) const override;
  void attention_row(uint32_t worker, const float* q, const float* angles_t, const float* angles_c,
                     const uint16_t* keys, const int32_t* positions, uint32_t prefix, uint32_t total,
                     const uint16_t* extra_keys, const int32_t* extra_positions, uint32_t extra, int64_t t,
                     float* row) override;
  void compacted(const SnapCompression& shape) override { c_.backend->snap_compacted(shape); }

 private:
  ModelKvHooksConfig c_;
};

}  // namespace keel
