// The dataflow backend's static schedule and its counters (docs/emulator.md). The schedule is a
// pure function of (model shape and weight types, SRAM and tier capacities, KV capacity, slots,
// chunk), made
// once before the first token: tile shapes, the SRAM offset of every buffer, what stays on
// chip. The counters say what one forward pass moves and computes, per op class; the backend
// fills them from the copies it really makes, df_count_forward() from the same schedule with
// no data (analytic mode), and the two must agree. What the counters cost in cycles is the
// tools' cost model (tools/emulate/cost_model.h).
#pragma once

#include <cstdint>

#include "backend/dataflow_hw.h"
#include "core/snap_compression.h"
#include "core/sparse_selection.h"
#include "model/layer_pattern.h"
#include "model/model.h"
#include "model/weight_format.h"

namespace keel {

enum class DfOp : uint8_t {
  Norm,       // RMSNorm: activations and the norm weight through SRAM
  Quantize,   // activations to int8 blocks for quantized matmuls
  QkvProj,    // q, k, v projections
  Attention,  // scores, softmax and weighted sum over the KV cache
  OutProj,    // attention output projection
  FfnIn,      // gate and up projections
  FfnDown,
  LmHead,
  Residual,   // residual adds, SwiGLU, biases
  KvWrite,    // new keys and values converted to f16 into the cache
  KvPolicy,   // SnapKV scoring (scores and softmax outside attention)
  KvCompact,  // SnapKV selection and compaction: score rows summed, pooled, the kept entries gathered, keys re-rotated
  KvSelect,   // RocketKV's page selection at a decode step: page summaries read and bounded, pages ranked
  Count
};
constexpr uint32_t kDfOps = uint32_t(DfOp::Count);
const char* df_op_name(DfOp op);

struct DfCounters {
  uint64_t calls = 0;
  uint64_t macs_int8 = 0, macs_bf16 = 0, macs_f32 = 0;
  uint64_t vector_elems = 0;
  uint64_t weight_elems = 0;  // weight elements a matmul's tiles unpack (rows x cols a call, whatever its tokens)
  uint64_t sram_bytes = 0;    // bytes copied into or out of the SRAM, and read/written there by row ops
  uint64_t tier_bytes[kHwMaxTiers] = {};
  uint64_t tier_transfers[kHwMaxTiers] = {};
  void add(const DfCounters& o);
  void subtract(const DfCounters& o);  // o counted within these: what came after it
  bool operator==(const DfCounters& o) const;
  // The same calls, and no other count above o's: a walk's bound held.
  bool within(const DfCounters& o) const;
};

struct DfCounterSet {
  DfCounters op[kDfOps];
  DfCounters total() const;
};

// A layer's matrices, in the order a pass multiplies them.
enum class DfMat : uint8_t { Wq, Wk, Wv, Wo, Gate, Up, Down, Count };
constexpr uint32_t kDfMats = uint32_t(DfMat::Count);

// What the schedule needs of a model.
struct DfModel {
  ModelShape shape;
  // Each layer's matrices' formats: a GGUF converted as it is mixes them (Q4_K_M keeps some
  // layers' v and down matrices in Q6_K). At most kMaxLayers layers.
  fb::DType dtypes[kMaxLayers][kDfMats] = {};
  fb::DType lm_head_dtype = fb::DType::F32;
  bool qkv_bias = false;
  // Gemma 3: each query and key head RMS-normalized before RoPE (qk_norm), a second norm on the
  // attention's and the FFN's outputs (post_norms); the layers model/layer_pattern.h calls local
  // under window_pattern attend to the last sliding_window positions, through a ring of their
  // own (0: every layer global).
  bool qk_norm = false, post_norms = false;
  uint32_t window_pattern = 0, sliding_window = 0;
  uint32_t local_layers() const;
  uint32_t global_layers() const { return shape.n_layers - local_layers(); }
  fb::DType dtype(uint32_t layer, DfMat w) const { return dtypes[layer][uint32_t(w)]; }
  // Every layer's q, k, v and o in `attn`, gate, up and down in `ffn` (a shape's).
  void set_dtypes(fb::DType attn, fb::DType ffn);
};
DfModel df_model(const Model& model);

struct DfScheduleInput {
  DfModel model;
  DfMemory memory;
  uint32_t kv_capacity_tokens = 0;     // per slot: budget + chunk (the global layers')
  uint32_t local_capacity_tokens = 0;  // per slot: the local layers' ring, window + chunk (0: none)
  uint32_t kv_pages = 0;               // page summaries per layer and KV head of a slot (sparse decode)
  uint32_t slots = 1;
  uint32_t chunk_tokens = 1;
};

enum class DfBuf : uint8_t {
  KvResident,       // every slot's cache when it fits on chip
  WeightsResident,  // every weight when they fit too
  Activations,      // x, xb, q, k, v, att, hb, hb2 and the quantized rows of one chunk
  MatIn,            // matmul input rows (f32 or int8 blocks); norm input and weight
  WeightTile0,
  WeightTile1,  // second weight tile when double-buffered
  MatOut,       // matmul output tile; norm output
  AttnQ,        // a query block, as rotated and re-rotated for the prefix
  AttnScores,   // score rows of the query block
  AttnAcc,      // weighted-sum accumulators of the query block
  KvTile0,
  KvTile1,
  Count
};
constexpr uint32_t kDfBufs = uint32_t(DfBuf::Count);
const char* df_buf_name(DfBuf b);

struct DfSchedule {
  bool fits = false;
  char refusal[200] = {};  // when !fits: the op, the tile and the bytes
  bool kv_onchip = false, weights_onchip = false, double_buffered = false;
  uint32_t tile_panels = 1;     // matmul weight tile, in panels of kPanelRows rows
  uint32_t kv_tile_tokens = 1;  // keys (values) per attention tile
  uint32_t q_block = 1;         // chunk tokens whose queries share one pass over the cache
  uint32_t kv_capacity_tokens = 0, local_capacity_tokens = 0, slots = 1, chunk_tokens = 1;
  uint32_t score_row_tokens = 0;  // one score row of AttnScores: the larger capacity
  uint64_t offset[kDfBufs] = {}, bytes[kDfBufs] = {};
  uint64_t peak_bytes = 0;                // end of the last buffer: SRAM the schedule uses
  uint64_t kv_total_bytes = 0;            // every slot's cache, local rings and page summaries included
  uint64_t kv_summary_bytes = 0;          // of which page summaries (sparse decode)
  uint64_t weight_bytes = 0;              // every matrix and norm
  uint64_t sram_bytes = 0;                // capacity
  uint32_t weight_tier = 0, kv_tier = 0;  // off-chip tier of what is not on chip
};

DfSchedule df_schedule(const DfScheduleInput& in);

// A decode token's RocketKV sparse attention on every layer: per KV head the page
// selection (KvSelect) and one attention call over `gathered` entries besides the token's own,
// with the prefix re-rotation when `gathered_prefix`. Which entries are gathered depends on the
// scores, so walked with no data this is a bound: the most entries and pages a step may take.
struct DfSparseDecode {
  SparseSelection select;
  uint32_t gathered = 0;
  bool gathered_prefix = false;
};

// One forward pass of a slot: n tokens after `visible` cached entries of the global layers
// (`prefix` of them rotated at their cache index) and `local_visible` of the local layers' ring
// (a model with no local layers ignores it), with `n_logits` logit rows.
struct DfPass {
  uint32_t n = 1, visible = 0, prefix = 0, local_visible = 0, n_logits = 1;
};

// Counts one forward pass exactly as the dataflow backend's copies do. With `sparse` and
// n == 1, every global layer's attention is that sparse decode instead.
void df_count_forward(const DfSchedule& s, const DfModel& m, const DfPass& pass, DfCounterSet& out,
                      const DfSparseDecode* sparse = nullptr);

// One RocketKV page selection (core/sparse_selection.h), into KvSelect: one call; the summaries
// (pages x 2 x dims f32, and head_dim f32 of spread with head ranking) read from where the cache
// lives, one transfer; vector work frames x group x head_dim to choose the dims, pages x group x
// dims x 2 for the bounds and pages to rank them. The backend counts it from the shape the
// transformer reports (Backend::sparse_selected).
void df_count_sparse_selection(const DfSchedule& s, const SparseSelection& j, DfCounters& out);

// One SnapKV compression (a prefill chunk that overflows a snapkv or snapstream budget,
// kv/snapkv_compress.cpp; its shape in core/snap_compression.h).
//  - Scoring, into KvPolicy: per global layer and KV head (local layers have no SnapKV), each of `queries` observation
//  queries of
//    each query head of the group scores all `total` entries, the first `prefix` with one scores
//    call and the rest with another; each row is softmaxed. The backend counts the same calls as
//    the policy makes them.
//  - Selection and compaction, into KvCompact: per global layer and KV head one task; the score rows
//    summed (queries x group x total), every candidate max-pooled over pool_kernel neighbours and
//    ranked (candidates x (pool_kernel + 2)); the kept keys and values read from where the cache
//    lives into SRAM and written back (2 transfers), and each rotated key dequantized, turned and
//    requantized there (3 x head_dim elements, its f16 row read and written in SRAM). The backend
//    counts this from the shape the KV manager reports (Backend::snap_compacted).
void df_count_snap_scoring(const DfSchedule& s, const DfModel& m, const SnapCompression& j, DfCounterSet& out);
void df_count_snap_compaction(const DfSchedule& s, const DfModel& m, const SnapCompression& j, DfCounters& out);
// Both: what one compression costs.
void df_count_snap_compression(const DfSchedule& s, const DfModel& m, const SnapCompression& j, DfCounterSet& out);

// Bytes one weight tile of rows [row0, row0 + rows) takes (whole panels for quantized types).
uint64_t df_weight_rows_bytes(fb::DType t, uint32_t rows, uint32_t cols);
// Weight elements of `rows` x `cols` a kernel must unpack before multiplying: every element of
// a nibble-packed or half-precision format, none of int8 (fed to the int8 product as stored) or
// f32 ones.
uint64_t df_unpacked_elems(fb::DType t, uint32_t rows, uint32_t cols);
uint64_t df_matmul_input_bytes(fb::DType t, uint32_t n, uint32_t cols);

}  // namespace keel
