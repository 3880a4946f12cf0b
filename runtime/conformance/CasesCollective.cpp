//===- CasesCollective.cpp - collectives on a one-rank mesh ---------------===//
//
// Every collective over axes="tp" of a mesh whose axes all have size 1:
// the group is this rank alone, so each result is the operand (or this
// rank's chunk of it, the whole), moved by the backend's copies and the
// executor's chunk packing. Exact on every backend.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include <gtest/gtest.h>

namespace bmrt::conformance {
namespace {

const DType I64 = DType::I64;

/// On one rank the result is the operand, element for element.
void resultIsOperand(const std::vector<HostTensor> &operands,
                     const std::vector<HostTensor> &results) {
  EXPECT_EQ(results[0].bytes, operands[0].bytes);
}

Case alongDim(const std::string &name, const std::string &op, HostTensor x,
              int64_t dim) {
  Shape shape = x.shape;
  DType type = x.dtype;
  return Build(name, op)
      .in(std::move(x))
      .out(type, shape)
      .i("dim", dim)
      .collective()
      .check(resultIsOperand);
}

} // namespace

std::vector<Case> collectiveCases() {
  return {
      alongDim("all_gather_dim1", "all_gather", uniform({2, 3, 4}, 801), 1),
      Build("all_reduce_f32", "all_reduce")
          .in(uniform({3, 5}, 802))
          .out({3, 5})
          .collective()
          .check(resultIsOperand),
      Build("all_reduce_i64", "all_reduce")
          .in(randomInts(I64, {7}, 803, -99, 99))
          .out(I64, {7})
          .collective()
          .check(resultIsOperand),
      Build("all_to_all_split0_concat1", "all_to_all")
          .in(uniform({4, 3, 2}, 804))
          .out({4, 3, 2})
          .i("split_dim", 0)
          .i("concat_dim", 1)
          .collective()
          .check(resultIsOperand),
      alongDim("reduce_scatter_dim1", "reduce_scatter",
               uniform({2, 6, 3}, 805), 1),
      Build("shard_gather_axis0", "shard_gather")
          .in(uniform({5, 4}, 806))
          .in(ints(I64, {3}, {4, 0, 2}))
          .out({3, 4})
          .i("axis", 0)
          .collective(),
      alongDim("shard_slice_bool_dim0", "shard_slice",
               randomBools({4, 3}, 807), 0),
      alongDim("shard_slice_dim2", "shard_slice", uniform({2, 3, 4}, 808), 2),
  };
}

} // namespace bmrt::conformance
