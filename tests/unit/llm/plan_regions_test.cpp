// The plan's region table: every region is placed once, 64-byte aligned, without overlap,
// inside its arena; the regions of each arena sum exactly to its total; per-slot regions repeat
// slot after slot; `keel info --json` reports the same table. Checked over a grid of shapes
// and configurations, including the constexpr plan firmware compiles.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "keel.hpp"
#include "llm/plan.h"
#include "support/test_support.h"

namespace keel {
namespace {

struct Span64 {
  uint64_t begin, end;
  const char* name;
};

// Every placed instance of every region of `arena`, with the regions' sum.
std::vector<Span64> placed(const MemoryPlan& p, PlanArena arena, uint64_t* sum) {
  std::vector<Span64> out;
  *sum = 0;
  for (const RegionInfo& r : kRegions) {
    if (r.arena != arena) continue;
    *sum += p.region_bytes(r.id);
    const uint32_t instances = r.per_slot ? p.slots : 1;
    if (p.regions[uint32_t(r.id)].bytes == 0) continue;  // a region the configuration does not need
    for (uint32_t s = 0; s < instances; ++s) {
      const uint64_t at = p.region_offset(r.id, s);
      out.push_back({at, at + p.regions[uint32_t(r.id)].bytes, r.name});
    }
  }
  return out;
}

void check_plan(const MemoryPlan& p, const std::string& what) {
  SCOPED_TRACE(what);
  for (PlanArena arena : {PlanArena::Persistent, PlanArena::Scratch}) {
    uint64_t sum = 0;
    std::vector<Span64> spans = placed(p, arena, &sum);
    const uint64_t total = arena == PlanArena::Persistent ? p.persistent_bytes : p.scratch_bytes;
    EXPECT_EQ(sum, total);
    std::sort(spans.begin(), spans.end(), [](const Span64& a, const Span64& b) { return a.begin < b.begin; });
    uint64_t covered = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      EXPECT_EQ(spans[i].begin % kPlanAlign, 0u) << spans[i].name;
      EXPECT_LE(spans[i].end, total) << spans[i].name;
      if (i > 0) {
        EXPECT_LE(spans[i - 1].end, spans[i].begin) << spans[i - 1].name << " overlaps " << spans[i].name;
      }
      covered += spans[i].end - spans[i].begin;
    }
    // No gaps either: the arena is exactly its regions.
    EXPECT_EQ(covered, total);
  }
  // Groups are sums of regions.
  EXPECT_EQ(p.kv_bytes + p.logits_bytes + p.records_bytes + p.tokenizer_bytes + p.rope_bytes + p.backend_bytes,
            p.persistent_bytes);
  // Logits are the per-slot [vocab] rows alone; the records are a group of their own.
  EXPECT_EQ(p.logits_bytes, p.region_bytes(Region::Logits));
  EXPECT_EQ(p.records_bytes, p.region_bytes(Region::SlotRecords) + p.region_bytes(Region::Requests));
  EXPECT_EQ(p.activation_bytes + p.attention_bytes + p.logit_rows_bytes + p.sampler_bytes + p.text_bytes,
            p.scratch_bytes);
}

TEST(PlanRegions, TableIsInOrderAndComplete) {
  for (uint32_t i = 0; i < kRegionCount; ++i) {
    EXPECT_EQ(uint32_t(kRegions[i].id), i) << kRegions[i].name;
    EXPECT_GT(kRegions[i].elem_bytes, 0u);
  }
}

TEST(PlanRegions, PlacementIsExactOverAGrid) {
  const PlanShape shapes[] = {{512, 64, 5, 8, 4, 8, 172, 9000}, {49152, 576, 30, 9, 3, 64, 1536, 1200000}};
  for (const PlanShape& s : shapes) {
    for (KvPolicyKind kind : {KvPolicyKind::Full, KvPolicyKind::Streaming, KvPolicyKind::SnapStream}) {
      for (uint32_t slots : {1u, 3u}) {
        for (uint32_t threads : {1u, 2u}) {
          PlanConfig c;
          c.kv_budget_tokens = 300;
          c.slots = slots;
          c.chunk_tokens = 24;
          c.threads = threads;
          c.logit_rows = 8;
          c.backend_bytes = threads == 2 ? 4096 + 7 : 0;
          KvPolicyConfig kv;
          kv.kind = kind;
          const MemoryPlan p = plan_memory(s, c, kv);
          check_plan(p, std::string(kv_policy_name(kind)) + " slots " + std::to_string(slots) + " threads " +
                            std::to_string(threads) + " dim " + std::to_string(s.dim));
          // SnapKV's regions exist exactly when the policy uses it.
          EXPECT_EQ(p.region_bytes(Region::SnapRows) > 0, kv_policy_uses_snapkv(kind));
          EXPECT_EQ(p.region_bytes(Region::KvObservations) > 0, kv_policy_uses_snapkv(kind));
        }
      }
    }
  }
}

struct TinyShape {
  static constexpr uint32_t vocab_size = 512, dim = 64, n_layers = 5, n_heads = 8, n_kv_heads = 4, head_dim = 8,
                            ffn_dim = 172, context_length = 512, tokenizer_bytes = 9000;
};

TEST(PlanRegions, FirmwarePlanIsTheSameTable) {
  using E = Engine<TinyShape, 256, 2>;
  static_assert(E::kPlan.persistent_bytes > 0 && E::kPlan.scratch_bytes > 0);
  check_plan(E::kPlan, "Engine<TinyShape, 256, 2>");
}

// The KV type sizes the cache rows and nothing else: q8 and q4 rows of 8 numbers (one group) are
// 10 and 8 bytes against f16's 16.
TEST(PlanRegions, KvTypeSizesTheCacheRows) {
  using F16 = Engine<TinyShape, 256, 2, 16, KvPolicyKind::SnapStream>;
  using Q8 = Engine<TinyShape, 256, 2, 16, KvPolicyKind::SnapStream, 0, KvType::Q8>;
  using Q4 = Engine<TinyShape, 256, 2, 16, KvPolicyKind::SnapStream, 0, KvType::Q4>;
  check_plan(Q8::kPlan, "Engine<..., q8>");
  check_plan(Q4::kPlan, "Engine<..., q4>");
  const uint64_t rows = 2ull * TinyShape::n_layers * TinyShape::n_kv_heads * (256 + 16);
  EXPECT_EQ(F16::kPlan.regions[uint32_t(Region::KvKeysValues)].elements * 2, rows * 16);
  EXPECT_EQ(Q8::kPlan.regions[uint32_t(Region::KvKeysValues)].elements * 2, rows * 10);
  EXPECT_EQ(Q4::kPlan.regions[uint32_t(Region::KvKeysValues)].elements * 2, rows * 8);
  EXPECT_EQ(F16::kPlan.scratch_bytes, Q8::kPlan.scratch_bytes);
  EXPECT_LT(Q4::kPlan.persistent_bytes, Q8::kPlan.persistent_bytes);
  EXPECT_LT(Q8::kPlan.persistent_bytes, F16::kPlan.persistent_bytes);
}

// A Shape carries its architecture's rocketkv choices (`keel convert --header` writes them):
// ranking pages by head plans the keys' spread; a Shape without them gets the engine's.
struct TinyHeadRankedShape : TinyShape {
  static constexpr uint32_t sparse_ranking = 1, rocketkv_kernel = 31;
};

TEST(PlanRegions, ShapeCarriesTheArchitecturesRocketKvChoices) {
  using Group = Engine<TinyShape, 256, 1, 16, KvPolicyKind::RocketKV>;
  using Head = Engine<TinyHeadRankedShape, 256, 1, 16, KvPolicyKind::RocketKV>;
  static_assert(Group::kKv.rocket_select == RocketSelect::Group && Group::kKv.snap_kernel == kSnapKernelRocketKV);
  static_assert(Head::kKv.rocket_select == RocketSelect::Head && Head::kKv.snap_kernel == 31);
  EXPECT_EQ(Group::kPlan.region_bytes(Region::KvKeyMoments), 0u);
  EXPECT_GT(Head::kPlan.region_bytes(Region::KvKeyMoments), 0u);
  check_plan(Head::kPlan, "Engine<TinyHeadRankedShape, ..., rocketkv>");
}

// keel info --json prints the table; its regions sum to the arenas it reports.
TEST(PlanRegions, InfoReportsRegions) {
  const std::string model = test::tmp_path("plan_regions_stories.keel");
  const std::string shared = test::shared_path("models/stories260K");
  const test::CommandResult conv = test::run_cli("convert " + test::require_file(shared + "/stories260K.bin") +
                                                 " --tokenizer " + shared + "/tok512.bin -o " + model + " -q");
  ASSERT_EQ(conv.exit_code, 0) << conv.out;
  const test::CommandResult info = test::run_cli("info " + model + " --json --slots 2 --threads 2");
  ASSERT_EQ(info.exit_code, 0) << info.out;
  const nlohmann::json j = nlohmann::json::parse(info.out);
  const nlohmann::json& mem = j.at("memory");
  uint64_t persistent = 0, scratch = 0;
  std::map<std::string, uint64_t> by_group;
  ASSERT_EQ(mem.at("regions").size(), size_t(kRegionCount));
  for (const nlohmann::json& r : mem.at("regions")) {
    ASSERT_TRUE(r.contains("name") && r.contains("shape"));
    (r.at("arena") == "persistent" ? persistent : scratch) += r.at("bytes").get<uint64_t>();
    by_group[r.at("group").get<std::string>()] += r.at("bytes").get<uint64_t>();
  }
  EXPECT_EQ(persistent, mem.at("persistent_bytes").get<uint64_t>());
  EXPECT_EQ(scratch, mem.at("scratch_bytes").get<uint64_t>());
  // Every group is listed with the sum of its regions, and the kv group is the plan's KV.
  ASSERT_EQ(mem.at("groups").size(), size_t(kRegionGroupCount));
  for (auto it = mem.at("groups").begin(); it != mem.at("groups").end(); ++it) {
    EXPECT_EQ(it.value().get<uint64_t>(), by_group[it.key()]) << it.key();
  }
  EXPECT_EQ(mem.at("groups").at("kv").get<uint64_t>(), mem.at("kv_bytes").get<uint64_t>());
  EXPECT_GT(mem.at("groups").at("records").get<uint64_t>(), 0u) << "slot and request records have their own group";
}

}  // namespace
}  // namespace keel
