#include "kv/rocketkv_split.h"

#include <cmath>

namespace keel {

uint32_t rocketkv_capacity(uint64_t total, uint32_t budget) {
  if (budget == 0) return 0;
  const double c = double(total) / double(budget) > 1.0 ? double(total) / double(budget) : 1.0;
  double alpha = 0.2 + 0.06 * std::log2(c);
  alpha = alpha < 0.8 ? alpha : 0.8;
  const double capacity = std::floor(double(total) / std::pow(c, alpha));
  return capacity > 4294967295.0 ? 4294967295u : uint32_t(capacity);
}

}  // namespace keel
