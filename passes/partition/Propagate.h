//===- Propagate.h - an op's sharding from its operands' --------*- C++ -*-===//

#ifndef BM_PASSES_PARTITION_PROPAGATE_H
#define BM_PASSES_PARTITION_PROPAGATE_H

#include "passes/partition/Reshard.h"

namespace mlir::bm {

/// Gives `op`'s results a sharding from its operands' through the op's
/// sharding rule: each factor takes the mesh axes of the first operand dim
/// that carries it (a factor needing replication takes none); operands that
/// then disagree are resharded before the op (`b` points there). A factor
/// that a result lacks leaves that result a partial sum over its axes;
/// partial sums pass through ops linear in them. A mean over a split dim is
/// scaled so that its partial sums add up to the global mean. Operand dims
/// that hold a strided share (ShardingState::strided) keep it where the op
/// reads the same layout, and results carry it on (FactorParameters.h); a
/// gather from a table split along its gathered dim becomes
/// bm.shard_gather. Fails, naming the op, on an op without a sharding rule.
LogicalResult propagateThrough(Operation *op, OpBuilder &b,
                               ShardingState &state);

} // namespace mlir::bm

#endif // BM_PASSES_PARTITION_PROPAGATE_H
