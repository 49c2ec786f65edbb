// keel bench: prefill and decode throughput, llama-bench style (test, t/s ± sd), over a grid of
// parameters given as comma-separated lists.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "backend/registry.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/commands/commands.h"
#include "keel/cli/membw.h"
#include "keel/cli/session.h"

namespace keel::cli {
namespace {

// The options bench takes as lists, with their defaults: --help prints this table, and an option
// that is not given takes the default from here.
struct ListOption {
  const char* long_name;
  const char* short_name;
  const char* meta;
  const char* fallback;  // the default, parsed like a value given on the command line
  const char* help;
};
enum Opt { kPrompt, kGen, kDepth, kThreads, kSlots, kBackend, kPolicy, kBudget, kReps, kOptCount };
const ListOption kOptions[kOptCount] = {
    {"--n-prompt", "-p", "N,...", "512", "prompt tokens, 0 = skip"},
    {"--n-gen", "-n", "N,...", "128", "generated tokens, 0 = skip"},
    {"--depth", "-d", "N,...", "0", "tokens in the cache before each test"},
    {"--threads", "-t", "N,...", "0", "worker threads, 0 = all cores"},
    {"--slots", nullptr, "N,...", "1",
     "sequences decoding together: a tg test runs one batched pass per step over N slots and reports their "
     "aggregate t/s"},
    {"--backend", nullptr, "B,...", "auto", nullptr},    // help: list_help()
    {"--kv-policy", nullptr, "P,...", "full", nullptr},  // help: list_help()
    {"--kv-budget", nullptr, "N,...", "0",
     "KV budget in tokens, 0 = for full the largest depth + the longest test, for the other policies "
     "the model's"},
    {"--repetitions", "-r", "N", "5", "repetitions of each test, one value"},
};

const char kHelpHead[] =
    "usage: keel bench -m MODEL.keel [-p N,...] [-n N,...] [-d N,...] [-t N,...] [--slots N,...]\n"
    "                  [--backend B,...] [--kv-policy P,...] [--kv-budget N,...] [-r N] [--bandwidth]\n"
    "                  [--json | --csv]\n"
    "\n"
    "Measures prompt processing (ppN: N tokens prefilled) and text generation (tgN: N tokens\n"
    "decoded one at a time) on pseudo-random token ids, after DEPTH tokens already in the KV\n"
    "cache (prefilled, not timed). Each test runs REPS times on a fresh sequence; the table shows\n"
    "mean ± standard deviation of tokens per second, the JSON and CSV also the median, the JSON\n"
    "every sample. With --slots N, a tgN test decodes N sequences together (every slot holds\n"
    "DEPTH tokens; each step is one batched pass reading the weights once for all of them) and\n"
    "reports their aggregate tokens per second; ppN tests run in slot 0 alone.\n"
    "\n"
    "Options shown with N,... take comma-separated lists, as llama-bench's do: every combination\n"
    "of backend, threads, slots, KV policy, budget and depth is a configuration, measured with a\n"
    "ppN test for each -p and a tgN test for each -n. The model's plan is made once per backend,\n"
    "threads, slots, policy and budget; depths and tests run within it.\n"
    "\n"
    "options:\n";

const char kHelpTail[] =
    "  --bandwidth            also measure DRAM read bandwidth with the same threads and report\n"
    "                         the decode ceiling: bandwidth / bytes read per token (the weights\n"
    "                         shared by the slots of a step, plus the K,V each slot attends to:\n"
    "                         mean_cached_tokens, at most the budget; with sparse attention the\n"
    "                         rows of the chosen pages and the page summaries it reads; local\n"
    "                         sliding-window layers their ring, mean_local_cached_tokens)\n"
    "  --json                 JSON lines, one object per configuration: model, weights_bytes, backend,\n"
    "                         matmul_kernels, threads, slots, kv_policy, kv_budget, depth, repetitions,\n"
    "                         peak_rss_bytes, bytes_per_token, kv_bytes_per_cached_token,\n"
    "                         mean_cached_tokens, local_kv_bytes_per_cached_token,\n"
    "                         mean_local_cached_tokens (of its last tg test), with --bandwidth\n"
    "                         dram_read_gbps and decode_ceiling_tps, and results: per test, test,\n"
    "                         n_prompt, n_gen, tps_mean, tps_sd, tps_median, samples (tg tests also\n"
    "                         their own mean_cached_tokens, bytes_per_token, decode_ceiling_tps).\n"
    "                         One configuration is one line: a single JSON document\n"
    "  --csv                  CSV: a header, then one row per test\n"
    "%s";

// The session options' help without the ones bench takes as lists.
std::string session_help_without_lists() {
  const char* names[kOptCount];
  for (int i = 0; i < kOptCount; ++i) names[i] = kOptions[i].long_name;
  return session_help_without(names);
}

// The help of an option whose values are a registry's names, from that registry.
std::string list_help(const ListOption& o) {
  if (o.help) return o.help;
  return &o == &kOptions[kBackend] ? backend_choices(NameList::Help) + " (with --hw)" : kv_policy_choices();
}

std::string help_text() {
  std::string h = kHelpHead;
  for (const ListOption& o : kOptions) {
    std::string names =
        std::string("  ") + (o.short_name ? std::string(o.short_name) + ", " : "") + o.long_name + " " + o.meta;
    names.resize(std::max<size_t>(names.size() + 1, 25), ' ');
    std::string text = list_help(o) + " (default " + o.fallback + ")";
    // Wrapped at 97 columns, continuation lines under the text.
    while (names.size() + text.size() > 97) {
      size_t cut = text.rfind(' ', 97 - names.size());
      h += names + text.substr(0, cut) + "\n";
      text = text.substr(cut + 1);
      names.assign(25, ' ');
    }
    h += names + text + "\n";
  }
  return h + kHelpTail;
}

struct Test {
  std::string name;  // "pp512", "tg128 @ d4096"
  uint32_t n_prompt = 0, n_gen = 0;
  std::vector<double> tps;
  double mean_cached = 0, bytes_per_token = 0, ceiling = 0;  // tg tests only
  double mean_local_cached = 0;  // entries a local (sliding-window) layer attends to; 0 without
};

// One configuration: what every test in it shares.
struct Config {
  std::string model;
  uint64_t weights_bytes = 0;
  std::string backend, matmul;
  uint32_t threads = 0, slots = 1, depth = 0, reps = 0, budget = 0;
  std::string policy;  // with "+q8" / "+q4" for a quantized cache
  // K and V bytes per entry of the global layers' cache (every layer's, for models without
  // local layers) and of the local layers' ring (Gemma 3's sliding-window layers; 0 without).
  double kv_bytes_per_cached_token = 0, local_kv_bytes_per_cached_token = 0;
  // Sparse decode attention (docs/kv.md, "Bytes per step"): a step reads the K,V rows of the
  // pages it chose (at most topk + page - 1 tokens) and its own, and 2r f32 numbers per page.
  SparseSplit sparse;
  uint32_t kv_layer_heads = 0;                               // global layers x KV heads
  double mean_cached = 0, bytes_per_token = 0, ceiling = 0;  // the last tg test's, else at the depth
  double mean_local_cached = 0;
  double gbps = 0;  // 0 without --bandwidth
  std::vector<Test> tests;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (v.size() - 1));
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Prints configurations as they complete.
class Printer {
 public:
  virtual ~Printer() = default;
  virtual void begin() {}
  virtual void config(const Config& c) = 0;
  virtual void end() {}
};

class MarkdownPrinter : public Printer {
 public:
  void begin() override {
    printf(
        "| model | size | backend | threads | slots | kv | test | t/s |\n| --- | ---: | --- | ---: | ---: | --- | --- "
        "| "
        "---: |\n");
  }
  void config(const Config& c) override {
    for (const Test& t : c.tests) {
      printf("| %s | %s | %s (%s) | %u | %u | %s %u | %s | %.2f ± %.2f |\n", c.model.c_str(),
             human_bytes(c.weights_bytes).c_str(), c.backend.c_str(), c.matmul.c_str(), c.threads, c.slots,
             c.policy.c_str(), c.budget, t.name.c_str(), mean(t.tps), stddev(t.tps));
      if (c.gbps > 0 && t.n_gen > 0) {
        char line[256];
        snprintf(line, sizeof line,
                 "%s (%s %u, %u threads, %u slots): one token costs %s of reads; at %.1f GB/s the ceiling is "
                 "%.1f t/s, %.0f%% of it reached\n",
                 t.name.c_str(), c.policy.c_str(), c.budget, c.threads, c.slots,
                 human_bytes(uint64_t(t.bytes_per_token)).c_str(), c.gbps, t.ceiling, 100.0 * mean(t.tps) / t.ceiling);
        ceilings_ += line;
      }
    }
    fflush(stdout);
  }
  void end() override {
    if (!ceilings_.empty()) printf("\nDRAM read bandwidth and the decode ceiling:\n%s", ceilings_.c_str());
  }

