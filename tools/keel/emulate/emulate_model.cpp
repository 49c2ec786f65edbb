#include "keel/emulate/emulate_model.h"

#include <fstream>
#include <regex>
#include <sstream>

#include "kv/snapkv.h"

namespace keel::cli {

uint32_t emu_budget(const EmuConfig& c) { return c.bounded ? c.budget : c.context + 1; }
uint32_t emu_kv_capacity(const EmuConfig& c) { return emu_budget(c) + c.chunk; }
uint32_t emu_local_budget(const EmuConfig& c) {
  if (c.model.local_layers() == 0) return 0;
  const uint32_t window = c.model.sliding_window;
  return !c.bounded && emu_budget(c) < window ? emu_budget(c) : window;
}

double emu_cycles(const DfCounterSet& s, const HwDesc& hw, bool double_buffered, const DfReuse& reuse) {
  double total = 0;
  for (uint32_t i = 0; i < kDfOps; ++i) total += df_cost(s.op[i], hw, double_buffered, DfOp(i), reuse).total_cycles;
  return total;
}

DfSchedule emu_schedule(const EmuConfig& c) {
  DfScheduleInput in;
  in.model = c.model;
  in.memory = df_memory(c.hw);
  in.kv_capacity_tokens = emu_kv_capacity(c);
  in.local_capacity_tokens = c.model.local_layers() > 0 ? emu_local_budget(c) + c.chunk : 0;
  in.kv_pages = c.sparse.budget ? c.sparse.max_pages : 0;
  in.slots = c.slots;
  in.chunk_tokens = c.chunk;
  return df_schedule(in);
}

EmuResult emulate(const EmuConfig& c) {
  EmuResult r;
  r.schedule = emu_schedule(c);
  if (!r.schedule.fits) return r;
  // Prefill: chunk by chunk; a bounded policy settles back to the budget after each chunk.
  uint32_t visible = 0;
  bool evicted = false;
  SnapCompression snap;  // the last chunk's compression, for its re-reads
  const uint32_t local_budget = emu_local_budget(c);
  auto local_visible = [&](uint32_t tokens) { return tokens < local_budget ? tokens : local_budget; };
  for (uint32_t done = 0; done < c.prompt;) {
    const uint32_t n = c.prompt - done < c.chunk ? c.prompt - done : c.chunk;
    df_count_forward(r.schedule, c.model,
                     DfPass{.n = n,
                            .visible = visible,
                            .prefix = evicted ? 1u : 0u,
                            .local_visible = local_visible(done),
                            .n_logits = done + n == c.prompt ? 1u : 0u},
                     r.prefill);
    if (c.bounded && c.snap_queries > 0 && visible + n > c.budget) {
      const uint32_t queries = c.snap_queries < done + n ? c.snap_queries : done + n;
      const SnapCompression j = emu_compression_past_budget(visible + n, evicted ? 1 : 0, queries, c.budget,
                                                            c.snap_ring, c.snap_sinks, c.snap_kernel);
      df_count_snap_compression(r.schedule, c.model, j, r.prefill);
      snap = j;
    }
    visible += n;
    if (c.bounded && visible > c.budget) visible = c.budget, evicted = true;
    done += n;
  }
  r.decode_cached = c.bounded && c.context > c.budget ? c.budget : c.context;
  const bool evicted_at_decode = c.bounded && c.context > c.budget;
  r.decode_sparse = c.bounded && c.sparse.budget > 0;
  if (r.decode_sparse)
    r.decode_sparse_bound = emu_sparse_bound(c.sparse, c.model.shape, r.decode_cached, evicted_at_decode);
  r.decode_local_cached = local_visible(c.context);
  df_count_forward(r.schedule, c.model,
                   DfPass{.n = 1,
                          .visible = r.decode_cached,
                          .prefix = evicted_at_decode ? 1u : 0u,
                          .local_visible = r.decode_local_cached,
                          .n_logits = 1},
                   r.decode, r.decode_sparse ? &r.decode_sparse_bound : nullptr);
  r.decode_reuse.cached = df_cached_fraction(
      c.hw, df_pass_footprint_bytes(r.schedule, c.model, r.decode_cached + 1, r.decode_local_cached + 1));
  r.prefill_reuse.cached =
      df_cached_fraction(c.hw, df_pass_footprint_bytes(r.schedule, c.model, visible, local_visible(c.prompt)));
  r.prefill_reuse.kv_policy_reread = df_snap_reread_fraction(c.hw, c.model, snap);
  r.decode_cycles = emu_cycles(r.decode, c.hw, r.schedule.double_buffered, r.decode_reuse);
  r.prefill_cycles = emu_cycles(r.prefill, c.hw, r.schedule.double_buffered, r.prefill_reuse);
  return r;
}

DfSparseDecode emu_sparse_bound(const SparseSplit& split, const ModelShape& shape, uint32_t cached, bool evicted) {
  DfSparseDecode d;
  d.select.group = shape.n_kv_heads ? shape.n_heads / shape.n_kv_heads : 1;
  d.select.head_dim = shape.head_dim;
  d.select.frames = evicted ? 2 : 1;
  d.select.dims = split.dims;
  const uint32_t page = split.page ? split.page : 1;
  const uint32_t pages = (cached + page - 1) / page + (evicted ? 1 : 0);
  d.select.pages = pages < split.max_pages ? pages : split.max_pages;
  d.select.head_ranking = split.select == RocketSelect::Head;
  const uint32_t most = split.gather_rows > 0 ? split.gather_rows - 1 : 0;  // gather_rows holds the token's own
  d.gathered = cached < most ? cached : most;
  d.gathered_prefix = evicted;
  return d;
}

SnapCompression emu_compression_past_budget(uint32_t total, uint32_t prefix, uint32_t queries, uint32_t budget,
                                            uint32_t ring, uint32_t sinks, uint32_t kernel) {
  SnapCompression j;
  j.queries = queries, j.total = total, j.prefix = prefix;
  const uint32_t ring_keep = ring < total ? ring : total;
  const uint32_t tail = ring_keep > queries ? ring_keep : queries;
  const uint32_t sinks_kept = sinks < total - tail ? sinks : total - tail;
  const uint32_t fixed = sinks_kept + tail;
  j.candidates = total - fixed;
  j.kept = budget;
  j.pool_kernel = snapkv_kernel(kernel, j.candidates, budget > fixed ? budget - fixed : 0);
  j.rotated = budget - ring_keep;
  return j;
}

SnapCompression emu_snap_compression(const Runtime& rt, uint32_t n) {
  return rt.kv_manager().next_compression(rt.kv_cache(0), n, true, false);
}

const char* builtin_shape_names() { return "llama-3.1-8b, smollm2-135m"; }

bool load_shape(const std::string& name, ModelShape& s, std::string& error) {
  if (name == "llama-3.1-8b") {
    s = ModelShape{128256, 4096, 32, 32, 8, 128, 14336, 131072};
    return true;
  }
  if (name == "smollm2-135m") {
    s = ModelShape{49152, 576, 30, 9, 3, 64, 1536, 8192};
    return true;
  }
  std::ifstream f(name);
  if (!f) {
    error = "--shape '" + name + "': neither a built-in shape (" + builtin_shape_names() + ") nor a readable file";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  struct Field {
    const char* key;
    uint32_t* out;
  } fields[] = {
      {"vocab_size", &s.vocab_size}, {"dim", &s.dim},           {"n_layers", &s.n_layers}, {"n_heads", &s.n_heads},
      {"n_kv_heads", &s.n_kv_heads}, {"head_dim", &s.head_dim}, {"ffn_dim", &s.ffn_dim}};
  for (const Field& fl : fields) {
    const std::regex re(std::string("constexpr\\s+uint32_t\\s+") + fl.key + "\\s*=\\s*([0-9]+)");
    std::smatch m;
    if (!std::regex_search(text, m, re)) {
      error = name + ": no '" + fl.key + "' (expected a header written by keel convert --header)";
      return false;
    }
    // More digits than the largest value allowed has (8) is out of range, however many.
    const std::string digits = m[1].str();
    const unsigned long v = digits.size() > 8 ? ~0ul : std::stoul(digits);
    if (v == 0 || v > (1u << 24)) {
      error = name + ": " + fl.key + " = " + m[1].str() + "; expected 1.." + std::to_string(1u << 24);
      return false;
    }
    *fl.out = uint32_t(v);
  }
  // A header of a model with sliding-window layers (Gemma 3) does not say which layers those are
  // or which norms the blocks have: such a model is emulated from its .keel file.
  std::smatch local;
  if (std::regex_search(text, local, std::regex("constexpr\\s+uint32_t\\s+local_layers\\s*=\\s*([0-9]+)")) &&
      local[1].str().find_first_not_of('0') != std::string::npos) {
    error = name + ": a model with " + local[1].str() +
            " sliding-window layers (Gemma 3); its header does not describe them: use -m MODEL.keel";
    return false;
  }
  if (s.n_layers > kMaxLayers) {
    error = name + ": n_layers = " + std::to_string(s.n_layers) + "; the emulator takes at most " +
            std::to_string(kMaxLayers);
    return false;
  }
  if (s.n_heads % s.n_kv_heads != 0) {
    error = name + ": n_heads " + std::to_string(s.n_heads) + " is not a multiple of n_kv_heads " +
            std::to_string(s.n_kv_heads);
    return false;
  }
  return true;
}

}  // namespace keel::cli
