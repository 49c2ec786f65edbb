// The xnnpack backend: XNNPACK's operators against the ref kernels on random data, the memory
// they take (measured before init == used in the arena, nothing allocated after init), and
// whole forward passes of stories260K (F32) against the ref backend.
//
// Tolerances:
//  - fully-connected: |y - y_ref| <= 1e-5 * sum_c |w[r][c] * x[t][c]| per output (both sum
//    in f32, in different orders; the bound is ~40x float epsilon on the sum of magnitudes).
//  - softmax: |p - p_ref| <= 1e-6 + 2e-5 * p_ref (both use a polynomial exp with ~1 ulp error;
//    measured worst 5e-6 relative).
//  - stories260K logits vs the ref backend: |l - l_ref| <= 2e-3 * max(1, max |l_ref|). The KV
//    cache is f16, so a last-bit difference in a key or value can round to a different half and
//    grow along the sequence; over the prompt + 100 greedy steps the native backend differs
//    from ref by up to 0.018 on logits of magnitude 18.6 (1e-3 relative), xnnpack by 0.011.
//    Greedy continuations must be identical token for token for 64 tokens.
#include <gtest/gtest.h>
#include <pthreadpool.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/xnnpack/xnnpack_backend.h"
#include "kernels/kernels.h"
#include "kernels/xnnpack/xnn_memory.h"
#include "kernels/xnnpack/xnn_model_ops.h"
#include "kernels/xnnpack/xnn_ops.h"
#include "llm/plan_model.h"
#include "llm/runtime.h"
#include "llm/transformer.h"
#include "ports/linux/thread_pool.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

struct Free {
  void operator()(uint8_t* p) const { std::free(p); }
};
using HostMemory = std::unique_ptr<uint8_t, Free>;

HostMemory host(uint64_t bytes) {
  return HostMemory(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64)));
}

uint64_t fc_region_bytes(uint32_t rows, uint32_t cols) { return uint64_t(rows + 64) * (cols + 17) * 4 + 8192; }

// y_ref and the per-output bound sum_c |w x|.
void fc_ref(const std::vector<float>& w, uint32_t rows, uint32_t cols, const std::vector<float>& x, uint32_t n,
            std::vector<float>& y, std::vector<float>& mag) {
  y.assign(uint64_t(n) * rows, 0.0f);
  mag.assign(uint64_t(n) * rows, 0.0f);
  const WeightView wv{fb::DType::F32, rows, cols, reinterpret_cast<const uint8_t*>(w.data())};
  kernels_ref().matmul_f(wv, x.data(), n, cols, y.data(), rows, 0, panel_count(rows));
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t r = 0; r < rows; ++r) {
      double s = 0;
      for (uint32_t c = 0; c < cols; ++c) s += std::fabs(double(w[uint64_t(r) * cols + c]) * x[uint64_t(t) * cols + c]);
      mag[uint64_t(t) * rows + r] = float(s);
    }
}

TEST(XnnpackOps, FullyConnectedMatchesRef) {
  ASSERT_TRUE(xnn::initialize().ok());
  port::LinuxThreadPool pool2(2);
  struct Shape {
    uint32_t rows, cols;
  };
  const Shape shapes[] = {{1, 1},    {64, 64}, {32, 64},   {172, 64},  {64, 172},
                          {512, 64}, {33, 70}, {576, 576}, {100, 1536}};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<float> w(uint64_t(s.rows) * s.cols);
    for (float& v : w) v = nd(rng) * 0.1f;
    HostMemory mem = host(fc_region_bytes(s.rows, s.cols));
    xnn::Region region;
    region.reset(mem.get(), fc_region_bytes(s.rows, s.cols));
    xnn::open_region(&region, false);
    xnn::FullyConnectedF32 op;
    const Error e = op.create(WeightView{fb::DType::F32, s.rows, s.cols, reinterpret_cast<const uint8_t*>(w.data())});
    xnn::close_region();
    ASSERT_TRUE(e.ok()) << e.message();
    for (uint32_t n : {1u, 2u, 5u, 64u}) {
      std::vector<float> x(uint64_t(n) * s.cols + 16);
      for (float& v : x) v = nd(rng);
      std::vector<float> yr, mag;
      fc_ref(w, s.rows, s.cols, x, n, yr, mag);
      for (pthreadpool_t tp : {pthreadpool_t(nullptr), pool2.handle()}) {
        std::vector<float> y(uint64_t(n) * s.rows + 16, NAN);
        ASSERT_TRUE(op.run(x.data(), n, y.data(), tp));
        for (uint64_t i = 0; i < uint64_t(n) * s.rows; ++i) {
          ASSERT_LE(std::fabs(y[i] - yr[i]), 1e-5f * mag[i] + 1e-30f)
              << s.rows << "x" << s.cols << " n=" << n << " i=" << i << (tp ? " 2 threads" : " 1 thread");
        }
        for (uint64_t i = uint64_t(n) * s.rows; i < y.size(); ++i) ASSERT_TRUE(std::isnan(y[i])) << "wrote past y";
      }
    }
  }
}

