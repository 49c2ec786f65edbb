#include "core/f16.h"
#include "kernels/attention.h"

namespace keel {
namespace {

void scores_ref(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * hd;
    float acc = 0.0f;
    for (uint32_t i = 0; i < hd; ++i) acc += q[i] * f16_to_f32(kj[i]);
    s[j] = acc * scale;
  }
}

void weighted_sum_ref(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  for (uint32_t i = 0; i < hd; ++i) out[i] = 0.0f;
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* vj = v + uint64_t(j) * hd;
    for (uint32_t i = 0; i < hd; ++i) out[i] += p[j] * f16_to_f32(vj[i]);
  }
}

void weighted_sum_more_ref(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* vj = v + uint64_t(j) * hd;
    for (uint32_t i = 0; i < hd; ++i) out[i] += p[j] * f16_to_f32(vj[i]);
  }
}

void to_half_ref(const float* x, uint32_t n, uint16_t* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

}  // namespace

const AttentionKernels& attention_kernels_ref() {
  static const AttentionKernels k{"ref", scores_ref, weighted_sum_ref, to_half_ref, weighted_sum_more_ref};
  return k;
}

}  // namespace keel
