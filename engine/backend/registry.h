// The backends this build has, by kind: the only place that names them.
#pragma once

#include <cstddef>

#include "backend/backend.h"

namespace keel {

// Room for any backend object (checked where each is registered).
struct BackendStorage {
  alignas(16) unsigned char bytes[192];
};

// Every backend kind with its name (backend_name) and the line a command's help gives it, in
// the order help lists them.
struct BackendInfo {
  BackendKind kind;
  const char* name;
  const char* description;
};
Span<const BackendInfo> backend_infos();
// The kind named `name` (a backend_name); false for a name no backend has.
bool backend_from_name(const char* name, BackendKind* out);

// Ok when this CPU and build can run `kind`; UnsupportedBackend saying what is missing otherwise.
Error backend_supported(BackendKind kind);
// Constructs the backend of `kind` in `storage`; it runs its parallel ops on `pool` (may be null).
Result<Backend*> make_backend(BackendKind kind, const ThreadPool* pool, BackendStorage& storage);

// Bytes of the per-model state backend `kind` keeps in the persistent arena (set
// PlanConfig::backend_bytes to it before planning). Some state is only known by building it
// (XNNPACK packs its own copy of the F32 weights), so this builds it once in `work`: host memory,
// 64-byte aligned, of at least backend_state_work_bytes() bytes, free again on return.
uint64_t backend_state_work_bytes(const Model& model, BackendKind kind, const BackendPlan& plan);
Result<uint64_t> backend_state_bytes(const Model& model, BackendKind kind, const BackendPlan& plan, Span<uint8_t> work);

}  // namespace keel
