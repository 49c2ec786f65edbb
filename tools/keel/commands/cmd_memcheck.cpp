// keel memcheck: bounded memory as a checked property. A long prompt and generation run with
// every allocator call of the process counted (tools/alloc_probe), RSS sampled, and the arenas'
// use compared with the plan; any allocation, RSS growth after warm-up or excess fails the run.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "convert/source_file.h"
#include "keel/cli/cli_util.h"
#include "keel/cli/command.h"
#include "keel/cli/option_spec.h"
#include "keel/commands/commands.h"
#include "keel/cli/session.h"

#if KEEL_HAVE_ALLOC_PROBE
#include "alloc_probe/alloc_probe.h"
#endif

namespace keel::cli {
namespace {

// Up to the sampler options, whose lines are the sampler table's (sampler_help()).
const char kHelpHead[] =
    "usage: keel memcheck -m MODEL.keel [-n N] [-p P] [--text PATH] [--max-rss BYTES] [--json] [options]\n"
    "\n"
    "Checks that memory stays bounded on a long run. P tokens of text are tokenized and the engine\n"
    "is initialized; then the measured window starts: the prompt is prefilled and N tokens are\n"
    "sampled, each fed back (also past the end-of-sequence token). In the window every allocator\n"
    "call of the process is counted (malloc, free, new, delete and the rest, from the engine, this\n"
    "tool and every library: the keel binary links an interposer, docs/memcheck.md) and the\n"
    "resident set size (RSS) is read every K tokens. The check fails (exit 1) when\n"
    "  - any allocator call happens in the window,\n"
    "  - after the warm-up, RSS rises more than the tolerance above its highest value during it,\n"
    "  - the process's peak RSS exceeds --max-rss,\n"
    "  - the arenas used more bytes than the plan reserved.\n"
    "\n"
    "options:\n";
const char kHelpTail[] =
    "%s"
    "\n"
    "BYTES is a number with an optional K, M or G suffix (also KiB, MiB, GiB: powers of 1024).\n"
    "The KV policy defaults to the model's (keel info shows it). With --kv-policy full every\n"
    "token stays cached: the budget defaults to P + N and a smaller --kv-budget is refused before\n"
    "the run. The other policies keep the cache within --kv-budget (default: the model's).\n"
    "Exit status 0 when every check holds, 1 when one fails or the run cannot complete, 2 on a\n"
    "usage error.\n";

// "1048576", "64K", "1MiB", "2g": bytes, suffixes are powers of 1024.
bool parse_bytes(const std::string& s, uint64_t& out) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) {
    if (v > (~0ull - 9) / 10) return false;
    v = v * 10 + uint64_t(s[i++] - '0');
  }
  if (i == 0) return false;
  std::string suffix = s.substr(i);
  for (char& c : suffix) c = char(tolower(static_cast<unsigned char>(c)));
  uint64_t scale = 1;
  if (suffix == "k" || suffix == "kib")
    scale = 1ull << 10;
  else if (suffix == "m" || suffix == "mib")
    scale = 1ull << 20;
  else if (suffix == "g" || suffix == "gib")
    scale = 1ull << 30;
  else if (!suffix.empty() && suffix != "b")
    return false;
  if (v > ~0ull / scale) return false;
  out = v * scale;
  return true;
}

struct MemcheckOptions {
  uint64_t tokens = 100000, prompt_n = 1000, rss_every = 1000, inject_at = 0;
  uint64_t warmup = ~0ull;  // not given: 10% of --tokens, at most 10000
  uint64_t tolerance = 1ull << 20, max_rss = 0;
  std::string text_path = "../shared/data/paul_graham_essays";
  bool trap = false, quiet = false, json = false;
};

constexpr const char* kBytesExpected = "bytes such as 1048576, 64M or 1GiB";
bool store_tolerance(const std::string& v, MemcheckOptions& o) { return parse_bytes(v, o.tolerance); }
bool store_max_rss(const std::string& v, MemcheckOptions& o) { return parse_bytes(v, o.max_rss); }

