//===- Search.cpp - the planner's search ----------------------------------===//
//
// Enumerates the configurations --fix allows (SearchSpace) best-first by a
// lower bound on their step time, scores them (StepCoster), keeps the best
// that fits (BestPlans), and turns user errors into one-line llvm::Errors.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Search.h"

#include "passes/plan/PlanAssembler.h"
#include "passes/plan/PlanOutput.h"
#include "passes/plan/Planner.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cassert>
#include <memory>
#include <optional>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

static llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

void Planner::run() {
  std::vector<Candidate> candidates = space_.candidates();
  hadCandidates_ = !candidates.empty();
  // Dominance: more recomputation and a higher ZeRO stage (from 1 on) only
  // add time, so once a variant fits, its heavier forms are skipped.
  std::unordered_set<uint64_t> fitting;
  const std::vector<int> zeroStages = space_.zeroStages();
  offloads_ = space_.offloads();
  // Best first: once the bound exceeds the best plan by more than the
  // slack, nothing later can win (branch and bound, exact for the best
  // plan; runner-ups within the slack are exact too).
  for (const Candidate &c : candidates) {
    if (best_.outOfReach(c.lowerBound))
      break;
    for (auto [schedule, chunks] : space_.schedules(c)) {
      passedSchedule_ = true;
      scoreZeroStages(c, schedule, chunks, zeroStages, fitting);
    }
  }
}

void Planner::scoreZeroStages(const Candidate &c, ScheduleKind schedule,
                              int chunks, const std::vector<int> &zeroStages,
                              std::unordered_set<uint64_t> &fitting) {
  // ZeRO-3 needs the least memory: when it does not fit on the devices, no
  // stage does (`onDeviceFails`: only their offloaded variants are left);
  // when it does not fit offloaded either, none does (`leanestFails`).
  bool lowerZeroFits = false, leanestFails = false, onDeviceFails = false;
  const bool leanestDecides = !ctx_.config.fixed.zeroStage;
  for (int zero : zeroStages) {
    if (zero > 0 && c.dp == 1)
      continue; // nothing to shard over
    uint64_t variant = packKey({{c.tp, 10},
                                {c.pp, 14},
                                {c.ep, 14},
                                {c.stream.dim + 1, 4},
                                {c.mb, 10},
                                {static_cast<int>(schedule), 2},
                                {chunks, 6},
                                {zero, 2}});
    if (fitting.count(variant) || leanestFails || (lowerZeroFits && zero == 2))
      continue;
    ParallelConfig config;
    config.dp = c.dp;
    config.cp = ctx_.cp;
    config.tp2 = ctx_.tp2;
    config.cpMirrored = ctx_.cpMirrored;
    config.ep = c.ep;
    config.tp = c.tp;
    config.pp = c.pp;
    config.microBatch = c.mb;
    config.numMicroBatches = c.m;
    config.zeroStage = zero;
    config.recompute = c.recompute;
    config.schedule = schedule;
    config.chunks = chunks;
    config.stream = c.stream.layout;
    config.streamDim = c.stream.dim;
    Fit fit = scoreOffloads(config, /*onDevice=*/!onDeviceFails);
    // Only what fits without the slower offload makes heavier forms
    // useless: they may fit on the devices alone, and be faster.
    if (fit.first)
      fitting.insert(variant);
    if (zero == 3 && leanestDecides) {
      onDeviceFails = !fit.onDevice;
      // An offload skipped for its time says nothing about its memory.
      leanestFails = !fit.any && !fit.unscored;
    }
    if (zero == 1 && fit.first)
      lowerZeroFits = true;
  }
}

