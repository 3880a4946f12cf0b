//===- Reshard.h - collectives that move a value between shardings -*- C++ -*-===//

#ifndef BM_PASSES_PARTITION_RESHARD_H
#define BM_PASSES_PARTITION_RESHARD_H

#include "passes/partition/ValueSharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::bm {

/// The sharding of every value of the step being partitioned. Values keep
/// their global types until the end, when each becomes its local type.
struct ShardingState {
  MeshAttr mesh;
  FlatSymbolRefAttr meshRef;
  llvm::DenseMap<Value, ValueSharding> of;

  const ValueSharding &operator[](Value value) const {
    return of.find(value)->second;
  }
  bool has(Value value) const { return of.count(value); }
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

/// `value` times the scalar `factor`, at `b`'s insertion point, sharded as
/// `value` is (a mean's share of a split dim, a bias's share of a split sum).
Value scaledValue(OpBuilder &b, Location loc, Value value, double factor,
                  ShardingState &state);

} // namespace mlir::bm

#endif // BM_PASSES_PARTITION_RESHARD_H
