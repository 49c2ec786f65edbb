// Thin wrappers over the XNNPACK operators Keel uses. An operator is created once (its memory
// comes from the region open at that time, see xnn_memory.h) and set up again only when the
// batch size or a data pointer changes: in a decode loop every call of the same matrix has the
// same (n = 1, x, y), so xnn_setup_* runs once and every later call is xnn_run_operator alone.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/kernels.h"

struct xnn_operator;
struct pthreadpool;

namespace keel::xnn {

// y[n][rows] = x[n][cols] * W^T for an F32 row-major W [rows][cols]. XNNPACK packs its own copy
// of W (plus a zero bias) at creation; W itself is not read afterwards.
class FullyConnectedF32 {
 public:
  Error create(const WeightView& w);
  const uint8_t* weights() const { return weights_; }
  uint32_t rows() const { return rows_; }
  uint32_t cols() const { return cols_; }
  // x: [n][cols], y: [n][rows] (dense). Runs on `pool` (nullptr: the caller's thread).
  bool run(const float* x, uint32_t n, float* y, pthreadpool* pool);
  uint64_t runs() const { return runs_; }

 private:
  xnn_operator* op_ = nullptr;
  const uint8_t* weights_ = nullptr;
  uint32_t rows_ = 0, cols_ = 0;
  uint32_t setup_n_ = 0;
  const float* setup_x_ = nullptr;
  float* setup_y_ = nullptr;
  pthreadpool* setup_pool_ = nullptr;
  uint64_t runs_ = 0;
};

// In-place softmax over exactly `channels` floats, on the caller's thread.
class SoftmaxF32 {
 public:
  Error create(uint32_t channels);
  uint32_t channels() const { return channels_; }
  bool run(float* x);
  uint64_t runs() const { return runs_; }

 private:
  xnn_operator* op_ = nullptr;
  uint32_t channels_ = 0;
  float* setup_x_ = nullptr;
  uint64_t runs_ = 0;
};

}  // namespace keel::xnn
