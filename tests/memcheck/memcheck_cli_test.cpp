// keel memcheck end to end on stories260K: every KV policy runs with zero allocator calls after
// init and prints the JSON docs/memcheck.md documents; the verdict fails on an injected
// allocation and on --max-rss; contradictory requests are refused before the run, one line
// naming what was expected and what was found.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace keel {
namespace {

using nlohmann::json;
using test::run_cli;

std::string q(const std::string& s) { return "'" + s + "'"; }

const std::string& stories260k() { return test::stories260k_keel(); }

std::string memcheck(const std::string& options) {
  return "memcheck -m " + q(stories260k()) + " --text " +
         q(test::require_file(test::shared_path("data/paul_graham_essays"))) + " -q " + options;
}

// The JSON document memcheck printed: its last line starting with '{' (stderr, interleaved in
// `out`, may follow it).
json parse_last_line(const std::string& out) {
  const size_t nl = out.rfind("\n{");
  const size_t start = nl == std::string::npos ? 0 : nl + 1;
  const size_t end = out.find('\n', start);
  return json::parse(out.substr(start, end == std::string::npos ? std::string::npos : end - start), nullptr, false);
}

TEST(MemcheckCli, EveryPolicyRunsWithoutAllocating) {
  for (const char* policy : {"full", "window", "streaming", "snapkv", "snapstream"}) {
    SCOPED_TRACE(policy);
    const bool full = std::string(policy) == "full";
    const auto r = run_cli(
        memcheck("-n 3000 -p 300 -t 1 --json --kv-policy " + std::string(policy) + (full ? "" : " --kv-budget 256")));
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const json j = parse_last_line(r.out);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["ok"], true);
    EXPECT_TRUE(j["failures"].empty());
    EXPECT_EQ(j["policy"], policy);
    EXPECT_EQ(j["budget"], full ? 3300 : 256);
    EXPECT_EQ(j["tokens"], 3000);
    EXPECT_EQ(j["prompt_tokens"], 300);
    EXPECT_EQ(j["sequence_length"], 3300);
    EXPECT_EQ(j["allocations_after_init"], 0);
    EXPECT_EQ(j["frees_after_init"], 0);
    if (full) {
      EXPECT_EQ(j["kv_evicted"], 0);
    } else {
      EXPECT_GT(j["kv_evicted"].get<uint64_t>(), 0u);
    }
    EXPECT_EQ(j["warmup_tokens"], 300);
    EXPECT_EQ(j["tolerance_bytes"], 1 << 20);
    for (const char* f : {"rss_start_bytes", "rss_at_warmup_bytes", "rss_end_bytes", "rss_max_bytes", "planned_bytes",
                          "used_bytes", "weights_bytes", "tokens_per_second"}) {
      EXPECT_GT(j[f].get<double>(), 0.0) << f;
    }
    EXPECT_LE(j["used_bytes"].get<uint64_t>(), j["planned_bytes"].get<uint64_t>());
    EXPECT_EQ(j["planned_bytes"].get<uint64_t>(),
              j["persistent_planned_bytes"].get<uint64_t>() + j["scratch_planned_bytes"].get<uint64_t>());
    EXPECT_GE(j["rss_max_bytes"].get<uint64_t>(), j["rss_end_bytes"].get<uint64_t>());
    EXPECT_LE(j["drift_bytes"].get<uint64_t>(), j["tolerance_bytes"].get<uint64_t>());
    // Samples at token 0 (after the prompt), every 1000 tokens and at the warm-up, in order.
    const json& s = j["rss_samples"];
    ASSERT_EQ(s.size(), 5u) << s;
    EXPECT_EQ(s[0][0], 0);
    EXPECT_EQ(s[1][0], 300);
    EXPECT_EQ(s[4][0], 3000);
    EXPECT_EQ(s[4][1], j["rss_end_bytes"]);
  }
}

TEST(MemcheckCli, ThreadPoolRunsWithoutAllocating) {
  const auto r = run_cli(memcheck("-n 100 -p 100 -t 2 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = parse_last_line(r.out);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["allocations_after_init"], 0);
  EXPECT_EQ(j["frees_after_init"], 0);
}

TEST(MemcheckCli, InjectedAllocationFailsTheCheck) {
  const auto r = run_cli(memcheck("-n 500 -p 100 -t 1 --json --inject-allocation 10"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  const json j = parse_last_line(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["allocations_after_init"], 1);
  EXPECT_EQ(j["frees_after_init"], 1);
  EXPECT_EQ(j["bytes_allocated_after_init"], 1);
  ASSERT_EQ(j["failures"].size(), 1u);
  EXPECT_TRUE(test::mentions(r.out, {"2 allocator calls", "1 allocations of 1 bytes", "1 frees", "expected 0"}));
}

TEST(MemcheckCli, TrapAbortsAtTheInjectedAllocation) {
  const auto r = run_cli(memcheck("-n 500 -p 100 -t 1 --trap --inject-allocation 10"));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(test::mentions(r.out, {"malloc(1)", "trap"}));
}

TEST(MemcheckCli, MaxRssIsEnforced) {
  const auto low = run_cli(memcheck("-n 300 -p 100 -t 1 --json --max-rss 1M"));
  EXPECT_EQ(low.exit_code, 1) << low.out;
  const json j = parse_last_line(low.out);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["max_rss_bytes"], 1 << 20);
  EXPECT_NE(low.out.find("exceeds --max-rss 1048576"), std::string::npos) << low.out;
  const auto high = run_cli(memcheck("-n 300 -p 100 -t 1 --max-rss 1GiB"));
  EXPECT_EQ(high.exit_code, 0) << high.out;
  EXPECT_NE(high.out.find("\nok\n"), std::string::npos) << high.out;
}

TEST(MemcheckCli, FullPolicyWithTooSmallBudgetIsRefusedBeforeRunning) {
  const auto r = run_cli(memcheck("-n 3000 -p 300 --kv-policy full --kv-budget 1024 --json"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(test::mentions(r.out, {"300 + 3000 = 3300", "--kv-budget", "1024"}));
  EXPECT_EQ(r.out.find('{'), std::string::npos) << "nothing ran, so no verdict: " << r.out;
}

TEST(MemcheckCli, BadRequestsAreOneLineErrors) {
  struct Case {
    std::string options;
    int exit_code;
    std::string message;
  };
  const Case cases[] = {
      {"-n 0", 2, "--tokens must be at least 1"},
      {"-p 0", 2, "--prompt-tokens must be at least 1"},
      {"-n 100 --warmup 200", 2, "--warmup 200 exceeds --tokens 100"},
      {"--max-rss 12X", 2, "--max-rss expects bytes such as 1048576, 64M or 1GiB, got '12X'"},
      {"--rss-every 0", 2, "--rss-every must be at least 1"},
      {"--frobnicate", 2, "unknown option '--frobnicate'"},
      {"-n 100 --text /nonexistent/essays", 1, "cannot read the text /nonexistent/essays"},
      {"-n 100 -p 100000000", 1, "--prompt-tokens asks for 100000000"},
  };
  for (const Case& c : cases) {
    const auto r = run_cli(memcheck(c.options));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.options << ": " << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.options << ": " << r.out;
  }
}

}  // namespace
}  // namespace keel
