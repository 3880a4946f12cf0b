//===- ShardingRuleTest.cpp - printing of sharding rules ------------------===//

#include "bm/ShardingRule.h"

#include "gtest/gtest.h"

using namespace bm;

namespace {

TEST(ShardingRuleTest, PrintsMatmulLikeShardy) {
  ShardingRule rule;
  int i = rule.addFactor(8, FactorKind::Parallel);
  int j = rule.addFactor(16, FactorKind::Parallel);
  int k = rule.addFactor(32, FactorKind::Reduction);
  rule.operandFactors = {{{i}, {k}}, {{k}, {j}}};
  rule.resultFactors = {{{i}, {j}}};
  EXPECT_EQ(rule.str(),
            "([i, k], [k, j]) -> ([i, j]) {i=8, j=16, k=32} reduction={k}");
}

TEST(ShardingRuleTest, PrintsCompoundAndEmptyDimensions) {
  // Split of [b, 3h] into three [b, h]: the piece index needs replication.
  ShardingRule rule;
  int b = rule.addFactor(4, FactorKind::Parallel);
  int piece = rule.addFactor(3, FactorKind::NeedReplication);
  int h = rule.addFactor(64, FactorKind::Parallel);
  rule.operandFactors = {{{b}, {piece, h}}, {{}}};
  rule.resultFactors = {{{b}, {h}}};
  EXPECT_EQ(rule.str(), "([i, {j, k}], [{}]) -> ([i, k]) {i=4, j=3, k=64} "
                        "need_replication={j}");
}

} // namespace
