#include "keel/cli/session.h"

#include "backend/registry.h"
#include "emulate/hw_json.h"
#include "keel/cli/cli_util.h"
#include "llm/run_config.h"
#include "ports/linux/backend_plan.h"
#include "ports/linux/mapped_file.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace keel::cli {

namespace {

bool store_kv_type(const std::string& v, SessionOptions& o) { return parse_kv_type(v.c_str(), o.kv_type); }

// The mode is two fields (sparse_topk, sparse_none); neither is set for a value it does not take.
bool store_sparse_attention(const std::string& v, SessionOptions& o) {
  o.sparse_topk = v == "topk";
  o.sparse_none = v == "none";
  return o.sparse_topk || o.sparse_none;
}

// The help of the options whose values are a registry's names, from that registry.
const std::string kBackendHelp = backend_choices(NameList::Help) + " (default auto)";
const std::string kKvPolicyHelp = kv_policy_choices(true, NameList::Help) + " (docs/kv.md)";

// In --help's order. Kinds, as RunOverrides takes them: 0 there means "the model's default", so an
// option the engine cannot take as 0 is U32AtLeastOne; --snap-hold and --snap-kernel's 0 (no hold,
// adaptive kernel) is -1 (ZeroIsNone); the two-valued options are numbered 1 and 2 (0: not given).
const OptionSpec<SessionOptions> kSessionOptions[] = {
    {.long_name = "--model",
     .short_name = "-m",
     .metavar = "FILE",
     .help = "the .keel model (required)",
     .kind = OptionKind::Text,
     .field = &SessionOptions::model_path},
    {.long_name = "--threads",
     .short_name = "-t",
     .metavar = "N",
     .help = "worker threads (default: all cores)",
     .kind = OptionKind::U32,
     .field = &SessionOptions::threads},
    {.long_name = "--backend",
     .metavar = "B",
     .help = kBackendHelp.c_str(),
     .kind = OptionKind::Text,
     .field = &SessionOptions::backend},
    {.long_name = "--hw",
     .metavar = "NAME|FILE",
     .help = "hardware the dataflow backend emulates: a preset (keel emulate\n"
             "--list-hw), host, or a JSON file (docs/emulator.md)",
     .kind = OptionKind::Text,
     .field = &SessionOptions::hw},
    {.long_name = "--sram-bytes",
     .metavar = "N",
     .help = "override the hardware's on-chip SRAM capacity",
     .kind = OptionKind::U64,
     .field = &SessionOptions::sram_bytes},
    {.long_name = "--kv-policy",
     .metavar = "P",
     .help = kKvPolicyHelp.c_str(),
     .kind = OptionKind::Text,
     .field = &SessionOptions::kv_policy},
    {.long_name = "--kv-budget",
     .metavar = "N",
     .help = "KV cache budget in tokens per sequence",
     .kind = OptionKind::U32,
     .field = &SessionOptions::kv_budget},
    {.long_name = "--kv-type",
     .metavar = "T",
     .help = "f16 | q8 | q4: how the KV cache stores keys and values (default f16;\n"
             "q8 and q4 read about 1/2 and 1/3 of the bytes per cached token)",
     .kind = OptionKind::Custom,
     .store = store_kv_type,
     .expects = "f16, q8 or q4"},
    {.long_name = "--sinks",
     .metavar = "N",
     .help = "attention sinks kept by streaming and snapstream (default 4)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &SessionOptions::sinks},
    {.long_name = "--window",
     .metavar = "N",
     .help = "snapstream's recent window for generated tokens (default budget/4)",
     .kind = OptionKind::U32,
     .field = &SessionOptions::window},
    {.long_name = "--obs-window",
     .metavar = "N",
     .help = "SnapKV observation window (default 32)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &SessionOptions::obs_window},
    {.long_name = "--snap-kernel",
     .metavar = "N",
     .help = "SnapKV max-pool kernel, odd; 0 = adaptive (default: 31 for snapstream\n"
             "and snapkv; rocketkv the architecture's: 63 llama, 31 gemma3)",
     .kind = OptionKind::ZeroIsNone,
     .field = &SessionOptions::snap_kernel},
    {.long_name = "--snap-hold",
     .metavar = "N",
     .help = "snapstream, rocketkv: keep up to N entries per layer and KV head that\n"
             "the lookahead evicted, for the prompt's question to judge again\n"
             "(planned memory; 0 = none; default: the recent window for\n"
             "snapstream, 0 for rocketkv; docs/kv.md, \"The hold\")",
     .kind = OptionKind::ZeroIsNone,
     .field = &SessionOptions::snap_hold},
    {.long_name = "--sparse-attention",
     .metavar = "M",
     .help = "none | topk: each decode step attends to the top-k cached tokens by\n"
             "an upper bound of q.k (docs/kv.md; rocketkv always does)",
     .kind = OptionKind::Custom,
     .store = store_sparse_attention,
     .expects = "none or topk"},
    {.long_name = "--sparse-budget",
     .metavar = "B",
     .help = "tokens one decode step reads (k = B/2 exactly, the rest on the\n"
             "bound; default for rocketkv: budget/4)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &SessionOptions::sparse_budget},
    {.long_name = "--rocket-page",
     .metavar = "P",
     .help = "tokens per page of key summaries (default: from the budget split)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &SessionOptions::rocket_page},
    {.long_name = "--rocket-topk",
     .metavar = "K",
     .help = "tokens attended exactly (default B/2)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &SessionOptions::rocket_topk},
    {.long_name = "--rocket-r",
     .metavar = "R",
     .help = "query dimensions the bound reads (default: from the budget split)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &SessionOptions::rocket_r},
    {.long_name = "--rocket-select",
     .metavar = "S",
     .help = "group | head: how pages are ranked; group is RocketKV's summed\n"
             "bound over |q|'s dimensions, head weighs dimensions by the keys'\n"
             "spread and ranks by each head's own estimate (default: the model's,\n"
             "head for Gemma 3, group for the llama family; docs/kv.md)",
     .kind = OptionKind::OneOf,
     .field = &SessionOptions::rocket_select,
     .choices = {"group", "head"}},
    {.long_name = "--kv-positions",
     .metavar = "M",
     .help = "cache | original: where the compressed prefix's keys sit for RoPE;\n"
             "cache (default) is StreamingLLM's, at their index in the cache, so\n"
             "distances never exceed the budget; original keeps their positions\n"
             "in the text, as one-shot SnapKV does (streaming, snapkv, snapstream,\n"
             "rocketkv; docs/kv.md, \"Positions\")",
     .kind = OptionKind::OneOf,
     .field = &SessionOptions::kv_positions,
     .choices = {"cache", "original"}},
    {.long_name = "--chunk",
     .metavar = "N",
     .help = "prefill chunk in tokens (default 64)",
     .kind = OptionKind::U32AtLeastOne,
     .field = &SessionOptions::chunk},
    {.long_name = "--no-verify",
     .help = "skip the check of every checksum the file carries (its metadata,\n"
             "tokenizer and every tensor), which loading does by default and which\n"
             "reads the whole file once (SmolLM2-135M: tens of ms)",
     .kind = OptionKind::NegatedFlag,
     .field = &SessionOptions::verify},
};

const OptionSpec<text::SamplerConfig> kSamplerOptions[] = {
    {.long_name = "--temp",
     .metavar = "T",
     .help = "temperature, 0 = greedy (default 0.8)",
     .kind = OptionKind::F32,
     .field = &text::SamplerConfig::temperature},
    {.long_name = "--top-k",
     .metavar = "K",
     .help = "keep the K most likely tokens, 0 = off (default 40)",
     .kind = OptionKind::U32,
     .field = &text::SamplerConfig::top_k},
    {.long_name = "--top-p",
     .metavar = "P",
     .help = "nucleus sampling, 1 = off (default 0.95)",
     .kind = OptionKind::F32,
     .field = &text::SamplerConfig::top_p},
    {.long_name = "--min-p",
     .metavar = "P",
     .help = "drop tokens below P x the best probability (default 0.05)",
     .kind = OptionKind::F32,
     .field = &text::SamplerConfig::min_p},
    {.long_name = "--repeat-penalty",
     .metavar = "R",
     .help = "repetition penalty over the last 64 tokens, 1 = off (default 1)",
     .kind = OptionKind::F32,
     .field = &text::SamplerConfig::repetition_penalty},
    {.long_name = "--seed",
     .metavar = "S",
     .help = "sampler seed (default 42)",
     .kind = OptionKind::U64,
     .field = &text::SamplerConfig::seed},
};

}  // namespace

std::span<const OptionSpec<SessionOptions>> session_option_table() { return kSessionOptions; }
std::span<const OptionSpec<text::SamplerConfig>> sampler_option_table() { return kSamplerOptions; }

const std::string& session_help() {
  static const std::string help = session_help_without({});
  return help;
}

std::string session_help_without(std::span<const char* const> except) {
  std::vector<OptionSpec<SessionOptions>> kept;
  for (const OptionSpec<SessionOptions>& o : kSessionOptions) {
    if (std::none_of(except.begin(), except.end(), [&](const char* n) { return std::strcmp(n, o.long_name) == 0; }))
      kept.push_back(o);
  }
  return render_help(std::span<const OptionSpec<SessionOptions>>(kept)) +
         "  Defaults are the model's where its file names them (keel info: run defaults).\n";
}

const std::string& sampler_help() {
  static const std::string help = render_help(kSamplerOptions);
  return help;
}

void parse_session_options(Args& args, SessionOptions& o) {
  parse_options(args, kSessionOptions, o, o.error);
  if (o.sparse_topk && o.sparse_budget == 0)
    option_detail::first_error(o.error, "--sparse-attention topk needs --sparse-budget B");
}

namespace {

// The engine names its parameters; the keel tool's user knows them as options.
std::string engine_error(const Error& e) {
  std::string m = e.message();
  static const char* const kFlags[][2] = {
      {"snap_kernel", "--snap-kernel"}, {"obs_window", "--obs-window"},  {"kv_budget_tokens", "--kv-budget"},
      {"chunk_tokens", "--chunk"},      {"kv_type", "--kv-type"},        {"sparse_budget", "--sparse-budget"},
      {"rocket_page", "--rocket-page"}, {"rocket_topk", "--rocket-topk"}};
  for (const auto& f : kFlags) {
    const size_t n = strlen(f[0]);
    if (m.compare(0, n, f[0]) == 0 && (m.size() == n || m[n] == ' ')) m = f[1] + m.substr(n);
  }
  return std::string(to_string(e.status())) + ": " + m;
}

}  // namespace

text::SamplerConfig sampler_defaults(float temperature, float top_p, float repetition_penalty) {
  text::SamplerConfig c;
  c.temperature = temperature;
  c.top_k = 40;
  c.top_p = top_p;
  c.min_p = 0.05f;
  c.repetition_penalty = repetition_penalty;
  c.seed = 42;
  return c;
}

void parse_sampler_options(Args& args, text::SamplerConfig& c) {
  std::string no_checks;  // every sampler value its type accepts is one the sampler takes
  parse_options(args, kSamplerOptions, c, no_checks);
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool Session::load(const SessionOptions& o, std::string& error) {
  opts_ = o;
  if (o.model_path.empty()) {
    error = "missing -m MODEL.keel";
    return false;
  }
  if (!o.error.empty()) {
    error = o.error;
    return false;
  }
  if (!file_.open(o.model_path, error)) return false;
  const Span<const uint8_t> image(file_.data(), file_.size());
  const double t0 = now_seconds();
  Error e = model_.load(image, o.verify);
  if (e.status() == Status::ModelNoChecksums && model_.load(image).ok()) {
    // A version 1 file has nothing to check; it still runs, as before checksums existed.
    fprintf(stderr, "keel: %s: format version 1 carries no checksums; convert it again to have it checked\n",
            o.model_path.c_str());
    e = Error();
  }
  if (!e.ok()) {
    error = o.model_path + ": " + to_string(e.status()) + ": " + e.message();
    return false;
  }
  verify_seconds_ = o.verify ? now_seconds() - t0 : 0.0;
  if (o.verify && model_.has_checksums() && !model_.has_whole_file_checksums()) {
    fprintf(stderr, "keel: %s: format version 2 checks its tensors only; convert it again to check every byte\n",
            o.model_path.c_str());
  }
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  threads_ = o.threads ? o.threads : uint32_t(cores > 0 ? cores : 1);
  return true;
}

bool Session::resolve_policy(const char* fallback, std::string& error) {
  std::string name = opts_.kv_policy;
  if (name.empty() && fallback) name = fallback;
  if (name.empty()) name = kv_policy_name(model_run_defaults(model_).policy);
  if (!parse_kv_policy(name.c_str(), policy_)) {
    error = "--kv-policy expects " + kv_policy_choices() + ", got '" + name + "'";
    return false;
  }
  return true;
}

uint32_t Session::default_budget() const { return model_run_defaults(model_).kv_budget_tokens; }

uint64_t Session::kv_budget(uint64_t need) const {
  if (opts_.kv_budget) return opts_.kv_budget;
  if (policy_ == KvPolicyKind::Full && need != kNeedUnknown) return need;
  return default_budget();
}

bool session_overrides(const SessionOptions& opts, KvPolicyKind policy, uint32_t budget, uint32_t threads,
                       RunOverrides& o, std::string& error) {
  o = RunOverrides{};
  o.kv_policy = run_policy(policy);
  o.kv_budget_tokens = budget;
  o.slots = opts.slots;
  o.queue_capacity = opts.queue_capacity;
  o.chunk_tokens = opts.chunk;
  o.threads = threads;
  o.logit_rows = opts.logit_rows;
  o.sinks = opts.sinks;
  o.window = opts.window;
  o.hold = opts.snap_hold;
  o.obs_window = opts.obs_window;
  o.snap_kernel = opts.snap_kernel;
  o.kv_type = uint32_t(opts.kv_type);
  if (opts.sparse_budget && !opts.sparse_topk && policy != KvPolicyKind::RocketKV) {
    error = "--sparse-budget needs --sparse-attention topk or --kv-policy rocketkv";
    return false;
  }
  if (opts.sparse_none && policy == KvPolicyKind::RocketKV) {
    error = "--kv-policy rocketkv always runs sparse attention; --sparse-attention none contradicts it";
    return false;
  }
  if ((opts.rocket_page || opts.rocket_topk || opts.rocket_r || opts.rocket_select) && !opts.sparse_topk &&
      policy != KvPolicyKind::RocketKV) {
    error =
        "--rocket-page, --rocket-topk, --rocket-r and --rocket-select need --sparse-attention topk or --kv-policy "
        "rocketkv";
    return false;
  }
  o.sparse_budget = opts.sparse_budget;
  o.rocket_page = opts.rocket_page;
  o.rocket_topk = opts.rocket_topk;
  o.rocket_r = opts.rocket_r;
  o.rocket_select = opts.rocket_select;
  if (opts.kv_positions && (policy == KvPolicyKind::Full || policy == KvPolicyKind::Window)) {
    error = std::string(
                "--kv-positions applies to the policies that keep a prefix (streaming, snapkv, snapstream, "
                "rocketkv); --kv-policy ") +
            kv_policy_name(policy) + " keeps none";
    return false;
  }
  o.kv_positions = opts.kv_positions;
  return true;
}

bool Session::start(uint32_t budget, std::string& error) {
  BackendKind backend = BackendKind::Auto;
  if (!backend_from_name(opts_.backend.c_str(), &backend)) {
    error = "--backend expects " + backend_choices() + ", got '" + opts_.backend + "'";
    return false;
  }
  if ((backend == BackendKind::Dataflow) != !opts_.hw.empty()) {
    error = opts_.hw.empty() ? "--backend dataflow needs --hw NAME|FILE" : "--hw needs --backend dataflow";
    return false;
  }
  if (opts_.sram_bytes && opts_.hw.empty()) {
    error = "--sram-bytes needs --backend dataflow --hw";
    return false;
  }
  if (!opts_.hw.empty()) {
    HwDesc hw;
    if (!hw::load_hw(opts_.hw, hw, error)) return false;
    if (opts_.sram_bytes) hw.sram_bytes = opts_.sram_bytes;
    dataflow_memory_ = df_memory(hw);
  }
  // Which policy runs is known only now (keel bench takes a list of them).
  RunOverrides o;
  if (!session_overrides(opts_, policy_, budget, threads_, o, error)) return false;
  o.backend = backend;
  RuntimeConfig cfg;
  Error e = make_runtime_config(model_, o, &cfg);
  if (!e.ok()) {
    error = engine_error(e);
    return false;
  }
  if (o.backend == BackendKind::Dataflow) cfg.plan.dataflow_memory = &dataflow_memory_;
  if (!port::reserve_backend_bytes(model_, cfg, error)) return false;
  const MemoryPlan p = Runtime::plan(model_, cfg);
  // The arenas are touched below; a plan larger than the machine's free memory would end in the
  // OOM killer instead of an error.
  const uint64_t need = p.persistent_bytes + p.scratch_bytes, avail = port::available_memory_bytes();
  if (avail != 0 && need > avail) {
    error = "the plan needs " + human_bytes(need) + " of arenas (KV budget " + std::to_string(budget) + " tokens" +
            (opts_.slots > 1 ? ", " + std::to_string(opts_.slots) + " slots" : std::string()) + "); this machine has " +
            human_bytes(avail) + " available (lower --kv-budget)";
    return false;
  }
  if (!persistent_.reserve(p.persistent_bytes, error) || !scratch_.reserve(p.scratch_bytes, error)) return false;
  // Touch the arenas now so their pages are resident before the first token.
  memset(persistent_.data(), 0, p.persistent_bytes);
  memset(scratch_.data(), 0, p.scratch_bytes);
  if (threads_ > 1) pool_ = std::make_unique<port::LinuxThreadPool>(threads_);
  e = runtime_.init(model_, cfg, Span<uint8_t>(persistent_.data(), p.persistent_bytes),
                    Span<uint8_t>(scratch_.data(), p.scratch_bytes), pool_ ? pool_->pool() : nullptr);
  if (!e.ok()) {
    error = engine_error(e);
    return false;
  }
  return true;
}

}  // namespace keel::cli

namespace keel::cli {

bool encode_text(const Model& model, const std::string& text, bool add_bos, bool parse_special,
                 std::vector<int32_t>& ids, std::string& error) {
  const fb::Tokenizer* t = model.meta()->tokenizer();
  std::vector<uint8_t> table(text::Tokenizer::arena_bytes(t) + 64), scratch(text::Tokenizer::scratch_bytes() + 64);
  Arena table_arena(table.data(), table.size()), scratch_arena(scratch.data(), scratch.size());
  text::Tokenizer tok;
  Error e = tok.init(t, table_arena);
  if (!e.ok()) {
    error = e.message();
    return false;
  }
  text::EncodeOptions eo;
  eo.add_bos = add_bos;
  eo.parse_special = parse_special;
  size_t n = 0;
  ids.clear();
  e = tok.encode(text.data(), text.size(), eo, Span<int32_t>(), &n, scratch_arena);
  if (!e.ok() && e.status() != Status::PromptTooLong) {
    error = e.message();
    return false;
  }
  ids.resize(n);
  e = tok.encode(text.data(), text.size(), eo, Span<int32_t>(ids.data(), ids.size()), &n, scratch_arena);
  if (!e.ok()) {
    error = e.message();
    return false;
  }
  return true;
}

}  // namespace keel::cli
