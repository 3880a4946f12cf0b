//===- CostModel.cpp - analytic costs of compute, memory, communication ---===//

#include "cost/CostModel.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <tuple>

using namespace bm::cost;

const char *bm::cost::toString(Precision precision) {
  switch (precision) {
  case Precision::Bf16Mixed:
    return "bf16";
  case Precision::Fp16Mixed:
    return "fp16";
  case Precision::Fp32:
    return "fp32";
  }
  return "bf16";
}

std::optional<Precision> bm::cost::parsePrecision(llvm::StringRef text) {
  for (Precision p :
       {Precision::Bf16Mixed, Precision::Fp16Mixed, Precision::Fp32})
    if (text == toString(p))
      return p;
  return std::nullopt;
}

Precision bm::cost::defaultPrecision(const Cluster &cluster) {
  if (std::optional<Precision> named = parsePrecision(cluster.precision))
    return *named;
  return cluster.hasBf16() ? Precision::Bf16Mixed : Precision::Fp16Mixed;
}

const char *bm::cost::toString(Optimizer optimizer) {
  switch (optimizer) {
  case Optimizer::Adam:
    return "adam";
  case Optimizer::Sgd:
    return "sgd";
  case Optimizer::Lamb:
    return "lamb";
  case Optimizer::Lars:
    return "lars";
  }
  return "?";
}

std::optional<Optimizer> bm::cost::parseOptimizer(llvm::StringRef text) {
  for (Optimizer o :
       {Optimizer::Adam, Optimizer::Sgd, Optimizer::Lamb, Optimizer::Lars})
    if (text == toString(o))
      return o;
  return std::nullopt;
}

const char *bm::cost::trainerName(Optimizer optimizer) {
  return optimizer == Optimizer::Adam ? "adamw" : toString(optimizer);
}

/// Whether the optimizer keeps two moments per parameter (else one buffer).
static bool twoMoments(Optimizer optimizer) {
  return optimizer == Optimizer::Adam || optimizer == Optimizer::Lamb;
}

const char *bm::cost::toString(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::SendRecv:
    return "send_recv";
  }
  return "all_reduce";
}

const char *bm::cost::toString(LinkClass link) {
  return link == LinkClass::InterNode ? "network" : "nvlink";
}

std::optional<CollectiveKind> bm::cost::parseCollectiveKind(llvm::StringRef text) {
  for (CollectiveKind kind :
       {CollectiveKind::AllGather, CollectiveKind::AllReduce,
        CollectiveKind::AllToAll, CollectiveKind::ReduceScatter,
        CollectiveKind::SendRecv})
    if (text == toString(kind))
      return kind;
  return std::nullopt;
}

const char *bm::cost::toString(RuntimeModel runtime) {
  return runtime == RuntimeModel::Bmrt ? "bmrt" : "megatron";
}

std::optional<RuntimeModel> bm::cost::parseRuntimeModel(llvm::StringRef text) {
  for (RuntimeModel r : {RuntimeModel::Bmrt, RuntimeModel::Megatron})
    if (text == toString(r))
      return r;
  return std::nullopt;
}

/// A group of `size` ranks at stride `stride`.
static CommGroup stridedGroup(int perNode, int size, int stride) {
  CommGroup group;
  group.size = size;
  group.ranksPerNode = std::clamp(stride >= perNode ? 1 : perNode / stride, 1,
                                  std::max(size, 1));
  group.crossesNodes = static_cast<int64_t>(stride) * size > perNode;
  return group;
}

MeshPlacement bm::cost::placeMesh(const Cluster &cluster, int dp, int tp,
                                  int pp, int ep, int cp, int tp2) {
  const int perNode = cluster.gpusPerNode;
  MeshPlacement placement;
  // tp: `tp` consecutive ranks; tp2: `tp2` ranks at stride tp (a grid's
  // tp x tp2 ranks consecutive); cp: `cp` ranks at stride tp x tp2; the
  // replicas of a parameter: dp x cp ranks at stride tp x tp2.
  cp = std::max(cp, 1);
  tp2 = std::max(tp2, 1);
  const int grid = tp * tp2;
  placement.tp = stridedGroup(perNode, tp, 1);
  placement.tp2 = stridedGroup(perNode, tp2, tp);
  placement.cp = stridedGroup(perNode, cp, grid);
  placement.dpShards = stridedGroup(perNode, dp, grid * cp);
  dp *= cp;
  placement.dp = stridedGroup(perNode, dp, grid);
  ep = std::max(ep, 1);
  placement.ep = stridedGroup(perNode, ep, grid);
  placement.expertDp = stridedGroup(perNode, std::max(dp / ep, 1), grid * ep);
  // pp: stages at stride dp x tp x tp2; some neighbours straddle a node
  // boundary as soon as the whole pipeline does not fit in one node.
  placement.pp = stridedGroup(perNode, pp, dp * grid);
  placement.pipelineCrossesNodes = pp > 1 && placement.pp.crossesNodes;
  return placement;
}

