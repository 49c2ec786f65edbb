#include "ports/linux/backend_plan.h"

#include <cstdlib>
#include <memory>

#include "backend/registry.h"

namespace keel::port {

bool reserve_backend_bytes(const Model& model, RuntimeConfig& config, std::string& error) {
  config.plan.backend_bytes = 0;
  const BackendPlan bp = backend_plan(config.plan, Runtime::plan(model, config));
  const uint64_t work_bytes = backend_state_work_bytes(model, config.backend, bp);
  if (work_bytes == 0) return true;
  struct Free {
    void operator()(uint8_t* p) const { free(p); }
  };
  std::unique_ptr<uint8_t, Free> work(static_cast<uint8_t*>(aligned_alloc(64, (work_bytes + 63) / 64 * 64)));
  if (!work) {
    error = "cannot reserve " + std::to_string(work_bytes) + " bytes to measure the backend's state";
    return false;
  }
  Result<uint64_t> r = backend_state_bytes(model, config.backend, bp, Span<uint8_t>(work.get(), work_bytes));
  if (!r.ok()) {
    error = std::string(to_string(r.error().status())) + ": " + r.error().message();
    return false;
  }
  config.plan.backend_bytes = r.value();
  return true;
}

}  // namespace keel::port
