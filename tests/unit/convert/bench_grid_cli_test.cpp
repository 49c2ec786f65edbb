// keel bench over a grid of parameters on stories260K: one row per test and configuration in
// each of the three formats (markdown, JSON lines, CSV), a single configuration printing the
// one JSON object scripts read, and malformed lists as usage errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "kv/kv_policy.h"
#include "support/test_support.h"

namespace keel {
namespace {

using nlohmann::json;
using test::run_cli;

std::string q(const std::string& s) { return "'" + s + "'"; }

const std::string& stories() { return test::stories260k_keel(); }

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string l; std::getline(is, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

size_t count_char(const std::string& s, char c) { return size_t(std::count(s.begin(), s.end(), c)); }

// 2 prompt lengths and 1 generation length, 2 policies: 2 configurations of 3 tests each.
const char kGrid[] = " -p 16,32 -n 8 -t 1 --kv-policy full,streaming -r 1";

TEST(BenchGrid, JsonLinesHoldOneObjectPerConfiguration) {
  const auto r = run_cli("bench -m " + q(stories()) + kGrid + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 2u) << r.out;
  size_t rows = 0;
  const char* policies[] = {"full", "streaming"};
  for (size_t i = 0; i < ls.size(); ++i) {
    const json j = json::parse(ls[i], nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << ls[i];
    EXPECT_EQ(j["kv_policy"], policies[i]);
    EXPECT_EQ(j["threads"], 1);
    EXPECT_EQ(j["depth"], 0);
    EXPECT_EQ(j["repetitions"], 1);
    for (const char* f : {"model", "weights_bytes", "backend", "matmul_kernels", "kv_budget", "peak_rss_bytes",
                          "bytes_per_token", "kv_bytes_per_cached_token", "mean_cached_tokens"}) {
      EXPECT_TRUE(j.contains(f)) << f << ": " << ls[i];
    }
    ASSERT_EQ(j["results"].size(), 3u) << ls[i];
    EXPECT_EQ(j["results"][0]["test"], "pp16");
    EXPECT_EQ(j["results"][1]["test"], "pp32");
    EXPECT_EQ(j["results"][2]["test"], "tg8");
    for (const auto& t : j["results"]) {
      EXPECT_GT(t["tps_mean"].get<double>(), 0.0) << t;
      EXPECT_EQ(t["samples"].size(), 1u) << t;
      ++rows;
    }
    EXPECT_DOUBLE_EQ(j["results"][2]["mean_cached_tokens"].get<double>(), 4.5);  // steps 1..8 attend to 1..8
  }
  EXPECT_EQ(rows, 6u);
  // The full cache is planned for the longest test; streaming takes the model's budget.
  EXPECT_EQ(json::parse(ls[0])["kv_budget"], 32);
}

TEST(BenchGrid, MarkdownAndCsvHaveOneRowPerTest) {
  const auto md = run_cli("bench -m " + q(stories()) + kGrid);
  ASSERT_EQ(md.exit_code, 0) << md.out;
  size_t table_rows = 0;
  for (const std::string& l : lines(md.out)) table_rows += l.rfind("| ", 0) == 0;
  EXPECT_EQ(table_rows, 2u + 6u) << md.out;  // header and separator, then the tests

  const auto csv = run_cli("bench -m " + q(stories()) + kGrid + " --csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.out;
  const auto ls = lines(csv.out);
  ASSERT_EQ(ls.size(), 1u + 6u) << csv.out;
  EXPECT_EQ(ls[0].rfind("model,weights_bytes,", 0), 0u) << ls[0];
  for (const std::string& l : ls) EXPECT_EQ(count_char(l, ','), count_char(ls[0], ',')) << l;
  EXPECT_NE(ls[1].find(",full,32,0,1,pp16,16,0,"), std::string::npos) << ls[1];
  EXPECT_NE(ls[6].find(",streaming,"), std::string::npos) << ls[6];
  EXPECT_NE(ls[6].find(",tg8,0,8,"), std::string::npos) << ls[6];
}

// One value per option: the whole output is one JSON document, as scripts read it.
TEST(BenchGrid, OneConfigurationIsOneJsonDocument) {
  const auto r = run_cli("bench -m " + q(stories()) + " -p 16 -n 8 -d 4 -r 2 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["depth"], 4);
  EXPECT_EQ(j["kv_policy"], "full");
  EXPECT_EQ(j["kv_budget"], 20);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["test"], "pp16 @ d4");
  EXPECT_EQ(j["results"][1]["test"], "tg8 @ d4");
  EXPECT_EQ(j["results"][1]["samples"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["mean_cached_tokens"].get<double>(), 8.5);  // steps attend to 5..12 entries
}

TEST(BenchGrid, BadListsAreUsageErrors) {
  for (const char* bad : {"-p 16,x", "-p 16,", "-t 1,-2", "-r 1,2", "--kv-policy full,h2o", "--backend auto,gpu",
                          "--json --csv", "-p 0 -n 0"}) {
    const auto r = run_cli("bench -m " + q(stories()) + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
    EXPECT_EQ(lines(r.out).size(), 1u) << bad << ": " << r.out;
  }
}

TEST(BenchGrid, HelpShowsEachDefaultOnce) {
  const auto r = run_cli("bench --help");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("prompt tokens, 0 = skip (default 512)"), std::string::npos) << r.out;
  // The session options bench takes as lists are described once, in bench's own table.
  size_t n = 0;
  for (size_t at = r.out.find("--kv-budget"); at != std::string::npos; at = r.out.find("--kv-budget", at + 1)) ++n;
  EXPECT_EQ(n, 2u) << r.out;  // the usage line and the table
  EXPECT_NE(r.out.find("--chunk N"), std::string::npos) << r.out;
  // Every policy bench takes is named (the list comes from the policy table).
  for (KvPolicyKind k : kKvPolicies) EXPECT_NE(r.out.find(kv_policy_name(k)), std::string::npos) << kv_policy_name(k);
}

}  // namespace
}  // namespace keel