TEST(XnnpackOps, SetupFollowsBatchAndPointers) {
  ASSERT_TRUE(xnn::initialize().ok());
  const uint32_t rows = 48, cols = 40;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = nd(rng);
  HostMemory mem = host(fc_region_bytes(rows, cols));
  xnn::Region region;
  region.reset(mem.get(), fc_region_bytes(rows, cols));
  xnn::open_region(&region, false);
  xnn::FullyConnectedF32 op;
  ASSERT_TRUE(op.create(WeightView{fb::DType::F32, rows, cols, reinterpret_cast<const uint8_t*>(w.data())}).ok());
  xnn::close_region();
  std::vector<float> xa(7 * cols), xb(7 * cols);
  for (float& v : xa) v = nd(rng);
  for (float& v : xb) v = nd(rng);
  // Decode-like and prefill-like calls interleaved, with the inputs changing in between.
  const struct {
    std::vector<float>* x;
    uint32_t n;
  } calls[] = {{&xa, 1}, {&xa, 1}, {&xb, 7}, {&xa, 1}, {&xb, 1}, {&xa, 7}, {&xa, 7}};
  for (const auto& c : calls) {
    std::vector<float> y(c.n * rows), yr, mag;
    ASSERT_TRUE(op.run(c.x->data(), c.n, y.data(), nullptr));
    fc_ref(w, rows, cols, *c.x, c.n, yr, mag);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_LE(std::fabs(y[i] - yr[i]), 1e-5f * mag[i] + 1e-30f);
    // Changing the input in place after a run must be seen by the next run (same pointer).
    for (float& v : *c.x) v = nd(rng);
  }
  EXPECT_EQ(op.runs(), std::size(calls));
}

TEST(XnnpackOps, SoftmaxMatchesRef) {
  ASSERT_TRUE(xnn::initialize().ok());
  HostMemory mem = host(1 << 20);
  xnn::Region region;
  region.reset(mem.get(), 1 << 20);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  float worst = 0;
  for (uint32_t n : {1u, 3u, 8u, 17u, 64u, 1000u, 1024u, 8192u}) {
    for (bool with_inf : {false, true}) {
      std::vector<float> x(n + 16);
      for (float& v : x) v = nd(rng);
      if (with_inf) {
        for (uint32_t i = 1; i < n; i += 3) x[i] = -INFINITY;
      }
      std::vector<float> r(x);
      vector_kernels_ref().softmax(r.data(), n);
      xnn::open_region(&region, false);
      xnn::SoftmaxF32 op;
      const Error e = op.create(n);
      xnn::close_region();
      ASSERT_TRUE(e.ok()) << e.message();
      ASSERT_TRUE(op.run(x.data()));
      for (uint32_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(x[i] - r[i]), 1e-6f + 2e-5f * r[i]) << "n=" << n << " i=" << i;
        if (with_inf && i % 3 == 1) {
          ASSERT_EQ(x[i], 0.0f) << "-inf must give exactly 0";
        }
        worst = std::max(worst, std::fabs(x[i] - r[i]) / std::max(r[i], 1e-30f));
      }
    }
  }
  std::printf("softmax: worst relative difference to ref %.3g\n", worst);
}

TEST(XnnpackOps, NoRegionNoMemory) {
  ASSERT_TRUE(xnn::initialize().ok());
  std::vector<float> w(64 * 64, 0.5f);
  const WeightView wv{fb::DType::F32, 64, 64, reinterpret_cast<const uint8_t*>(w.data())};
  const xnn::AllocatorCounters before = xnn::allocator_counters();
  xnn::FullyConnectedF32 op;
  const Error e = op.create(wv);
  EXPECT_EQ(e.status(), Status::ArenaTooSmall) << e.message();
  EXPECT_GT(xnn::allocator_counters().refused, before.refused);
  EXPECT_EQ(xnn::allocator_counters().served, before.served);

  // A region too small for the packed weights refuses too, and keeps what it had.
  alignas(64) static uint8_t small[4096];
  xnn::Region region;
  region.reset(small, sizeof small);
  xnn::open_region(&region, false);
  xnn::FullyConnectedF32 op2;
  const Error e2 = op2.create(wv);
  xnn::close_region();
  EXPECT_EQ(e2.status(), Status::ArenaTooSmall);
  EXPECT_GE(region.largest_refused, 64u * 64u * 4u);
}

