//===- PipelinePartition.h - layers to pipeline stages ----------*- C++ -*-===//
//
// Splits the sequence prologue, layers..., epilogue into contiguous stages so
// that the slowest stage is as fast as possible (the bottleneck partition of
// a chain; Bokhari 1988, solved here by bisection on the bottleneck with a
// greedy feasibility test). Layers of one block class cost the same, so the
// sequence is given as runs of identical items and the greedy test jumps over
// whole stages inside a run: the work is O(runs * log(precision)),
// independent of the number of layers when they are folded.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_PIPELINEPARTITION_H
#define BM_PLAN_PIPELINEPARTITION_H

#include "cost/CostModel.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bm::plan {

/// Additive (and one max-type) quantities of an item or a stage, per
/// micro-batch unless noted.
struct StageStats {
  double compute = 0;        // seconds, forward + backward + recompute
  /// Parts of `compute` (the rest is memory-bound ops): contractions
  /// outside the attention core, the attention core, recomputation.
  double gemmCompute = 0;
  double attentionCompute = 0;
  double recomputeCompute = 0;
  /// Seconds of the forward pass (compute and communication), the part of
  /// time() before the backward: how the pipeline schedule splits a stage.
  double forward = 0;
  double comm = 0;           // seconds of tensor-parallel collectives
  /// The part of `comm` over the context axis (keys and values gathered
  /// over cp), which runs on cp's link.
  double contextComm = 0;
  /// The part of `comm` over tp2 (weights' row shards), on tp2's link.
  double tensor2Comm = 0;
  double stepComm = 0;       // seconds once per step
  double params = 0;         // parameter elements per GPU (after tp)
  double stored = 0;         // activation bytes kept per micro-batch
  double workingSet = 0;     // largest transient activation bytes (max)
  double expertParams = 0;   // the part of `params` in expert weights
  double exchangeBytes = 0;  // expert dispatch / combine bytes
  double exchanges = 0;      // expert dispatch / combine values
  /// Bytes per micro-batch of values that every layer of a class reads
  /// from outside the layers and that carry a gradient (T5's encoder
  /// output, read by each decoder layer's cross-attention): each stage that
  /// holds such layers receives them once (max-type, like workingSet).
  double sideInputBytes = 0;
  /// 1 when the item or stage makes those values itself (T5's encoder
  /// end): such a stage receives nothing (max-type).
  double sideInputSource = 0;
  /// On a device (see onDevice): how many of its stages, one per chunk,
  /// receive side inputs, and the bytes per micro-batch they receive
  /// together. Additive: a device whose first chunk makes the encoder
  /// output still receives it in its later chunks.
  double sideInputReceivers = 0;
  double receivedSideBytes = 0;
  /// The part of `stored` that is side inputs the item or stage makes, kept
  /// for their readers' backward: a stage holding none of the readers keeps
  /// none of it (see onDevice).
  double madeSideBytes = 0;
  /// Parameters that pipeline stages may hold apart (tied embeddings; bit
  /// i for GraphAnalysis::sharedParameters()[i], or-type): the ones an item
  /// or stage reads, whose elements `params` leaves out; on a device
  /// (StagePartitions::holdSharedParameters) the ones it holds, added to `params`.
  uint64_t shared = 0;
  /// On a device: elements per GPU of the held ones that other devices hold
  /// too (part of `params`), whose gradient is summed over pp.
  double sharedParams = 0;
  bool hasShared(size_t i) const { return (shared >> i & 1) != 0; }
  int64_t layers = 0;

  /// Whether a stage with these contents receives side inputs.
  bool receivesSideInputs() const {
    return sideInputBytes > 0 && sideInputSource == 0;
  }

  /// A stage's contents as one stage of a device: what it receives counted
  /// in the additive fields that sum over a device's chunks.
  StageStats onDevice() const;

  double time() const { return compute + comm; }
  /// One micro-batch's pass split as the zero-bubble schedules split it:
  /// the forward, W (the weights' gradient GEMMs: one of the three GEMMs
  /// each linear layer runs per pass, forward, input and weight gradient)
  /// and B (the rest of the backward: the input's gradient, the attention
  /// core's and memory-bound ops' backward, any recomputation, the
  /// collectives).
  cost::PassTimes passTimes() const;
  bool operator==(const StageStats &other) const;
  StageStats &operator+=(const StageStats &other);
  StageStats scaled(int64_t count) const;
};

/// `count` consecutive identical items.
struct ItemRun {
  StageStats each;
  int64_t count = 1;
};

/// `numStages` consecutive stages with identical contents.
struct StageGroup {
  int numStages = 1;
  StageStats stats;
};

/// The balanced partition into exactly `numStages` stages. Stages left
/// over (fewer items than stages, or a heavy last item) are empty and come
/// just before the last stage, which keeps what follows the last layer, as
/// the compiled program does.
std::vector<StageGroup> partitionStages(const std::vector<ItemRun> &runs,
                                        int numStages);

/// The balanced partition when stage i may hold at most maxLayers[i] layers
/// (what its memory allows); empty when the layers do not fit. O(stages)
/// per bisection step: used only when the unconstrained partition does not
/// fit in memory.
std::vector<StageGroup>
partitionStagesWithLimits(const std::vector<ItemRun> &runs,
                          const std::vector<int64_t> &maxLayers);

/// The balanced partition among those Megatron-LM can lay out
/// (megatron/core/transformer/transformer_config.py,
/// num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage):
/// the items must be an optional prologue, one run of identical layers and
/// an optional epilogue, and every stage holds at least one layer. With
/// `evenOnly` (the interleaved schedule) every stage holds the same number
/// of layers; otherwise the first and the last stage may hold their own
/// counts and the stages between share the rest evenly. Stage i holds at
/// most maxLayers[i] layers when `maxLayers` is given. Empty when no such
/// partition exists. O(layers / stages).
std::vector<StageGroup>
partitionStagesMegatron(const std::vector<ItemRun> &runs, int numStages,
                        bool evenOnly,
                        const std::vector<int64_t> &maxLayers = {});

/// Expands groups to one entry per stage.
std::vector<StageStats> expandStages(const std::vector<StageGroup> &groups);
/// The stats of virtual stage `stage` of `groups` (expandStages(groups)[stage]
/// without building the list), or null past the last.
const StageStats *stageAt(const std::vector<StageGroup> &groups, int stage);

} // namespace bm::plan

#endif // BM_PLAN_PIPELINEPARTITION_H
