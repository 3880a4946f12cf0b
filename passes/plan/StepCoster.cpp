//===- StepCoster.cpp - time and memory of one configuration -------------===//

#include "passes/plan/StepCoster.h"

#include <algorithm>
#include <cmath>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;
using cost::CollectiveKind;
using cost::CommGroup;
using cost::MeshPlacement;

MeshPlacement StepCoster::meshOf(const ParallelConfig &config) const {
  return cost::placeMesh(ctx_.cluster, config.dp, config.tp, config.pp,
                         std::max(config.ep, 1), config.cp, config.tp2);
}

// ZeRO 0 and 1 reduce the gradients over every replica, dp x cp (bmrt
// all-reduces over both axes at once; ZeRO 1's parameter all-gather, over
// dp alone, is priced there too); ZeRO 2 and 3 reduce-scatter and gather
// over dp alone, after an all-reduce over cp (deviceExtras).
const CommGroup &
StepCoster::dataParallelGroup(const ParallelConfig &config,
                              const MeshPlacement &placement) const {
  return config.zeroStage >= 2 ? placement.dpShards : placement.dp;
}

// Dense parameters are replicated over dp (ZeRO shards them over dp);
// expert parameters are split over ep and replicated over the other dp / ep
// ranks (Rajbhandari et al. 2022, "DeepSpeed-MoE", section 5.1).
cost::ModelStateBytes
StepCoster::modelState(const StageStats &stats,
                       const ParallelConfig &config) const {
  const int ep = std::max(config.ep, 1);
  cost::ModelStateBytes dense = cost::modelStateMemory(
      stats.params - stats.expertParams, ctx_.precision, ctx_.config.optimizer,
      config.zeroStage, config.dp);
  cost::ModelStateBytes experts = cost::modelStateMemory(
      stats.expertParams / ep, ctx_.precision, ctx_.config.optimizer,
      config.zeroStage, std::max(config.dp / ep, 1));
  dense.params += experts.params;
  dense.grads += experts.grads;
  dense.optimizer += experts.optimizer;
  // Offloaded, the optimizer state lives in host memory (hostBytes).
  if (config.offload == Offload::Optimizer)
    dense.optimizer = 0;
  return dense;
}

// Each rank steps its ZeRO shard of the dense and the expert parameters
// (ZeRO >= 1), else every parameter it holds.
double StepCoster::updatedParams(const StageStats &stats,
                                 const ParallelConfig &config) const {
  const int dp = config.dp, ep = std::max(config.ep, 1);
  const double denseParams = stats.params - stats.expertParams;
  const double expertParams = stats.expertParams / ep;
  return config.zeroStage >= 1
             ? denseParams / dp + expertParams / std::max(dp / ep, 1)
             : denseParams + expertParams;
}

double StepCoster::hostBytes(const StageStats &stats,
                             const ParallelConfig &config) const {
  if (config.offload != Offload::Optimizer)
    return 0;
  return updatedParams(stats, config) * ctx_.offloadPerParam.held;
}

// A cluster without a host link (a CPU's "device" is host memory, or the
// link is unknown) offloads only where --fix asks: the copies run at the
// device's own copy rate (read and written), the host step at its
// optimizer kernels' rate, and the offloaded state shares the device's
// memory (hostFits), as it does on a cluster whose host has no memory
// apart from the device's (host_memory_gib 0).
double StepCoster::hostCopyTime(double bytes) const {
  if (ctx_.cluster.canOffload())
    return bytes / ctx_.cluster.hostLinkBandwidth;
  return ctx_.model.memoryTime(2 * bytes,
                               cost::MemoryKernelClass::DataMovement);
}

double StepCoster::hostOptimizerTime(double bytes) const {
  if (ctx_.cluster.canOffload())
    return bytes / ctx_.cluster.hostOptimizerBandwidth;
  return ctx_.model.memoryTime(bytes, cost::MemoryKernelClass::Optimizer);
}

