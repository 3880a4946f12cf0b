//===- StepCost.cpp - time and memory of one configuration ----------------===//
//
// Scores a configuration: per-op shardings of each segment (cached per tp
// degree and micro-batch), layers balanced over stages (cached), then the
// step time and the memory of every stage group with the cost model.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanOutput.h"
#include "passes/plan/Planner.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <unordered_set>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;
using cost::CollectiveKind;
using cost::CommGroup;
using cost::MeshPlacement;

const SegmentSolution &Planner::solution(int segment, int tp, int microBatch,
                                         int stream) {
  uint64_t key = packKey(
      {{segment, 28}, {tp, 16}, {microBatch, 16}, {stream + 1, 4}});
  auto it = solutions_.find(key);
  if (it != solutions_.end())
    return it->second;
  CommGroup group = cost::placeMesh(cluster_, 1, tp, 1).tp;
  // Every configuration with this tp and micro-batch runs at least
  // globalBatch x tp / (gpus x microBatch) micro-batches per step (dp is at
  // most gpus / tp): per-step collectives weigh at most one over that.
  double fewestMicroBatches =
      static_cast<double>(globalBatch_) * tp /
      (static_cast<double>(config_.gpus) * microBatch);
  double stepWeight = 1.0 / std::max(1.0, fewestMicroBatches);
  return solutions_
      .emplace(key,
               solveSegment(analysis_, segments_[segment], model_, group,
                            graph_.unitsOf(microBatch), stream, stepWeight))
      .first->second;
}

std::vector<Planner::StreamOption> Planner::streamOptions(int tp) const {
  std::vector<StreamOption> all = {{StreamLayout::Replicated, -1}};
  if (tp > 1 && firstLayerSegment_ >= 0) {
    const std::vector<int> &ops = segments_[firstLayerSegment_].ops;
    std::unordered_set<int> inside(ops.begin(), ops.end());
    for (int op : ops)
      for (int v : graph_.ops[op].operands) {
        const ValueInfo &value = graph_.values[v];
        if (value.kind != ValueKind::Activation || value.batchDim < 0 ||
            !analysis_.needsGradient(v) || inside.count(value.producer))
          continue;
        for (int d = 0; d < static_cast<int>(value.shape.size()); ++d) {
          bool known = std::any_of(all.begin(), all.end(),
                                   [&](const StreamOption &o) {
                                     return o.dim == d;
                                   });
          if (d != value.batchDim && value.shape[d] > 1 &&
              value.shape[d] % tp == 0 && !known)
            all.push_back({analysis_.isTokenDim(v, d) ? StreamLayout::Sequence
                                                      : StreamLayout::Hidden,
                           d});
        }
      }
  }
  std::sort(all.begin(), all.end(),
            [](const StreamOption &a, const StreamOption &b) {
              return a.dim < b.dim;
            });
  std::vector<StreamOption> allowed;
  for (const StreamOption &option : all)
    if ((!config_.fixed.stream || *config_.fixed.stream == option.layout) &&
        (!config_.fixed.streamDim || *config_.fixed.streamDim == option.dim) &&
        !(config_.megatronOnly &&
          megatronMismatch(std::nullopt, std::nullopt, option.layout)))
      allowed.push_back(option);
  return allowed;
}

void Planner::findSharedOwners() {
  for (int v : analysis_.sharedParameters()) {
    const int owner = analysis_.parameterOwner(v);
    std::pair<int, int> place = {-1, -1};
    for (size_t s = 0; s < segments_.size() && place.first < 0; ++s) {
      const std::vector<int> &ops = segments_[s].ops;
      auto it = std::find(ops.begin(), ops.end(), owner);
      if (it != ops.end())
        place = {static_cast<int>(s), static_cast<int>(it - ops.begin())};
    }
    sharedOwners_.push_back(place);
  }
}

std::vector<double> Planner::sharedParameterElements(int tp, int microBatch,
                                                     int stream) {
  llvm::ArrayRef<int> shared = analysis_.sharedParameters();
  std::vector<double> elements;
  for (size_t i = 0; i < shared.size(); ++i) {
    const int v = shared[i];
    double n = static_cast<double>(graph_.values[v].numElements());
    auto [segment, position] = sharedOwners_[i];
    if (segment >= 0) {
      const int factor =
          solution(segment, tp, microBatch, stream).tpFactor[position];
      const OpInfo &owner = graph_.ops[segments_[segment].ops[position]];
      const size_t operand = llvm::find(owner.operands, v) -
                             owner.operands.begin();
      if (factor >= 0 &&
          dimOfFactor(owner.rule.operandFactors[operand], factor) >= 0)
        n /= tp;
    }
    elements.push_back(n);
  }
  return elements;
}

