//===- ContextLayoutTest.cpp - the mirrored order of a split sequence -----===//

#include "bmrt/ContextLayout.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace bmrt {
namespace {

TEST(ContextLayout, EachRankHoldsChunksRAndTheirMirror) {
  // 8 positions over 2 ranks: chunks of 2; rank 0 holds chunks 0 and 3,
  // rank 1 chunks 1 and 2.
  EXPECT_EQ(mirroredOrder(8, 2),
            (std::vector<int64_t>{0, 1, 6, 7, 2, 3, 4, 5}));
  // One rank: the natural order.
  EXPECT_EQ(mirroredOrder(4, 1), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(ContextLayout, EveryRankSeesAsManyCausalPairs) {
  // The point of the layout: under a causal mask each rank's queries see
  // the same number of keys.
  const int64_t length = 64, cp = 4, share = length / cp;
  std::vector<int64_t> order = mirroredOrder(length, cp);
  for (int64_t rank = 0; rank < cp; ++rank) {
    int64_t pairs = 0;
    for (int64_t p = rank * share; p < (rank + 1) * share; ++p)
      pairs += order[p] + 1;
    EXPECT_EQ(pairs, length * (length + 1) / 2 / cp) << "rank " << rank;
  }
}

TEST(ContextLayout, InverseUndoesTheOrder) {
  std::vector<int64_t> order = mirroredOrder(24, 3);
  std::vector<int64_t> inverse = inverseOrder(order);
  for (size_t p = 0; p < order.size(); ++p)
    EXPECT_EQ(inverse[order[p]], int64_t(p));
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    EXPECT_EQ(sorted[i], int64_t(i)); // a permutation
}

} // namespace
} // namespace bmrt
