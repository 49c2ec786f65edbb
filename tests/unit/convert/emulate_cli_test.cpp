// keel emulate end to end: the presets are listed, the JSON carries the documented fields, a
// model that cannot fit is refused naming the buffer and the bytes, --schedule and --plot write
// their files, bad hardware files are one-line errors, and on stories260K the executed decode
// token's counters equal the analytic ones.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace keel {
namespace {

using nlohmann::json;
using test::run_cli;

std::string q(const std::string& s) { return "'" + s + "'"; }

json parse_last_line(const std::string& out) {
  const size_t nl = out.rfind("\n{");
  return json::parse(out.substr(nl == std::string::npos ? 0 : nl + 1), nullptr, false);
}

TEST(Emulate, ListsPresets) {
  const auto r = run_cli("emulate --list-hw");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("sn40l"), std::string::npos);
  EXPECT_NE(r.out.find("edge-npu-2mib"), std::string::npos);
  EXPECT_NE(r.out.find("host"), std::string::npos);
}

TEST(Emulate, JsonFieldsAndSweep) {
  const auto r = run_cli(
      "emulate --shape llama-3.1-8b --hw sn40l --kv-policy snapstream --kv-budget 8192 "
      "--context 131072 --slots 4 --sweep-sram --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = parse_last_line(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  for (const char* f : {"tokens_per_second", "cycles_per_token", "offchip_bytes_per_token", "sram_capacity_bytes",
                        "sram_peak_bytes", "kv_onchip_bytes", "kv_offchip_bytes", "fits", "ops", "schedule"})
    EXPECT_TRUE(j.contains(f)) << f;
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_LE(j["sram_peak_bytes"].get<uint64_t>(), j["sram_capacity_bytes"].get<uint64_t>());
  // 4 slots x 32 layers x (8192 + 64) entries x 2 (K, V) x 1024 x 2 bytes.
  const uint64_t kv = 4ull * 32 * (8192 + 64) * 2 * 1024 * 2;
  EXPECT_EQ(j["kv_onchip_bytes"].get<uint64_t>() + j["kv_offchip_bytes"].get<uint64_t>(), kv);
  EXPECT_GT(j["sweep_sram"]["min_sram_bytes_no_kv_spill"].get<uint64_t>(), kv);
  double share = 0;
  for (const json& op : j["ops"]) share += op["share"].get<double>();
  EXPECT_NEAR(share, 1.0, 1e-9);
}

TEST(Emulate, RefusesWhatCannotFit) {
  const auto r = run_cli("emulate --shape llama-3.1-8b --hw edge-npu-2mib --sram-bytes 65536");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("smallest schedule needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest: activations"), std::string::npos) << r.out;
}

TEST(Emulate, WritesScheduleAndPlot) {
  const std::string sched = test::tmp_path("schedule.json"), png = test::tmp_path("kv.png");
  const auto r = run_cli("emulate --shape smollm2-135m --weight-dtype q4 --hw edge-npu-2mib --schedule " + q(sched) +
                         " --plot " + q(png) + " --kv-policy snapstream --kv-budget 2048");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream f(sched);
  const json s = json::parse(f, nullptr, false);
  ASSERT_FALSE(s.is_discarded());
  EXPECT_GT(s["buffers"].size(), 5u);
  EXPECT_GT(s["transfers"].size(), 8u);
  EXPECT_LE(s["sram_peak_bytes"].get<uint64_t>(), 2097152u);
  const std::vector<uint8_t> bytes = test::read_bytes(png);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(std::string(bytes.begin() + 1, bytes.begin() + 4), "PNG");
}