StageStats Planner::itemStats(int segment, int tp, int microBatch, int stream,
                              Recompute recompute) {
  const SegmentSolution &s = solution(segment, tp, microBatch, stream);
  StageStats stats;
  stats.compute = s.forwardCompute + s.backwardCompute;
  stats.gemmCompute = 3 * s.gemmCompute;
  stats.attentionCompute = 3 * s.attentionCoreCompute;
  stats.forward = s.forwardCompute + s.forwardComm;
  stats.comm = s.forwardComm + s.backwardComm;
  stats.stepComm = s.stepComm;
  stats.params = s.paramsPerGpu;
  // A shared parameter counts on every device that holds it
  // (holdSharedParameters), not on its owner's segment alone.
  stats.shared = analysis_.sharedParametersRead(segment);
  std::vector<double> shared;
  for (size_t i = 0; i < sharedOwners_.size(); ++i)
    if (sharedOwners_[i].first == segment) {
      if (shared.empty())
        shared = sharedParameterElements(tp, microBatch, stream);
      stats.params -= shared[i];
    }
  stats.expertParams = s.expertParamsPerGpu;
  stats.exchangeBytes = s.expertExchangeBytes;
  stats.exchanges = s.expertExchanges;
  stats.stored = s.storedBytes;
  bool isLayer = segments_[segment].kind == SegmentKind::Layer;
  stats.layers = isLayer ? 1 : 0;
  if (isLayer)
    stats.sideInputBytes = sideInputBytes(segment, microBatch);
  stats.sideInputSource = makesSideInputs(segment) ? 1 : 0;
  // Full recomputation keeps a layer's input alone.
  if (stats.sideInputSource > 0 && (!isLayer || recompute != Recompute::Full))
    stats.madeSideBytes = madeSideInputBytes(segment, tp, microBatch, stream);
  if (!isLayer || recompute == Recompute::None)
    return stats;
  if (recompute == Recompute::Selective) {
    // Korthikanti et al. 2022, section 5: keep everything but the attention
    // core, recompute the core in backward.
    stats.stored = s.storedBytesSelective;
    stats.compute += s.attentionCoreCompute;
    stats.recomputeCompute = s.attentionCoreCompute;
    stats.comm += s.attentionCoreComm;
    stats.workingSet = s.storedBytes - s.storedBytesSelective;
    return stats;
  }
  // Full: keep each layer's input, rerun its forward before its backward
  // (Chen et al. 2016, "Training deep nets with sublinear memory cost").
  stats.stored = s.inputBytes;
  stats.compute += s.forwardCompute;
  stats.recomputeCompute = s.forwardCompute;
  stats.comm += s.forwardComm;
  stats.workingSet = s.storedBytes;
  return stats;
}

/// The devices of a pipeline without interleaving: stage k on device k.
static std::vector<DeviceGroup>
oneStagePerDevice(const std::vector<StageGroup> &stages) {
  std::vector<DeviceGroup> devices;
  int device = 0;
  for (const StageGroup &group : stages) {
    devices.push_back({device, group.numStages, group.stats.onDevice()});
    device += group.numStages;
  }
  return devices;
}

/// The devices of the interleaved schedule: device d runs virtual stages
/// d, d + pp, ..., one per chunk. Only where a group of identical virtual
/// stages starts can two neighbouring devices differ, so devices are summed
/// per run between those points (O(groups x chunks), not O(pp x chunks)),
/// and neighbours with the same load and memory are grouped.
static std::vector<DeviceGroup>
interleavedDevices(const std::vector<StageGroup> &stages, int pp, int chunks) {
  std::vector<int> groupStart; // first virtual stage of each group
  std::vector<int> cuts = {0, pp};
  int start = 0;
  for (const StageGroup &group : stages) {
    groupStart.push_back(start);
    cuts.push_back(start % pp);
    start += group.numStages;
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  auto groupOf = [&](int virtualStage) {
    return std::upper_bound(groupStart.begin(), groupStart.end(),
                            virtualStage) -
           groupStart.begin() - 1;
  };
  std::vector<DeviceGroup> devices;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int first = cuts[i], count = cuts[i + 1] - cuts[i];
    StageStats stats;
    for (int chunk = 0; chunk < chunks; ++chunk)
      stats += stages[groupOf(chunk * pp + first)].stats.onDevice();
    if (!devices.empty() && devices.back().stats == stats) {
      devices.back().numDevices += count;
      continue;
    }
    devices.push_back({first, count, stats});
  }
  return devices;
}

const PartitionEntry &Planner::partition(const ParallelConfig &config) {
  const int tp = config.tp, microBatch = config.microBatch;
  const int pp = config.pp, chunks = config.chunks;
  const int stream = config.streamDim;
  uint64_t key = packKey({{tp, 16},
                          {microBatch, 16},
                          {pp, 20},
                          {stream + 1, 4},
                          {chunks, 6},
                          {static_cast<int>(config.recompute), 2}});
  auto it = partitions_.find(key);
  if (it != partitions_.end())
    return it->second;
  std::vector<ItemRun> runs =
      itemRuns(tp, microBatch, stream, config.recompute);
  PartitionEntry entry;
  // Under --export megatron, only the layouts Megatron-LM can express.
  entry.stages = config_.megatronOnly
                     ? partitionStagesMegatron(runs, pp * chunks, chunks > 1)
                     : partitionStages(runs, pp * chunks);
  entry.boundaryBytes = boundaryBytes(tp, microBatch, stream);
  if (firstLayerSegment_ >= 0)
    entry.layerParams =
        solution(firstLayerSegment_, tp, microBatch, stream).paramsPerGpu;
  entry.devices = chunks == 1 ? oneStagePerDevice(entry.stages)
                              : interleavedDevices(entry.stages, pp, chunks);
  holdSharedParameters(entry, config);
  return partitions_.emplace(key, std::move(entry)).first->second;
}

