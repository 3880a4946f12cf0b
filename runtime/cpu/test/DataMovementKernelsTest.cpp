//===- DataMovementKernelsTest.cpp - transpose, gather, slice, ... --------===//

#include "KernelTestSupport.h"

#include "bmrt/Error.h"

#include <cmath>
#include <numeric>
#include <random>
#include <string>

using namespace bmrt;
using namespace bmrt::cpu;
using namespace bmrt::test;

namespace {

/// 0, 1, 2, ... as F32, so that every moved element says where it came
/// from.
Owned counting(Shape shape) {
  Owned t(DType::F32, std::move(shape));
  for (int64_t k = 0; k < t.size(); ++k)
    t.f(k) = static_cast<float>(k);
  return t;
}

Ints stridesOf(const Shape &shape) {
  Ints strides(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

//===----------------------------------------------------------------------===//
// Transpose
//===----------------------------------------------------------------------===//

Owned runTranspose(const Owned &x, const Ints &perm) {
  Shape shape;
  for (int64_t d : perm)
    shape.push_back(x.view.shape[d]);
  Owned y(x.view.dtype, shape);
  transpose(cpuStream(), x.view, y.view, perm);
  return y;
}

/// y[i...] = x[i permuted back], by index arithmetic.
void expectTransposed(const Owned &x, const Owned &y, const Ints &perm) {
  Ints xStrides = stridesOf(x.view.shape);
  const Shape &yShape = y.view.shape;
  for (int64_t k = 0; k < y.size(); ++k) {
    int64_t source = 0;
    for (int64_t d = static_cast<int64_t>(yShape.size()) - 1, rest = k; d >= 0;
         --d) {
      source += (rest % yShape[d]) * xStrides[perm[d]];
      rest /= yShape[d];
    }
    ASSERT_EQ(y.view.f32()[k], x.view.f32()[source]) << "element " << k;
  }
}

TEST(Transpose, Matrix) {
  Owned y = runTranspose(f32({2, 3}, {1, 2, 3, 4, 5, 6}), {1, 0});
  EXPECT_EQ(y.view.shape, (Shape{3, 2}));
  EXPECT_EQ(floatsOf(y), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Transpose, EveryKindOfPermutation) {
  Owned x = counting({2, 3, 4, 5});
  for (const Ints &perm :
       {Ints{0, 2, 1, 3}, Ints{0, 1, 3, 2}, Ints{3, 1, 0, 2}, Ints{3, 2, 1, 0},
        Ints{1, 2, 3, 0}, Ints{0, 1, 2, 3}}) {
    SCOPED_TRACE(formatShape(perm));
    expectTransposed(x, runTranspose(x, perm), perm);
  }
  // Size-1 dims are dropped before planning.
  Owned withOnes = counting({1, 3, 1, 4});
  expectTransposed(withOnes, runTranspose(withOnes, {3, 2, 0, 1}),
                   {3, 2, 0, 1});
}

TEST(Transpose, LargeTiledAndRowCases) {
  // Not multiples of the 32-element tile, above the parallel threshold.
  Owned x = counting({4, 130, 90});
  expectTransposed(x, runTranspose(x, {0, 2, 1}), {0, 2, 1});
  expectTransposed(x, runTranspose(x, {2, 0, 1}), {2, 0, 1});
  Owned heads = counting({2, 40, 6, 70});
  expectTransposed(heads, runTranspose(heads, {0, 2, 1, 3}), {0, 2, 1, 3});
}

TEST(Transpose, AnyElementWidth) {
  Owned ids = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(intsOf(runTranspose(ids, {1, 0})),
            (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  Owned mask = bools({2, 3}, {1, 0, 0, 0, 1, 1});
  EXPECT_EQ(boolsOf(runTranspose(mask, {1, 0})),
            (std::vector<uint8_t>{1, 0, 0, 1, 0, 1}));
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

Owned runGather(const Owned &data, const Owned &indices, int64_t axis) {
  Shape shape;
  for (int64_t d = 0; d < axis; ++d)
    shape.push_back(data.view.shape[d]);
  for (int64_t d : indices.view.shape)
    shape.push_back(d);
  for (int64_t d = axis + 1; d < data.view.rank(); ++d)
    shape.push_back(data.view.shape[d]);
  Owned out(data.view.dtype, shape);
  gather(cpuStream(), data.view, indices.view, out.view, axis);
  return out;
}

TEST(Gather, EmbeddingRowsWithNegativeIndex) {
  Owned table = counting({4, 3});
  Owned ids = i64({2, 2}, {3, 0, -1, 1});
  Owned out = runGather(table, ids, 0);
  EXPECT_EQ(out.view.shape, (Shape{2, 2, 3}));
  EXPECT_EQ(floatsOf(out),
            (std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5}));
}

TEST(Gather, InnerAxesAndElementWidths) {
  Owned x = counting({2, 3, 2});
  Owned out = runGather(x, i64({2}, {2, 0}), 1);
  EXPECT_EQ(floatsOf(out), (std::vector<float>{4, 5, 0, 1, 10, 11, 6, 7}));
  // The last axis: single elements.
  Owned ids = i64({2, 3}, {10, 11, 12, 13, 14, 15});
  EXPECT_EQ(intsOf(runGather(ids, i64({1}, {-2}), 1)),
            (std::vector<int64_t>{11, 14}));
  // A scalar index drops the axis.
  EXPECT_EQ(intsOf(runGather(ids, i64({}, {1}), 0)),
            (std::vector<int64_t>{13, 14, 15}));
}

TEST(Gather, LargeGatherMatchesReference) {
  Owned table = randomF32({500, 64}, 3);
  Owned ids(DType::I64, {1000});
  for (int64_t k = 0; k < 1000; ++k)
    ids.i(k) = (k * 37) % 500;
  Owned out = runGather(table, ids, 0);
  for (int64_t k = 0; k < 1000; ++k)
    for (int64_t j = 0; j < 64; ++j)
      ASSERT_EQ(out.f(k * 64 + j), table.f(ids.i(k) * 64 + j));
}

TEST(Gather, IndexOutOfRangeThrowsNamingValueAndBound) {
  Owned table = counting({4, 3});
  for (int64_t bad : {4, -5, 600}) {
    Owned ids = i64({2}, {0, bad});
    try {
      runGather(table, ids, 0);
      ADD_FAILURE() << "no error for index " << bad;
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()),
                "gather index " + std::to_string(bad) +
                    " is out of range for a dim of size 4");
    }
  }
}

// The vocabulary-parallel embedding: a table [6, 2] split into two slices
// of 3 rows. Each slice gathers the rows it holds and zeros for the rest,
// so the slices' results add up to the whole table's gather; each slice's
// gradient is its rows of the whole gradient. Exact: every element is one
// row's value plus zeros.
TEST(Gather, TableSlicesAddUpToTheWholeTable) {
  Owned table = counting({6, 2});
  Owned ids = i64({4}, {5, 0, -1, 2});
  Owned whole = runGather(table, ids, 0);
  Owned dy = f32({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  Owned wholeGrad(DType::F32, {6, 2});
  gatherGrad(cpuStream(), dy.view, ids.view, wholeGrad.view, 0);
  std::vector<float> sum(8, 0.f);
  for (int64_t first : {0, 3}) {
    Owned slice(DType::F32, {3, 2});
    for (int64_t k = 0; k < 6; ++k)
      slice.f(k) = table.f(first * 2 + k);
    Owned part(DType::F32, {4, 2});
    gather(cpuStream(), slice.view, ids.view, part.view, 0, {first, 6});
    for (int64_t k = 0; k < 8; ++k)
      sum[k] += part.f(k);
    Owned grad(DType::F32, {3, 2});
    gatherGrad(cpuStream(), dy.view, ids.view, grad.view, 0, {first, 6});
    for (int64_t k = 0; k < 6; ++k)
      EXPECT_EQ(grad.f(k), wholeGrad.f(first * 2 + k)) << first << " " << k;
  }
  EXPECT_EQ(sum, floatsOf(whole));
  // Indices are checked against the whole table.
  Owned slice(DType::F32, {3, 2}), part(DType::F32, {1, 2});
  EXPECT_THROW(gather(cpuStream(), slice.view, i64({1}, {6}).view, part.view,
                      0, {3, 6}),
               Error);
}

TEST(GatherGrad, RepeatedIndicesAccumulate) {
  Owned dy = f32({3, 2}, {1, 2, 10, 20, 100, 200});
  Owned ids = i64({3}, {2, 0, 2});
  Owned ddata(DType::F32, {4, 2});
  fill(cpuStream(), ddata.view, 99.0); // overwritten, not accumulated into
  gatherGrad(cpuStream(), dy.view, ids.view, ddata.view, 0);
  EXPECT_EQ(floatsOf(ddata),
            (std::vector<float>{10, 20, 0, 0, 101, 202, 0, 0}));
}

TEST(GatherGrad, MatchesFiniteDifferences) {
  // Gather is linear in data, so the central difference is exact up to
  // fp32 rounding of the loss (~1e-6 / h): the default tolerance is loose.
  for (int64_t axis : {0, 1}) {
    SCOPED_TRACE(axis);
    Owned data = randomF32({4, 5, 3}, 30 + axis);
    Owned ids = i64({2, 3}, {1, 3, 1, -1, 0, 1}); // repeats 1 three times
    Owned weights = randomF32(runGather(data, ids, axis).view.shape, 40);
    Owned analytic(DType::F32, data.view.shape);
    gatherGrad(cpuStream(), weights.view, ids.view, analytic.view, axis);
    expectGradientMatches(
        [&](const Owned &x) { return runGather(x, ids, axis); }, data, weights,
        analytic);
  }
}

TEST(GatherGrad, LargeEmbeddingGradientMatchesReference) {
  // Many tokens into a few rows: every column block sees every repeat.
  Owned ids(DType::I64, {3000});
  for (int64_t k = 0; k < 3000; ++k)
    ids.i(k) = (k * 7) % 50;
  Owned dy = randomF32({3000, 96}, 8);
  Owned ddata(DType::F32, {50, 96});
  gatherGrad(cpuStream(), dy.view, ids.view, ddata.view, 0);
  std::vector<double> expected(50 * 96, 0.0);
  for (int64_t k = 0; k < 3000; ++k)
    for (int64_t j = 0; j < 96; ++j)
      expected[ids.i(k) * 96 + j] += dy.f(k * 96 + j);
  for (int64_t k = 0; k < ddata.size(); ++k)
    ASSERT_NEAR(ddata.f(k), expected[k], 1e-4) << k;
}

TEST(GatherGrad, IndexOutOfRangeThrows) {
  Owned dy(DType::F32, {1, 2}), ddata(DType::F32, {3, 2});
  Owned ids = i64({1}, {3});
  EXPECT_THROW(gatherGrad(cpuStream(), dy.view, ids.view, ddata.view, 0),
               Error);
}

//===----------------------------------------------------------------------===//
// Gather and scatter of elements
//===----------------------------------------------------------------------===//

Owned i32(Shape shape, std::vector<int32_t> values) {
  Owned t(DType::I32, std::move(shape));
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
  std::memcpy(t.view.data, values.data(), t.view.bytes());
  return t;
}

Owned runGatherElements(const Owned &data, const Owned &indices, int64_t axis) {
  Owned out(data.view.dtype, indices.view.shape);
  gatherElements(cpuStream(), data.view, indices.view, out.view, axis);
  return out;
}

Owned runScatterElements(const Owned &data, const Owned &indices,
                         const Owned &updates, int64_t axis,
                         ScatterReduction reduction = ScatterReduction::None) {
  Owned out(data.view.dtype, data.view.shape);
  scatterElements(cpuStream(), data.view, indices.view, updates.view, out.view,
                  axis, reduction);
  return out;
}

/// data's element offset for position k of the indices, its `axis`
/// coordinate replaced by `index` (made positive), by coordinates.
int64_t elementTarget(const Shape &data, const Shape &indices, int64_t axis,
                      int64_t k, int64_t index) {
  Ints strides = stridesOf(data);
  int64_t offset = 0;
  for (int64_t d = static_cast<int64_t>(indices.size()) - 1; d >= 0; --d) {
    int64_t coordinate = k % indices[d];
    k /= indices[d];
    if (d == axis)
      coordinate = index < 0 ? index + data[d] : index;
    offset += coordinate * strides[d];
  }
  return offset;
}

/// Indices in [-dim, dim) for data's `axis`, of `shape`, from a seed.
Owned randomIndices(Shape shape, int64_t dim, unsigned seed) {
  Owned ids(DType::I64, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(-dim, dim - 1);
  for (int64_t k = 0; k < ids.size(); ++k)
    ids.i(k) = dist(rng);
  return ids;
}

TEST(GatherElements, TwoDimsEveryAxis) {
  Owned x = counting({3, 4});
  EXPECT_EQ(
      floatsOf(runGatherElements(x, i64({2, 4}, {2, 0, 1, 2, 1, 1, 0, 0}), 0)),
      (std::vector<float>{8, 1, 6, 11, 4, 5, 2, 3}));
  EXPECT_EQ(floatsOf(runGatherElements(x, i64({3, 2}, {3, 0, 1, 1, 2, 3}), 1)),
            (std::vector<float>{3, 0, 5, 5, 10, 11}));
}

// x[a][b][c] = 12a + 4b + c; each case's indices are smaller than x in a
// dim other than the axis.
TEST(GatherElements, ThreeDimsEveryAxis) {
  Owned x = counting({2, 3, 4});
  EXPECT_EQ(floatsOf(runGatherElements(x, i64({1, 2, 2}, {1, 0, 1, 1}), 0)),
            (std::vector<float>{12, 1, 16, 17}));
  EXPECT_EQ(floatsOf(runGatherElements(x, i64({2, 2, 1}, {2, 0, 1, 2}), 1)),
            (std::vector<float>{8, 0, 16, 20}));
  EXPECT_EQ(
      floatsOf(runGatherElements(x, i64({2, 1, 3}, {3, 0, 2, 1, 1, 0}), 2)),
      (std::vector<float>{3, 0, 2, 13, 13, 12}));
}

TEST(GatherElements, NegativeAndI32Indices) {
  Owned x = counting({2, 3});
  EXPECT_EQ(floatsOf(runGatherElements(x, i64({2, 2}, {-1, 0, -3, -2}), 1)),
            (std::vector<float>{2, 0, 3, 4}));
  EXPECT_EQ(floatsOf(runGatherElements(x, i32({2, 2}, {-1, 0, -3, -2}), 1)),
            (std::vector<float>{2, 0, 3, 4}));
}

TEST(GatherElements, IndicesSmallerThanDataElsewhere) {
  // Rows 0 and 1 of a [4, 5] table, columns picked per element.
  Owned x = counting({4, 5});
  EXPECT_EQ(floatsOf(runGatherElements(x, i64({2, 2}, {4, 0, 2, -1}), 1)),
            (std::vector<float>{4, 0, 7, 9}));
}

TEST(GatherElements, AnyElementWidth) {
  Owned ids = i64({2, 3}, {10, 11, 12, 13, 14, 15});
  EXPECT_EQ(intsOf(runGatherElements(ids, i64({1, 3}, {1, 0, 1}), 0)),
            (std::vector<int64_t>{13, 11, 15}));
  Owned flags = bools({2, 2}, {1, 0, 0, 1});
  EXPECT_EQ(boolsOf(runGatherElements(flags, i64({2, 2}, {1, 0, 1, 0}), 1)),
            (std::vector<uint8_t>{0, 1, 1, 0}));
}

TEST(GatherElements, LargeMatchesReference) {
  // More elements than one thread's share; every dim but the axis smaller
  // than x's.
  Owned x = randomF32({6, 60, 130}, 11);
  for (int64_t axis : {0, 1, 2}) {
    SCOPED_TRACE(axis);
    Shape shape = {5, 56, 128};
    Owned ids = randomIndices(shape, x.view.shape[axis], 12 + axis);
    Owned out = runGatherElements(x, ids, axis);
    for (int64_t k = 0; k < out.size(); ++k)
      ASSERT_EQ(out.f(k),
                x.f(elementTarget(x.view.shape, shape, axis, k, ids.i(k))))
          << k;
  }
}

TEST(GatherElements, IndexOutOfRangeThrowsNamingValueAndBound) {
  Owned x = counting({2, 3});
  for (int64_t bad : {3, -4}) {
    try {
      runGatherElements(x, i64({1, 2}, {0, bad}), 1);
      ADD_FAILURE() << "no error for index " << bad;
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()),
                "gather_elements index " + std::to_string(bad) +
                    " is out of range for a dim of size 3");
    }
  }
}

// ONNX's examples of ScatterElements.
TEST(ScatterElements, TwoDimsEveryAxis) {
  Owned zeros(DType::F32, {3, 3});
  Owned out =
      runScatterElements(zeros, i64({2, 3}, {1, 0, 2, 0, 2, 1}),
                         f32({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}), 0);
  EXPECT_EQ(floatsOf(out),
            (std::vector<float>{2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f}));
  out = runScatterElements(f32({1, 5}, {1, 2, 3, 4, 5}), i64({1, 2}, {1, 3}),
                           f32({1, 2}, {1.1f, 2.1f}), 1);
  EXPECT_EQ(floatsOf(out), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
}

// Updates 100 + k into a [2, 2, 3] of -1s; indices smaller than it in a dim
// other than the axis.
TEST(ScatterElements, ThreeDimsEveryAxis) {
  Owned x(DType::F32, {2, 2, 3});
  fill(cpuStream(), x.view, -1.0);
  auto updates = [](Shape shape) {
    Owned u = counting(std::move(shape));
    for (int64_t k = 0; k < u.size(); ++k)
      u.f(k) += 100;
    return u;
  };
  float z = -1; // untouched
  EXPECT_EQ(floatsOf(runScatterElements(x, i64({1, 2, 2}, {1, 0, 0, 1}),
                                        updates({1, 2, 2}), 0)),
            (std::vector<float>{z, 101, z, 102, z, z, 100, z, z, z, 103, z}));
  EXPECT_EQ(floatsOf(runScatterElements(x, i64({2, 1, 2}, {1, 0, 1, 0}),
                                        updates({2, 1, 2}), 1)),
            (std::vector<float>{z, 101, z, 100, z, z, z, 103, z, 102, z, z}));
  EXPECT_EQ(floatsOf(runScatterElements(x, i64({1, 2, 2}, {2, 0, -1, 1}),
                                        updates({1, 2, 2}), 2)),
            (std::vector<float>{101, z, 100, z, 103, 102, z, z, z, z, z, z}));
}

TEST(ScatterElements, NegativeI32IndicesSmallerThanData) {
  Owned x = counting({3, 4});
  Owned out = runScatterElements(x, i32({2, 2}, {-1, 0, 1, -2}),
                                 f32({2, 2}, {100, 101, 102, 103}), 0);
  EXPECT_EQ(floatsOf(out),
            (std::vector<float>{0, 101, 2, 3, 102, 103, 6, 7, 100, 9, 10, 11}));
}

// Row 0 sends both updates to column 0; row 1 to columns 2 and 1.
TEST(ScatterElements, EachReductionOnFloatsAndIntegers) {
  struct Case {
    ScatterReduction reduction;
    std::vector<int64_t> expected;
  };
  const Case cases[] = {
      {ScatterReduction::Add, {31, 2, 3, 4, -2, 9}},
      {ScatterReduction::Mul, {200, 2, 3, 4, -35, 18}},
      {ScatterReduction::Max, {20, 2, 3, 4, 5, 6}},
      {ScatterReduction::Min, {1, 2, 3, 4, -7, 3}},
      // Of repeated targets the last update wins (ONNX leaves it open).
      {ScatterReduction::None, {20, 2, 3, 4, -7, 3}},
  };
  Owned ids = i64({2, 2}, {0, 0, 2, 1});
  for (const Case &c : cases) {
    SCOPED_TRACE(nameOf(c.reduction));
    Owned out =
        runScatterElements(f32({2, 3}, {1, 2, 3, 4, 5, 6}), ids,
                           f32({2, 2}, {10, 20, 3, -7}), 1, c.reduction);
    std::vector<float> expected(c.expected.begin(), c.expected.end());
    EXPECT_EQ(floatsOf(out), expected);
    out = runScatterElements(i64({2, 3}, {1, 2, 3, 4, 5, 6}), ids,
                             i64({2, 2}, {10, 20, 3, -7}), 1, c.reduction);
    EXPECT_EQ(intsOf(out), c.expected);
    out = runScatterElements(i32({2, 3}, {1, 2, 3, 4, 5, 6}), ids,
                             i32({2, 2}, {10, 20, 3, -7}), 1, c.reduction);
    for (int64_t k = 0; k < 6; ++k)
      EXPECT_EQ(out.view.i32()[k], c.expected[k]) << k;
  }
}

// NaN wins max and min whichever side it is on, so the order of the
// updates does not matter.
TEST(ScatterElements, MaxAndMinPropagateNaN) {
  float nan = std::nanf("");
  Owned ids = i64({3}, {0, 0, 1});
  Owned updates = f32({3}, {nan, 5, 7});
  for (ScatterReduction r : {ScatterReduction::Max, ScatterReduction::Min}) {
    Owned out = runScatterElements(f32({2}, {1, nan}), ids, updates, 0, r);
    EXPECT_TRUE(std::isnan(out.f(0))) << nameOf(r);
    EXPECT_TRUE(std::isnan(out.f(1))) << nameOf(r);
  }
}

TEST(ScatterElements, RepeatedIndicesAddUp) {
  // 3000 updates per row into 10 columns: every column takes ~300, on
  // every thread (more elements than one thread's share).
  Owned x = randomF32({64, 10}, 21);
  Owned ids(DType::I64, {64, 3000});
  for (int64_t k = 0; k < ids.size(); ++k)
    ids.i(k) = (k * 7) % 10 - (k % 3 == 0 ? 10 : 0);
  Owned updates = randomF32({64, 3000}, 22);
  Owned out = runScatterElements(x, ids, updates, 1, ScatterReduction::Add);
  std::vector<double> expected(x.size());
  for (int64_t k = 0; k < x.size(); ++k)
    expected[k] = x.f(k);
  for (int64_t k = 0; k < ids.size(); ++k)
    expected[elementTarget({64, 10}, {64, 3000}, 1, k, ids.i(k))] +=
        updates.f(k);
  // fp32 sums of ~300 terms of magnitude <= 1 against double: each
  // addition rounds by ~6e-8 of a partial sum of ~10, so ~300 roundings
  // stay near 1e-5, far under 1e-3.
  for (int64_t k = 0; k < x.size(); ++k)
    ASSERT_NEAR(out.f(k), expected[k], 1e-3) << k;
}

// The kernel combines each target's updates in the order of the indices,
// as the reference below does, so every reduction matches bit for bit.
TEST(ScatterElements, LargeMatchesReferenceForEveryReduction) {
  Shape dataShape = {7, 40, 160}, shape = {6, 38, 150};
  Owned x = randomF32(dataShape, 31, 0.5f, 1.5f);
  Owned updates = randomF32(shape, 32, 0.5f, 1.5f);
  for (int64_t axis : {0, 1, 2}) {
    Owned ids = randomIndices(shape, dataShape[axis], 33 + axis);
    for (ScatterReduction r :
         {ScatterReduction::Add, ScatterReduction::Max, ScatterReduction::Min,
          ScatterReduction::Mul, ScatterReduction::None}) {
      SCOPED_TRACE(std::to_string(axis) + " " + nameOf(r));
      Owned out = runScatterElements(x, ids, updates, axis, r);
      Owned expected = x;
      for (int64_t k = 0; k < ids.size(); ++k) {
        float &t =
            expected.f(elementTarget(dataShape, shape, axis, k, ids.i(k)));
        float u = updates.f(k);
        t = r == ScatterReduction::Add   ? t + u
            : r == ScatterReduction::Mul ? t * u
            : r == ScatterReduction::Max ? std::max(t, u)
            : r == ScatterReduction::Min ? std::min(t, u)
                                         : u;
      }
      ASSERT_EQ(floatsOf(out), floatsOf(expected));
    }
  }
}

TEST(ScatterElements, IndexOutOfRangeThrowsNamingValueAndBound) {
  Owned x = counting({2, 4});
  for (int64_t bad : {4, -5}) {
    try {
      runScatterElements(x, i64({1, 2}, {bad, 0}), f32({1, 2}, {1, 2}), 1,
                         ScatterReduction::Add);
      ADD_FAILURE() << "no error for index " << bad;
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()),
                "scatter_elements index " + std::to_string(bad) +
                    " is out of range for a dim of size 4");
    }
  }
}

TEST(ScatterElements, BoolTakesOnlyNone) {
  Owned flags = bools({2, 2}, {1, 0, 0, 1});
  Owned ids = i64({1, 2}, {1, 0});
  Owned updates = bools({1, 2}, {1, 0});
  EXPECT_EQ(boolsOf(runScatterElements(flags, ids, updates, 0)),
            (std::vector<uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(boolsOf(runScatterElements(flags, ids, updates, 1)),
            (std::vector<uint8_t>{0, 1, 0, 1}));
  try {
    runScatterElements(flags, ids, updates, 0, ScatterReduction::Max);
    ADD_FAILURE() << "bool max accepted";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()),
              "scatter_elements with reduction 'max' does not take i1 data");
  }
}

// The compiler's rule: the gradient of gather_elements is scatter_elements
// "add" of dy into zeros (repeated indices add up).
TEST(GatherElementsGrad, ScatterAddMatchesFiniteDifferences) {
  // Linear in x: the central difference is exact up to fp32 rounding.
  Owned x = randomF32({3, 4, 5}, 41);
  for (int64_t axis : {0, 1, 2}) {
    SCOPED_TRACE(axis);
    // Random indices repeat along the axis: their gradients add up.
    Owned ids = randomIndices({2, 4, 5}, x.view.shape[axis], 42 + axis);
    Owned weights = randomF32({2, 4, 5}, 45);
    Owned zeros(DType::F32, x.view.shape);
    Owned analytic =
        runScatterElements(zeros, ids, weights, axis, ScatterReduction::Add);
    expectGradientMatches(
        [&](const Owned &input) { return runGatherElements(input, ids, axis); },
        x, weights, analytic);
  }
}

// And the gradient of scatter_elements' updates (under add) is
// gather_elements of dy.
TEST(ScatterElementsGrad, GatherMatchesFiniteDifferencesOfUpdates) {
  Owned x = randomF32({3, 4}, 51);
  Owned ids = i64({2, 4}, {0, 2, 2, -1, 1, 2, 0, 0});
  Owned updates = randomF32({2, 4}, 52);
  Owned weights = randomF32({3, 4}, 53);
  Owned analytic = runGatherElements(weights, ids, 0);
  expectGradientMatches(
      [&](const Owned &u) {
        return runScatterElements(x, ids, u, 0, ScatterReduction::Add);
      },
      updates, weights, analytic);
}

//===----------------------------------------------------------------------===//
// Concat and split
//===----------------------------------------------------------------------===//

TEST(Concat, JoinsAlongAnAxisAndSplitUndoes) {
  Owned a = f32({2, 1}, {1, 2});
  Owned b = f32({2, 2}, {3, 4, 5, 6});
  Owned out(DType::F32, {2, 3});
  concat(cpuStream(), {a.view, b.view}, out.view, 1);
  EXPECT_EQ(floatsOf(out), (std::vector<float>{1, 3, 4, 2, 5, 6}));
  Owned a2(DType::F32, {2, 1}), b2(DType::F32, {2, 2});
  split(cpuStream(), out.view, {a2.view, b2.view}, 1);
  EXPECT_EQ(floatsOf(a2), floatsOf(a));
  EXPECT_EQ(floatsOf(b2), floatsOf(b));
  // Axis 0, I64.
  Owned i = i64({1, 2}, {1, 2}), j = i64({2, 2}, {3, 4, 5, 6});
  Owned joined(DType::I64, {3, 2});
  concat(cpuStream(), {i.view, j.view}, joined.view, 0);
  EXPECT_EQ(intsOf(joined), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(Concat, LargeQkvSplit) {
  // GPT's fused attention projection: [rows, 3 * d] split into q, k, v.
  Owned qkv = counting({400, 3 * 48});
  std::vector<Owned> parts(3, Owned(DType::F32, {400, 48}));
  split(cpuStream(), qkv.view, {parts[0].view, parts[1].view, parts[2].view},
        1);
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t r = 0; r < 400; ++r)
      for (int64_t c = 0; c < 48; ++c)
        ASSERT_EQ(parts[p].f(r * 48 + c), float(r * 144 + p * 48 + c));
  Owned back(DType::F32, {400, 144});
  concat(cpuStream(), {parts[0].view, parts[1].view, parts[2].view}, back.view,
         1);
  EXPECT_EQ(floatsOf(back), floatsOf(qkv));
}

//===----------------------------------------------------------------------===//
// Slice and expand
//===----------------------------------------------------------------------===//

Owned runSlice(const Owned &x, Shape shape, const Ints &starts,
               const Ints &strides) {
  Owned y(x.view.dtype, std::move(shape));
  slice(cpuStream(), x.view, y.view, starts, strides);
  return y;
}

TEST(Slice, StartsAndStrides) {
  Owned x = counting({3, 5});
  Owned y = runSlice(x, {2, 3}, {1, 0}, {1, 2});
  EXPECT_EQ(floatsOf(y), (std::vector<float>{5, 7, 9, 10, 12, 14}));
  Owned z = runSlice(x, {2, 2}, {0, 1}, {2, 1});
  EXPECT_EQ(floatsOf(z), (std::vector<float>{1, 2, 11, 12}));
  Owned ids = i64({4}, {1, 2, 3, 4});
  EXPECT_EQ(intsOf(runSlice(ids, {2}, {1}, {2})), (std::vector<int64_t>{2, 4}));
}

TEST(SliceGrad, ScattersAndZeroesTheRest) {
  Owned dy = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Owned dx(DType::F32, {3, 5});
  fill(cpuStream(), dx.view, 99.0);
  sliceGrad(cpuStream(), dy.view, dx.view, {1, 0}, {1, 2});
  EXPECT_EQ(floatsOf(dx),
            (std::vector<float>{0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 4, 0, 5, 0, 6}));
}

TEST(SliceGrad, MatchesFiniteDifferences) {
  // Slice is linear in x: the default tolerance only has to cover fp32
  // rounding of the loss.
  Owned x = randomF32({4, 6, 5}, 50);
  Ints starts = {1, 0, 2}, strides = {2, 3, 1};
  Shape shape = {2, 2, 3};
  Owned weights = randomF32(shape, 51);
  Owned analytic(DType::F32, x.view.shape);
  sliceGrad(cpuStream(), weights.view, analytic.view, starts, strides);
  expectGradientMatches(
      [&](const Owned &in) { return runSlice(in, shape, starts, strides); }, x,
      weights, analytic);
}

TEST(Expand, BroadcastsAnyDtype) {
  Owned x = f32({3, 1}, {1, 2, 3});
  Owned y(DType::F32, {2, 3, 2});
  expand(cpuStream(), x.view, y.view);
  EXPECT_EQ(floatsOf(y),
            (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  Owned mask = bools({2}, {1, 0});
  Owned wide(DType::Bool, {3, 2});
  expand(cpuStream(), mask.view, wide.view);
  EXPECT_EQ(boolsOf(wide), (std::vector<uint8_t>{1, 0, 1, 0, 1, 0}));
  Owned scalar = i64({}, {5});
  Owned many(DType::I64, {50000});
  expand(cpuStream(), scalar.view, many.view);
  for (int64_t k = 0; k < many.size(); ++k)
    ASSERT_EQ(many.i(k), 5);
}

//===----------------------------------------------------------------------===//
// Trilu, iota, one-hot
//===----------------------------------------------------------------------===//

TEST(Trilu, UpperAndLowerWithOffsets) {
  Owned x = counting({2, 3, 4});
  for (bool upper : {true, false})
    for (int64_t k : {-1, 0, 2, 10, -10}) {
      SCOPED_TRACE(std::to_string(upper) + " " + std::to_string(k));
      Owned y(DType::F32, {2, 3, 4});
      trilu(cpuStream(), x.view, y.view, k, upper);
      for (int64_t e = 0; e < y.size(); ++e) {
        int64_t i = (e / 4) % 3, j = e % 4;
        bool keep = upper ? j - i >= k : j - i <= k;
        ASSERT_EQ(y.f(e), keep ? x.f(e) : 0.f) << e;
      }
    }
  Owned mask = bools({2, 2}, {1, 1, 1, 1});
  Owned lower(DType::Bool, {2, 2});
  trilu(cpuStream(), mask.view, lower.view, 0, false);
  EXPECT_EQ(boolsOf(lower), (std::vector<uint8_t>{1, 0, 1, 1}));
}

TEST(Iota, FloatAndInteger) {
  Owned f(DType::F32, {4}), i(DType::I64, {4});
  iota(cpuStream(), f.view, 1.0, 0.5);
  iota(cpuStream(), i.view, 3.0, -2.0);
  EXPECT_EQ(floatsOf(f), (std::vector<float>{1, 1.5, 2, 2.5}));
  EXPECT_EQ(intsOf(i), (std::vector<int64_t>{3, 1, -1, -3}));
}

TEST(OneHot, LastAndFirstAxis) {
  Owned ids = i64({3}, {1, -1, 3}); // 3 is outside [-3, 3): all off
  Owned last(DType::F32, {3, 3});
  oneHot(cpuStream(), ids.view, last.view, 3, 1, 5.0, -1.0);
  EXPECT_EQ(floatsOf(last),
            (std::vector<float>{-1, 5, -1, -1, -1, 5, -1, -1, -1}));
  Owned first(DType::I64, {3, 3});
  oneHot(cpuStream(), ids.view, first.view, 3, 0, 1.0, 0.0);
  EXPECT_EQ(intsOf(first), (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 1, 0}));
  // A middle axis of 2-D indices, Bool output.
  Owned grid = i64({2, 2}, {0, 1, 1, 0});
  Owned middle(DType::Bool, {2, 2, 2});
  oneHot(cpuStream(), grid.view, middle.view, 2, 1, 1.0, 0.0);
  EXPECT_EQ(boolsOf(middle), (std::vector<uint8_t>{1, 0, 0, 1, 0, 1, 1, 0}));
}

} // namespace
