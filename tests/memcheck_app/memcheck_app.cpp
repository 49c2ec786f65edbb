// A firmware-like application under keel_add_memory_check(... TARGET memcheck_app ...): it maps
// a model and takes its memory once at boot, then generates N tokens in a bounded KV cache and
// asserts, with the allocation probe CMake linked into it, that nothing allocated after init
// and that RSS stayed flat. Written the way an application would check itself in its own CI.
//
// usage: memcheck_app MODEL.keel [TOKENS]      exit 0 when every check holds, 1 otherwise
#include <cstdio>
#include <cstdlib>
#include <string>

#include "alloc_probe/alloc_probe.h"
#include "llm/runtime.h"
#include "ports/linux/backend_plan.h"
#include "ports/linux/mapped_file.h"

namespace {

constexpr uint32_t kBudgetTokens = 256;        // the KV cache holds this many tokens, whatever N is
constexpr uint64_t kToleranceBytes = 1 << 20;  // RSS growth allowed after the warm-up

int check_failed(const char* what) {
  fprintf(stderr, "memcheck_app: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: memcheck_app MODEL.keel [TOKENS]\n");
    return 2;
  }
  const uint64_t tokens = argc == 3 ? strtoull(argv[2], nullptr, 10) : 20000;
  if (tokens < 10) return check_failed("TOKENS must be at least 10");

  // ---- boot: everything that allocates happens here ----
  keel::port::MappedFile file;
  std::string error;
  if (!file.open(argv[1], error)) return check_failed(error.c_str());
  keel::Model model;
  keel::Error e = model.load(keel::Span<const uint8_t>(file.data(), file.size()));
  if (!e.ok()) return check_failed(e.message());
  keel::RuntimeConfig rc;
  rc.kv.kind = keel::KvPolicyKind::SnapStream;
  rc.plan.kv_budget_tokens = kBudgetTokens;
  rc.plan.chunk_tokens = 16;
  if (!keel::port::reserve_backend_bytes(model, rc, error)) return check_failed(error.c_str());
  const keel::MemoryPlan plan = keel::Runtime::plan(model, rc);
  // One block for both arenas, as a static array would be on a device.
  const uint64_t persistent_bytes = keel::align_up(plan.persistent_bytes, 64);
  uint8_t* block = static_cast<uint8_t*>(aligned_alloc(64, persistent_bytes + keel::align_up(plan.scratch_bytes, 64)));
  if (!block) return check_failed("cannot reserve the arenas");
  keel::Runtime rt;
  e = rt.init(model, rc, keel::Span<uint8_t>(block, plan.persistent_bytes),
              keel::Span<uint8_t>(block + persistent_bytes, plan.scratch_bytes), nullptr);
  if (!e.ok()) return check_failed(e.message());
  keel::text::SamplerConfig sc;
  sc.temperature = 0.8f;
  sc.top_k = 40;
  sc.seed = 1;
  if (!(e = rt.set_sampler(0, sc)).ok()) return check_failed(e.message());
  static const char kPrompt[] = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
  int32_t prompt[128];

  // ---- steady state: from here on the probe must not move ----
  const keel::probe::Counts before = keel::probe::counts();
  size_t n = 0;
  e = rt.tokenize(kPrompt, sizeof kPrompt - 1, keel::text::EncodeOptions{}, keel::Span<int32_t>(prompt, 128), &n);
  if (e.ok()) e = rt.prefill(0, keel::Span<const int32_t>(prompt, n));
  const uint64_t warmup = tokens / 10;
  uint64_t rss_warm = 0, rss_max_after = 0;
  for (uint64_t i = 1; e.ok() && i <= tokens; ++i) {
    const keel::Result<int32_t> t = rt.sample(0);
    if (!t.ok()) {
      e = t.error();
      break;
    }
    e = rt.decode(0, t.value());  // the end-of-sequence token too: the stream never stops
    if (i == warmup) rss_warm = keel::probe::rss_bytes();
    if (i > warmup && i % 1000 == 0) {
      const uint64_t r = keel::probe::rss_bytes();
      rss_max_after = r > rss_max_after ? r : rss_max_after;
    }
  }
  const keel::probe::Counts window = keel::probe::since(before);
  // ---- end of the steady state ----

  if (!e.ok()) return check_failed(e.message());
  const keel::RuntimeStats st = rt.stats();
  const uint64_t drift = rss_max_after > rss_warm ? rss_max_after - rss_warm : 0;
  printf(
      "memcheck_app: %llu tokens, KV budget %u, allocator %s: %llu allocations and %llu frees after init, RSS %llu "
      "bytes at token %llu, drift %llu bytes, arenas %llu + %llu bytes used of %llu + %llu planned\n",
      (unsigned long long)tokens, kBudgetTokens, keel::probe::allocator_name(), (unsigned long long)window.allocations,
      (unsigned long long)window.frees, (unsigned long long)rss_warm, (unsigned long long)warmup,
      (unsigned long long)drift, (unsigned long long)st.persistent_used_bytes,
      (unsigned long long)st.scratch_high_water_bytes, (unsigned long long)st.persistent_planned_bytes,
      (unsigned long long)st.scratch_planned_bytes);
  int status = 0;
  if (window.calls() != 0) status = check_failed("expected 0 allocator calls after init");
  if (drift > kToleranceBytes) status = check_failed("RSS grew more than 1 MiB after the warm-up");
  if (st.persistent_used_bytes > st.persistent_planned_bytes ||
      st.scratch_high_water_bytes > st.scratch_planned_bytes) {
    status = check_failed("the arenas used more than the plan");
  }
  if (rt.sequence_length(0) != n + tokens) status = check_failed("the sequence is shorter than the tokens fed");
  free(block);
  return status;
}