// ---- stories260K ----

// Runs backend_state_bytes() the way a host program does before reserving the arenas.
uint64_t measure_backend_bytes(const Model& m, const PlanConfig& pc, BackendKind kind) {
  const BackendPlan bp = backend_plan(pc, plan_memory(plan_shape(m), pc, KvPolicyConfig{}));
  const uint64_t work_bytes = backend_state_work_bytes(m, kind, bp);
  HostMemory work = host(work_bytes);
  Result<uint64_t> b = backend_state_bytes(m, kind, bp, Span<uint8_t>(work.get(), work_bytes));
  EXPECT_TRUE(b.ok()) << b.error().message();
  return b.ok() ? b.value() : 0;
}

TEST(XnnpackModel, MeasuredBytesEqualUse) {
  const Model& m = test::stories260k(convert::QuantMode::Keep).model;
  ASSERT_TRUE(m.loaded());
  xnn::ModelOpsConfig c;
  c.fully_connected_f32 = true;
  c.softmax = true;
  c.workers = 2;
  c.capacity_tokens = 272;
  const uint64_t work_bytes = xnn::ModelOps::work_bytes(m, c);
  HostMemory work = host(work_bytes);
  Result<uint64_t> measured = xnn::ModelOps::measure(m, c, Span<uint8_t>(work.get(), work_bytes));
  ASSERT_TRUE(measured.ok()) << measured.error().message();

  HostMemory block = host(measured.value());
  Result<xnn::ModelOps*> ops = xnn::ModelOps::create(m, c, Span<uint8_t>(block.get(), measured.value()), nullptr);
  ASSERT_TRUE(ops.ok()) << ops.error().message();
  EXPECT_EQ(ops.value()->block_used_bytes(), measured.value());
  EXPECT_EQ(ops.value()->fully_connected_count(), 5u * 7u + 1u);  // 5 layers x (q k v o gate up down) + head
  EXPECT_EQ(ops.value()->softmax_count(), 2u * ((272u + 63u) / 64u));
  // The packed copy of every F32 matrix is in the block.
  EXPECT_GT(measured.value(), (5ull * (64 * 64 * 2 + 32 * 64 * 2 + 172 * 64 * 3) + 512 * 64) * 4);
  std::printf("stories260K XNNPACK block: %llu bytes (%u fully-connected, %u softmax operators)\n",
              (unsigned long long)measured.value(), ops.value()->fully_connected_count(), ops.value()->softmax_count());

  // One granule less does not fit.
  HostMemory small = host(measured.value());
  Result<xnn::ModelOps*> no = xnn::ModelOps::create(m, c, Span<uint8_t>(small.get(), measured.value() - 64), nullptr);
  EXPECT_EQ(no.status(), Status::ArenaTooSmall);

  // The padding of a softmax row stays inside the capacity.
  EXPECT_EQ(ops.value()->padded_length(1), 64u);
  EXPECT_EQ(ops.value()->padded_length(64), 64u);
  EXPECT_EQ(ops.value()->padded_length(65), 128u);
  EXPECT_EQ(ops.value()->padded_length(260), 272u);
  EXPECT_EQ(ops.value()->padded_length(272), 272u);
}

TEST(XnnpackModel, BytesPerBackend) {
  const Model& f32 = test::stories260k(convert::QuantMode::Keep).model;
  const Model& q8 = test::stories260k(convert::QuantMode::Q8).model;
  ASSERT_TRUE(f32.loaded() && q8.loaded());
  PlanConfig pc;
  pc.kv_budget_tokens = 256;
  pc.chunk_tokens = 16;
  pc.threads = 2;
  EXPECT_EQ(measure_backend_bytes(f32, pc, BackendKind::Ref), 0u);
  EXPECT_EQ(measure_backend_bytes(f32, pc, BackendKind::Native), 0u);
  const uint64_t xnn = measure_backend_bytes(f32, pc, BackendKind::Xnnpack);
  const uint64_t aut = measure_backend_bytes(f32, pc, BackendKind::Auto);
  EXPECT_GT(xnn, aut);  // auto leaves softmax native
  EXPECT_GT(aut, 0u);
  // Auto on a model without F32 matrices uses no XNNPACK operator; xnnpack still runs softmax.
  EXPECT_EQ(measure_backend_bytes(q8, pc, BackendKind::Auto), 0u);
  EXPECT_GT(measure_backend_bytes(q8, pc, BackendKind::Xnnpack), 0u);
  // More workers or a longer cache: more softmax operators.
  PlanConfig more = pc;
  more.kv_budget_tokens = 4096;
  EXPECT_GT(measure_backend_bytes(f32, more, BackendKind::Xnnpack), xnn);
}

