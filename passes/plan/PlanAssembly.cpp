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

Plan Planner::buildPlan(const Evaluation &searched) {
  // Retimed with its simulated schedule by retimeFinalists already; this
  // only simulates what was not.
  const Evaluation chosen = retime(searched);
  const ParallelConfig &config = chosen.config;
  const int tp = config.tp, mb = config.microBatch;
  const int ep = std::max(config.ep, 1);
  Plan plan;
  plan.modelName = graph_.name;
  plan.clusterName = cluster_.name;
  plan.clusterCalibrated = cluster_.calibration.present();
  plan.calibrationMachine = cluster_.calibration.machine;
  plan.calibrationDate = cluster_.calibration.date;
  plan.gradReduceOverlap = cluster_.gradReduceOverlap;
  plan.gpus = config_.gpus;
  plan.globalBatch = globalBatch_;
  plan.sequenceLength = analysis_.tokensPerSample();
  plan.symbolicDims = graph_.symbolicDims;
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

  const PartitionEntry &entry = partitionOf(chosen);
  for (const StageStats &stage : expandStages(entry.stages))
    plan.layersPerStage.push_back(static_cast<int>(stage.layers));

  // Segments in model order (interludes between the layers they separate),
  // each once.
  std::vector<char> listed(segments_.size(), 0);
  for (auto [segment, count] : analysis_.sequence())
    if (!listed[segment]) {
      listed[segment] = 1;
      const SegmentSolution &sol =
          solution(segment, tp, mb, config.streamDim);
      plan.blocks.push_back(
          describeSegment(analysis_, segments_[segment], sol, ep));
    }
  plan.items = itemise(chosen);
  plan.collectives = collectivesOf(plan.items);
  plan.criticalStage = entry.devices[chosen.critical].firstDevice;
  plan.tailStage = entry.devices[chosen.tail].firstDevice;
  for (const DeviceGroup &group : entry.devices)
    plan.stageMemory.push_back(deviceMemory(group, config, entry));
  plan.timeline = timeline(chosen);

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
                                 lossReason(e, chosen, cluster_.memoryBytes),
                                 e.time});
  return plan;
}

std::vector<TimelineBar> Planner::timeline(const Evaluation &chosen) {
  auto [bars, pipelineEnd] = simulated_[chosen.config.str()];
  if (bars.empty())
    return bars;
  // Once the pipeline has drained, each rank synchronises its stage's
  // gradients and steps its optimizer (the step's tail, StepTail).
  const ParallelConfig &config = chosen.config;
  const PartitionEntry &entry = partitionOf(chosen);
  const MeshPlacement placement = cost::placeMesh(
      cluster_, config.dp, config.tp, config.pp, std::max(config.ep, 1));
  for (const DeviceGroup &group : entry.devices) {
    StepTail tail = stepTail(group.stats, config, placement, entry);
    for (int rank = group.firstDevice;
         rank < group.firstDevice + group.numDevices; ++rank) {
      double sync = tail.total() - tail.optimizer;
      TimelineBar bar;
      bar.rank = rank;
      bar.kind = TimelineBar::Kind::Sync;
      bar.start = pipelineEnd;
      bar.end = pipelineEnd + sync;
      bars.push_back(bar);
      bar.kind = TimelineBar::Kind::Optimizer;
      bar.start = bar.end;
      bar.end = bar.start + tail.optimizer;
      bars.push_back(bar);
    }
  }
  return bars;
}
