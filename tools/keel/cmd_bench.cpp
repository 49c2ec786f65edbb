// keel bench: prefill and decode throughput, llama-bench style (test, t/s ± sd).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "keel/cli_util.h"
#include "keel/command.h"
#include "keel/commands.h"
#include "keel/membw.h"
#include "keel/session.h"

namespace keel::cli {
namespace {

const char kHelp[] =
    "usage: keel bench -m MODEL.keel [-p N] [-n N] [-d DEPTH] [-t T] [-r REPS] [--json]\n"
    "\n"
    "Measures prompt processing (ppN: N tokens prefilled) and text generation (tgN: N tokens\n"
    "decoded one at a time) on pseudo-random token ids, after DEPTH tokens already in the KV\n"
    "cache (prefilled, not timed). Each test runs REPS times on a fresh sequence; the table shows\n"
    "mean ± standard deviation of tokens per second, the JSON also the median and every sample.\n"
    "\n"
    "options:\n"
    "  -p, --n-prompt N       prompt tokens (default 512, 0 = skip)\n"
    "  -n, --n-gen N          generated tokens (default 128, 0 = skip)\n"
    "  -d, --depth N          tokens in the cache before each test (default 0)\n"
    "  -r, --repetitions N    repetitions (default 5)\n"
    "  --bandwidth            also measure DRAM read bandwidth with the same threads and report\n"
    "                         the decode ceiling: bandwidth / bytes read per token (weights + the\n"
    "                         K,V each step attends to: mean_cached_tokens, at most the budget)\n"
    "  --json                 machine-readable results\n"
    "%s";

struct Sample {
  std::string test;
  std::vector<double> tps;
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

}  // namespace

int cmd_bench(int argc, char** argv) {
  SessionOptions so;
  CommandLine cl("bench", argc, argv, kHelp, &so);
  if (cl.help_shown()) return 0;
  Args& args = cl.args;
  uint32_t n_prompt = 512, n_gen = 128, depth = 0, reps = 5;
  args.u32("--n-prompt", "-p", n_prompt);
  args.u32("--n-gen", "-n", n_gen);
  args.u32("--depth", "-d", depth);
  args.u32("--repetitions", "-r", reps);
  const bool json = args.flag("--json");
  const bool bandwidth = args.flag("--bandwidth");
  if (!cl.finish()) return 2;
  if (reps == 0) return usage_error("bench", "--repetitions must be at least 1");
  if (n_prompt == 0 && n_gen == 0) return usage_error("bench", "nothing to measure: -p and -n are both 0");

  Session session;
  std::string error;
  if (!session.load(so, error)) return fail("bench", error);
  const uint32_t need = depth + (n_prompt > n_gen ? n_prompt : n_gen);
  if (!session.resolve_policy("full", error)) return usage_error("bench", error);
  const bool full = session.policy() == KvPolicyKind::Full;
  const uint32_t budget = so.kv_budget ? so.kv_budget : full ? need : session.default_budget();
  if (full && budget < need) {
    return fail("bench", "depth + test tokens = " + std::to_string(need) + " exceed --kv-budget " + std::to_string(budget));
  }
  if (!session.start(budget, error)) return fail("bench", error);
  Runtime& rt = session.runtime();
  const uint32_t vocab = session.model().shape().vocab_size;
  // Pseudo-random ids (fixed seed) as llama-bench does; the content does not change the cost.
  std::vector<int32_t> ids(need);
  uint64_t x = 0x2545f4914f6cdd1dull;
  for (auto& id : ids) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    id = int32_t(x % vocab);
  }
  auto fill_depth = [&]() -> bool {
    Error e = rt.reset(0);
    if (e.ok() && depth > 0) e = rt.prefill(0, Span<const int32_t>(ids.data(), depth));
    if (!e.ok()) error = std::string(to_string(e.status())) + ": " + e.message();
    return e.ok();
  };
  std::vector<Sample> results;
  const std::string at = depth ? " @ d" + std::to_string(depth) : "";
  if (n_prompt > 0) {
    Sample s{"pp" + std::to_string(n_prompt) + at, {}};
    for (uint32_t r = 0; r < reps; ++r) {
      if (!fill_depth()) return fail("bench", error);
      const double t0 = now_seconds();
      const Error e = rt.prefill(0, Span<const int32_t>(ids.data() + depth, n_prompt));
      const double dt = now_seconds() - t0;
      if (!e.ok()) return fail("bench", e.message());
      s.tps.push_back(n_prompt / dt);
    }
    results.push_back(s);
  }
  // Entries each decode step attends to, summed over the last tg repetition: depth + i for the
  // full cache, at most the budget for the bounded policies.
  double cached_sum = 0;
  if (n_gen > 0) {
    Sample s{"tg" + std::to_string(n_gen) + at, {}};
    for (uint32_t r = 0; r < reps; ++r) {
      if (!fill_depth()) return fail("bench", error);
      cached_sum = 0;
      const double t0 = now_seconds();
      for (uint32_t i = 0; i < n_gen; ++i) {
        cached_sum += rt.kv_cache(0).visible() + 1.0;
        const Error e = rt.decode(0, ids[depth + i]);
        if (!e.ok()) return fail("bench", e.message());
      }
      s.tps.push_back(n_gen / (now_seconds() - t0));
    }
    results.push_back(s);
  }