CostModel::CostModel(const Cluster &cluster, Precision precision)
    : cluster_(cluster), precision_(precision),
      gemmGrid_(makeGemmRateGrid(cluster.calibration.gemm)) {}

double CostModel::peakFlops() const {
  switch (precision_) {
  case Precision::Fp32:
    return cluster_.peakFlops32;
  case Precision::Bf16Mixed:
    return cluster_.peakFlopsBf16;
  case Precision::Fp16Mixed:
    return cluster_.peakFlops16;
  }
  return cluster_.peakFlops16;
}

// Small or skinny GEMMs run below the large-GEMM efficiency: dimensions
// below a few thread-block tiles (128-256 on Ampere / Hopper) leave most of a
// tile or of a wave idle, and a short K cannot amortise loading the tiles
// (NVIDIA Deep Learning Performance Guide, "Matrix Multiplication
// Background": tile and wave quantisation, arithmetic intensity
// MNK / (MK + KN + MN)). We model each dimension's utilisation as
// x / (x + x0), a saturating curve that is ~97% at x = 2048 and 50% at
// x = x0, with x0 = 48 chosen once for all devices.
static double dimensionUtilisation(double x) {
  constexpr double kHalfUtilisationSize = 48;
  return x / (x + kHalfUtilisationSize);
}

// A measured grid replaces the curve (and the peak) altogether.
double CostModel::gemmEfficiency(double m, double n, double k) const {
  if (!gemmGrid_.empty())
    return gemmGrid_.rate(m, n, k) / peakFlops();
  return cluster_.gemmEfficiency * dimensionUtilisation(m) *
         dimensionUtilisation(n) * dimensionUtilisation(k);
}

double CostModel::gemmTime(double flops, double m, double n, double k) const {
  if (flops <= 0)
    return 0;
  if (!gemmGrid_.empty())
    return flops / gemmGrid_.rate(m, n, k);
  return flops / (peakFlops() * gemmEfficiency(m, n, k));
}

// Roofline: a kernel below the ridge point is bound by bytes / bandwidth
// (Williams et al. 2009, "Roofline", CACM 52(4)). Measured, each class of
// kernel has its own rate.
double CostModel::memoryTime(double bytes,
                             MemoryKernelClass kernelClass) const {
  if (bytes <= 0)
    return 0;
  double measured =
      cluster_.calibration
          .memoryKernelBandwidth[static_cast<int>(kernelClass)];
  if (measured > 0)
    return bytes / measured;
  return bytes / (cluster_.memoryBandwidth * cluster_.memoryEfficiency);
}

double CostModel::busBandwidth(const CommGroup &group) const {
  if (!group.crossesNodes)
    return cluster_.intraNode.busBandwidth;
  // A group with r ranks per node drives r of the node's NICs (each GPU has
  // its own rail, as on DGX nodes); groups running side by side share the
  // rest. NVLink still carries the intra-node part of the ring.
  double network = cluster_.interNodeBandwidthPerGpu() * group.ranksPerNode;
  return std::min(cluster_.intraNode.busBandwidth, network);
}

// Alpha-beta model with the bus-bandwidth factors of nccl-tests
// (NVIDIA nccl-tests, doc/PERFORMANCE.md): time = S * factor / busbw, with
// factor 2(n-1)/n for all-reduce and (n-1)/n for all-gather, reduce-scatter
// and all-to-all; plus one latency per ring step (2(n-1) steps for
// all-reduce, n-1 for the others; Thakur et al. 2005, "Optimization of
// collective communication operations in MPICH", section 4).
// Measured curves, where the cluster has them for the group, replace it.
double CostModel::collectiveTime(CollectiveKind kind, double bytes,
                                 const CommGroup &group) const {
  const int n = group.size;
  if (n <= 1 || bytes <= 0)
    return 0;
  if (kind == CollectiveKind::SendRecv)
    return sendRecvTime(bytes, group.crossesNodes);
  if (std::optional<double> measured =
          measuredCollectiveTime(kind, linkClass(group), n, bytes))
    return *measured;
  const LinkSpec &link =
      group.crossesNodes ? cluster_.interNode : cluster_.intraNode;
  double steps = kind == CollectiveKind::AllReduce ? 2 * (n - 1) : n - 1;
  return steps * link.latency +
         bytes * busFactor(kind, n) / busBandwidth(group);
}

