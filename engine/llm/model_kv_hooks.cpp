#include "llm/model_kv_hooks.h"

#include <cmath>
#include <cstring>

#include "kernels/rope.h"
#include "model/model.h"

namespace keel {

void ModelKvHooks::rope_angles(int64_t position, float* cos, float* sin) const {
  keel::rope_angles(double(position), c_.inv_freq, c_.rope_dim / 2, cos, sin);
}

void ModelKvHooks::rotate_keys(uint16_t* keys, uint32_t n, int64_t by) const {
  float cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
  const uint32_t pairs = c_.rope_dim / 2;
  keel::rope_angles(double(by), c_.inv_freq, pairs, cs, sn);
  c_.backend->rotate_keys(c_.kv_type, keys, n, c_.head_dim, pairs, c_.rope_halves, cs, sn);
}

void ModelKvHooks::attention_row(uint32_t worker, const float* q, const float* angles_t, const float* angles_c,
                                 const uint16_t* keys, const int32_t* positions, uint32_t prefix, uint32_t total,
                                 const uint16_t* extra_keys, const int32_t* extra_positions, uint32_t extra, int64_t t,
                                 float* row) {
  float qt[kMaxHeadDim], qc[kMaxHeadDim];
  const uint32_t hd = c_.head_dim, pairs = c_.rope_dim / 2;
  const float scale = c_.query_scale > 0.0f ? c_.query_scale : 1.0f / std::sqrt(float(hd));
  memcpy(qt, q, hd * sizeof(float));
  memcpy(qc, q, hd * sizeof(float));
  rope_rotate(qt, pairs, c_.rope_halves, angles_t, angles_t + pairs);
  rope_rotate(qc, pairs, c_.rope_halves, angles_c, angles_c + pairs);
  const KvType type = c_.kv_type;
  if (prefix > 0) c_.backend->scores(type, qc, keys, prefix, hd, scale, row);
  c_.backend->scores(type, qt, keys + uint64_t(prefix) * kv_row_halves(type, hd), total - prefix, hd, scale,
                     row + prefix);
  for (uint32_t p = prefix; p < total; ++p) {
    if (positions[p] > t) row[p] = -INFINITY;
  }
  if (extra > 0) {
    c_.backend->scores(type, qt, extra_keys, extra, hd, scale, row + total);
    for (uint32_t p = 0; p < extra; ++p) {
      if (extra_positions[p] > t) row[total + p] = -INFINITY;
    }
  }
  c_.backend->softmax(worker, row, total + extra);
}

}  // namespace keel
