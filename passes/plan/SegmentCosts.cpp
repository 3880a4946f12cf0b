//===- SegmentCosts.cpp - each segment's sharding, time and memory -------===//

#include "passes/plan/SegmentCosts.h"

#include "passes/plan/Evaluation.h"

#include <algorithm>
#include <unordered_set>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

SegmentCosts::SegmentCosts(const PlanContext &ctx) : ctx_(ctx) {
  for (int v : ctx.analysis.sharedParameters()) {
    const int owner = ctx.analysis.parameterOwner(v);
    std::pair<int, int> place = {-1, -1};
    for (size_t s = 0; s < ctx.segments.size() && place.first < 0; ++s) {
      const std::vector<int> &ops = ctx.segments[s].ops;
      auto it = std::find(ops.begin(), ops.end(), owner);
      if (it != ops.end())
        place = {static_cast<int>(s), static_cast<int>(it - ops.begin())};
    }
    sharedOwners_.push_back(place);
  }
  std::unordered_set<int> producers;
  for (int cls : ctx.graph.layerClass)
    for (int v : ctx.analysis.sideInputs(cls))
      producers.insert(ctx.graph.values[v].producer);
  sideInputSources_.assign(ctx.segments.size(), 0);
  for (size_t s = 0; s < ctx.segments.size(); ++s)
    for (int op : ctx.segments[s].ops)
      sideInputSources_[s] |= producers.count(op) != 0;
}

const SegmentSolution &SegmentCosts::solution(int segment, int tp,
                                              int microBatch, int stream) {
  uint64_t key =
      packKey({{segment, 28}, {tp, 16}, {microBatch, 16}, {stream + 1, 4}});
  auto it = solutions_.find(key);
  if (it != solutions_.end())
    return it->second;
  cost::CommGroup group = cost::placeMesh(ctx_.cluster, 1, tp, 1).tp;
  // Every configuration with this tp and micro-batch runs at least
  // globalBatch x tp / (gpus x microBatch) micro-batches per step (dp is at
  // most gpus / tp): per-step collectives weigh at most one over that.
  double fewestMicroBatches =
      static_cast<double>(ctx_.globalBatch) * tp /
      (static_cast<double>(ctx_.config.gpus) * microBatch);
  double stepWeight = 1.0 / std::max(1.0, fewestMicroBatches);
  const cost::MeshPlacement placement =
      cost::placeMesh(ctx_.cluster, 1, tp, 1, 1, ctx_.cp, ctx_.tp2);
  MeshSplits splits{ctx_.cp, placement.cp, ctx_.cpMirrored, ctx_.tp2,
                    placement.tp2};
  return solutions_
      .emplace(key,
               solveSegment(ctx_.analysis, ctx_.segments[segment], ctx_.model,
                            group, ctx_.graph.unitsOf(microBatch), stream,
                            stepWeight, splits))
      .first->second;
}

std::vector<double>
SegmentCosts::sharedParameterElements(int tp, int microBatch, int stream) {
  llvm::ArrayRef<int> shared = ctx_.analysis.sharedParameters();
  std::vector<double> elements;
  for (size_t i = 0; i < shared.size(); ++i) {
    const int v = shared[i];
    double n = static_cast<double>(ctx_.graph.values[v].numElements());
    auto [segment, position] = sharedOwners_[i];
    if (segment >= 0) {
      const int factor =
          solution(segment, tp, microBatch, stream).tpFactor[position];
      const OpInfo &owner =
          ctx_.graph.ops[ctx_.segments[segment].ops[position]];
      const size_t operand =
          llvm::find(owner.operands, v) - owner.operands.begin();
      if (factor >= 0 &&
          dimOfFactor(owner.rule.operandFactors[operand], factor) >= 0)
        n /= tp;
    }
    elements.push_back(n);
  }
  return elements;
}

