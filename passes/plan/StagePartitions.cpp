//===- StagePartitions.cpp - a configuration's pipeline stages -----------===//

#include "passes/plan/StagePartitions.h"

#include <algorithm>
#include <cmath>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

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
/// Under the V layout (zb-v, dualpipe-v) device d runs stages d and
/// 2 pp - 1 - d instead: a group starting at stage s >= pp changes the
/// devices at 2 pp - s.
static std::vector<DeviceGroup>
interleavedDevices(const std::vector<StageGroup> &stages, int pp, int chunks,
                   bmrt::StageLayout layout) {
  std::vector<int> groupStart; // first virtual stage of each group
  std::vector<int> cuts = {0, pp};
  int start = 0;
  for (const StageGroup &group : stages) {
    groupStart.push_back(start);
    bool mirrored = layout == bmrt::StageLayout::V && start >= pp;
    cuts.push_back(mirrored ? (2 * pp - start) % pp : start % pp);
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
      stats += stages[groupOf(bmrt::virtualStageOf(layout, pp, first, chunk))]
                   .stats.onDevice();
    if (!devices.empty() && devices.back().stats == stats) {
      devices.back().numDevices += count;
      continue;
    }
    devices.push_back({first, count, stats});
  }
  return devices;
}

const PartitionEntry &StagePartitions::partition(const ParallelConfig &config) {
  const int tp = config.tp, microBatch = config.microBatch;
  const int pp = config.pp, chunks = config.chunks;
  const int stream = config.streamDim;
  const bmrt::StageLayout layout = bmrt::layoutOf(config.schedule);
  uint64_t key = packKey({{tp, 16},
                          {microBatch, 16},
                          {pp, 19},
                          {stream + 1, 4},
                          {chunks, 6},
                          {static_cast<int>(layout), 1},
                          {static_cast<int>(config.recompute), 2}});
  auto it = partitions_.find(key);
  if (it != partitions_.end())
    return it->second;
  std::vector<ItemRun> runs =
      segments_.itemRuns(tp, microBatch, stream, config.recompute);
  PartitionEntry entry;
  // Under --export megatron, only the layouts Megatron-LM can express.
  entry.stages = ctx_.config.megatronOnly
                     ? partitionStagesMegatron(runs, pp * chunks, chunks > 1)
                     : partitionStages(runs, pp * chunks);
  entry.boundaryBytes = segments_.boundaryBytes(tp, microBatch, stream);
  if (ctx_.firstLayerSegment >= 0)
    entry.layerParams =
        segments_.solution(ctx_.firstLayerSegment, tp, microBatch, stream)
            .paramsPerGpu;
  entry.devices = chunks == 1
                      ? oneStagePerDevice(entry.stages)
                      : interleavedDevices(entry.stages, pp, chunks, layout);
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
void StagePartitions::holdSharedParameters(PartitionEntry &entry,
                                           const ParallelConfig &config) {
  entry.sharedElements = segments_.sharedParameterElements(
      config.tp, config.microBatch, config.streamDim);
  const size_t n = entry.sharedElements.size();
  uint64_t everywhere = 0;
  for (size_t i = 0; i < n; ++i) {
    int readers = 0;
    for (const StageGroup &group : entry.stages)
      readers += group.stats.hasShared(i) ? group.numStages : 0;
    if (readers >= 2 && ctx_.cluster.runtime == cost::RuntimeModel::Bmrt)
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

double StagePartitions::heldSharedBytes(const PartitionEntry &entry, int device,
                                        const ParallelConfig &config) const {
  for (const DeviceGroup &group : entry.devices)
    if (device >= group.firstDevice &&
        device < group.firstDevice + group.numDevices) {
      StageStats held = sharedCopies(entry, group.stats);
      return coster_.modelState(held, config).total() +
             coster_.gradientOutputBytes(held, config);
    }
  return 0;
}

std::shared_ptr<const PartitionEntry>
StagePartitions::memoryBalanced(const ParallelConfig &config,
                                const PartitionEntry &entry) {
  const int pp = config.pp;
  std::vector<ItemRun> runs = segments_.itemRuns(
      config.tp, config.microBatch, config.streamDim, config.recompute);
  // Memory of a stage = fixed part + layers x per-layer part; the layer
  // part is that of the largest layer (exact for one block class).
  StageStats layer;
  for (const ItemRun &run : runs)
    if (run.each.layers > 0 &&
        run.each.stored + run.each.params > layer.stored + layer.params)
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
      return coster_.modelState(item, config).total() +
             coster_.gradientOutputBytes(item, config) +
             coster_.storedCopies(config, inFlight) * item.stored;
    };
    // The shared parameters as the time-balanced stages hold them.
    double fixed = ctx_.cluster.reservedMemoryBytes + 2 * entry.boundaryBytes +
                   layer.workingSet + heldSharedBytes(entry, stage, config);
    if (config.zeroStage >= 3)
      fixed += coster_.gatheredParameterBytes(config, entry.layerParams);
    auto addItem = [&](const StageStats &item) {
      fixed += itemBytes(item) + item.workingSet;
    };
    if (stage == 0 && ctx_.prologue >= 0)
      addItem(runs.front().each);
    if (stage == pp - 1 && ctx_.epilogue >= 0)
      addItem(runs.back().each);
    double perLayer = itemBytes(layer);
    double room = ctx_.cluster.memoryBytes - fixed;
    maxLayers[stage] =
        room <= 0 ? 0 : static_cast<int64_t>(std::floor(room / perLayer));
  }
  std::vector<StageGroup> stages =
      ctx_.config.megatronOnly
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

std::vector<std::vector<std::pair<int, int64_t>>>
StagePartitions::contents(const PartitionEntry &entry,
                          const ParallelConfig &config) {
  // The model in order, as the partitioner saw it.
  const std::vector<std::pair<int, int64_t>> sequence =
      ctx_.partitionedSequence();
  // The partition keeps only each stage's sums: replay the sequence, each
  // stage taking layers up to its layer count and the items without layers
  // (prologue, interludes, epilogue) while they fit in its time.
  std::vector<std::vector<std::pair<int, int64_t>>> contents;
  size_t next = 0;
  int64_t left = sequence.empty() ? 0 : sequence[0].second;
  for (const StageStats &stage : expandStages(entry.stages)) {
    std::vector<std::pair<int, int64_t>> held;
    int64_t layers = 0;
    double time = 0;
    const double limit = stage.time() * (1 + 1e-9);
    while (next < sequence.size()) {
      const int segment = sequence[next].first;
      StageStats item =
          segments_.itemStats(segment, config.tp, config.microBatch,
                              config.streamDim, config.recompute);
      int64_t take = 0;
      if (item.layers > 0)
        take = std::min(left, (stage.layers - layers) / item.layers);
      else if (time + item.time() <= limit)
        take = left;
      if (take == 0)
        break;
      held.push_back({segment, take});
      layers += take * item.layers;
      time += take * item.time();
      left -= take;
      if (left == 0 && ++next < sequence.size())
        left = sequence[next].second;
    }
    contents.push_back(std::move(held));
  }
  return contents;
}

const PartitionEntry &StagePartitions::of(const Evaluation &e) {
  return e.ownPartition ? *e.ownPartition : partition(e.config);
}
