//===- Search.h - the planner's search --------------------------*- C++ -*-===//
//
// searchPlan enumerates meshes dp x tp x pp of the GPUs (and, for
// mixture-of-experts models, an expert-parallel degree ep dividing dp),
// micro-batch sizes, pipeline schedules, ZeRO stages and recomputation; for
// each (tp, micro-batch) it solves the per-op sharding of every unique block
// once (IntraOpSearch), balances layers over stages (PipelinePartition),
// scores the step with the cost model and the memory of every stage, and
// returns the fastest plan that fits, with the runner-ups and why they lost.
// Configurations are visited best-first by a lower bound on their step time
// and pruned once the bound exceeds the best plan (branch and bound): the
// best plan is exact, runner-ups within 25% of it too.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_SEARCH_H
#define BM_PLAN_SEARCH_H

#include "cost/Cluster.h"
#include "passes/plan/ModelGraph.h"
#include "passes/plan/Plan.h"
#include "passes/plan/TrainingConfig.h"

#include "llvm/Support/Error.h"

namespace bm::plan {

/// The best plan, or one clear line saying why there is none: gpus = 0, a
/// GPU count the nodes cannot hold, a --fix that contradicts the GPU count
/// or the global batch, or no configuration that fits in memory (with the
/// smallest memory any configuration needs and what would fit).
llvm::Expected<Plan> searchPlan(const ModelGraph &graph,
                                const cost::Cluster &cluster,
                                const TrainingConfig &config);

/// Evaluates a hand-written configuration with the same cost model. --fix
/// must give the mesh (two of dp, tp, pp at least); with every key given it
/// scores exactly that configuration, keys left out are searched as
/// searchPlan does. A configuration that does not fit is an error that says
/// how much memory it needs.
llvm::Expected<Plan> evaluateConfiguration(const ModelGraph &graph,
                                           const cost::Cluster &cluster,
                                           const TrainingConfig &config);

} // namespace bm::plan

#endif // BM_PLAN_SEARCH_H
