// test::mentions (support/test_support.h), which the error tests rest on: it fails when a fact is
// missing and says which.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace keel {
namespace {

TEST(Mentions, PassesOnEveryFactAndNamesTheMissingOnes) {
  const char error[] = "tensor 'blk.0.attn_k.weight' has shape [64, 64], config.json implies [32, 64]";
  EXPECT_TRUE(test::mentions(error, {"blk.0.attn_k.weight", "[64, 64]", "[32, 64]"}));
  EXPECT_TRUE(test::mentions(error, {}));
  const ::testing::AssertionResult missing = test::mentions(error, {"[64, 64]", "[16, 64]", "blk.1"});
  EXPECT_FALSE(missing);
  EXPECT_TRUE(test::mentions(missing.message(), {"'[16, 64]', 'blk.1'", error}));
  EXPECT_FALSE(test::mentions("", {"x"}));
}

}  // namespace
}  // namespace keel