std::optional<double>
CostModel::measuredCollectiveTime(CollectiveKind kind, LinkClass link,
                                  int ranks, double bytes) const {
  const std::vector<CollectivePoint> &all = cluster_.calibration.collectives;
  auto group = [](const CollectivePoint &p) {
    return std::make_tuple(static_cast<int>(p.kind), static_cast<int>(p.link),
                           p.ranks);
  };
  CollectivePoint key;
  key.kind = kind;
  key.link = link;
  key.ranks = ranks;
  auto [begin, end] = std::equal_range(
      all.begin(), all.end(), key,
      [&](const CollectivePoint &a, const CollectivePoint &b) {
        return group(a) < group(b);
      });
  if (begin == end)
    return std::nullopt;
  return interpolateCollectiveTime(llvm::ArrayRef(&*begin, end - begin),
                                   bytes);
}

double CostModel::sendRecvTime(double bytes, bool crossesNodes) const {
  if (bytes <= 0)
    return 0;
  if (std::optional<double> measured = measuredCollectiveTime(
          CollectiveKind::SendRecv,
          crossesNodes ? LinkClass::InterNode : LinkClass::IntraNode, 2,
          bytes))
    return *measured;
  if (!crossesNodes)
    return cluster_.intraNode.latency +
           bytes / cluster_.intraNode.busBandwidth;
  // One GPU sends through its own NIC.
  return cluster_.interNode.latency +
         bytes / cluster_.interNodeBandwidthPerGpu();
}

// A fluid model of bucketed overlap (Li et al. 2020, "PyTorch Distributed",
// VLDB, section 3.2.3: buckets are reduced asynchronously as soon as they
// are ready, in order): buckets become ready at times k/n of the backward,
// the link works through them at `overlap` of its speed while the backward
// computes, and what is left after the backward is exposed.
double bm::cost::hiddenGradientReduction(double reduceSeconds,
                                         double gradientBytes,
                                         double backwardSeconds,
                                         double overlap) {
  if (reduceSeconds <= 0 || backwardSeconds <= 0 || overlap <= 0)
    return 0;
  double buckets = std::max(1.0, std::ceil(gradientBytes / kGradientBucketBytes));
  if (buckets == 1)
    return 0;
  double share = (buckets - 1) / buckets;
  return std::min(overlap, 1.0) *
         std::min(reduceSeconds * share, backwardSeconds * share);
}

// Mixed-precision Adam keeps 16-bit weights (2), gradients (2 or 4, below)
// and fp32 master weights, momentum and variance (12) per parameter
// (Rajbhandari et al. 2020, "ZeRO", section 3.1, counts 16 with fp16
// gradients). With bf16, Megatron-LM accumulates and all-reduces the
// gradients in fp32 (its arguments force accumulate_allreduce_grads_in_fp32
// for bf16, because bf16's 8-bit mantissa loses small gradient terms):
// 2 + 4 + 12 = 18 bytes, the "bf16 param, fp32 grads" row of Megatron-LM's
// docs/distrib_optimizer.md. fp16 keeps fp16 gradients (Megatron's default
// there). SGD with momentum keeps an fp32 master copy and the momentum (8).
// In fp32 there is no master copy.
ModelStateBytes bm::cost::modelStateBytesPerParam(Precision precision,
                                                  Optimizer optimizer) {
  ModelStateBytes bytes;
  if (precision != Precision::Fp32) {
    bytes.params = 2;
    bytes.grads = precision == Precision::Bf16Mixed ? 4 : 2;
    bytes.optimizer = twoMoments(optimizer) ? 12 : 8;
  } else {
    bytes.params = 4;
    bytes.grads = 4;
    bytes.optimizer = twoMoments(optimizer) ? 8 : 4;
  }
  return bytes;
}

