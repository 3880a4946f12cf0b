//===- VocabParallelLoss.h - cross-entropy on class-split logits -*- C++ -*-===//
//
// Under a vocabulary-split LM head the logits reach the loss split along
// their classes. Gathering them would move and hold the whole [N, V]
// logits on every device, for a loss that needs three numbers per row:
// each device reduces its classes to statistics (bm.cross_entropy_stats),
// one all-gather over the class axes shares them, and every device merges
// them into the loss (bm.cross_entropy_from_stats) and its classes'
// gradient (bm.cross_entropy_grad_from_stats), which stays split like the
// logits (Megatron-LM's vocabulary-parallel cross-entropy, Shoeybi et al.
// 2019, section 3; its three all-reduces are one all-gather here).
//
//===----------------------------------------------------------------------===//

#ifndef BM_PASSES_PARTITION_VOCABPARALLELLOSS_H
#define BM_PASSES_PARTITION_VOCABPARALLELLOSS_H

#include "passes/partition/Reshard.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir::bm {

class VocabParallelLoss {
public:
  explicit VocabParallelLoss(ShardingState &state) : state(state) {}

  /// Whether `op` is a cross-entropy, or its gradient, whose logits are
  /// split along their classes (and are no partial sum).
  bool appliesTo(Operation *op) const;

  /// Replaces `op` (one appliesTo accepts) by its vocabulary-parallel form
  /// at `b`'s insertion point, which must be before `op`.
  LogicalResult rewrite(Operation *op, OpBuilder &b);

private:
  /// Every device's statistics of `logits` against `labels`, made once per
  /// pair (the loss and its gradient read the same).
  FailureOr<Value> gatheredStats(Value logits, Value labels, OpBuilder &b,
                                 Location loc);
  /// `labels` split along their rows as the logits' rows are.
  FailureOr<Value> labelsLike(Value labels, Value logits, OpBuilder &b,
                              Location loc);
  /// The mean over the rows' devices: the local mean scaled by 1 / their
  /// count, so that the partial sums add up to the global mean.
  Value meanShare(Value value, Value logits, OpBuilder &b, Location loc);

  ShardingState &state;
  llvm::DenseMap<std::pair<Value, Value>, Value> statsOf;
};

} // namespace mlir::bm

#endif // BM_PASSES_PARTITION_VOCABPARALLELLOSS_H