/// The parameters a device holding the shared ones that `held` has counts
/// (once `entry` knows their holders).
static StageStats sharedCopies(const PartitionEntry &entry,
                               const StageStats &held) {
  StageStats copies;
  for (size_t i = 0; i < entry.sharedElements.size(); ++i) {
    if (!held.hasShared(i))
      continue;
    copies.params += entry.sharedElements[i];
    if (entry.sharedHolders[i] >= 2)
      copies.sharedParams += entry.sharedElements[i];
  }
  return copies;
}

// Megatron-LM keeps a copy where a stage reads it: the word embedding on
// the first and the last stage (megatron/core/models/common/
// language_module, setup_embeddings_and_output_layer). bm-split-stages
// gives every stage, and under an interleaved schedule every chunk, a copy
// of a parameter that several virtual stages read; the trainer keeps one
// buffer per rank (Parallel::sumOverStages).
void Planner::holdSharedParameters(PartitionEntry &entry,
                                   const ParallelConfig &config) {
  entry.sharedElements = sharedParameterElements(
      config.tp, config.microBatch, config.streamDim);
  const size_t n = entry.sharedElements.size();
  uint64_t everywhere = 0;
  for (size_t i = 0; i < n; ++i) {
    int readers = 0;
    for (const StageGroup &group : entry.stages)
      readers += group.stats.hasShared(i) ? group.numStages : 0;
    if (readers >= 2 && cluster_.runtime == cost::RuntimeModel::Bmrt)
      everywhere |= uint64_t(1) << i;
  }
  entry.sharedHolders.assign(n, 0);
  for (DeviceGroup &device : entry.devices) {
    device.stats.shared |= everywhere;
    for (size_t i = 0; i < n; ++i)
      entry.sharedHolders[i] +=
          device.stats.hasShared(i) ? device.numDevices : 0;
  }
  for (DeviceGroup &device : entry.devices)
    device.stats += sharedCopies(entry, device.stats);
}

double Planner::heldSharedBytes(const PartitionEntry &entry, int device,
                                const ParallelConfig &config) const {
  for (const DeviceGroup &group : entry.devices)
    if (device >= group.firstDevice &&
        device < group.firstDevice + group.numDevices) {
      StageStats held = sharedCopies(entry, group.stats);
      return modelState(held, config).total() +
             gradientOutputBytes(held, config);
    }
  return 0;
}

std::vector<ItemRun> Planner::itemRuns(int tp, int microBatch, int stream,
                                       Recompute recompute) {
  std::vector<ItemRun> runs;
  if (prologue_ >= 0)
    runs.push_back(
        {itemStats(prologue_, tp, microBatch, stream, recompute), 1});
  for (auto [segment, count] : layerRuns_)
    runs.push_back(
        {itemStats(segment, tp, microBatch, stream, recompute), count});
  if (epilogue_ >= 0)
    runs.push_back(
        {itemStats(epilogue_, tp, microBatch, stream, recompute), 1});
  return runs;
}

double Planner::workPerMicroBatch(int tp, int microBatch, int stream,
                                  Recompute recompute) {
  uint64_t key = packKey({{tp, 16},
                          {microBatch, 16},
                          {stream + 1, 4},
                          {static_cast<int>(recompute), 2}});
  auto it = work_.find(key);
  if (it != work_.end())
    return it->second;
  double total = 0;
  for (const ItemRun &run : itemRuns(tp, microBatch, stream, recompute))
    total += static_cast<double>(run.count) * run.each.time();
  return work_[key] = total;
}

bool Planner::makesSideInputs(int segment) {
  if (sideInputSources_.empty()) {
    std::unordered_set<int> producers;
    for (int cls : graph_.layerClass)
      for (int v : analysis_.sideInputs(cls))
        producers.insert(graph_.values[v].producer);
    sideInputSources_.assign(segments_.size(), 0);
    for (size_t s = 0; s < segments_.size(); ++s)
      for (int op : segments_[s].ops)
        sideInputSources_[s] |= producers.count(op) != 0;
  }
  return sideInputSources_[segment];
}

double Planner::sideInputValueBytes(int value, int microBatch) const {
  const ValueInfo &v = graph_.values[value];
  return static_cast<double>(v.numElements()) *
         (v.batchDim >= 0 ? graph_.unitsOf(microBatch) : 1) *
         model_.activationBytes();
}