const OptionSpec<MemcheckOptions> kMemcheckOptions[] = {
    {.long_name = "--tokens",
     .short_name = "-n",
     .metavar = "N",
     .help = "tokens generated (default 100000)",
     .kind = OptionKind::U64,
     .field = &MemcheckOptions::tokens},
    {.long_name = "--prompt-tokens",
     .short_name = "-p",
     .metavar = "P",
     .help = "prompt tokens: the start of the text (default 1000)",
     .kind = OptionKind::U64,
     .field = &MemcheckOptions::prompt_n},
    {.long_name = "--text",
     .metavar = "PATH",
     .help = "a text file, or a directory whose .txt files are read in name order\n"
             "(default ../shared/data/paul_graham_essays)",
     .field = &MemcheckOptions::text_path},
    {.long_name = "--warmup",
     .metavar = "N",
     .help = "generated tokens after which RSS must stay flat (default: 10% of N,\n"
             "at most 10000)",
     .kind = OptionKind::U64,
     .field = &MemcheckOptions::warmup},
    {.long_name = "--rss-every",
     .metavar = "K",
     .help = "read RSS every K generated tokens (default 1000)",
     .kind = OptionKind::U64,
     .field = &MemcheckOptions::rss_every},
    {.long_name = "--rss-tolerance",
     .metavar = "BYTES",
     .help = "RSS growth allowed after the warm-up (default 1MiB)",
     .kind = OptionKind::Custom,
     .store = store_tolerance,
     .expects = kBytesExpected},
    {.long_name = "--max-rss",
     .metavar = "BYTES",
     .help = "fail when the peak RSS (VmHWM: whole process, init included) exceeds\n"
             "BYTES (default: no limit)",
     .kind = OptionKind::Custom,
     .store = store_max_rss,
     .expects = kBytesExpected},
    {.long_name = "--inject-allocation",
     .metavar = "K",
     .help = "allocate and free one byte after token K, to see the check fail",
     .kind = OptionKind::U64,
     .field = &MemcheckOptions::inject_at},
    {.long_name = "--trap",
     .help = "abort at the first allocator call in the window (run under gdb to\n"
             "see the caller)",
     .kind = OptionKind::Flag,
     .field = &MemcheckOptions::trap},
    {.long_name = "--quiet",
     .short_name = "-q",
     .help = "no progress lines on stderr (default: one per 10% of N)",
     .kind = OptionKind::Flag,
     .field = &MemcheckOptions::quiet},
    {.long_name = "--json",
     .help = "print {ok, failures, allocations_after_init, frees_after_init,\n"
             "rss_start_bytes, rss_at_warmup_bytes, rss_end_bytes, rss_max_bytes,\n"
             "drift_bytes, tolerance_bytes, planned_bytes, used_bytes, tokens,\n"
             "tokens_per_second, ...} (docs/memcheck.md lists every field)",
     .kind = OptionKind::Flag,
     .field = &MemcheckOptions::json},
};

#if KEEL_HAVE_ALLOC_PROBE
// At least `want` tokens from the start of the text at `path` (a file, or a directory of .txt
// files in name order). Reads only as much text as it needs, not a whole large corpus.
bool prompt_tokens(const Model& model, const std::string& path, uint64_t want, std::vector<int32_t>& ids,
                   std::string& error) {
  std::vector<std::string> files;
  for (const std::string& n : list_directory(path)) {
    if (n.size() > 4 && n.substr(n.size() - 4) == ".txt") files.push_back(path + "/" + n);
  }
  if (files.empty()) files.push_back(path);
  std::string text;
  size_t goal = size_t(want) * 8 + 1024;  // no tokenizer we know averages 8 bytes per token
  for (size_t f = 0; f < files.size(); ++f) {
    std::string part;
    if (!convert::read_file(files[f], part, error) || part.empty()) {
      error = "cannot read the text " + files[f] +
              (files.size() == 1 ? ": expected a text file or a directory of .txt files (--text PATH; the default "
                                   "is relative to the current directory)"
                                 : "");
      return false;
    }
    text += part;
    text += "\n\n";
    if (text.size() < goal && f + 1 < files.size()) continue;
    if (!encode_text(model, text, true, false, ids, error)) return false;
    if (ids.size() >= want) {
      ids.resize(want);
      return true;
    }
    goal *= 2;
  }
  error = "the text " + path + " has " + std::to_string(ids.size()) + " tokens; --prompt-tokens asks for " +
          std::to_string(want);
  return false;
}

