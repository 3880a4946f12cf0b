//===- PlanContext.h - what every part of the planner reads -----*- C++ -*-===//
//
// The facts one search holds fixed: the model, the cluster, the user's
// training configuration, the precision and optimizer they imply, the
// model's segments in order, and the global batch. The planner's parts
// (SearchSpace, SegmentCosts, StepCoster, StagePartitions,
// PipelineTimeline, StepItemiser, PlanAssembler; see Planner.h) read them
// from here and keep their own caches; none writes them. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_PLANCONTEXT_H
#define BM_PLAN_PLANCONTEXT_H

#include "cost/CostModel.h"
#include "passes/plan/GraphAnalysis.h"
#include "passes/plan/TrainingConfig.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace bm::plan::detail {

struct PlanContext {
  PlanContext(const ModelGraph &graph, const cost::Cluster &cluster,
              const TrainingConfig &config);
  PlanContext(const PlanContext &) = delete;
  PlanContext &operator=(const PlanContext &) = delete;

  /// Whether the trainer that runs the plan is bmrt (else Megatron-LM's
  /// behaviour is priced).
  bool bmrt() const { return cluster.runtime == cost::RuntimeModel::Bmrt; }
  /// Kinds of layers (block classes), and the attention layers in one
  /// block when there is one kind (else 0): what Megatron-LM's arguments
  /// need to describe the model.
  int numBlockClasses() const;
  int attentionsPerBlock() const;
  /// Whether cp's ranks can hold mirrored chunks: 2cp chunks divide the
  /// sequence and the model mixes positions only in attention.
  bool mirrorable() const {
    return analysis.hasContext() && analysis.contextDivisibleBy(2 * cp) &&
           analysis.mixesSequenceOnlyInAttention();
  }
  /// The segment sequence the partitioner splits: the prologue, the runs
  /// of layers and interludes, the epilogue, as (segment, instances).
  std::vector<std::pair<int, int64_t>> partitionedSequence() const;

  const ModelGraph &graph;
  const cost::Cluster &cluster;
  const TrainingConfig &config;
  /// The training precision: config.precision or the cluster's default.
  const cost::Precision precision;
  const GraphAnalysis analysis;
  const cost::CostModel model;
  /// Bytes of parameters, gradients and optimizer state per parameter.
  const cost::ModelStateBytes perParam;
  /// What an offloaded optimizer moves and keeps per parameter.
  const cost::OffloadBytes offloadPerParam;
  const std::vector<Segment> segments;
  /// Between prologue and epilogue, in order: (segment, instances) for runs
  /// of layers and for interludes.
  std::vector<std::pair<int, int64_t>> layerRuns;
  int prologue = -1, epilogue = -1, firstLayerSegment = -1;
  /// The context-parallel degree of every configuration of this search
  /// (--fix cp, else 1): each segment is costed on cp's share of the
  /// sequence, so the segment caches hold one degree.
  int cp = 1;
  /// Whether those ranks hold mirrored chunks (ParallelConfig::cpMirrored):
  /// wherever the model mixes positions only in attention and 2cp chunks
  /// divide the sequence.
  bool cpMirrored = false;
  /// 2-D tensor parallelism's second degree in every configuration of this
  /// search (--fix tp2, else 1): it divides each segment's samples and
  /// weights, so the segment caches hold one degree too.
  int tp2 = 1;
  /// config.globalBatch, or the default: one sample per GPU, rounded up to
  /// whole token groups.
  int64_t globalBatch = 0;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_PLANCONTEXT_H
