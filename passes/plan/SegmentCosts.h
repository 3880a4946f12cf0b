//===- SegmentCosts.h - each segment's sharding, time and memory -*- C++
//-*-===//
//
// The planner's lowest part: for a tensor-parallel degree, micro-batch,
// stream layout and recomputation, the per-op sharding of every segment
// (IntraOpSearch's solveSegment, once per key) and what one instance of the
// segment costs a stage (StageStats). Everything above it (partitions,
// step costs, items) reads segments through here. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_SEGMENTCOSTS_H
#define BM_PLAN_SEGMENTCOSTS_H

#include "passes/plan/IntraOpSearch.h"
#include "passes/plan/PipelinePartition.h"
#include "passes/plan/PlanContext.h"

#include <unordered_map>
#include <utility>
#include <vector>

namespace bm::plan::detail {

class SegmentCosts {
public:
  explicit SegmentCosts(const PlanContext &ctx);

  /// `stream` is the stream layout (see solveSegment): -1 replicated, else
  /// the dimension of the border values that tp splits.
  const SegmentSolution &solution(int segment, int tp, int microBatch,
                                  int stream);
  /// What one instance of `segment` costs the stage holding it.
  StageStats itemStats(int segment, int tp, int microBatch, int stream,
                       Recompute recompute);
  /// itemStats of PlanContext::partitionedSequence, with their counts.
  std::vector<ItemRun> itemRuns(int tp, int microBatch, int stream,
                                Recompute recompute);
  /// Seconds of all items (prologue, layers, epilogue) for one micro-batch.
  double workPerMicroBatch(int tp, int microBatch, int stream,
                           Recompute recompute);
  /// Elements per GPU of each of GraphAnalysis::sharedParameters(), split
  /// over tp as its owner op's chosen sharding stores it.
  std::vector<double> sharedParameterElements(int tp, int microBatch,
                                              int stream);
  /// Bytes per micro-batch of the activations between two layers.
  double boundaryBytes(int tp, int microBatch, int stream);
  /// How many segment solutions the search computed.
  size_t numSolved() const { return solutions_.size(); }

private:
  /// Bytes per micro-batch of the side inputs of a layer segment (see
  /// GraphAnalysis::sideInputs), which every stage holding it receives.
  double sideInputBytes(int segment, int microBatch) const;
  /// Whether `segment` produces side inputs of some layer class.
  bool makesSideInputs(int segment) const { return sideInputSources_[segment]; }
  /// Bytes per micro-batch of the side inputs `segment` makes that its
  /// solution counts as saved (for their readers' backward).
  double madeSideInputBytes(int segment, int tp, int microBatch, int stream);
  /// Bytes per micro-batch of side input `value`, whole.
  double sideInputValueBytes(int value, int microBatch) const;

  const PlanContext &ctx_;
  /// Per GraphAnalysis::sharedParameters(): the segment holding its owner
  /// op and the owner's position there; -1, -1 for an owner no segment
  /// holds.
  std::vector<std::pair<int, int>> sharedOwners_;
  /// Per segment: whether it makes side inputs of some layer class.
  std::vector<char> sideInputSources_;
  // Caches, keyed by packKey of their arguments.
  std::unordered_map<uint64_t, SegmentSolution> solutions_;
  std::unordered_map<uint64_t, double> work_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_SEGMENTCOSTS_H
