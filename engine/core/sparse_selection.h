// The shape of one RocketKV page selection at a decode step (llm/sparse_attention.cpp), per layer
// and KV head, in the terms the dataflow emulator counts it by (backend/dataflow_schedule.h):
//  - the group's `group` query heads choose `dims` of their head_dim dimensions, once per frame
//    (`frames` is 2 when the cache holds an index-rotated prefix, whose pages are bounded with the
//    query rotated at its cache index, and 1 otherwise);
//  - each of the `pages` page summaries is read (the minimum and maximum of those dims, f32) and
//    bounded against each query head; with head ranking (`head_ranking`) the keys' spread,
//    head_dim f32, is read too;
//  - the pages are ranked, and the best taken until they hold the exact-attention budget.
// The attention over the gathered entries that follows is an ordinary attention call.
#pragma once

#include <cstdint>

namespace keel {

struct SparseSelection {
  uint32_t group = 0, head_dim = 0, frames = 1, dims = 0, pages = 0;
  bool head_ranking = false;
};

}  // namespace keel
