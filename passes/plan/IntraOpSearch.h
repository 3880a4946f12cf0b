//===- IntraOpSearch.h - per-op tensor-parallel sharding of a block -*- C++ -*-===//
//
// Alpa-style intra-operator search (Zheng et al. 2022, OSDI, section 4.2):
// every op of a segment picks a strategy -- the factor of its sharding rule
// that the tensor-parallel axis splits, or none -- and the cost of a choice
// is each op's compute and own communication plus the resharding on every
// producer -> consumer edge, forward and backward. Alpa solves this with an
// ILP; we solve the same objective exactly by variable elimination over the
// op graph (Dechter 1999, "Bucket elimination"): blocks are narrow DAGs, so
// the largest intermediate table stays tiny, and the optimum is exact, which
// makes folded and unfolded searches agree.
//
// Conventions:
//  - The data-parallel axis always splits the batch factor; the tensor axis
//    never splits the batch, a need-replication factor, nor one it does not
//    divide, and splits a sequence (token) factor only under sequence
//    parallelism (below).
//  - Values crossing a segment's border (the residual stream between
//    blocks) are in one layout for the whole model, the stream layout:
//    replicated over the tensor axis (Megatron-LM), split along the
//    sequence (Megatron-LM's sequence parallelism, Korthikanti et al. 2022:
//    then the ops outside the GEMMs and the attention core may split the
//    sequence too), or split along a feature dimension. Every instance of a
//    block sees the same borders, so folding keeps the optimum; the planner
//    searches the stream layout like the mesh. The model output may stay in
//    any layout (the loss is vocab-parallel).
//  - Layouts match per dimension: a value split along dim d fits a consumer
//    that wants dim d split, even when one side splits a minor factor of a
//    compound dimension (QKV's {3, h}); the partitioner permutes the
//    parameters upstream so that the slices agree (DESIGN.md section 3).
//  - Costs are per micro-batch of `microBatch` samples on one GPU.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_INTRAOPSEARCH_H
#define BM_PLAN_INTRAOPSEARCH_H

#include "cost/CostModel.h"
#include "passes/plan/GraphAnalysis.h"
#include "passes/plan/Plan.h"

#include <vector>

namespace bm::plan {

enum class Phase { Forward, Backward, Step };

const char *toString(Phase phase);

/// A tensor-parallel collective a segment runs.
struct SegmentCollective {
  cost::CollectiveKind kind = cost::CollectiveKind::AllReduce;
  Phase phase = Phase::Forward;
  int op = -1;          // graph op index
  double bytes = 0;     // buffer size, as CostModel::collectiveTime takes it
  double seconds = 0;
  /// Run for an op of the attention core (what selective recomputation
  /// repeats in forward).
  bool attentionCore = false;
  /// Over the context axis (an attention's keys and values), else tp.
  bool overContext = false;
  /// Over 2-D tensor parallelism's tp2 (a weight's row shards).
  bool overTensor2 = false;
};

struct SegmentSolution {
  int tp = 1;
  /// Chosen tensor-parallel factor of each op of the segment, -1 for none.
  std::vector<int> tpFactor;
  /// Seconds per micro-batch on one GPU.
  double forwardCompute = 0;
  double backwardCompute = 0;
  double forwardComm = 0;
  double backwardComm = 0;
  /// Once per step: all-reduce of gradients of tp-replicated parameters.
  double stepComm = 0;
  /// Forward compute of the ops on sequence x sequence tensors (what
  /// selective recomputation repeats).
  double attentionCoreCompute = 0;
  /// Forward compute of the contractions outside the attention core.
  double gemmCompute = 0;
  double attentionCoreComm = 0;
  /// The parts of forwardComm + backwardComm and of attentionCoreComm
  /// over the context axis.
  double contextComm = 0;
  double contextCoreComm = 0;
  double contextForwardComm = 0;
  /// The part of forwardComm + backwardComm over tp2 (the weights' row
  /// shards gathered, their gradients reduce-scattered).
  double tensor2Comm = 0;
  /// Its gathers forward, and backward (of the weights a backward reads).
  double tensor2ForwardGathers = 0, tensor2BackwardGathers = 0;
  /// Bytes per micro-batch per GPU of the activations kept for backward.
  double storedBytes = 0;
  /// The same without the sequence x sequence tensors (selective recompute).
  double storedBytesSelective = 0;
  /// Activations entering the segment (what full recomputation keeps).
  double inputBytes = 0;
  /// Activations leaving the segment (what a pipeline stage sends).
  double outputBytes = 0;
  /// Parameter elements held per GPU (after tensor sharding, before ZeRO).
  double paramsPerGpu = 0;
  /// Parameter elements of the segment, unsharded.
  double paramsTotal = 0;
  /// Mixture of experts: parameter elements of expert weights per GPU
  /// (after tensor sharding; expert parallelism divides them further), the
  /// bytes per micro-batch of the values that cross into and out of the
  /// expert ops (an all-to-all each over the expert-parallel axis), how many
  /// such values.
  double expertParamsPerGpu = 0;
  double expertExchangeBytes = 0;
  int expertExchanges = 0;
  std::vector<SegmentCollective> collectives;
};

/// Finds the exact optimum for one segment whose border values are
/// replicated over the tensor axis (`streamDim` -1) or split along dimension
/// `streamDim` (the per-sample values with a gradient where that dimension
/// exists, is not the batch, and divides by the tensor degree; the others
/// stay replicated). With the stream split along a sequence, the ops
/// outside GEMMs and the attention core may split the sequence too
/// (Megatron-LM's sequence parallelism). The objective is seconds per
/// micro-batch; collectives that run once per step (the tp all-reduce of a
/// replicated weight's gradient) count `stepWeight` times, 1 / (micro-batches
/// per step).
/// The mesh axes besides tp that divide a segment's work. Context
/// parallelism (cp ranks, `cpGroup`) splits the sequence of every op with a
/// context factor (GraphAnalysis::contextFactor) cp ways, and all-gathers
/// each operand whose sequence is not the op's (an attention's keys and
/// values) forward, reduce-scattering its gradient backward. 2-D tensor
/// parallelism's tp2 (Plan.h's kTensor2Axis; `tp2Group`) splits every op's
/// samples tp2 ways and each weight's tensor2Dim: every reader all-gathers
/// it forward and again backward, and its gradient is reduce-scattered.
struct MeshSplits {
  int cp = 1;
  cost::CommGroup cpGroup;
  /// Each rank holds two mirrored chunks: causal attention's work is even.
  bool mirrored = false;
  int tp2 = 1;
  cost::CommGroup tp2Group;
};

SegmentSolution solveSegment(const GraphAnalysis &analysis,
                             const Segment &segment,
                             const cost::CostModel &model,
                             const cost::CommGroup &tpGroup, int microBatch,
                             int streamDim = -1, double stepWeight = 1.0,
                             const MeshSplits &splits = {});

/// The decisions of a solution as #bm.sharding-ready descriptions; expert
/// factors go on the "ep" axis when `expertParallel` > 1, context factors
/// on "cp" when `contextParallel` > 1, and batch factors on "dp" and, with
/// 2-D tensor parallelism (`tensor2` > 1), "tp2".
BlockSharding describeSegment(const GraphAnalysis &analysis,
                              const Segment &segment,
                              const SegmentSolution &solution,
                              int expertParallel = 1, int contextParallel = 1,
                              int tensor2 = 1);

} // namespace bm::plan

#endif // BM_PLAN_INTRAOPSEARCH_H
