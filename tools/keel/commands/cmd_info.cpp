// keel info: what a .keel file holds and what it needs in memory.
#include <cstdio>
#include <map>
#include <string>

#include "keel/cli/args.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "llm/plan.h"
#include "llm/plan_model.h"
#include "llm/run_config.h"
#include "model/model.h"
#include "ports/linux/mapped_file.h"

namespace keel::cli {
namespace {

const char kHelpHead[] =
    "usage: keel info MODEL.keel [--json] [--kv-policy P] [--kv-budget N] [--kv-type T] [--slots N]\n"
    "                 [--chunk N] [--threads N] [--snap-hold N]\n"
    "\n"
    "Verifies a .keel file and prints its hyper-parameters, tensor summary, tokenizer summary,\n"
    "what a run uses when given no options (\"run\": KV policy, budget, sinks, window,\n"
    "observation window, kernel and chunk, from the file's KV defaults, else the engine's) and\n"
    "the memory plan: weights (mapped, read-only), persistent arena (KV cache, tokenizer tables,\n"
    "logits) and scratch arena (one prefill chunk), in bytes. For a model with sliding-window\n"
    "layers (Gemma 3) the KV cache is shown by layer kind: global layers hold the policy's budget,\n"
    "local layers a ring of their window, beside what one budget for every layer would take.\n"
    "\"kernels\" names the kernel tier the native backend runs on this CPU (x86: avx2,\n"
    "avx512vnni; arm64: neon, neon-dotprod, neon-i8mm).\n"
    "\n"
    "options:\n";
const char kHelpTail[] =
    "\n"
    "Exit status 0 when the file verifies, 1 with a one-line error when it does not.\n";

struct InfoOptions {
  std::string policy;
  bool has_policy = false;
  KvType kv_type = KvType::F16;
  uint32_t budget = 0, slots = 0, chunk = 0, threads = 1;  // 0: not given
  int32_t hold = 0;                                        // RunOverrides::hold: 0 not given, -1 none
  bool json = false;
};

bool store_kv_type(const std::string& v, InfoOptions& o) { return parse_kv_type(v.c_str(), o.kv_type); }

const std::string kPolicyHelp =
    kv_policy_choices(true, NameList::Help) + ": the policy\nplanned for (default: the run default)";

const OptionSpec<InfoOptions> kInfoOptions[] = {
    {.long_name = "--kv-policy",
     .metavar = "P",
     .help = kPolicyHelp.c_str(),
     .field = &InfoOptions::policy,
     .given = &InfoOptions::has_policy},
    {.long_name = "--kv-budget",
     .metavar = "N",
     .help = "KV budget in tokens for the plan (default: the run default)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &InfoOptions::budget},
    {.long_name = "--kv-type",
     .metavar = "T",
     .help = "f16 | q8 | q4: how the plan's KV cache stores keys and values\n(default f16)",
     .kind = OptionKind::Custom,
     .store = store_kv_type,
     .expects = "f16, q8 or q4"},
    {.long_name = "--slots",
     .metavar = "N",
     .help = "concurrent sequences (default: the file's plan, usually 1)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &InfoOptions::slots},
    {.long_name = "--chunk",
     .metavar = "N",
     .help = "prefill chunk in tokens (default: the run default)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &InfoOptions::chunk},
    {.long_name = "--threads",
     .short_name = "-t",
     .metavar = "N",
     .help = "worker threads (default 1)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &InfoOptions::threads},
    {.long_name = "--snap-hold",
     .metavar = "N",
     .help = "snapstream, rocketkv: the hold's entries per layer and KV head; 0 =\n"
             "none (default: the recent window for snapstream, 0 for rocketkv;\n"
             "docs/kv.md)",
     .kind = OptionKind::ZeroIsNone,
     .field = &InfoOptions::hold},
    {.long_name = "--json", .help = "machine-readable output", .kind = OptionKind::Flag, .field = &InfoOptions::json},
};

const char* rope_style_name(fb::RopeStyle s) { return s == fb::RopeStyle::Halves ? "halves" : "interleaved"; }
const char* scaling_name(fb::RopeScalingKind k) {
  return k == fb::RopeScalingKind::Llama3 ? "llama3" : k == fb::RopeScalingKind::Linear ? "linear" : "none";
}
const char* tokenizer_kind_name(fb::TokenizerKind k) {
  return k == fb::TokenizerKind::ByteLevelBpe ? "byte-level-bpe" : "sentencepiece-bpe";
}

}  // namespace

int cmd_info(int argc, char** argv) {
  const std::string help = kHelpHead + render_help(kInfoOptions) + kHelpTail;
  CommandLine cl("info", argc, argv, help.c_str());
  if (cl.help_shown()) return 0;
  InfoOptions io;
  std::string check_error;
  parse_options(cl.args, kInfoOptions, io, check_error);
  if (!cl.finish(1, "one MODEL.keel")) return 2;
  const std::vector<std::string>& pos = cl.positionals;
  if (!check_error.empty()) return usage_error("info", check_error);
  KvPolicyKind policy_kind = KvPolicyKind::Full;
  if (io.has_policy && !parse_kv_policy(io.policy.c_str(), policy_kind)) {
    return usage_error("info", "--kv-policy expects " + kv_policy_choices() + ", got '" + io.policy + "'");
  }
  const bool json = io.json, has_policy = io.has_policy;

  port::MappedFile file;
  std::string error;
  if (!file.open(pos[0], error)) return fail("info", error);
  Model model;
  const Error err = model.load(Span<const uint8_t>(file.data(), file.size()));
  if (!err.ok()) return fail("info", pos[0] + ": " + to_string(err.status()) + ": " + err.message());

  const fb::Model* m = model.meta();
  const ModelShape& s = model.shape();
  const fb::Hyper* h = m->hyper();
  const fb::Tokenizer* tok = m->tokenizer();
  const fb::MemoryPlan* fp = m->memory_plan();
  const fb::KvDefaults* kv = m->kv_defaults();

  // What `keel run` (and keel_init with a zeroed keel_config) uses; the plan below for it, with
  // this command's options on top.
  const RuntimeConfig run = default_runtime_config(model);
  RunOverrides o;
  o.kv_budget_tokens = io.budget;
  o.slots = io.slots ? io.slots : (fp && fp->slots() ? fp->slots() : 1);
  o.chunk_tokens = io.chunk;
  o.threads = io.threads;
  o.kv_type = uint32_t(io.kv_type);
  o.kv_policy = has_policy ? run_policy(policy_kind) : 0;
  o.hold = io.hold;
  const RuntimeConfig planned = resolve_runtime_config(model_run_defaults(model), o);
  const PlanConfig& pc = planned.plan;
  const PlanShape shape = plan_shape(model);
  const MemoryPlan plan = plan_memory(shape, pc, planned.kv);
  // By layer kind (models with sliding-window layers), and the cache one budget for every layer
  // would take (what the plan gave Gemma 3 before local layers had rings of their own).
  const uint32_t local_layers = shape.local_layers, global_layers = shape.n_layers - shape.local_layers;
  const uint64_t kv_local_bytes = plan.kv_local_bytes, kv_global_bytes = plan.kv_bytes - plan.kv_local_bytes;
  PlanShape uniform_shape = shape;
  uniform_shape.local_layers = 0;
  const uint64_t kv_uniform_bytes = plan_memory(uniform_shape, pc, planned.kv).kv_bytes;
  // The SnapKV hold (docs/kv.md): entries the lookahead evicted, out of attention's sight.
  const uint64_t kv_hold_bytes =
      plan.region_bytes(Region::KvHoldKeysValues) + plan.region_bytes(Region::KvHoldPositions);
  const uint32_t run_budget = run.plan.kv_budget_tokens;
  const uint32_t run_window = snapstream_window(run.kv, run_budget);

  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (count, bytes)
  for (const fb::Tensor* t : *m->tensors()) {
    auto& e = by_dtype[fb::EnumNameDType(t->dtype())];
    e.first += 1;
    e.second += t->size();
  }
  const uint32_t n_merges = tok->merges() ? tok->merges()->size() : 0;
  const char* pre = fb::EnumNamePreTokenizer(tok->pre());
  const fb::RopeScaling* rs = h->rope_scaling();

  if (json) {
    printf("{\"file\":%s,\"file_bytes\":%zu,\"format_version\":%u,\"source\":%s,", json_string(pos[0]).c_str(),
           file.size(), m->format_version(), json_string(m->source() ? m->source()->str() : "").c_str());
    printf(
        "\"arch\":{\"name\":%s,\"n_layers\":%u,\"n_heads\":%u,\"n_kv_heads\":%u,\"dim\":%u,\"head_dim\":%u,"
        "\"ffn_dim\":%u,\"vocab_size\":%u,\"context_length\":%u,\"rope_theta\":%.9g,\"rope_dim\":%u,"
        "\"rope_style\":\"%s\",\"rope_scaling\":\"%s\",\"norm_eps\":%.9g,\"qkv_bias\":%s,\"tied_output\":%s},",
        json_string(m->arch()->name() ? m->arch()->name()->str() : "").c_str(), s.n_layers, s.n_heads, s.n_kv_heads,
        s.dim, s.head_dim, s.ffn_dim, s.vocab_size, s.context_length, double(h->rope_theta()), h->rope_dim(),
        rope_style_name(h->rope_style()), scaling_name(rs ? rs->kind() : fb::RopeScalingKind::None),
        double(h->norm_eps()), m->arch()->qkv_bias() ? "true" : "false", m->arch()->tied_output() ? "true" : "false");
    printf("\"tensors\":{\"count\":%u,\"by_dtype\":{", m->tensors()->size());
    bool first = true;
    for (const auto& [name, e] : by_dtype) {
      printf("%s\"%s\":{\"count\":%llu,\"bytes\":%llu}", first ? "" : ",", name.c_str(), (unsigned long long)e.first,
             (unsigned long long)e.second);
      first = false;
    }
    printf(
        "}},\"tokenizer\":{\"kind\":\"%s\",\"pre\":\"%s\",\"tokens\":%u,\"merges\":%u,\"bos_id\":%d,\"eos_id\":%d,"
        "\"pad_id\":%d,\"unk_id\":%d,\"im_start_id\":%d,\"im_end_id\":%d,\"add_bos\":%s},",
        tokenizer_kind_name(tok->kind()), pre, tok->tokens()->size(), n_merges, tok->bos_id(), tok->eos_id(),
        tok->pad_id(), tok->unk_id(), tok->im_start_id(), tok->im_end_id(), tok->add_bos() ? "true" : "false");
    if (kv) {
      printf(
          "\"kv_defaults\":{\"policy\":\"%s\",\"budget_tokens\":%u,\"sinks\":%u,\"window\":%u,\"obs_window\":%u,"
          "\"snap_kernel\":%u},",
          kv_policy_name(kv->policy()), kv->budget_tokens(), kv->sinks(), kv->window(), kv->obs_window(),
          kv->snap_kernel());
    }
    // The tables the native backend runs on this CPU (kernels.h names the tiers); null without.
    const MatmulKernels* mk = kernels_native();
    const VectorKernels* vk = vector_kernels_native();
    const AttentionKernels* ak = attention_kernels_native();
    if (mk && vk && ak)
      printf("\"kernels\":{\"matmul\":\"%s\",\"attention\":\"%s\",\"vector\":\"%s\"},", mk->name, ak->name, vk->name);
    else
      printf("\"kernels\":null,");
    printf(
        "\"run\":{\"policy\":\"%s\",\"budget_tokens\":%u,\"sinks\":%u,\"window\":%u,\"obs_window\":%u,"
        "\"snap_kernel\":%u,\"chunk_tokens\":%u},",
        kv_policy_name(run.kv.kind), run_budget, run.kv.sinks, run_window, run.kv.obs_window, run.kv.snap_kernel,
        run.plan.chunk_tokens);
    printf(
        "\"memory\":{\"kv_budget_tokens\":%u,\"kv_type\":\"%s\",\"slots\":%u,\"chunk_tokens\":%u,\"threads\":%u,"
        "\"weights_bytes\":%llu,\"persistent_bytes\":%llu,\"scratch_bytes\":%llu,\"kv_capacity_tokens\":%llu,"
        "\"kv_bytes\":%llu,\"kv_hold_tokens\":%u,\"kv_hold_bytes\":%llu,\"tokenizer_bytes\":%llu,\"total_bytes\":%llu,"
        "\"kv_policy\":\"%s\",",
        pc.kv_budget_tokens, kv_type_name(pc.kv_type), pc.slots, pc.chunk_tokens, pc.threads,
        (unsigned long long)model.weights_bytes(), (unsigned long long)plan.persistent_bytes,
        (unsigned long long)plan.scratch_bytes, (unsigned long long)plan.kv_capacity_tokens,
        (unsigned long long)plan.kv_bytes, plan.kv_hold_tokens, (unsigned long long)kv_hold_bytes,
        (unsigned long long)plan.tokenizer_bytes,
        (unsigned long long)(model.weights_bytes() + plan.persistent_bytes + plan.scratch_bytes),
        kv_policy_name(planned.kv.kind));
    printf("\"kv_layers\":{\"global\":{\"layers\":%u,\"capacity_tokens\":%llu,\"bytes\":%llu}", global_layers,
           (unsigned long long)plan.kv_capacity_tokens, (unsigned long long)kv_global_bytes);
    if (local_layers > 0) {
      printf(",\"local\":{\"layers\":%u,\"window\":%u,\"ring_tokens\":%u,\"capacity_tokens\":%llu,\"bytes\":%llu}",
             local_layers, shape.sliding_window, plan.kv_local_budget_tokens,
             (unsigned long long)plan.kv_local_capacity_tokens, (unsigned long long)kv_local_bytes);
    }
    printf(",\"uniform_bytes\":%llu},\"groups\":{", (unsigned long long)kv_uniform_bytes);
    // What the regions are for (RegionGroup), each group's bytes over all slots.
    for (uint32_t g = 0; g < kRegionGroupCount; ++g) {
      printf("%s\"%s\":%llu", g ? "," : "", region_group_name(RegionGroup(g)),
             (unsigned long long)plan.group_bytes(RegionGroup(g)));
    }
    printf("},\"regions\":[");
    // The plan's own table: every region with its bytes (all slots), summing to the arenas.
    for (uint32_t i = 0; i < kRegionCount; ++i) {
      const RegionInfo& r = kRegions[i];
      printf(
          "%s{\"name\":\"%s\",\"group\":\"%s\",\"arena\":\"%s\",\"bytes\":%llu,\"elements\":%llu,"
          "\"per_slot\":%s,\"shape\":%s}",
          i ? "," : "", r.name, region_group_name(r.group), r.arena == PlanArena::Persistent ? "persistent" : "scratch",
          (unsigned long long)plan.region_bytes(r.id), (unsigned long long)plan.regions[i].elements,
          r.per_slot ? "true" : "false", json_string(r.shape).c_str());
    }
    printf("]}}\n");
    return 0;
  }

  printf("model       %s (%s, format v%u)\n", pos[0].c_str(), human_bytes(file.size()).c_str(), m->format_version());
  if (m->source()) printf("source      %s\n", m->source()->c_str());
  printf("arch        %s: %u layers, dim %u, %u heads / %u KV heads, head dim %u, FFN %u, vocab %u\n",
         m->arch()->name() ? m->arch()->name()->c_str() : "llama", s.n_layers, s.dim, s.n_heads, s.n_kv_heads,
         s.head_dim, s.ffn_dim, s.vocab_size);
  printf("            context %u, RoPE theta %g (%s, %u dims, scaling %s), norm eps %g%s%s\n", s.context_length,
         double(h->rope_theta()), rope_style_name(h->rope_style()), h->rope_dim(),
         scaling_name(rs ? rs->kind() : fb::RopeScalingKind::None), double(h->norm_eps()),
         m->arch()->tied_output() ? ", tied output" : "", m->arch()->qkv_bias() ? ", q/k/v bias" : "");
  if (m->arch()->family() == fb::ArchFamily::Gemma3) {
    printf("            Gemma 3: global every %u layers; local layers: window %u, RoPE theta %g; query scale %g\n",
           h->sliding_window_pattern(), h->sliding_window(), double(h->rope_theta_local()), double(h->query_scale()));
  }
  printf("tensors     %u, %s:", m->tensors()->size(), human_bytes(model.weights_bytes()).c_str());
  for (const auto& [name, e] : by_dtype) {
    printf(" %s %llu (%s)", name.c_str(), (unsigned long long)e.first, human_bytes(e.second).c_str());
  }
  printf("\ntokenizer   %s, pre-tokenizer %s, %u tokens, %u merges, bos %d, eos %d", tokenizer_kind_name(tok->kind()),
         pre, tok->tokens()->size(), n_merges, tok->bos_id(), tok->eos_id());
  if (tok->im_start_id() >= 0) printf(", ChatML %d/%d", tok->im_start_id(), tok->im_end_id());
  printf("\n");
  // The run defaults: the file's kv_defaults and plan chunk, else the engine's (llm/run_config.h).
  printf("run         %s%s, budget %u tokens", kv_policy_name(run.kv.kind), kv ? "" : " (the file names none)",
         run_budget);
  const KvPolicyKind k = run.kv.kind;
  if (k == KvPolicyKind::Streaming || k == KvPolicyKind::SnapStream) printf(", %u sinks", run.kv.sinks);
  if (k == KvPolicyKind::SnapStream) printf(", window %u", run_window);
  if (kv_policy_uses_snapkv(k)) {
    printf(", obs window %u, kernel ", run.kv.obs_window);
    if (run.kv.snap_kernel)
      printf("%u", run.kv.snap_kernel);
    else
      printf("adaptive");
  }
  printf(", chunk %u\n", run.plan.chunk_tokens);
  if (kernels_native() && vector_kernels_native() && attention_kernels_native())
    printf("kernels     native on this CPU: matmul %s, attention %s, vector %s (ref: the portable oracle)\n",
           kernels_native()->name, attention_kernels_native()->name, vector_kernels_native()->name);
  else
    printf("kernels     ref only: this CPU or build has no SIMD tier for the native backend\n");
  printf("memory      budget %u tokens, %u slot(s), chunk %u, %u thread(s)\n", pc.kv_budget_tokens, pc.slots,
         pc.chunk_tokens, pc.threads);
  printf("  weights     %14llu bytes  (%s, mapped read-only)\n", (unsigned long long)model.weights_bytes(),
         human_bytes(model.weights_bytes()).c_str());
  printf("  persistent  %14llu bytes  (%s: KV %s %s for %llu tokens, tokenizer %s)\n",
         (unsigned long long)plan.persistent_bytes, human_bytes(plan.persistent_bytes).c_str(),
         human_bytes(plan.kv_bytes).c_str(), kv_type_name(pc.kv_type), (unsigned long long)plan.kv_capacity_tokens,
         human_bytes(plan.tokenizer_bytes).c_str());
  if (plan.kv_hold_tokens > 0) {
    printf(
        "  KV hold     %14llu bytes  (%s of the KV: %u entries per layer and KV head that the prompt's\n"
        "                                      question judges again; never attended to)\n",
        (unsigned long long)kv_hold_bytes, human_bytes(kv_hold_bytes).c_str(), plan.kv_hold_tokens);
  }
  if (local_layers > 0) {
    printf("  KV global   %14llu bytes  (%s: %u layers x %llu tokens, policy %s)\n",
           (unsigned long long)kv_global_bytes, human_bytes(kv_global_bytes).c_str(), global_layers,
           (unsigned long long)plan.kv_capacity_tokens, kv_policy_name(planned.kv.kind));
    printf("  KV local    %14llu bytes  (%s: %u layers x %llu-token ring, window %u)\n",
           (unsigned long long)kv_local_bytes, human_bytes(kv_local_bytes).c_str(), local_layers,
           (unsigned long long)plan.kv_local_capacity_tokens, shape.sliding_window);
    printf("  KV uniform  %14llu bytes  (%s: all %u layers x %llu tokens, %.1fx the above)\n",
           (unsigned long long)kv_uniform_bytes, human_bytes(kv_uniform_bytes).c_str(), shape.n_layers,
           (unsigned long long)plan.kv_capacity_tokens,
           plan.kv_bytes ? double(kv_uniform_bytes) / double(plan.kv_bytes) : 0.0);
  }
  printf("  scratch     %14llu bytes  (%s)\n", (unsigned long long)plan.scratch_bytes,
         human_bytes(plan.scratch_bytes).c_str());
  // Both arenas by what their regions are for (keel info --json: groups, and every region).
  printf("  by use     ");
  for (uint32_t g = 0; g < kRegionGroupCount; ++g) {
    const uint64_t b = plan.group_bytes(RegionGroup(g));
    if (b) printf(" %s %s", region_group_name(RegionGroup(g)), human_bytes(b).c_str());
  }
  printf("\n");
  return 0;
}

}  // namespace keel::cli