struct Engine {
  HostMemory persistent, scratch;
  std::unique_ptr<port::LinuxThreadPool> pool;
  Runtime rt;
  Error error;
};

std::unique_ptr<Engine> start(const Model& m, BackendKind kind, uint32_t threads, bool reserve_backend = true,
                              uint32_t chunk = 16) {
  auto e = std::make_unique<Engine>();
  RuntimeConfig rc;
  rc.backend = kind;
  rc.plan.kv_budget_tokens = 256;
  rc.plan.chunk_tokens = chunk;
  rc.plan.threads = threads;
  if (reserve_backend) rc.plan.backend_bytes = measure_backend_bytes(m, rc.plan, kind);
  const MemoryPlan p = Runtime::plan(m, rc);
  e->persistent = host(p.persistent_bytes);
  e->scratch = host(p.scratch_bytes);
  if (threads > 1) e->pool = std::make_unique<port::LinuxThreadPool>(threads);
  e->error = e->rt.init(m, rc, Span<uint8_t>(e->persistent.get(), p.persistent_bytes),
                        Span<uint8_t>(e->scratch.get(), p.scratch_bytes), e->pool ? e->pool->pool() : nullptr);
  return e;
}

int32_t argmax(Span<const float> l) {
  int32_t best = 0;
  for (size_t i = 1; i < l.size(); ++i)
    if (l[i] > l[best]) best = int32_t(i);
  return best;
}

float max_abs(Span<const float> l) {
  float m = 0;
  for (float v : l) m = std::max(m, std::fabs(v));
  return m;
}

float max_diff(Span<const float> a, Span<const float> b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::vector<int32_t> prompt_ids(Runtime& rt) {
  const char text[] =
      "Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog.";
  std::vector<int32_t> ids(256);
  size_t n = 0;
  const Error e = rt.tokenize(text, sizeof text - 1, text::EncodeOptions{}, Span<int32_t>(ids.data(), ids.size()), &n);
  EXPECT_TRUE(e.ok()) << e.message();
  ids.resize(n);
  return ids;
}

TEST(XnnpackModel, ForwardMatchesRefGreedyIdenticalNoAllocation) {
  const Model& m = test::stories260k(convert::QuantMode::Keep).model;
  ASSERT_TRUE(m.loaded());
  auto ref = start(m, BackendKind::Ref, 1);
  ASSERT_TRUE(ref->error.ok()) << ref->error.message();
  auto xnn = start(m, BackendKind::Xnnpack, 2);
  ASSERT_TRUE(xnn->error.ok()) << xnn->error.message();
  EXPECT_GT(xnn->rt.memory_plan().backend_bytes, 0u);
  EXPECT_EQ(xnn->rt.stats().persistent_used_bytes, xnn->rt.stats().persistent_planned_bytes);

  const std::vector<int32_t> ids = prompt_ids(ref->rt);
  ASSERT_GT(ids.size(), 16u);  // more than one prefill chunk

  // From the end of init on, XNNPACK may not take memory.
  const xnn::AllocatorCounters before = xnn::allocator_counters();
  ASSERT_TRUE(ref->rt.prefill(0, Span<const int32_t>(ids.data(), ids.size())).ok());
  ASSERT_TRUE(xnn->rt.prefill(0, Span<const int32_t>(ids.data(), ids.size())).ok());
  const float scale = std::max(1.0f, max_abs(ref->rt.logits(0)));
  const float prompt_diff = max_diff(xnn->rt.logits(0), ref->rt.logits(0));
  EXPECT_LE(prompt_diff, 2e-3f * scale) << "logits after the prompt";
  float worst = prompt_diff;

  // 100 greedy decode steps; each side continues from its own logits.
  std::vector<int32_t> a, b;
  for (int step = 0; step < 100; ++step) {
    a.push_back(argmax(ref->rt.logits(0)));
    b.push_back(argmax(xnn->rt.logits(0)));
    ASSERT_TRUE(ref->rt.decode(0, a.back()).ok());
    ASSERT_TRUE(xnn->rt.decode(0, b.back()).ok());
    if (a == b) {
      const float d = max_diff(xnn->rt.logits(0), ref->rt.logits(0));
      worst = std::max(worst, d);
      EXPECT_LE(d, 2e-3f * std::max(1.0f, max_abs(ref->rt.logits(0)))) << "step " << step;
    }
  }
  const xnn::AllocatorCounters after = xnn::allocator_counters();
  EXPECT_EQ(after.served, before.served) << "XNNPACK allocations after init";
  EXPECT_EQ(after.refused, before.refused) << "XNNPACK allocation attempts after init";

  ASSERT_GE(a.size(), 64u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 64, b.begin())) << "greedy continuations differ within 64 tokens";
  size_t same = 0;
  while (same < a.size() && a[same] == b[same]) ++same;
  std::printf(
      "stories260K xnnpack vs ref: max |logit diff| %.3g after the %zu-token prompt, %.3g over 100 decode "
      "steps (logit scale %.3g); greedy identical for %zu of %zu tokens\n",
      prompt_diff, ids.size(), worst, scale, same, a.size());
}