TEST(Emulate, BadHardwareIsOneLineError) {
  const std::string path = test::tmp_path("bad_hw.json");
  std::ofstream(path) << "{\"name\": \"x\", \"clock_hz\": -5}";
  const auto r = run_cli("emulate --shape smollm2-135m --hw " + q(path));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(test::mentions(r.out, {"clock_hz", "positive", "-5"}));
  // A number too long for any integer type is out of range, not a crash.
  const std::string huge = test::tmp_path("huge_header.h");
  std::ofstream(huge) << "static constexpr uint32_t vocab_size = 99999999999999999999999999;\n";
  const auto h = run_cli("emulate --shape " + q(huge) + " --hw edge-npu-2mib");
  EXPECT_EQ(h.exit_code, 1) << h.out;
  EXPECT_TRUE(test::mentions(h.out, {"vocab_size", "expected 1..16777216"})) << h.out;
  // A header of a model with sliding-window layers does not say which they are.
  const std::string gemma = test::tmp_path("gemma_header.h");
  std::ofstream(gemma) << "static constexpr uint32_t vocab_size = 262144;\nstatic constexpr uint32_t dim = 640;\n"
                          "static constexpr uint32_t n_layers = 18;\nstatic constexpr uint32_t n_heads = 4;\n"
                          "static constexpr uint32_t n_kv_heads = 1;\nstatic constexpr uint32_t head_dim = 256;\n"
                          "static constexpr uint32_t ffn_dim = 2048;\nstatic constexpr uint32_t local_layers = 15;\n";
  const auto g = run_cli("emulate --shape " + q(gemma) + " --hw edge-npu-2mib");
  EXPECT_EQ(g.exit_code, 1) << g.out;
  EXPECT_TRUE(test::mentions(g.out, {"15 sliding-window layers", "-m MODEL.keel"})) << g.out;
  const auto u = run_cli("emulate --shape smollm2-135m");
  EXPECT_EQ(u.exit_code, 2) << u.out;
  const auto b = run_cli("run -m /nonexistent.keel --backend dataflow -p x");
  EXPECT_NE(b.exit_code, 0);
}

