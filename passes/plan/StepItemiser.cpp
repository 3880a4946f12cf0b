//===- StepItemiser.cpp - every cost of the chosen plan's step, itemised --===//
//
// A test checks over the model zoo that the items add up to the scored
// step time (tests/report/ItemsZooTest.cpp).
//
//===----------------------------------------------------------------------===//

#include "passes/plan/StepItemiser.h"

#include <map>

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;
using cost::CollectiveKind;

namespace bm::plan::detail {

/// Items of one stage group, with what they share filled in.
class ItemList {
public:
  ItemList(std::vector<CostItem> &items, int stage, int devices)
      : items_(items), stage_(stage), devices_(devices) {}

  void compute(const char *what, int64_t count, double seconds,
               bool afterPipeline = false, double hiddenSeconds = 0) {
    if (seconds <= 0 && hiddenSeconds <= 0)
      return;
    CostItem item = base(CostItem::Kind::Compute, what);
    item.hiddenSeconds = hiddenSeconds;
    item.phase = afterPipeline ? "step" : "forward+backward";
    item.count = count;
    item.seconds = seconds;
    item.afterPipeline = afterPipeline;
    items_.push_back(std::move(item));
  }

  void comm(CostItem::Kind kind, const char *what, const char *axis,
            const char *link, std::string phase, std::string where,
            double bytes, int64_t count, double seconds,
            bool afterPipeline = false, double hiddenSeconds = 0) {
    if (count <= 0)
      return;
    CostItem item = base(kind, what);
    item.hiddenSeconds = hiddenSeconds;
    item.axis = axis;
    item.link = link;
    item.phase = std::move(phase);
    item.where = std::move(where);
    item.bytes = bytes;
    item.count = count;
    item.seconds = seconds;
    item.afterPipeline = afterPipeline;
    items_.push_back(std::move(item));
  }

  /// One copy of the offloaded optimizer between the device and host
  /// memory, once the pipeline has drained.
  void hostCopy(const char *what, const char *where, double bytes,
                double seconds, double hiddenSeconds = 0) {
    if (seconds <= 0 && hiddenSeconds <= 0)
      return;
    CostItem item = base(CostItem::Kind::HostCopy, what);
    item.hiddenSeconds = hiddenSeconds;
    item.link = "host";
    item.phase = "step";
    item.where = where;
    item.bytes = bytes;
    item.count = 1;
    item.seconds = seconds;
    item.afterPipeline = true;
    items_.push_back(std::move(item));
  }

private:
  CostItem base(CostItem::Kind kind, const char *what) const {
    CostItem item;
    item.kind = kind;
    item.what = what;
    item.stage = stage_;
    item.devices = devices_;
    return item;
  }

  std::vector<CostItem> &items_;
  int stage_, devices_;
};

} // namespace bm::plan::detail

std::vector<CostItem> StepItemiser::itemise(const Evaluation &e) {
  const ParallelConfig &config = e.config;
  const PartitionEntry &entry = partitions_.of(e);
  const cost::MeshPlacement placement = coster_.meshOf(config);
  const std::vector<std::vector<std::pair<int, int64_t>>> contents =
      partitions_.contents(entry, config);
  std::vector<CostItem> items;
  for (const DeviceGroup &group : entry.devices) {
    ItemList list(items, group.firstDevice, group.numDevices);
    // Segments on this device: its virtual stages, one per chunk.
    std::map<int, int64_t> held;
    for (int chunk = 0; chunk < config.chunks; ++chunk) {
      size_t stage =
          static_cast<size_t>(config.virtualStage(group.firstDevice, chunk));
      if (stage < contents.size())
        for (auto [segment, count] : contents[stage])
          held[segment] += count;
    }
    itemiseSegments(list, held, config, placement);
    itemiseTransfers(list, group.stats, config, placement, entry);
    itemiseDataParallel(list, group.stats, config, placement, entry);
  }
  if (e.time.bubble > 0) {
    const DeviceGroup &critical = entry.devices[e.critical];
    CostItem bubble;
    bubble.kind = CostItem::Kind::Bubble;
    bubble.what = "pipeline bubble";
    bubble.phase = "forward+backward";
    bubble.where = e.simulated ? "simulated schedule" : "closed form";
    bubble.stage = critical.firstDevice;
    bubble.devices = critical.numDevices;
    bubble.count = 1;
    bubble.seconds = e.time.bubble;
    items.push_back(bubble);
  }
  return items;
}

