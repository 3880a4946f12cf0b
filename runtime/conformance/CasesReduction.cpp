//===- CasesReduction.cpp - reductions, scans, selection ------------------===//
//
// Reductions over one axis and over several (not adjacent), kept and
// dropped; every numeric dtype; cumsum in each mode; top_k largest and
// smallest along a middle axis (continuous values: no ties) and with ties
// on integers (ties go to the lower index); one_hot with negative and
// out-of-range indices; trilu both ways.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include <gtest/gtest.h>

namespace bmrt::conformance {
namespace {

const DType F32 = DType::F32, I64 = DType::I64, I32 = DType::I32;

Case reduce(const std::string &op, const std::string &suffix, HostTensor x,
            std::vector<int64_t> axes, Shape out, Tolerance tol) {
  DType type = x.dtype;
  return Build(op + "_" + suffix, op)
      .in(std::move(x))
      .ints("axes", std::move(axes))
      .out(type, std::move(out))
      .tol(tol);
}

Case cumsum(const std::string &suffix, HostTensor x, int64_t axis,
            int exclusive, int reverse) {
  Shape shape = x.shape;
  DType type = x.dtype;
  return Build("cumsum_" + suffix, "cumsum")
      .in(std::move(x))
      .out(type, shape)
      .i("axis", axis)
      .i("exclusive", exclusive)
      .i("reverse", reverse)
      .tol(kReduction);
}

/// Values sorted along the axis (descending where `largest`).
Invariant sortedAlong(int64_t axis, bool largest) {
  return [axis, largest](const std::vector<HostTensor> &,
                         const std::vector<HostTensor> &results) {
    const HostTensor &v = results[0];
    int64_t inner = 1;
    for (size_t d = axis + 1; d < v.shape.size(); ++d)
      inner *= v.shape[d];
    int64_t k = v.shape[axis], outer = v.size() / (k * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in)
        for (int64_t j = 1; j < k; ++j) {
          double prev = v.at((o * k + j - 1) * inner + in),
                 next = v.at((o * k + j) * inner + in);
          EXPECT_TRUE(largest ? prev >= next : prev <= next)
              << "position " << j << " of line " << o << "," << in;
        }
  };
}

/// top_k_i64_ties' rows [3,1,3,2,3,1] and [0,0,5,5,0,1]: the first
/// equal values first.
void tiesToLowerIndex(const std::vector<HostTensor> &,
                      const std::vector<HostTensor> &results) {
  const std::vector<double> values = {3, 3, 3, 2, 5, 5, 1, 0};
  const std::vector<double> indices = {0, 2, 4, 3, 2, 3, 5, 0};
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(results[0].at(i), values[i]) << "value " << i;
    EXPECT_EQ(results[1].at(i), indices[i]) << "index " << i;
  }
}

Build topK(const std::string &suffix, HostTensor x, int64_t axis, int64_t k,
           int largest) {
  Shape shape = x.shape;
  DType type = x.dtype;
  shape[axis] = k;
  return Build("top_k_" + suffix, "top_k")
      .in(std::move(x))
      .out(type, shape)
      .out(I64, shape)
      .i("axis", axis)
      .i("k", k)
      .i("largest", largest)
      .check(sortedAlong(axis, largest));
}

} // namespace

std::vector<Case> reductionCases() {
  return {
      cumsum("f32_axis1", uniform({3, 8, 4}, 501), 1, 0, 0),
      cumsum("f32_exclusive_reverse", uniform({3, 8, 4}, 502), 2, 1, 1),
      cumsum("i32_exclusive", randomInts(I32, {4, 6}, 503, -50, 50), 1, 1, 0),
      cumsum("i64_reverse", randomInts(I64, {4, 6}, 504, -50, 50), 0, 0, 1),
      Build("one_hot_axis0_i64", "one_hot")
          .in(ints(I64, {2, 3}, {0, 3, -1, 4, -5, 2}))
          .out(F32, {5, 2, 3})
          .i("depth", 5)
          .i("axis", 0)
          .f("on_value", 2.5)
          .f("off_value", -1),
      Build("one_hot_last_axis_out_of_range", "one_hot")
          .in(ints(I64, {4}, {1, -4, 7, -9}))
          .out(F32, {4, 4})
          .i("depth", 4)
          .i("axis", 1)
          .f("on_value", 1)
          .f("off_value", 0),
      reduce("reduce_max", "f32_axes_0_2", uniform({4, 5, 6}, 505), {0, 2}, {5},
             kExact),
      reduce("reduce_max", "i64_keepdims",
             randomInts(I64, {4, 5}, 506, -99, 99), {1}, {4, 1}, kExact),
      // All negative: a max that started from 0, or from a 64-bit minimum
      // cut to 32 bits, would show.
      reduce("reduce_max", "i32_negative",
             randomInts(I32, {3, 6}, 517, -99, -1), {1}, {3}, kExact),
      reduce("reduce_mean", "f32_axes_1_3", uniform({2, 4, 3, 8}, 507), {1, 3},
             {2, 1, 3, 1}, kReduction),
      reduce("reduce_mean", "f32_all", uniform({4, 16}, 508), {0, 1}, {},
             kReduction),
      reduce("reduce_sum", "f32_axes_0_2", uniform({4, 5, 6}, 509), {0, 2}, {5},
             kReduction),
      reduce("reduce_sum", "f32_last", uniform({6, 32}, 510), {1}, {6},
             kReduction),
      // Leading dims reduced over more than 64 rows: the column reduction's
      // chunks of 64 rows, the last one short.
      reduce("reduce_sum", "f32_leading_300_rows", uniform({3, 100, 20}, 519),
             {0, 1}, {20}, kReduction),
      reduce("reduce_mean", "f32_leading_keepdims", uniform({2, 70, 5}, 520),
             {0, 1}, {1, 1, 5}, kReduction),
      reduce("reduce_max", "f32_leading_130_rows", uniform({130, 7}, 521), {0},
             {7}, kExact),
      reduce("reduce_sum", "i32_axis0", randomInts(I32, {5, 4}, 511, -99, 99),
             {0}, {4}, kExact),
      reduce("reduce_sum", "i64_axes_0_1",
             randomInts(I64, {3, 4, 5}, 512, -99, 99), {0, 1}, {5}, kExact),
      Build("trilu_lower_k_minus1", "trilu")
          .in(uniform({2, 4, 5}, 513))
          .out({2, 4, 5})
          .i("upper", 0)
          .i("k", -1),
      Build("trilu_upper_i64", "trilu")
          .in(randomInts(I64, {5, 4}, 514, -9, 9))
          .out(I64, {5, 4})
          .i("k", 1),
      topK("f32_largest_axis1", uniform({3, 7, 4}, 515), 1, 3, 1),
      topK("f32_smallest_last", uniform({4, 9}, 516), 1, 4, 0),
      topK("i32_largest", randomInts(I32, {3, 8}, 518, -50, 50), 1, 3, 1),
      // Ties resolve to the lower index: the indices must agree too.
      topK("i64_ties", ints(I64, {2, 6}, {3, 1, 3, 2, 3, 1, 0, 0, 5, 5, 0, 1}),
           1, 4, 1)
          .check(tiesToLowerIndex),
  };
}

} // namespace bmrt::conformance
