// The dataflow backend (docs/emulator.md): hardware descriptions checked field by field, a
// schedule that never exceeds the SRAM and refuses what cannot fit, output equal to the native
// backend's, executed counters equal to the analytic walk, and the exact off-chip byte count of
// a decode token when nothing stays on chip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/dataflow_backend.h"
#include "emulate/cost_model.h"
#include "emulate/hw_json.h"
#include "kv/snapkv.h"
#include "llm/runtime.h"
#include "ports/linux/backend_plan.h"
#include "ports/linux/mapped_file.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

HwDesc preset(const char* name) {
  HwDesc h;
  std::string err;
  EXPECT_TRUE(hw::load_hw(name, h, err)) << err;
  return h;
}

using test::load_keel;

const std::string& smollm2_keel() {
  static const std::string path = [] {
    const std::string out = test::tmp_path("smollm2_dataflow.keel");
    const auto r = test::run_cli("convert '" + test::require_file(test::smollm2_gguf()) + "' -o '" + out + "' -q");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return out;
  }();
  return path;
}

using Engine = test::TestRuntime;

std::unique_ptr<Engine> start(const Model& model, BackendKind kind, const DfMemory* hw, KvPolicyKind policy,
                              uint32_t budget, uint32_t chunk, const KvPolicyConfig* kv = nullptr) {
  RuntimeConfig cfg;
  cfg.backend = kind;
  cfg.plan.kv_budget_tokens = budget;
  cfg.plan.chunk_tokens = chunk;
  cfg.plan.threads = 1;
  cfg.plan.dataflow_memory = hw;
  if (kv) cfg.kv = *kv;
  cfg.kv.kind = policy;
  auto e = std::make_unique<Engine>(model, cfg);
  EXPECT_TRUE(e->error.ok()) << to_string(e->error.status()) << ": " << e->error.message();
  if (!e->error.ok()) return nullptr;
  return e;
}

const DataflowBackend& dataflow(Engine& e) { return static_cast<const DataflowBackend&>(e.runtime.backend()); }

DfCounterSet minus(const DfCounterSet& a, const DfCounterSet& b) {
  DfCounterSet d = a;
  for (uint32_t i = 0; i < kDfOps; ++i) d.op[i].subtract(b.op[i]);
  return d;
}

std::vector<int32_t> prompt_ids(uint32_t n, uint32_t vocab) {
  std::vector<int32_t> ids(n);
  for (uint32_t i = 0; i < n; ++i) ids[i] = int32_t((uint64_t(i) * 7919 + 13) % vocab);
  return ids;
}