void StepItemiser::itemiseSegments(ItemList &list,
                                   const std::map<int, int64_t> &held,
                                   const ParallelConfig &config,
                                   const cost::MeshPlacement &placement) {
  const int tp = config.tp, mb = config.microBatch;
  const int64_t m = config.numMicroBatches;
  StageStats sum;
  for (auto [segment, count] : held)
    sum +=
        segments_.itemStats(segment, tp, mb, config.streamDim, config.recompute)
            .scaled(count);
  list.compute("gemm", m, m * sum.gemmCompute);
  list.compute("attention core", m, m * sum.attentionCompute);
  list.compute("memory-bound", m,
               m * (sum.compute - sum.gemmCompute - sum.attentionCompute -
                    sum.recomputeCompute));
  list.compute("recompute", m, m * sum.recomputeCompute);
  // Each op's tensor-parallel collectives, as often as the stage runs it.
  const char *tpLink = cost::toString(ctx_.model.linkClass(placement.tp));
  const char *cpLink = cost::toString(ctx_.model.linkClass(placement.cp));
  const char *tp2Link = cost::toString(ctx_.model.linkClass(placement.tp2));
  for (auto [segment, count] : held) {
    const bool isLayer = ctx_.segments[segment].kind == SegmentKind::Layer;
    for (const SegmentCollective &c :
         segments_.solution(segment, tp, mb, config.streamDim).collectives) {
      const char *kind = cost::toString(c.kind);
      const std::string &where = ctx_.graph.ops[c.op].label;
      const char *axis = c.overContext   ? kContextAxis
                         : c.overTensor2 ? kTensor2Axis
                                         : kTensorAxis;
      const char *link = c.overContext   ? cpLink
                         : c.overTensor2 ? tp2Link
                                         : tpLink;
      if (c.phase == Phase::Step) {
        list.comm(CostItem::Kind::Collective, kind, axis, link, "step", where,
                  c.bytes, count, count * c.seconds,
                  /*afterPipeline=*/true);
        continue;
      }
      // Full recomputation reruns a layer's gathers of tp2 shards, which its
      // backward then reads instead of gathering them again
      // (SegmentCosts::itemStats).
      if (isLayer && config.recompute == Recompute::Full && c.overTensor2 &&
          c.kind == cost::CollectiveKind::AllGather &&
          c.phase == Phase::Backward)
        continue;
      const int64_t calls = count * m;
      list.comm(CostItem::Kind::Collective, kind, axis, link, toString(c.phase),
                where, c.bytes, calls, calls * c.seconds);
      bool repeated =
          isLayer && c.phase == Phase::Forward &&
          (config.recompute == Recompute::Full ||
           (config.recompute == Recompute::Selective && c.attentionCore));
      if (repeated)
        list.comm(CostItem::Kind::Collective, kind, axis, link, "recompute",
                  where, c.bytes, calls, calls * c.seconds);
    }
  }
}

void StepItemiser::itemiseTransfers(ItemList &list, const StageStats &stats,
                                    const ParallelConfig &config,
                                    const cost::MeshPlacement &placement,
                                    const PartitionEntry &entry) {
  using Kind = CostItem::Kind;
  const int tp = config.tp;
  const int64_t m = config.numMicroBatches;
  const char *tpLink = cost::toString(ctx_.model.linkClass(placement.tp));
  const char *ppLink = placement.pipelineCrossesNodes ? "network" : "nvlink";
  const DeviceExtras x = coster_.deviceExtras(
      stats, config, placement, entry.boundaryBytes, config.chunks);
  const int64_t boundaryCalls = 2 * config.chunks * m;
  list.comm(Kind::Transfer, "send_recv", kPipelineAxis, ppLink,
            "forward+backward", "stage boundary", entry.boundaryBytes / tp,
            x.p2pLink > 0 ? boundaryCalls : 0, m * x.p2pLink);
  list.comm(Kind::Collective, "all_gather", kTensorAxis, tpLink,
            "forward+backward", "stage boundary", entry.boundaryBytes,
            x.p2pGather > 0 ? boundaryCalls : 0, m * x.p2pGather);
  // Per receiving chunk, as deviceExtras prices them.
  const double receivers = stats.sideInputReceivers;
  const double side = receivers > 0 ? stats.receivedSideBytes / receivers : 0;
  const int64_t sideCalls = 2 * static_cast<int64_t>(receivers) * m;
  list.comm(Kind::Transfer, "send_recv", kPipelineAxis, ppLink,
            "forward+backward", "side inputs", side / tp,
            x.sideLink > 0 ? sideCalls : 0, m * x.sideLink);
  list.comm(Kind::Collective, "all_gather", kTensorAxis, tpLink,
            "forward+backward", "side inputs", side,
            x.sideGather > 0 ? sideCalls : 0, m * x.sideGather);
  // ZeRO 2 and 3 with cp: each backward's gradients all-reduced over cp.
  if (x.contextGradients > 0)
    list.comm(Kind::Collective, "all_reduce", kContextAxis,
              cost::toString(ctx_.model.linkClass(placement.cp)), "backward",
              "gradients",
              (stats.params - stats.expertParams) * ctx_.perParam.grads, m,
              m * x.contextGradients);
  if (x.exchange > 0)
    list.comm(Kind::Collective, "all_to_all", kExpertAxis,
              cost::toString(ctx_.model.linkClass(placement.ep)),
              "forward+backward", "expert dispatch / combine",
              stats.exchangeBytes / stats.exchanges,
              static_cast<int64_t>(parameterPasses(config.recompute) *
                                   stats.exchanges * m),
              m * x.exchange);
}

