//===- LrScheduleTest.cpp - warm-up + cosine schedule, clipping factor ----===//

#include "LrSchedule.h"

#include "runtime/checkpoint/test/TestFiles.h"

#include <cmath>

namespace bmrt::test {
namespace {

TEST(LrSchedule, WarmupClimbsLinearlyToThePeak) {
  LrSchedule s(1e-3f, 100, 1000, 1e-4f);
  EXPECT_FLOAT_EQ(s.learningRate(1), 1e-5f);
  EXPECT_FLOAT_EQ(s.learningRate(50), 5e-4f);
  EXPECT_FLOAT_EQ(s.learningRate(100), 1e-3f);
}

TEST(LrSchedule, CosineDecaysToTheMinimumAtTheLastStep) {
  LrSchedule s(1e-3f, 100, 1100, 1e-4f);
  // Half-way through the decay the cosine is at 0: the mean of the two.
  EXPECT_FLOAT_EQ(s.learningRate(600), 5.5e-4f);
  // A quarter of the way: min + (peak - min) (1 + cos(pi / 4)) / 2.
  EXPECT_FLOAT_EQ(s.learningRate(350),
                  float(1e-4 + 9e-4 * (1 + std::cos(M_PI / 4)) / 2));
  EXPECT_FLOAT_EQ(s.learningRate(1100), 1e-4f);
  // After the last step it stays at the minimum.
  EXPECT_FLOAT_EQ(s.learningRate(5000), 1e-4f);
  // Strictly decreasing in between.
  for (int64_t step = 101; step < 1100; ++step)
    ASSERT_LT(s.learningRate(step + 1), s.learningRate(step)) << step;
}

TEST(LrSchedule, DefaultMinimumIsATenthOfThePeak) {
  LrSchedule s(6e-4f, 10, 110);
  EXPECT_FLOAT_EQ(s.minimum(), 6e-5f);
  EXPECT_FLOAT_EQ(s.learningRate(110), 6e-5f);
  EXPECT_FLOAT_EQ(s.learningRate(60), 3.3e-4f);
}

TEST(LrSchedule, WithoutWarmupStartsNearThePeak) {
  LrSchedule s(1.0f, 0, 4, 0.0f);
  EXPECT_FLOAT_EQ(s.learningRate(1), float((1 + std::cos(M_PI / 4)) / 2));
  EXPECT_FLOAT_EQ(s.learningRate(2), 0.5f);
  EXPECT_FLOAT_EQ(s.learningRate(4), 0.0f);
}

TEST(LrSchedule, RunShorterThanWarmupStaysInWarmup) {
  LrSchedule s(1.0f, 10, 5);
  EXPECT_FLOAT_EQ(s.learningRate(5), 0.5f);
  EXPECT_FLOAT_EQ(s.learningRate(10), 1.0f);
  EXPECT_FLOAT_EQ(s.learningRate(11), 1.0f);
}

TEST(LrSchedule, DefaultConstructedIsZero) {
  EXPECT_EQ(LrSchedule().learningRate(1), 0.0f);
}

TEST(LrSchedule, BadSettings) {
  EXPECT_ERROR(LrSchedule(-1.0f, 0, 10),
               "the learning rate must be a finite number >= 0");
  EXPECT_ERROR(LrSchedule(1.0f, -1, 10), "the warm-up must be >= 0 steps");
  EXPECT_ERROR(LrSchedule(1.0f, 0, 10, 2.0f),
               "the minimum learning rate 2 must lie in [0, 1]");
  EXPECT_ERROR(LrSchedule(1.0f, 0, -3), "the number of steps must be >= 0");
}

TEST(Clipping, ScaleOnlyAboveTheMaximum) {
  EXPECT_EQ(clipScale(0.5, 1.0), 1.0);
  EXPECT_EQ(clipScale(1.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clipScale(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  // The clipped gradient's norm is just below the maximum.
  EXPECT_LT(4.0 * clipScale(4.0, 2.0), 2.0);
  EXPECT_NEAR(4.0 * clipScale(4.0, 2.0), 2.0, 1e-6);
  // 0 turns clipping off.
  EXPECT_EQ(clipScale(1e9, 0.0), 1.0);
}

TEST(Clipping, FromSumOfSquares) {
  // Gradients (3, 4): norm 5.
  EXPECT_DOUBLE_EQ(clipScaleFromSumOfSquares(25.0, 1.0), 1.0 / (5.0 + 1e-6));
  EXPECT_EQ(clipScaleFromSumOfSquares(25.0, 5.0), 1.0);
}

} // namespace
} // namespace bmrt::test
