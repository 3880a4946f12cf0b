//===- Reshard.h - collectives that move a value between shardings -*- C++ -*-===//

#ifndef BM_PASSES_PARTITION_RESHARD_H
#define BM_PASSES_PARTITION_RESHARD_H

#include "passes/partition/ValueSharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::bm {

/// A dim merged from several factors (a fused projection [.., 3 x 64]
/// read as three [.., 64]; a batch and a sequence flattened into rows)
/// whose splits do not give each device a contiguous block: one device's
/// share is strided in the merged dim. A value whose sharding splits `dim`
/// over `axes()` may hold that strided share instead of the contiguous one;
/// ShardingState records which layout it holds.
struct StridedDim {
  size_t dim;
  SmallVector<int64_t> factorSizes;
  /// Per factor, the mesh axes that split it.
  SmallVector<AxisList> factorAxes;

  /// The dim's axes, major to minor: what its sharding lists.
  AxisList axes() const {
    AxisList all;
    for (const AxisList &axes : factorAxes)
      all.insert(all.end(), axes.begin(), axes.end());
    return all;
  }
  /// Whether each device's share is a contiguous block after all (then the
  /// dim's sharding describes it): every factor after the first that a
  /// device holds more than one index of is whole.
  bool contiguous(MeshAttr mesh) const;
  /// The same layout (at any dim).
  bool sameLayout(const StridedDim &other) const {
    return factorSizes == other.factorSizes &&
           factorAxes == other.factorAxes;
  }
};

/// The sharding of every value of the step being partitioned. Values keep
/// their global types until the end, when each becomes its local type.
struct ShardingState {
  MeshAttr mesh;
  FlatSymbolRefAttr meshRef;
  llvm::DenseMap<Value, ValueSharding> of;
  /// The dims of a value that hold a strided share (see StridedDim).
  llvm::DenseMap<Value, SmallVector<StridedDim, 1>> strided;
  /// Parameters stored in a factored view (FactorParameters.h), each to
  /// the reshape that reads it in its model shape.
  llvm::DenseMap<Value, Value> factored;

  const ValueSharding &operator[](Value value) const {
    return of.find(value)->second;
  }
  bool has(Value value) const { return of.count(value); }
  /// The strided layout of dim `dim` of `value`, or null (contiguous).
  const StridedDim *stridedAt(Value value, size_t dim) const {
    auto it = strided.find(value);
    if (it == strided.end())
      return nullptr;
    for (const StridedDim &s : it->second)
      if (s.dim == dim)
        return &s;
    return nullptr;
  }
};

/// Emits at `b`'s insertion point the collectives that take `value` from
/// its sharding in `state` to `to` (nothing if they agree), records the
/// sharding of every value made, and returns the last. In order: partial
/// sums reduced (reduce_scatter where `to` splits a dim over exactly the
/// reduced axes, else all_reduce), axes moved from one dim to another
/// (all_to_all), axes dropped (all_gather), axes added (shard_slice, no
/// communication). Fails on a partial sum `to` asks for that `value` is not.
FailureOr<Value> reshardValue(OpBuilder &b, Location loc, Value value,
                              const ValueSharding &to, ShardingState &state);

/// `value`, sharded contiguously, as the strided share `dim` describes:
/// made whole along the dim, viewed as its factors, the split one sliced,
/// merged again and recorded as strided. `want` is the sharding to label
/// it with.
FailureOr<Value> toStrided(OpBuilder &b, Location loc, Value value,
                           const StridedDim &dim, const ValueSharding &want,
                           ShardingState &state);

/// A strided `value` made whole along `dim` (its other dims keep their
/// layout), at `b`'s insertion point.
FailureOr<Value> fromStrided(OpBuilder &b, Location loc, Value value,
                             const StridedDim &dim, ShardingState &state);

/// `value` with its strided dims (if any) made whole along that dim (each
/// device gathers the dim and the minor factors line up again), at `b`'s
/// insertion point.
FailureOr<Value> destrided(OpBuilder &b, Location loc, Value value,
                           ShardingState &state);

/// `value` times the scalar `factor`, at `b`'s insertion point, sharded as
/// `value` is (a mean's share of a split dim, a bias's share of a split sum).
Value scaledValue(OpBuilder &b, Location loc, Value value, double factor,
                  ShardingState &state);

} // namespace mlir::bm

#endif // BM_PASSES_PARTITION_RESHARD_H