struct RssSample {
  uint64_t tokens;  // generated so far
  uint64_t bytes;
};

// One progress line on stderr, formatted on the stack and written with write(2): it runs inside
// the window, where nothing may allocate.
void progress(uint64_t done, uint64_t total, double seconds, uint64_t rss, uint64_t calls) {
  char line[200];
  const int n = snprintf(line, sizeof line,
                         "keel memcheck: %llu/%llu tokens (%d%%), %.1f s, %.0f t/s, RSS %.2f MiB, "
                         "allocator calls %llu\n",
                         (unsigned long long)done, (unsigned long long)total, int(100.0 * done / total), seconds,
                         seconds > 0 ? done / seconds : 0.0, rss / double(1 << 20), (unsigned long long)calls);
  if (n > 0) {
    ssize_t ignored = write(STDERR_FILENO, line, size_t(n) < sizeof line ? size_t(n) : sizeof line - 1);
    (void)ignored;
  }
}

// CPU time of the process (all threads, user + system): beside the wall time it shows how much a
// shared machine slowed the run.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::string error_text(const Error& e) { return std::string(to_string(e.status())) + ": " + e.message(); }
#endif  // KEEL_HAVE_ALLOC_PROBE

}  // namespace

int cmd_memcheck(int argc, char** argv) {
  SessionOptions so;
  const std::string help = kHelpHead + printf_literal(render_help(kMemcheckOptions) + sampler_help()) + kHelpTail;
  CommandLine cl("memcheck", argc, argv, help.c_str(), &so);
  if (cl.help_shown()) return 0;
  MemcheckOptions mo;
  std::string error;
  parse_options(cl.args, kMemcheckOptions, mo, error);
  text::SamplerConfig sc = sampler_defaults(0.8f, 0.95f);
  parse_sampler_options(cl.args, sc);
  if (!cl.finish()) return 2;
  if (!error.empty()) return usage_error("memcheck", error);
  uint64_t tokens = mo.tokens, warmup = mo.warmup;
  const uint64_t prompt_n = mo.prompt_n, rss_every = mo.rss_every, inject_at = mo.inject_at;
  const uint64_t tolerance = mo.tolerance, max_rss = mo.max_rss;
  const std::string& text_path = mo.text_path;
  [[maybe_unused]] const bool trap = mo.trap;  // unused only in builds without the probe
  [[maybe_unused]] const bool quiet = mo.quiet;
  [[maybe_unused]] const bool json = mo.json;
  if (tokens == 0) return usage_error("memcheck", "--tokens must be at least 1");
  if (prompt_n == 0) {
    return usage_error("memcheck", "--prompt-tokens must be at least 1 (the first token is sampled from its logits)");
  }
  if (rss_every == 0) return usage_error("memcheck", "--rss-every must be at least 1");
  // The samples are reserved before the window; keep them to a few hundred MB at most.
  constexpr uint64_t kMaxSamples = 10000000;
  if (tokens / rss_every > kMaxSamples) {
    return usage_error("memcheck", "--tokens / --rss-every = " + std::to_string(tokens / rss_every) +
                                       " RSS samples; at most " + std::to_string(kMaxSamples) +
                                       " are kept, raise --rss-every");
  }
  if (prompt_n > 0xffffffffull) {
    return usage_error("memcheck", "--prompt-tokens is at most 4294967295, got " + std::to_string(prompt_n));
  }
  if (tokens > (1ull << 62)) return usage_error("memcheck", "--tokens is at most 2^62, got " + std::to_string(tokens));
  if (warmup == ~0ull) warmup = std::min<uint64_t>(10000, tokens / 10);
  if (warmup > tokens) {
    return usage_error("memcheck",
                       "--warmup " + std::to_string(warmup) + " exceeds --tokens " + std::to_string(tokens));
  }
  if (inject_at > tokens) {
    return usage_error(
        "memcheck", "--inject-allocation " + std::to_string(inject_at) + " exceeds --tokens " + std::to_string(tokens));
  }
#if !KEEL_HAVE_ALLOC_PROBE
  return fail("memcheck",
              "this keel has no allocation probe: sanitizer builds leave the allocator to the "
              "sanitizers; use a build without KEEL_SANITIZE");
#else
  Session session;
  if (!session.load(so, error)) return fail("memcheck", error);
  std::vector<int32_t> ids;
  if (!prompt_tokens(session.model(), text_path, prompt_n, ids, error)) return fail("memcheck", error);
  if (!session.resolve_policy(nullptr, error)) return usage_error("memcheck", error);
  const bool full = session.policy() == KvPolicyKind::Full;
  const uint64_t sequence = prompt_n + tokens;
  const uint64_t budget = session.kv_budget(sequence);
  if (full && budget < sequence) {
    return fail("memcheck",
                "policy full keeps every token, so the KV budget must hold the prompt and the "
                "generation: " +
                    std::to_string(prompt_n) + " + " + std::to_string(tokens) + " = " + std::to_string(sequence) +
                    " tokens, --kv-budget is " + std::to_string(budget) +
                    "; raise it or choose a bounded policy (window, streaming, snapkv, snapstream)");
  }
  if (budget > 0xffffffffull) {
    return fail("memcheck", "policy full needs a KV budget of " + std::to_string(budget) +
                                " tokens; at most 4294967295 can be planned");
  }
  if (!session.start(uint32_t(budget), error)) return fail("memcheck", error);
  Runtime& rt = session.runtime();
  Error e = rt.set_sampler(0, sc);
  if (!e.ok()) return fail("memcheck", error_text(e));

  // Everything the window touches is reserved now: the RSS samples (one per K tokens, plus
  // the start, the warm-up and the end) and the prompt ids.
  std::vector<RssSample> samples;
  samples.reserve(tokens / rss_every + 4);
  uint64_t next_progress = quiet ? ~0ull : (tokens + 9) / 10;
  uint64_t rss_at_warmup = 0, generated = 0;
  Error run_error;

  // ---- the window: from the end of init through the last token ----
  if (trap) probe::set_trap(true);
  const probe::Counts before = probe::counts();
  const uint64_t rss_start = probe::rss_bytes();
  const double t0 = now_seconds(), cpu0 = cpu_seconds();
  run_error = rt.prefill(0, Span<const int32_t>(ids.data(), ids.size()));
  const double t_prefill = now_seconds();
  if (run_error.ok()) {
    samples.push_back({0, probe::rss_bytes()});
    if (warmup == 0) rss_at_warmup = samples.back().bytes;
  }
  while (run_error.ok() && generated < tokens) {
    Result<int32_t> next = rt.sample(0);
    if (!next.ok()) {
      run_error = next.error();
      break;
    }
    run_error = rt.decode(0, next.value());
    if (!run_error.ok()) break;
    ++generated;
    if (generated % rss_every == 0 || generated == warmup || generated == tokens) {
      samples.push_back({generated, probe::rss_bytes()});
      if (generated == warmup) rss_at_warmup = samples.back().bytes;
    }
    if (generated == inject_at) {
      // Deliberately outside the rules: proves the probe and the verdict are live.
      void* volatile p = malloc(1);
      free(p);
    }
    if (generated >= next_progress) {
      progress(generated, tokens, now_seconds() - t_prefill, probe::rss_bytes(), probe::since(before).calls());
      next_progress = generated + (tokens + 9) / 10;
    }
  }
  const double t_end = now_seconds(), cpu_end = cpu_seconds();
  const probe::Counts window = probe::since(before);
  probe::set_trap(false);
  // ---- end of the window ----

  if (!run_error.ok()) {
    return fail("memcheck", "after " + std::to_string(generated) + " generated tokens: " + error_text(run_error));
  }
  const uint64_t rss_end = samples.back().bytes;
  // Growth is measured against the highest RSS of the warm-up, not its last sample: the kernel
  // may reclaim cold pages (file-backed weights, code) at any time and fault them back later,
  // which is no growth. Memory that keeps growing passes any earlier peak.
  uint64_t rss_window_max = rss_start, warmup_max = rss_start, after_warmup_max = 0;
  for (const RssSample& s : samples) {
    rss_window_max = std::max(rss_window_max, s.bytes);
    if (s.tokens <= warmup) warmup_max = std::max(warmup_max, s.bytes);
    if (s.tokens >= warmup) after_warmup_max = std::max(after_warmup_max, s.bytes);
  }
  const uint64_t rss_max = std::max(probe::peak_rss_bytes(), rss_window_max);
  const uint64_t drift = after_warmup_max > warmup_max ? after_warmup_max - warmup_max : 0;
  const RuntimeStats st = rt.stats();
  const uint64_t planned = st.persistent_planned_bytes + st.scratch_planned_bytes;
  const uint64_t used = st.persistent_used_bytes + st.scratch_high_water_bytes;
  const double decode_seconds = t_end - t_prefill;
  const double tps = decode_seconds > 0 ? tokens / decode_seconds : 0.0;

  std::vector<std::string> failures;
  if (window.calls() > 0) {
    failures.push_back(std::to_string(window.calls()) + " allocator calls after init (" +
                       std::to_string(window.allocations) + " allocations of " + std::to_string(window.bytes) +
                       " bytes, " + std::to_string(window.frees) + " frees); expected 0 (--trap finds the caller)");
  }
  if (drift > tolerance) {
    failures.push_back("RSS grew " + std::to_string(drift) + " bytes after the warm-up (at most " +
                       std::to_string(warmup_max) + " up to token " + std::to_string(warmup) + ", then up to " +
                       std::to_string(after_warmup_max) + "); the tolerance is " + std::to_string(tolerance));
  }
  if (max_rss && rss_max > max_rss) {
    failures.push_back("peak RSS " + std::to_string(rss_max) + " bytes exceeds --max-rss " + std::to_string(max_rss));
  }
  if (st.persistent_used_bytes > st.persistent_planned_bytes ||
      st.scratch_high_water_bytes > st.scratch_planned_bytes) {
    failures.push_back("arena use exceeds the plan: persistent " + std::to_string(st.persistent_used_bytes) + " of " +
                       std::to_string(st.persistent_planned_bytes) + " bytes, scratch " +
                       std::to_string(st.scratch_high_water_bytes) + " of " + std::to_string(st.scratch_planned_bytes));
  }
  const bool ok = failures.empty();
  const std::string& path = session.options().model_path;

  if (json) {
    printf("{\"ok\":%s,\"failures\":[", ok ? "true" : "false");
    for (size_t i = 0; i < failures.size(); ++i) printf("%s%s", i ? "," : "", json_string(failures[i]).c_str());
    printf(
        "],\"model\":%s,\"policy\":\"%s\",\"budget\":%llu,\"backend\":\"%s\",\"matmul_kernels\":\"%s\","
        "\"threads\":%u,\"allocator\":\"%s\",\"prompt_tokens\":%zu,\"tokens\":%llu,"
        "\"sequence_length\":%llu,\"kv_evicted\":%llu,"
        "\"allocations_after_init\":%llu,\"frees_after_init\":%llu,\"bytes_allocated_after_init\":%llu,"
        "\"rss_start_bytes\":%llu,\"rss_at_warmup_bytes\":%llu,\"rss_warmup_max_bytes\":%llu,\"rss_end_bytes\":%llu,"
        "\"rss_max_bytes\":%llu,"
        "\"rss_window_max_bytes\":%llu,\"warmup_tokens\":%llu,\"drift_bytes\":%llu,\"tolerance_bytes\":%llu,"
        "\"max_rss_bytes\":%llu,\"weights_bytes\":%llu,\"planned_bytes\":%llu,\"used_bytes\":%llu,"
        "\"persistent_planned_bytes\":%llu,\"persistent_used_bytes\":%llu,\"scratch_planned_bytes\":%llu,"
        "\"scratch_high_water_bytes\":%llu,\"prefill_seconds\":%.3f,\"decode_seconds\":%.3f,"
        "\"seconds\":%.3f,\"cpu_seconds\":%.3f,\"tokens_per_second\":%.2f,\"rss_every\":%llu,\"rss_samples\":[",
        json_string(path).c_str(), kv_policy_name(session.policy()), (unsigned long long)budget,
        backend_name(rt.backend().kind()), rt.backend().kernel_name(), session.threads(), probe::allocator_name(),
        ids.size(), (unsigned long long)tokens, (unsigned long long)rt.sequence_length(0),
        (unsigned long long)rt.kv_cache(0).evicted(), (unsigned long long)window.allocations,
        (unsigned long long)window.frees, (unsigned long long)window.bytes, (unsigned long long)rss_start,
        (unsigned long long)rss_at_warmup, (unsigned long long)warmup_max, (unsigned long long)rss_end,
        (unsigned long long)rss_max, (unsigned long long)rss_window_max, (unsigned long long)warmup,
        (unsigned long long)drift, (unsigned long long)tolerance, (unsigned long long)max_rss,
        (unsigned long long)session.model().weights_bytes(), (unsigned long long)planned, (unsigned long long)used,
        (unsigned long long)st.persistent_planned_bytes, (unsigned long long)st.persistent_used_bytes,
        (unsigned long long)st.scratch_planned_bytes, (unsigned long long)st.scratch_high_water_bytes, t_prefill - t0,
        decode_seconds, t_end - t0, cpu_end - cpu0, tps, (unsigned long long)rss_every);
    for (size_t i = 0; i < samples.size(); ++i) {
      printf("%s[%llu,%llu]", i ? "," : "", (unsigned long long)samples[i].tokens,
             (unsigned long long)samples[i].bytes);
    }
    printf("]}\n");
  } else {
    printf("memcheck %s: policy %s, budget %llu, %s (%s), %u thread(s), allocator %s\n", path.c_str(),
           kv_policy_name(session.policy()), (unsigned long long)budget, backend_name(rt.backend().kind()),
           rt.backend().kernel_name(), session.threads(), probe::allocator_name());
    printf("  tokens       %zu prompt + %llu generated in %.2f s, %.2f s of CPU (decode %.1f t/s)\n", ids.size(),
           (unsigned long long)tokens, t_end - t0, cpu_end - cpu0, tps);
    printf("  allocator    %llu allocations, %llu frees after init\n", (unsigned long long)window.allocations,
           (unsigned long long)window.frees);
    printf("  RSS          start %s, at warm-up (token %llu) %s, end %s, peak %s\n", human_bytes(rss_start).c_str(),
           (unsigned long long)warmup, human_bytes(rss_at_warmup).c_str(), human_bytes(rss_end).c_str(),
           human_bytes(rss_max).c_str());
    printf("  drift        %llu bytes above the warm-up's peak (tolerance %s)%s\n", (unsigned long long)drift,
           human_bytes(tolerance).c_str(), max_rss ? (", --max-rss " + human_bytes(max_rss)).c_str() : "");
    printf("  arenas       %s used of %s planned (persistent %llu / %llu bytes, scratch high water %llu / %llu)\n",
           human_bytes(used).c_str(), human_bytes(planned).c_str(), (unsigned long long)st.persistent_used_bytes,
           (unsigned long long)st.persistent_planned_bytes, (unsigned long long)st.scratch_high_water_bytes,
           (unsigned long long)st.scratch_planned_bytes);
    printf("%s\n", ok ? "ok" : "FAILED");
  }
  fflush(stdout);
  if (!ok) {
    std::string all;
    for (const std::string& f : failures) all += (all.empty() ? "" : "; ") + f;
    return fail("memcheck", all);
  }
  return 0;
#endif
}

}  // namespace keel::cli
