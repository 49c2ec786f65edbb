// The model commands end to end on SmolLM2: run continues "The capital of France is" with
// Paris; chat, ppl, bench and passkey work and print the JSON they document; bad requests are
// one-line errors with the documented exit codes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace keel {
namespace {

using nlohmann::json;
using test::run_cli;

std::string q(const std::string& s) { return "'" + s + "'"; }

const std::string& smollm2() {
  static const std::string path = [] {
    const std::string out = test::tmp_path("cmd_smollm2.keel");
    const auto r = run_cli("convert " + q(test::require_file(test::smollm2_gguf())) + " -o " + q(out) + " -q");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return out;
  }();
  return path;
}

// The JSON document a command printed (its last line starting with '{').
json parse_last_line(const std::string& out) {
  const size_t nl = out.rfind("\n{");
  return json::parse(out.substr(nl == std::string::npos ? 0 : nl + 1), nullptr, false);
}

TEST(Commands, RunContinuesWithParis) {
  const auto r = run_cli("run -m " + q(smollm2()) + " -p 'The capital of France is' -n 12 --temp 0 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = parse_last_line(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_NE(j["text"].get<std::string>().find("Paris"), std::string::npos) << j["text"];
  EXPECT_GT(j["decode_tps"].get<double>(), 0.0);
  EXPECT_GT(j["memory"]["persistent_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["memory"]["peak_rss_bytes"].get<uint64_t>(), 0u);
}

TEST(Commands, ChatAnswersOneMessage) {
  const auto r = run_cli("chat -m " + q(smollm2()) + " -p 'What is the capital of France?' --temp 0 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Paris"), std::string::npos) << r.out;
}

TEST(Commands, PplStreamsThroughEveryPolicy) {
  const std::string text = test::require_file(test::shared_path("data/paul_graham_essays/addiction.txt"));
  double full_ppl = 0;
  for (const char* p : {"full", "window", "streaming", "snapkv", "snapstream"}) {
    const auto r = run_cli("ppl -m " + q(smollm2()) + " -f " + q(text) + " --ctx 400 --kv-policy " + p +
                           " --kv-budget 512 -t 1 --json");
    ASSERT_EQ(r.exit_code, 0) << p << ": " << r.out;
    const json j = parse_last_line(r.out);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["tokens"], 400);
    EXPECT_EQ(j["nll"].size(), 399u);
    // Budget 512 holds all 400 tokens: every policy is exactly full.
    if (std::string(p) == "full") full_ppl = j["ppl"].get<double>();
    EXPECT_EQ(j["ppl"].get<double>(), full_ppl) << p;
    // Progress on stderr every 10% of the tokens, the last line at all of them.
    EXPECT_TRUE(test::mentions(r.out, {"40/399", "10%"}));
    EXPECT_TRUE(test::mentions(r.out, {"399/399", "100%"}));
  }
  const auto quiet = run_cli("ppl -m " + q(smollm2()) + " -f " + q(text) + " --ctx 40 -q -t 1");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.out;
  EXPECT_EQ(quiet.out.find("keel ppl: "), std::string::npos) << quiet.out;
  EXPECT_NE(quiet.out.find("40 tokens, perplexity"), std::string::npos) << quiet.out;
}

TEST(Commands, BenchAndPasskeyPrintTheirJson) {
  const auto b = run_cli("bench -m " + q(smollm2()) + " -p 32 -n 8 -r 2 -t 1 --json");
  ASSERT_EQ(b.exit_code, 0) << b.out;
  const json jb = parse_last_line(b.out);
  ASSERT_FALSE(jb.is_discarded()) << b.out;
  ASSERT_EQ(jb["results"].size(), 2u);
  EXPECT_EQ(jb["results"][0]["test"], "pp32");
  EXPECT_EQ(jb["results"][1]["test"], "tg8");
  EXPECT_DOUBLE_EQ(jb["mean_cached_tokens"].get<double>(), 4.5);  // decode steps 1..8 attend to 1..8 entries
  // A bounded policy past its budget: each step reads the budget's entries (+ its own), not the depth.
  const auto bb = run_cli("bench -m " + q(smollm2()) +
                          " -p 0 -n 8 -d 300 -r 1 -t 1 --kv-policy streaming "
                          "--kv-budget 128 --json");
  ASSERT_EQ(bb.exit_code, 0) << bb.out;
  const json jbb = parse_last_line(bb.out);
  ASSERT_FALSE(jbb.is_discarded()) << bb.out;
  EXPECT_DOUBLE_EQ(jbb["mean_cached_tokens"].get<double>(), 129.0);
  EXPECT_DOUBLE_EQ(jbb["bytes_per_token"].get<double>(),
                   jbb["weights_bytes"].get<double>() + 129.0 * jbb["kv_bytes_per_cached_token"].get<double>());
  const auto p = run_cli("passkey -m " + q(smollm2()) +
                         " --lengths 400 --depths 0,1 --kv-policy snapstream "
                         "--kv-budget 256 -t 1 --haystack " +
                         q(test::shared_path("data/paul_graham_essays")) + " --json");
  ASSERT_EQ(p.exit_code, 0) << p.out;
  const json jp = parse_last_line(p.out);
  ASSERT_FALSE(jp.is_discarded()) << p.out;
  ASSERT_EQ(jp["results"].size(), 2u);
  for (const auto& r : jp["results"]) {
    EXPECT_GE(r["expected"].get<std::string>().size(), 5u);
    EXPECT_TRUE(r.contains("answer") && r.contains("correct") && r.contains("length") && r.contains("depth"));
    EXPECT_GT(r["seconds"].get<double>(), 0.0);
  }
  EXPECT_GE(jp["accuracy"].get<double>(), 0.0);
  // One progress line per prompt on stderr, silenced by -q.
  EXPECT_NE(p.out.find("passkey: 2/2  length"), std::string::npos) << p.out;
  const auto pq = run_cli("passkey -m " + q(smollm2()) + " --lengths 300 --depths 1 -q -t 1 --haystack " +
                          q(test::shared_path("data/paul_graham_essays")) + " --json");
  ASSERT_EQ(pq.exit_code, 0) << pq.out;
  EXPECT_EQ(pq.out.find("passkey: "), std::string::npos) << pq.out;
}

TEST(Commands, BadRequestsAreOneLineErrors) {
  const auto policy = run_cli("run -m " + q(smollm2()) + " -p hi --kv-policy h2o");
  EXPECT_EQ(policy.exit_code, 2) << policy.out;
  EXPECT_NE(policy.out.find("--kv-policy expects"), std::string::npos) << policy.out;
  const auto budget = run_cli("run -m " + q(smollm2()) + " -p hi --kv-policy snapstream --kv-budget 40");
  EXPECT_EQ(budget.exit_code, 1) << budget.out;
  EXPECT_NE(budget.out.find("budget too small"), std::string::npos) << budget.out;
  const auto full = run_cli("run -m " + q(smollm2()) +
                            " -p 'a b c d e f g h i j k l m n o p' --kv-policy full "
                            "--kv-budget 4");
  EXPECT_EQ(full.exit_code, 1) << full.out;
  EXPECT_NE(full.out.find("exceeds the KV budget"), std::string::npos) << full.out;
  const auto positions = run_cli("run -m " + q(smollm2()) + " -p hi --kv-positions text");
  EXPECT_EQ(positions.exit_code, 1) << positions.out;
  EXPECT_TRUE(test::mentions(positions.out, {"--kv-positions", "cache", "original", "'text'"}));
  const auto no_prefix = run_cli("run -m " + q(smollm2()) + " -p hi --kv-policy window --kv-positions original");
  EXPECT_EQ(no_prefix.exit_code, 1) << no_prefix.out;
  EXPECT_NE(no_prefix.out.find("--kv-policy window keeps none"), std::string::npos) << no_prefix.out;
  const auto empty = run_cli("run -m " + q(smollm2()) + " -p ''");
  EXPECT_EQ(empty.exit_code, 1) << empty.out;
  EXPECT_EQ(empty.signal, 0);
}

}  // namespace
}  // namespace keel
