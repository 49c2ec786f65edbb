// text/word_cut.h against a brute-force reading of its definition: a boundary is a safe cut when
// no token occurs in the text starting before it and ending after it.
#include "text/word_cut.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace keel::text {
namespace {

struct Case {
  std::string text;
  std::set<std::string> tokens;
  size_t max_token_bytes = 0;

  size_t token_end(size_t i, size_t e_min, size_t e_max) const {
    size_t found = 0;
    for (size_t e = e_min; e <= e_max; ++e) {
      if (tokens.count(text.substr(i, e - i))) found = e;
    }
    return found;
  }
  bool covered(size_t b) const {
    for (size_t i = 0; i < b; ++i) {
      for (size_t e = b + 1; e <= text.size(); ++e) {
        if (tokens.count(text.substr(i, e - i))) return true;
      }
    }
    return false;
  }
};

// Dense cases (two letters, many short tokens) leave no safe cut; sparse ones leave several.
Case random_case(std::mt19937& rng, bool dense) {
  Case c;
  const std::string alphabet = dense ? "ab" : "abc";
  std::uniform_int_distribution<size_t> letter(0, alphabet.size() - 1), len(2, dense ? 3 : 5),
      count(1, dense ? 30 : 12), text_len(40, 120);
  for (size_t n = count(rng); n > 0; --n) {
    std::string t;
    for (size_t k = len(rng); k > 0; --k) t += alphabet[letter(rng)];
    c.tokens.insert(t);
    c.max_token_bytes = std::max(c.max_token_bytes, t.size());
  }
  for (size_t k = text_len(rng); k > 0; --k) c.text += alphabet[letter(rng)];
  return c;
}

TEST(WordCut, MatchesBruteForceOnRandomTokenSets) {
  std::mt19937 rng(7);
  size_t with_safe = 0, without_safe = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Case c = random_case(rng, trial % 2 == 1);
    auto token_end = [&](size_t i, size_t e_min, size_t e_max) { return c.token_end(i, e_min, e_max); };
    const size_t n = c.text.size();
    for (size_t b = 1; b < n; ++b) {
      ASSERT_EQ(is_safe_cut(n, b, c.max_token_bytes, token_end), !c.covered(b)) << c.text << " b=" << b;
    }
    const size_t lo = n / 3, hi = n - 1;
    size_t want = 0;
    for (size_t b = lo; b <= hi; ++b) {
      if (!c.covered(b) && b % 2 == 0) want = b;  // only even offsets count as symbol starts here
    }
    const size_t got = last_safe_cut(n, lo, hi, c.max_token_bytes, token_end, [](size_t b) { return b % 2 == 0; });
    ASSERT_EQ(got, want) << c.text;
    (want ? with_safe : without_safe)++;
  }
  // Both outcomes occur, so the comparison above is not vacuous.
  EXPECT_GT(with_safe, 50u);
  EXPECT_GT(without_safe, 10u);
}

}  // namespace
}  // namespace keel::text
