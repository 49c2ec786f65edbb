// keel passkey on prompts where snapstream once lost what the full cache finds (docs/results.md,
// "A key ~450 tokens before the question"): 7.5k tokens of essays, keys at depths 0.92 and 0.94,
// snapstream in a 1024-token budget with its defaults. The 0.94 key leaves the recent ring four
// compressions before the prompt's end; the lookahead judging those evicted it in some retrieval
// heads, and only the hold (docs/kv.md) gives the real question a say on it. The hold once cost
// the 0.92 key; pooled over positions at the question's compression it keeps both. Two prompts
// of 7.5k tokens on one thread take a minute or more, so this file is labelled `slow`: the
// Release suite runs it, the sanitizer run (scripts/proofs.sh) leaves it out. The same for the
// short snapstream-against-streaming run and Gemma 3's rocketkv case below.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace keel {
namespace {

using nlohmann::json;
using test::run_cli;

std::string q(const std::string& s) { return "'" + s + "'"; }

// `gguf` converted to a file of this test's own: ctest runs the tests of this file in separate
// processes, side by side, so none may write another's model. Empty (after a failure) when the
// conversion fails.
std::string converted(const std::string& gguf, const std::string& name, const std::string& extra_args) {
  const std::string model = test::tmp_path(name);
  const auto c = run_cli("convert " + q(test::require_file(gguf)) + " -o " + q(model) + " " + extra_args + " -q");
  EXPECT_EQ(c.exit_code, 0) << c.out;
  return c.exit_code == 0 ? model : std::string();
}

// `keel passkey ... --json -q` on the essays: the results of its JSON document, which must hold
// `n` of them.
json passkey_results(const std::string& model, const std::string& args, size_t n) {
  const auto r = run_cli("passkey -m " + q(model) + " " + args + " --haystack " +
                         q(test::require_file(test::shared_path("data/paul_graham_essays"))) + " --json -q");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const size_t nl = r.out.rfind("\n{");
  const json j = json::parse(r.out.substr(nl == std::string::npos ? 0 : nl + 1), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  if (j.is_discarded() || !j.contains("results") || j["results"].size() != n) {
    ADD_FAILURE() << "expected " << n << " results: " << r.out;
    return json::array();
  }
  return j["results"];
}

// The small run of the passkey evaluation (docs/results.md has the full one): 2k-token prompts
// in a 1024-token budget. Streaming keeps only the last ~1000 tokens, so it can find a key only
// near the end; snapstream must keep keys from the whole prompt (measured: 3 of 4 against
// streaming's 1, with greedy decoding on one thread; the test asks for a clear margin). Eight
// 2k prompts: 40 s in the Release build on a Zen 3 core, past 20 minutes under the sanitizers.
TEST(PasskeyLong, SnapStreamKeepsPassKeysThatStreamingLoses) {
  const std::string model = converted(test::smollm2_gguf(), "passkey_short_smollm2.keel", "");
  ASSERT_FALSE(model.empty());
  size_t found[2] = {0, 0};
  const char* policies[2] = {"snapstream", "streaming"};
  for (int i = 0; i < 2; ++i) {
    const json results = passkey_results(model,
                                         std::string("--lengths 2048 --depths 0,0.25,0.5,0.75 --trials 1 -t 1 ") +
                                             "--kv-policy " + policies[i] + " --kv-budget 1024",
                                         4);
    ASSERT_EQ(results.size(), 4u);
    for (const auto& x : results) {
      found[i] += x["correct"].get<bool>();
      // A key before the recent window cannot be found by streaming.
      if (i == 1 && x["depth"].get<double>() < 0.5) {
        EXPECT_FALSE(x["correct"].get<bool>()) << x;
      }
    }
  }
  EXPECT_GE(found[0], 2u) << "snapstream found " << found[0] << " of 4 keys";
  EXPECT_GT(found[0], found[1]) << "snapstream " << found[0] << ", streaming " << found[1];
}

TEST(PasskeyLong, SnapStreamFindsKeys450And620TokensBeforeTheQuestionAt7500Tokens) {
  const std::string model = converted(test::smollm2_gguf(), "passkey_long_smollm2.keel", "");
  ASSERT_FALSE(model.empty());
  // Seed 1 (the default) draws the keys of the depths in turn: 4432462 at 0.92, 25246 at 0.94.
  const json results =
      passkey_results(model, "--lengths 7500 --depths 0.92,0.94 -t 1 --kv-policy snapstream --kv-budget 1024", 2);
  ASSERT_EQ(results.size(), 2u);
  const char* expected[] = {"4432462", "25246"};
  for (size_t i = 0; i < 2; ++i) {
    const json& x = results[i];
    ASSERT_EQ(x["expected"], expected[i]) << "not the prompts the misses were found on: " << x;
    EXPECT_GE(x["length"].get<int>(), 7400) << x;
    EXPECT_TRUE(x["correct"].get<bool>())
        << "snapstream 1024 answered '" << x["answer"].get<std::string>() << "' at depth " << x["depth"]
        << "; the full cache finds " << x["expected"].get<std::string>();
  }
}

// Gemma 3 270M at 8k (docs/results.md, "Why rocketkv lost Gemma 3's pass keys"): rocketkv at
// B = 1024 with its defaults loses keys its full cache finds, one stage after the other; with
// head ranking and the prefix at its original positions it finds the full cache's keys (depths
// 0.5 and 0.8 of these three prompts; the full cache misses 0.9). Three 8k prompts on one
// thread: about a minute.
TEST(PasskeyLong, Gemma3RocketKvWithHeadRankingAndOriginalPositionsFindsTheFullCachesKeys) {
  const std::string model = converted(test::gemma3_gguf(), "passkey_long_gemma3.keel", "--quant keep");
  ASSERT_FALSE(model.empty());
  const json results = passkey_results(model,
                                       "--lengths 8192 --depths 0.5,0.8,0.9 -t 1 --kv-policy rocketkv --kv-budget 3729 "
                                       "--sparse-budget 1024 --rocket-select head --kv-positions original",
                                       3);
  ASSERT_EQ(results.size(), 3u);
  const char* expected[] = {"4432462", "25246"};  // depths 0.5 and 0.8, found by the full cache
  for (size_t i = 0; i < 2; ++i) {
    const json& x = results[i];
    ASSERT_EQ(x["expected"], expected[i]) << "not the prompts measured: " << x;
    EXPECT_TRUE(x["correct"].get<bool>())
        << "rocketkv answered '" << x["answer"].get<std::string>() << "' at depth " << x["depth"]
        << "; the full cache finds " << x["expected"].get<std::string>();
  }
}

}  // namespace
}  // namespace keel
