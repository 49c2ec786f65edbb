// The XNNPACK operators of one model, created at init inside one block of the persistent arena:
//  - a fully-connected operator per F32 weight matrix the forward pass multiplies (q, k, v, o,
//    gate, up, down of every layer, and the LM head, which is the token embedding when tied);
//    XNNPACK packs its own copy of each matrix into the block;
//  - per attention worker, softmax operators for row lengths in steps up to the KV capacity.
//    An XNNPACK softmax has a length fixed at creation, so a row of n scores is padded with
//    -inf up to its step, and those entries come out exactly 0.
// Block layout: [ModelOps][fully-connected table][softmax table][XNNPACK operators and packed
// weights]. Its size is known only by creating the operators, so measure() does exactly that
// in host work memory before the arenas are reserved; the plan adds the result.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/result.h"
#include "core/span.h"
#include "kernels/xnnpack/xnn_ops.h"
#include "model/model.h"

struct pthreadpool;

namespace keel::xnn {

struct ModelOpsConfig {
  bool fully_connected_f32 = false;
  bool softmax = false;
  uint32_t workers = 1;          // attention tasks that may run at once (the plan's threads)
  uint32_t capacity_tokens = 0;  // longest softmax row: the KV capacity
};

class ModelOps {
 public:
  // Bytes of the block for this model and configuration. Every operator is created once in
  // `work` (host memory of at least work_bytes(), reused operator after operator) and counted.
  static Result<uint64_t> measure(const Model& model, const ModelOpsConfig& config, Span<uint8_t> work);
  // Host memory measure() needs: the tables and the largest single operator, with headroom for
  // XNNPACK's padding of the packed weights.
  static uint64_t work_bytes(const Model& model, const ModelOpsConfig& config);
  // F32 matrices of the model that would get a fully-connected operator.
  static uint32_t f32_matrix_count(const Model& model);
  // Creates the operators in `block` (64-byte aligned, at least measure() bytes); the returned
  // object lives at the start of the block. Fully-connected operators run on `pool`.
  static Result<ModelOps*> create(const Model& model, const ModelOpsConfig& config, Span<uint8_t> block,
                                  pthreadpool* pool);

  // y[n][rows] = x[n][cols] W^T when the matrix at `weights` has an operator and both strides
  // are dense (x_stride == cols, y_stride == rows). false, with nothing written, otherwise: the
  // caller then uses its own kernel.
  bool fully_connected(const uint8_t* weights, const float* x, uint32_t x_stride, uint32_t n, float* y,
                       uint32_t y_stride);
  // In place softmax of x[0..n) for attention worker `worker`. x must have room for
  // padded_length(n) floats (entries past n are overwritten). false when not handled.
  bool softmax(uint32_t worker, float* x, uint32_t n);
  uint32_t padded_length(uint32_t n) const;

  uint32_t fully_connected_count() const { return n_fc_; }
  uint32_t softmax_count() const { return workers_ * steps_; }
  size_t block_used_bytes() const { return used_; }
  // Calls served so far (tests check that the forward pass really dispatched here).
  uint64_t fully_connected_runs() const;
  uint64_t softmax_runs() const;

 private:
  struct Layout;
  static Error build(const Model& model, const ModelOpsConfig& config, Span<uint8_t> memory, bool measuring,
                     pthreadpool* pool, ModelOps** out, uint64_t* bytes);

  FullyConnectedF32* fc_ = nullptr;  // [n_fc_], sorted by weight address
  SoftmaxF32* sm_ = nullptr;         // [workers_][steps_]
  uint32_t n_fc_ = 0;
  uint32_t workers_ = 0, steps_ = 0, step_ = 0, capacity_ = 0;
  size_t used_ = 0;
  pthreadpool* pool_ = nullptr;
};

}  // namespace keel::xnn
