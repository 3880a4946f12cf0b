//===- CasesDataMovement.cpp - copies, views, gathers, slices -------------===//
//
// Ops that move elements without computing them: exact on every backend
// (kExact), except those that add or multiply at repeated indices
// (gather_grad, scatter_elements' add and mul on f32), whose order of
// operations differs between backends. Concat and split along middle dims,
// gathers with negative and i32 indices, slices with strides, scatters
// with every reduction.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

namespace bmrt::conformance {
namespace {

const DType I64 = DType::I64, I32 = DType::I32, Bool = DType::Bool;

Case view(const std::string &name, const std::string &op, HostTensor x,
          Shape out) {
  DType type = x.dtype;
  return Build(name, op).in(std::move(x)).out(type, std::move(out));
}

} // namespace

std::vector<Case> dataMovementCases() {
  return {
      Build("concat_axis1_three", "concat")
          .in(uniform({2, 3, 4}, 701))
          .in(uniform({2, 1, 4}, 702))
          .in(uniform({2, 5, 4}, 703))
          .out({2, 9, 4})
          .i("axis", 1),
      Build("concat_i64_axis0", "concat")
          .in(randomInts(I64, {2, 3}, 704, -9, 9))
          .in(randomInts(I64, {1, 3}, 705, -9, 9))
          .out(I64, {3, 3})
          .i("axis", 0),
      view("copy_bool", "copy", randomBools({3, 5}, 706), {3, 5}),
      view("copy_f32", "copy", uniform({4, 6}, 707), {4, 6}),
      view("expand_f32", "expand", uniform({3, 1}, 708), {2, 3, 4}),
      view("expand_i32", "expand", randomInts(I32, {1, 4}, 709, -9, 9), {3, 4}),
      view("flatten", "flatten", uniform({2, 3, 4}, 710), {2, 12}),
      Build("gather_axis0_i64_indices", "gather")
          .in(uniform({5, 4}, 711))
          .in(ints(I64, {2, 3}, {0, 4, 2, 2, 1, 3}))
          .out({2, 3, 4})
          .i("axis", 0),
      Build("gather_axis1_negative_i32_indices", "gather")
          .in(uniform({3, 6, 2}, 712))
          .in(ints(I32, {4}, {-1, 0, -6, 3}))
          .out({3, 4, 2})
          .i("axis", 1),
      Build("gather_i64_data", "gather")
          .in(randomInts(I64, {6}, 713, -99, 99))
          .in(ints(I64, {3}, {5, -2, 0}))
          .out(I64, {3})
          .i("axis", 0),
      // Copies: exact. The indices' dims other than the axis are smaller
      // than data's.
      Build("gather_elements_axis0", "gather_elements")
          .in(uniform({4, 5}, 724))
          .in(randomInts(I64, {3, 5}, 725, -4, 3))
          .out({3, 5})
          .i("axis", 0),
      Build("gather_elements_axis2_i32_indices", "gather_elements")
          .in(uniform({2, 3, 6}, 726))
          .in(randomInts(I32, {2, 2, 4}, 727, -6, 5))
          .out({2, 2, 4})
          .i("axis", 2),
      Build("gather_elements_bool_data", "gather_elements")
          .in(randomBools({3, 4}, 728))
          .in(randomInts(I64, {3, 2}, 729, -4, 3))
          .out(Bool, {3, 2})
          .i("axis", 1),
      Build("gather_elements_i64_data", "gather_elements")
          .in(randomInts(I64, {3, 4, 2}, 730, -99, 99))
          .in(randomInts(I64, {2, 6, 2}, 731, -4, 3))
          .out(I64, {2, 6, 2})
          .i("axis", 1),
      // Repeated indices accumulate: sums of up to 3 terms.
      Build("gather_grad_repeated", "gather_grad")
          .in(uniform({2, 3, 4}, 714))
          .in(ints(I64, {2, 3}, {0, 4, 2, 2, -1, 0}))
          .out({5, 4})
          .i("axis", 0)
          .tol(kArithmetic),
      view("reshape", "reshape", uniform({2, 3, 4}, 715), {4, 6}),
      // f32 adds at repeated indices: the CPU adds each target's updates in
      // index order, CUDA's atomicAdd in any order. Up to 61 terms (the
      // data and 60 updates) of magnitude <= 1: kReduction's n <= 64.
      Build("scatter_elements_add_heavy_repeats", "scatter_elements")
          .in(uniform({4}, 732))
          .in(randomInts(I64, {60}, 733, -4, 3))
          .in(uniform({60}, 734))
          .out({4})
          .i("axis", 0)
          .s("reduction", "add")
          .tol(kReduction),
      // Up to 25 terms; the indices have fewer rows than data.
      Build("scatter_elements_add_repeated_axis1", "scatter_elements")
          .in(uniform({3, 5}, 735))
          .in(randomInts(I64, {2, 24}, 736, -5, 4))
          .in(uniform({2, 24}, 737))
          .out({3, 5})
          .i("axis", 1)
          .s("reduction", "add")
          .tol(kReduction),
      // Integer sums: exact in any order.
      Build("scatter_elements_add_i64_data_i32_indices", "scatter_elements")
          .in(randomInts(I64, {3, 4}, 738, -99, 99))
          .in(randomInts(I32, {3, 6}, 739, -4, 3))
          .in(randomInts(I64, {3, 6}, 740, -99, 99))
          .out(I64, {3, 4})
          .i("axis", 1)
          .s("reduction", "add"),
      // Under none, distinct targets (each column's indices differ): which
      // of repeated updates wins is left open, so no case repeats one.
      Build("scatter_elements_bool_none", "scatter_elements")
          .in(randomBools({4, 3}, 741))
          .in(ints(I64, {3, 3}, {2, 0, 1, 0, 3, 2, 1, 2, -1}))
          .in(randomBools({3, 3}, 742))
          .out(Bool, {4, 3})
          .i("axis", 0)
          .s("reduction", "none"),
      // max and min pick a value: exact in any order.
      Build("scatter_elements_max_f32", "scatter_elements")
          .in(uniform({3, 4}, 743))
          .in(randomInts(I64, {3, 10}, 744, -4, 3))
          .in(uniform({3, 10}, 745))
          .out({3, 4})
          .i("axis", 1)
          .s("reduction", "max"),
      Build("scatter_elements_max_i64", "scatter_elements")
          .in(randomInts(I64, {5, 2}, 746, -99, 99))
          .in(randomInts(I64, {8, 2}, 747, -5, 4))
          .in(randomInts(I64, {8, 2}, 748, -99, 99))
          .out(I64, {5, 2})
          .i("axis", 0)
          .s("reduction", "max"),
      Build("scatter_elements_min_f32", "scatter_elements")
          .in(uniform({2, 3, 4}, 749))
          .in(randomInts(I64, {2, 5, 4}, 750, -3, 2))
          .in(uniform({2, 5, 4}, 751))
          .out({2, 3, 4})
          .i("axis", 1)
          .s("reduction", "min"),
      Build("scatter_elements_min_i32", "scatter_elements")
          .in(randomInts(I32, {3, 3}, 752, -99, 99))
          .in(randomInts(I32, {3, 5}, 753, -3, 2))
          .in(randomInts(I32, {3, 5}, 754, -99, 99))
          .out(I32, {3, 3})
          .i("axis", 1)
          .s("reduction", "min"),
      // At most 4 factors per target (column 0 of row 0: the data and 3
      // updates), of magnitude in [0.5, 1.5]: kProduct.
      Build("scatter_elements_mul_f32", "scatter_elements")
          .in(awayFromZero({2, 6}, 755, 0.5f, 1.5f))
          .in(ints(I64, {2, 8},
                   {0, 0, 0, 1, 2, 2, -1, 5, 3, 3, -3, 4, 4, 1, 0, 0}))
          .in(awayFromZero({2, 8}, 756, 0.5f, 1.5f))
          .out({2, 6})
          .i("axis", 1)
          .s("reduction", "mul")
          .tol(kProduct),
      // Integer products (wrapping, were they to overflow): exact.
      Build("scatter_elements_mul_i64", "scatter_elements")
          .in(randomInts(I64, {2, 4}, 757, -5, 5))
          .in(randomInts(I64, {2, 9}, 758, -4, 3))
          .in(randomInts(I64, {2, 9}, 759, -3, 3))
          .out(I64, {2, 4})
          .i("axis", 1)
          .s("reduction", "mul"),
      // The reduction left out: none. Distinct targets, exact.
      Build("scatter_elements_none_default", "scatter_elements")
          .in(uniform({4, 3}, 760))
          .in(ints(I64, {3, 3}, {2, 0, 1, 0, 3, 2, 1, 2, -1}))
          .in(uniform({3, 3}, 761))
          .out({4, 3})
          .i("axis", 0),
      Build("slice_grad_strided", "slice_grad")
          .in(uniform({2, 2, 3}, 716))
          .out({4, 5, 7})
          .ints("starts", {1, 0, 2})
          .ints("strides", {2, 3, 2}),
      Build("slice_strided", "slice")
          .in(uniform({4, 5, 7}, 717))
          .out({2, 2, 3})
          .ints("starts", {1, 0, 2})
          .ints("strides", {2, 3, 2}),
      Build("slice_i64_middle", "slice")
          .in(randomInts(I64, {3, 8}, 718, -9, 9))
          .out(I64, {3, 4})
          .ints("starts", {0, 3})
          .ints("strides", {1, 1}),
      Build("split_axis1_three", "split")
          .in(uniform({2, 9, 4}, 719))
          .out({2, 3, 4})
          .out({2, 1, 4})
          .out({2, 5, 4})
          .i("axis", 1),
      view("squeeze", "squeeze", uniform({2, 1, 4}, 720), {2, 4}),
      Build("transpose_3d", "transpose")
          .in(uniform({2, 3, 4}, 721))
          .out({4, 2, 3})
          .ints("permutation", {2, 0, 1}),
      Build("transpose_bool_2d", "transpose")
          .in(randomBools({3, 5}, 722))
          .out(Bool, {5, 3})
          .ints("permutation", {1, 0}),
      view("unsqueeze", "unsqueeze", uniform({2, 4}, 723), {2, 1, 4}),
  };
}

} // namespace bmrt::conformance
