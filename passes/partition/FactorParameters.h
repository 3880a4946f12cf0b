//===- FactorParameters.h - parameters stored in a strided view -*- C++ -*-===//
//
// A fused projection (QKV [h, 3h]) whose columns the plan splits over tp
// is read by heads: each device needs the strided share of every part
// (its heads of q, of k and of v), not a contiguous block of columns.
// Converting the projection's output every step means gathering it whole
// and slicing it again. Megatron-LM instead stores the weight with its
// columns permuted so that the contiguous shard is the strided share. Here
// the parameter is stored in the factored view ([h, 3, h], split along the
// last dim: the same elements in the same order), read through a reshape
// to its model shape, and every value computed from it column by column is
// recorded as holding the strided share: no collective at all.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PASSES_PARTITION_FACTORPARAMETERS_H
#define BM_PASSES_PARTITION_FACTORPARAMETERS_H

#include "passes/partition/Reshard.h"

namespace mlir::bm {

/// Whether `value`, split contiguously along `dim.dim` over `dim.axes`, can
/// hold the strided share `dim` describes for `reader` (the op being
/// partitioned) by storing the parameters it comes from factored: `value`
/// is computed, column by column along that dim, from parameters through
/// ops that keep the columns apart (a product's weight columns, a
/// broadcast bias, a reshape of the rows only), and no op before `reader`
/// but those reads any of it.
/// If so, factors those parameters, records the values strided and
/// returns what now holds `value` (its reshape where it is a parameter);
/// else returns null.
Value factorParameters(Value value, const StridedDim &dim, Operation *reader,
                       OpBuilder &b, ShardingState &state);

} // namespace mlir::bm

#endif // BM_PASSES_PARTITION_FACTORPARAMETERS_H
