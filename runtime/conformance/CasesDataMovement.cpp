//===- CasesDataMovement.cpp - copies, views, gathers, slices -------------===//
//
// Ops that move elements without computing them: exact on every backend
// (kExact), except the gradients that add (gather_grad with repeated
// indices). Concat and split along middle dims, gathers with negative and
// i32 indices, slices with strides.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

namespace bmrt::conformance {
namespace {

const DType F32 = DType::F32, I64 = DType::I64, I32 = DType::I32,
            Bool = DType::Bool;

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
      view("expand_i32", "expand", randomInts(I32, {1, 4}, 709, -9, 9),
           {3, 4}),
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
      // Repeated indices accumulate: sums of up to 3 terms.
      Build("gather_grad_repeated", "gather_grad")
          .in(uniform({2, 3, 4}, 714))
          .in(ints(I64, {2, 3}, {0, 4, 2, 2, -1, 0}))
          .out({5, 4})
          .i("axis", 0)
          .tol(kArithmetic),
      view("reshape", "reshape", uniform({2, 3, 4}, 715), {4, 6}),
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