// Greedy ids after the prompt, and the logits of every step.
void greedy(Runtime& rt, const std::vector<int32_t>& prompt, size_t count, std::vector<int32_t>& ids,
            std::vector<std::vector<float>>& logits) {
  ASSERT_TRUE(rt.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
  for (size_t i = 0; i < count; ++i) {
    const Span<const float> l = rt.logits(0);
    logits.emplace_back(l.data(), l.data() + l.size());
    const Result<int32_t> id = rt.sample(0);
    ASSERT_TRUE(id.ok());
    ids.push_back(id.value());
    ASSERT_TRUE(rt.decode(0, id.value()).ok());
  }
}

// Greedy decoding of the same prompt on both engines, whose ids must be equal; the largest
// |logit difference| over every step.
float greedy_max_logit_difference(Engine& native, Engine& df, const std::vector<int32_t>& prompt, size_t count) {
  std::vector<int32_t> a, b;
  std::vector<std::vector<float>> la, lb;
  greedy(native.runtime, prompt, count, a, la);
  greedy(df.runtime, prompt, count, b, lb);
  EXPECT_EQ(a, b);
  EXPECT_EQ(la.size(), lb.size());
  float worst = 0;
  for (size_t i = 0; i < la.size() && i < lb.size(); ++i)
    for (size_t j = 0; j < la[i].size(); ++j) worst = std::max(worst, std::fabs(la[i][j] - lb[i][j]));
  return worst;
}

TEST(DataflowHw, PresetsLoad) {
  for (const hw::Preset& p : hw::presets()) {
    HwDesc h;
    std::string err;
    ASSERT_TRUE(hw::parse_hw_json(p.json, p.name, h, err)) << err;
    EXPECT_STREQ(h.name, p.name);
    EXPECT_GE(h.tier_count, 1u);
    // What --calibrate writes reads back the same.
    HwDesc back;
    ASSERT_TRUE(hw::parse_hw_json(hw::hw_to_json(h, "test"), "roundtrip", back, err)) << err;
    EXPECT_EQ(back.sram_bytes, h.sram_bytes);
    EXPECT_EQ(back.macs_per_cycle_int8, h.macs_per_cycle_int8);
    EXPECT_FALSE(h.serial) << p.name;  // accelerators overlap transfers with compute
    h.serial = true;
    ASSERT_TRUE(hw::parse_hw_json(hw::hw_to_json(h, "test"), "roundtrip", back, err)) << err;
    EXPECT_TRUE(back.serial);
  }
  const HwDesc s = preset("sn40l");
  EXPECT_EQ(s.sram_bytes, 520ull << 20);
  EXPECT_EQ(s.tiers[0].capacity_bytes, 64ull << 30);
  EXPECT_DOUBLE_EQ(s.tiers[0].bandwidth_bytes_per_s, 25.6e12 / 16);
  // 638 BF16 TFLOPS = 2 flops per MAC.
  EXPECT_NEAR(s.macs_per_cycle_bf16 * s.clock_hz * 2, 638e12, 1e9);
}

TEST(DataflowHw, ErrorsNameTheField) {
  const std::string good = hw::presets()[1].json;
  struct Case {
    std::string from, to, field;
  } cases[] = {
      {"\"bytes\": 2097152", "\"bytes\": -1", "sram.bytes"},
      {"\"clock_hz\": 1.0e9", "\"clock_hz\": \"fast\"", "clock_hz"},
      {"\"int8\": 1000", "\"int9\": 1000", "compute.macs_per_cycle.int9: unknown field"},
      {"\"bandwidth_bytes_per_s\": 1.6e10", "\"bandwidth_bytes_per_s\": 0", "offchip[0].bandwidth_bytes_per_s"},
      {"\"dma_engines\": 2", "\"dma_engines\": 2.5", "dma_engines"},
      {"\"vector_elems_per_cycle\": 64", "\"vector\": 64", "compute.vector"},
      {"\"dma_engines\": 2", "\"dma_engines\": 2, \"serial\": \"yes\"", "serial: expected true or false"}};
  for (const Case& c : cases) {
    std::string text = good;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    HwDesc h;
    std::string err;
    EXPECT_FALSE(hw::parse_hw_json(text, "x.json", h, err));
    EXPECT_NE(err.find("x.json: " + c.field), std::string::npos) << err;
  }
  HwDesc h;
  std::string err;
  EXPECT_FALSE(hw::parse_hw_json("{", "x.json", h, err));
  EXPECT_FALSE(hw::load_hw("/nonexistent/hw.json", h, err));
  EXPECT_NE(err.find("neither a preset"), std::string::npos) << err;
}

// The cost of one op's counters, by hand: 1000 int8 MACs at 10/cycle and 40 vector elements at
// 4/cycle = 110 compute cycles; 300 SRAM bytes at 10/cycle = 30; 2000 tier bytes at 1e10 B/s
// and 1 GHz = 200; 4 transfers of 5 ns. Overlapped (double-buffered, not serial): the largest
// term plus the first transfer of each of the 2 calls; serial, or single-buffered: the sum, the
// latency of every transfer shared by the 2 DMA engines.
// The hardware and counters of the two cost tests below.
HwDesc hand_checked_hw() {
  HwDesc hw;
  hw.clock_hz = 1e9;
  hw.macs_per_cycle_int8 = hw.macs_per_cycle_bf16 = hw.macs_per_cycle_f32 = 10;
  hw.vector_elems_per_cycle = 4;
  hw.sram_bytes_per_cycle = 10;
  hw.tier_count = 1;
  hw.tiers[0].bandwidth_bytes_per_s = 1e10;
  hw.tiers[0].latency_ns = 5;
  hw.dma_engines = 2;
  return hw;
}
DfCounters hand_checked_counters() {
  DfCounters c;
  c.calls = 2, c.macs_int8 = 1000, c.vector_elems = 40, c.sram_bytes = 300;
  c.tier_bytes[0] = 2000, c.tier_transfers[0] = 4;
  return c;
}

TEST(DataflowCost, SerialHardwareAddsWhatDoubleBufferingOverlaps) {
  HwDesc hw = hand_checked_hw();
  const DfCounters c = hand_checked_counters();
  const DfCost overlapped = df_cost(c, hw, true, DfOp::QkvProj);
  EXPECT_DOUBLE_EQ(overlapped.compute_cycles, 110);
  EXPECT_DOUBLE_EQ(overlapped.total_cycles, 200 + 2 * 5);
  EXPECT_EQ(overlapped.bound, DfBound::Tier0);
  const DfCost single = df_cost(c, hw, false, DfOp::QkvProj);
  EXPECT_DOUBLE_EQ(single.total_cycles, 110 + 30 + 200 + 4 * 5 / 2.0);
  hw.serial = true;
  const DfCost serial = df_cost(c, hw, true, DfOp::QkvProj);
  EXPECT_DOUBLE_EQ(serial.total_cycles, single.total_cycles);
  EXPECT_DOUBLE_EQ(serial.stall_cycles, 30 + 200 + 10);
  EXPECT_EQ(serial.bound, DfBound::Tier0);
}

// A host's cache, per-call overhead and weight unpacking, by hand: the counters above plus 500
// weight elements, on serial hardware with a 1000-byte cache at 4e10 B/s under a 4000-byte
// footprint (a quarter cached): 1500 tier bytes at 1e10 B/s = 150 cycles, 500 at 4e10 = 12.5;
// 2 calls of 7 ns = 14; 500 weight elements at 50/cycle = 10 more compute cycles. Without them
// the cost is what it was; the description's JSON carries them and reads them back.
TEST(DataflowCost, HostCacheAndCallOverhead) {
  HwDesc hw = hand_checked_hw();
  std::snprintf(hw.name, sizeof hw.name, "host");
  std::snprintf(hw.tiers[0].name, sizeof hw.tiers[0].name, "dram");
  hw.tiers[0].capacity_bytes = 1 << 30;
  hw.sram_bytes = 1 << 20;
  hw.serial = true;
  DfCounters c = hand_checked_counters();
  c.weight_elems = 500;
  const double before = df_cost(c, hw, true, DfOp::QkvProj, DfReuse{0.25}).total_cycles;
  EXPECT_DOUBLE_EQ(before, 110 + 30 + 200 + 10);  // no cache in the description: fraction ignored
  hw.cache_bytes = 1000, hw.cache_bandwidth_bytes_per_s = 4e10, hw.call_overhead_ns = 7;
  hw.weight_elems_per_cycle = 50;
  EXPECT_DOUBLE_EQ(df_cached_fraction(hw, 4000), 0.25);
  EXPECT_DOUBLE_EQ(df_cached_fraction(hw, 800), 1.0);
  const DfCost k = df_cost(c, hw, true, DfOp::QkvProj, DfReuse{df_cached_fraction(hw, 4000)});
  EXPECT_DOUBLE_EQ(k.tier_cycles[0], 150);
  EXPECT_DOUBLE_EQ(k.cache_cycles, 12.5);
  EXPECT_DOUBLE_EQ(k.overhead_cycles, 14);
  EXPECT_DOUBLE_EQ(k.compute_cycles, 110 + 10);
  EXPECT_DOUBLE_EQ(k.total_cycles, 120 + 30 + 150 + 12.5 + 10 + 14);
  // SnapKV scoring: the re-read half of its off-chip bytes comes from SRAM (1000 bytes at 10 per
  // cycle), the first reads split between cache and DRAM as above; other ops ignore the term.
  DfReuse reuse;
  reuse.cached = 0.25, reuse.kv_policy_reread = 0.5;
  const DfCost snap = df_cost(c, hw, true, DfOp::KvPolicy, reuse);
  EXPECT_DOUBLE_EQ(snap.sram_cycles, 30 + 100);
  EXPECT_DOUBLE_EQ(snap.tier_cycles[0], 75);
  EXPECT_DOUBLE_EQ(snap.cache_cycles, 6.25);
  EXPECT_DOUBLE_EQ(snap.latency_cycles, 5);
  EXPECT_DOUBLE_EQ(df_cost(c, hw, true, DfOp::QkvProj, reuse).total_cycles, k.total_cycles);
  // 32 queries x a group of 3 read one head's keys (100 entries x 64 x 2 bytes): all but the first
  // read are re-reads while they fit the SRAM, none when they do not.
  DfModel m;
  m.shape.n_heads = 9, m.shape.n_kv_heads = 3, m.shape.head_dim = 64;
  SnapCompression j;
  j.queries = 32, j.total = 100;
  hw.sram_bytes = 12800;
  EXPECT_DOUBLE_EQ(df_snap_reread_fraction(hw, m, j), 1.0 - 1.0 / 96);
  hw.sram_bytes = 12799;
  EXPECT_DOUBLE_EQ(df_snap_reread_fraction(hw, m, j), 0);
  HwDesc back;
  std::string err;
  ASSERT_TRUE(hw::parse_hw_json(hw::hw_to_json(hw, "test"), "x.json", back, err)) << err;
  EXPECT_EQ(back.cache_bytes, 1000u);
  EXPECT_DOUBLE_EQ(back.cache_bandwidth_bytes_per_s, 4e10);
  EXPECT_DOUBLE_EQ(back.call_overhead_ns, 7);
  EXPECT_DOUBLE_EQ(back.weight_elems_per_cycle, 50);
  std::string text = hw::hw_to_json(hw, "test");
  const std::string rate = "\"bandwidth_bytes_per_s\": 40000000000.0";
  ASSERT_NE(text.find(rate), std::string::npos) << text;
  text.replace(text.find(rate), rate.size(), "\"bandwidth_bytes_per_s\": -1");
  EXPECT_FALSE(hw::parse_hw_json(text, "x.json", back, err));
  EXPECT_TRUE(test::mentions(err, {"x.json", "cache.bandwidth_bytes_per_s", "positive"}));
}

// A measured share curve decides the cached fraction in place of cache / footprint: 1 up to the
// measured cache (64 units), 0 from the next probe on (128), interpolated in log size between
// (96 is 0.585 of the way from 64 to 128), the end points' shares beyond the ends; it reads
// back from JSON, and a curve out of order or a share above 1 is refused naming the point.
TEST(DataflowCost, CacheShareCurveClassesAFootprintBySize) {
  HwDesc hw = hand_checked_hw();
  std::snprintf(hw.name, sizeof hw.name, "host");
  std::snprintf(hw.tiers[0].name, sizeof hw.tiers[0].name, "dram");
  hw.tiers[0].capacity_bytes = 1 << 30;
  hw.sram_bytes = 1 << 20;
  hw.cache_bytes = 100, hw.cache_bandwidth_bytes_per_s = 4e10;
  EXPECT_DOUBLE_EQ(df_cached_fraction(hw, 400), 0.25);
  hw.cache_share_points = 3;
  hw.cache_share_bytes[0] = 32, hw.cache_share_bytes[1] = 64, hw.cache_share_bytes[2] = 128;
  hw.cache_share[0] = 1, hw.cache_share[1] = 1, hw.cache_share[2] = 0;
  EXPECT_DOUBLE_EQ(df_cached_fraction(hw, 8), 1.0);
  EXPECT_DOUBLE_EQ(df_cached_fraction(hw, 64), 1.0);
  EXPECT_NEAR(df_cached_fraction(hw, 96), 1.0 - std::log(1.5) / std::log(2.0), 1e-12);
  EXPECT_DOUBLE_EQ(df_cached_fraction(hw, 128), 0.0);
  EXPECT_DOUBLE_EQ(df_cached_fraction(hw, 400), 0.0);
  HwDesc back;
  std::string err;
  const std::string text = hw::hw_to_json(hw, "test");
  ASSERT_TRUE(hw::parse_hw_json(text, "x.json", back, err)) << err;
  ASSERT_EQ(back.cache_share_points, 3u);
  EXPECT_EQ(back.cache_share_bytes[2], 128u);
  EXPECT_DOUBLE_EQ(back.cache_share[1], 1.0);
  EXPECT_DOUBLE_EQ(df_cached_fraction(back, 96), df_cached_fraction(hw, 96));
  std::string bad = text;
  const std::string second = "\"bytes\": 64";
  ASSERT_NE(bad.find(second), std::string::npos) << bad;
  bad.replace(bad.find(second), second.size(), "\"bytes\": 16");
  EXPECT_FALSE(hw::parse_hw_json(bad, "x.json", back, err));
  EXPECT_TRUE(test::mentions(err, {"x.json", "cache.share_curve[1].bytes", "32"}));
  hw.cache_share[0] = 1.5;
  EXPECT_FALSE(hw::parse_hw_json(hw::hw_to_json(hw, "test"), "x.json", back, err));
  EXPECT_TRUE(test::mentions(err, {"x.json", "cache.share_curve[0].share", "0 to 1"}));
}

DfModel smollm2_shape(fb::DType t) {
  DfModel m;
  m.shape = ModelShape{49152, 576, 30, 9, 3, 64, 1536, 8192};
  m.set_dtypes(t, t);
  m.lm_head_dtype = t;
  return m;
}

TEST(DataflowSchedule, PeakWithinCapacityAndRefusal) {
  for (uint64_t sram : {512ull << 10, 1ull << 20, 2ull << 20, 8ull << 20, 64ull << 20, 1ull << 30}) {
    for (uint32_t cap : {80u, 1088u, 8256u, 32832u}) {
      for (uint32_t slots : {1u, 4u, 16u}) {
        DfScheduleInput in;
        in.model = smollm2_shape(fb::DType::Q4);
        in.memory = df_memory(preset("edge-npu-2mib"));
        in.memory.sram_bytes = sram;
        in.kv_capacity_tokens = cap;
        in.slots = slots;
        in.chunk_tokens = 64;
        const DfSchedule s = df_schedule(in);
        if (!s.fits) {
          const std::string why = s.refusal;
          EXPECT_TRUE(why.find("largest:") != std::string::npos ||
                      why.find("off-chip tier 'lpddr'") != std::string::npos)
              << why;
          continue;
        }
        EXPECT_LE(s.peak_bytes, sram);
        for (uint32_t b = 0; b + 1 < kDfBufs; ++b) EXPECT_LE(s.offset[b] + s.bytes[b], s.offset[b + 1]);
        EXPECT_EQ(s.kv_onchip, s.bytes[uint32_t(DfBuf::KvResident)] == s.kv_total_bytes && s.kv_total_bytes > 0);
      }
    }
  }
  DfScheduleInput in;
  in.model = smollm2_shape(fb::DType::Q4);
  in.memory = df_memory(preset("edge-npu-2mib"));
  in.memory.sram_bytes = 64 << 10;
  in.kv_capacity_tokens = 1088;
  in.chunk_tokens = 64;
  const DfSchedule s = df_schedule(in);
  EXPECT_FALSE(s.fits);
  EXPECT_NE(std::string(s.refusal).find("activations"), std::string::npos) << s.refusal;
  EXPECT_NE(std::string(s.refusal).find("65536"), std::string::npos) << s.refusal;
}

// Nothing resident: a decode token reads every weight once, K and V of every cached entry and
// itself, and writes its own K and V.
TEST(DataflowSchedule, OffchipBytesPerDecodeTokenAreExact) {
  for (const fb::DType t : {fb::DType::Q4, fb::DType::Q8, fb::DType::BF16}) {
    DfScheduleInput in;
    in.model = smollm2_shape(t);
    in.memory = df_memory(preset("edge-npu-2mib"));
    in.kv_capacity_tokens = 4096 + 16;
    in.chunk_tokens = 16;
    const DfSchedule s = df_schedule(in);
    ASSERT_TRUE(s.fits) << s.refusal;
    ASSERT_FALSE(s.kv_onchip);
    ASSERT_FALSE(s.weights_onchip);
    const ModelShape& m = in.model.shape;
    for (uint32_t cached : {0u, 100u, 1000u, 4000u}) {
      DfCounterSet c;
      df_count_forward(s, in.model, DfPass{.n = 1, .visible = cached}, c);
      const uint64_t kv_row = uint64_t(m.n_layers) * m.n_kv_heads * m.head_dim * 2;  // f16, one of K or V
      EXPECT_EQ(c.total().tier_bytes[0], s.weight_bytes + 2 * kv_row * (cached + 1) + 2 * kv_row) << cached;
    }
    // A chunk's rows share each norm weight: it is read once per chunk, not once per row.
    DfCounterSet chunk;
    df_count_forward(s, in.model, DfPass{.n = 16, .visible = 100}, chunk);
    EXPECT_EQ(chunk.op[uint32_t(DfOp::Norm)].tier_bytes[0], (2ull * m.n_layers + 1) * m.dim * 4);
    EXPECT_EQ(chunk.op[uint32_t(DfOp::Norm)].calls, 2ull * m.n_layers * 16 + 1);
  }
}

// stories260K: the dataflow backend, its SRAM made small so that every op runs in several
// tiles, gives the native backend's greedy continuation and logits within 4e-3 (attention sums
// values tile by tile, so the summation order differs; head size 8 has no order-preserving
// continuation, and how far the orders drift apart depends on how the compiler vectorizes the
// portable loops: 4.0e-4 measured in the Release build, 1.5e-3 in the sanitizer build at -O2).
TEST(DataflowBackend, Stories260KMatchesNative) {
  auto l = load_keel(test::stories260k_keel());
  ASSERT_NE(l, nullptr);
  DfMemory hw = df_memory(preset("edge-npu-2mib"));
  hw.sram_bytes = 160 << 10;
  auto native = start(l->model, BackendKind::Native, nullptr, KvPolicyKind::Full, 512, 16);
  auto df = start(l->model, BackendKind::Dataflow, &hw, KvPolicyKind::Full, 512, 16);
  ASSERT_NE(native, nullptr);
  ASSERT_NE(df, nullptr);
  const DfSchedule& s = dataflow(*df).schedule();
  EXPECT_LT(s.kv_tile_tokens, 512u);
  EXPECT_LT(s.tile_panels * kPanelRows, l->model.shape().vocab_size);
  EXPECT_LE(s.peak_bytes, hw.sram_bytes);
  const std::vector<int32_t> prompt = {1};
  const float worst = greedy_max_logit_difference(*native, *df, prompt, 200);
  EXPECT_LE(worst, 4e-3f);
  std::printf("[dataflow] stories260K: 200 greedy ids equal, max |logit difference| %g\n", double(worst));
}

// A bounded policy's schedule is the same for every token: past the budget every decode token
// moves exactly the same bytes (SnapKV scoring, kv_policy, aside).
TEST(DataflowBackend, BoundedPolicySameCountersEveryToken) {
  auto l = load_keel(test::stories260k_keel());
  ASSERT_NE(l, nullptr);
  DfMemory hw = df_memory(preset("edge-npu-2mib"));
  auto df = start(l->model, BackendKind::Dataflow, &hw, KvPolicyKind::Streaming, 64, 16);
  ASSERT_NE(df, nullptr);
  Runtime& rt = df->runtime;
  const std::vector<int32_t> prompt = prompt_ids(100, l->model.shape().vocab_size);
  ASSERT_TRUE(rt.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
  DfCounterSet first;
  for (int step = 0; step < 20; ++step) {
    const DfCounterSet before = dataflow(*df).counters();
    ASSERT_TRUE(rt.decode(0, 5).ok());
    DfCounterSet d = minus(dataflow(*df).counters(), before);
    d.op[uint32_t(DfOp::KvPolicy)] = DfCounters();
    if (step == 0) first = d;
    for (uint32_t i = 0; i < kDfOps; ++i)
      EXPECT_TRUE(d.op[i] == first.op[i]) << df_op_name(DfOp(i)) << " step " << step;
  }
}

// Snapstream's SnapKV compressions, prompt chunk by prompt chunk past the budget (each chunk one
// prefill call, so no lookahead): the backend's kv_policy counters (scoring) and kv_compact
// counters (selection and compaction, as the KV manager reports them) equal
// df_count_snap_compression's for the shape the policy's settings give, and every other class
// equals the forward walk, through several compressions.
TEST(DataflowBackend, SnapScoringExecutedEqualsAnalytic) {
  auto l = load_keel(test::stories260k_keel());
  ASSERT_NE(l, nullptr);
  DfMemory hw = df_memory(preset("edge-npu-2mib"));
  hw.sram_bytes = 160 << 10;
  const uint32_t budget = 64, chunk = 16;
  auto df = start(l->model, BackendKind::Dataflow, &hw, KvPolicyKind::SnapStream, budget, chunk);
  ASSERT_NE(df, nullptr);
  Runtime& rt = df->runtime;
  const DfModel m = df_model(l->model);
  const std::vector<int32_t> prompt = prompt_ids(160, l->model.shape().vocab_size);
  uint32_t compressions = 0;
  for (uint32_t at = 0; at < prompt.size(); at += chunk) {
    const KvCache& kv = rt.kv_cache(0);
    DfCounterSet analytic;
    df_count_forward(dataflow(*df).schedule(), m, DfPass{.n = chunk, .visible = kv.visible(), .prefix = kv.prefix()},
                     analytic);
    if (kv.visible() + chunk > budget) {
      // The shape from the settings: the observation window, the ring (budget / 4) and the
      // sinks fixed, the rest competing; the kept prefix re-rotated.
      const KvPolicyConfig& p = rt.config().kv;
      const uint32_t planned = kv.shape().obs_window;
      SnapCompression j;
      j.queries = p.obs_window < planned ? p.obs_window : planned;
      j.total = kv.visible() + chunk, j.prefix = kv.prefix();
      const uint32_t ring = snapstream_window(p, budget);
      const uint32_t ring_keep = ring < kv.ring_len() + chunk ? ring : kv.ring_len() + chunk;
      const uint32_t tail = ring_keep > j.queries ? ring_keep : j.queries;
      j.candidates = j.total - p.sinks - tail;
      j.kept = budget;
      j.rotated = budget - ring_keep;
      j.pool_kernel = snapkv_kernel(snap_kernel_of(p), j.candidates, budget - p.sinks - tail);
      const SnapCompression planned_by_policy = rt.kv_manager().next_compression(kv, chunk, true, false);
      EXPECT_EQ(planned_by_policy.queries, j.queries);
      EXPECT_EQ(planned_by_policy.candidates, j.candidates);
      EXPECT_EQ(planned_by_policy.pool_kernel, j.pool_kernel);
      EXPECT_EQ(planned_by_policy.kept, j.kept);
      EXPECT_EQ(planned_by_policy.rotated, j.rotated);
      df_count_snap_compression(dataflow(*df).schedule(), m, j, analytic);
      ++compressions;
    }
    const DfCounterSet before = dataflow(*df).counters();
    ASSERT_TRUE(rt.prefill(0, Span<const int32_t>(prompt.data() + at, chunk)).ok());
    const DfCounterSet d = minus(dataflow(*df).counters(), before);
    for (uint32_t i = 0; i < kDfOps; ++i)
      EXPECT_TRUE(d.op[i] == analytic.op[i])
          << df_op_name(DfOp(i)) << " at " << at << ": executed " << d.op[i].calls << " calls, " << d.op[i].macs_bf16
          << " MACs; analytic " << analytic.op[i].calls << ", " << analytic.op[i].macs_bf16;
    EXPECT_LE(rt.kv_cache(0).visible(), budget);
  }
  EXPECT_GE(compressions, 5u);
  EXPECT_GT(dataflow(*df).counters().op[uint32_t(DfOp::KvPolicy)].macs_bf16, 0u);
  EXPECT_GT(dataflow(*df).counters().op[uint32_t(DfOp::KvCompact)].vector_elems, 0u);
}

// RocketKV's sparse decode with a top-k larger than the cache, so that every page is chosen and
// what a step gathers is known without its scores: per global layer and KV head the page
// selection (KvSelect) and an attention call over every cached entry, executed equal to the
// walk given that shape, decode token by decode token, with an index-rotated prefix (two frames)
// after the prompt's compressions.
TEST(DataflowBackend, SparseDecodeExecutedEqualsAnalytic) {
  auto l = load_keel(test::stories260k_keel());
  ASSERT_NE(l, nullptr);
  DfMemory hw = df_memory(preset("edge-npu-2mib"));
  hw.sram_bytes = 160 << 10;
  const uint32_t budget = 64, chunk = 16;
  KvPolicyConfig kv;
  kv.sparse_budget = 256;
  kv.rocket_topk = 128;
  auto df = start(l->model, BackendKind::Dataflow, &hw, KvPolicyKind::RocketKV, budget, chunk, &kv);
  ASSERT_NE(df, nullptr);
  Runtime& rt = df->runtime;
  const SparseSplit& split = rt.memory_plan().sparse;
  ASSERT_EQ(split.topk, 128u);
  const DfModel m = df_model(l->model);
  const std::vector<int32_t> prompt = prompt_ids(160, m.shape.vocab_size);
  ASSERT_TRUE(rt.prefill(0, Span<const int32_t>(prompt.data(), prompt.size())).ok());
  for (uint32_t step = 0; step < 8; ++step) {
    const KvCache& cache = rt.kv_cache(0);
    ASSERT_GT(cache.page_count(), 0u);
    DfSparseDecode d;
    d.select.group = m.shape.n_heads / m.shape.n_kv_heads;
    d.select.head_dim = m.shape.head_dim;
    d.select.frames = cache.index_rotated_pages() > 0 ? 2 : 1;
    d.select.dims = split.dims;
    d.select.pages = cache.page_count();
    d.select.head_ranking = split.select == RocketSelect::Head;
    d.gathered = cache.visible();
    d.gathered_prefix = cache.index_rotated_pages() > 0;
    EXPECT_EQ(d.select.frames, 2u) << "no index-rotated prefix after the prompt's compressions";
    DfCounterSet analytic;
    df_count_forward(dataflow(*df).schedule(), m,
                     DfPass{.n = 1, .visible = cache.visible(), .prefix = cache.index_rotated()}, analytic, &d);
    const DfCounterSet before = dataflow(*df).counters();
    ASSERT_TRUE(rt.decode(0, prompt[step]).ok());
    const DfCounterSet x = minus(dataflow(*df).counters(), before);
    for (uint32_t i = 0; i < kDfOps; ++i) {
      if (DfOp(i) == DfOp::KvPolicy || DfOp(i) == DfOp::KvCompact) continue;  // a decode step's eviction
      EXPECT_TRUE(x.op[i] == analytic.op[i])
          << df_op_name(DfOp(i)) << " at step " << step << ": executed " << x.op[i].calls << " calls, "
          << x.op[i].vector_elems << " vector elements, " << x.op[i].sram_bytes << " SRAM bytes; analytic "
          << analytic.op[i].calls << ", " << analytic.op[i].vector_elems << ", " << analytic.op[i].sram_bytes;
    }
    EXPECT_EQ(x.op[uint32_t(DfOp::KvSelect)].calls, uint64_t(m.shape.n_layers) * m.shape.n_kv_heads);
    EXPECT_EQ(x.op[uint32_t(DfOp::Attention)].calls, uint64_t(m.shape.n_layers) * m.shape.n_kv_heads);
  }
}

// SmolLM2 (Q4_1, GQA, head_dim 64) on the edge preset with 1.25 MiB of SRAM, so that attention
// runs in several key and value tiles and matmuls in several weight tiles: logits bit-identical
// to the native backend's (the value tiles continue the kernel's own sum), and the counters of
// the executed prefill chunks and decode tokens equal the analytic walk.
TEST(DataflowBackend, SmolLM2ExecutedEqualsAnalyticAndNative) {
  auto l = load_keel(smollm2_keel());
  ASSERT_NE(l, nullptr);
  DfMemory hw = df_memory(preset("edge-npu-2mib"));
  hw.sram_bytes = 1280 << 10;
  auto native = start(l->model, BackendKind::Native, nullptr, KvPolicyKind::Full, 256, 32);
  auto df = start(l->model, BackendKind::Dataflow, &hw, KvPolicyKind::Full, 256, 32);
  ASSERT_NE(native, nullptr);
  ASSERT_NE(df, nullptr);
  const DataflowBackend& be = dataflow(*df);
  EXPECT_LT(be.schedule().kv_tile_tokens, 200u);
  EXPECT_GT(be.schedule().q_block, 1u);
  const std::vector<int32_t> prompt = prompt_ids(200, l->model.shape().vocab_size);
  const float worst = greedy_max_logit_difference(*native, *df, prompt, 16);
  EXPECT_EQ(worst, 0.0f);

  // Prefill of 200 tokens in chunks of 32 plus 16 decode tokens, walked analytically.
  const DfModel m = df_model(l->model);
  DfCounterSet analytic;
  uint32_t visible = 0;
  for (uint32_t left = 200; left > 0;) {
    const uint32_t n = left < 32 ? left : 32;
    left -= n;
    df_count_forward(be.schedule(), m, DfPass{.n = n, .visible = visible, .n_logits = left == 0 ? 1u : 0u}, analytic);
    visible += n;
  }
  for (int i = 0; i < 16; ++i) df_count_forward(be.schedule(), m, DfPass{.n = 1, .visible = visible++}, analytic);
  for (uint32_t i = 0; i < kDfOps; ++i) {
    const DfCounters& x = be.counters().op[i];
    const DfCounters& y = analytic.op[i];
    EXPECT_TRUE(x == y) << df_op_name(DfOp(i)) << ": executed " << x.tier_bytes[0] << " off-chip / " << x.sram_bytes
                        << " SRAM bytes, analytic " << y.tier_bytes[0] << " / " << y.sram_bytes;
  }
  std::printf("[dataflow] SmolLM2: 16 greedy ids equal, max |logit difference| %g, %llu off-chip bytes\n",
              double(worst), (unsigned long long)be.counters().total().tier_bytes[0]);
}

// Gemma 3 270M (its Q4_K_M GGUF kept as it is: Q4_K, Q5_0, Q6_K and Q8_0 matrices mixed, layer
// by layer) on the edge preset: 15 of its 18 layers attend through a 512-token window in a ring
// of their own, with the model's query scale, q / k head norms and post norms. A 560-token prompt
// in chunks of 16 takes the rings past the window. Greedy ids and logits equal the native
// backend's; the executed counters equal the analytic walk with each pass's ring entries.
TEST(DataflowBackend, Gemma3ExecutedEqualsAnalyticAndNative) {
  static const std::string path = [] {
    const std::string out = test::tmp_path("gemma3_dataflow.keel");
    const auto r =
        test::run_cli("convert '" + test::require_file(test::gemma3_gguf()) + "' -o '" + out + "' --quant keep -q");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return out;
  }();
  auto l = load_keel(path);
  ASSERT_NE(l, nullptr);
  const DfModel m = df_model(l->model);
  ASSERT_EQ(m.local_layers(), 15u);
  ASSERT_EQ(m.sliding_window, 512u);
  ASSERT_NE(m.dtype(0, DfMat::Wv), m.dtype(0, DfMat::Wq)) << "expected the GGUF's mixed formats";
  DfMemory hw = df_memory(preset("edge-npu-2mib"));
  constexpr uint32_t kPrompt = 560, kChunk = 16, kDecode = 8, kBudget = 640;
  auto native = start(l->model, BackendKind::Native, nullptr, KvPolicyKind::Full, kBudget, kChunk);
  auto df = start(l->model, BackendKind::Dataflow, &hw, KvPolicyKind::Full, kBudget, kChunk);
  ASSERT_NE(native, nullptr);
  ASSERT_NE(df, nullptr);
  const DataflowBackend& be = dataflow(*df);
  EXPECT_EQ(be.schedule().local_capacity_tokens, 512u + kChunk);
  const std::vector<int32_t> prompt = prompt_ids(kPrompt, l->model.shape().vocab_size);
  const float worst = greedy_max_logit_difference(*native, *df, prompt, kDecode);
  EXPECT_EQ(worst, 0.0f);
  EXPECT_EQ(df->runtime.local_kv_cache(0).visible(), 512u);

  DfCounterSet analytic;
  auto ring = [](uint32_t tokens) { return tokens < 512u ? tokens : 512u; };
  uint32_t done = 0;
  for (uint32_t left = kPrompt; left > 0;) {
    const uint32_t n = left < kChunk ? left : kChunk;
    left -= n;
    df_count_forward(be.schedule(), m,
                     DfPass{.n = n, .visible = done, .local_visible = ring(done), .n_logits = left == 0 ? 1u : 0u},
                     analytic);
    done += n;
  }
  for (uint32_t i = 0; i < kDecode; ++i, ++done)
    df_count_forward(be.schedule(), m, DfPass{.n = 1, .visible = done, .local_visible = ring(done)}, analytic);
  for (uint32_t i = 0; i < kDfOps; ++i) {
    const DfCounters& x = be.counters().op[i];
    const DfCounters& y = analytic.op[i];
    EXPECT_TRUE(x == y) << df_op_name(DfOp(i)) << ": executed " << x.calls << " calls, " << x.vector_elems
                        << " vector elements, " << x.tier_bytes[0] << " off-chip / " << x.sram_bytes
                        << " SRAM bytes; analytic " << y.calls << ", " << y.vector_elems << ", " << y.tier_bytes[0]
                        << " / " << y.sram_bytes;
  }
  std::printf("[dataflow] Gemma 3: %u greedy ids equal, max |logit difference| %g, %llu off-chip bytes\n", kDecode,
              double(worst), (unsigned long long)be.counters().total().tier_bytes[0]);

  // The bounded policies compress the global layers only: keel emulate --execute checks a
  // prompt chunk's SnapKV scoring and compaction and a decode token against the walk.
  for (const char* policy : {"snapstream", "rocketkv"}) {
    const auto r = test::run_cli("emulate -m '" + path + "' --hw edge-npu-2mib --chunk 16 --kv-budget 256 --context " +
                                 std::to_string(kPrompt) + " --kv-policy " + policy + " --execute --json -t 1");
    const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1), nullptr, false);
    ASSERT_FALSE(j.is_discarded() || !j.contains("executed")) << policy << ": " << r.out.substr(0, 400);
    EXPECT_EQ(r.exit_code, 0) << policy;
    const nlohmann::json& e = j["executed"];
    EXPECT_TRUE(e["prompt_chunk_equal_analytic"].get<bool>()) << policy << ": " << e["ops"].dump();
    EXPECT_TRUE(e["counters_within_analytic_bound"].get<bool>()) << policy << ": " << e["ops"].dump();
    EXPECT_GT(e["prompt_chunk_kv_policy_counters"]["calls"].get<uint64_t>(), 0u) << policy;
    EXPECT_EQ(j["decode_local_cached_tokens"].get<uint32_t>(), 512u) << policy;
  }
}

TEST(DataflowBackend, RefusesWithoutHardwareOrSram) {
  auto l = load_keel(test::stories260k_keel());
  ASSERT_NE(l, nullptr);
  RuntimeConfig cfg;
  cfg.backend = BackendKind::Dataflow;
  std::string err;
  EXPECT_FALSE(port::reserve_backend_bytes(l->model, cfg, err));
  EXPECT_NE(err.find("--hw"), std::string::npos) << err;
  DfMemory hw = df_memory(preset("edge-npu-2mib"));
  hw.sram_bytes = 4096;
  cfg.plan.dataflow_memory = &hw;
  err.clear();
  EXPECT_FALSE(port::reserve_backend_bytes(l->model, cfg, err));
  EXPECT_NE(err.find("smallest schedule needs"), std::string::npos) << err;
}

}  // namespace
}  // namespace keel