// ZeRO's and data parallelism's collectives: on each micro-batch's path
// (ZeRO-3), else once the pipeline has drained; then the sums over pp of
// the shared parameters' gradients and the optimizer step.
void StepItemiser::itemiseDataParallel(ItemList &list, const StageStats &stats,
                                       const ParallelConfig &config,
                                       const cost::MeshPlacement &placement,
                                       const PartitionEntry &entry) {
  const int64_t m = config.numMicroBatches;
  const StepTail tail = coster_.stepTail(stats, config, placement, entry);
  // `hidden`: seconds of the group's step gradient reductions that run
  // behind the backward, shared by the collectives by their times.
  auto add = [&](double params, const char *what, const cost::CommGroup &group,
                 double hidden) {
    if (group.size <= 1 || params <= 0)
      return;
    const char *link = cost::toString(ctx_.model.linkClass(group));
    double reductions =
        coster_.stepGradientReductionTime(params, config, group);
    for (const DataParallelCollective &c :
         coster_.dataParallelCollectives(config)) {
      double bytes =
          params * (c.gradients ? ctx_.perParam.grads : ctx_.perParam.params);
      bool onPath = c.perMicroBatch > 0;
      int64_t calls = onPath ? c.perMicroBatch * m : c.perStep;
      double seconds = calls * ctx_.model.collectiveTime(c.kind, bytes, group);
      // This collective's share of the hidden time, by its time.
      double hides = c.gradients && !onPath && reductions > 0
                         ? hidden * seconds / reductions
                         : 0;
      list.comm(CostItem::Kind::Collective, cost::toString(c.kind), kDataAxis,
                link, c.phase,
                std::string(what) + (c.gradients ? "gradients" : "parameters"),
                bytes, calls, seconds - hides, /*afterPipeline=*/!onPath,
                hides);
    }
  };
  add(stats.params - stats.expertParams, "",
      coster_.dataParallelGroup(config, placement), tail.dpHidden);
  add(stats.expertParams / std::max(config.ep, 1), "expert ",
      placement.expertDp, tail.expertHidden);
  for (const SharedGradientSum &sum :
       coster_.sharedGradientSums(stats, config, placement, entry))
    list.comm(CostItem::Kind::Collective, "all_reduce", kPipelineAxis,
              cost::toString(ctx_.model.linkClass(sum.group)), "step",
              "shared gradients", sum.bytes, 1, sum.seconds,
              /*afterPipeline=*/true);
  list.compute("optimizer step", 1, tail.optimizer, /*afterPipeline=*/true);
  // Offloaded: the gradients down, the host's step, the parameters up (on
  // bmrt with Adam and SGD partly hidden behind the next forward).
  const double updated = coster_.updatedParams(stats, config);
  const cost::OffloadBytes &bytes = ctx_.offloadPerParam;
  list.hostCopy(kToHostItem, "gradients", updated * bytes.toHost, tail.toHost,
                tail.toHostHidden);
  list.compute(kHostStepItem, 1, tail.hostOptimizer,
               /*afterPipeline=*/true, tail.hostOptimizerHidden);
  list.hostCopy(kToDeviceItem, "parameters", updated * bytes.toDevice,
                tail.toDevice, tail.toDeviceHidden);
}
