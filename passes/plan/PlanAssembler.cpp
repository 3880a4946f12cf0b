//===- PlanAssembler.cpp - the Plan the user sees
//--------------------------===//

#include "passes/plan/PlanAssembler.h"

#include "passes/plan/PlanOutput.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

static std::string percent(double fraction) {
  // Near-ties keep their digits: "0.012%", not "0.0%".
  return llvm::formatv(fraction < 0.001 ? "{0:F3}%" : "{0:F1}%", 100 * fraction)
      .str();
}

/// Why `alternative` does not fit on `cluster`: device memory, or the
/// host memory its offloaded optimizer needs.
static std::string memoryShortfall(const Evaluation &alternative,
                                   const cost::Cluster &cluster) {
  const MemoryBreakdown &memory = alternative.memory;
  if (memory.total() > cluster.memoryBytes || alternative.hostFits)
    return llvm::formatv("out of memory by {0:F1} GiB on stage {1}",
                         (memory.total() - cluster.memoryBytes) / kGiB,
                         memory.stage)
        .str();
  if (cluster.offloadSharesDeviceMemory())
    return llvm::formatv("out of memory by {0:F1} GiB on stage {1} with its "
                         "offloaded optimizer in the same memory (the "
                         "cluster's host has none apart)",
                         (memory.total() + memory.host - cluster.memoryBytes) /
                             kGiB,
                         memory.stage)
        .str();
  return llvm::formatv("out of host memory: its offloaded optimizer needs "
                       "{0:F1} GiB per GPU, the host has {1:F0} GiB",
                       alternative.hostNeed / kGiB,
                       cluster.hostMemoryBytes / kGiB)
      .str();
}

std::string bm::plan::detail::lossReason(const Evaluation &alternative,
                                         const Evaluation &best,
                                         const cost::Cluster &cluster) {
  if (!alternative.fits)
    return memoryShortfall(alternative, cluster);
  // The host's optimizer step is compute; offloading shows as one part.
  auto offload = [](const Evaluation &e) {
    return e.time.hostLink + e.hostStep;
  };
  std::pair<const char *, double> parts[] = {
      {"compute", (alternative.time.compute - alternative.hostStep) -
                      (best.time.compute - best.hostStep)},
      {"NVLink communication", alternative.time.nvlink - best.time.nvlink},
      {"network communication", alternative.time.network - best.time.network},
      {"pipeline bubble", alternative.time.bubble - best.time.bubble},
      {"the optimizer offload (host copies and step)",
       offload(alternative) - offload(best)},
  };
  // Equal times: the chosen plan won on memory (`better`), or, with that
  // equal too, by being scored first.
  if (sameStepTime(alternative.step, best.step)) {
    double more = alternative.memory.total() - best.memory.total();
    return more > 1 ? "as fast, but needs " + formatBytes(more) +
                          " more memory per GPU"
                    : std::string("as fast and as large: an equal choice");
  }
  auto largest = std::max_element(
      std::begin(parts), std::end(parts),
      [](const auto &a, const auto &b) { return a.second < b.second; });
  return llvm::formatv("slower by {0} because {1} takes {2} more",
                       percent(alternative.step / best.step - 1),
                       largest->first, formatSeconds(largest->second))
      .str();
}

Plan PlanAssembler::assemble(const Evaluation &searched, const BestPlans &best,
                             int64_t evaluated) {
  // Retimed with its simulated schedule by retimeFinalists already; this
  // only simulates what was not.
  const Evaluation chosen = timeline_.retime(searched);
  Plan plan;
  describeRequest(plan);
  plan.config = chosen.config;
  describeStep(plan, chosen);
  plan.time = chosen.time;
  plan.memory = chosen.memory;
  plan.deviceMemoryBytes = ctx_.cluster.memoryBytes;
  if (chosen.config.offload == Offload::Optimizer &&
      !ctx_.cluster.offloadSharesDeviceMemory())
    plan.hostMemoryBytes = ctx_.cluster.hostMemoryBytes;
  plan.stepSeconds = chosen.step;
  describeThroughput(plan, chosen);
  plan.configurationsEvaluated = evaluated;
  plan.blockSearches = static_cast<int64_t>(segments_.numSolved());
  describeAlternatives(plan, chosen, best);
  return plan;
}

void PlanAssembler::describeRequest(Plan &plan) const {
  const cost::Cluster &cluster = ctx_.cluster;
  const GraphAnalysis &analysis = ctx_.analysis;
  plan.modelName = ctx_.graph.name;
  plan.clusterName = cluster.name;
  plan.clusterCalibrated = cluster.calibration.present();
  plan.calibrationMachine = cluster.calibration.machine;
  plan.calibrationDate = cluster.calibration.date;
  plan.gradReduceOverlap = cluster.gradReduceOverlap;
  plan.gpus = ctx_.config.gpus;
  plan.globalBatch = ctx_.globalBatch;
  plan.sequenceLength = analysis.tokensPerSample();
  plan.symbolicDims = ctx_.graph.symbolicDims;
  plan.fusedAttention = ctx_.graph.fusedAttention;
  plan.precision = ctx_.precision;
  plan.optimizer = ctx_.config.optimizer;
  plan.numLayers = ctx_.graph.numLayers();
  plan.numBlockClasses = ctx_.numBlockClasses();
  plan.attentionsPerBlock = ctx_.attentionsPerBlock();
  plan.numExperts = static_cast<int>(analysis.numExperts());
  plan.routerTopK = analysis.routerTopK();
  if (plan.numExperts > 0 && plan.numBlockClasses == 1)
    plan.expertLayersPerBlock =
        analysis.expertLayers(ctx_.segments[ctx_.firstLayerSegment].ops);
}