Planner::Fit Planner::scoreOffloads(ParallelConfig config, bool onDevice) {
  Fit fit;
  std::optional<Evaluation> unoffloaded;
  for (Offload offload : offloads_) {
    if (offload == Offload::None && !onDevice)
      continue;
    // Offload only what does not fit otherwise, where it may help.
    if (unoffloaded && !offloadMayHelp(*unoffloaded, fit))
      break;
    config.offload = offload;
    Evaluation e = evaluate(config);
    best_.consider(e);
    fit.any = e.fits;
    fit.first = e.fits && offload == offloads_.front();
    fit.onDevice = e.fits && offload == Offload::None;
    if (e.fits) {
      if (offload == Offload::None && offloads_.size() > 1 &&
          offloadIsFaster(e)) {
        config.offload = Offload::Optimizer;
        best_.consider(evaluate(config));
      }
      break;
    }
    if (offload == Offload::None)
      unoffloaded = e;
  }
  return fit;
}

// Offloading frees the optimizer state alone: where the devices do not fit
// without it either, it cannot help (unless a pipeline's stages can be
// rebalanced for memory: evaluate). Nor where its step, at least `e`'s with
// the tail's optimizer step replaced by the copies and the host's step,
// cannot come near the best plan.
bool Planner::offloadMayHelp(const Evaluation &e, Fit &fit) {
  const ParallelConfig &c = e.config;
  const bool rebalanced = c.pp > 1 && c.chunks == 1;
  if (!rebalanced &&
      e.memory.total() - e.memory.optimizer > ctx_.cluster.memoryBytes)
    return false;
  fit.unscored = best_.outOfReach(coster_.offloadedStep(e, partitions_.of(e)));
  return !fit.unscored;
}

bool Planner::offloadIsFaster(const Evaluation &e) {
  // Where the host is the device (a CPU's), its step is the device's own
  // work moved, with copies added: never chosen for time.
  if (ctx_.cluster.offloadSharesDeviceMemory())
    return false;
  return coster_.offloadedStep(e, partitions_.of(e)) < e.step;
}

Evaluation Planner::evaluate(const ParallelConfig &config) {
  ++evaluated_;
  const PartitionEntry &entry = partitions_.partition(config);
  assert(!entry.devices.empty() &&
         "validate() admits only models the partitioner can split");
  Evaluation e = coster_.score(config, entry);
  if (e.fits || config.pp == 1 || config.chunks != 1)
    return e;
  // Rebalancing for memory only slows a configuration down: skip it when
  // even the time-balanced one cannot come near the best plan.
  if (best_.outOfReach(e.step))
    return e;
  // The time-balanced stages do not fit: give the stages that hold more
  // micro-batches in flight fewer layers, if that fits.
  if (std::shared_ptr<const PartitionEntry> rebalanced =
          partitions_.memoryBalanced(config, entry)) {
    Evaluation balanced = coster_.score(config, *rebalanced);
    if (balanced.fits) {
      balanced.ownPartition = rebalanced;
      return balanced;
    }
  }
  return e;
}

namespace {

/// What one planner run at another size says: whether the size can be laid
/// out and searched at all, whether a plan fits, and the smallest memory
/// per GPU any plan needs there.
struct SizeProbe {
  bool searched = false;
  bool fits = false;
  double smallestNeed = 0;
};

/// More GPUs stop helping when the smallest need falls by less than 2% in
/// each of three doublings in a row: every degree is at its limit and what
/// is left, the activations of one micro-batch, does not shrink.
constexpr double kNoProgress = 0.98;
constexpr int kStalledDoublings = 3;
/// The largest count the suggestion tries (a 64K-GPU cluster).
constexpr int kMostSuggestedGpus = 1 << 16;

} // namespace