double Planner::sideInputBytes(int segment, int microBatch) {
  double bytes = 0;
  for (int v : analysis_.sideInputs(segments_[segment].blockClass))
    bytes += sideInputValueBytes(v, microBatch);
  return bytes;
}

// As the segment's solution counts them: 1/tp where the producer's chosen
// factor splits the value. They are saved for their readers; a producer
// whose own backward read its result (a softmax) would keep it as well,
// but none makes a side input in the models at hand (T5: a scale).
double Planner::madeSideInputBytes(int segment, int tp, int microBatch,
                                   int stream) {
  const SegmentSolution &s = solution(segment, tp, microBatch, stream);
  const std::vector<int> &ops = segments_[segment].ops;
  std::unordered_set<int> counted;
  double bytes = 0;
  for (int cls : graph_.layerClass)
    for (int v : analysis_.sideInputs(cls)) {
      auto it = std::find(ops.begin(), ops.end(), graph_.values[v].producer);
      if (it == ops.end() || !analysis_.isMaterialized(v) ||
          !analysis_.isSavedForBackward(v) || !counted.insert(v).second)
        continue;
      const OpInfo &op = graph_.ops[*it];
      const size_t r = llvm::find(op.results, v) - op.results.begin();
      const int factor = s.tpFactor[it - ops.begin()];
      const bool split =
          factor >= 0 && dimOfFactor(op.rule.resultFactors[r], factor) >= 0;
      bytes += sideInputValueBytes(v, microBatch) / (split ? tp : 1);
    }
  return bytes;
}

double Planner::boundaryBytes(int tp, int microBatch, int stream) {
  if (firstLayerSegment_ < 0)
    return 0;
  return solution(firstLayerSegment_, tp, microBatch, stream).outputBytes;
}

Evaluation Planner::evaluate(const ParallelConfig &config) {
  ++evaluated_;
  const PartitionEntry &entry = partition(config);
  assert(!entry.devices.empty() &&
         "validate() admits only models the partitioner can split");
  Evaluation e = score(config, entry);
  if (e.fits || config.pp == 1 || config.chunks != 1)
    return e;
  // Rebalancing for memory only slows a configuration down: skip it when
  // even the time-balanced one cannot come near the best plan.
  if (haveBest_ && e.step > best_.step * kAlternativeSlack)
    return e;
  // The time-balanced stages do not fit: give the stages that hold more
  // micro-batches in flight fewer layers, if that fits.
  if (std::shared_ptr<const PartitionEntry> rebalanced =
          memoryBalancedPartition(config, entry)) {
    Evaluation balanced = score(config, *rebalanced);
    if (balanced.fits) {
      balanced.ownPartition = rebalanced;
      return balanced;
    }
  }
  return e;
}

// Dense parameters are replicated over dp (ZeRO shards them over dp);
// expert parameters are split over ep and replicated over the other dp / ep
// ranks (Rajbhandari et al. 2022, "DeepSpeed-MoE", section 5.1).
cost::ModelStateBytes Planner::modelState(const StageStats &stats,
                                          const ParallelConfig &config) const {
  const int ep = std::max(config.ep, 1);
  cost::ModelStateBytes dense = cost::modelStateMemory(
      stats.params - stats.expertParams, precision_, config_.optimizer,
      config.zeroStage, config.dp);
  cost::ModelStateBytes experts = cost::modelStateMemory(
      stats.expertParams / ep, precision_, config_.optimizer,
      config.zeroStage, std::max(config.dp / ep, 1));
  dense.params += experts.params;
  dense.grads += experts.grads;
  dense.optimizer += experts.optimizer;
  return dense;
}

std::vector<DataParallelCollective>
Planner::dataParallelCollectives(const ParallelConfig &config) const {
  const int64_t m = config.numMicroBatches;
  switch (config.zeroStage) {
  case 0:
    return {{CollectiveKind::AllReduce, "step", true, 0, 1}};
  case 1:
    // Megatron's distributed optimizer: reduce-scatter the accumulated
    // gradients, update a shard, all-gather the parameters (Megatron-LM
    // docs/distrib_optimizer.md). bmrt all-reduces the whole gradient
    // and updates its shard of it (runtime/trainer/Parallel.cpp).
    return {{cluster_.runtime == cost::RuntimeModel::Bmrt
                 ? CollectiveKind::AllReduce
                 : CollectiveKind::ReduceScatter,
             "step", true, 0, 1},
            {CollectiveKind::AllGather, "step", false, 0, 1}};
  case 2:
    // Partitioned gradients cannot accumulate whole: every micro-batch's
    // backward reduce-scatters them (Rajbhandari et al. 2020, section 5.2).
    return {{CollectiveKind::ReduceScatter, "backward", true, 0, m},
            {CollectiveKind::AllGather, "step", false, 0, 1}};
  default: {
    // ZeRO-3 gathers the parameters for every pass over every micro-batch
    // and reduce-scatters the gradients (Rajbhandari et al. 2020, section
    // 7.2.2): on each micro-batch's path.
    const int64_t passes = parameterPasses(config.recompute);
    return {{CollectiveKind::AllGather, "forward", false, passes, passes * m},
            {CollectiveKind::ReduceScatter, "backward", true, 1, m}};
  }
  }
}

