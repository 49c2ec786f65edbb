// Zero allocations after init: every allocator call in the process is counted (link-time
// interposition) from the end of Runtime::init to teardown, across tokenize, prefill, 1000
// decode steps with sampling, and streaming detokenization, for every backend and weight format.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "llm/generate.h"
#include "llm/runtime.h"
#include "ports/linux/backend_plan.h"
#include "ports/linux/thread_pool.h"
#include "support/alloc_counter.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"
#include "text/stream_decoder.h"

namespace keel {
namespace {

enum class Source { Stories, SmolLM2, Gemma3 };

const convert::SourceModel* source_of(Source source) {
  return source == Source::SmolLM2  ? test::smollm2_source()
         : source == Source::Gemma3 ? test::gemma3_source()
                                    : test::stories260k_source();
}

struct Case {
  const char* name;
  Source source;
  convert::QuantMode quant;
  BackendKind backend;
  uint32_t threads;
  uint32_t decode_steps;
  KvPolicyKind policy = KvPolicyKind::Full;
  uint32_t budget = 0;  // 0: enough for the whole sequence
  KvType kv_type = KvType::F16;
  uint32_t sparse_budget = 0;  // tokens a decode step attends to (0: all)
};

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  const convert::SourceModel* src = source_of(c.source);
  ASSERT_NE(src, nullptr);
  const std::unique_ptr<test::LoadedModel> l = test::convert_and_load(*src, c.quant, std::string(c.name) + ".keel");
  ASSERT_TRUE(l && l->model.loaded());
  RuntimeConfig rc;
  rc.backend = c.backend;
  rc.kv.kind = c.policy;
  rc.plan.kv_budget_tokens = c.budget ? c.budget : c.decode_steps + 64;
  rc.plan.chunk_tokens = 16;
  rc.plan.threads = c.threads;
  rc.plan.kv_type = c.kv_type;
  rc.kv.sparse_budget = c.sparse_budget;
  std::string err;
  if (backend_supported(c.backend).ok()) {
    ASSERT_TRUE(port::reserve_backend_bytes(l->model, rc, err)) << err;
  }
  const MemoryPlan p = Runtime::plan(l->model, rc);
  struct Free {
    void operator()(uint8_t* x) const { free(x); }
  };
  std::unique_ptr<uint8_t, Free> persistent(static_cast<uint8_t*>(aligned_alloc(64, align_up(p.persistent_bytes, 64))));
  std::unique_ptr<uint8_t, Free> scratch(static_cast<uint8_t*>(aligned_alloc(64, align_up(p.scratch_bytes, 64))));
  std::unique_ptr<port::LinuxThreadPool> pool;
  if (c.threads > 1) pool = std::make_unique<port::LinuxThreadPool>(c.threads);
  Runtime rt;
  Error e = rt.init(l->model, rc, Span<uint8_t>(persistent.get(), p.persistent_bytes),
                    Span<uint8_t>(scratch.get(), p.scratch_bytes), pool ? pool->pool() : nullptr);
  if (e.status() == Status::UnsupportedBackend) {
    GTEST_SKIP() << "backend unavailable on this CPU/build: " << e.message();
  }
  ASSERT_TRUE(e.ok()) << e.message();
  text::SamplerConfig sc;
  sc.temperature = 0.8f;
  sc.top_k = 40;
  sc.top_p = 0.95f;
  sc.min_p = 0.02f;
  sc.repetition_penalty = 1.1f;
  sc.seed = 7;
  ASSERT_TRUE(rt.set_sampler(0, sc).ok());
  // Buffers the application owns are made before counting starts, as an app would at boot.
  int32_t ids[64];
  char text_out[512];
  text::StreamDecoder dec(rt.tokenizer());
  const char prompt[] = "Once upon a time, there was a little dog who liked to run in the park.";

  test::start_alloc_counting();
  size_t n = 0;
  Error te = rt.tokenize(prompt, sizeof prompt - 1, text::EncodeOptions{}, Span<int32_t>(ids, 64), &n);
  Error pe = rt.prefill(0, Span<const int32_t>(ids, n));
  uint32_t steps = 0;
  Error de;
  for (; steps < c.decode_steps && pe.ok(); ++steps) {
    Result<int32_t> t = rt.sample(0);
    if (!t.ok()) break;
    size_t k = 0;
    (void)dec.push(t.value(), Span<char>(text_out, sizeof text_out), &k);
    de = rt.decode(0, t.value());
    if (!de.ok()) break;
  }
  (void)rt.reset(0);
  // The engine's generation loop: prefill, sampling, streaming text, decode.
  GenerateOptions go;
  go.max_tokens = c.decode_steps / 4;
  go.default_stops = false;
  GenerateResult gr;
  size_t streamed = 0;
  const Error ge = generate(
      rt, 0, Span<const int32_t>(ids, n), go,
      [](void* ctx, int32_t, const char*, size_t len) {
        *static_cast<size_t*>(ctx) += len;
        return true;
      },
      &streamed, &gr);
  (void)rt.reset(0);
  const test::AllocCounts counts = test::stop_alloc_counting();
  EXPECT_TRUE(ge.ok()) << ge.message();
  EXPECT_EQ(gr.tokens_generated, go.max_tokens);
  EXPECT_GT(streamed, 0u);