double StepCoster::offloadedStep(const Evaluation &e,
                                 const PartitionEntry &entry) const {
  const DeviceGroup &tail = entry.devices[e.tail];
  const MeshPlacement placement = meshOf(e.config);
  ParallelConfig offloaded = e.config;
  offloaded.offload = Offload::Optimizer;
  return e.step - stepTail(tail.stats, e.config, placement, entry).total() +
         stepTail(tail.stats, offloaded, placement, entry).total();
}

// bmrt's worker takes the ranges in the order the next forward first reads
// them, copying each down, stepping it and copying it up; each first reader
// waits for its own range (runtime/trainer/OptimizerOffload.h). With the
// device's parameters outside its layers (the embedding) taken as read first
// and its forward spread evenly over its L layers, the forward waits for the
// longer of the work before its first layer can run (those parameters and one
// layer's) and the worker's lag at its last layer: W - F (L - 1) / L.
double StepCoster::offloadExposed(double seconds, const StageStats &stats,
                                  const PartitionEntry &entry) const {
  if (seconds <= 0 || stats.layers <= 0 || stats.params <= 0)
    return seconds;
  const double layers = static_cast<double>(stats.layers);
  const double first = std::clamp(
      (stats.params - (layers - 1) * entry.layerParams) / stats.params, 0.0,
      1.0);
  const double lag = seconds - stats.forward * (layers - 1) / layers;
  return std::clamp(std::max(seconds * first, lag), 0.0, seconds);
}

bool StepCoster::hostFits(const MemoryBreakdown &mem) const {
  if (mem.host <= 0)
    return true;
  if (ctx_.cluster.offloadSharesDeviceMemory())
    return mem.total() + mem.host <= ctx_.cluster.memoryBytes;
  return mem.host <= ctx_.cluster.hostMemoryBytes;
}