std::string Planner::suggestion() const {
  if (ctx_.config.gpus <= 0)
    return "";
  auto probe = [&](int gpus, int64_t globalBatch) {
    TrainingConfig other = ctx_.config;
    other.gpus = gpus;
    other.globalBatch = globalBatch;
    if (gpus != ctx_.config.gpus)
      other.fixed.dp.reset(); // the data-parallel degree follows the size
    other.numAlternatives = 0;
    Planner planner(ctx_.graph, ctx_.cluster, other);
    SizeProbe result;
    if (llvm::Error invalid = planner.validate()) {
      llvm::consumeError(std::move(invalid)); // this size cannot be laid out
      return result;
    }
    planner.run();
    result.searched = planner.evaluated_ > 0;
    result.fits = planner.best_.haveBest();
    result.smallestNeed = planner.best_.smallestMemory().memory.total();
    return result;
  };

  // The fewest GPUs that fit, by doubling (rounded up to whole nodes). A
  // user-given global batch stays; the default one grows with the GPUs.
  const int perNode = ctx_.cluster.gpusPerNode;
  int mostGpus = kMostSuggestedGpus;
  if (ctx_.cluster.maxNodes > 0)
    mostGpus = std::min<int64_t>(
        mostGpus, static_cast<int64_t>(ctx_.cluster.maxNodes) * perNode);
  std::string moreGpus;
  double lowestNeed = best_.smallestMemory().memory.total();
  int tooFew = ctx_.config.gpus, stalled = 0;
  for (int gpus = ctx_.config.gpus * 2; gpus <= mostGpus; gpus *= 2) {
    if (gpus > perNode && gpus % perNode != 0)
      gpus = (gpus / perNode + 1) * perNode;
    SizeProbe size = probe(gpus, ctx_.config.globalBatch);
    if (!size.searched)
      continue;
    if (size.fits) {
      moreGpus = llvm::formatv("a plan fits on {0} GPUs ({1} are too few)",
                               gpus, tooFew);
      break;
    }
    tooFew = gpus;
    stalled = size.smallestNeed > lowestNeed * kNoProgress ? stalled + 1 : 0;
    lowestNeed = std::min(lowestNeed, size.smallestNeed);
    if (stalled == kStalledDoublings)
      break;
  }

  // A smaller global batch on these GPUs: fewer micro-batches in flight in
  // a pipeline, or a degree the batch used to forbid.
  std::string smallerBatch;
  for (int64_t batch = ctx_.globalBatch / 2; batch >= 1; batch /= 2)
    if (probe(ctx_.config.gpus, batch).fits) {
      smallerBatch = llvm::formatv("--global-batch {0} fits on these {1} GPUs",
                                   batch, ctx_.config.gpus);
      break;
    }

  if (!moreGpus.empty() && !smallerBatch.empty())
    return moreGpus + ", and " + smallerBatch;
  if (!moreGpus.empty() || !smallerBatch.empty())
    return moreGpus + smallerBatch;
  std::string limit =
      stalled == kStalledDoublings
          ? llvm::formatv("more GPUs stop helping (the smallest need is "
                          "still {0:F1} GiB per GPU on {1} GPUs)",
                          lowestNeed / kGiB, tooFew)
                .str()
          : llvm::formatv("it does not fit on {0} GPUs either", tooFew).str();
  return limit + " and no smaller --global-batch fits; use a device with "
                 "more memory";
}

std::string Planner::hostShortfall(const Evaluation &e) const {
  if (e.hostFits)
    return "";
  if (ctx_.cluster.offloadSharesDeviceMemory())
    return llvm::formatv(", and its offloaded optimizer's {0:F1} GiB share "
                         "that memory (the cluster's host has none apart)",
                         e.hostNeed / kGiB);
  return llvm::formatv(", and its offloaded optimizer needs {0:F1} GiB of "
                       "host memory per GPU, the host has {1:F0} GiB",
                       e.hostNeed / kGiB, ctx_.cluster.hostMemoryBytes / kGiB);
}

