// What run, chat, ppl and bench share: map and verify the model, plan the arenas, reserve them
// once, start the thread pool and initialize the runtime. After open() nothing allocates.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "keel/cli/args.h"
#include "keel/cli/option_spec.h"
#include "backend/dataflow_hw.h"
#include "llm/run_config.h"
#include "llm/runtime.h"
#include "ports/linux/arena_memory.h"
#include "ports/linux/mapped_file.h"
#include "ports/linux/thread_pool.h"

namespace keel::cli {

struct SessionOptions {
  std::string model_path;
  uint32_t threads = 0;  // 0 = all cores
  std::string backend = "auto";
  std::string hw;           // --hw for the dataflow backend: a preset, `host` or a JSON file
  uint64_t sram_bytes = 0;  // --sram-bytes: overrides the hardware's SRAM capacity
  std::string kv_policy;    // empty = the command's default
  uint32_t kv_budget = 0;   // 0 = the command's default
  KvType kv_type = KvType::F16;
  // 0 = the model's default (llm/run_config.h), as in RunOverrides.
  uint32_t sinks = 0;
  uint32_t window = 0;    // snapstream recent window
  int32_t snap_hold = 0;  // snapstream, rocketkv: the hold's entries (docs/kv.md); -1 = none
  uint32_t obs_window = 0;
  int32_t snap_kernel = 0;  // -1 = adaptive (--snap-kernel 0)
  uint32_t chunk = 0;
  // Sparse decode attention: --sparse-attention topk --sparse-budget B, or --kv-policy rocketkv;
  // the split's parts from --rocket-page --rocket-topk --rocket-r (0 = derived).
  uint32_t sparse_budget = 0;
  uint32_t rocket_page = 0, rocket_topk = 0, rocket_r = 0;
  uint32_t rocket_select = 0;                     // --rocket-select: 0 not given, 1 group, 2 head (RunOverrides)
  uint32_t kv_positions = 0;                      // --kv-positions: 0 not given, 1 cache, 2 original (RunOverrides)
  bool sparse_topk = false, sparse_none = false;  // --sparse-attention given as topk, none
  uint32_t logit_rows = 1;
  uint32_t slots = 1;           // sequences the plan holds side by side
  uint32_t queue_capacity = 0;  // requests the scheduler may hold waiting
  bool verify = true;           // check every checksum the file carries on load (--no-verify)
  std::string error;            // set by parse_session_options for a value out of range
};

// Parses the options every model command takes, as session_option_table() declares them (-m, -t,
// --backend, --kv-policy, --kv-budget, --kv-type, --sinks, ...), then the one check that involves
// two of them (--sparse-attention topk needs --sparse-budget). A malformed value is args.error();
// a value the engine cannot take (--chunk 0) is o.error, which load() reports.
void parse_session_options(Args& args, SessionOptions& o);
// The sampling a generating command starts from: top-k 40, min-p 0.05, seed 42 and the
// command's temperature, top-p and repetition penalty (run and memcheck: 0.8, 0.95, 1; chat:
// 0.2, 0.9, 1.1); --temp and the other sampler options override it.
text::SamplerConfig sampler_defaults(float temperature, float top_p, float repetition_penalty = 1.0f);
// Parses --temp --top-k --top-p --min-p --repeat-penalty --seed over the command's defaults in `c`.
void parse_sampler_options(Args& args, text::SamplerConfig& c);
// The session and sampler options' tables (keel/option_spec.h), which their parsing and help come from.
std::span<const OptionSpec<SessionOptions>> session_option_table();
std::span<const OptionSpec<text::SamplerConfig>> sampler_option_table();
// The session options' --help lines, with the closing line on defaults.
const std::string& session_help();
// The same without the options named (by long name) in `except`: a command that takes those
// options its own way (bench's lists) renders its own lines for them.
std::string session_help_without(std::span<const char* const> except);
// The sampler options' --help lines, with run's and memcheck's defaults.
const std::string& sampler_help();

// The engine's overrides (llm/run_config.h) that `opts` ask for under `policy` at `budget` tokens
// per slot, with the checks that involve two options (--sparse-budget needs rocketkv or
// --sparse-attention topk, ...). The backend is left to the caller. Session::start runs through
// it, and so does keel emulate's prediction, so both resolve the same configuration.
bool session_overrides(const SessionOptions& opts, KvPolicyKind policy, uint32_t budget, uint32_t threads,
                       RunOverrides& o, std::string& error);

class Session {
 public:
  // Loads and verifies the model (mapped, never copied), and checks every checksum it carries
  // unless options.verify is off (a version 1 file, which has none, loads with a note).
  bool load(const SessionOptions& o, std::string& error);
  // The policy in force: --kv-policy, else `fallback` (a command's default), else the model's.
  bool resolve_policy(const char* fallback, std::string& error);
  KvPolicyKind policy() const { return policy_; }
  // The model's default budget (from the file), the engine's if it has none.
  uint32_t default_budget() const;
  // The KV budget a command plans, one rule for every command: --kv-budget when given; else,
  // under policy full, `need`, the tokens the command will hold (run: prompt + generation capped
  // at the trained context, ppl: the text, passkey: the longest prompt + 64, bench: depth + test,
  // memcheck: prompt + generation), because full drops nothing and a smaller budget cannot serve;
  // else the model's default. need = kNeedUnknown: the command cannot know its length up front
  // and restarts (chat) or refuses (serve, batch) when the budget fills, so it takes the default.
  static constexpr uint64_t kNeedUnknown = 0;
  uint64_t kv_budget(uint64_t need) const;
  // Plans options().slots sequences of `budget` tokens each and initializes the runtime.
  bool start(uint32_t budget, std::string& error);

  const Model& model() const { return model_; }
  Runtime& runtime() { return runtime_; }
  const MemoryPlan& plan() const { return runtime_.memory_plan(); }
  uint32_t threads() const { return threads_; }
  const SessionOptions& options() const { return opts_; }
  // Seconds load() spent checking the file's checksums (0 with --no-verify).
  double verify_seconds() const { return verify_seconds_; }

 private:
  SessionOptions opts_;
  port::MappedFile file_;
  Model model_;
  uint32_t threads_ = 1;
  double verify_seconds_ = 0.0;
  KvPolicyKind policy_ = KvPolicyKind::Full;
  std::unique_ptr<port::LinuxThreadPool> pool_;
  DfMemory dataflow_memory_;  // the SRAM and tiers the dataflow backend emulates; the plan points at it
  port::ArenaMemory persistent_, scratch_;
  Runtime runtime_;
};

// Current time in seconds (monotonic).
double now_seconds();

}  // namespace keel::cli

namespace keel::cli {
// Encodes text with the model's tokenizer outside the runtime (host memory), e.g. to size the
// plan before init. parse_special: match <|im_start|>-style special tokens in the text.
bool encode_text(const Model& model, const std::string& text, bool add_bos, bool parse_special,
                 std::vector<int32_t>& ids, std::string& error);
}  // namespace keel::cli
