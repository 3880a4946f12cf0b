//===- PlanContext.cpp - what every part of the planner reads ------------===//

#include "passes/plan/PlanContext.h"

#include <algorithm>
#include <set>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

PlanContext::PlanContext(const ModelGraph &graph, const cost::Cluster &cluster,
                         const TrainingConfig &config)
    : graph(graph), cluster(cluster), config(config),
      precision(config.precision.value_or(cost::defaultPrecision(cluster))),
      analysis(graph, config.fold, cluster.runtime), model(cluster, precision),
      perParam(cost::modelStateBytesPerParam(precision, config.optimizer)),
      offloadPerParam(cost::offloadBytesPerParam(precision, config.optimizer,
                                                 cluster.runtime)),
      segments(analysis.segments()), cp(config.fixed.cp.value_or(1)),
      tp2(config.fixed.tp2.value_or(1)) {
  const int64_t unit = graph.batchGranularity;
  globalBatch = config.globalBatch > 0
                    ? config.globalBatch
                    : (std::max(config.gpus, 1) + unit - 1) / unit * unit;
  cpMirrored = cp > 1 && config.fixed.cpMirrored.value_or(true) && mirrorable();
  for (auto [segment, count] : analysis.sequence()) {
    SegmentKind kind = segments[segment].kind;
    if (kind == SegmentKind::Layer || kind == SegmentKind::Interlude)
      layerRuns.push_back({segment, count});
  }
  for (size_t s = 0; s < segments.size(); ++s) {
    if (segments[s].kind == SegmentKind::Prologue)
      prologue = static_cast<int>(s);
    if (segments[s].kind == SegmentKind::Epilogue)
      epilogue = static_cast<int>(s);
    if (segments[s].kind == SegmentKind::Layer && firstLayerSegment < 0)
      firstLayerSegment = static_cast<int>(s);
  }
}

int PlanContext::numBlockClasses() const {
  return static_cast<int>(
      std::set<int>(graph.layerClass.begin(), graph.layerClass.end()).size());
}

int PlanContext::attentionsPerBlock() const {
  if (numBlockClasses() != 1)
    return 0;
  return analysis.countAttentions(segments[firstLayerSegment].ops);
}

std::vector<std::pair<int, int64_t>> PlanContext::partitionedSequence() const {
  std::vector<std::pair<int, int64_t>> sequence;
  if (prologue >= 0)
    sequence.push_back({prologue, 1});
  sequence.insert(sequence.end(), layerRuns.begin(), layerRuns.end());
  if (epilogue >= 0)
    sequence.push_back({epilogue, 1});
  return sequence;
}
