#include "kernels/xnnpack/xnn_ops.h"

#include <xnnpack.h>

#include <cmath>

namespace keel::xnn {

Error FullyConnectedF32::create(const WeightView& w) {
  if (w.dtype != fb::DType::F32 || w.rows == 0 || w.cols == 0 || w.data == nullptr) {
    return Error(Status::InvalidArgument, "XNNPACK fully-connected wants a non-empty F32 matrix");
  }
  const xnn_status s = xnn_create_fully_connected_nc_f32(
      w.cols, w.rows, w.cols, w.rows, reinterpret_cast<const float*>(w.data), nullptr, -INFINITY, INFINITY, 0, &op_);
  if (s == xnn_status_out_of_memory) {
    return Error(Status::ArenaTooSmall, "XNNPACK region too small for the %ux%u fully-connected operator", w.rows,
                 w.cols);
  }
  if (s != xnn_status_success) {
    return Error(Status::UnsupportedBackend, "xnn_create_fully_connected_nc_f32 (%ux%u) failed: status %d", w.rows,
                 w.cols, int(s));
  }
  weights_ = w.data;
  rows_ = w.rows;
  cols_ = w.cols;
  setup_n_ = 0;
  runs_ = 0;
  return Error();
}

bool FullyConnectedF32::run(const float* x, uint32_t n, float* y, pthreadpool* pool) {
  if (n == 0) return true;
  if (n != setup_n_ || x != setup_x_ || y != setup_y_ || pool != setup_pool_) {
    if (xnn_setup_fully_connected_nc_f32(op_, n, x, y, pool) != xnn_status_success) {
      setup_n_ = 0;
      return false;
    }
    setup_n_ = n;
    setup_x_ = x;
    setup_y_ = y;
    setup_pool_ = pool;
  }
  ++runs_;
  return xnn_run_operator(op_, pool) == xnn_status_success;
}

Error SoftmaxF32::create(uint32_t channels) {
  const xnn_status s = xnn_create_softmax_nc_f32(channels, channels, channels, 0, &op_);
  if (s == xnn_status_out_of_memory) {
    return Error(Status::ArenaTooSmall, "XNNPACK region too small for a softmax operator");
  }
  if (s != xnn_status_success) {
    return Error(Status::UnsupportedBackend, "xnn_create_softmax_nc_f32 (%u) failed: status %d", channels, int(s));
  }
  channels_ = channels;
  setup_x_ = nullptr;
  runs_ = 0;
  return Error();
}

bool SoftmaxF32::run(float* x) {
  if (x != setup_x_) {
    if (xnn_setup_softmax_nc_f32(op_, 1, x, x, nullptr) != xnn_status_success) {
      setup_x_ = nullptr;
      return false;
    }
    setup_x_ = x;
  }
  ++runs_;
  return xnn_run_operator(op_, nullptr) == xnn_status_success;
}

}  // namespace keel::xnn
