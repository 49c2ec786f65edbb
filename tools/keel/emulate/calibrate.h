// `keel emulate --calibrate`: this machine as a dataflow hardware description (the `host`
// preset). One cycle is a nominal nanosecond (clock 1 GHz), so rates are per nanosecond.
#pragma once

#include <cstdint>

namespace keel::cli {

// Measures and writes hw::host_hw_path(); returns the exit code.
int run_calibrate(uint32_t threads);

}  // namespace keel::cli
