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

// Quantized rows: per group, the integer part first, the group's scale (and minimum) once.
void scores_q8_ref(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  const uint32_t g = kv_group(hd), groups = hd / g, row = kv_row_halves(KvType::Q8, hd);
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * row;
    const int8_t* qk = reinterpret_cast<const int8_t*>(kj + groups);
    float acc = 0.0f;
    for (uint32_t b = 0; b < groups; ++b) {
      float part = 0.0f;
      for (uint32_t i = 0; i < g; ++i) part += q[b * g + i] * float(qk[b * g + i]);
      acc += f16_to_f32(kj[b]) * part;
    }
    s[j] = acc * scale;
  }
}

void weighted_sum_q8_ref(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t g = kv_group(hd), groups = hd / g, row = kv_row_halves(KvType::Q8, hd);
  for (uint32_t i = 0; i < hd; ++i) out[i] = 0.0f;
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* vj = v + uint64_t(j) * row;
    const int8_t* qv = reinterpret_cast<const int8_t*>(vj + groups);
    for (uint32_t b = 0; b < groups; ++b) {
      const float c = p[j] * f16_to_f32(vj[b]);
      for (uint32_t i = 0; i < g; ++i) out[b * g + i] += c * float(qv[b * g + i]);
    }
  }
}

void scores_q4_ref(const float* q, const uint16_t* k, uint32_t n, uint32_t hd, float scale, float* s) {
  const uint32_t g = kv_group(hd), groups = hd / g, half = g / 2, row = kv_row_halves(KvType::Q4, hd);
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* kj = k + uint64_t(j) * row;
    const uint8_t* qk = reinterpret_cast<const uint8_t*>(kj + 2 * groups);
    float acc = 0.0f;
    for (uint32_t b = 0; b < groups; ++b) {
      const float* qb = q + b * g;
      const uint8_t* kb = qk + b * half;
      float dot = 0.0f, sum = 0.0f;
      for (uint32_t i = 0; i < half; ++i) {
        dot += qb[i] * float(kb[i] & 15) + qb[i + half] * float(kb[i] >> 4);
        sum += qb[i] + qb[i + half];
      }
      acc += f16_to_f32(kj[b]) * dot + f16_to_f32(kj[groups + b]) * sum;
    }
    s[j] = acc * scale;
  }
}

void weighted_sum_q4_ref(const float* p, const uint16_t* v, uint32_t n, uint32_t hd, float* out) {
  const uint32_t g = kv_group(hd), groups = hd / g, half = g / 2, row = kv_row_halves(KvType::Q4, hd);
  for (uint32_t i = 0; i < hd; ++i) out[i] = 0.0f;
  for (uint32_t j = 0; j < n; ++j) {
    const uint16_t* vj = v + uint64_t(j) * row;
    const uint8_t* qv = reinterpret_cast<const uint8_t*>(vj + 2 * groups);
    for (uint32_t b = 0; b < groups; ++b) {
      const float c = p[j] * f16_to_f32(vj[b]), m = p[j] * f16_to_f32(vj[groups + b]);
      const uint8_t* vb = qv + b * half;
      float* ob = out + b * g;
      for (uint32_t i = 0; i < half; ++i) {
        ob[i] += c * float(vb[i] & 15) + m;
        ob[i + half] += c * float(vb[i] >> 4) + m;
      }
    }
  }
}

// rope_rotate_rows for f16 rows, pair by pair (a number outside the pairs is left as it is,
// which its f16 round trip gives too).
void rotate_rows_ref(uint16_t* rows, uint32_t n, uint32_t head_dim, uint32_t pairs, bool halves, const float* cos,
                     const float* sin) {
  for (uint32_t r = 0; r < n; ++r) {
    uint16_t* row = rows + uint64_t(r) * head_dim;
    for (uint32_t i = 0; i < pairs; ++i) {
      const uint32_t ia = halves ? i : 2 * i, ib = halves ? i + pairs : 2 * i + 1;
      const float x0 = f16_to_f32(row[ia]), x1 = f16_to_f32(row[ib]);
      row[ia] = f32_to_f16(x0 * cos[i] - x1 * sin[i]);
      row[ib] = f32_to_f16(x0 * sin[i] + x1 * cos[i]);
    }
  }
}

}  // namespace

const AttentionKernels& attention_kernels_ref() {
  static const AttentionKernels k = [] {
    AttentionKernels t{"ref",         scores_ref,          weighted_sum_ref, to_half_ref,        weighted_sum_more_ref,
                       scores_q8_ref, weighted_sum_q8_ref, scores_q4_ref,    weighted_sum_q4_ref};
    t.rotate_rows = rotate_rows_ref;
    return t;
  }();
  return k;
}

}  // namespace keel
