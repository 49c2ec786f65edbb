// Portable element-wise ops of the transformer (the oracle for the SIMD versions).
#include "kernels/kernels.h"
#include "kernels/ref/expf_ref.h"

namespace keel {

namespace {

void rmsnorm_ref(const float* x, const float* w, uint32_t n, float eps, float* out) {
  float ss = 0.0f;
  for (uint32_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / __builtin_sqrtf(ss / float(n) + eps);
  for (uint32_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void softmax_ref(float* x, uint32_t n) {
  if (n == 0) return;
  float mx = x[0];
  for (uint32_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = expf_poly::exp_ref(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (uint32_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul_ref(const float* gate, const float* up, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf_poly::exp_ref(-g)) * up[i];
  }
}

void add_ref(const float* a, const float* b, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale_ref(float* x, uint32_t n, float s) {
  for (uint32_t i = 0; i < n; ++i) x[i] *= s;
}

float dot_ref(const float* a, const float* b, uint32_t n) {
  float s = 0.0f;
  for (uint32_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_ref(float a, const float* x, uint32_t n, float* y) {
  for (uint32_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void gelu_mul_ref(const float* gate, const float* up, uint32_t n, float* out) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (uint32_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float u = kSqrt2OverPi * (g + 0.044715f * g * g * g);
    out[i] = g / (1.0f + expf_poly::exp_ref(-2.0f * u)) * up[i];
  }
}

constexpr VectorKernels kRef = {"ref",     rmsnorm_ref, softmax_ref, silu_mul_ref, add_ref,
                                scale_ref, dot_ref,     axpy_ref,    gelu_mul_ref};

}  // namespace

const VectorKernels& vector_kernels_ref() { return kRef; }

}  // namespace keel
