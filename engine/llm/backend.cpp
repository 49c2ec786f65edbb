#include "llm/backend.h"

#include "core/check.h"
#if defined(KEEL_HAVE_XNNPACK)
#include "kernels/xnnpack/xnn_memory.h"
#endif

namespace keel {

const char* backend_name(BackendKind k) {
  switch (k) {
    case BackendKind::Auto: return "auto";
    case BackendKind::Ref: return "ref";
    case BackendKind::Native: return "native";
    case BackendKind::Xnnpack: return "xnnpack";
  }
  return "?";
}

Result<Backend> select_backend(BackendKind kind) {
  Backend b;
  b.kind = kind;
  switch (kind) {
    case BackendKind::Ref:
      b.matmul = &kernels_ref();
      b.vector = &vector_kernels_ref();
      b.attention = &attention_kernels_ref();
      return b;
    case BackendKind::Native:
      b.matmul = kernels_x86();
      b.vector = vector_kernels_x86();
      b.attention = attention_kernels_x86();
      if (!b.matmul || !b.vector || !b.attention) {
        return Error(Status::UnsupportedBackend, "backend 'native' needs x86 AVX2+FMA+F16C; this CPU or build lacks it");
      }
      return b;
    case BackendKind::Xnnpack: {
#if defined(KEEL_HAVE_XNNPACK)
      KEEL_TRY(xnn::initialize());
      // Everything XNNPACK does not run stays on the best native kernels.
      b.matmul = &kernels_best();
      b.vector = &vector_kernels_best();
      b.attention = attention_kernels_x86() ? attention_kernels_x86() : &attention_kernels_ref();
      b.xnnpack_ops = kXnnFullyConnectedF32 | kXnnSoftmax;
      return b;
#else
      return Error(Status::UnsupportedBackend, "backend 'xnnpack' is not available in this build");
#endif
    }
    case BackendKind::Auto: {
      b.matmul = &kernels_best();
      b.vector = &vector_kernels_best();
      b.attention = attention_kernels_x86() ? attention_kernels_x86() : &attention_kernels_ref();
#if defined(KEEL_HAVE_XNNPACK)
      // XNNPACK's f32 fully-connected beats the native F32 kernels (prefill by ~5x); its
      // softmax and add do not (docs/performance.md).
      b.xnnpack_ops = kXnnFullyConnectedF32;
#endif
      return b;
    }
  }
  return Error(Status::InvalidArgument, "unknown backend %u", unsigned(kind));
}

}  // namespace keel
