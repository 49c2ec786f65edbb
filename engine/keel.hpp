// Keel public C++ API: an engine whose arenas are sized at compile time.
//
//   #include "smollm2_shape.h"               // from `keel convert --header`
//   static keel::Engine<smollm2::Shape, 1024> engine;   // RAM shows up in the linker map
//   engine.init(model_bytes, model_size);    // verifies the model matches Shape
//   engine.runtime().prefill(0, ...);
//
// With several slots, engine.scheduler() batches them (llm/scheduler.h): submit requests, then
// step() until they finish; each step is one forward pass over every active slot.
//
//   static keel::Engine<smollm2::Shape, 512, 4, 16, keel::KvPolicyKind::SnapStream, 8> engine;
//   engine.scheduler().submit(request);       // 4 slots, 8 more requests may wait
//   engine.scheduler().step(events, &n);
//
// `Shape` is the struct the header declares (vocab_size, dim, n_layers, n_heads, n_kv_heads,
// head_dim, ffn_dim, context_length, tokenizer_bytes). The arenas are members, so a static
// Engine holds all of the engine's RAM; nothing is allocated, ever.
#pragma once

#include <cinttypes>
#include <cstdint>

#include "core/check.h"
#include "llm/plan.h"
#include "llm/plan_model.h"
#include "llm/run_config.h"
#include "llm/runtime.h"
#include "llm/scheduler.h"
#include "model/model.h"

namespace keel {

// `Policy` is the KV policy every slot runs (docs/kv.md); SnapKV's buffers are planned
// only for the policies that use them. `Queue` requests may wait for a slot in the scheduler.
// `KvT` is how the cache stores keys and values (f16, or q8/q4 for about half or a third of the
// bytes: docs/kv.md, "Quantized cache").
// A Shape of a model with sliding-window layers also declares local_layers and sliding_window
// (`keel convert --header` writes them for Gemma 3); without them every layer is global.
template <typename Shape>
constexpr uint32_t shape_local_layers() {
  if constexpr (requires { Shape::local_layers; }) {
    return Shape::local_layers;
  } else {
    return 0;
  }
}
template <typename Shape>
constexpr uint32_t shape_sliding_window() {
  if constexpr (requires { Shape::sliding_window; }) {
    return Shape::sliding_window;
  } else {
    return 0;
  }
}

// The engine's defaults with the architecture's rocketkv and snapkv choices, which `keel convert
// --header` writes into Shape (sparse_ranking, rocketkv_kernel, snapkv_kernel); a Shape without
// them gets the engine's.
template <typename Shape>
constexpr RunDefaults shape_run_defaults() {
  RunDefaults d;
  if constexpr (requires { Shape::sparse_ranking; }) {
    static_assert(Shape::sparse_ranking <= uint32_t(RocketSelect::Head), "sparse_ranking is 0 (group) or 1 (head)");
    d.rocket_select = static_cast<RocketSelect>(Shape::sparse_ranking);
  }
  if constexpr (requires { Shape::rocketkv_kernel; }) {
    d.snap_kernels[uint32_t(KvPolicyKind::RocketKV)] = Shape::rocketkv_kernel;
  }
  if constexpr (requires { Shape::snapkv_kernel; }) {
    d.snap_kernels[uint32_t(KvPolicyKind::SnapKV)] = Shape::snapkv_kernel;
  }
  return d;
}

template <typename Shape, uint32_t KvBudget, uint32_t Slots = 1, uint32_t Chunk = 16,
          KvPolicyKind Policy = KvPolicyKind::SnapStream, uint32_t Queue = 0, KvType KvT = KvType::F16>
class Engine {
 public:
  static constexpr PlanShape kShape{Shape::vocab_size,
                                    Shape::dim,
                                    Shape::n_layers,
                                    Shape::n_heads,
                                    Shape::n_kv_heads,
                                    Shape::head_dim,
                                    Shape::ffn_dim,
                                    Shape::tokenizer_bytes,
                                    shape_local_layers<Shape>(),
                                    shape_sliding_window<Shape>()};
  // The engine's defaults (llm/run_config.h) with the Shape's architecture choices, under the
  // template's policy, budget, slots and chunk; one thread.
  static constexpr RuntimeConfig kRuntimeConfig = resolve_runtime_config(shape_run_defaults<Shape>(), [] {
    RunOverrides o{run_policy(Policy), KvBudget, Slots, Chunk, 1};
    o.queue_capacity = Queue;
    o.kv_type = uint32_t(KvT);
    return o;
  }());
  static constexpr PlanConfig kConfig = kRuntimeConfig.plan;
  static constexpr KvPolicyConfig kKv = kRuntimeConfig.kv;
  static constexpr MemoryPlan kPlan = plan_memory(kShape, kConfig, kKv);
  static constexpr uint64_t kPersistentBytes = kPlan.persistent_bytes;
  static constexpr uint64_t kScratchBytes = kPlan.scratch_bytes;
  static_assert(KvBudget >= 1 && Slots >= 1 && Chunk >= 1, "budget, slots and chunk are at least 1");
  static_assert(kv_type_fits(KvT, Shape::head_dim), "the KV type cannot store heads of this size");

