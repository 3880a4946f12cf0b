//===- Search.cpp - the planner's search ----------------------------------===//
//
// Enumerates the configurations --fix allows (meshes, micro-batches,
// recomputation, schedules, ZeRO stages) best-first by a lower bound on their
// step time, scores them (StepCost.cpp), keeps the best that fits, and turns
// user errors into one-line llvm::Errors.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/Search.h"

#include "passes/plan/PlanOutput.h"
#include "passes/plan/Planner.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <set>
#include <unordered_set>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;
using cost::CollectiveKind;

static llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Micro-batches beyond this bring no GEMM efficiency (M = mb x seq is
/// already in the thousands) and only cost memory.
static constexpr int kLargestMicroBatch = 32;

static std::vector<int> divisors(int64_t n, int64_t limit) {
  std::vector<int> result;
  for (int64_t d = 1; d <= n && d <= limit; ++d)
    if (n % d == 0)
      result.push_back(static_cast<int>(d));
  return result;
}

/// The chunks per device the search tries for the interleaved schedule
/// unless --fix gives v.
static constexpr int kInterleaveChunks[] = {2, 3, 4, 6, 8};

/// The chunks per device Megatron's interleaved schedule can use: the
/// layers must split evenly into pp x v chunks and the micro-batches into
/// groups of pp. `fixedChunks`, when set, is the only v tried. Ascending;
/// empty without a pipeline.
static std::vector<int> interleavedChunks(int layers, int pp,
                                          int64_t microBatches,
                                          std::optional<int> fixedChunks) {
  std::vector<int> chunks;
  if (pp <= 1 || microBatches % pp != 0)
    return chunks;
  std::vector<int> tried(std::begin(kInterleaveChunks),
                         std::end(kInterleaveChunks));
  if (fixedChunks)
    tried = {*fixedChunks};
  for (int v : tried)
    if (v > 1 && layers % (pp * v) == 0)
      chunks.push_back(v);
  return chunks;
}

llvm::Error Planner::validate() const {
  const int gpus = config_.gpus;
  const int perNode = cluster_.gpusPerNode;
  if (gpus <= 0)
    return planError("--gpus must be at least 1, got " + llvm::Twine(gpus));
  if (gpus > perNode && gpus % perNode != 0)
    return planError(llvm::formatv(
        "--gpus {0} cannot be laid out on {1} nodes of {2} GPUs: use a "
        "multiple of {2}, or at most {2}",
        gpus, cluster_.name, perNode));
  if (cluster_.maxNodes > 0 &&
      gpus > static_cast<int64_t>(cluster_.maxNodes) * perNode)
    return planError(llvm::formatv(
        "--gpus {0} exceeds cluster {1}: {2} nodes of {3} GPUs", gpus,
        cluster_.name, cluster_.maxNodes, perNode));
  if (precision_ == cost::Precision::Bf16Mixed && !cluster_.hasBf16())
    return planError(llvm::formatv(
        "--precision bf16: the {0} GPUs of cluster {1} have no bf16; use "
        "--precision fp16 (mixed, with loss scaling) or fp32",
        cluster_.gpuName, cluster_.name));
  if (config_.globalBatch < 0)
    return planError("--global-batch must be positive");
  const FixedChoices &fixed = config_.fixed;
  int64_t product = 1;
  std::string named;
  for (auto [key, value] : {std::pair{"dp", fixed.dp}, std::pair{"tp", fixed.tp},
                            std::pair{"pp", fixed.pp}})
    if (value) {
      product *= *value;
      named += (named.empty() ? "" : ",") + std::string(key) + "=" +
               std::to_string(*value);
    }
  if (fixed.dp && fixed.tp && fixed.pp && product != gpus)
    return planError(llvm::formatv("--fix {0} uses {1} GPUs, but --gpus is {2}",
                                    named, product, gpus));
  if (gpus % product != 0)
    return planError(llvm::formatv("--fix {0} does not divide --gpus {1}",
                                   named, gpus));
  int layers = std::max(graph_.numLayers(), 1);
  if (fixed.pp && *fixed.pp > layers)
    return planError(llvm::formatv(
        "--fix pp={0} exceeds the model's {1} layers", *fixed.pp, layers));
  std::optional<int> dp = fixed.dp;
  if (!dp && fixed.tp && fixed.pp)
    dp = gpus / (*fixed.tp * *fixed.pp);
  if (dp && globalBatch_ % *dp != 0)
    return planError(llvm::formatv(
        "--global-batch {0} is not divisible by dp={1}", globalBatch_, *dp));
  if (dp && fixed.microBatch && globalBatch_ % (*dp * *fixed.microBatch) != 0)
    return planError(llvm::formatv(
        "--global-batch {0} is not divisible by dp x mb = {1} x {2}",
        globalBatch_, *dp, *fixed.microBatch));
  if (globalBatch_ % graph_.batchGranularity != 0)
    return planError(llvm::formatv(
        "--global-batch {0} is not a multiple of {1}: the model groups tokens "
        "of {1} samples together (a step must hold whole groups)",
        globalBatch_, graph_.batchGranularity));
  if (fixed.microBatch && *fixed.microBatch % graph_.batchGranularity != 0)
    return planError(llvm::formatv(
        "--fix mb={0} is not a multiple of {1}: the model groups tokens of "
        "{1} samples together (its micro-batches must hold whole groups)",
        *fixed.microBatch, graph_.batchGranularity));
  if (fixed.recompute && *fixed.recompute != Recompute::None &&
      graph_.numLayers() == 0)
    return planError(llvm::formatv(
        "--fix recompute={0}: the model has no repeated layers, and "
        "recomputation works layer by layer (nothing would be recomputed); "
        "use recompute=none",
        toString(*fixed.recompute)));
  if (fixed.recompute == Recompute::Selective && !analysis_.hasAttentionCore())
    return planError("--fix recompute=selective: the model has no attention "
                     "(no softmax over a product of two activations), so "
                     "selective recomputation drops nothing; use "
                     "recompute=none or recompute=full");
  if (fixed.ep && *fixed.ep > 1 && !analysis_.hasExperts())
    return planError(llvm::formatv(
        "--fix ep={0} needs a mixture-of-experts model (no op of this one "
        "has an expert factor)",
        *fixed.ep));
  if (fixed.ep && analysis_.hasExperts() &&
      analysis_.numExperts() % *fixed.ep != 0)
    return planError(llvm::formatv(
        "--fix ep={0} does not divide the {1} experts", *fixed.ep,
        analysis_.numExperts()));
  if (fixed.schedule && *fixed.schedule == PipelineSchedule::Interleaved &&
      fixed.chunks && *fixed.chunks < 2)
    return planError("--fix schedule=interleaved needs v >= 2");
  if (config_.megatronOnly) {
    if (std::optional<MegatronMismatch> mismatch = megatronMismatch(
            fixed.zeroStage, fixed.schedule, fixed.stream, fixed.ep, fixed.tp))
      return planError("--export megatron: " + mismatch->reason + "; use " +
                       mismatch->fix);
    if (std::optional<std::string> why = megatronModelMismatch(
            graph_.numLayers(), numBlockClasses(), attentionsPerBlock()))
      return planError("--export megatron: " + *why);
    if (std::any_of(segments_.begin(), segments_.end(),
                    [](const Segment &segment) {
                      return segment.kind == SegmentKind::Interlude;
                    }))
      return planError("--export megatron: ops run between the model's "
                       "layers; Megatron-LM runs one unbroken stack of "
                       "transformer layers");
  }
  if (fixed.stream && *fixed.stream != StreamLayout::Replicated) {
    const std::string layout = formatStream(*fixed.stream, fixed.streamDim);
    std::vector<int> splitting;
    for (int tp : tpOptions())
      if (tp > 1)
        splitting.push_back(tp);
    if (splitting.empty())
      return planError(
          llvm::formatv("--fix stream={0} needs tp > 1", layout));
    if (std::all_of(splitting.begin(), splitting.end(),
                    [&](int tp) { return streamOptions(tp).empty(); }))
      return planError(llvm::formatv(
          "--fix stream={0}: the values between the model's blocks have no "
          "{1} dimension{2} that splits {3} ways",
          layout, toString(*fixed.stream),
          fixed.streamDim ? " " + std::to_string(*fixed.streamDim) : "",
          fixed.tp ? std::to_string(*fixed.tp)
                   : "2 to " + std::to_string(splitting.back())));
  }
  return llvm::Error::success();
}

int Planner::numBlockClasses() const {
  return static_cast<int>(
      std::set<int>(graph_.layerClass.begin(), graph_.layerClass.end()).size());
}

int Planner::attentionsPerBlock() const {
  if (numBlockClasses() != 1)
    return 0;
  return analysis_.countAttentions(segments_[firstLayerSegment_].ops);
}

std::vector<int> Planner::tpOptions() const {
  // Tensor groups larger than a node are searched too (the cost model prices
  // their network all-reduces), up to two nodes.
  const FixedChoices &fixed = config_.fixed;
  return fixed.tp ? std::vector<int>{*fixed.tp}
                  : divisors(config_.gpus,
                             std::max(2 * cluster_.gpusPerNode, 1));
}

void Planner::consider(const Evaluation &e) {
  if (smallestMemory_.step == kInfinity ||
      e.memory.total() < smallestMemory_.memory.total())
    smallestMemory_ = e;
  if (!e.fits) {
    if (better(e, fastestOutOfMemory_))
      fastestOutOfMemory_ = e;
    return;
  }
  auto mesh = std::make_tuple(e.config.dp, e.config.tp, e.config.pp,
                              e.config.streamDim);
  auto it = bestPerMesh_.find(mesh);
  if (it == bestPerMesh_.end() || better(e, it->second))
    bestPerMesh_[mesh] = e;
  if (!haveBest_ || better(e, best_)) {
    best_ = e;
    haveBest_ = true;
  }
}

void Planner::run() {
  const FixedChoices &fixed = config_.fixed;
  const int gpus = config_.gpus;
  const int layers = graph_.numLayers();

  // 1. Every (mesh, micro-batch, recomputation) with a lower bound on its
  // step time: no stage can be faster than an even share of the work.
  struct Combo {
    double lowerBound;
    int tp, pp, dp, ep, mb, m;
    StreamOption stream;
    Recompute recompute;
  };
  std::vector<Combo> combos;
  for (int tp : tpOptions()) {
    if (gpus % tp)
      continue;
    std::vector<StreamOption> streams = streamOptions(tp);
    std::vector<int> ppOptions =
        fixed.pp ? std::vector<int>{*fixed.pp}
                 : divisors(gpus / tp, std::max(layers, 1));
    for (int pp : ppOptions) {
      if ((gpus / tp) % pp)
        continue;
      const int dp = gpus / (tp * pp);
      if ((fixed.dp && *fixed.dp != dp) || globalBatch_ % dp)
        continue;
      const int64_t perReplica = globalBatch_ / dp;
      // Every ZeRO stage moves at least the stage's gradients and weights
      // once over dp (an all-reduce's worth), of which at most the
      // overlapped share hides behind the backward, and the slowest stage
      // holds at least an even share of the parameters.
      double shareOfParams =
          static_cast<double>(analysis_.numParameters()) / (tp * pp);
      double syncBytes = shareOfParams * perParam_.grads;
      double sync = model_.collectiveTime(
          CollectiveKind::AllReduce, syncBytes,
          cost::placeMesh(cluster_, dp, tp, pp).dp);
      // (Expert weights sync over fewer ranks: no bound with experts.)
      double syncLowerBound =
          analysis_.hasExperts()
              ? 0
              : sync - cost::hiddenGradientReduction(
                           sync, syncBytes, kInfinity,
                           cluster_.gradReduceOverlap);
      // Expert parallelism: a divisor of dp that divides the expert count.
      std::vector<int> epOptions;
      for (int ep : divisors(dp, dp))
        if ((fixed.ep ? ep == *fixed.ep : true) &&
            (ep == 1 || (analysis_.hasExperts() &&
                         analysis_.numExperts() % ep == 0)))
          epOptions.push_back(ep);
      std::vector<int> mbOptions =
          fixed.microBatch ? std::vector<int>{*fixed.microBatch}
                           : divisors(perReplica, kLargestMicroBatch);
      for (int mb : mbOptions) {
        if (perReplica % mb || mb % graph_.batchGranularity)
          continue;
        const int m = static_cast<int>(perReplica / mb);
        for (Recompute recompute :
             {Recompute::None, Recompute::Selective, Recompute::Full}) {
          if (fixed.recompute && *fixed.recompute != recompute)
            continue;
          // Recomputation works on layers, selective on their attention
          // cores: without them it is none under another name.
          if (recompute != Recompute::None &&
              (layers == 0 || (recompute == Recompute::Selective &&
                               !analysis_.hasAttentionCore())))
            continue;
          // Pipeline: m T + (sum of stage loads - T) / v is smallest for an
          // even split T = W / pp, with the most chunks allowed.
          std::vector<int> interleave = interleavedChunks(layers, pp, m, fixed.chunks);
          int chunks = interleave.empty() ? 1 : interleave.back();
          for (const StreamOption &stream : streams) {
            double work = workPerMicroBatch(tp, mb, stream.dim, recompute);
            double bound = m * work / pp + (work - work / pp) / chunks +
                           syncLowerBound;
            for (int ep : epOptions)
              if (!(config_.megatronOnly &&
                    megatronMismatch(std::nullopt, std::nullopt, stream.layout,
                                     ep, tp)))
                combos.push_back(
                    {bound, tp, pp, dp, ep, mb, m, stream, recompute});
          }
        }
      }
    }
  }
  // 2. Best first: once the bound exceeds the best plan by more than the
  // slack, nothing later can win (branch and bound, exact for the best
  // plan; runner-ups within the slack are exact too).
  hadCandidates_ = !combos.empty();
  std::stable_sort(combos.begin(), combos.end(),
                   [](const Combo &a, const Combo &b) {
                     return a.lowerBound < b.lowerBound;
                   });
  // Dominance: more recomputation and a higher ZeRO stage (from 1 on) only
  // add time, so once a variant fits, its heavier forms are skipped.
  std::unordered_set<uint64_t> fitting;
  // ZeRO-3 first: it needs the least memory, so when it does not fit, no
  // lower stage does either. Then 0, 1, 2; once a stage >= 1 fits, the
  // higher ones are only slower. (Under --export megatron, validate() has
  // refused GPipe, so only the ZeRO stage can be what Megatron lacks.)
  std::vector<int> zeroStages;
  for (int zero : {3, 0, 1, 2})
    if ((!fixed.zeroStage || *fixed.zeroStage == zero) &&
        !(config_.megatronOnly &&
          megatronMismatch(zero, std::nullopt, std::nullopt)))
      zeroStages.push_back(zero);
  for (const Combo &c : combos) {
    if (haveBest_ && c.lowerBound > best_.step * kAlternativeSlack)
      break;
    std::vector<std::pair<PipelineSchedule, int>> schedules;
    if (c.pp == 1) {
      schedules.push_back({PipelineSchedule::None, 1});
    } else {
      schedules.push_back({PipelineSchedule::OneFOneB, 1});
      // GPipe has 1F1B's bubble and holds more activations (Narayanan et
      // al. 2021, section 2.2.1): it never wins, so it is scored only when
      // asked for.
      if (fixed.schedule == PipelineSchedule::GPipe)
        schedules.push_back({PipelineSchedule::GPipe, 1});
      for (int v : interleavedChunks(layers, c.pp, c.m, fixed.chunks))
        schedules.push_back({PipelineSchedule::Interleaved, v});
    }
    for (auto [schedule, chunks] : schedules) {
      if (fixed.schedule && *fixed.schedule != schedule)
        continue;
      if (fixed.chunks && *fixed.chunks != chunks)
        continue;
      passedSchedule_ = true;
      bool lowerZeroFits = false, leanestFails = false;
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
        if (fitting.count(variant) || leanestFails ||
            (lowerZeroFits && zero == 2))
          continue;
        ParallelConfig config;
        config.dp = c.dp;
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
        Evaluation e = evaluate(config);
        if (e.fits)
          fitting.insert(variant);
        if (zero == 3 && !e.fits && !fixed.zeroStage)
          leanestFails = true;
        if (zero == 1 && e.fits)
          lowerZeroFits = true;
        consider(e);
      }
    }
  }
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
  if (config_.gpus <= 0)
    return "";
  auto probe = [&](int gpus, int64_t globalBatch) {
    TrainingConfig other = config_;
    other.gpus = gpus;
    other.globalBatch = globalBatch;
    if (gpus != config_.gpus)
      other.fixed.dp.reset(); // the data-parallel degree follows the size
    other.numAlternatives = 0;
    Planner planner(graph_, cluster_, other);
    SizeProbe result;
    if (llvm::Error invalid = planner.validate()) {
      llvm::consumeError(std::move(invalid)); // this size cannot be laid out
      return result;
    }
    planner.run();
    result.searched = planner.evaluated_ > 0;
    result.fits = planner.haveBest_;
    result.smallestNeed = planner.smallestMemory_.memory.total();
    return result;
  };

  // The fewest GPUs that fit, by doubling (rounded up to whole nodes). A
  // user-given global batch stays; the default one grows with the GPUs.
  const int perNode = cluster_.gpusPerNode;
  int mostGpus = kMostSuggestedGpus;
  if (cluster_.maxNodes > 0)
    mostGpus = std::min<int64_t>(
        mostGpus, static_cast<int64_t>(cluster_.maxNodes) * perNode);
  std::string moreGpus;
  double lowestNeed = smallestMemory_.memory.total();
  int tooFew = config_.gpus, stalled = 0;
  for (int gpus = config_.gpus * 2; gpus <= mostGpus; gpus *= 2) {
    if (gpus > perNode && gpus % perNode != 0)
      gpus = (gpus / perNode + 1) * perNode;
    SizeProbe size = probe(gpus, config_.globalBatch);
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
  for (int64_t batch = globalBatch_ / 2; batch >= 1; batch /= 2)
    if (probe(config_.gpus, batch).fits) {
      smallerBatch = llvm::formatv("--global-batch {0} fits on these {1} GPUs",
                                   batch, config_.gpus);
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

std::string Planner::whyFixedChoicesExcludeAll() const {
  const FixedChoices &fixed = config_.fixed;
  if (passedSchedule_) // then only the ZeRO stage can exclude them all
    return llvm::formatv("ZeRO stage {0} shards over data parallelism and "
                         "needs dp > 1",
                         fixed.zeroStage.value_or(1));
  if (fixed.schedule == PipelineSchedule::None)
    return llvm::formatv("without a pipeline, no data-parallel degree divides "
                         "--global-batch {0}",
                         globalBatch_);
  if (fixed.schedule == PipelineSchedule::Interleaved ||
      (fixed.chunks && *fixed.chunks > 1)) {
    std::vector<std::string> tried;
    for (int v : kInterleaveChunks)
      tried.push_back(std::to_string(v));
    std::string chunks = fixed.chunks
                             ? std::to_string(*fixed.chunks)
                             : llvm::join(llvm::drop_end(tried), ", ") +
                                   " or " + tried.back();
    return llvm::formatv("interleaving needs the model's {0} layers to split "
                         "into pp x v chunks (v = {1}) and the micro-batches "
                         "of a step to be a multiple of pp",
                         graph_.numLayers(), chunks);
  }
  return llvm::formatv("schedule={0} needs pp > 1, and the model's {1} layers "
                       "allow no pipeline here",
                       toString(*fixed.schedule), graph_.numLayers());
}

llvm::Expected<Plan> Planner::result(bool suggest) {
  // Meshes and micro-batches exist, but --fix excludes every schedule or
  // ZeRO stage they could run.
  if (evaluated_ == 0 && hadCandidates_)
    return planError("--fix " + formatFixedChoices(config_.fixed) +
                     ": no configuration runs it: " +
                     whyFixedChoicesExcludeAll());
  if (evaluated_ == 0)
    return planError(llvm::formatv(
        "no configuration of {0} GPUs{1} divides --global-batch {2} into "
        "micro-batches: use a global batch that is a multiple of the "
        "data-parallel degree",
        config_.gpus,
        config_.fixed.empty() ? ""
                              : " with --fix " +
                                    formatFixedChoices(config_.fixed),
        globalBatch_));
  if (!haveBest_) {
    const MemoryBreakdown &need = smallestMemory_.memory;
    std::string message = llvm::formatv(
        "no plan fits in memory: the smallest needs {0:F1} GiB per GPU "
        "({1}, stage {2}), the device has {3:F0} GiB",
        need.total() / kGiB, smallestMemory_.config.str(), need.stage,
        cluster_.memoryBytes / kGiB);
    if (suggest)
      message += ": " + suggestion();
    return planError(message);
  }
  retimeFinalists();
  Plan plan = buildPlan(best_);
  // Every printer reads these numbers and the reader checks them: a plan
  // whose own numbers disagree is a planner bug, reported, never printed.
  if (std::optional<std::string> problem = inconsistency(plan))
    return planError("the plan for " + plan.config.str() +
                     " has inconsistent numbers (a planner bug): " + *problem);
  return plan;
}

llvm::Expected<Plan> bm::plan::searchPlan(const ModelGraph &graph,
                                          const cost::Cluster &cluster,
                                          const TrainingConfig &config) {
  Planner planner(graph, cluster, config);
  if (llvm::Error error = planner.validate())
    return std::move(error);
  planner.run();
  return planner.result(/*suggest=*/true);
}

llvm::Expected<Plan> bm::plan::evaluateConfiguration(
    const ModelGraph &graph, const cost::Cluster &cluster,
    const TrainingConfig &config) {
  const FixedChoices &fixed = config.fixed;
  if (int{fixed.dp.has_value()} + fixed.tp.has_value() +
          fixed.pp.has_value() <
      2)
    return planError("--fix must give the mesh (dp, tp and pp, or two of "
                     "them) to evaluate a configuration");
  return searchPlan(graph, cluster, config);
}
