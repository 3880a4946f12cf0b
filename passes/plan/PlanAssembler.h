//===- PlanAssembler.h - the Plan the user sees -----------------*- C++ -*-===//
//
// Turns the chosen evaluation into a Plan: the model and cluster it is for,
// stages, per-op shardings of each unique block, the itemised step and its
// collectives, memory per stage, the timeline, throughput, and the
// runner-ups with the reason each lost. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_PLANASSEMBLER_H
#define BM_PLAN_PLANASSEMBLER_H

#include "passes/plan/BestPlans.h"
#include "passes/plan/PipelineTimeline.h"
#include "passes/plan/StepItemiser.h"

namespace bm::plan::detail {

/// Why `alternative` lost against `best` on `cluster` (Alternative::reason):
/// the memory it lacks, on the device or (offloaded) on the host, or the
/// part of the step time that grew most.
std::string lossReason(const Evaluation &alternative, const Evaluation &best,
                       const cost::Cluster &cluster);

class PlanAssembler {
public:
  PlanAssembler(const PlanContext &ctx, SegmentCosts &segments,
                StagePartitions &partitions, const StepCoster &coster,
                PipelineTimeline &timeline, StepItemiser &itemiser)
      : ctx_(ctx), segments_(segments), partitions_(partitions),
        coster_(coster), timeline_(timeline), itemiser_(itemiser) {}

  /// The plan of `searched` (retimed if it was not), with the runner-ups
  /// of `best`; `evaluated` configurations were scored.
  Plan assemble(const Evaluation &searched, const BestPlans &best,
                int64_t evaluated);

private:
  /// What the plan is for: model, cluster, batch, precision, optimizer.
  void describeRequest(Plan &plan) const;
  /// Stages, blocks, items, memory per stage and timeline of `chosen`.
  void describeStep(Plan &plan, const Evaluation &chosen);
  /// Model FLOPs, MFU, hardware TFLOPs and tokens per second of `chosen`.
  void describeThroughput(Plan &plan, const Evaluation &chosen) const;
  double tpComputeSplit(const ParallelConfig &config) const;
  void describeAlternatives(Plan &plan, const Evaluation &chosen,
                            const BestPlans &best) const;

  const PlanContext &ctx_;
  SegmentCosts &segments_;
  StagePartitions &partitions_;
  const StepCoster &coster_;
  PipelineTimeline &timeline_;
  StepItemiser &itemiser_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_PLANASSEMBLER_H