// The forward pass really hands its F32 matrices and softmax to XNNPACK (the backend's
// operators can be inspected).
TEST(XnnpackModel, ForwardDispatchesToXnnpack) {
  const Model& m = test::stories260k(convert::QuantMode::Keep).model;
  ASSERT_TRUE(m.loaded());
  for (BackendKind kind : {BackendKind::Xnnpack, BackendKind::Auto}) {
    SCOPED_TRACE(backend_name(kind));
    RuntimeConfig rc;
    rc.backend = kind;
    rc.plan.kv_budget_tokens = 64;
    rc.plan.chunk_tokens = 8;
    rc.plan.threads = 1;
    rc.plan.backend_bytes = measure_backend_bytes(m, rc.plan, kind);
    const MemoryPlan p = Runtime::plan(m, rc);
    HostMemory pm = host(p.persistent_bytes), sm = host(p.scratch_bytes);
    Runtime rt;
    const Error e =
        rt.init(m, rc, Span<uint8_t>(pm.get(), p.persistent_bytes), Span<uint8_t>(sm.get(), p.scratch_bytes), nullptr);
    ASSERT_TRUE(e.ok()) << e.message();
    const xnn::ModelOps* ops = static_cast<const XnnpackBackend&>(rt.backend()).ops();
    ASSERT_NE(ops, nullptr);
    const int32_t tokens[5] = {1, 200, 300, 17, 42};
    ASSERT_TRUE(rt.prefill(0, Span<const int32_t>(tokens, 5)).ok());
    ASSERT_TRUE(rt.decode(0, tokens[4]).ok());
    // Two passes x (5 layers x 7 matrices + the head).
    EXPECT_EQ(ops->fully_connected_runs(), 2u * 36u);
    // Softmax: per layer and head, one row per token (5 + 1 tokens, 8 heads, 5 layers).
    EXPECT_EQ(ops->softmax_runs(), kind == BackendKind::Xnnpack ? 6u * 8u * 5u : 0u);
  }
}

TEST(XnnpackModel, AutoWithoutReservedBytesIsNative) {
  const Model& m = test::stories260k(convert::QuantMode::Keep).model;
  ASSERT_TRUE(m.loaded());
  auto nat = start(m, BackendKind::Native, 1);
  auto aut = start(m, BackendKind::Auto, 1, /*reserve_backend=*/false);
  ASSERT_TRUE(nat->error.ok()) << nat->error.message();
  ASSERT_TRUE(aut->error.ok()) << aut->error.message();
  EXPECT_EQ(aut->rt.memory_plan().backend_bytes, 0u);
  const std::vector<int32_t> ids = prompt_ids(nat->rt);
  ASSERT_TRUE(nat->rt.prefill(0, Span<const int32_t>(ids.data(), ids.size())).ok());
  ASSERT_TRUE(aut->rt.prefill(0, Span<const int32_t>(ids.data(), ids.size())).ok());
  const Span<const float> a = nat->rt.logits(0), b = aut->rt.logits(0);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(XnnpackModel, XnnpackWithoutReservedBytesIsRefused) {
  const Model& m = test::stories260k(convert::QuantMode::Keep).model;
  ASSERT_TRUE(m.loaded());
  auto e = start(m, BackendKind::Xnnpack, 1, /*reserve_backend=*/false);
  EXPECT_EQ(e->error.status(), Status::ArenaTooSmall);
  EXPECT_NE(std::string(e->error.message()).find("backend_state_bytes"), std::string::npos) << e->error.message();
}

}  // namespace
}  // namespace keel
