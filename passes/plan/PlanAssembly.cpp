//===- PlanAssembly.cpp - the Plan the user sees ---------------------------===//
//
// Turns the chosen evaluation into a Plan: stages, per-op shardings of each
// unique block, collectives of one step, throughput, and the runner-ups with
// the reason each lost.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanOutput.h"
#include "passes/plan/Planner.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;
using cost::CollectiveKind;
using cost::MeshPlacement;

static std::string percent(double fraction) {
  // Near-ties keep their digits: "0.012%", not "0.0%".
  return llvm::formatv(fraction < 0.001 ? "{0:F3}%" : "{0:F1}%", 100 * fraction)
      .str();
}

/// Why `alternative` lost against `best`.
static std::string lossReason(const Evaluation &alternative,
                              const Evaluation &best, double deviceMemory) {
  if (!alternative.fits)
    return llvm::formatv("out of memory by {0:F1} GiB on stage {1}",
                         (alternative.memory.total() - deviceMemory) / kGiB,
                         alternative.memory.stage)
        .str();
  std::pair<const char *, double> parts[] = {
      {"compute", alternative.time.compute - best.time.compute},
      {"NVLink communication", alternative.time.nvlink - best.time.nvlink},
      {"network communication", alternative.time.network - best.time.network},
      {"pipeline bubble", alternative.time.bubble - best.time.bubble},
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

Plan Planner::buildPlan(const Evaluation &chosen) {
  const ParallelConfig &config = chosen.config;
  const int tp = config.tp, mb = config.microBatch, m = config.numMicroBatches;
  const int ep = std::max(config.ep, 1);
  const MeshPlacement placement =
      cost::placeMesh(cluster_, config.dp, tp, config.pp, ep);
  Plan plan;
  plan.modelName = graph_.name;
  plan.clusterName = cluster_.name;
  plan.gpus = config_.gpus;
  plan.globalBatch = globalBatch_;
  plan.sequenceLength = analysis_.tokensPerSample();
  plan.precision = precision_;
  plan.optimizer = config_.optimizer;
  plan.config = config;
  plan.numLayers = graph_.numLayers();
  plan.numBlockClasses = numBlockClasses();
  plan.attentionsPerBlock = attentionsPerBlock();
  plan.numExperts = static_cast<int>(analysis_.numExperts());
  plan.routerTopK = analysis_.routerTopK();
  if (plan.numExperts > 0 && numBlockClasses() == 1)
    plan.expertLayersPerBlock =
        analysis_.expertLayers(segments_[firstLayerSegment_].ops);

  const PartitionEntry &entry =
      chosen.ownPartition
          ? *chosen.ownPartition
          : partition(config);
  for (const StageStats &stage : expandStages(entry.stages))
    plan.layersPerStage.push_back(static_cast<int>(stage.layers));

  const char *tpLink = cost::toString(model_.linkClass(placement.tp));
  // Segments in model order (interludes between the layers they separate),
  // each once.
  std::vector<int> order;
  std::vector<char> listed(segments_.size(), 0);
  for (auto [segment, count] : analysis_.sequence())
    if (!listed[segment]) {
      listed[segment] = 1;
      order.push_back(segment);
    }
  for (int s : order) {
    const SegmentSolution &sol = solution(s, tp, mb, config.streamDim);
    plan.blocks.push_back(describeSegment(analysis_, segments_[s], sol, ep));
    const int instances = segments_[s].numInstances;
    bool recomputes = segments_[s].kind == SegmentKind::Layer &&
                      config.recompute == Recompute::Full;
    for (const SegmentCollective &c : sol.collectives) {
      CollectiveSummary summary;
      summary.kind = cost::toString(c.kind);
      summary.axis = kTensorAxis;
      summary.link = tpLink;
      summary.phase = toString(c.phase);
      summary.where = graph_.ops[c.op].label;
      summary.bytes = c.bytes;
      summary.countPerStep =
          c.phase == Phase::Step ? instances : int64_t{instances} * m;
      summary.seconds = c.seconds * summary.countPerStep;
      plan.collectives.push_back(summary);
      if (recomputes && c.phase == Phase::Forward) {
        summary.phase = "recompute";
        plan.collectives.push_back(summary);
      }
    }
  }
  // Data-parallel synchronisation of the largest stage: dense parameters
  // over dp, expert parameters over the dp / ep replicas of each expert.
  const StageStats *largest = nullptr;
  for (const DeviceGroup &group : entry.devices)
    if (!largest || group.stats.params > largest->params)
      largest = &group.stats;
  auto syncCollectives = [&](double params, const char *what,
                             const char *axis, const cost::CommGroup &group) {
    if (group.size <= 1 || params <= 0)
      return;
    const char *link = cost::toString(model_.linkClass(group));
    for (const DataParallelCollective &c : dataParallelCollectives(config)) {
      double bytes =
          params * (c.gradients ? perParam_.grads : perParam_.params);
      plan.collectives.push_back(
          {cost::toString(c.kind), axis, link, c.phase,
           std::string(what) + (c.gradients ? "gradients" : "parameters"),
           bytes, c.perStep,
           c.perStep * model_.collectiveTime(c.kind, bytes, group)});
    }
  };
  if (largest) {
    syncCollectives(largest->params - largest->expertParams, "", kDataAxis,
                    placement.dp);
    syncCollectives(largest->expertParams / ep, "expert ", kDataAxis,
                    placement.expertDp);
    if (ep > 1 && largest->exchanges > 0) {
      // Dispatch and combine, forward, backward (and recomputed forward).
      int passes = parameterPasses(config.recompute);
      double bytes = largest->exchangeBytes / largest->exchanges;
      int64_t count = static_cast<int64_t>(passes * largest->exchanges) * m;
      plan.collectives.push_back(
          {cost::toString(CollectiveKind::AllToAll), kExpertAxis,
           cost::toString(model_.linkClass(placement.ep)), "forward+backward",
           "expert dispatch / combine (largest stage)", bytes, count,
           count * model_.collectiveTime(CollectiveKind::AllToAll, bytes,
                                         placement.ep)});
    }
  }
  if (config.pp > 1) {
    double bytes = boundaryBytes(tp, mb, config.streamDim) / tp;
    int64_t count = 2LL * m * config.chunks;
    CollectiveSummary summary{
        cost::toString(CollectiveKind::SendRecv),
        kPipelineAxis,
        placement.pipelineCrossesNodes ? "network" : "nvlink",
        "forward+backward",
        "stage boundary",
        bytes,
        count,
        count * model_.sendRecvTime(bytes, placement.pipelineCrossesNodes)};
    plan.collectives.push_back(summary);
    // Side inputs: to every stage holding layers that read them.
    std::vector<StageStats> stages = expandStages(entry.stages);
    int64_t receivers = 0;
    double side = 0;
    for (const StageStats &stage : stages)
      if (stage.receivesSideInputs()) {
        ++receivers;
        side = std::max(side, stage.sideInputBytes);
      }
    if (receivers > 0) {
      CollectiveSummary sideSummary = summary;
      sideSummary.where = "side inputs";
      sideSummary.bytes = side / tp;
      sideSummary.countPerStep = 2LL * m * receivers;
      sideSummary.seconds =
          sideSummary.countPerStep *
          model_.sendRecvTime(sideSummary.bytes, placement.pipelineCrossesNodes);
      plan.collectives.push_back(sideSummary);
    }
  }

  plan.time = chosen.time;
  plan.memory = chosen.memory;
  plan.deviceMemoryBytes = cluster_.memoryBytes;
  plan.stepSeconds = chosen.step;
  const double samples = static_cast<double>(globalBatch_);
  plan.modelFlopsPerStep = 3 * analysis_.forwardFlopsPerSample() * samples;
  double recomputeFlops = 0;
  if (config.recompute == Recompute::Full) {
    recomputeFlops = analysis_.layerFlopsPerSample() * samples;
  } else if (config.recompute == Recompute::Selective) {
    // The attention cores of every layer instance (each searched segment
    // stands for `count` of them); op FLOPs are per batch unit.
    const double units = static_cast<double>(graph_.unitsOf(globalBatch_));
    for (auto [segment, count] : analysis_.sequence())
      if (segments_[segment].kind == SegmentKind::Layer)
        for (int op : segments_[segment].ops)
          if (analysis_.inAttentionCore(op))
            recomputeFlops +=
                graph_.ops[op].flops * units * static_cast<double>(count);
  }
  const double gpuSeconds = chosen.step * config_.gpus;
  plan.mfu = plan.modelFlopsPerStep / (gpuSeconds * model_.peakFlops());
  plan.hardwareTflopsPerGpu =
      (plan.modelFlopsPerStep + recomputeFlops) / gpuSeconds / 1e12;
  plan.tokensPerSecond =
      samples * static_cast<double>(plan.sequenceLength) / chosen.step;
  plan.configurationsEvaluated = evaluated_;
  plan.blockSearches = static_cast<int64_t>(solutions_.size());

  // Runner-ups: the best plan of each other mesh, and the fastest plan that
  // did not fit when it would have been faster.
  std::vector<Evaluation> others;
  for (const auto &[mesh, e] : bestPerMesh_)
    if (!(e.config == config))
      others.push_back(e);
  std::sort(others.begin(), others.end(), better);
  if (others.size() > static_cast<size_t>(std::max(config_.numAlternatives, 0)))
    others.resize(std::max(config_.numAlternatives, 0));
  if (config_.numAlternatives > 0 && fastestOutOfMemory_.step < chosen.step)
    others.push_back(fastestOutOfMemory_);
  for (const Evaluation &e : others)
    plan.alternatives.push_back({e.config, e.step, e.memory.total(), e.fits,
                                 lossReason(e, chosen, cluster_.memoryBytes)});
  return plan;
}