// ZeRO stage 1 shards optimizer states over the data-parallel ranks, stage 2
// the gradients too, stage 3 the parameters too (Rajbhandari et al. 2020,
// section 5, Figure 1). Megatron's distributed optimizer is stage 1.
ModelStateBytes bm::cost::modelStateMemory(double params, Precision precision,
                                           Optimizer optimizer, int zeroStage,
                                           int dp) {
  ModelStateBytes perParam = modelStateBytesPerParam(precision, optimizer);
  ModelStateBytes bytes;
  bytes.params = params * perParam.params / (zeroStage >= 3 ? dp : 1);
  bytes.grads = params * perParam.grads / (zeroStage >= 2 ? dp : 1);
  bytes.optimizer = params * perParam.optimizer / (zeroStage >= 1 ? dp : 1);
  return bytes;
}

// The update reads the gradient and every optimizer state, writes the states
// back and writes the low-precision weights; in fp32 the weights are the
// master copy, read and written (AdamW: p, g, m, v read, p, m, v written: 28
// bytes, what bmrt's kernel moves).
// LAMB and LARS also read every tensor for its norms, and LAMB writes its
// direction and reads it back (bmrt's two phases): LAMB reads p and u for
// the norms, writes u and reads u and p for the step (+20 bytes); LARS
// reads p and g for the norms (+8).
double bm::cost::optimizerStepBytesPerParam(Precision precision,
                                            Optimizer optimizer) {
  ModelStateBytes state = modelStateBytesPerParam(precision, optimizer);
  double weights = precision == Precision::Fp32 ? 2 * state.params
                                                : state.params;
  double norms = optimizer == Optimizer::Lamb   ? 20
                 : optimizer == Optimizer::Lars ? 8
                                                : 0;
  return state.grads + 2 * state.optimizer + weights + norms;
}

// The host keeps the moments, an fp32 master copy of the parameters and a
// copy of their gradients, and steps them there. Megatron-LM's mixed
// precision (ZeRO-Offload, Ren et al. 2021, section 4.1): the gradients
// leave the device as it keeps them (fp32 under bf16, fp16 under fp16),
// the 16-bit parameters come back, and the host's master and moments are
// what modelStateBytesPerParam counts as optimizer state; the step is the
// device's (optimizerStepBytesPerParam). bmrt keeps fp32 tensors on the
// device: 4-byte gradients down and parameters up, an fp32 step.
OffloadBytes bm::cost::offloadBytesPerParam(Precision precision,
                                            Optimizer optimizer,
                                            RuntimeModel runtime) {
  const double moments = twoMoments(optimizer) ? 8 : 4, master = 4;
  OffloadBytes bytes;
  if (runtime == RuntimeModel::Bmrt) {
    bytes.toHost = bytes.toDevice = 4;
    bytes.step = optimizerStepBytesPerParam(Precision::Fp32, optimizer);
  } else {
    ModelStateBytes state = modelStateBytesPerParam(precision, optimizer);
    bytes.toHost = state.grads;
    bytes.toDevice = state.params;
    bytes.step = optimizerStepBytesPerParam(precision, optimizer);
  }
  bytes.held = moments + master + bytes.toHost;
  return bytes;
}

bool bm::cost::offloadRunsBehind(Optimizer optimizer, RuntimeModel runtime) {
  return runtime == RuntimeModel::Bmrt &&
         (optimizer == Optimizer::Adam || optimizer == Optimizer::Sgd);
}

// GPipe (Huang et al. 2019) and 1F1B (Narayanan et al. 2021, section 2.2.1)
// idle (p-1)(F+B+W): each rank waits for the first micro-batch to pass the
// ranks before it and for the last one's backward to come back. The
// interleaved schedule with v model chunks per device divides that by v
// (Narayanan et al. 2021, section 2.2.2). The zero-bubble schedules run W
// apart from B, so that only F and B wait on the neighbours and W fills
// the gaps (Qi et al. 2023): ZB-H1 idles (p-1)(F+B-W) (section 3.1); ZB-V
// puts two chunks of half the layers per rank in a V: only the last
// rank's first forwards wait, (p-1) of its half-size chunk forwards, once W
// is long enough to fill the rest ((p-1)(F+B-2W)/2 otherwise, as ZB-H2
// with half-size chunks; section 6). DualPipe-V's phases (DeepSeek-AI
// 2024, section 3.2.1, folded into a V) wait as long on a device without a
// second stream, where each overlapped pair runs one after the other.
// bmrt's generated lists, simulated with F = B = W, idle exactly this:
// (p-1) x F/2 of a rank's share for both V schedules, (p-1)(F+B-W) for
// ZB-H1 (runtime/schedule/test). These rank the search's configurations;
// the finalists' bubble is the simulation of their schedule's lists
// (passes/plan/PipelineTimeline).
double bm::cost::bubbleScale(ScheduleKind schedule, int chunks, PassTimes t) {
  const double total = std::max(t.total(), 1e-30);
  const double f = t.forward, b = t.backwardInput, w = t.backwardWeight;
  switch (schedule) {
  case ScheduleKind::None:
  case ScheduleKind::GPipe:
  case ScheduleKind::OneFOneB:
    return 1;
  case ScheduleKind::Interleaved:
    return 1.0 / std::max(chunks, 1);
  case ScheduleKind::ZeroBubbleH1:
    return std::max(0.0, f + b - w) / total;
  case ScheduleKind::ZeroBubbleV:
  case ScheduleKind::DualPipeV:
    return std::max(f, f + b - 2 * w) / (2 * total);
  }
  return 1;
}

