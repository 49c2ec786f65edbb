// DRAM read bandwidth of this machine with a given number of threads: the physical ceiling of
// a memory-bound decode.
#pragma once

#include <cstdint>
#include <vector>

namespace keel::cli {

// Median GB/s (1e9 bytes) over `reps` passes reading a `bytes`-sized buffer with `threads`.
double measure_read_bandwidth_gbps(uint64_t bytes, unsigned threads, unsigned reps);

// GB/s reading each of `sizes` (bytes, a prefix of one buffer) over and over with `threads`, in
// `rounds` rounds that each time every size in turn, so that a burst from another process falls
// on a few samples of several sizes rather than on all samples of one: per size, every sample.
std::vector<std::vector<double>> measure_read_curve_gbps(const std::vector<uint64_t>& sizes, unsigned threads,
                                                         unsigned rounds);

}  // namespace keel::cli
