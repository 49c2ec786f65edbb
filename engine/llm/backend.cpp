#include "llm/backend.h"

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
    case BackendKind::Xnnpack:
      return Error(Status::UnsupportedBackend, "backend 'xnnpack' is not available in this build");
    case BackendKind::Auto: {
      b.matmul = &kernels_best();
      b.vector = &vector_kernels_best();
      b.attention = attention_kernels_x86() ? attention_kernels_x86() : &attention_kernels_ref();
      return b;
    }
  }
  return Error(Status::InvalidArgument, "unknown backend %u", unsigned(kind));
}

}  // namespace keel
