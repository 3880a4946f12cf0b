//===- BestPlans.h - the best configurations found so far -------*- C++ -*-===//
//
// What the search keeps of the configurations it scores: the best that
// fits, the best of each mesh (the alternatives a plan shows), the fastest
// that does not fit and the one that needs the least memory (for the
// errors and suggestions when nothing fits). Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_BESTPLANS_H
#define BM_PLAN_BESTPLANS_H

#include "passes/plan/Evaluation.h"

#include <map>
#include <tuple>
#include <vector>

namespace bm::plan::detail {

class PipelineTimeline;

class BestPlans {
public:
  void consider(const Evaluation &e);
  /// Retimes the best plans of the `shown` fastest meshes with their
  /// simulated schedules, keeps only those, and picks the best again. A
  /// mesh's best plan under each other schedule whose closed form comes
  /// within kScheduleSlack of it is simulated too: schedules the closed
  /// form cannot tell apart (ZB-V and DualPipe-V share one) are told
  /// apart by their simulated lists.
  void retimeFinalists(PipelineTimeline &timeline, size_t shown);

  bool haveBest() const { return haveBest_; }
  const Evaluation &best() const { return best_; }
  /// Whether a configuration that takes at least `bound` seconds cannot
  /// come near the best plan (within kAlternativeSlack of it).
  bool outOfReach(double bound) const {
    return haveBest_ && bound > best_.step * kAlternativeSlack;
  }
  const Evaluation &fastestOutOfMemory() const { return fastestOutOfMemory_; }
  /// The configuration that needs the least device memory (of those whose
  /// offloaded optimizer fits in host memory, where any does).
  const Evaluation &smallestMemory() const { return smallestMemory_; }
  /// The best plans of the meshes other than `chosen`'s, fastest first, at
  /// most `count` of them.
  std::vector<Evaluation> runnersUp(const ParallelConfig &chosen,
                                    size_t count) const;

private:
  using Mesh = std::tuple<int, int, int, int>; // dp, tp, pp, stream dim
  bool haveBest_ = false;
  Evaluation best_;
  Evaluation fastestOutOfMemory_;
  Evaluation smallestMemory_;
  std::map<Mesh, Evaluation> bestPerMesh_;
  /// Per mesh, the best plan under each schedule kind.
  std::map<std::pair<Mesh, ScheduleKind>, Evaluation> bestPerSchedule_;
  static constexpr double kScheduleSlack = 1.02;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_BESTPLANS_H
