//===- SearchSpace.h - the configurations --fix allows ----------*- C++ -*-===//
//
// What the planner may choose and whether the user's request makes sense:
// validate() turns a contradictory request into one line; candidates()
// lists every mesh, micro-batch, recomputation and stream layout with a
// lower bound on its step time; schedules() and zeroStages() say what is
// tried on each. A new mesh axis or schedule is added here (and priced in
// StepCoster). Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_SEARCHSPACE_H
#define BM_PLAN_SEARCHSPACE_H

#include "passes/plan/SegmentCosts.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bm::plan::detail {

/// A stream layout and the dimension it splits (-1 for replicated).
struct StreamOption {
  StreamLayout layout;
  int dim;
};

/// A mesh, micro-batch, recomputation and stream layout, with a lower bound
/// on the step time of every configuration that uses them.
struct Candidate {
  double lowerBound;
  int tp, pp, dp, ep, mb, m;
  StreamOption stream;
  Recompute recompute;
};

/// The largest tensor group the search tries unless --fix gives tp: two
/// nodes (the cost model prices the network all-reduces of groups larger
/// than one).
int largestSearchedTp(const cost::Cluster &cluster);

class SearchSpace {
public:
  SearchSpace(const PlanContext &ctx, SegmentCosts &segments)
      : ctx_(ctx), segments_(segments) {}

  /// One line naming what in the request cannot be planned, if anything.
  llvm::Error validate() const;
  /// Every candidate, by ascending lower bound.
  std::vector<Candidate> candidates();
  /// The (schedule, chunks per device) pairs --fix allows on `c`.
  std::vector<std::pair<ScheduleKind, int>> schedules(const Candidate &c) const;
  /// The least bubble scale of the schedules `c` allows (for its bound).
  double smallestBubbleScale(const Candidate &c) const;
  /// Whether the zero-bubble schedule `kind` can run `c`: its own
  /// conditions (bmrt::scheduleProblem) and, in a V, the layers split into
  /// 2 pp chunks.
  bool zeroBubbleFits(ScheduleKind kind, const Candidate &c) const;
  /// The ZeRO stages to try, in the order the search tries them.
  std::vector<int> zeroStages() const;
  /// Where the optimizer may live, in the order the search tries them: on
  /// the devices, then (where that does not fit) offloaded to the host, on
  /// a cluster with a host link outside --export megatron; or what --fix
  /// pins.
  std::vector<Offload> offloads() const;
  /// Why --fix leaves no configuration to score when candidates exist: no
  /// schedule it allows runs on them (`passedSchedule` false), or its ZeRO
  /// stage needs dp > 1.
  std::string whyFixedChoicesExcludeAll(bool passedSchedule) const;
  /// Why no mesh was tried where --fix pins dp and pp and leaves a tensor
  /// group larger than the search tries; nullopt otherwise.
  std::optional<std::string> whyTensorGroupUnsearched() const;

private:
  llvm::Error validateCluster() const;
  llvm::Error validateMesh() const;
  llvm::Error validateModelChoices() const;
  llvm::Error validateContext() const;
  llvm::Error validateTensor2() const;
  llvm::Error validateMegatron() const;
  llvm::Error validateStream() const;
  /// The candidates with tensor degree `tp`, pipeline degree `pp` and one
  /// of `streams` (streamOptions(tp)).
  void addCandidates(int tp, int pp, const std::vector<StreamOption> &streams,
                     std::vector<Candidate> &out);
  /// The tensor-parallel degrees the search tries.
  std::vector<int> tpOptions() const;
  /// The stream layouts to try at tensor degree `tp`: replicated, and each
  /// dimension that tp may split of a value with a gradient entering the
  /// first layer, allowed by --fix and by `megatronOnly`.
  std::vector<StreamOption> streamOptions(int tp) const;
  /// The expert-parallel degrees: divisors of dp that divide the experts.
  std::vector<int> expertDegrees(int dp) const;
  /// The recomputations that differ from none on this model.
  std::vector<Recompute> recomputations() const;
  /// A lower bound on the exposed data-parallel gradient synchronisation of
  /// the slowest stage on a dp x tp x pp mesh.
  double syncLowerBound(int dp, int tp, int pp) const;

  const PlanContext &ctx_;
  SegmentCosts &segments_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_SEARCHSPACE_H