  // Verifies the model and checks it has the compiled-in shape (ModelShapeMismatch otherwise),
  // then lays the runtime out in the member arenas. Single-threaded (bare metal). With
  // `verify_weights`, every checksum the file carries is checked first (Model::load).
  Error init(const void* model, size_t model_bytes, BackendKind backend = BackendKind::Auto,
             bool verify_weights = false) {
    KEEL_TRY(model_.load(Span<const uint8_t>(static_cast<const uint8_t*>(model), model_bytes), verify_weights));
    const ModelShape& s = model_.shape();
    KEEL_ENSURE(s.vocab_size == Shape::vocab_size && s.dim == Shape::dim && s.n_layers == Shape::n_layers &&
                    s.n_heads == Shape::n_heads && s.n_kv_heads == Shape::n_kv_heads && s.head_dim == Shape::head_dim &&
                    s.ffn_dim == Shape::ffn_dim,
                Status::ModelShapeMismatch,
                "model shape (vocab %" PRIu32 ", dim %" PRIu32 ", layers %" PRIu32 ", heads %" PRIu32 "/%" PRIu32
                ", head dim %" PRIu32 ", ffn %" PRIu32 ") differs from the compiled-in shape",
                s.vocab_size, s.dim, s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, s.ffn_dim);
    const PlanShape ps = plan_shape(model_);
    KEEL_ENSURE(ps.local_layers == kShape.local_layers && ps.sliding_window == kShape.sliding_window,
                Status::ModelShapeMismatch,
                "model has %" PRIu32 " sliding-window layers of window %" PRIu32 "; the compiled-in shape says %" PRIu32
                " of %" PRIu32,
                ps.local_layers, ps.sliding_window, kShape.local_layers, kShape.sliding_window);
    // A Shape from an older header lacks the architecture's choices for snapkv and rocketkv;
    // running without them is the configuration docs/notes/kvpress.md measured losing needles.
    if constexpr (Policy == KvPolicyKind::SnapKV) {
      const RunDefaults arch = architecture_run_defaults(model_.meta()->arch()->family());
      KEEL_ENSURE(arch.snap_kernel(Policy) == kKv.snap_kernel, Status::ModelShapeMismatch,
                  "the model's architecture runs snapkv with kernel %" PRIu32 "; the compiled-in Shape says %" PRIu32
                  " (write the header again with keel convert --header)",
                  arch.snap_kernel(Policy), kKv.snap_kernel);
    }
    if constexpr (Policy == KvPolicyKind::RocketKV) {
      const RunDefaults arch = architecture_run_defaults(model_.meta()->arch()->family());
      KEEL_ENSURE(arch.rocket_select == kKv.rocket_select && arch.snap_kernel(Policy) == kKv.snap_kernel,
                  Status::ModelShapeMismatch,
                  "the model's architecture runs rocketkv with %s page ranking and kernel %" PRIu32
                  "; the compiled-in Shape says %s and %" PRIu32 " (write the header again with keel convert --header)",
                  arch.rocket_select == RocketSelect::Head ? "head" : "group", arch.snap_kernel(Policy),
                  kKv.rocket_select == RocketSelect::Head ? "head" : "group", kKv.snap_kernel);
    }
    RuntimeConfig rc = kRuntimeConfig;
    rc.backend = backend;
    KEEL_TRY(runtime_.init(model_, rc, Span<uint8_t>(persistent_, kPersistentBytes),
                           Span<uint8_t>(scratch_, kScratchBytes), nullptr));
    return scheduler_.init(runtime_);
  }

  Runtime& runtime() { return runtime_; }
  // Batches the slots; it owns them, so drive either the scheduler or runtime() directly.
  Scheduler& scheduler() { return scheduler_; }
  const Model& model() const { return model_; }

 private:
  alignas(64) uint8_t persistent_[kPersistentBytes];
  alignas(64) uint8_t scratch_[kScratchBytes];
  Model model_;
  Runtime runtime_;
  Scheduler scheduler_;
};

}  // namespace keel