StageStats SegmentCosts::itemStats(int segment, int tp, int microBatch,
                                   int stream, Recompute recompute) {
  const SegmentSolution &s = solution(segment, tp, microBatch, stream);
  StageStats stats;
  stats.compute = s.forwardCompute + s.backwardCompute;
  stats.gemmCompute = 3 * s.gemmCompute;
  stats.attentionCompute = 3 * s.attentionCoreCompute;
  stats.forward = s.forwardCompute + s.forwardComm;
  stats.comm = s.forwardComm + s.backwardComm;
  stats.contextComm = s.contextComm;
  stats.tensor2Comm = s.tensor2Comm;
  stats.stepComm = s.stepComm;
  stats.params = s.paramsPerGpu;
  // A shared parameter counts on every device that holds it
  // (StagePartitions::holdSharedParameters), not on its owner's segment
  // alone.
  stats.shared = ctx_.analysis.sharedParametersRead(segment);
  std::vector<double> shared;
  for (size_t i = 0; i < sharedOwners_.size(); ++i)
    if (sharedOwners_[i].first == segment) {
      if (shared.empty())
        shared = sharedParameterElements(tp, microBatch, stream);
      stats.params -= shared[i];
    }
  stats.expertParams = s.expertParamsPerGpu;
  stats.exchangeBytes = s.expertExchangeBytes;
  stats.exchanges = s.expertExchanges;
  stats.stored = s.storedBytes;
  bool isLayer = ctx_.segments[segment].kind == SegmentKind::Layer;
  stats.layers = isLayer ? 1 : 0;
  if (isLayer)
    stats.sideInputBytes = sideInputBytes(segment, microBatch);
  stats.sideInputSource = makesSideInputs(segment) ? 1 : 0;
  // Full recomputation keeps a layer's input alone.
  if (stats.sideInputSource > 0 && (!isLayer || recompute != Recompute::Full))
    stats.madeSideBytes = madeSideInputBytes(segment, tp, microBatch, stream);
  if (!isLayer || recompute == Recompute::None)
    return stats;
  if (recompute == Recompute::Selective) {
    // Korthikanti et al. 2022, section 5: keep everything but the attention
    // core, recompute the core in backward.
    stats.stored = s.storedBytesSelective;
    stats.compute += s.attentionCoreCompute;
    stats.recomputeCompute = s.attentionCoreCompute;
    stats.comm += s.attentionCoreComm;
    stats.contextComm += s.contextCoreComm;
    stats.workingSet = s.storedBytes - s.storedBytesSelective;
    return stats;
  }
  // Full: keep each layer's input, rerun its forward before its backward
  // (Chen et al. 2016, "Training deep nets with sublinear memory cost").
  stats.stored = s.inputBytes;
  stats.compute += s.forwardCompute;
  stats.recomputeCompute = s.forwardCompute;
  // The rerun gathers tp2's weight shards, which the backward then reads
  // rather than gathering them once more.
  stats.comm += s.forwardComm - s.tensor2BackwardGathers;
  stats.contextComm += s.contextForwardComm;
  stats.tensor2Comm += s.tensor2ForwardGathers - s.tensor2BackwardGathers;
  stats.workingSet = s.storedBytes;
  return stats;
}

std::vector<ItemRun> SegmentCosts::itemRuns(int tp, int microBatch, int stream,
                                            Recompute recompute) {
  std::vector<ItemRun> runs;
  for (auto [segment, count] : ctx_.partitionedSequence())
    runs.push_back(
        {itemStats(segment, tp, microBatch, stream, recompute), count});
  return runs;
}

double SegmentCosts::workPerMicroBatch(int tp, int microBatch, int stream,
                                       Recompute recompute) {
  uint64_t key = packKey({{tp, 16},
                          {microBatch, 16},
                          {stream + 1, 4},
                          {static_cast<int>(recompute), 2}});
  auto it = work_.find(key);
  if (it != work_.end())
    return it->second;
  double total = 0;
  for (const ItemRun &run : itemRuns(tp, microBatch, stream, recompute))
    total += static_cast<double>(run.count) * run.each.time();
  return work_[key] = total;
}

double SegmentCosts::sideInputValueBytes(int value, int microBatch) const {
  const ValueInfo &v = ctx_.graph.values[value];
  double samples =
      v.batchDim >= 0 ? ctx_.graph.unitsOf(microBatch) / double(ctx_.tp2) : 1;
  if (ctx_.analysis.contextDim(value) >= 0)
    samples /= ctx_.cp;
  return static_cast<double>(v.numElements()) * samples *
         ctx_.model.activationBytes();
}

double SegmentCosts::sideInputBytes(int segment, int microBatch) const {
  double bytes = 0;
  for (int v : ctx_.analysis.sideInputs(ctx_.segments[segment].blockClass))
    bytes += sideInputValueBytes(v, microBatch);
  return bytes;
}

// As the segment's solution counts them: 1/tp where the producer's chosen
// factor splits the value. They are saved for their readers; a producer
// whose own backward read its result (a softmax) would keep it as well,
// but none makes a side input in the models at hand (T5: a scale).
double SegmentCosts::madeSideInputBytes(int segment, int tp, int microBatch,
                                        int stream) {
  const SegmentSolution &s = solution(segment, tp, microBatch, stream);
  const std::vector<int> &ops = ctx_.segments[segment].ops;
  std::unordered_set<int> counted;
  double bytes = 0;
  for (int cls : ctx_.graph.layerClass)
    for (int v : ctx_.analysis.sideInputs(cls)) {
      auto it =
          std::find(ops.begin(), ops.end(), ctx_.graph.values[v].producer);
      if (it == ops.end() || !ctx_.analysis.isMaterialized(v) ||
          !ctx_.analysis.isSavedForBackward(v) || !counted.insert(v).second)
        continue;
      const OpInfo &op = ctx_.graph.ops[*it];
      const size_t r = llvm::find(op.results, v) - op.results.begin();
      const int factor = s.tpFactor[it - ops.begin()];
      const bool split =
          factor >= 0 && dimOfFactor(op.rule.resultFactors[r], factor) >= 0;
      bytes += sideInputValueBytes(v, microBatch) / (split ? tp : 1);
    }
  return bytes;
}

double SegmentCosts::boundaryBytes(int tp, int microBatch, int stream) {
  if (ctx_.firstLayerSegment < 0)
    return 0;
  return solution(ctx_.firstLayerSegment, tp, microBatch, stream).outputBytes;
}
