// `keel convert` and `keel info` end to end on the real models: the shapes the issue names,
// one-line errors for corrupted files, and the generated header compiling into static_asserts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "support/test_support.h"

namespace keel {
namespace {

using nlohmann::json;
using test::run_cli;

std::string q(const std::string& s) { return "'" + s + "'"; }

json info_json(const std::string& model, const std::string& extra = "") {
  const auto r = run_cli("info " + q(model) + " --json " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return json::parse(r.out, nullptr, false);
}

const std::string& stories_keel() { return test::stories260k_keel(); }

TEST(ConvertCli, Stories260KInfo) {
  const json j = info_json(stories_keel());
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["arch"]["n_layers"], 5);
  EXPECT_EQ(j["arch"]["n_heads"], 8);
  EXPECT_EQ(j["arch"]["n_kv_heads"], 4);
  EXPECT_EQ(j["arch"]["dim"], 64);
  EXPECT_EQ(j["arch"]["head_dim"], 8);
  EXPECT_EQ(j["arch"]["ffn_dim"], 172);
  EXPECT_EQ(j["arch"]["vocab_size"], 512);
  EXPECT_EQ(j["arch"]["context_length"], 512);
  EXPECT_EQ(j["tokenizer"]["kind"], "sentencepiece-bpe");
  EXPECT_GT(j["memory"]["weights_bytes"].get<uint64_t>(), 900000u);
  EXPECT_GT(j["memory"]["persistent_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["memory"]["scratch_bytes"].get<uint64_t>(), 0u);
  // The kernel tier the native backend would run here, as the engine's dispatcher picks it.
  ASSERT_TRUE(j.contains("kernels"));
  if (kernels_native() == nullptr) {
    EXPECT_TRUE(j["kernels"].is_null());
  } else {
    EXPECT_EQ(j["kernels"]["matmul"], kernels_native()->name);
    EXPECT_EQ(j["kernels"]["attention"], attention_kernels_native()->name);
    EXPECT_EQ(j["kernels"]["vector"], vector_kernels_native()->name);
  }
}

TEST(ConvertCli, SmolLM2Info) {
  const std::string out = test::tmp_path("cli_smollm2.keel");
  const auto r = run_cli("convert " + q(test::require_file(test::smollm2_gguf())) + " -o " + q(out) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json conv = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(conv.is_discarded()) << r.out;
  const json j = info_json(out);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["arch"]["n_layers"], 30);
  EXPECT_EQ(j["arch"]["n_heads"], 9);
  EXPECT_EQ(j["arch"]["n_kv_heads"], 3);
  EXPECT_EQ(j["arch"]["dim"], 576);
  EXPECT_EQ(j["arch"]["ffn_dim"], 1536);
  EXPECT_EQ(j["arch"]["vocab_size"], 49152);
  EXPECT_EQ(j["arch"]["context_length"], 8192);
  EXPECT_DOUBLE_EQ(j["arch"]["rope_theta"].get<double>(), 100000.0);
  EXPECT_EQ(j["arch"]["tied_output"], true);
  EXPECT_EQ(j["tokenizer"]["kind"], "byte-level-bpe");
  EXPECT_EQ(j["tokenizer"]["merges"], 48900);
  EXPECT_EQ(j["tensors"]["count"], 272);
  EXPECT_EQ(j["tensors"]["by_dtype"]["Q4M"]["count"], 210);
  EXPECT_EQ(j["tensors"]["by_dtype"]["Q8"]["count"], 1);
  // A bigger budget costs exactly the extra KV bytes in the persistent arena: the cache's, and
  // the hold's, which is a quarter of the budget (snapstream's recent ring; docs/kv.md).
  const json j2 = info_json(out, "--kv-budget 2048");
  const uint64_t extra_tokens = 1024, extra_held = 2048 / 4 - 1024 / 4;
  // per layer and KV head: K and V of head dim 64 in f16, plus the i32 position (held entries:
  // and the i32 position their key is rotated at)
  const uint64_t kv_per_token = 30ull * 3 * (2 * 64 * 2 + 4), held_per_token = 30ull * 3 * (2 * 64 * 2 + 8);
  EXPECT_EQ(j2["memory"]["kv_bytes"].get<uint64_t>() - j["memory"]["kv_bytes"].get<uint64_t>(),
            extra_tokens * kv_per_token + extra_held * held_per_token);
  const json j3 = info_json(out, "--kv-budget 2048 --snap-hold 0");
  EXPECT_EQ(j3["memory"]["kv_hold_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j2["memory"]["kv_bytes"].get<uint64_t>() - j3["memory"]["kv_bytes"].get<uint64_t>(),
            j2["memory"]["kv_hold_bytes"].get<uint64_t>());
}

TEST(ConvertCli, TinyRandomGguf) {
  const std::string out = test::tmp_path("cli_tiny.keel");
  const auto r = run_cli("convert " + q(test::require_file(test::shared_path("fixtures/llama-2-tiny-random.gguf"))) +
                         " -o " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = info_json(out);
  EXPECT_EQ(j["arch"]["n_layers"], 1);
  EXPECT_EQ(j["arch"]["dim"], 8);
  EXPECT_EQ(j["arch"]["vocab_size"], 32000);
  EXPECT_EQ(j["tensors"]["by_dtype"]["F16"]["count"], 9);  // embedding, 4 attention, 3 FFN, output
  EXPECT_EQ(j["tensors"]["by_dtype"]["F32"]["count"], 3);  // norms
}

TEST(ConvertCli, CorruptedFilesFailWithOneLine) {
  const auto bytes = test::read_bytes(stories_keel());
  ASSERT_GT(bytes.size(), 1000u);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> bad;
  for (size_t cut : {size_t(0), size_t(3), size_t(100), size_t(5000), bytes.size() / 2, bytes.size() - 1}) {
    bad.emplace_back("truncated at " + std::to_string(cut), std::vector<uint8_t>(bytes.begin(), bytes.begin() + cut));
  }
  auto flipped = bytes;
  for (size_t i = 16; i < 2000; i += 97) flipped[i] ^= 0x5a;
  bad.emplace_back("bytes flipped", flipped);
  auto wrong_id = bytes;
  memcpy(wrong_id.data() + 4, "KEEX", 4);
  bad.emplace_back("wrong identifier", wrong_id);
  for (const auto& [what, content] : bad) {
    const std::string path = test::tmp_path("bad.keel");
    test::write_bytes(path, content);
    const auto r = run_cli("info " + q(path));
    EXPECT_EQ(r.signal, 0) << what;
    EXPECT_EQ(r.exit_code, 1) << what << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << what << ": " << r.out;
    EXPECT_EQ(r.out.rfind("keel info: ", 0), 0u) << what << ": " << r.out;
  }
  const auto missing = run_cli("info /nonexistent/model.keel");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("cannot open"), std::string::npos) << missing.out;
}

TEST(ConvertCli, UsageErrors) {
  EXPECT_EQ(run_cli("convert").exit_code, 2);
  EXPECT_EQ(run_cli("convert x.gguf").exit_code, 2);  // no -o
  const auto r = run_cli("convert " + q(test::smollm2_gguf()) + " -o /tmp/x.keel --quant q3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--quant expects"), std::string::npos) << r.out;
  const auto h = run_cli("convert --help");
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("--header"), std::string::npos);
  const auto garbage = test::tmp_path("garbage.bin");
  test::write_bytes(garbage, std::vector<uint8_t>(100, 7));
  const auto g = run_cli("convert " + q(garbage) + " --tokenizer " +
                         q(test::shared_path("models/stories260K/tok512.bin")) + " -o " + q(test::tmp_path("g.keel")));
  EXPECT_EQ(g.exit_code, 1) << g.out;
  EXPECT_EQ(g.signal, 0);
}

TEST(ConvertCli, HeaderCompilesAndMatchesInfo) {
  const std::string out = test::tmp_path("hdr_stories.keel");
  const std::string hdr = test::tmp_path("stories_shape.h");
  const auto r = run_cli("convert " + q(test::require_file(test::shared_path("models/stories260K/stories260K.bin"))) +
                         " --tokenizer " + q(test::shared_path("models/stories260K/tok512.bin")) + " -o " + q(out) +
                         " --header " + q(hdr) + " --header-namespace stories --kv-budget 256 --slots 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = info_json(out, "--kv-budget 256 --slots 2");
  ASSERT_FALSE(j.is_discarded());
  const std::string prog = test::tmp_path("hdr_check.cpp");
  {
    std::ofstream f(prog);
    f << "#include \"" << hdr << "\"\n#include \"llm/plan.h\"\n"
      << "static_assert(stories::kPersistentBytes == " << j["memory"]["persistent_bytes"].get<uint64_t>() << "ull);\n"
      << "static_assert(stories::kScratchBytes == " << j["memory"]["scratch_bytes"].get<uint64_t>() << "ull);\n"
      << "static_assert(stories::kKvBytes == " << j["memory"]["kv_bytes"].get<uint64_t>() << "ull);\n"
      << "static_assert(stories::Shape::n_layers == 5 && stories::Shape::dim == 64);\n"
      << "static_assert(stories::Shape::sparse_ranking == 0 && stories::Shape::rocketkv_kernel == 63);\n"
      << "static_assert(stories::Shape::snapkv_kernel == 31);\n"
      << "constexpr keel::PlanShape kShape{stories::Shape::vocab_size, stories::Shape::dim, stories::Shape::n_layers,\n"
      << "  stories::Shape::n_heads, stories::Shape::n_kv_heads, stories::Shape::head_dim, stories::Shape::ffn_dim,\n"
      << "  stories::Shape::tokenizer_bytes};\n"
      << "constexpr keel::MemoryPlan kPlan = keel::plan_memory(kShape, keel::PlanConfig{stories::kKvBudgetTokens,\n"
      << "  stories::kSlots, stories::kChunkTokens, 1}, [] {\n"
      << "  keel::KvPolicyConfig kv{keel::KvPolicyKind::SnapStream};\n"
      << "  kv.hold = keel::snapkv_default_hold(kv.kind, 0, stories::kKvBudgetTokens);\n"
      << "  return kv; }());\n"
      << "static_assert(kPlan.persistent_bytes == stories::kPersistentBytes);\n"
      << "static_assert(kPlan.scratch_bytes == stories::kScratchBytes);\n"
      << "alignas(64) static unsigned char g_persistent[stories::kPersistentBytes];\n"
      << "int main() { return g_persistent[0]; }\n";
  }
  const std::string cmd = std::string(KEEL_CXX_COMPILER) + " -std=c++20 -I " + q(test::source_path("engine")) + " " +
                          q(prog) + " -o " + q(test::tmp_path("hdr_check")) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) output += buf;
  EXPECT_EQ(pclose(p), 0) << cmd << "\n" << output;
}

}  // namespace
}  // namespace keel