llvm::Expected<Plan> Planner::result(bool suggest) {
  // Meshes and micro-batches exist, but --fix excludes every schedule or
  // ZeRO stage they could run.
  if (evaluated_ == 0 && hadCandidates_)
    return planError("--fix " + formatFixedChoices(ctx_.config.fixed) +
                     ": no configuration runs it: " +
                     space_.whyFixedChoicesExcludeAll(passedSchedule_));
  if (evaluated_ == 0)
    if (std::optional<std::string> why = space_.whyTensorGroupUnsearched())
      return planError(*why);
  if (evaluated_ == 0)
    return planError(llvm::formatv(
        "no configuration of {0} GPUs{1} divides --global-batch {2} into "
        "micro-batches: use a global batch that is a multiple of the "
        "data-parallel degree",
        ctx_.config.gpus,
        ctx_.config.fixed.empty()
            ? ""
            : " with --fix " + formatFixedChoices(ctx_.config.fixed),
        ctx_.globalBatch));
  if (!best_.haveBest()) {
    const Evaluation &smallest = best_.smallestMemory();
    const MemoryBreakdown &need = smallest.memory;
    std::string message = llvm::formatv(
        "no plan fits in memory: the smallest needs {0:F1} GiB per GPU "
        "({1}, stage {2}), the device has {3:F0} GiB{4}",
        need.total() / kGiB, smallest.config.str(), need.stage,
        ctx_.cluster.memoryBytes / kGiB, hostShortfall(smallest));
    if (suggest)
      message += ": " + suggestion();
    return planError(message);
  }
  best_.retimeFinalists(
      timeline_,
      static_cast<size_t>(std::max(ctx_.config.numAlternatives, 0)) + 1);
  Plan plan = assembler_.assemble(best_.best(), best_, evaluated_);
  // Every printer reads these numbers and the reader checks them: a plan
  // whose own numbers disagree is a planner bug, reported, never printed.
  if (std::optional<std::string> problem = inconsistency(plan))
    return planError("the plan for " + plan.config.str() +
                     " has inconsistent numbers (a planner bug): " + *problem);
  return plan;
}

namespace {
/// A search under a configuration of its own: the planner holds a
/// reference to it, so the two live together.
struct VariantSearch {
  VariantSearch(const ModelGraph &graph, const cost::Cluster &cluster,
                const TrainingConfig &config)
      : config(config), planner(graph, cluster, this->config) {}
  const TrainingConfig config;
  Planner planner;
};
} // namespace

/// The fastest plan of `variants` that fits, each searched in turn (those
/// the search space refuses skipped); null where none fits.
static std::unique_ptr<VariantSearch>
fastestOf(const ModelGraph &graph, const cost::Cluster &cluster,
          const std::vector<TrainingConfig> &variants) {
  std::unique_ptr<VariantSearch> best;
  for (const TrainingConfig &variant : variants) {
    auto search = std::make_unique<VariantSearch>(graph, cluster, variant);
    if (llvm::Error error = search->planner.validate()) {
      llvm::consumeError(std::move(error));
      continue;
    }
    search->planner.run();
    if (search->planner.fits() &&
        (!best || search->planner.bestStep() < best->planner.bestStep()))
      best = std::move(search);
  }
  return best;
}

/// Context parallelism, as offload, is tried only where nothing fits
/// without it (a long sequence's activations): each degree up to
/// kLargestContext that the search space takes is searched in turn, and
/// the fastest that fits wins. Not otherwise: contiguous chunks leave a
/// causal attention's work unbalanced over cp (causalImbalance), which
/// tensor and sequence parallelism do not.
static std::unique_ptr<VariantSearch>
searchContext(const ModelGraph &graph, const cost::Cluster &cluster,
              const TrainingConfig &config) {
  constexpr int kLargestContext = 16;
  std::vector<TrainingConfig> splits;
  for (int cp = 2; cp <= kLargestContext && cp <= config.gpus; cp *= 2) {
    splits.push_back(config);
    splits.back().fixed.cp = cp;
  }
  return fastestOf(graph, cluster, splits);
}

/// 2-D tensor parallelism (Optimus) is a layout for a tensor group: it is
/// searched on each square grid (q x q, as Xu et al. 2021 lay it out) that
/// the GPUs hold, up to the tensor groups the 1-D search tries
/// (SearchSpace::tpOptions), each a search of its own with tp = q fixed.
static std::unique_ptr<VariantSearch>
searchTensor2(const ModelGraph &graph, const cost::Cluster &cluster,
              const TrainingConfig &config) {
  std::vector<TrainingConfig> grids;
  for (int q = 2; q <= largestSearchedTp(cluster) && q * q <= config.gpus;
       ++q) {
    if (config.gpus % (q * q) != 0 ||
        (config.fixed.tp && *config.fixed.tp != q))
      continue;
    grids.push_back(config);
    grids.back().fixed.tp = q;
    grids.back().fixed.tp2 = q;
  }
  return fastestOf(graph, cluster, grids);
}

