// Host side of planning for backends whose state is only known by building it (XNNPACK packs
// its own copy of F32 weights): measures those bytes in temporary host memory so the plan,
// and so the persistent arena, includes them before init.
#pragma once

#include <string>

#include "llm/runtime.h"

namespace keel::port {

// Sets config.plan.backend_bytes for config.backend (0 when the backend keeps no such state).
bool reserve_backend_bytes(const Model& model, RuntimeConfig& config, std::string& error);

}  // namespace keel::port