  EXPECT_TRUE(te.ok()) << te.message();
  EXPECT_TRUE(pe.ok()) << pe.message();
  EXPECT_TRUE(de.ok()) << de.message();
  EXPECT_EQ(steps, c.decode_steps);
  EXPECT_EQ(counts.allocations, 0) << "allocator calls after init";
  EXPECT_EQ(counts.deallocations, 0) << "free/delete calls after init";
}

TEST(RuntimeNoAlloc, CounterSeesAllocations) {
  // Called through volatile pointers so the compiler cannot elide the pairs.
  void* (*volatile alloc_fn)(size_t) = malloc;
  void (*volatile free_fn)(void*) = free;
  void* (*volatile new_fn)(size_t) = static_cast<void* (*)(size_t)>(&::operator new[]);
  void (*volatile delete_fn)(void*) noexcept = static_cast<void (*)(void*) noexcept>(&::operator delete[]);
  test::start_alloc_counting();
  void* p = alloc_fn(10);
  void* v = new_fn(16);
  delete_fn(v);
  free_fn(p);
  const test::AllocCounts c = test::stop_alloc_counting();
  EXPECT_EQ(c.allocations, 2);
  EXPECT_EQ(c.deallocations, 2);
}

TEST(RuntimeNoAlloc, StoriesF32Ref) {
  run_case({"na_st_f32_ref", Source::Stories, convert::QuantMode::Keep, BackendKind::Ref, 1, 1000});
}
TEST(RuntimeNoAlloc, StoriesF32Native) {
  run_case({"na_st_f32_nat", Source::Stories, convert::QuantMode::Keep, BackendKind::Native, 2, 1000});
}
TEST(RuntimeNoAlloc, StoriesQ8Ref) {
  run_case({"na_st_q8_ref", Source::Stories, convert::QuantMode::Q8, BackendKind::Ref, 1, 1000});
}
TEST(RuntimeNoAlloc, StoriesQ8Native) {
  run_case({"na_st_q8_nat", Source::Stories, convert::QuantMode::Q8, BackendKind::Native, 2, 1000});
}
TEST(RuntimeNoAlloc, StoriesQ4Native) {
  run_case({"na_st_q4_nat", Source::Stories, convert::QuantMode::Q4, BackendKind::Native, 2, 1000});
}
// Small budgets: eviction and SnapKV compaction run many times within the 1000 steps.
TEST(RuntimeNoAlloc, StoriesStreamingEvicts) {
  run_case({"na_st_stream", Source::Stories, convert::QuantMode::Q8, BackendKind::Native, 2, 1000,
            KvPolicyKind::Streaming, 128});
}
TEST(RuntimeNoAlloc, StoriesSnapKvCompresses) {
  run_case({"na_st_snapkv", Source::Stories, convert::QuantMode::Q8, BackendKind::Native, 2, 1000, KvPolicyKind::SnapKV,
            128});
}
// Quantized KV rows: appended, evicted and re-rotated by SnapKV's compaction.
TEST(RuntimeNoAlloc, StoriesKvQ8SnapKv) {
  run_case({"na_st_kvq8", Source::Stories, convert::QuantMode::Q8, BackendKind::Native, 2, 1000, KvPolicyKind::SnapKV,
            128, KvType::Q8});
}
TEST(RuntimeNoAlloc, StoriesKvQ4Streaming) {
  run_case({"na_st_kvq4", Source::Stories, convert::QuantMode::Q8, BackendKind::Ref, 1, 1000, KvPolicyKind::Streaming,
            128, KvType::Q4});
}
// Sparse decode attention: page summaries on every append and compaction, selection and
// gather at every step, in planned buffers.
TEST(RuntimeNoAlloc, StoriesRocketKv) {
  run_case({"na_st_rocket", Source::Stories, convert::QuantMode::Q8, BackendKind::Native, 2, 1000,
            KvPolicyKind::RocketKV, 128, KvType::F16, 32});
}
TEST(RuntimeNoAlloc, StoriesFullSparseTopK) {
  run_case({"na_st_topk", Source::Stories, convert::QuantMode::Q8, BackendKind::Native, 2, 1000, KvPolicyKind::Full, 0,
            KvType::Q8, 64});
}
TEST(RuntimeNoAlloc, StoriesF32Xnnpack) {
  run_case({"na_st_f32_xnn", Source::Stories, convert::QuantMode::Keep, BackendKind::Xnnpack, 2, 1000});
}
// One thread: the stories cases cover the thread pool; a 2-thread SmolLM2 run takes minutes
// whenever the shared host holds a core.
TEST(RuntimeNoAlloc, SmolLM2Native) {
  run_case({"na_sm_nat", Source::SmolLM2, convert::QuantMode::Keep, BackendKind::Native, 1, 1000});
}
TEST(RuntimeNoAlloc, SmolLM2SnapStream) {
  run_case({"na_sm_snap", Source::SmolLM2, convert::QuantMode::Keep, BackendKind::Native, 1, 1000,
            KvPolicyKind::SnapStream, 256});
}
// Gemma 3: past its 512-token window the local layers' rings wrap while snapstream compresses
// the global layers' cache (per-layer KV budgets, docs/kv.md). 560 steps: the window is the
// model's, so fewer would not wrap.
TEST(RuntimeNoAlloc, Gemma3SnapStreamLocalRings) {
  run_case({"na_g3_snap", Source::Gemma3, convert::QuantMode::Keep, BackendKind::Native, 1, 560,
            KvPolicyKind::SnapStream, 96});
}

}  // namespace
}  // namespace keel