TEST(Emulate, ExecutedCountersEqualAnalyticOnStories260K) {
  const auto r = run_cli("emulate -m " + q(test::stories260k_keel()) +
                         " --hw edge-npu-2mib --sram-bytes 300000 --context 300 --execute --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = parse_last_line(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_TRUE(j["executed"]["counters_equal_analytic"].get<bool>()) << j["executed"].dump();
  EXPECT_EQ(j["executed"]["cached_tokens"].get<uint32_t>(), 300u);
}

// Under rocketkv a decode token's attention and page selection depend on which pages its
// scores choose: the analytic walk counts them at their bound (every page the cache can hold
// and the top-k rounded up to whole pages), and the executed token stays within it, every other
// op class equal.
TEST(Emulate, RocketKvDecodeWithinItsSparseBound) {
  const auto r = run_cli("emulate -m " + q(test::stories260k_keel()) +
                         " --hw edge-npu-2mib --sram-bytes 300000 --kv-policy rocketkv --kv-budget 128 --chunk 16"
                         " --context 200 --execute --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = parse_last_line(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const json& e = j["executed"];
  EXPECT_TRUE(e["counters_within_analytic_bound"].get<bool>()) << e.dump();
  EXPECT_TRUE(e["prompt_chunk_equal_analytic"].get<bool>()) << e.dump();
  const json& bound = j["decode_sparse_bound"];
  EXPECT_EQ(bound["sparse_budget"].get<uint32_t>(), 32u);  // budget / 4
  EXPECT_EQ(bound["frames"].get<uint32_t>(), 2u);
  EXPECT_LT(bound["gathered_tokens"].get<uint32_t>(), 128u);
  // The cache holds its page summaries beside the keys and values: stories260K's 5 layers x 4
  // KV heads x 34 pages (budget 128 in pages of 4, the prefix's and the ring's last partial)
  // x min and max x head_dim 8 x 4 bytes, then 5 x 2 x 32 x 144 rows x 2 bytes.
  EXPECT_EQ(j["schedule"]["kv_summary_bytes"].get<uint64_t>(), 5u * 4 * 34 * 2 * 8 * 4);
  EXPECT_EQ(j["schedule"]["kv_total_bytes"].get<uint64_t>(), 5u * 4 * 34 * 2 * 8 * 4 + 5u * 2 * 32 * 144 * 2);
  bool saw_attention = false, saw_select = false;
  for (const json& op : e["ops"]) {
    const std::string name = op["op"].get<std::string>();
    if (name == "attention" || name == "kv_select") {
      (name == "attention" ? saw_attention : saw_select) = true;
      EXPECT_TRUE(op["within_bound"].get<bool>()) << op.dump();
      EXPECT_GT(op["executed"]["calls"].get<uint64_t>(), 0u);
    } else {
      EXPECT_TRUE(op["equal"].get<bool>()) << op.dump();
    }
  }
  EXPECT_TRUE(saw_attention && saw_select) << e.dump();
}

// The prediction is of the KV configuration a run resolves: the model's own (snapkv pools with
// the llama architecture's kernel 31, not the policy's 7) with the options on top, which move
// the predicted SnapKV scoring; --execute then checks the same configuration. A KV type the
// emulator does not model is refused, not predicted as f16.
TEST(Emulate, PredictsTheKvConfigurationARunResolves) {
  const std::string base = "emulate -m " + q(test::stories260k_keel()) +
                           " --hw edge-npu-2mib --sram-bytes 300000 --kv-budget 128 --chunk 16 --context 200"
                           " --prompt-tokens 200 --json --kv-policy ";
  const auto snapkv = run_cli(base + "snapkv");
  const auto given = run_cli(base + "snapstream --obs-window 8 --snap-kernel 5 --sinks 2 --window 24 --execute");
  const auto stream = run_cli(base + "snapstream");
  ASSERT_EQ(snapkv.exit_code, 0) << snapkv.out;
  ASSERT_EQ(given.exit_code, 0) << given.out;
  ASSERT_EQ(stream.exit_code, 0) << stream.out;
  const json js = parse_last_line(snapkv.out), jg = parse_last_line(given.out), jd = parse_last_line(stream.out);
  ASSERT_FALSE(js.is_discarded() || jg.is_discarded() || jd.is_discarded());
  EXPECT_EQ(js["snapkv"], json({{"obs_window", 32}, {"kernel", 31}, {"sinks", 0}, {"ring", 0}})) << js["snapkv"];
  EXPECT_EQ(jd["snapkv"], json({{"obs_window", 32}, {"kernel", 31}, {"sinks", 4}, {"ring", 32}})) << jd["snapkv"];
  EXPECT_EQ(jg["snapkv"], json({{"obs_window", 8}, {"kernel", 5}, {"sinks", 2}, {"ring", 24}})) << jg["snapkv"];
  auto scoring = [](const json& j) {
    for (const json& op : j["prefill"]["ops"])
      if (op["op"] == "kv_policy") return op;
    return json();
  };
  ASSERT_FALSE(scoring(jd).is_null()) << jd["prefill"].dump();
  EXPECT_NE(scoring(jd), scoring(jg)) << "the options must move the predicted SnapKV scoring";
  EXPECT_TRUE(jg["executed"]["counters_equal_analytic"].get<bool>()) << jg["executed"].dump();
  EXPECT_TRUE(jg["executed"]["prompt_chunk_equal_analytic"].get<bool>()) << jg["executed"].dump();

  const auto q8 = run_cli(base + "snapkv --kv-type q8");
  EXPECT_EQ(q8.exit_code, 2) << q8.out;
  EXPECT_TRUE(test::mentions(q8.out, {"f16", "q8", "not emulated"})) << q8.out;
}

// With several slots the schedule places every slot's cache, and the first slot's executed
// token moves what the analytic walk counts.
TEST(Emulate, ExecutedCountersEqualAnalyticWithSlots) {
  const std::string base = "emulate -m " + q(test::stories260k_keel()) +
                           " --hw edge-npu-2mib --sram-bytes 300000 --kv-policy snapstream --kv-budget 128"
                           " --chunk 16 --context 200 --execute --json --slots ";
  const auto one = run_cli(base + "1"), four = run_cli(base + "4");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  ASSERT_EQ(four.exit_code, 0) << four.out;
  const json j1 = parse_last_line(one.out), j4 = parse_last_line(four.out);
  ASSERT_FALSE(j1.is_discarded() || j4.is_discarded()) << one.out << four.out;
  EXPECT_TRUE(j4["executed"]["counters_equal_analytic"].get<bool>()) << j4["executed"].dump();
  // The prompt's last chunk runs past the budget: its SnapKV scoring is counted and checked.
  EXPECT_TRUE(j1["executed"]["prompt_chunk_equal_analytic"].get<bool>()) << j1["executed"].dump();
  EXPECT_GT(j1["executed"]["prompt_chunk_kv_policy_counters"]["macs_bf16"].get<uint64_t>(), 0u);
  EXPECT_EQ(j4["schedule"]["slots"].get<uint32_t>(), 4u);
  EXPECT_EQ(j4["kv_offchip_bytes"].get<uint64_t>() + j4["kv_onchip_bytes"].get<uint64_t>(),
            4 * (j1["kv_offchip_bytes"].get<uint64_t>() + j1["kv_onchip_bytes"].get<uint64_t>()));
}

TEST(Emulate, ValidateRefusesWhatItCannotMeasure) {
  const auto none = run_cli("emulate --validate");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_TRUE(test::mentions(none.out, {"--validate", "-m"}));
  const auto shallow = run_cli("emulate --validate -m " + q(test::stories260k_keel()) + " --context 100");
  EXPECT_EQ(shallow.exit_code, 2);
  EXPECT_NE(shallow.out.find("at least 8192"), std::string::npos) << shallow.out;
}

// --validate --measured re-fits a measurement without measuring. The committed measurement of
// stories260K (`keel emulate --validate -m stories260K.keel --reps 1 --context 8192 --hw
// tests/golden/validate_start_hw.json --json`) re-fits carrying its measured values through; a
// re-fit of that output gives the same output; the output with the fields an older file lacks
// removed re-fits identically (prefix, capacity and SnapKV queries derived from the sessions);
// other models, descriptions and shape sets are refused, each with a specific error.
TEST(Emulate, ValidateMeasuredRefits) {
  const std::string fixture = test::require_file(test::source_path("tests/golden/validate_stories260k.json"));
  const std::string start_hw = test::require_file(test::source_path("tests/golden/validate_start_hw.json"));
  const std::string base = "emulate --validate -m " + q(test::stories260k_keel()) + " --json --measured ";
  const auto r1 = run_cli(base + q(fixture));
  ASSERT_EQ(r1.exit_code, 0) << r1.out;
  const json j1 = parse_last_line(r1.out);
  std::ifstream f(fixture);
  const json measured = json::parse(f, nullptr, false);
  ASSERT_FALSE(j1.is_discarded() || measured.is_discarded()) << r1.out;
  ASSERT_EQ(j1["tests"].size(), 16u);
  ASSERT_EQ(measured["tests"].size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(j1["tests"][i]["e2e_measured_us"], measured["tests"][i]["e2e_measured_us"]) << i;
    EXPECT_EQ(j1["tests"][i]["measured_op_us"], measured["tests"][i]["measured_op_us"]) << i;
    EXPECT_GT(j1["tests"][i]["predicted_us"].get<double>(), 0) << i;
  }
  EXPECT_EQ(j1["model"], measured["model"]);

  const std::string again = test::tmp_path("validate_refit.json");
  std::ofstream(again) << j1.dump();
  const auto r2 = run_cli(base + q(again));
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  EXPECT_EQ(parse_last_line(r2.out).dump(), j1.dump());

  json older = j1;
  for (const char* k : {"format", "model", "start_description", "fitted_description", "snap_depth"}) older.erase(k);
  for (json& t : older["tests"])
    for (const char* k : {"prefix", "capacity", "snap_queries", "measured_op_us"}) t.erase(k);
  const std::string older_path = test::tmp_path("validate_older.json");
  std::ofstream(older_path) << older.dump();
  const auto r3 = run_cli(base + q(older_path) + " --hw " + q(start_hw));
  ASSERT_EQ(r3.exit_code, 0) << r3.out;
  const json j3 = parse_last_line(r3.out);
  EXPECT_EQ(j3["tests"].dump(), j1["tests"].dump());
  EXPECT_EQ(j3["fitted"].dump(), j1["fitted"].dump());

  // Started from another description, the older file's predictions do not come out as recorded.
  const auto other_hw = run_cli(base + q(older_path) + " --hw edge-npu-2mib");
  EXPECT_EQ(other_hw.exit_code, 1);
  EXPECT_TRUE(test::mentions(other_hw.out, {"another model", "another description"}));

  json other_model = j1;
  other_model["model"] = "dim 576 ffn 1536 layers 30 heads 9 kv_heads 3 head_dim 64 vocab 49152 weights Q4_1/Q4_1/Q4_1";
  const std::string other_model_path = test::tmp_path("validate_other_model.json");
  std::ofstream(other_model_path) << other_model.dump();
  const auto r4 = run_cli(base + q(other_model_path));
  EXPECT_EQ(r4.exit_code, 1);
  EXPECT_TRUE(test::mentions(r4.out, {"another model", "dim 576"}));

  json other_shapes = j1;
  other_shapes["tests"][4]["depth"] = 999;
  const std::string other_shapes_path = test::tmp_path("validate_other_shapes.json");
  std::ofstream(other_shapes_path) << other_shapes.dump();
  const auto r5 = run_cli(base + q(other_shapes_path));
  EXPECT_EQ(r5.exit_code, 1);
  EXPECT_TRUE(test::mentions(r5.out, {"tests[4]", "full d1024 decode"}));

  const auto missing = run_cli(base + "/nonexistent.json");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("cannot read /nonexistent.json"), std::string::npos) << missing.out;
  const auto stray = run_cli("emulate --measured " + q(fixture) + " -m " + q(test::stories260k_keel()));
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_TRUE(test::mentions(stray.out, {"--measured", "--validate"}));
}

}  // namespace
}  // namespace keel
