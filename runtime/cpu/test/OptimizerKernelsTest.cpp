//===- OptimizerKernelsTest.cpp - sumOfSquares, AdamW, SGD ----------------===//
//
// Each update is checked against the formula of Kernels.h evaluated in
// double, element by element. tests/runtime/test_optimizer.py checks the
// same kernels over several steps against an independent numpy reference.
//
//===----------------------------------------------------------------------===//

#include "KernelTestSupport.h"

#include <omp.h>

#include <cmath>

// OpenBLAS's own query; declared here because the test does not get the
// OpenBLAS include folder (bmrt keeps it private).
extern "C" int openblas_get_num_threads(void);

namespace bmrt::test {
namespace {


TEST(OptimizerKernels, SumOfSquaresSmall) {
  Owned x = f32({2, 2}, {1, -2, 3, 0.5f});
  EXPECT_DOUBLE_EQ(cpu::sumOfSquares(cpuStream(), x.view), 14.25);
  Owned empty(DType::F32, {0});
  EXPECT_EQ(cpu::sumOfSquares(cpuStream(), empty.view), 0.0);
}

TEST(OptimizerKernels, SumOfSquaresLargeAccumulatesInDouble) {
  // 2^20 + 3 elements of 0.1f: a float accumulator would drift visibly.
  Owned x(DType::F32, {(1 << 20) + 3});
  for (int64_t i = 0; i < x.size(); ++i)
    x.f(i) = 0.1f;
  double expected = double(x.size()) * double(0.1f) * double(0.1f);
  EXPECT_NEAR(cpu::sumOfSquares(cpuStream(), x.view), expected,
              1e-9 * expected);
}

TEST(OptimizerKernels, SumOfSquaresIndependentOfThreadCount) {
  Owned x = randomF32({300001}, 7);
  int saved = omp_get_max_threads();
  cpu::setThreads(1);
  double one = cpu::sumOfSquares(cpuStream(), x.view);
  cpu::setThreads(3);
  double three = cpu::sumOfSquares(cpuStream(), x.view);
  cpu::setThreads(saved);
  EXPECT_EQ(one, three);
}

/// The AdamW step of Kernels.h in double.
void adamwReference(double &p, double &m, double &v, double g,
                    const AdamWConfig &c, double lr, int64_t t) {
  m = c.beta1 * m + (1 - c.beta1) * g;
  v = c.beta2 * v + (1 - c.beta2) * g * g;
  double mHat = m / (1 - std::pow(double(c.beta1), double(t)));
  double vHat = v / (1 - std::pow(double(c.beta2), double(t)));
  p -= lr * (mHat / (std::sqrt(vHat) + c.epsilon) + c.weightDecay * p);
}

TEST(OptimizerKernels, AdamWMatchesFormula) {
  const int64_t n = 70000; // above the parallel threshold
  Owned p = randomF32({n}, 1), m = randomF32({n}, 2, -0.1f, 0.1f),
        v = randomF32({n}, 3, 0.f, 0.01f), g = randomF32({n}, 4);
  AdamWConfig config;
  config.weightDecay = 0.1f;
  const float lr = 1e-3f, scale = 0.5f;
  const int64_t step = 3;
  Owned p0 = p, m0 = m, v0 = v;
  cpu::adamwUpdate(cpuStream(), p.view, g.view, m.view, v.view, config, lr,
                   step, scale);
  for (int64_t i = 0; i < n; ++i) {
    double rp = p0.f(i), rm = m0.f(i), rv = v0.f(i);
    adamwReference(rp, rm, rv, double(g.f(i)) * scale, config, lr, step);
    ASSERT_NEAR(m.f(i), rm, 1e-6) << i;
    ASSERT_NEAR(v.f(i), rv, 1e-7 + 1e-5 * rv) << i;
    ASSERT_NEAR(p.f(i), rp, 1e-6) << i;
  }
}

TEST(OptimizerKernels, AdamWFirstStepMovesByLearningRate) {
  // With zero moments, step 1's bias-corrected update is g / |g| = sign(g)
  // (up to epsilon): every parameter moves by lr against its gradient.
  Owned p = f32({3}, {1, 1, 1}), g = f32({3}, {0.5f, -2, 1e-3f});
  Owned m(DType::F32, {3}), v(DType::F32, {3});
  AdamWConfig config;
  config.weightDecay = 0;
  cpu::adamwUpdate(cpuStream(), p.view, g.view, m.view, v.view, config, 0.01f,
                   1, 1.0f);
  EXPECT_NEAR(p.f(0), 0.99f, 1e-6);
  EXPECT_NEAR(p.f(1), 1.01f, 1e-6);
  EXPECT_NEAR(p.f(2), 0.99f, 1e-4);
}

TEST(OptimizerKernels, AdamWWeightDecayIsDecoupled) {
  // A zero gradient leaves the moments at zero; only the decay moves p.
  Owned p = f32({2}, {2, -4}), g = f32({2}, {0, 0});
  Owned m(DType::F32, {2}), v(DType::F32, {2});
  AdamWConfig config;
  config.weightDecay = 0.5f;
  cpu::adamwUpdate(cpuStream(), p.view, g.view, m.view, v.view, config, 0.1f, 1,
                   1.0f);
  EXPECT_FLOAT_EQ(p.f(0), 2 - 0.1f * 0.5f * 2);
  EXPECT_FLOAT_EQ(p.f(1), -4 + 0.1f * 0.5f * 4);
  EXPECT_EQ(m.f(0), 0);
  EXPECT_EQ(v.f(1), 0);
}

TEST(OptimizerKernels, SgdFirstStepTakesTheGradientAsBuffer) {
  Owned p = f32({2}, {1, 2}), g = f32({2}, {0.5f, -1});
  // Garbage in the buffer must not leak into step 1.
  Owned buf = f32({2}, {NAN, 100});
  SgdConfig config;
  config.momentum = 0.9f;
  config.weightDecay = 0.1f;
  cpu::sgdUpdate(cpuStream(), p.view, g.view, buf.view, config, 0.5f, 1, 2.0f);
  // g = grad * 2 + 0.1 p = {1.1, -1.8}
  EXPECT_FLOAT_EQ(buf.f(0), 1.1f);
  EXPECT_FLOAT_EQ(buf.f(1), -1.8f);
  EXPECT_FLOAT_EQ(p.f(0), 1 - 0.5f * 1.1f);
  EXPECT_FLOAT_EQ(p.f(1), 2 + 0.5f * 1.8f);
}

TEST(OptimizerKernels, SgdMomentumMatchesFormula) {
  const int64_t n = 50000;
  Owned p = randomF32({n}, 5), g = randomF32({n}, 6), buf = randomF32({n}, 7);
  SgdConfig config;
  config.momentum = 0.8f;
  config.weightDecay = 0.01f;
  Owned p0 = p, b0 = buf;
  cpu::sgdUpdate(cpuStream(), p.view, g.view, buf.view, config, 0.05f, 4,
                 0.25f);
  for (int64_t i = 0; i < n; ++i) {
    double gi = double(g.f(i)) * 0.25 + 0.01 * double(p0.f(i));
    double bi = 0.8 * double(b0.f(i)) + gi;
    ASSERT_NEAR(buf.f(i), bi, 1e-6) << i;
    ASSERT_NEAR(p.f(i), double(p0.f(i)) - 0.05 * bi, 1e-6) << i;
  }
}

TEST(OptimizerKernels, SetThreads) {
  int saved = omp_get_max_threads();
  cpu::setThreads(2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  EXPECT_EQ(openblas_get_num_threads(), 2);
  // Nonsense counts mean one thread, not a crash.
  cpu::setThreads(0);
  EXPECT_EQ(omp_get_max_threads(), 1);
  cpu::setThreads(saved);
}

} // namespace
} // namespace bmrt::test
