//===- SpreadTest.cpp - the spread bmrt-calibrate records per time --------===//

#include "../Spread.h"

#include "gtest/gtest.h"

using namespace bmrt::calibrate;

TEST(SpreadTest, QuantilesInterpolateBetweenSamples) {
  std::vector<double> sorted = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(quantile(sorted, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile(sorted, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile(sorted, 0.75), 3.25);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3}, 0.5), 2);
  EXPECT_DOUBLE_EQ(quantile({7}, 0.75), 7);
}

TEST(SpreadTest, IsTheRelativeInterquartileRange) {
  // Unsorted on purpose: quartiles 1.75 and 3.25 around a median of 2.5.
  EXPECT_DOUBLE_EQ(relativeSpread({4, 1, 3, 2}), 1.5 / 2.5);
  // Three samples (the fewest Bench takes): quartiles 1.5 and 2.5.
  EXPECT_DOUBLE_EQ(relativeSpread({3, 1, 2}), 1.0 / 2);
  EXPECT_EQ(relativeSpread({5, 5, 5, 5}), 0);
}

TEST(SpreadTest, ALonePreemptedSampleBarelyWidensIt) {
  // Nine steady samples and one 10x outlier: the median's spread stays
  // small where (max - min) / median would be 9.
  std::vector<double> samples(9, 1.0);
  samples.push_back(10.0);
  EXPECT_EQ(relativeSpread(samples), 0);
}

TEST(SpreadTest, TooFewSamplesOrAZeroMedianHaveNone) {
  EXPECT_EQ(relativeSpread({}), 0);
  EXPECT_EQ(relativeSpread({2}), 0);
  EXPECT_EQ(relativeSpread({0, 0, 1}), 0);
}