void PlanAssembler::describeStep(Plan &plan, const Evaluation &chosen) {
  const ParallelConfig &config = chosen.config;
  const PartitionEntry &entry = partitions_.of(chosen);
  for (const StageStats &stage : expandStages(entry.stages))
    plan.layersPerStage.push_back(static_cast<int>(stage.layers));
  // Segments in model order (interludes between the layers they separate),
  // each once.
  std::vector<char> listed(ctx_.segments.size(), 0);
  for (auto [segment, count] : ctx_.analysis.sequence())
    if (!listed[segment]) {
      listed[segment] = 1;
      const SegmentSolution &sol = segments_.solution(
          segment, config.tp, config.microBatch, config.streamDim);
      plan.blocks.push_back(
          describeSegment(ctx_.analysis, ctx_.segments[segment], sol,
                          std::max(config.ep, 1), config.cp, config.tp2));
    }
  plan.items = itemiser_.itemise(chosen);
  plan.collectives = collectivesOf(plan.items);
  plan.criticalStage = entry.devices[chosen.critical].firstDevice;
  plan.tailStage = entry.devices[chosen.tail].firstDevice;
  for (const DeviceGroup &group : entry.devices)
    plan.stageMemory.push_back(coster_.deviceMemory(group, config, entry));
  plan.timeline = timeline_.timeline(chosen);
  if (chosen.config.pp > 1) {
    bmrt::ActionCosts costs = timeline_.scheduleCosts(chosen);
    plan.stageForward = costs.stageForward;
    plan.stageBackward = costs.stageBackward;
    plan.stageWeight = costs.stageBackwardWeight;
  }
}

void PlanAssembler::describeThroughput(Plan &plan,
                                       const Evaluation &chosen) const {
  const ParallelConfig &config = chosen.config;
  const GraphAnalysis &analysis = ctx_.analysis;
  const double samples = static_cast<double>(ctx_.globalBatch);
  plan.modelFlopsPerStep = 3 * analysis.forwardFlopsPerSample() * samples;
  double recomputeFlops = 0;
  if (config.recompute == Recompute::Full) {
    recomputeFlops = analysis.layerFlopsPerSample() * samples;
  } else if (config.recompute == Recompute::Selective) {
    // The attention cores of every layer instance (each searched segment
    // stands for `count` of them); op FLOPs are per batch unit.
    const double units =
        static_cast<double>(ctx_.graph.unitsOf(ctx_.globalBatch));
    for (auto [segment, count] : analysis.sequence())
      if (ctx_.segments[segment].kind == SegmentKind::Layer)
        for (int op : ctx_.segments[segment].ops)
          if (analysis.inAttentionCore(op))
            recomputeFlops +=
                ctx_.graph.ops[op].flops * units * static_cast<double>(count);
  }
  const double gpuSeconds = chosen.step * ctx_.config.gpus;
  plan.mfu = plan.modelFlopsPerStep / (gpuSeconds * ctx_.model.peakFlops());
  plan.hardwareTflopsPerGpu =
      (plan.modelFlopsPerStep + recomputeFlops) / gpuSeconds / 1e12;
  plan.tokensPerSecond =
      samples * static_cast<double>(plan.sequenceLength) / chosen.step;
  plan.tpComputeSplit = tpComputeSplit(config);
}

/// A micro-batch's compute (no communication) on one GPU over its compute
/// on each GPU of the tp group: how many ways tp divides the work. A model
/// too small to split (or whose ops the search left replicated over tp)
/// gives about 1, and the tp axis then repeats the work on every GPU of
/// the group: the step is no faster, and the plan says so.
double PlanAssembler::tpComputeSplit(const ParallelConfig &config) const {
  if (config.tp <= 1)
    return 1;
  auto compute = [&](int tp, int stream) {
    double seconds = 0;
    for (const ItemRun &run :
         segments_.itemRuns(tp, config.microBatch, stream, config.recompute))
      seconds += static_cast<double>(run.count) * run.each.compute;
    return seconds;
  };
  const double split = compute(config.tp, config.streamDim);
  return split > 0 ? compute(1, -1) / split : 1;
}

// The best plan of each other mesh, and the fastest plan that did not fit
// when it would have been faster.
void PlanAssembler::describeAlternatives(Plan &plan, const Evaluation &chosen,
                                         const BestPlans &best) const {
  const int alternatives = std::max(ctx_.config.numAlternatives, 0);
  std::vector<Evaluation> others =
      best.runnersUp(chosen.config, static_cast<size_t>(alternatives));
  if (alternatives > 0 && best.fastestOutOfMemory().step < chosen.step)
    others.push_back(best.fastestOutOfMemory());
  for (const Evaluation &e : others)
    plan.alternatives.push_back({e.config, e.step, e.memory.total(), e.fits,
                                 lossReason(e, chosen, ctx_.cluster), e.time});
}
