//===- StagePartitions.h - a configuration's pipeline stages ----*- C++ -*-===//
//
// Lays a configuration's segments out over its pipeline stages and devices:
// balanced for time (PipelinePartition, cached per key), or, where those
// stages do not fit, rebalanced for memory; gives every device the shared
// parameters it holds; and recovers which segments each stage holds for
// the itemiser. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_STAGEPARTITIONS_H
#define BM_PLAN_STAGEPARTITIONS_H

#include "passes/plan/Evaluation.h"
#include "passes/plan/SegmentCosts.h"
#include "passes/plan/StepCoster.h"

#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bm::plan::detail {

class StagePartitions {
public:
  StagePartitions(const PlanContext &ctx, SegmentCosts &segments,
                  const StepCoster &coster)
      : ctx_(ctx), segments_(segments), coster_(coster) {}

  /// The time-balanced stages of `config` (cached).
  const PartitionEntry &partition(const ParallelConfig &config);
  /// Stages of `config` that hold fewer layers where more micro-batches are
  /// in flight, so that each fits in memory if it can; null where none
  /// does. `entry` is the time-balanced partition.
  std::shared_ptr<const PartitionEntry>
  memoryBalanced(const ParallelConfig &config, const PartitionEntry &entry);
  /// The stages of `e` (its own partition, or the cached one).
  const PartitionEntry &of(const Evaluation &e);
  /// (segment, instances) on each virtual stage of `entry`, in order.
  std::vector<std::vector<std::pair<int, int64_t>>>
  contents(const PartitionEntry &entry, const ParallelConfig &config);

private:
  /// Gives each device of `entry` the shared parameters it holds (in its
  /// stats' `shared`, `params` and `sharedParams`) and fills the entry's
  /// sharedElements and sharedHolders.
  void holdSharedParameters(PartitionEntry &entry,
                            const ParallelConfig &config);
  /// Model-state and gradient-output bytes of the shared parameters that
  /// device `device` of `entry` holds.
  double heldSharedBytes(const PartitionEntry &entry, int device,
                         const ParallelConfig &config) const;

  const PlanContext &ctx_;
  SegmentCosts &segments_;
  const StepCoster &coster_;
  std::unordered_map<uint64_t, PartitionEntry> partitions_; // by packKey
};

} // namespace bm::plan::detail

#endif // BM_PLAN_STAGEPARTITIONS_H
