// keel emulate: the dataflow backend's schedule and cost model for a model or a shape on an
// emulated accelerator (docs/emulator.md): per-op cycles, off-chip traffic, SRAM use, the token
// rate, the smallest SRAM that keeps the KV cache on chip, and executed counters against the
// analytic ones.
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/dataflow_backend.h"
#include "emulate/cost_model.h"
#include "emulate/hw_json.h"
#include "keel/emulate/calibrate.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "keel/emulate/emulate_model.h"
#include "keel/emulate/host_validate.h"
#include "keel/emulate/png_plot.h"
#include "keel/cli/session.h"
#include "kv/kv_policy.h"
#include "llm/run_config.h"

namespace keel::cli {
namespace {

using nlohmann::json;

const char kHelpHead[] =
    "usage: keel emulate (-m MODEL.keel | --shape SHAPE) --hw NAME|FILE [options]\n"
    "       keel emulate --list-hw\n"
    "       keel emulate --calibrate [-t N]\n"
    "       keel emulate --validate -m MODEL.keel [--hw FILE] [--reps N] [--context N] [--json]\n"
    "       keel emulate --validate --measured FILE.json -m MODEL.keel [--hw FILE] [--json]\n"
    "\n"
    "Predicts what a model does on an emulated dataflow accelerator (docs/emulator.md): the static\n"
    "schedule (tiles, SRAM offsets, what stays on chip), and per decode token the cycles of every\n"
    "op class for compute, SRAM and each off-chip tier, the bytes that cross the off-chip bus and\n"
    "the token rate. Analytic: the schedule is walked without arithmetic, so shapes too large to\n"
    "run here work. --execute also runs the model through the dataflow backend and checks that the\n"
    "counters of the executed decode token equal the analytic ones (under rocketkv, whose entries\n"
    "gathered depend on the scores: attention and page selection at most their bound).\n"
    "\n"
    "options:\n";
const char kHelpTail[] =
    "  Defaults: --kv-policy full, --kv-budget 1024, --chunk 64.\n"
    "\n"
    "model options, as for run: the KV ones (--sinks, --obs-window, --snap-kernel, --rocket-*, ...)\n"
    "shape the prediction as they shape a run, with the model's own defaults under -m (the llama\n"
    "family's under --shape); the emulator models an f16 KV cache only:\n"
    "%s";

bool parse_dtype(const std::string& s, fb::DType& t) {
  static const struct {
    const char* name;
    fb::DType t;
  } kTypes[] = {{"q4", fb::DType::Q4},   {"q4m", fb::DType::Q4M},   {"q5", fb::DType::Q5},   {"q5m", fb::DType::Q5M},
                {"q4k", fb::DType::Q4K}, {"q5k", fb::DType::Q5K},   {"q6k", fb::DType::Q6K}, {"q8", fb::DType::Q8},
                {"f16", fb::DType::F16}, {"bf16", fb::DType::BF16}, {"f32", fb::DType::F32}};
  for (const auto& k : kTypes)
    if (s == k.name) return t = k.t, true;
  return false;
}

struct EmulateOptions {
  std::string shape_name, dtype_name = "bf16", schedule_path, plot_path, measured_path;
  uint32_t slots = 1, context = 4096, prompt = 0, reps = 3;
  bool list = false, calibrate = false, json = false, sweep = false, execute = false, validate = false;
  bool reps_given = false, refit = false, dtype_given = false, context_given = false;
};

const OptionSpec<EmulateOptions> kEmulateOptions[] = {
    {.long_name = "--shape",
     .metavar = "SHAPE",
     .help = "a built-in shape (llama-3.1-8b, smollm2-135m) or a header written by\n"
             "keel convert --header, instead of -m",
     .field = &EmulateOptions::shape_name},
    {.long_name = "--weight-dtype",
     .metavar = "T",
     .help = "weights of a --shape: q4 | q4m | q5 | q5m | q4k | q5k | q6k | q8 | f16 |\n"
             "  bf16 | f32 (default bf16); bytes as docs/format.md lays them out",
     .field = &EmulateOptions::dtype_name,
     .given = &EmulateOptions::dtype_given},
    {.long_name = "--slots",
     .metavar = "N",
     .help = "sequences whose KV caches share the chip (default 1)",
     .kind = OptionKind::U32,
     .field = &EmulateOptions::slots},
    {.long_name = "--context",
     .metavar = "N",
     .help = "tokens of history at the decode token (default 4096)",
     .kind = OptionKind::U32,
     .field = &EmulateOptions::context,
     .given = &EmulateOptions::context_given},
    {.long_name = "--prompt-tokens",
     .metavar = "N",
     .help = "also predict the prefill of an N-token prompt (default 0)",
     .kind = OptionKind::U32,
     .field = &EmulateOptions::prompt},
    {.long_name = "--json",
     .help = "one JSON document: tokens_per_second, cycles_per_token,\n"
             "offchip_bytes_per_token, sram_capacity_bytes, sram_peak_bytes,\n"
             "kv_onchip_bytes, kv_offchip_bytes, fits, schedule, ops[] (op, calls,\n"
             "cycles, share, compute/sram/offchip/latency/cache/overhead/stall\n"
             "cycles, offchip_bytes, sram_bytes, bound), prefill, sweep_sram,\n"
             "executed",
     .kind = OptionKind::Flag,
     .field = &EmulateOptions::json},
    {.long_name = "--schedule",
     .metavar = "FILE",
     .help = "write the static schedule as JSON (buffers, tiles, transfers)",
     .field = &EmulateOptions::schedule_path},
    {.long_name = "--sweep-sram",
     .help = "find the smallest SRAM with no KV spill and its token rate",
     .kind = OptionKind::Flag,
     .field = &EmulateOptions::sweep},
    {.long_name = "--plot",
     .metavar = "FILE.png",
     .help = "on-chip KV bytes against context for full and the bounded policies",
     .field = &EmulateOptions::plot_path},
    {.long_name = "--execute",
     .help = "with -m: run the dataflow backend over --context tokens and one\n"
             "decode token in the first of --slots sequences (the schedule holds\n"
             "them all); compare the counters of the prompt's last chunk (with a\n"
             "bounded policy's SnapKV scoring) and of the decode token with the\n"
             "analytic ones",
     .kind = OptionKind::Flag,
     .field = &EmulateOptions::execute},
    {.long_name = "--list-hw",
     .help = "list the hardware presets",
     .kind = OptionKind::Flag,
     .field = &EmulateOptions::list},
    {.long_name = "--calibrate",
     .help = "measure this machine and write the `host` description",
     .kind = OptionKind::Flag,
     .field = &EmulateOptions::calibrate},
    {.long_name = "--validate",
     .help = "the host preset against the native backend on one thread: measures\n"
             "prefill (one 64-token chunk) and decode per token end to end and op\n"
             "class by op class at depths 0, 512, 1024, 2048, 4096, 6144 (full)\n"
             "and 4096, --context (snapstream, budgets 1024 and 4096; default\n"
             "--context 32768); fits the rates of --hw (default host) on depths\n"
             "512, 2048, 6144 and snapstream at 4096 and prints the error on the\n"
             "others",
     .kind = OptionKind::Flag,
     .field = &EmulateOptions::validate},
    {.long_name = "--reps",
     .metavar = "N",
     .help = "--validate: repetitions, alternating; medians (default 3)",
     .kind = OptionKind::U32,
     .field = &EmulateOptions::reps,
     .given = &EmulateOptions::reps_given},
    {.long_name = "--measured",
     .metavar = "FILE.json",
     .help = "--validate without measuring: counters, fit and report again from a\n"
             "previous --validate --json output of the same model (refused when it\n"
             "is another model's or another shape set); a file that does not record\n"
             "its start description starts from --hw (default: the start_hw it\n"
             "names)",
     .field = &EmulateOptions::measured_path,
     .given = &EmulateOptions::refit},
};

uint64_t offchip(const DfCounters& c) { return c.tier_bytes[0] + c.tier_bytes[1]; }

json counters_json(const DfCounters& c) {
  return {{"calls", c.calls},
          {"macs_int8", c.macs_int8},
          {"macs_bf16", c.macs_bf16},
          {"macs_f32", c.macs_f32},
          {"vector_elems", c.vector_elems},
          {"weight_elems", c.weight_elems},
          {"sram_bytes", c.sram_bytes},
          {"tier0_bytes", c.tier_bytes[0]},
          {"tier1_bytes", c.tier_bytes[1]},
          {"tier0_transfers", c.tier_transfers[0]},
          {"tier1_transfers", c.tier_transfers[1]}};
}

json sparse_json(const DfSparseDecode& d, const SparseSplit& split) {
  return {{"sparse_budget", split.budget}, {"topk", split.topk},
          {"page_tokens", split.page},     {"dims", d.select.dims},
          {"pages", d.select.pages},       {"frames", d.select.frames},
          {"gathered_tokens", d.gathered}, {"head_ranking", d.select.head_ranking}};
}

std::string split_text(const SparseSplit& s) {
  return "budget " + std::to_string(s.budget) + ", top-k " + std::to_string(s.topk) + ", page " +
         std::to_string(s.page) + ", dims " + std::to_string(s.dims) + ", pages " + std::to_string(s.max_pages) +
         ", gather rows " + std::to_string(s.gather_rows) + ", select " +
         (s.select == RocketSelect::Group ? "group" : "head");
}

json ops_json(const DfCounterSet& set, const HwDesc& hw, bool dbl, double total, const DfReuse& reuse) {
  json ops = json::array();
  for (uint32_t i = 0; i < kDfOps; ++i) {
    const DfCounters& c = set.op[i];
    if (c.calls == 0 && c.vector_elems == 0) continue;
    const DfCost k = df_cost(c, hw, dbl, DfOp(i), reuse);
    ops.push_back({{"op", df_op_name(DfOp(i))},
                   {"calls", c.calls},
                   {"cycles", k.total_cycles},
                   {"share", total > 0 ? k.total_cycles / total : 0},
                   {"compute_cycles", k.compute_cycles},
                   {"sram_cycles", k.sram_cycles},
                   {"offchip_cycles", {k.tier_cycles[0], k.tier_cycles[1]}},
                   {"latency_cycles", k.latency_cycles},
                   {"cache_cycles", k.cache_cycles},
                   {"overhead_cycles", k.overhead_cycles},
                   {"stall_cycles", k.stall_cycles},
                   {"offchip_bytes", offchip(c)},
                   {"sram_bytes", c.sram_bytes},
                   {"bound", df_bound_name(k.bound)},
                   {"counters", counters_json(c)}});
  }
  return ops;
}

json schedule_json(const DfSchedule& s, const EmuConfig& c) {
  json buffers = json::array();
  for (uint32_t b = 0; b < kDfBufs; ++b) {
    if (s.bytes[b] == 0) continue;
    buffers.push_back({{"name", df_buf_name(DfBuf(b))}, {"offset", s.offset[b]}, {"bytes", s.bytes[b]}});
  }
  const ModelShape& m = c.model.shape;
  const uint32_t q_dim = m.n_heads * m.head_dim, kv_dim = m.n_kv_heads * m.head_dim;
  struct Mat {
    const char* name;
    fb::DType t;
    uint32_t rows, cols;
  } mats[] = {{"wq", c.model.dtype(0, DfMat::Wq), q_dim, m.dim},
              {"wk", c.model.dtype(0, DfMat::Wk), kv_dim, m.dim},
              {"wv", c.model.dtype(0, DfMat::Wv), kv_dim, m.dim},
              {"wo", c.model.dtype(0, DfMat::Wo), m.dim, q_dim},
              {"gate", c.model.dtype(0, DfMat::Gate), m.ffn_dim, m.dim},
              {"up", c.model.dtype(0, DfMat::Up), m.ffn_dim, m.dim},
              {"down", c.model.dtype(0, DfMat::Down), m.dim, m.ffn_dim},
              {"lm_head", c.model.lm_head_dtype, m.vocab_size, m.dim}};
  const char* wsrc = s.weights_onchip ? "sram" : c.hw.tiers[s.weight_tier].name;
  const char* kvsrc = s.kv_onchip ? "sram" : c.hw.tiers[s.kv_tier].name;
  json transfers = json::array();
  for (const Mat& w : mats) {
    const uint32_t panels = (w.rows + kPanelRows - 1) / kPanelRows;
    const uint32_t tiles = (panels + s.tile_panels - 1) / s.tile_panels;
    const uint32_t tile_rows = s.tile_panels * kPanelRows < w.rows ? s.tile_panels * kPanelRows : w.rows;
    transfers.push_back({{"op", w.name},
                         {"what", "weight tile"},
                         {"from", wsrc},
                         {"to", "weight_tile0/1"},
                         {"rows", w.rows},
                         {"cols", w.cols},
                         {"tile_rows", tile_rows},
                         {"tile_bytes", df_weight_rows_bytes(w.t, tile_rows, w.cols)},  // layer 0's format
                         {"tiles", tiles},
                         {"per", std::string(w.name) == "lm_head" ? "forward pass" : "layer"}});
  }
  transfers.push_back({{"op", "attention"},
                       {"what", "key tile, then value tile"},
                       {"from", kvsrc},
                       {"to", "kv_tile0/1"},
                       {"tile_tokens", s.kv_tile_tokens},
                       {"tile_bytes", uint64_t(s.kv_tile_tokens) * m.head_dim * 2},
                       {"per", "layer, KV head and block of q_block tokens: ceil(cached / tile_tokens) of each"}});
  transfers.push_back({{"op", "kv_write"},
                       {"what", "new key or value row (f16)"},
                       {"from", "activations"},
                       {"to", kvsrc},
                       {"tile_bytes", uint64_t(m.head_dim) * 2},
                       {"per", "layer, KV head, token"}});
  return {{"hw", c.hw.name},
          {"fits", s.fits},
          {"refusal", s.fits ? "" : s.refusal},
          {"kv_capacity_tokens", s.kv_capacity_tokens},
          {"slots", s.slots},
          {"chunk_tokens", s.chunk_tokens},
          {"kv_onchip", s.kv_onchip},
          {"weights_onchip", s.weights_onchip},
          {"double_buffered", s.double_buffered},
          {"serial", c.hw.serial},
          {"weight_tier", s.weights_onchip ? "sram" : c.hw.tiers[s.weight_tier].name},
          {"kv_tier", kvsrc},
          {"tile_panels", s.tile_panels},
          {"tile_rows", s.tile_panels * kPanelRows},
          {"kv_tile_tokens", s.kv_tile_tokens},
          {"q_block", s.q_block},
          {"kv_total_bytes", s.kv_total_bytes},
          {"kv_summary_bytes", s.kv_summary_bytes},
          {"weight_bytes", s.weight_bytes},
          {"sram_capacity_bytes", s.sram_bytes},
          {"sram_peak_bytes", s.peak_bytes},
          {"buffers", buffers},
          {"transfers", transfers}};
}

// Smallest SRAM whose schedule keeps every slot's KV cache on chip (0 if none below 1 PiB).
uint64_t sweep_sram(EmuConfig c) {
  uint64_t lo = 1, hi = 1ull << 50;
  auto ok = [&](uint64_t bytes) {
    c.hw.sram_bytes = bytes;
    const DfSchedule s = emu_schedule(c);
    return s.fits && s.kv_onchip;
  };
  if (!ok(hi)) return 0;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (ok(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

std::string fmt_num(double v) {
  char b[32];
  if (v >= 1e9)
    snprintf(b, sizeof b, "%.3gG", v / 1e9);
  else if (v >= 1e6)
    snprintf(b, sizeof b, "%.3gM", v / 1e6);
  else if (v >= 1e3)
    snprintf(b, sizeof b, "%.3gk", v / 1e3);
  else
    snprintf(b, sizeof b, "%.3g", v);
  return b;
}

void print_table(const DfCounterSet& set, const HwDesc& hw, bool dbl, double total, const DfReuse& reuse,
                 const char* title) {
  printf("%s\n", title);
  printf("  %-13s %8s %10s %6s %12s %12s  %s\n", "op", "calls", "cycles", "share", "offchip B", "sram B", "bound");
  for (uint32_t i = 0; i < kDfOps; ++i) {
    const DfCounters& c = set.op[i];
    if (c.calls == 0 && c.vector_elems == 0) continue;
    const DfCost k = df_cost(c, hw, dbl, DfOp(i), reuse);
    printf("  %-13s %8" PRIu64 " %10s %5.1f%% %12s %12s  %s\n", df_op_name(DfOp(i)), c.calls,
           fmt_num(k.total_cycles).c_str(), total > 0 ? 100 * k.total_cycles / total : 0,
           fmt_num(double(offchip(c))).c_str(), fmt_num(double(c.sram_bytes)).c_str(), df_bound_name(k.bound));
  }
}

int list_hw() {
  for (const hw::Preset& p : hw::presets()) printf("%-16s %s\n", p.name, p.summary);
  const std::string host = hw::host_hw_path();
  std::ifstream f(host);
  printf("%-16s this machine, measured by keel emulate --calibrate (%s: %s)\n", "host", host.c_str(),
         f ? "present" : "not yet written");
  return 0;
}

}  // namespace

int cmd_emulate(int argc, char** argv) {
  SessionOptions so;
  // kHelpHead + the command's table + kHelpTail is a printf format whose one %s is the session's
  // help; the table's text is never a format.
  const std::string help = kHelpHead + printf_literal(render_help(kEmulateOptions)) + kHelpTail;
  CommandLine cl("emulate", argc, argv, help.c_str(), &so);
  if (cl.help_shown()) return 0;
  EmulateOptions eo;
  std::string no_checks;  // every value of these options' types is one emulate reads on
  parse_options(cl.args, kEmulateOptions, eo, no_checks);
  const std::string &shape_name = eo.shape_name, &schedule_path = eo.schedule_path, &plot_path = eo.plot_path;
  const std::string &dtype_name = eo.dtype_name, &measured_path = eo.measured_path;
  uint32_t slots = eo.slots, context = eo.context, prompt = eo.prompt, reps = eo.reps;
  const bool list = eo.list, calibrate = eo.calibrate, as_json = eo.json, sweep = eo.sweep, execute = eo.execute;
  const bool validate = eo.validate, reps_given = eo.reps_given, refit = eo.refit, dtype_given = eo.dtype_given;
  const bool context_given = eo.context_given;
  if (!cl.finish()) return 2;
  if (list) return list_hw();
  if (calibrate) return run_calibrate(so.threads);
  if (refit && !validate) return usage_error("emulate", "--measured applies to --validate");
  if (validate) {
    if (so.model_path.empty()) return usage_error("emulate", "--validate needs -m MODEL.keel");
    if (refit) {
      if (reps_given || context_given)
        return usage_error("emulate", "--measured re-fits a measurement: --reps and --context do not apply");
      return run_validate_measured(so, so.hw, measured_path, as_json);
    }
    if (reps == 0) return usage_error("emulate", "--reps must be at least 1");
    if (context_given && context < 2 * 4096)
      return usage_error("emulate", "--validate needs --context of at least 8192");
    return run_validate(so, so.hw.empty() ? "host" : so.hw, reps, context_given ? context : 32768, as_json);
  }
  auto usage = [](const std::string& m) { return usage_error("emulate", m); };
  if (so.model_path.empty() == shape_name.empty()) return usage("give one of -m MODEL.keel or --shape SHAPE");
  if (so.hw.empty()) return usage("--hw NAME|FILE is required (keel emulate --list-hw)");
  if (so.backend != "auto" && so.backend != "dataflow") return usage("emulate runs the dataflow backend only");
  if (slots == 0 || context == 0) return usage("--slots and --context must be at least 1");
  if (execute && so.model_path.empty()) return usage("--execute needs -m MODEL.keel");
  if (dtype_given && shape_name.empty()) return usage("--weight-dtype applies to --shape only");
  if (!so.error.empty()) return usage(so.error);

  EmuConfig c;
  std::string error;
  if (!hw::load_hw(so.hw, c.hw, error)) return fail("emulate", error);
  if (so.sram_bytes) c.hw.sram_bytes = so.sram_bytes;
  KvPolicyKind policy = KvPolicyKind::Full;
  const std::string policy_name = so.kv_policy.empty() ? "full" : so.kv_policy;
  if (!parse_kv_policy(policy_name.c_str(), policy))
    return usage("--kv-policy expects " + kv_policy_choices() + ", got '" + policy_name + "'");
  c.bounded = policy != KvPolicyKind::Full;
  c.budget = so.kv_budget ? so.kv_budget : 1024;
  c.chunk = so.chunk ? so.chunk : 64;
  c.slots = slots;
  c.context = context;
  c.prompt = prompt;
  Session session;
  if (!shape_name.empty()) {
    fb::DType t;
    if (!parse_dtype(dtype_name, t))
      return usage("--weight-dtype expects q4, q4m, q5, q5m, q4k, q5k, q6k, q8, f16, bf16 or f32, got '" + dtype_name +
                   "'");
    if (!load_shape(shape_name, c.model.shape, error)) return fail("emulate", error);
    c.model.set_dtypes(t, t);
    c.model.lm_head_dtype = t;
  } else {
    if (!session.load(so, error)) return fail("emulate", error);
    c.model = df_model(session.model());
  }
  // The KV settings a run of this model with these options resolves (the model's kv_defaults and
  // its architecture's kernels under -m, the llama family's under --shape, the options on top),
  // so that the prediction is of the configuration --execute then runs.
  RuntimeConfig rc;
  {
    RunOverrides o;
    if (!session_overrides(so, policy, emu_budget(c), 1, o, error)) return usage(error);
    o.chunk_tokens = c.chunk;
    Error e;
    if (shape_name.empty()) {
      e = make_runtime_config(session.model(), o, &rc);
    } else {
      rc = resolve_runtime_config(architecture_run_defaults(fb::ArchFamily::Llama), o);
      e = validate_kv_policy(rc.kv, rc.plan.kv_budget_tokens, rc.plan.chunk_tokens);
    }
    if (!e.ok()) return fail("emulate", std::string(to_string(e.status())) + ": " + e.message());
  }
  if (rc.plan.kv_type != KvType::F16)
    return usage(std::string("the emulator models an f16 KV cache; --kv-type ") + kv_type_name(rc.plan.kv_type) +
                 " is not emulated");
  if (c.bounded && kv_policy_uses_snapkv(policy)) {
    const bool ring = kv_policy_is_snapstream_like(policy);
    c.snap_queries = rc.kv.obs_window;
    c.snap_ring = ring ? snapstream_window(rc.kv, c.budget) : 0;
    c.snap_sinks = ring ? rc.kv.sinks : 0;
    c.snap_kernel = snap_kernel_of(rc.kv);
  }
  if (c.bounded) c.sparse = sparse_split(rc.kv, c.budget, c.model.shape.head_dim, c.model.shape.head_dim * 2);

  const EmuResult r = emulate(c);
  const DfSchedule& s = r.schedule;
  if (!schedule_path.empty()) {
    std::ofstream f(schedule_path);
    f << schedule_json(s, c).dump(2) << "\n";
    if (!f) return fail("emulate", "cannot write " + schedule_path);
  }
  if (!plot_path.empty()) {
    if (!plot_kv_onchip(c, plot_path, error)) return fail("emulate", error);
  }
  json out;
  out["hw"] = c.hw.name;
  out["model"] = shape_name.empty() ? so.model_path : shape_name;
  out["kv_policy"] = policy_name;
  out["kv_budget"] = emu_budget(c);
  out["slots"] = c.slots;
  out["context"] = c.context;
  out["chunk"] = c.chunk;
  if (c.snap_queries > 0)
    out["snapkv"] = {
        {"obs_window", c.snap_queries}, {"kernel", c.snap_kernel}, {"sinks", c.snap_sinks}, {"ring", c.snap_ring}};
  out["fits"] = s.fits;
  out["sram_capacity_bytes"] = c.hw.sram_bytes;
  out["sram_peak_bytes"] = s.fits ? s.peak_bytes : 0;
  out["kv_onchip_bytes"] = s.kv_onchip ? s.kv_total_bytes : 0;
  out["kv_offchip_bytes"] = s.kv_onchip ? 0 : s.kv_total_bytes;
  out["schedule"] = schedule_json(s, c);
  if (!s.fits) {
    if (as_json) {
      out["error"] = s.refusal;
      printf("%s\n", out.dump().c_str());
    } else {
      fprintf(stderr, "keel emulate: does not fit '%s': %s\n", c.hw.name, s.refusal);
    }
    return 1;
  }
  const DfCounters dec = r.decode.total();
  out["cycles_per_token"] = r.decode_cycles;
  out["tokens_per_second"] = c.hw.clock_hz / r.decode_cycles;
  out["offchip_bytes_per_token"] = offchip(dec);
  out["sram_bytes_per_token"] = dec.sram_bytes;
  out["decode_cached_tokens"] = r.decode_cached;
  if (c.model.local_layers() > 0) out["decode_local_cached_tokens"] = r.decode_local_cached;
  if (r.decode_sparse) out["decode_sparse_bound"] = sparse_json(r.decode_sparse_bound, c.sparse);
  out["ops"] = ops_json(r.decode, c.hw, s.double_buffered, r.decode_cycles, r.decode_reuse);
  if (c.prompt > 0) {
    out["prefill"] = {{"tokens", c.prompt},
                      {"cycles_per_token", r.prefill_cycles / c.prompt},
                      {"tokens_per_second", c.hw.clock_hz * c.prompt / r.prefill_cycles},
                      {"offchip_bytes_per_token", double(offchip(r.prefill.total())) / c.prompt},
                      {"ops", ops_json(r.prefill, c.hw, s.double_buffered, r.prefill_cycles, r.prefill_reuse)}};
  }
  uint64_t sweep_bytes = 0;
  if (sweep) {
    sweep_bytes = sweep_sram(c);
    json sw = {{"min_sram_bytes_no_kv_spill", sweep_bytes}};
    if (sweep_bytes) {
      EmuConfig at = c;
      at.hw.sram_bytes = sweep_bytes;
      const EmuResult ra = emulate(at);
      sw["tokens_per_second"] = c.hw.clock_hz / ra.decode_cycles;
      sw["offchip_bytes_per_token"] = offchip(ra.decode.total());
    }
    out["sweep_sram"] = sw;
  }
  bool executed_equal = true, executed_within = true;
  if (execute) {
    so.backend = "dataflow";
    so.threads = so.threads ? so.threads : 1;
    Session run;
    SessionOptions ro = so;
    ro.kv_policy = policy_name;
    ro.chunk = c.chunk;
    ro.slots = c.slots;  // the schedule places every slot's cache; slot 0 runs
    if (!run.load(ro, error) || !run.resolve_policy(nullptr, error) || !run.start(emu_budget(c), error))
      return fail("emulate", error);
    Runtime& rt = run.runtime();
    const auto& be = static_cast<const DataflowBackend&>(rt.backend());
    const uint32_t vocab = rt.model().shape().vocab_size;
    std::vector<int32_t> ids(c.context);
    for (uint32_t i = 0; i < c.context; ++i) ids[i] = int32_t((uint64_t(i) * 7919 + 13) % vocab);
    // The prompt's last chunk alone, so that its counters (a bounded policy's SnapKV scoring
    // too) are checked against the analytic walk of that chunk.
    const uint32_t last = c.context < c.chunk ? c.context : c.chunk;
    Error e;
    if (ids.size() > last) e = rt.prefill(0, Span<const int32_t>(ids.data(), ids.size() - last));
    if (!e.ok()) return fail("emulate", std::string(to_string(e.status())) + ": " + e.message());
    DfCounterSet chunk_analytic;
    {
      const KvCache& kv = rt.kv_cache(0);
      df_count_forward(s, c.model,
                       DfPass{.n = last,
                              .visible = kv.visible(),
                              .prefix = kv.index_rotated(),
                              .local_visible = rt.local_kv_cache(0).visible(),
                              .n_logits = 1},
                       chunk_analytic);
      const SnapCompression j = emu_snap_compression(rt, last);
      if (j.queries > 0) df_count_snap_compression(s, c.model, j, chunk_analytic);
    }
    const DfCounterSet chunk_before = be.counters();
    e = rt.prefill(0, Span<const int32_t>(ids.data() + ids.size() - last, last));
    if (!e.ok()) return fail("emulate", std::string(to_string(e.status())) + ": " + e.message());
    bool chunk_equal = true;
    for (uint32_t i = 0; i < kDfOps; ++i) {
      DfCounters d = be.counters().op[i];
      d.subtract(chunk_before.op[i]);
      chunk_equal = chunk_equal && d == chunk_analytic.op[i];
    }
    executed_equal = chunk_equal;
    // The decode token against the prediction's walk: the prediction resolved the configuration
    // the session runs (session_overrides), so their sparse splits must agree.
    const SparseSplit ran = c.bounded ? rt.memory_plan().sparse : SparseSplit{};
    if (ran != c.sparse)
      return fail("emulate", "the session runs the sparse split (" + split_text(ran) + ") but the prediction walked (" +
                                 split_text(c.sparse) + ")");
    const DfCounterSet before = be.counters();
    const uint32_t cached_before = rt.kv_cache(0).visible();
    e = rt.decode(0, ids[0]);
    if (!e.ok()) return fail("emulate", std::string(to_string(e.status())) + ": " + e.message());
    executed_within = chunk_equal;
    DfCounterSet measured = be.counters();
    json ex = json::array();
    for (uint32_t i = 0; i < kDfOps; ++i) {
      DfCounters& m = measured.op[i];
      m.subtract(before.op[i]);
      // A decode token's SnapKV compression (snapkv's recompression) is not walked analytically;
      // a prompt chunk's is (checked above).
      if (DfOp(i) == DfOp::KvPolicy || DfOp(i) == DfOp::KvCompact) continue;
      const bool same = m == r.decode.op[i];
      // Which entries a sparse decode step gathers depends on the scores: its attention and page
      // selection are walked at their bound.
      const bool bounded = r.decode_sparse && (DfOp(i) == DfOp::Attention || DfOp(i) == DfOp::KvSelect);
      const bool within = same || (bounded && m.within(r.decode.op[i]));
      executed_equal = executed_equal && same;
      executed_within = executed_within && within;
      json op = {{"op", df_op_name(DfOp(i))}, {"equal", same}, {"executed", counters_json(m)}};
      if (bounded) op["within_bound"] = within, op["bound"] = counters_json(r.decode.op[i]);
      ex.push_back(op);
    }
    out["executed"] = {
        {"cached_tokens", cached_before},
        {"counters_equal_analytic", executed_equal},
        {"counters_within_analytic_bound", executed_within},
        {"prompt_chunk_equal_analytic", chunk_equal},
        {"prompt_chunk_kv_policy_counters", counters_json(chunk_analytic.op[uint32_t(DfOp::KvPolicy)])},
        {"prompt_chunk_kv_compact_counters", counters_json(chunk_analytic.op[uint32_t(DfOp::KvCompact)])},
        {"kv_policy_counters", counters_json(measured.op[uint32_t(DfOp::KvPolicy)])},
        {"kv_compact_counters", counters_json(measured.op[uint32_t(DfOp::KvCompact)])},
        {"ops", ex}};
  }

  if (as_json) {
    printf("%s\n", out.dump().c_str());
    return executed_within ? 0 : 1;
  }
  printf("%s on %s: KV %s, budget %u, %u slot(s), decode at %u cached tokens\n",
         out["model"].get<std::string>().c_str(), c.hw.name, policy_name.c_str(), emu_budget(c), c.slots,
         r.decode_cached);
  if (c.snap_queries > 0)
    printf("SnapKV scoring: %u observation queries, pool kernel %u%s, %u sinks, recent ring %u\n", c.snap_queries,
           c.snap_kernel, c.snap_kernel == 0 ? " (adaptive)" : "", c.snap_sinks, c.snap_ring);
  printf("schedule: SRAM %s of %s used; KV %s (%s), weights %s (%s); tiles %u rows, %u keys, %u queries%s\n",
         human_bytes(s.peak_bytes).c_str(), human_bytes(c.hw.sram_bytes).c_str(), s.kv_onchip ? "on chip" : "off chip",
         human_bytes(s.kv_total_bytes).c_str(), s.weights_onchip ? "on chip" : "streamed",
         human_bytes(s.weight_bytes).c_str(), s.tile_panels * kPanelRows, s.kv_tile_tokens, s.q_block,
         s.double_buffered ? (c.hw.serial ? ", double-buffered (serial hardware: costs add up)" : ", double-buffered")
                           : "");
  print_table(r.decode, c.hw, s.double_buffered, r.decode_cycles, r.decode_reuse, "decode token:");
  printf("  total: %s cycles/token, %.2f tokens/s, %s off-chip bytes/token\n", fmt_num(r.decode_cycles).c_str(),
         c.hw.clock_hz / r.decode_cycles, human_bytes(offchip(dec)).c_str());
  if (c.prompt > 0) {
    print_table(r.prefill, c.hw, s.double_buffered, r.prefill_cycles, r.prefill_reuse, "prefill:");
    printf("  total: %.2f tokens/s over %u prompt tokens\n", c.hw.clock_hz * c.prompt / r.prefill_cycles, c.prompt);
  }
  if (sweep) {
    if (sweep_bytes)
      printf("smallest SRAM with no KV spill: %s (%" PRIu64 " bytes), %.2f tokens/s there\n",
             human_bytes(sweep_bytes).c_str(), sweep_bytes, out["sweep_sram"]["tokens_per_second"].get<double>());
    else
      printf("no SRAM below 1 PiB keeps this KV cache on chip\n");
  }
  if (execute) {
    if (executed_equal || !r.decode_sparse || !executed_within) {
      printf("executed decode token: counters %s the analytic ones\n", executed_equal ? "equal" : "DIFFER from");
    } else {
      printf(
          "executed decode token: counters equal the analytic ones; attention and kv_select within their sparse "
          "bound\n");
    }
  }
  return executed_within ? 0 : 1;
}

}  // namespace keel::cli
