//===- ReductionKernelsTest.cpp - reduce, scans, top-k, softmax, loss -----===//

#include "KernelTestSupport.h"

#include "bmrt/Error.h"

#include <cmath>
#include <limits>
#include <string>

using namespace bmrt;
using namespace bmrt::cpu;
using namespace bmrt::test;

namespace {

//===----------------------------------------------------------------------===//
// Reduce
//===----------------------------------------------------------------------===//

Owned runReduce(ReduceOp op, const Owned &x, const Ints &axes,
                bool keepDims = false) {
  Shape shape;
  for (int64_t d = 0; d < x.view.rank(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced)
      shape.push_back(x.view.shape[d]);
    else if (keepDims)
      shape.push_back(1);
  }
  Owned y(x.view.dtype, shape);
  reduce(cpuStream(), op, x.view, y.view, axes);
  return y;
}

/// The reduction by a plain loop over every element, in double.
std::vector<double> referenceReduce(ReduceOp op, const Owned &x,
                                    const Ints &axes) {
  const Shape &shape = x.view.shape;
  Shape kept;
  for (int64_t d = 0; d < x.view.rank(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end())
      kept.push_back(shape[d]);
  int64_t outputs = numElements(kept);
  double init = op == ReduceOp::Max ? -INFINITY : 0.0;
  std::vector<double> acc(outputs, init);
  std::vector<int64_t> counts(outputs, 0);
  for (int64_t k = 0; k < x.size(); ++k) {
    int64_t rest = k, out = 0, scale = 1;
    for (int64_t d = x.view.rank() - 1; d >= 0; --d) {
      int64_t i = rest % shape[d];
      rest /= shape[d];
      if (std::find(axes.begin(), axes.end(), d) != axes.end())
        continue;
      out += i * scale;
      scale *= shape[d];
    }
    double v = x.view.f32()[k];
    acc[out] = op == ReduceOp::Max ? std::max(acc[out], v) : acc[out] + v;
    ++counts[out];
  }
  if (op == ReduceOp::Mean)
    for (int64_t o = 0; o < outputs; ++o)
      acc[o] /= counts[o];
  return acc;
}

void expectReduceMatches(ReduceOp op, const Owned &x, const Ints &axes) {
  SCOPED_TRACE(formatShape(x.view.shape) + " over " + formatShape(axes));
  Owned y = runReduce(op, x, axes);
  std::vector<double> expected = referenceReduce(op, x, axes);
  ASSERT_EQ(y.size(), static_cast<int64_t>(expected.size()));
  for (int64_t k = 0; k < y.size(); ++k)
    ASSERT_NEAR(y.f(k), expected[k],
                1e-5 * std::max(1.0, std::fabs(expected[k])))
        << k;
}

TEST(Reduce, HandComputed) {
  Owned x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  expectFloats(runReduce(ReduceOp::Sum, x, {1}), {6, 15});
  expectFloats(runReduce(ReduceOp::Sum, x, {0}, /*keepDims=*/true), {5, 7, 9});
  expectFloats(runReduce(ReduceOp::Mean, x, {0, 1}), {3.5f});
  expectFloats(runReduce(ReduceOp::Max, x, {0}), {4, 5, 6});
  Owned ids = i64({2, 3}, {1, 2, 3, 4, 5, -6});
  EXPECT_EQ(intsOf(runReduce(ReduceOp::Sum, ids, {1})),
            (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(intsOf(runReduce(ReduceOp::Max, ids, {0})),
            (std::vector<int64_t>{4, 5, 3}));
  EXPECT_EQ(intsOf(runReduce(ReduceOp::Mean, ids, {1})),
            (std::vector<int64_t>{2, 1}));
}

TEST(Reduce, EveryAxisPattern) {
  Owned x = randomF32({3, 4, 5, 2}, 60);
  for (const Ints &axes :
       {Ints{0}, Ints{1}, Ints{3}, Ints{0, 1}, Ints{1, 2}, Ints{0, 2},
        Ints{1, 3}, Ints{0, 3}, Ints{0, 1, 2, 3}})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max})
      expectReduceMatches(op, x, axes);
  // Reduced dims of size 1 change nothing.
  Owned ones = randomF32({2, 1, 3}, 61);
  expectReduceMatches(ReduceOp::Sum, ones, {1});
}

TEST(Reduce, LargeRowsColumnsAndFullReductions) {
  // Bias gradients ([rows, features] over rows), row sums, a whole tensor,
  // and few columns over many rows (the reduced dim is cut into parts).
  Owned bias = randomF32({3000, 40}, 62);
  expectReduceMatches(ReduceOp::Sum, bias, {0});
  expectReduceMatches(ReduceOp::Max, bias, {0});
  expectReduceMatches(ReduceOp::Mean, bias, {1});
  expectReduceMatches(ReduceOp::Sum, bias, {0, 1});
  expectReduceMatches(ReduceOp::Max, bias, {0, 1});
  Owned narrow = randomF32({40000, 2}, 63);
  expectReduceMatches(ReduceOp::Sum, narrow, {0});
  Owned middle = randomF32({3, 20000, 3}, 64);
  expectReduceMatches(ReduceOp::Mean, middle, {1});
}

//===----------------------------------------------------------------------===//
// Cumsum and top-k
//===----------------------------------------------------------------------===//

Owned runCumsum(const Owned &x, int64_t axis, bool exclusive, bool reverse) {
  Owned y(x.view.dtype, x.view.shape);
  cumsum(cpuStream(), x.view, y.view, axis, exclusive, reverse);
  return y;
}

TEST(Cumsum, ExclusiveAndReverse) {
  Owned x = f32({4}, {1, 2, 3, 4});
  expectFloats(runCumsum(x, 0, false, false), {1, 3, 6, 10});
  expectFloats(runCumsum(x, 0, true, false), {0, 1, 3, 6});
  expectFloats(runCumsum(x, 0, false, true), {10, 9, 7, 4});
  expectFloats(runCumsum(x, 0, true, true), {9, 7, 4, 0});
  Owned grid = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(intsOf(runCumsum(grid, 0, false, false)),
            (std::vector<int64_t>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(intsOf(runCumsum(grid, 1, true, false)),
            (std::vector<int64_t>{0, 1, 3, 0, 4, 9}));
}

TEST(Cumsum, LargeColumnsMatchReference) {
  Owned x = randomF32({3, 100, 300}, 65);
  Owned y = runCumsum(x, 1, false, false);
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t j = 0; j < 300; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < 100; ++i) {
        sum += x.f((o * 100 + i) * 300 + j);
        ASSERT_NEAR(y.f((o * 100 + i) * 300 + j), sum, 1e-5);
      }
    }
}

TEST(TopK, LargestSmallestAndTies) {
  Owned x = f32({2, 4}, {3, 1, 3, 2, -1, 5, 0, 5});
  Owned values(DType::F32, {2, 2}), indices(DType::I64, {2, 2});
  topK(cpuStream(), x.view, values.view, indices.view, 2, 1, true);
  // Ties go to the lower index.
  EXPECT_EQ(floatsOf(values), (std::vector<float>{3, 3, 5, 5}));
  EXPECT_EQ(intsOf(indices), (std::vector<int64_t>{0, 2, 1, 3}));
  topK(cpuStream(), x.view, values.view, indices.view, 2, 1, false);
  EXPECT_EQ(floatsOf(values), (std::vector<float>{1, 2, -1, 0}));
  EXPECT_EQ(intsOf(indices), (std::vector<int64_t>{1, 3, 0, 2}));
  // Along axis 0.
  Owned column(DType::F32, {1, 4}), where(DType::I64, {1, 4});
  topK(cpuStream(), x.view, column.view, where.view, 1, 0, true);
  EXPECT_EQ(floatsOf(column), (std::vector<float>{3, 5, 3, 5}));
  EXPECT_EQ(intsOf(where), (std::vector<int64_t>{0, 1, 0, 1}));
  // I64 values.
  Owned ids = i64({5}, {4, 9, -2, 9, 0});
  Owned top(DType::I64, {3}), at(DType::I64, {3});
  topK(cpuStream(), ids.view, top.view, at.view, 3, 0, true);
  EXPECT_EQ(intsOf(top), (std::vector<int64_t>{9, 9, 4}));
  EXPECT_EQ(intsOf(at), (std::vector<int64_t>{1, 3, 0}));
}

//===----------------------------------------------------------------------===//
// Softmax
//===----------------------------------------------------------------------===//

Owned runSoftmax(const Owned &x, int64_t axis, bool log = false) {
  Owned y(DType::F32, x.view.shape);
  (log ? logSoftmax : softmax)(cpuStream(), x.view, y.view, axis);
  return y;
}

TEST(Softmax, HandComputedAndShiftInvariant) {
  // exp(1, 2, 3) / sum.
  std::vector<float> expected = {0.0900305732f, 0.2447284711f, 0.6652409558f};
  expectFloats(runSoftmax(f32({3}, {1, 2, 3}), 0), expected);
  // Would overflow exp() without subtracting the maximum.
  expectFloats(runSoftmax(f32({3}, {1001, 1002, 1003}), 0), expected);
  expectFloats(
      runSoftmax(f32({3}, {1, 2, 3}), 0, /*log=*/true),
      {std::log(expected[0]), std::log(expected[1]), std::log(expected[2])});
  expectFloats(runSoftmax(f32({2}, {-1000, 0}), 0, /*log=*/true),
               {-1000.f, 0.f});
  // Masked entries (-inf) get exactly 0.
  expectFloats(runSoftmax(f32({3}, {0, -INFINITY, 0}), 0), {0.5f, 0.f, 0.5f});
}

TEST(Softmax, InnerAxisMatchesReference) {
  Owned x = randomF32({2, 5, 3}, 70, -3.f, 3.f);
  Owned y = runSoftmax(x, 1);
  for (int64_t o = 0; o < 2; ++o)
    for (int64_t j = 0; j < 3; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < 5; ++i)
        sum += std::exp(double(x.f((o * 5 + i) * 3 + j)));
      for (int64_t i = 0; i < 5; ++i) {
        int64_t k = (o * 5 + i) * 3 + j;
        EXPECT_NEAR(y.f(k), std::exp(double(x.f(k))) / sum, 1e-6);
      }
    }
}

TEST(Softmax, LargeAttentionRowsSumToOne) {
  Owned x = randomF32({4, 128, 128}, 71, -8.f, 8.f);
  Owned y = runSoftmax(x, 2);
  for (int64_t r = 0; r < 4 * 128; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < 128; ++j)
      sum += y.f(r * 128 + j);
    ASSERT_NEAR(sum, 1.0, 1e-5) << r;
  }
}

