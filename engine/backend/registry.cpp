#include "backend/registry.h"

#include <cstring>
#include <new>

#if !defined(KEEL_FREESTANDING)
#include "backend/dataflow_backend.h"
#endif
#include "backend/kernel_backend.h"
#include "core/check.h"
#if defined(KEEL_HAVE_XNNPACK)
#include "backend/xnnpack/xnnpack_backend.h"
#include "kernels/xnnpack/xnn_memory.h"
#endif

namespace keel {
namespace {

template <typename T, typename... Args>
Backend* construct(BackendStorage& s, Args&&... args) {
  static_assert(sizeof(T) <= sizeof(s.bytes) && alignof(T) <= alignof(BackendStorage), "backend storage too small");
  return new (s.bytes) T(static_cast<Args&&>(args)...);
}

const AttentionKernels& best_attention() {
  return attention_kernels_native() ? *attention_kernels_native() : attention_kernels_ref();
}

}  // namespace

constexpr BackendInfo kBackends[] = {
    {BackendKind::Auto, "auto", "the best this CPU and build support"},
    {BackendKind::Ref, "ref", "portable reference kernels, the oracle"},
    {BackendKind::Native, "native", "x86 AVX2+FMA+F16C or arm64 NEON kernels"},
    {BackendKind::Xnnpack, "xnnpack", "XNNPACK matmuls (builds with it)"},
    {BackendKind::Dataflow, "dataflow", "the dataflow accelerator emulation (needs --hw)"},
};

Span<const BackendInfo> backend_infos() {
  return Span<const BackendInfo>(kBackends, sizeof kBackends / sizeof kBackends[0]);
}

bool backend_from_name(const char* name, BackendKind* out) {
  for (const BackendInfo& b : kBackends) {
    if (strcmp(name, b.name) == 0) {
      *out = b.kind;
      return true;
    }
  }
  return false;
}

const char* backend_name(BackendKind k) {
  for (const BackendInfo& b : kBackends) {
    if (b.kind == k) return b.name;
  }
  return "?";
}

Error backend_supported(BackendKind kind) {
  switch (kind) {
    case BackendKind::Ref:
    case BackendKind::Auto: return Error();
    case BackendKind::Dataflow:
#if defined(KEEL_FREESTANDING)
      return Error(Status::UnsupportedBackend, "backend 'dataflow' is not in freestanding builds");
#else
      return Error();
#endif
    case BackendKind::Native:
      KEEL_ENSURE(kernels_native() && vector_kernels_native() && attention_kernels_native(), Status::UnsupportedBackend,
                  "backend 'native' needs x86 AVX2+FMA+F16C or arm64 NEON; this CPU or build has neither");
      return Error();
    case BackendKind::Xnnpack:
#if defined(KEEL_HAVE_XNNPACK)
      return xnn::initialize();
#else
      return Error(Status::UnsupportedBackend, "backend 'xnnpack' is not available in this build");
#endif
  }
  return Error(Status::InvalidArgument, "unknown backend %u", unsigned(kind));
}

Result<Backend*> make_backend(BackendKind kind, const ThreadPool* pool, BackendStorage& storage) {
  KEEL_TRY(backend_supported(kind));
  switch (kind) {
    case BackendKind::Ref:
      return construct<KernelBackend>(storage, kind, pool, kernels_ref(), vector_kernels_ref(),
                                      attention_kernels_ref());
    case BackendKind::Native:
      return construct<KernelBackend>(storage, kind, pool, *kernels_native(), *vector_kernels_native(),
                                      *attention_kernels_native());
    case BackendKind::Dataflow:
#if !defined(KEEL_FREESTANDING)
      // The best kernel tables, as `native` uses them, so that outputs compare with it.
      return construct<DataflowBackend>(storage, pool, kernels_best(), vector_kernels_best(), best_attention());
#else
      break;
#endif
    case BackendKind::Xnnpack:
    case BackendKind::Auto:
#if defined(KEEL_HAVE_XNNPACK)
      return construct<XnnpackBackend>(storage, kind, pool);
#else
      return construct<KernelBackend>(storage, kind, pool, kernels_best(), vector_kernels_best(), best_attention());
#endif
  }
  return Error(Status::InvalidArgument, "unknown backend %u", unsigned(kind));
}

uint64_t backend_state_work_bytes(const Model& model, BackendKind kind, const BackendPlan& plan) {
  BackendStorage storage;
  Result<Backend*> b = make_backend(kind, nullptr, storage);
  return b.ok() ? b.value()->state_work_bytes(model, plan) : 0;
}

Result<uint64_t> backend_state_bytes(const Model& model, BackendKind kind, const BackendPlan& plan,
                                     Span<uint8_t> work) {
  KEEL_ENSURE(model.loaded(), Status::InvalidArgument, "model is not loaded");
  BackendStorage storage;
  Result<Backend*> b = make_backend(kind, nullptr, storage);
  if (!b.ok()) return b.error();
  return b.value()->measure_state(model, plan, work);
}

}  // namespace keel
