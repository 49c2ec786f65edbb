// Zero allocations after init on the dataflow backend: every allocator call in the process is
// counted while stories260K prefills in chunks, decodes and compresses its cache (snapstream)
// through an SRAM small enough that the weights stream tile by tile.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/dataflow_backend.h"
#include "emulate/hw_json.h"
#include "llm/runtime.h"
#include "ports/linux/backend_plan.h"
#include "support/alloc_counter.h"
#include "support/runtime_fixture.h"
#include "support/test_support.h"

namespace keel {
namespace {

TEST(DataflowNoAlloc, PrefillDecodeAndEvictionAllocateNothing) {
  const Model& model = test::stories260k(convert::QuantMode::Q8).model;
  ASSERT_TRUE(model.loaded());

  std::string err;
  HwDesc desc;
  ASSERT_TRUE(hw::load_hw("edge-npu-2mib", desc, err)) << err;
  DfMemory hw = df_memory(desc);
  hw.sram_bytes = 160 << 10;
  RuntimeConfig rc;
  rc.backend = BackendKind::Dataflow;
  rc.plan.dataflow_memory = &hw;
  rc.kv.kind = KvPolicyKind::SnapStream;
  rc.plan.kv_budget_tokens = 64;
  rc.plan.chunk_tokens = 16;
  rc.plan.threads = 1;
  ASSERT_TRUE(port::reserve_backend_bytes(model, rc, err)) << err;
  const MemoryPlan plan = Runtime::plan(model, rc);
  std::vector<uint8_t> persistent(plan.persistent_bytes + 64), scratch(plan.scratch_bytes + 64);
  uint8_t* p = persistent.data() + (64 - reinterpret_cast<uintptr_t>(persistent.data()) % 64) % 64;
  uint8_t* s = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  Runtime rt;
  Error e = rt.init(model, rc, Span<uint8_t>(p, plan.persistent_bytes), Span<uint8_t>(s, plan.scratch_bytes), nullptr);
  ASSERT_TRUE(e.ok()) << e.message();
  const auto& be = static_cast<const DataflowBackend&>(rt.backend());
  ASSERT_FALSE(be.schedule().weights_onchip);  // weights stream through the weight tiles

  std::mt19937 g(7);
  std::vector<int32_t> prompt(150);
  prompt[0] = 1;
  for (size_t i = 1; i < prompt.size(); ++i) prompt[i] = int32_t(3 + g() % 509);

  test::start_alloc_counting();
  e = rt.prefill(0, Span<const int32_t>(prompt.data(), prompt.size()));
  for (int i = 0; e.ok() && i < 40; ++i) {
    const Result<int32_t> next = rt.sample(0);
    if (!next.ok()) {
      e = next.error();
      break;
    }
    e = rt.decode(0, next.value());
  }
  const test::AllocCounts counts = test::stop_alloc_counting();
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(counts.total(), 0) << counts.allocations << " allocations, " << counts.deallocations << " frees";
  // The work really went through the emulated SRAM: the weights crossed the off-chip tier.
  EXPECT_GT(be.counters().total().tier_bytes[0], 0u);
  EXPECT_EQ(rt.sequence_length(0), 190u);
  EXPECT_LE(rt.kv_cache(0).visible(), 64u + 16u);  // snapstream evicted down to its budget
}

}  // namespace
}  // namespace keel