double Planner::dataParallelTime(double params, const ParallelConfig &config,
                                 const CommGroup &group,
                                 bool perMicroBatch) const {
  double seconds = 0;
  for (const DataParallelCollective &c : dataParallelCollectives(config)) {
    if ((c.perMicroBatch > 0) != perMicroBatch)
      continue;
    double bytes = params * (c.gradients ? perParam_.grads : perParam_.params);
    seconds += static_cast<double>(perMicroBatch ? c.perMicroBatch : c.perStep) *
               model_.collectiveTime(c.kind, bytes, group);
  }
  return seconds;
}

std::shared_ptr<const PartitionEntry>
Planner::memoryBalancedPartition(const ParallelConfig &config,
                                 const PartitionEntry &entry) {
  const int pp = config.pp;
  std::vector<ItemRun> runs = itemRuns(config.tp, config.microBatch,
                                       config.streamDim, config.recompute);
  // Memory of a stage = fixed part + layers x per-layer part; the layer
  // part is that of the largest layer (exact for one block class).
  StageStats layer;
  for (const ItemRun &run : runs)
    if (run.each.layers > 0 && run.each.stored + run.each.params >
                                   layer.stored + layer.params)
      layer = run.each;
  if (layer.layers == 0)
    return nullptr;
  std::vector<int64_t> maxLayers(pp, 0);
  for (int stage = 0; stage < pp; ++stage) {
    double inFlight = cost::inFlightMicroBatches(
        config.schedule, pp, config.numMicroBatches, 1, stage);
    // deviceMemory's kinds, summed per item: the parts that grow with the
    // stage's contents, and the fixed ones (working set, buffers).
    auto itemBytes = [&](const StageStats &item) {
      return modelState(item, config).total() +
             gradientOutputBytes(item, config) +
             storedCopies(config, inFlight) * item.stored;
    };
    // The shared parameters as the time-balanced stages hold them.
    double fixed = cluster_.reservedMemoryBytes + 2 * entry.boundaryBytes +
                   layer.workingSet + heldSharedBytes(entry, stage, config);
    if (config.zeroStage >= 3)
      fixed += gatheredParameterBytes(config, entry.layerParams);
    auto addItem = [&](const StageStats &item) {
      fixed += itemBytes(item) + item.workingSet;
    };
    if (stage == 0 && prologue_ >= 0)
      addItem(runs.front().each);
    if (stage == pp - 1 && epilogue_ >= 0)
      addItem(runs.back().each);
    double perLayer = itemBytes(layer);
    double room = cluster_.memoryBytes - fixed;
    maxLayers[stage] =
        room <= 0 ? 0 : static_cast<int64_t>(std::floor(room / perLayer));
  }
  std::vector<StageGroup> stages =
      config_.megatronOnly
          ? partitionStagesMegatron(runs, pp, /*evenOnly=*/false, maxLayers)
          : partitionStagesWithLimits(runs, maxLayers);
  if (stages.empty())
    return nullptr;
  auto rebalanced = std::make_shared<PartitionEntry>();
  rebalanced->boundaryBytes = entry.boundaryBytes;
  rebalanced->layerParams = entry.layerParams;
  rebalanced->devices = oneStagePerDevice(stages);
  rebalanced->stages = std::move(stages);
  holdSharedParameters(*rebalanced, config);
  return rebalanced;
}

DeviceExtras Planner::deviceExtras(const StageStats &stats,
                                   const ParallelConfig &config,
                                   const MeshPlacement &placement,
                                   double boundary, int chunks) const {
  const int tp = config.tp, pp = config.pp;
  const int ep = std::max(config.ep, 1);
  const bool pipelineOnNetwork = placement.pipelineCrossesNodes;
  DeviceExtras c;
  // Point-to-point per micro-batch: activations forward, gradients back,
  // once per chunk. Megatron sends 1/tp of the boundary and all-gathers it
  // over NVLink (Narayanan et al. 2021, section 4.1, scatter/gather).
  if (pp > 1) {
    c.p2pLink =
        2.0 * chunks * model_.sendRecvTime(boundary / tp, pipelineOnNetwork);
    // A split stream is already in slices: nothing to gather.
    if (tp > 1 && config.streamDim < 0)
      c.p2pGather = 2.0 * chunks *
                    model_.collectiveTime(CollectiveKind::AllGather, boundary,
                                          placement.tp);
  }
  if (config.zeroStage >= 3) {
    c.zero3 = dataParallelTime(stats.params - stats.expertParams, config,
                               placement.dp, /*perMicroBatch=*/true);
    c.zero3Experts = dataParallelTime(stats.expertParams / ep, config,
                                      placement.expertDp,
                                      /*perMicroBatch=*/true);
  }
  if (ep > 1 && stats.exchanges > 0)
    // Dispatch and combine: one all-to-all each way per pass (GShard,
    // Lepikhin et al. 2021, section 2.2).
    c.exchange = parameterPasses(config.recompute) * stats.exchanges *
                 model_.collectiveTime(CollectiveKind::AllToAll,
                                       stats.exchangeBytes / stats.exchanges,
                                       placement.ep);
  const double receivers = stats.sideInputReceivers;
  if (pp > 1 && receivers > 0) {
    // Side inputs (the encoder output for every decoder stage) come once
    // per micro-batch into each receiving chunk and their gradients go
    // back, like a boundary: 1/tp each, gathered over tp unless the stream
    // is split anyway.
    const double each = stats.receivedSideBytes / receivers;
    c.sideLink =
        2.0 * receivers * model_.sendRecvTime(each / tp, pipelineOnNetwork);
    if (tp > 1 && config.streamDim < 0)
      c.sideGather =
          2.0 * receivers *
          model_.collectiveTime(CollectiveKind::AllGather, each, placement.tp);
  }
  return c;
}

