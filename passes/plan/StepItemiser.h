//===- StepItemiser.h - every cost of the chosen plan's step ----*- C++ -*-===//
//
// The search scores configurations from stage sums (StepCoster); the chosen
// plan's step is itemised per stage group from the same segment solutions,
// DeviceExtras and StepTail, so that the items add up to the scored step
// time and every printer reads the items (DESIGN.md section 7). Not
// installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_STEPITEMISER_H
#define BM_PLAN_STEPITEMISER_H

#include "passes/plan/StagePartitions.h"

#include <map>
#include <vector>

namespace bm::plan::detail {

class ItemList;

class StepItemiser {
public:
  StepItemiser(const PlanContext &ctx, SegmentCosts &segments,
               StagePartitions &partitions, const StepCoster &coster)
      : ctx_(ctx), segments_(segments), partitions_(partitions),
        coster_(coster) {}

  /// Every cost of the step of `e`, per stage group: the compute and
  /// tensor-parallel collectives of the segments it holds, its
  /// per-micro-batch transfers, its data-parallel collectives and optimizer
  /// step; and the bubble.
  std::vector<CostItem> itemise(const Evaluation &e);

private:
  void itemiseSegments(ItemList &list, const std::map<int, int64_t> &held,
                       const ParallelConfig &config,
                       const cost::MeshPlacement &placement);
  void itemiseTransfers(ItemList &list, const StageStats &stats,
                        const ParallelConfig &config,
                        const cost::MeshPlacement &placement,
                        const PartitionEntry &entry);
  void itemiseDataParallel(ItemList &list, const StageStats &stats,
                           const ParallelConfig &config,
                           const cost::MeshPlacement &placement,
                           const PartitionEntry &entry);

  const PlanContext &ctx_;
  SegmentCosts &segments_;
  StagePartitions &partitions_;
  const StepCoster &coster_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_STEPITEMISER_H