  const std::string model_name = session.options().model_path.substr(session.options().model_path.find_last_of('/') + 1);
  // Bytes one decode step reads: every weight once, plus the cached K and V (f16) of every
  // layer it attends to, on average over the tg test (what the policy holds, not the depth).
  const ModelShape& ms = session.model().shape();
  const double kv_bytes_per_token = 2.0 * ms.n_layers * ms.n_kv_heads * ms.head_dim * 2;
  const double mean_cached = n_gen > 0 ? cached_sum / n_gen : depth;
  const double bytes_per_token = double(session.model().weights_bytes()) + kv_bytes_per_token * mean_cached;
  double gbps = 0, ceiling = 0;
  if (bandwidth) {
    gbps = measure_read_bandwidth_gbps(1ull << 30, session.threads(), 5);
    ceiling = gbps * 1e9 / bytes_per_token;
  }
  const char* backend = backend_name(rt.backend().kind);
  if (json) {
    printf("{\"model\":%s,\"weights_bytes\":%llu,\"backend\":\"%s\",\"matmul_kernels\":\"%s\",\"threads\":%u,"
           "\"depth\":%u,\"repetitions\":%u,\"peak_rss_bytes\":%llu,\"bytes_per_token\":%.0f,"
           "\"kv_bytes_per_cached_token\":%.0f,\"mean_cached_tokens\":%.1f,",
           json_string(model_name).c_str(), (unsigned long long)session.model().weights_bytes(), backend,
           rt.backend().matmul->name, session.threads(), depth, reps, (unsigned long long)port::peak_rss_bytes(),
           bytes_per_token, kv_bytes_per_token, mean_cached);
    if (bandwidth) printf("\"dram_read_gbps\":%.2f,\"decode_ceiling_tps\":%.2f,", gbps, ceiling);
    printf("\"results\":[");
    for (size_t i = 0; i < results.size(); ++i) {
      const Sample& s = results[i];
      printf("%s{\"test\":\"%s\",\"tps_mean\":%.3f,\"tps_sd\":%.3f,\"tps_median\":%.3f,\"samples\":[", i ? "," : "",
             s.test.c_str(), mean(s.tps), stddev(s.tps), median(s.tps));
      for (size_t k = 0; k < s.tps.size(); ++k) printf("%s%.3f", k ? "," : "", s.tps[k]);
      printf("]}");
    }
    printf("]}\n");
    return 0;
  }
  printf("| model | size | backend | threads | test | t/s |\n| --- | ---: | --- | ---: | --- | ---: |\n");
  for (const Sample& s : results) {
    printf("| %s | %s | %s (%s) | %u | %s | %.2f ± %.2f |\n", model_name.c_str(),
           human_bytes(session.model().weights_bytes()).c_str(), backend, rt.backend().matmul->name, session.threads(),
           s.test.c_str(), mean(s.tps), stddev(s.tps));
  }
  if (bandwidth) {
    printf("\nDRAM read bandwidth (%u threads): %.1f GB/s; one decode step reads %s, so the ceiling is %.1f t/s",
           session.threads(), gbps, human_bytes(uint64_t(bytes_per_token)).c_str(), ceiling);
    for (const Sample& s : results) {
      if (s.test.rfind("tg", 0) == 0) printf("; %s reaches %.0f%% of it", s.test.c_str(), 100.0 * mean(s.tps) / ceiling);
    }
    printf("\n");
  }
  return 0;
}

}  // namespace keel::cli
