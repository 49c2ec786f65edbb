// The dataflow backend (docs/emulator.md): runs the forward pass of an emulated accelerator
// through an SRAM region of exactly the hardware's capacity, inside its state block of the
// persistent arena. Before the first token it compiles the static schedule (dataflow_schedule.h);
// every matmul then copies its input and each weight tile into their SRAM buffers, computes the
// tile there with Keel's kernels and copies the output back; attention streams key and value
// tiles of the cache through SRAM. Counters record every byte those copies move, by op class.
#pragma once

#include "backend/dataflow_schedule.h"
#include "backend/kernel_backend.h"

namespace keel {

class DataflowBackend final : public KernelBackend {
 public:
  DataflowBackend(const ThreadPool* pool, const MatmulKernels& matmul, const VectorKernels& vector,
                  const AttentionKernels& attention)
      : KernelBackend(BackendKind::Dataflow, pool, matmul, vector, attention) {}

  // Nonzero so that hosts call measure_state (it needs no work memory: the schedule is arithmetic).
  uint64_t state_work_bytes(const Model& model, const BackendPlan& plan) const override { return kPlanAlignBytes; }
  Result<uint64_t> measure_state(const Model& model, const BackendPlan& plan, Span<uint8_t> work) const override;
  Error create_state(const Model& model, const BackendPlan& plan, Span<uint8_t> block) override;

  void matmul(const TensorView& w, const float* x, uint32_t x_stride, ActBlock* xq, bool x_quantized, uint32_t n,
              float* y, uint32_t y_stride) override;
  void quantize_rows(const float* x, uint32_t n, uint32_t cols, uint32_t x_stride, ActBlock* xq) override;
  void attention(const AttentionArgs& a) override;
  // The model's attention tiles one call at a time (not the kernel backend's combined split).
  void attention_many(const AttentionArgs* a, uint32_t count) override { Backend::attention_many(a, count); }
  void rmsnorm(const float* x, const float* w, uint32_t n, float eps, float* out) override;
  void add(const float* a, const float* b, uint32_t n, float* out) override;
  void silu_mul(const float* gate, const float* up, uint32_t n, float* out) override;
  void gelu_mul(const float* gate, const float* up, uint32_t n, float* out) override;
  void softmax(uint32_t worker, float* x, uint32_t n) override;
  void scores(KvType type, const float* q, const uint16_t* keys, uint32_t n, uint32_t head_dim, float scale,
              float* out) override;
  void to_half(const float* x, uint32_t n, uint16_t* out) override;
  void snap_compacted(const SnapCompression& shape) override;
  void sparse_selected(const SparseSelection& shape) override;

  // Valid after create_state.
  const DfSchedule& schedule() const { return state_->schedule; }
  const DfMemory& memory() const { return state_->memory; }
  const DfCounterSet& counters() const { return state_->counters; }
  void reset_counters() { state_->counters = DfCounterSet(); }

 private:
  static constexpr uint64_t kPlanAlignBytes = 64;
  struct State {
    DfMemory memory;
    DfSchedule schedule;
    DfModel model;
    DfCounterSet counters;
  };
  static uint64_t state_header_bytes() { return (sizeof(State) + 63) / 64 * 64; }
  static Result<DfSchedule> plan_schedule(const Model& model, const BackendPlan& plan);
  uint8_t* buf(DfBuf b) const { return sram_ + state_->schedule.offset[uint32_t(b)]; }
  DfCounters& ctr(DfOp op) { return state_->counters.op[uint32_t(op)]; }
  // Charges a copy from where the schedule keeps the data: SRAM if resident, else its tier.
  void charge(DfCounters& c, bool onchip, uint32_t tier, uint64_t bytes);
  DfOp classify(const TensorView& w);
  template <typename Op>
  void elementwise(const float* a, const float* b, uint32_t n, float* out, Op op);

  State* state_ = nullptr;
  uint8_t* sram_ = nullptr;  // [memory.sram_bytes]
  ModelShape shape_;
  bool after_attention_ = false;
  // The norm weight MatIn holds behind the row (null once another op has used MatIn).
  const float* norm_weight_ = nullptr;
  uint32_t norm_weight_elems_ = 0;
};

}  // namespace keel