double Planner::stepGradientReductionTime(double params,
                                          const ParallelConfig &config,
                                          const CommGroup &group) const {
  double seconds = 0;
  for (const DataParallelCollective &c : dataParallelCollectives(config))
    if (c.gradients && c.perMicroBatch == 0)
      seconds += c.perStep * model_.collectiveTime(
                                 c.kind, params * perParam_.grads, group);
  return seconds;
}

// bmrt reduces the gradients of parameters the stages share once the
// pipeline has drained, outside its buckets (Parallel::singleReduction);
// Megatron-LM's buckets hold the word embedding's too.
double Planner::overlappableParams(const StageStats &stats) const {
  const double dense = stats.params - stats.expertParams;
  return cluster_.runtime == cost::RuntimeModel::Bmrt
             ? dense - stats.sharedParams
             : dense;
}

// The trainer starts each bucket's reduction during the last micro-batch's
// backward (ZeRO 2: during each micro-batch's, which each reduce-scatter
// their gradients), once its gradients are final; the part that runs behind
// those backwards is hidden (cost::hiddenGradientReduction), shared between
// the dense and the expert gradients by their reduction times.
void Planner::hideGradientReductions(StepTail &t, const StageStats &stats,
                                     const ParallelConfig &config,
                                     const MeshPlacement &placement) const {
  const int ep = std::max(config.ep, 1);
  const double denseParams = overlappableParams(stats);
  const double expertParams = stats.expertParams / ep;
  double dense = config.dp > 1 ? stepGradientReductionTime(denseParams, config,
                                                           placement.dp)
                               : 0;
  double experts = expertParams > 0 && placement.expertDp.size > 1
                       ? stepGradientReductionTime(expertParams, config,
                                                   placement.expertDp)
                       : 0;
  const double backwards = config.zeroStage >= 2 ? config.numMicroBatches : 1;
  double hidden =
      backwards * cost::hiddenGradientReduction(
                      (dense + experts) / backwards,
                      (denseParams + expertParams) * perParam_.grads,
                      stats.time() - stats.forward, cluster_.gradReduceOverlap);
  if (hidden <= 0)
    return;
  t.dpHidden = hidden * dense / (dense + experts);
  t.expertHidden = hidden - t.dpHidden;
  t.dpSync -= t.dpHidden;
  t.expertSync -= t.expertHidden;
}

// Once the pipeline has drained, the trainer sums each shared parameter's
// gradient over pp (Parallel::sumOverStages): under ZeRO 2 and 3 the dp
// shard reduceGradient left, else the whole tensor after the dp
// reduction. Megatron-LM all-reduces the word embedding's over its
// embedding group, the first and the last stage
// (megatron/core/distributed/finalize_model_grads.py,
// _allreduce_word_embedding_grads).
std::vector<SharedGradientSum>
Planner::sharedGradientSums(const StageStats &stats,
                            const ParallelConfig &config,
                            const MeshPlacement &placement,
                            const PartitionEntry &entry) const {
  std::vector<SharedGradientSum> sums;
  for (size_t i = 0; i < entry.sharedHolders.size(); ++i) {
    const int holders = entry.sharedHolders[i];
    if (!stats.hasShared(i) || holders < 2)
      continue;
    SharedGradientSum sum;
    sum.bytes = entry.sharedElements[i] * perParam_.grads /
                (config.zeroStage >= 2 ? config.dp : 1);
    // The holders among the stages: every one (bmrt), or the first and
    // the last, on two nodes where the pipeline spans several.
    sum.group = placement.pp;
    sum.group.size = holders;
    sum.group.ranksPerNode = std::min(sum.group.ranksPerNode, holders);
    sum.seconds =
        model_.collectiveTime(CollectiveKind::AllReduce, sum.bytes, sum.group);
    sums.push_back(sum);
  }
  return sums;
}

