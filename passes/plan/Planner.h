//===- Planner.h - one search, as its parts ---------------------*- C++ -*-===//
//
// The planner is a few parts with one job each, all reading one PlanContext:
//
//   SearchSpace      what may be chosen; validates the request (--fix)
//   SegmentCosts     each segment's sharding and cost (IntraOpSearch)
//   StepCoster       a configuration's step time and memory per device
//   StagePartitions  layers over pipeline stages, for time or memory
//   PipelineTimeline the simulated schedule: bubble and timeline bars
//   StepItemiser     every cost of the chosen step, itemised
//   BestPlans        the best configurations found so far
//   PlanAssembler    the Plan the user sees
//
// Planner (Search.cpp) owns them and runs the search: candidates best-first
// by a lower bound, each schedule and ZeRO stage scored, pruned once the
// bound exceeds the best plan. A new mesh axis or schedule belongs in
// SearchSpace and StepCoster (and PipelineTimeline for a schedule); a new
// memory or time term in StepCoster. Not installed: use Search.h.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_PLANNER_H
#define BM_PLAN_PLANNER_H

#include "passes/plan/BestPlans.h"
#include "passes/plan/PipelineTimeline.h"
#include "passes/plan/PlanAssembler.h"
#include "passes/plan/SearchSpace.h"
#include "passes/plan/StepItemiser.h"

#include "llvm/Support/Error.h"

#include <unordered_set>

namespace bm::plan::detail {

class Planner {
public:
  Planner(const ModelGraph &graph, const cost::Cluster &cluster,
          const TrainingConfig &config)
      : ctx_(graph, cluster, config), segments_(ctx_), coster_(ctx_),
        partitions_(ctx_, segments_, coster_),
        timeline_(ctx_, partitions_, coster_),
        itemiser_(ctx_, segments_, partitions_, coster_),
        space_(ctx_, segments_), assembler_(ctx_, segments_, partitions_,
                                            coster_, timeline_, itemiser_) {}

  llvm::Error validate() const { return space_.validate(); }
  /// Scores the configurations --fix allows, best-first.
  void run();
  /// The best plan, or why there is none; `suggest` adds what would fit.
  llvm::Expected<Plan> result(bool suggest);
  /// Whether any configuration was scored (else none divides the batch).
  bool scoredAny() const { return evaluated_ > 0; }
  /// Whether some configuration scored fits, and the best one's step.
  bool fits() const { return best_.haveBest(); }
  double bestStep() const { return best_.best().step; }
  const Evaluation &best() const { return best_.best(); }

private:
  /// Scores `c` under `schedule` at each of `zeroStages` worth trying
  /// (SearchSpace::zeroStages); `fitting` holds the variants that fit
  /// (heavier forms are skipped).
  void scoreZeroStages(const Candidate &c, ScheduleKind schedule, int chunks,
                       const std::vector<int> &zeroStages,
                       std::unordered_set<uint64_t> &fitting);
  /// Whether some variant fits, whether the first one tried does, whether
  /// it fits without offload, and whether one that might fit was not
  /// scored (too slow to matter).
  struct Fit {
    bool any = false, first = false, onDevice = false, unscored = false;
  };
  /// Scores `config` with its optimizer where SearchSpace::offloads() allows
  /// it (on the devices only where `onDevice`), in that order, until one
  /// fits; and offloaded where it fits on the devices too, if offloading
  /// would be faster (offloadIsFaster).
  Fit scoreOffloads(ParallelConfig config, bool onDevice);
  /// Whether the offloaded optimizer of `e`, which fits on the devices,
  /// would make its step faster: where bmrt runs the host's work behind the
  /// next forward and the forward hides more of it than the device's own
  /// optimizer step takes.
  bool offloadIsFaster(const Evaluation &e);
  /// Whether offloading the optimizer of `e`, which does not fit, may give
  /// a plan that fits and comes near the best one; `fit.unscored` says
  /// where only its time rules it out.
  bool offloadMayHelp(const Evaluation &e, Fit &fit);
  /// Time and memory of `config`, its stages rebalanced for memory where
  /// the time-balanced ones do not fit.
  Evaluation evaluate(const ParallelConfig &config);
  /// What would fit when nothing does: more GPUs, or a smaller batch.
  std::string suggestion() const;
  /// ", and ..." saying how `e`'s offloaded optimizer overflows host
  /// memory, or "" where it fits.
  std::string hostShortfall(const Evaluation &e) const;

  PlanContext ctx_;
  SegmentCosts segments_;
  StepCoster coster_;
  StagePartitions partitions_;
  PipelineTimeline timeline_;
  StepItemiser itemiser_;
  SearchSpace space_;
  PlanAssembler assembler_;
  BestPlans best_;
  /// How far the search got: some (mesh, micro-batch, recomputation,
  /// stream) was a candidate, some schedule of one passed --fix, and the
  /// configurations scored.
  bool hadCandidates_ = false, passedSchedule_ = false;
  int64_t evaluated_ = 0;
  std::vector<Offload> offloads_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_PLANNER_H
