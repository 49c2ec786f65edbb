// The CPU backend over Keel's own kernel tables: `ref` (the portable oracle) and `native` (x86
// AVX2 / AVX-512 VNNI). Matmuls split their row panels, attention its (token, head) items (or
// (token, KV head) items taking the heads of a KV head together), over the port's thread pool.
#pragma once

#include "backend/backend.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"

namespace keel {

class KernelBackend : public Backend {
 public:
  KernelBackend(BackendKind kind, const ThreadPool* pool, const MatmulKernels& matmul, const VectorKernels& vector,
                const AttentionKernels& attention)
      : Backend(kind, pool), mk_(matmul), vk_(vector), ak_(attention) {}

  const char* kernel_name() const override { return mk_.name; }
  void matmul(const TensorView& w, const float* x, uint32_t x_stride, ActBlock* xq, bool x_quantized, uint32_t n,
              float* y, uint32_t y_stride) override;
  void quantize_rows(const float* x, uint32_t n, uint32_t cols, uint32_t x_stride, ActBlock* xq) override;
  void attention(const AttentionArgs& a) override;
  void attention_many(const AttentionArgs* a, uint32_t count) override;
  void rmsnorm(const float* x, const float* w, uint32_t n, float eps, float* out) override {
    vk_.rmsnorm(x, w, n, eps, out);
  }
  void add(const float* a, const float* b, uint32_t n, float* out) override { vk_.add(a, b, n, out); }
  void silu_mul(const float* gate, const float* up, uint32_t n, float* out) override { vk_.silu_mul(gate, up, n, out); }
  void gelu_mul(const float* gate, const float* up, uint32_t n, float* out) override { vk_.gelu_mul(gate, up, n, out); }
  void softmax(uint32_t worker, float* x, uint32_t n) override { vk_.softmax(x, n); }
  void scores(KvType type, const float* q, const uint16_t* keys, uint32_t n, uint32_t head_dim, float scale,
              float* out) override {
    ak_.scores_of(type)(q, keys, n, head_dim, scale, out);
  }
  void to_half(const float* x, uint32_t n, uint16_t* out) override { ak_.to_half(x, n, out); }
  void rotate_keys(KvType type, uint16_t* rows, uint32_t n, uint32_t head_dim, uint32_t pairs, bool halves,
                   const float* cos, const float* sin) override {
    if (type == KvType::F16 && ak_.rotate_rows) return ak_.rotate_rows(rows, n, head_dim, pairs, halves, cos, sin);
    Backend::rotate_keys(type, rows, n, head_dim, pairs, halves, cos, sin);
  }

 protected:
  const MatmulKernels& mk_;
  const VectorKernels& vk_;
  const AttentionKernels& ak_;
};

}  // namespace keel