/// Whether the search compares 2-D grids with the 1-D plan: not where
/// --fix pins tp2, the whole mesh, or what 2-D tensor parallelism does
/// not run with (context parallelism, Megatron-LM; experts are refused by
/// the grid's own validation).
static bool triesTensor2(const TrainingConfig &config) {
  const FixedChoices &fixed = config.fixed;
  return !fixed.tp2 && !fixed.cp && !config.megatronOnly &&
         !(fixed.dp && fixed.tp && fixed.pp);
}

/// `with`'s plan, chosen where `without` (the search without its
/// technique) has none; `reason` says what `without` failed with.
static llvm::Expected<Plan>
chosenBecauseNoneWithout(Planner &with, Planner &without,
                         std::string Plan::*reason) {
  llvm::Expected<Plan> plan = with.result(/*suggest=*/true);
  llvm::Expected<Plan> failed = without.result(/*suggest=*/false);
  if (plan && !failed)
    (*plan).*reason =
        "chosen because, without it, " + llvm::toString(failed.takeError());
  else if (!failed)
    llvm::consumeError(failed.takeError());
  return plan;
}

/// The faster of the best 1-D plan and the best 2-D grid, saying why 2-D
/// won or lost (Plan::tensor2Reason).
static llvm::Expected<Plan> fasterOf(Planner &line, Planner &grid,
                                     const cost::Cluster &cluster) {
  if (!line.fits())
    return chosenBecauseNoneWithout(grid, line, &Plan::tensor2Reason);
  if (grid.bestStep() < line.bestStep()) {
    llvm::Expected<Plan> plan = grid.result(/*suggest=*/true);
    if (plan)
      plan->tensor2Reason =
          llvm::formatv("chosen: {0} a step against {1} for the best 1-D "
                        "plan ({2})",
                        formatSeconds(grid.bestStep()),
                        formatSeconds(line.bestStep()),
                        line.best().config.str())
              .str();
    return plan;
  }
  llvm::Expected<Plan> plan = line.result(/*suggest=*/true);
  if (plan)
    plan->tensor2Reason =
        llvm::formatv("not chosen: the best grid ({0}) is {1}",
                      grid.best().config.str(),
                      lossReason(grid.best(), line.best(), cluster))
            .str();
  return plan;
}

llvm::Expected<Plan> bm::plan::searchPlan(const ModelGraph &graph,
                                          const cost::Cluster &cluster,
                                          const TrainingConfig &config) {
  Planner planner(graph, cluster, config);
  if (llvm::Error error = planner.validate())
    return std::move(error);
  planner.run();
  if (planner.scoredAny() && !planner.fits() && !config.fixed.cp)
    if (std::unique_ptr<VariantSearch> split =
            searchContext(graph, cluster, config))
      return chosenBecauseNoneWithout(split->planner, planner,
                                      &Plan::contextReason);
  // Grids where the best 1-D plan has a tensor group, or where no 1-D plan
  // fits or none has the mesh --fix asks for (dp=1 with pp=1 leaves 1-D
  // only tp = GPUs, beyond the tensor groups it searches).
  if (triesTensor2(config) && (!planner.fits() || planner.best().config.tp > 1))
    if (std::unique_ptr<VariantSearch> grid =
            searchTensor2(graph, cluster, config))
      return fasterOf(planner, grid->planner, cluster);
  return planner.result(/*suggest=*/true);
}

llvm::Expected<Plan>
bm::plan::evaluateConfiguration(const ModelGraph &graph,
                                const cost::Cluster &cluster,
                                const TrainingConfig &config) {
  const FixedChoices &fixed = config.fixed;
  if (int{fixed.dp.has_value()} + fixed.tp.has_value() + fixed.pp.has_value() <
      2)
    return planError("--fix must give the mesh (dp, tp and pp, or two of "
                     "them) to evaluate a configuration");
  return searchPlan(graph, cluster, config);
}
