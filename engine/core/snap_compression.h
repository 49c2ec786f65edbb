// The shape of one SnapKV compression of a slot's cache (kv/snapkv_compress.cpp), in the terms
// the dataflow emulator counts it by (backend/dataflow_schedule.h). Per layer and KV head:
//  - scoring: `queries` observation queries of each query head of the group score all `total`
//    entries (the first `prefix`, rotated at their cache index, in a call of their own), each
//    row softmaxed;
//  - selection: the rows summed, the `candidates` (entries neither sinks nor in the kept tail)
//    max-pooled with `pool_kernel` and the best of them chosen;
//  - compaction: the `kept` survivors gathered into their new places, `rotated` of their keys
//    re-rotated to their new cache index.
// Every count is a function of the shape, not of the scores: `rotated` is the new prefix (every
// key that may move; one moves unless nothing before it was evicted), the selection is counted
// as its pooling window over every candidate.
#pragma once

#include <cstdint>

namespace keel {

struct SnapCompression {
  uint32_t queries = 0, total = 0, prefix = 0;
  uint32_t candidates = 0, pool_kernel = 1;
  uint32_t kept = 0, rotated = 0;
};

}  // namespace keel