std::vector<DataParallelCollective>
StepCoster::dataParallelCollectives(const ParallelConfig &config) const {
  const int64_t m = config.numMicroBatches;
  switch (config.zeroStage) {
  case 0:
    return {{CollectiveKind::AllReduce, "step", true, 0, 1}};
  case 1:
    // Megatron's distributed optimizer: reduce-scatter the accumulated
    // gradients, update a shard, all-gather the parameters (Megatron-LM
    // docs/distrib_optimizer.md). bmrt all-reduces the whole gradient
    // and updates its shard of it (runtime/trainer/Parallel.cpp).
    return {{ctx_.bmrt() ? CollectiveKind::AllReduce
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

double StepCoster::dataParallelTime(double params, const ParallelConfig &config,
                                    const CommGroup &group,
                                    bool perMicroBatch) const {
  double seconds = 0;
  for (const DataParallelCollective &c : dataParallelCollectives(config)) {
    if ((c.perMicroBatch > 0) != perMicroBatch)
      continue;
    double bytes =
        params * (c.gradients ? ctx_.perParam.grads : ctx_.perParam.params);
    seconds +=
        static_cast<double>(perMicroBatch ? c.perMicroBatch : c.perStep) *
        ctx_.model.collectiveTime(c.kind, bytes, group);
  }
  return seconds;
}
DeviceExtras StepCoster::deviceExtras(const StageStats &stats,
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
    c.p2pLink = 2.0 * chunks *
                ctx_.model.sendRecvTime(boundary / tp, pipelineOnNetwork);
    // A split stream is already in slices: nothing to gather.
    if (tp > 1 && config.streamDim < 0)
      c.p2pGather = 2.0 * chunks *
                    ctx_.model.collectiveTime(CollectiveKind::AllGather,
                                              boundary, placement.tp);
  }
  // bmrt's reduceGradient under ZeRO 2 and 3: the whole gradient of each
  // micro-batch's backward all-reduced over cp, then reduce-scattered
  // over dp.
  if (config.zeroStage >= 2 && config.cp > 1)
    c.contextGradients = ctx_.model.collectiveTime(
        CollectiveKind::AllReduce,
        (stats.params - stats.expertParams) * ctx_.perParam.grads,
        placement.cp);
  if (config.zeroStage >= 3) {
    c.zero3 = dataParallelTime(stats.params - stats.expertParams, config,
                               dataParallelGroup(config, placement),
                               /*perMicroBatch=*/true);
    c.zero3Experts =
        dataParallelTime(stats.expertParams / ep, config, placement.expertDp,
                         /*perMicroBatch=*/true);
  }
  if (ep > 1 && stats.exchanges > 0)
    // Dispatch and combine: one all-to-all each way per pass (GShard,
    // Lepikhin et al. 2021, section 2.2).
    c.exchange = parameterPasses(config.recompute) * stats.exchanges *
                 ctx_.model.collectiveTime(
                     CollectiveKind::AllToAll,
                     stats.exchangeBytes / stats.exchanges, placement.ep);
  const double receivers = stats.sideInputReceivers;
  if (pp > 1 && receivers > 0) {
    // Side inputs (the encoder output for every decoder stage) come once
    // per micro-batch into each receiving chunk and their gradients go
    // back, like a boundary: 1/tp each, gathered over tp unless the stream
    // is split anyway.
    const double each = stats.receivedSideBytes / receivers;
    c.sideLink =
        2.0 * receivers * ctx_.model.sendRecvTime(each / tp, pipelineOnNetwork);
    if (tp > 1 && config.streamDim < 0)
      c.sideGather = 2.0 * receivers *
                     ctx_.model.collectiveTime(CollectiveKind::AllGather, each,
                                               placement.tp);
  }
  return c;
}

double StepCoster::stepGradientReductionTime(double params,
                                             const ParallelConfig &config,
                                             const CommGroup &group) const {
  double seconds = 0;
  for (const DataParallelCollective &c : dataParallelCollectives(config))
    if (c.gradients && c.perMicroBatch == 0)
      seconds += c.perStep * ctx_.model.collectiveTime(
                                 c.kind, params * ctx_.perParam.grads, group);
  return seconds;
}

// bmrt reduces the gradients of parameters the stages share once the
// pipeline has drained, outside its buckets (Parallel::singleReduction);
// Megatron-LM's buckets hold the word embedding's too.
double StepCoster::overlappableParams(const StageStats &stats) const {
  const double dense = stats.params - stats.expertParams;
  return ctx_.bmrt() ? dense - stats.sharedParams : dense;
}

// The trainer starts each bucket's reduction during the last micro-batch's
// backward (ZeRO 2: during each micro-batch's, which each reduce-scatter
// their gradients), once its gradients are final; the part that runs behind
// those backwards is hidden (cost::hiddenGradientReduction), shared between
// the dense and the expert gradients by their reduction times.
void StepCoster::hideGradientReductions(StepTail &t, const StageStats &stats,
                                        const ParallelConfig &config,
                                        const MeshPlacement &placement) const {
  const int ep = std::max(config.ep, 1);
  const double denseParams = overlappableParams(stats);
  const double expertParams = stats.expertParams / ep;
  double dense =
      config.dp > 1
          ? stepGradientReductionTime(denseParams, config,
                                      dataParallelGroup(config, placement))
          : 0;
  double experts =
      expertParams > 0 && placement.expertDp.size > 1
          ? stepGradientReductionTime(expertParams, config, placement.expertDp)
          : 0;
  const double backwards = config.zeroStage >= 2 ? config.numMicroBatches : 1;
  double hidden =
      backwards * cost::hiddenGradientReduction((dense + experts) / backwards,
                                                (denseParams + expertParams) *
                                                    ctx_.perParam.grads,
                                                stats.time() - stats.forward,
                                                ctx_.cluster.gradReduceOverlap);
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
std::vector<SharedGradientSum> StepCoster::sharedGradientSums(
    const StageStats &stats, const ParallelConfig &config,
    const MeshPlacement &placement, const PartitionEntry &entry) const {
  std::vector<SharedGradientSum> sums;
  for (size_t i = 0; i < entry.sharedHolders.size(); ++i) {
    const int holders = entry.sharedHolders[i];
    if (!stats.hasShared(i) || holders < 2)
      continue;
    SharedGradientSum sum;
    sum.bytes = entry.sharedElements[i] * ctx_.perParam.grads /
                (config.zeroStage >= 2 ? config.dp : 1);
    // The holders among the stages: every one (bmrt), or the first and
    // the last, on two nodes where the pipeline spans several.
    sum.group = placement.pp;
    sum.group.size = holders;
    sum.group.ranksPerNode = std::min(sum.group.ranksPerNode, holders);
    sum.seconds = ctx_.model.collectiveTime(CollectiveKind::AllReduce,
                                            sum.bytes, sum.group);
    sums.push_back(sum);
  }
  return sums;
}

StepTail StepCoster::stepTail(const StageStats &stats,
                              const ParallelConfig &config,
                              const MeshPlacement &placement,
                              const PartitionEntry &entry) const {
  const int ep = std::max(config.ep, 1);
  const double denseParams = stats.params - stats.expertParams;
  const double expertParams = stats.expertParams / ep;
  StepTail t;
  t.dpSync = dataParallelTime(denseParams, config,
                              dataParallelGroup(config, placement),
                              /*perMicroBatch=*/false);
  t.expertSync = expertParams > 0 ? dataParallelTime(expertParams, config,
                                                     placement.expertDp,
                                                     /*perMicroBatch=*/false)
                                  : 0;
  hideGradientReductions(t, stats, config, placement);
  t.stepComm = stats.stepComm;
  for (const SharedGradientSum &sum :
       sharedGradientSums(stats, config, placement, entry))
    t.sharedSync += sum.seconds;
  const double updated = updatedParams(stats, config);
  if (config.offload == Offload::Optimizer) {
    const cost::OffloadBytes &bytes = ctx_.offloadPerParam;
    t.toHost = hostCopyTime(updated * bytes.toHost);
    t.hostOptimizer = hostOptimizerTime(updated * bytes.step);
    t.toDevice = hostCopyTime(updated * bytes.toDevice);
    // Not where the host is the device (a CPU's cores): bmrt runs it after
    // the backward there, as the worker would share the ranks' cores.
    const double behind = t.offload();
    if (behind > 0 &&
        cost::offloadRunsBehind(ctx_.config.optimizer, ctx_.cluster.runtime) &&
        !ctx_.cluster.offloadSharesDeviceMemory()) {
      const double keep = offloadExposed(behind, stats, entry) / behind;
      auto hide = [keep](double &exposed, double &hidden) {
        hidden = exposed * (1 - keep);
        exposed -= hidden;
      };
      hide(t.toHost, t.toHostHidden);
      hide(t.hostOptimizer, t.hostOptimizerHidden);
      hide(t.toDevice, t.toDeviceHidden);
    }
    return t;
  }
  t.optimizer = ctx_.model.memoryTime(
      updated * cost::optimizerStepBytesPerParam(ctx_.precision,
                                                 ctx_.config.optimizer),
      cost::MemoryKernelClass::Optimizer);
  return t;
}

Evaluation StepCoster::score(const ParallelConfig &config,
                             const PartitionEntry &entry) const {
  const int pp = config.pp;
  const int m = config.numMicroBatches, v = config.chunks;
  const MeshPlacement placement = meshOf(config);
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
  const StageStats &critical = entry.devices[e.critical].stats;
  double bubble =
      pp > 1 ? (sumLoads - slowest) *
                   cost::bubbleScale(config.schedule, v, critical.passTimes())
             : 0;
  e.step = m * slowest + bubble + tail.total();

  auto addComm = [&](double seconds, bool network) {
    (network ? e.time.network : e.time.nvlink) += seconds;
  };
  e.time.compute = m * critical.compute + tail.optimizer + tail.hostOptimizer;
  e.time.hostLink = tail.toHost + tail.toDevice;
  e.hostStep = tail.hostOptimizer;
  addComm(m * (critical.comm - critical.contextComm - critical.tensor2Comm) +
              tail.stepComm,
          placement.tp.crossesNodes);
  addComm(m * critical.contextComm, placement.cp.crossesNodes);
  addComm(m * critical.tensor2Comm, placement.tp2.crossesNodes);
  addComm(tail.sharedSync, placement.pp.crossesNodes);
  addComm(m * extras.p2pLink, pipelineOnNetwork);
  addComm(m * extras.p2pGather, placement.tp.crossesNodes);
  addComm(tail.dpSync + m * extras.zero3,
          dataParallelGroup(config, placement).crossesNodes);
  addComm(m * extras.contextGradients, placement.cp.crossesNodes);
  addComm(tail.expertSync + m * extras.zero3Experts,
          placement.expertDp.crossesNodes);
  addComm(m * extras.exchange, placement.ep.crossesNodes);
  addComm(m * extras.sideLink, pipelineOnNetwork);
  addComm(m * extras.sideGather, placement.tp.crossesNodes);
  e.time.bubble = bubble;

  // Memory: the worst device; and every device's offloaded state.
  double worst = -1;
  for (const DeviceGroup &group : entry.devices) {
    MemoryBreakdown mem = deviceMemory(group, config, entry);
    e.hostFits = e.hostFits && hostFits(mem);
    e.hostNeed = std::max(e.hostNeed, mem.host);
    if (mem.total() > worst) {
      worst = mem.total();
      e.memory = mem;
    }
  }
  e.fits = e.memory.total() <= ctx_.cluster.memoryBytes && e.hostFits;
  return e;
}

// Within a group the first device holds the most micro-batches in flight.
// The trainer gathers a ZeRO-3 parameter over dp just around the
// instructions that read it, one tensor at a time: the largest one's bytes.
double StepCoster::gatheredParameterBytes(const ParallelConfig &config,
                                          double layerParams) const {
  // DeepSpeed's ZeRO-3 prefetches: one layer's parameters, twice.
  if (!ctx_.bmrt())
    return 2 * layerParams * ctx_.perParam.params;
  return largestLocalParameter(config) * ctx_.perParam.params;
}

// Elements of the largest parameter on one device. Large weights are the
// ones tensor parallelism splits (Megatron's pattern); the search's
// per-op choice is not at hand here, so an even split over tp is assumed.
double StepCoster::largestLocalParameter(const ParallelConfig &config) const {
  return static_cast<double>(ctx_.analysis.largestParameter()) / config.tp;
}

// Where bmrt overlaps its data-parallel reductions with the backward (the
// cluster hides some of them), it reduces flat copies of the gradients,
// bucket by bucket, kept for the run: the gradients once, or under ZeRO 2
// and 3 laid out in dp + 1 blocks of the shards (GradientBuckets.cpp).
double StepCoster::bucketBytes(const StageStats &stats,
                               const ParallelConfig &config) const {
  if (ctx_.cluster.gradReduceOverlap <= 0 || config.dp <= 1)
    return 0;
  const int ep = std::max(config.ep, 1);
  double params = overlappableParams(stats) + stats.expertParams / ep;
  double bytes = params * ctx_.model.activationBytes();
  return config.zeroStage >= 2 ? bytes * (config.dp + 1) / config.dp : bytes;
}

// bmrt gathers a parameter's ZeRO shards over dp (after the update under
// ZeRO 1 and 2, for each run of readers under ZeRO 3) through one
// workspace of dp + 1 chunks, the gathered ones and its own padded
// (Parallel::gatherOverDp), grown to the largest parameter's and kept; the
// padded reduce-scatters of ZeRO 2 and 3 (dp chunks) reuse it.
double StepCoster::zeroGatherBytes(const ParallelConfig &config) const {
  if (config.zeroStage < 1 || config.dp <= 1)
    return 0;
  const double chunk = std::ceil(largestLocalParameter(config) / config.dp);
  return chunk * (config.dp + 1) * ctx_.model.activationBytes();
}

// bmrt runs every micro-batch of a pipeline stage in one arena (its saved
// values and working set) and copies what the backward reads out of it for
// each micro-batch in flight; without a pipeline the arena is all.
// Megatron-LM keeps each micro-batch's saved tensors alone.
double StepCoster::storedCopies(const ParallelConfig &config,
                                double inFlight) const {
  if (!ctx_.bmrt())
    return inFlight;
  return config.pp > 1 ? inFlight + 1 : 1;
}

// The step program writes each gradient whole (after tp) in the compute
// precision. The sums the optimizer reads are kept beside those outputs when
// several micro-batches accumulate, and under ZeRO 2 and 3, where only this
// rank's shard of the sum is kept (modelState counts the sums).
double StepCoster::gradientOutputBytes(const StageStats &stats,
                                       const ParallelConfig &config) const {
  // Megatron-LM accumulates into its gradient buffer in place
  // (gradient_accumulation_fusion).
  if (!ctx_.bmrt())
    return 0;
  const int ep = std::max(config.ep, 1);
  const double act = ctx_.model.activationBytes();
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
                                ctx_.perParam.grads
                          : 0);
  if (config.numMicroBatches > 1)
    return outputs;
  // One micro-batch and whole gradients: the outputs are the sums, unless
  // they are kept in another precision (fp32 sums of 16-bit outputs) or
  // several chunks add theirs into one.
  if (ctx_.perParam.grads != act)
    return outputs;
  return config.chunks > 1 ? config.chunks * shared : 0;
}

// A received side input is kept like a saved value: the trainer stashes it
// for each micro-batch in flight (the backward reads it), beside the slot
// it arrives in. In a V each chunk holds its own count (the loss's chunk
// few, the one before it many), so the group's first and last devices,
// where the counts are extreme, are both priced.
double StepCoster::heldActivationBytes(const DeviceGroup &group,
                                       const ParallelConfig &config,
                                       const PartitionEntry &entry) const {
  if (bmrt::layoutOf(config.schedule) != bmrt::StageLayout::V) {
    double inFlight = cost::inFlightMicroBatches(
        config.schedule, config.pp, config.numMicroBatches, config.chunks,
        group.firstDevice);
    return storedCopies(config, inFlight) *
           (group.stats.stored + group.stats.receivedSideBytes);
  }
  // Scored for every configuration of the search: the stages are looked
  // up in their groups, not expanded.
  double worst = 0;
  for (int device :
       {group.firstDevice, group.firstDevice + group.numDevices - 1}) {
    double bytes = 0;
    for (int chunk = 0; chunk < config.chunks; ++chunk) {
      const StageStats *stage =
          stageAt(entry.stages, config.virtualStage(device, chunk));
      if (!stage)
        continue;
      const StageStats held = stage->onDevice();
      double inFlight = cost::inFlightChunkMicroBatches(
          config.schedule, config.pp, config.numMicroBatches, device, chunk);
      bytes += storedCopies(config, inFlight) *
               (held.stored + held.receivedSideBytes);
    }
    worst = std::max(worst, bytes);
  }
  return worst;
}

MemoryBreakdown StepCoster::deviceMemory(const DeviceGroup &group,
                                         const ParallelConfig &config,
                                         const PartitionEntry &entry) const {
  // Each kind as the runtime allocates and (bmrt) reports it (DESIGN.md
  // section 5: peak memory split as the planner predicts it): bmrt counts
  // gathered parameters as parameters and transfer buffers as activations.
  const bool bmrt = ctx_.bmrt();
  MemoryBreakdown mem;
  mem.stage = group.firstDevice;
  mem.buffers = ctx_.cluster.reservedMemoryBytes;
  cost::ModelStateBytes state = modelState(group.stats, config);
  mem.params = state.params;
  mem.grads = state.grads + gradientOutputBytes(group.stats, config);
  mem.optimizer = state.optimizer;
  mem.host = hostBytes(group.stats, config);
  if (config.zeroStage >= 3)
    (bmrt ? mem.params : mem.buffers) +=
        gatheredParameterBytes(config, entry.layerParams);
  // The activations and gradients that cross stages wait in buffers of
  // their own, sent and received.
  mem.activations =
      heldActivationBytes(group, config, entry) + group.stats.workingSet;
  if (config.pp > 1)
    (bmrt ? mem.activations : mem.buffers) += 2 * entry.boundaryBytes;
  if (bmrt)
    mem.buffers += bucketBytes(group.stats, config) + zeroGatherBytes(config);
  return mem;
}
