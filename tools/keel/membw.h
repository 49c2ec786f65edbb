// DRAM read bandwidth of this machine with a given number of threads: the physical ceiling of
// a memory-bound decode.
#pragma once

#include <cstdint>

namespace keel::cli {

// Median GB/s (1e9 bytes) over `reps` passes reading a `bytes`-sized buffer with `threads`.
double measure_read_bandwidth_gbps(uint64_t bytes, unsigned threads, unsigned reps);

}  // namespace keel::cli