StepTail Planner::stepTail(const StageStats &stats,
                           const ParallelConfig &config,
                           const MeshPlacement &placement,
                           const PartitionEntry &entry) const {
  const int dp = config.dp, ep = std::max(config.ep, 1);
  const double denseParams = stats.params - stats.expertParams;
  const double expertParams = stats.expertParams / ep;
  StepTail t;
  t.dpSync = dataParallelTime(denseParams, config, placement.dp,
                              /*perMicroBatch=*/false);
  t.expertSync = expertParams > 0
                     ? dataParallelTime(expertParams, config,
                                        placement.expertDp,
                                        /*perMicroBatch=*/false)
                     : 0;
  hideGradientReductions(t, stats, config, placement);
  t.stepComm = stats.stepComm;
  for (const SharedGradientSum &sum :
       sharedGradientSums(stats, config, placement, entry))
    t.sharedSync += sum.seconds;
  double updated = config.zeroStage >= 1
                       ? denseParams / dp + expertParams / std::max(dp / ep, 1)
                       : denseParams + expertParams;
  t.optimizer = model_.memoryTime(
      updated *
          cost::optimizerStepBytesPerParam(precision_, config_.optimizer),
      cost::MemoryKernelClass::Optimizer);
  return t;
}

Evaluation Planner::score(const ParallelConfig &config,
                          const PartitionEntry &entry) {
  const int dp = config.dp, tp = config.tp, pp = config.pp;
  const int m = config.numMicroBatches, v = config.chunks;
  const int ep = std::max(config.ep, 1);
  const MeshPlacement placement = cost::placeMesh(cluster_, dp, tp, pp, ep);
  const bool pipelineOnNetwork = placement.pipelineCrossesNodes;

  Evaluation e;
  e.config = config;
  // The critical device: the slowest per micro-batch. The step ends with
  // the longest gradient synchronisation and optimizer step of any device.
  double slowest = -1, sumLoads = 0, longestTail = -1;
  DeviceExtras extras;
  StepTail tail;
  for (size_t g = 0; g < entry.devices.size(); ++g) {
    const DeviceGroup &group = entry.devices[g];
    DeviceExtras c =
        deviceExtras(group.stats, config, placement, entry.boundaryBytes, v);
    double load = group.stats.time() + c.total();
    sumLoads += load * group.numDevices;
    if (load > slowest) {
      slowest = load;
      e.critical = static_cast<int>(g);
      extras = c;
    }
    StepTail t = stepTail(group.stats, config, placement, entry);
    if (t.total() > longestTail) {
      longestTail = t.total();
      e.tail = static_cast<int>(g);
      tail = t;
    }
  }
  e.slowest = slowest;
  // Pipeline: m micro-batches at the slowest stage's pace plus the fill and
  // drain of the others, divided by v for the interleaved schedule; for
  // balanced stages this is (p-1)/(v m) of the ideal time (see
  // cost::pipelineBubbleFraction). The finalists are timed again by
  // simulating their schedule (retime).
  double bubble = pp > 1 ? (sumLoads - slowest) / v : 0;
  e.step = m * slowest + bubble + tail.total();

  const StageStats &critical = entry.devices[e.critical].stats;
  auto addComm = [&](double seconds, bool network) {
    (network ? e.time.network : e.time.nvlink) += seconds;
  };
  e.time.compute = m * critical.compute + tail.optimizer;
  addComm(m * critical.comm + tail.stepComm, placement.tp.crossesNodes);
  addComm(tail.sharedSync, placement.pp.crossesNodes);
  addComm(m * extras.p2pLink, pipelineOnNetwork);
  addComm(m * extras.p2pGather, placement.tp.crossesNodes);
  addComm(tail.dpSync + m * extras.zero3, placement.dp.crossesNodes);
  addComm(tail.expertSync + m * extras.zero3Experts,
          placement.expertDp.crossesNodes);
  addComm(m * extras.exchange, placement.ep.crossesNodes);
  addComm(m * extras.sideLink, pipelineOnNetwork);
  addComm(m * extras.sideGather, placement.tp.crossesNodes);
  e.time.bubble = bubble;

  // Memory: the worst device.
  double worst = -1;
  for (const DeviceGroup &group : entry.devices) {
    MemoryBreakdown mem = deviceMemory(group, config, entry);
    if (mem.total() > worst) {
      worst = mem.total();
      e.memory = mem;
    }
  }
  e.fits = e.memory.total() <= cluster_.memoryBytes;
  return e;
}

// Within a group the first device holds the most micro-batches in flight.
// The trainer gathers a ZeRO-3 parameter over dp just around the
// instructions that read it, one tensor at a time: the largest one's bytes.
double Planner::gatheredParameterBytes(const ParallelConfig &config,
                                       double layerParams) const {
  // DeepSpeed's ZeRO-3 prefetches: one layer's parameters, twice.
  if (cluster_.runtime != cost::RuntimeModel::Bmrt)
    return 2 * layerParams * perParam_.params;
  return largestLocalParameter(config) * perParam_.params;
}