 private:
  std::string ceilings_;
};

class JsonPrinter : public Printer {
 public:
  void config(const Config& c) override {
    printf(
        "{\"model\":%s,\"weights_bytes\":%llu,\"backend\":\"%s\",\"matmul_kernels\":\"%s\",\"threads\":%u,"
        "\"slots\":%u,\"kv_policy\":\"%s\",\"kv_budget\":%u,\"depth\":%u,\"repetitions\":%u,\"peak_rss_bytes\":%llu,"
        "\"bytes_per_token\":%.0f,\"kv_bytes_per_cached_token\":%.0f,\"mean_cached_tokens\":%.1f,"
        "\"local_kv_bytes_per_cached_token\":%.0f,\"mean_local_cached_tokens\":%.1f,",
        json_string(c.model).c_str(), (unsigned long long)c.weights_bytes, c.backend.c_str(), c.matmul.c_str(),
        c.threads, c.slots, c.policy.c_str(), c.budget, c.depth, c.reps, (unsigned long long)port::peak_rss_bytes(),
        c.bytes_per_token, c.kv_bytes_per_cached_token, c.mean_cached, c.local_kv_bytes_per_cached_token,
        c.mean_local_cached);
    if (c.gbps > 0) printf("\"dram_read_gbps\":%.2f,\"decode_ceiling_tps\":%.2f,", c.gbps, c.ceiling);
    printf("\"results\":[");
    for (size_t i = 0; i < c.tests.size(); ++i) {
      const Test& t = c.tests[i];
      printf("%s{\"test\":\"%s\",\"n_prompt\":%u,\"n_gen\":%u,\"tps_mean\":%.3f,\"tps_sd\":%.3f,\"tps_median\":%.3f,",
             i ? "," : "", t.name.c_str(), t.n_prompt, t.n_gen, mean(t.tps), stddev(t.tps), median(t.tps));
      if (t.n_gen > 0) {
        printf("\"mean_cached_tokens\":%.1f,\"bytes_per_token\":%.0f,", t.mean_cached, t.bytes_per_token);
        if (c.gbps > 0) printf("\"decode_ceiling_tps\":%.2f,", t.ceiling);
      }
      printf("\"samples\":[");
      for (size_t k = 0; k < t.tps.size(); ++k) printf("%s%.3f", k ? "," : "", t.tps[k]);
      printf("]}");
    }
    printf("]}\n");
    fflush(stdout);
  }
};

class CsvPrinter : public Printer {
 public:
  void begin() override {
    printf(
        "model,weights_bytes,backend,matmul_kernels,threads,slots,kv_policy,kv_budget,depth,repetitions,test,n_prompt,"
        "n_gen,tps_mean,tps_sd,tps_median,mean_cached_tokens,bytes_per_token,dram_read_gbps,decode_ceiling_tps\n");
  }
  void config(const Config& c) override {
    for (const Test& t : c.tests) {
      // The model name is quoted, its quotes doubled; the other fields hold no comma.
      std::string model;
      for (char ch : c.model) model += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      printf("\"%s\",%llu,%s,%s,%u,%u,%s,%u,%u,%u,%s,%u,%u,%.3f,%.3f,%.3f,", model.c_str(),
             (unsigned long long)c.weights_bytes, c.backend.c_str(), c.matmul.c_str(), c.threads, c.slots,
             c.policy.c_str(), c.budget, c.depth, c.reps, t.name.c_str(), t.n_prompt, t.n_gen, mean(t.tps),
             stddev(t.tps), median(t.tps));
      if (t.n_gen > 0)
        printf("%.1f,%.0f,", t.mean_cached, t.bytes_per_token);
      else
        printf(",,");
      if (c.gbps > 0 && t.n_gen > 0)
        printf("%.2f,%.2f\n", c.gbps, t.ceiling);
      else if (c.gbps > 0)
        printf("%.2f,\n", c.gbps);
      else
        printf(",\n");
    }
    fflush(stdout);
  }
};

// The lists of one invocation, checked.
struct Grid {
  std::vector<uint32_t> prompts, gens, depths, threads, slots, budgets;
  std::vector<std::string> backends, policies;
  uint32_t reps = 0;
  uint32_t need = 0;  // the longest sequence a test reaches: the largest depth + the longest test
};

// Fills `g` from each option's value (given or the table's default); false with the usage error.
bool parse_grid(const std::string (&given)[kOptCount], Grid& g, std::string& error) {
  const struct {
    Opt opt;
    std::vector<uint32_t>* out;
  } numbers[] = {{kPrompt, &g.prompts},  {kGen, &g.gens},    {kDepth, &g.depths},
                 {kThreads, &g.threads}, {kSlots, &g.slots}, {kBudget, &g.budgets}};
  for (const auto& n : numbers) {
    if (!parse_list(given[n.opt], *n.out)) {
      error = std::string(kOptions[n.opt].long_name) + " expects non-negative integers separated by commas, got '" +
              given[n.opt] + "'";
      return false;
    }
  }
  std::vector<uint32_t> reps;
  if (!parse_list(given[kReps], reps) || reps.size() != 1 || reps[0] == 0) {
    error = "--repetitions expects one integer of at least 1, got '" + given[kReps] + "'";
    return false;
  }
  g.reps = reps[0];
  for (const uint32_t n : g.slots) {
    if (n == 0) {
      error = "--slots expects counts of at least 1, got '" + given[kSlots] + "'";
      return false;
    }
  }
  if (!split_list(given[kBackend], g.backends) || !split_list(given[kPolicy], g.policies)) {
    error = "--backend and --kv-policy expect lists like auto,ref and full,snapstream";
    return false;
  }
  for (const std::string& b : g.backends) {
    BackendKind kind;
    if (!backend_from_name(b.c_str(), &kind)) {
      error = "--backend expects " + backend_choices() + ", got '" + b + "'";
      return false;
    }
  }
  for (const std::string& p : g.policies) {
    KvPolicyKind kind;
    if (!keel::parse_kv_policy(p.c_str(), kind)) {
      error = "--kv-policy expects " + kv_policy_choices() + ", got '" + p + "'";
      return false;
    }
  }
  const uint32_t max_prompt = *std::max_element(g.prompts.begin(), g.prompts.end());
  const uint32_t max_gen = *std::max_element(g.gens.begin(), g.gens.end());
  if (max_prompt == 0 && max_gen == 0) {
    error = "nothing to measure: -p and -n are both 0";
    return false;
  }
  g.need = *std::max_element(g.depths.begin(), g.depths.end()) + std::max(max_prompt, max_gen);
  return true;
}

// Pseudo-random ids (fixed seed) as llama-bench does; the content does not change the cost.
std::vector<int32_t> bench_ids(uint32_t n, uint32_t vocab) {
  std::vector<int32_t> ids(n);
  uint64_t x = 0x2545f4914f6cdd1dull;
  for (auto& id : ids) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    id = int32_t(x % vocab);
  }
  return ids;
}

// Runs the tests of configuration `c` (its depth, weights and bandwidth set) on a started
// runtime: a ppN per -p and a tgN per -n, each REPS times after c.depth tokens.
bool run_tests(Runtime& rt, const std::vector<int32_t>& ids, const Grid& g, Config& c, std::string& error) {
  const uint32_t depth = c.depth;
  auto check = [&](const Error& e) {
    if (!e.ok()) error = std::string(to_string(e.status())) + ": " + e.message();
    return e.ok();
  };
  auto fill_depth = [&]() {
    Error e;
    for (uint32_t s = 0; s < c.slots && e.ok(); ++s) {
      e = rt.reset(s);
      if (e.ok() && depth > 0) e = rt.prefill(s, Span<const int32_t>(ids.data(), depth));
    }
    return check(e);
  };
  // One decode step of every slot: one batched pass (Runtime::run), as the scheduler runs it.
  std::vector<SlotWork> work(c.slots);
  auto decode_all = [&](const int32_t* token) {
    if (c.slots == 1) return check(rt.decode(0, *token));
    for (uint32_t s = 0; s < c.slots; ++s) {
      work[s] = SlotWork();
      work[s].slot = s;
      work[s].tokens = token;
      work[s].n = 1;
    }
    if (!check(rt.run(work.data(), c.slots))) return false;
    for (const SlotWork& w : work) {
      if (w.status != Status::Ok) {
        error = std::string("slot ") + std::to_string(w.slot) + ": " + to_string(w.status);
        return false;
      }
    }
    return true;
  };
  const std::string at = depth ? " @ d" + std::to_string(depth) : "";
  c.mean_cached = depth;
  for (const uint32_t n_prompt : g.prompts) {
    if (n_prompt == 0) continue;
    Test s;
    s.name = "pp" + std::to_string(n_prompt) + at;
    s.n_prompt = n_prompt;
    for (uint32_t r = 0; r < g.reps; ++r) {
      if (!fill_depth()) return false;
      const double t0 = now_seconds();
      const Error e = rt.prefill(0, Span<const int32_t>(ids.data() + depth, n_prompt));
      const double dt = now_seconds() - t0;
      if (!check(e)) return false;
      s.tps.push_back(n_prompt / dt);
    }
    c.tests.push_back(s);
  }
  for (const uint32_t n_gen : g.gens) {
    if (n_gen == 0) continue;
    Test s;
    s.name = "tg" + std::to_string(n_gen) + at;
    s.n_gen = n_gen;
    // Entries each decode step attends to, summed over the last repetition: depth + i for the
    // full cache, at most the budget for the bounded policies.
    double cached_sum = 0, local_sum = 0;
    const bool has_local = rt.local_kv_cache(0).shape().n_layers > 0;
    for (uint32_t r = 0; r < g.reps; ++r) {
      if (!fill_depth()) return false;
      cached_sum = local_sum = 0;
      const double t0 = now_seconds();
      for (uint32_t i = 0; i < n_gen; ++i) {
        cached_sum += rt.kv_cache(0).visible() + 1.0;
        if (has_local) local_sum += rt.local_kv_cache(0).visible() + 1.0;
        if (!decode_all(&ids[depth + i])) return false;
      }
      s.tps.push_back(double(n_gen) * c.slots / (now_seconds() - t0));
    }
    s.mean_cached = cached_sum / n_gen;
    s.mean_local_cached = local_sum / n_gen;
    c.mean_cached = s.mean_cached;
    c.mean_local_cached = s.mean_local_cached;
    c.tests.push_back(s);
  }
  // Bytes one decoded token costs: a step reads every weight once for all slots, plus each
  // slot's cached K and V of every layer it attends to, on average over a tg test (what the
  // policy holds, not the depth; local layers read their ring only).
  auto bytes = [&](double cached, double local_cached) {
    double kv = c.kv_bytes_per_cached_token * cached + c.local_kv_bytes_per_cached_token * local_cached;
    if (c.sparse.budget) {
      const double pages = std::ceil((cached - 1) / c.sparse.page);
      const double rows = std::min(cached - 1, double(c.sparse.topk + c.sparse.page - 1)) + 1;
      kv = c.kv_bytes_per_cached_token * rows + c.kv_layer_heads * pages * 2.0 * c.sparse.dims * sizeof(float) +
           c.local_kv_bytes_per_cached_token * local_cached;
    }
    return (double(c.weights_bytes) + c.slots * kv) / c.slots;
  };
  c.bytes_per_token = bytes(c.mean_cached, c.mean_local_cached);
  c.ceiling = c.gbps * 1e9 / c.bytes_per_token;
  for (Test& s : c.tests) {
    s.bytes_per_token = bytes(s.mean_cached, s.mean_local_cached);
    s.ceiling = c.gbps * 1e9 / s.bytes_per_token;
  }
  return true;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  SessionOptions so;
  const std::string help = help_text(), session_help = session_help_without_lists();
  CommandLine cl("bench", argc, argv, help.c_str(), &so, session_help.c_str());
  if (cl.help_shown()) return 0;
  Args& args = cl.args;
  std::string given[kOptCount];
  for (int i = 0; i < kOptCount; ++i) {
    if (!args.value(kOptions[i].long_name, kOptions[i].short_name, given[i])) given[i] = kOptions[i].fallback;
  }
  const bool json = args.flag("--json");
  const bool csv = args.flag("--csv");
  const bool bandwidth = args.flag("--bandwidth");
  if (!cl.finish()) return 2;
  if (json && csv) return usage_error("bench", "give one of --json and --csv");
  Grid g;
  std::string error;
  if (!parse_grid(given, g, error)) return usage_error("bench", error);

  std::unique_ptr<Printer> printer;
  if (json)
    printer = std::make_unique<JsonPrinter>();
  else if (csv)
    printer = std::make_unique<CsvPrinter>();
  else
    printer = std::make_unique<MarkdownPrinter>();
  std::map<uint32_t, double> gbps_by_threads;  // measured once per thread count
  bool begun = false;
  for (const std::string& backend : g.backends) {
    for (const uint32_t threads : g.threads) {
      for (const uint32_t slots : g.slots) {
        for (const std::string& policy : g.policies) {
          for (const uint32_t budget_given : g.budgets) {
            // A new plan; the previous one's arenas and threads are released first.
            SessionOptions o = so;
            o.backend = backend;
            if (backend != "dataflow") o.hw.clear(), o.sram_bytes = 0;  // --hw is for the dataflow rows
            o.threads = threads;
            o.slots = slots;
            o.kv_policy = policy;
            o.kv_budget = budget_given;
            auto session = std::make_unique<Session>();
            if (!session->load(o, error)) return fail("bench", error);
            if (!session->resolve_policy("full", error)) return usage_error("bench", error);
            const bool full = session->policy() == KvPolicyKind::Full;
            const uint32_t budget = uint32_t(session->kv_budget(g.need));
            if (full && budget < g.need) {
              return fail("bench", "depth + test tokens = " + std::to_string(g.need) + " exceed --kv-budget " +
                                       std::to_string(budget));
            }
            if (!session->start(budget, error)) return fail("bench", error);
            Runtime& rt = session->runtime();
            const Model& model = session->model();
            const std::vector<int32_t> ids = bench_ids(g.need, model.shape().vocab_size);
            const uint32_t t = session->threads();
            if (bandwidth && !gbps_by_threads.count(t)) {
              gbps_by_threads[t] = measure_read_bandwidth_gbps(1ull << 30, t, 5);
            }
            const ModelShape& ms = model.shape();
            const std::string& path = session->options().model_path;
            for (const uint32_t depth : g.depths) {
              Config c;
              c.model = path.substr(path.find_last_of('/') + 1);
              c.weights_bytes = model.weights_bytes();
              c.backend = backend_name(rt.backend().kind());
              c.matmul = rt.backend().kernel_name();
              c.threads = t;
              c.slots = slots;
              c.policy = kv_policy_name(session->policy());
              if (o.kv_type != KvType::F16) c.policy += std::string("+") + kv_type_name(o.kv_type);
              if (const uint32_t b = rt.memory_plan().sparse.budget) c.policy += "+topk" + std::to_string(b);
              c.budget = budget;
              c.depth = depth;
              c.reps = g.reps;
              const double row_pair = 2.0 * ms.n_kv_heads * kv_row_bytes(o.kv_type, ms.head_dim);  // K and V
              const uint32_t local_layers = rt.local_kv_cache(0).shape().n_layers;
              c.kv_bytes_per_cached_token = row_pair * (ms.n_layers - local_layers);
              c.local_kv_bytes_per_cached_token = row_pair * local_layers;
              c.sparse = rt.memory_plan().sparse;
              c.kv_layer_heads = (ms.n_layers - local_layers) * ms.n_kv_heads;
              c.gbps = bandwidth ? gbps_by_threads[t] : 0;
              if (!run_tests(rt, ids, g, c, error)) return fail("bench", error);
              if (!begun) printer->begin();
              begun = true;
              printer->config(c);
            }
          }
        }
      }
    }
  }
  printer->end();
  return 0;
}

}  // namespace keel::cli