TEST(SoftmaxGrad, MatchesFiniteDifferences) {
  // Softmax is smooth; inputs of O(1) keep its third derivative O(1), so
  // the h^2 truncation error (~1e-5) and fp32 rounding (~1e-5) sit well
  // inside the default 2e-3 tolerance.
  for (int64_t axis : {1, 2}) {
    SCOPED_TRACE(axis);
    Owned x = randomF32({2, 4, 5}, 72 + axis, -2.f, 2.f);
    Owned weights = randomF32(x.view.shape, 80);
    Owned y = runSoftmax(x, axis);
    Owned dx(DType::F32, x.view.shape);
    softmaxGrad(cpuStream(), y.view, weights.view, dx.view, axis);
    expectGradientMatches([&](const Owned &in) { return runSoftmax(in, axis); },
                          x, weights, dx);
  }
}

TEST(LogSoftmaxGrad, MatchesFiniteDifferences) {
  // As for softmax: smooth, O(1) inputs, default tolerance.
  for (int64_t axis : {0, 2}) {
    SCOPED_TRACE(axis);
    Owned x = randomF32({3, 2, 6}, 74 + axis, -2.f, 2.f);
    Owned weights = randomF32(x.view.shape, 81);
    Owned y = runSoftmax(x, axis, /*log=*/true);
    Owned dx(DType::F32, x.view.shape);
    logSoftmaxGrad(cpuStream(), y.view, weights.view, dx.view, axis);
    expectGradientMatches(
        [&](const Owned &in) { return runSoftmax(in, axis, /*log=*/true); }, x,
        weights, dx);
  }
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

float runCrossEntropy(const Owned &logits, const Owned &labels) {
  Owned loss(DType::F32, {});
  crossEntropy(cpuStream(), logits.view, labels.view, loss.view);
  return loss.view.f32()[0];
}

TEST(CrossEntropy, HandComputed) {
  Owned logits = f32({3, 3}, {1, 2, 3, 1, 1, 1, 5, 5, 5});
  // Row 0: -log(0.66524096) = 0.40760596; row 1: log(3) = 1.09861229;
  // row 2 is ignored.
  Owned labels = i64({3}, {2, 0, -100});
  EXPECT_NEAR(runCrossEntropy(logits, labels), (0.40760596 + 1.09861229) / 2,
              1e-6);
  // Shifted far up: still finite, the same value.
  Owned shifted = f32({1, 3}, {1001, 1002, 1003});
  EXPECT_NEAR(runCrossEntropy(shifted, i64({1}, {2})), 0.40760596, 1e-5);
}

TEST(CrossEntropy, EveryLabelIgnoredGivesZero) {
  Owned logits = randomF32({2, 4}, 90);
  EXPECT_EQ(runCrossEntropy(logits, i64({2}, {-100, -100})), 0.f);
  Owned dlogits(DType::F32, {2, 4});
  Owned dloss = f32({}, {1.f});
  fill(cpuStream(), dlogits.view, 99.0);
  crossEntropyGrad(cpuStream(), logits.view, i64({2}, {-100, -100}).view,
                   dloss.view, dlogits.view);
  EXPECT_EQ(floatsOf(dlogits), std::vector<float>(8, 0.f));
}

TEST(CrossEntropy, LabelOutOfRangeThrowsNamingValueAndBound) {
  Owned logits = randomF32({2, 3}, 91);
  Owned dlogits(DType::F32, {2, 3}), dloss = f32({}, {1.f});
  for (int64_t bad : {3, -1, 600}) {
    Owned labels = i64({2}, {0, bad});
    std::string expected =
        "label " + std::to_string(bad) + " is out of range for 3 classes";
    try {
      runCrossEntropy(logits, labels);
      ADD_FAILURE() << "no error for label " << bad;
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
    EXPECT_THROW(crossEntropyGrad(cpuStream(), logits.view, labels.view,
                                  dloss.view, dlogits.view),
                 Error);
  }
}

TEST(CrossEntropyGrad, MatchesFiniteDifferencesWithAnIgnoredRow) {
  // The loss is smooth in the logits; O(1) logits and a scalar dloss keep
  // the default tolerance's argument (fp32 rounding ~1e-5, h^2 truncation
  // ~1e-5). The ignored row must get an exactly zero gradient, which the
  // difference confirms since changing its logits leaves the loss as is.
  Owned logits = randomF32({4, 5}, 92, -2.f, 2.f);
  Owned labels = i64({4}, {3, -100, 0, 4});
  Owned dloss = f32({}, {1.7f});
  Owned analytic(DType::F32, {4, 5});
  crossEntropyGrad(cpuStream(), logits.view, labels.view, dloss.view,
                   analytic.view);
  for (int64_t j = 0; j < 5; ++j)
    EXPECT_EQ(analytic.f(5 + j), 0.f);
  expectGradientMatches(
      [&](const Owned &x) { return f32({}, {runCrossEntropy(x, labels)}); },
      logits, dloss, analytic);
}

TEST(CrossEntropy, LargeVocabularyMatchesReference) {
  Owned logits = randomF32({64, 5000}, 93, -6.f, 6.f);
  Owned labels(DType::I64, {64});
  for (int64_t i = 0; i < 64; ++i)
    labels.i(i) = i % 7 == 3 ? -100 : (i * 131) % 5000;
  double total = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < 64; ++i) {
    if (labels.i(i) == -100)
      continue;
    double sum = 0;
    for (int64_t j = 0; j < 5000; ++j)
      sum += std::exp(double(logits.f(i * 5000 + j)));
    total += std::log(sum) - logits.f(i * 5000 + labels.i(i));
    ++counted;
  }
  EXPECT_NEAR(runCrossEntropy(logits, labels), total / counted, 1e-5);
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

/// Columns [first, first + count) of logits [rows, classes].
Owned columns(const Owned &logits, int64_t first, int64_t count) {
  int64_t rows = logits.view.shape[0], classes = logits.view.shape[1];
  Owned part(DType::F32, {rows, count});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < count; ++j)
      part.view.f32()[i * count + j] = logits.view.f32()[i * classes + first + j];
  return part;
}

/// What `ranks` ranks holding equal slices of the classes compute: each
/// its statistics, gathered in rank order as the all-gather leaves them.
Owned gatheredStats(const Owned &logits, const Owned &labels, int64_t ranks) {
  int64_t rows = logits.view.shape[0], local = logits.view.shape[1] / ranks;
  Owned all(DType::F32, {3 * ranks, rows});
  for (int64_t r = 0; r < ranks; ++r) {
    Owned mine(DType::F32, {3, rows});
    crossEntropyStats(cpuStream(), columns(logits, r * local, local).view,
                      labels.view, r * local, logits.view.shape[1], mine.view);
    std::copy_n(mine.view.f32(), 3 * rows, all.view.f32() + 3 * r * rows);
  }
  return all;
}

// Split over 1, 2 and 4 ranks, the merged statistics give the one-rank
// loss and, slice by slice, the one-rank gradient. Tolerance 1e-6
// relative: both sum exp(x - max) in double over the same terms (the merge
// rescales each rank's sum by exp(max_r - max), one more rounding) and the
// loss is their mean of O(1) terms.
TEST(VocabParallelCrossEntropy, MatchesTheWholeRowsOnAnySplit) {
  Owned logits = randomF32({6, 12}, 94, -4.f, 4.f);
  // An ignored row, and labels on every rank's slice.
  Owned labels = i64({6}, {0, 11, -100, 5, 6, 3});
  Owned dloss = f32({}, {0.7f});
  float want = runCrossEntropy(logits, labels);
  Owned wantGrad(DType::F32, {6, 12});
  crossEntropyGrad(cpuStream(), logits.view, labels.view, dloss.view,
                   wantGrad.view);
  for (int64_t ranks : {1, 2, 4}) {
    SCOPED_TRACE(ranks);
    Owned stats = gatheredStats(logits, labels, ranks);
    Owned loss(DType::F32, {});
    crossEntropyFromStats(cpuStream(), stats.view, labels.view, loss.view);
    EXPECT_NEAR(loss.view.f32()[0], want, 1e-6 * std::fabs(want));
    int64_t local = 12 / ranks;
    for (int64_t r = 0; r < ranks; ++r) {
      Owned part = columns(logits, r * local, local);
      Owned grad(DType::F32, {6, local});
      crossEntropyGradFromStats(cpuStream(), part.view, labels.view,
                                stats.view, dloss.view, r * local, 12,
                                grad.view);
      expectClose(grad, columns(wantGrad, r * local, local), 1e-6);
    }
  }
}

TEST(VocabParallelCrossEntropy, LabelOutOfRangeThrowsNamingTheWholeVocabulary) {
  Owned logits = randomF32({2, 3}, 95);
  Owned stats(DType::F32, {3, 2});
  try {
    crossEntropyStats(cpuStream(), logits.view, i64({2}, {0, 6}).view, 3, 6,
                      stats.view);
    ADD_FAILURE() << "no error for label 6 of 6 classes";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()), "label 6 is out of range for 6 classes");
  }
}

} // namespace