// Elements of the largest parameter on one device. Large weights are the
// ones tensor parallelism splits (Megatron's pattern); the search's
// per-op choice is not at hand here, so an even split over tp is assumed.
double Planner::largestLocalParameter(const ParallelConfig &config) const {
  return static_cast<double>(analysis_.largestParameter()) / config.tp;
}

// Where bmrt overlaps its data-parallel reductions with the backward (the
// cluster hides some of them), it reduces flat copies of the gradients,
// bucket by bucket, kept for the run: the gradients once, or under ZeRO 2
// and 3 laid out in dp + 1 blocks of the shards (GradientBuckets.cpp).
double Planner::bucketBytes(const StageStats &stats,
                            const ParallelConfig &config) const {
  if (cluster_.gradReduceOverlap <= 0 || config.dp <= 1)
    return 0;
  const int ep = std::max(config.ep, 1);
  double params = overlappableParams(stats) + stats.expertParams / ep;
  double bytes = params * model_.activationBytes();
  return config.zeroStage >= 2 ? bytes * (config.dp + 1) / config.dp : bytes;
}

// bmrt runs every micro-batch of a pipeline stage in one arena (its saved
// values and working set) and copies what the backward reads out of it for
// each micro-batch in flight; without a pipeline the arena is all.
// Megatron-LM keeps each micro-batch's saved tensors alone.
double Planner::storedCopies(const ParallelConfig &config,
                             double inFlight) const {
  if (cluster_.runtime != cost::RuntimeModel::Bmrt)
    return inFlight;
  return config.pp > 1 ? inFlight + 1 : 1;
}

// The step program writes each gradient whole (after tp) in the compute
// precision. The sums the optimizer reads are kept beside those outputs when
// several micro-batches accumulate, and under ZeRO 2 and 3, where only this
// rank's shard of the sum is kept (modelState counts the sums).
double Planner::gradientOutputBytes(const StageStats &stats,
                                    const ParallelConfig &config) const {
  // Megatron-LM accumulates into its gradient buffer in place
  // (gradient_accumulation_fusion).
  if (cluster_.runtime != cost::RuntimeModel::Bmrt)
    return 0;
  const int ep = std::max(config.ep, 1);
  const double act = model_.activationBytes();
  double params = stats.params - stats.expertParams + stats.expertParams / ep;
  // Every chunk of this rank writes its own gradient of a parameter the
  // stages share, and they add into its one sum.
  const double shared = stats.sharedParams * act;
  double outputs = params * act + (config.chunks - 1) * shared;
  // ZeRO 2 and 3 reduce each later micro-batch's shard into a temporary
  // before adding it: one shard of the largest parameter.
  if (config.zeroStage >= 2)
    return outputs + (config.numMicroBatches > 1
                          ? largestLocalParameter(config) / config.dp *
                                perParam_.grads
                          : 0);
  if (config.numMicroBatches > 1)
    return outputs;
  // One micro-batch and whole gradients: the outputs are the sums, unless
  // they are kept in another precision (fp32 sums of 16-bit outputs) or
  // several chunks add theirs into one.
  if (perParam_.grads != act)
    return outputs;
  return config.chunks > 1 ? config.chunks * shared : 0;
}

MemoryBreakdown Planner::deviceMemory(const DeviceGroup &group,
                                      const ParallelConfig &config,
                                      const PartitionEntry &entry) const {
  // Each kind as the runtime allocates and (bmrt) reports it (DESIGN.md
  // section 5: peak memory split as the planner predicts it): bmrt counts
  // gathered parameters as parameters and transfer buffers as activations.
  const bool bmrt = cluster_.runtime == cost::RuntimeModel::Bmrt;
  MemoryBreakdown mem;
  mem.stage = group.firstDevice;
  mem.buffers = cluster_.reservedMemoryBytes;
  cost::ModelStateBytes state = modelState(group.stats, config);
  mem.params = state.params;
  mem.grads = state.grads + gradientOutputBytes(group.stats, config);
  mem.optimizer = state.optimizer;
  if (config.zeroStage >= 3)
    (bmrt ? mem.params : mem.buffers) +=
        gatheredParameterBytes(config, entry.layerParams);
  double inFlight =
      cost::inFlightMicroBatches(config.schedule, config.pp,
                                 config.numMicroBatches, config.chunks,
                                 group.firstDevice);
  // The activations and gradients that cross stages wait in buffers of
  // their own, sent and received. A received side input is kept like a
  // saved value: the trainer stashes it for each micro-batch in flight
  // (the backward reads it), beside the slot it arrives in.
  mem.activations = storedCopies(config, inFlight) *
                        (group.stats.stored + group.stats.receivedSideBytes) +
                    group.stats.workingSet;
  if (config.pp > 1)
    (bmrt ? mem.activations : mem.buffers) += 2 * entry.boundaryBytes;
  if (bmrt)
    mem.buffers += bucketBytes(group.stats, config);
  return mem;
}