double bm::cost::pipelineBubbleFraction(ScheduleKind schedule, int stages,
                                        int microBatches, int chunks,
                                        PassTimes times) {
  if (stages <= 1 || microBatches <= 0)
    return 0;
  return static_cast<double>(stages - 1) / microBatches *
         bubbleScale(schedule, chunks, times);
}

// GPipe keeps every micro-batch's activations until the flush (Huang et al.
// 2019, section 2.3). 1F1B limits stage i to p - i in flight (Narayanan et
// al. 2021, section 2.2.1). The interleaved schedule holds
// p (1 + (p-1)/(p v)) on the first stage (Korthikanti et al. 2022, section
// 4.2.3), i.e. (p - i) + (p - 1 - i)/v on stage i.
//
// The zero-bubble schedules hold a micro-batch's activations from F to B,
// and from B to W what W reads (the weights' GEMM inputs and the output
// gradients), counted as kWeightInputShare of them. The counts are the
// peaks of bmrt's generated lists, bounded from above over pp and m
// (CostModelTest checks the bounds): ZB-H1 holds 1F1B's p - i from F to B
// and i + 1 from B to W; in a V each chunk (half a rank's share) holds its
// own count (inFlightChunkMicroBatches).
double bm::cost::inFlightMicroBatches(ScheduleKind schedule, int stages,
                                      int microBatches, int chunks, int stage) {
  const double m = microBatches, p = stages, i = stage;
  auto held = [&](double fromFToB, double fromBToW) {
    return fromFToB + kWeightInputShare * fromBToW;
  };
  switch (schedule) {
  case ScheduleKind::None:
    return 1;
  case ScheduleKind::GPipe:
    return m;
  case ScheduleKind::OneFOneB:
    return std::min(m, p - i);
  case ScheduleKind::Interleaved:
    return std::min(m, (p - i) + (p - 1 - i) / std::max(chunks, 1));
  case ScheduleKind::ZeroBubbleH1:
    return held(std::min(m, p - i), std::min(m, i + 1));
  case ScheduleKind::ZeroBubbleV:
  case ScheduleKind::DualPipeV:
    return (inFlightChunkMicroBatches(schedule, stages, microBatches, stage,
                                      0) +
            inFlightChunkMicroBatches(schedule, stages, microBatches, stage,
                                      1)) /
           2;
  }
  return 1;
}

// Per chunk of a V, the peaks of the generated lists (CostModelTest checks
// the bounds): ZB-V holds p micro-batches of chunk 0 from F to B and at
// most 1.5 p from B to W, and i + 1 and p + 1 of chunk 1; DualPipe-V
// 2 p - i and min(i + 1, ceil(p / 2)) of chunk 0, i + 1 and i / 2 + 1 of
// chunk 1.
double bm::cost::inFlightChunkMicroBatches(ScheduleKind schedule, int stages,
                                           int microBatches, int stage,
                                           int chunk) {
  const double m = microBatches, p = stages, i = stage;
  auto held = [&](double fromFToB, double fromBToW) {
    return std::min(m, fromFToB) + kWeightInputShare * std::min(m, fromBToW);
  };
  if (schedule == ScheduleKind::ZeroBubbleV)
    return chunk == 0 ? held(p, 1.5 * p) : held(i + 1, p + 1);
  if (schedule == ScheduleKind::DualPipeV)
    return chunk == 0 ? held(2 * p - i, std::min(i + 1, std::ceil(p / 2)))
                      : held(i + 1, i / 2 + 1);
  return inFlightMicroBatches(schedule, stages, microBatches, 1, stage);
}
