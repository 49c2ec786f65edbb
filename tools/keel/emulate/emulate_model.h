// What `keel emulate` predicts for one configuration: the static schedule and the counters of a
// decode step (and of a prompt's prefill) walked analytically over it (docs/emulator.md).
#pragma once

#include <cstdint>
#include <string>

#include "emulate/cost_model.h"
#include "kv/rocketkv_split.h"
#include "llm/runtime.h"

namespace keel::cli {

struct EmuConfig {
  DfModel model;
  HwDesc hw;
  bool bounded = false;  // a bounded KV policy (not full): the cache holds at most the budget
  uint32_t budget = 1024, slots = 1, chunk = 64, context = 4096, prompt = 0;
  // Observation queries of the SnapKV scoring a bounded policy runs on every prompt chunk past
  // its budget (snapkv, snapstream, rocketkv); 0 for the others. Of the entries it keeps (the
  // budget), `snap_ring` stay whole in the recent ring and `snap_sinks` are sinks; the rest
  // compete, pooled with `snap_kernel` (0: adaptive), and the new prefix is re-rotated.
  uint32_t snap_queries = 0, snap_ring = 0, snap_sinks = 0, snap_kernel = 0;
  // RocketKV's sparse decode (budget 0: a decode token attends to every cached entry).
  SparseSplit sparse;
};

struct EmuResult {
  DfSchedule schedule;
  uint32_t decode_cached = 0;        // entries the decode token attends to, besides itself
  uint32_t decode_local_cached = 0;  // of the local layers' rings (sliding-window models)
  // Under sparse decode, the bound the decode token was walked with (emu_sparse_bound).
  bool decode_sparse = false;
  DfSparseDecode decode_sparse_bound;
  DfCounterSet decode;   // one decode token at `context` tokens of history
  DfCounterSet prefill;  // the whole prompt (prompt tokens, chunked)
  double decode_cycles = 0, prefill_cycles = 0;
  // What a host's cache serves (0 on an accelerator) and what SnapKV scoring re-reads from SRAM.
  DfReuse decode_reuse, prefill_reuse;
};

// KV budget of the plan: a bounded policy's, or under full the context plus the decode token.
uint32_t emu_budget(const EmuConfig& c);
uint32_t emu_kv_capacity(const EmuConfig& c);
// Entries a local layer's ring keeps (llm/plan.h plan_local_budget): the window, or the budget
// where that is smaller under full; 0 for a model with no local layers.
uint32_t emu_local_budget(const EmuConfig& c);
// The static schedule of `c`: its hardware's SRAM and tiers, its KV capacity, slots and chunk.
DfSchedule emu_schedule(const EmuConfig& c);
EmuResult emulate(const EmuConfig& c);
// Cycles of a counter set: the sum of its ops' costs (ops run one after another).
double emu_cycles(const DfCounterSet& s, const HwDesc& hw, bool double_buffered, const DfReuse& reuse = {});

// The most a sparse decode step over `cached` entries (an index-rotated prefix among them when
// `evicted`) may select and gather per KV head, under `split`: every page the cache can hold
// them in (the prefix's and the ring's last pages partial), and the top-k rounded up to whole
// pages, no more than there are.
DfSparseDecode emu_sparse_bound(const SparseSplit& split, const ModelShape& shape, uint32_t cached, bool evicted);

// A compression past the budget as the KV manager plans it (kv/snapkv_compress.cpp), for the
// walks that have no runtime to ask: `total` entries (`prefix` of them index-rotated), `queries`
// observers, the budget kept, the newest `ring` whole and `sinks` sinks, the rest competing,
// pooled with `kernel` (0: adaptive); the new prefix re-rotated.
SnapCompression emu_compression_past_budget(uint32_t total, uint32_t prefix, uint32_t queries, uint32_t budget,
                                            uint32_t ring, uint32_t sinks, uint32_t kernel);
// The SnapKV compression that a prompt chunk of n tokens (one prefill call of at most a chunk:
// no lookahead) triggers in slot 0 of `rt`, as its KV manager will run it (queries 0: none).
SnapCompression emu_snap_compression(const Runtime& rt, uint32_t n);

// Built-in shapes (`llama-3.1-8b`, `smollm2-135m`) or a header from `keel convert --header`.
bool load_shape(const std::string& name_or_path, ModelShape& out, std::string& error);
const char* builtin_shape_names();

}  // namespace keel::cli
