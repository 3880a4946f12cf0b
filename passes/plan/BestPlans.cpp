//===- BestPlans.cpp - the best configurations found so far --------------===//

#include "passes/plan/BestPlans.h"

#include "passes/plan/PipelineTimeline.h"

#include <algorithm>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

void BestPlans::consider(const Evaluation &e) {
  // The least device memory, among the configurations whose offloaded
  // state (if any) fits in host memory where some does.
  if (smallestMemory_.step == kInfinity ||
      (e.hostFits != smallestMemory_.hostFits
           ? e.hostFits
           : e.memory.total() < smallestMemory_.memory.total()))
    smallestMemory_ = e;
  if (!e.fits) {
    if (better(e, fastestOutOfMemory_))
      fastestOutOfMemory_ = e;
    return;
  }
  Mesh mesh = {e.config.dp, e.config.tp, e.config.pp, e.config.streamDim};
  auto [kind, added] =
      bestPerSchedule_.try_emplace({mesh, e.config.schedule}, e);
  if (!added && better(e, kind->second))
    kind->second = e;
  auto it = bestPerMesh_.find(mesh);
  if (it == bestPerMesh_.end() || better(e, it->second))
    bestPerMesh_[mesh] = e;
  if (!haveBest_ || better(e, best_)) {
    best_ = e;
    haveBest_ = true;
  }
}

void BestPlans::retimeFinalists(PipelineTimeline &timeline, size_t shown) {
  // The best plan of each mesh, fastest first by the closed form: the ones
  // shown (the chosen plan and the alternatives) are simulated and ranked
  // again; the others are dropped.
  std::vector<std::pair<Mesh, Evaluation>> finalists(bestPerMesh_.begin(),
                                                     bestPerMesh_.end());
  std::sort(
      finalists.begin(), finalists.end(),
      [](const auto &a, const auto &b) { return better(a.second, b.second); });
  if (finalists.size() > shown)
    finalists.resize(shown);
  bestPerMesh_.clear();
  haveBest_ = false;
  for (auto &[mesh, e] : finalists) {
    Evaluation fastest = timeline.retime(e);
    for (const auto &[key, other] : bestPerSchedule_)
      if (key.first == mesh && !(other.config == e.config) &&
          other.step <= e.step * kScheduleSlack) {
        Evaluation retimed = timeline.retime(other);
        if (better(retimed, fastest))
          fastest = retimed;
      }
    bestPerMesh_[mesh] = fastest;
    if (!haveBest_ || better(fastest, best_)) {
      best_ = fastest;
      haveBest_ = true;
    }
  }
}

std::vector<Evaluation> BestPlans::runnersUp(const ParallelConfig &chosen,
                                             size_t count) const {
  std::vector<Evaluation> others;
  for (const auto &[mesh, e] : bestPerMesh_)
    if (!(e.config == chosen))
      others.push_back(e);
  std::sort(others.begin(), others.end(), better);
  if (others.size() > count)
    others.resize(count);
  return others;
}
