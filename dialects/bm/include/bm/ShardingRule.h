//===- ShardingRule.h - factor-based sharding rules (plain C++) -*- C++ -*-===//
//
// A sharding rule, in the style of Shardy's OpShardingRuleAttr, says how an
// op's operand and result dimensions map to a shared set of factors:
//
//   bm.matmul: ([i, k], [k, j]) -> ([i, j]) {i=8, j=16, k=32} reduction={k}
//
// Sharding a factor along a mesh axis shards every dimension mapped to it.
// The factor's kind says what that costs:
//  - parallel:          every device computes its slice, no communication;
//  - reduction:         each device holds a partial sum of the results, which
//                       must be all-reduced (or reduce-scattered);
//  - need-replication:  the op cannot run on a slice along this factor (e.g.
//                       the softmax axis); sharding it forces an all-gather.
//
// The header is plain C++ with no MLIR dependency so that the planner's search
// and its unit tests can use rules without an MLIR context.
//
//===----------------------------------------------------------------------===//

#ifndef BM_SHARDINGRULE_H
#define BM_SHARDINGRULE_H

#include <cstdint>
#include <string>
#include <vector>

namespace bm {

enum class FactorKind { Parallel, Reduction, NeedReplication };

/// Factors of one dimension, major to minor.
using DimFactors = std::vector<int>;
/// Factors of each dimension of one tensor.
using TensorFactors = std::vector<DimFactors>;

struct ShardingRule {
  /// Size of each factor (the extent of the dimensions mapped to it).
  std::vector<int64_t> factorSizes;
  std::vector<FactorKind> factorKinds;
  /// For each operand, for each of its dimensions: the factors whose
  /// product is that dimension, major to minor. Usually one factor; reshape
  /// and split give compound dimensions (4096 -> {heads=32, head_dim=128}).
  /// Empty when the dimension is not tied to a factor (a broadcast dimension
  /// of size 1). Sharding a minor factor of a compound dimension gives a
  /// strided layout; the partitioner permutes parameters to make it local.
  std::vector<TensorFactors> operandFactors;
  /// Same for each result.
  std::vector<TensorFactors> resultFactors;

  int addFactor(int64_t size, FactorKind kind) {
    factorSizes.push_back(size);
    factorKinds.push_back(kind);
    return static_cast<int>(factorSizes.size()) - 1;
  }
  int numFactors() const { return static_cast<int>(factorSizes.size()); }

  /// Shardy-style text, e.g. "([i, k], [k, j]) -> ([i, j]) {i=8, j=16, k=32}
  /// reduction={k}"; a compound dimension prints as "{j, k}". Factors are
  /// named i, j, k, ... in order of creation.
  std::string str() const;
};

} // namespace bm

#endif // BM_SHARDINGRULE_H
