//===- CostModel.h - analytic costs of compute, memory, communication -----===//
//
// The planner's cost model (DESIGN.md section 4). Everything here is a closed
// formula over the cluster description; the formulas cite their sources
// where they are defined (CostModel.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef BM_COST_COSTMODEL_H
#define BM_COST_COSTMODEL_H

#include "cost/Cluster.h"

#include "bmrt/Schedule.h"

#include <optional>
#include <string>
#include <vector>

namespace bm::cost {

/// Mixed precision keeps fp32 master weights and computes in 16 bits: bf16
/// where the GPU has it (Ampere on), else fp16 with loss scaling (V100).
enum class Precision { Bf16Mixed, Fp16Mixed, Fp32 };
/// Adam(W) and LAMB keep two fp32 moments per parameter, SGD and LARS one
/// momentum buffer.
enum class Optimizer { Adam, Sgd, Lamb, Lars };
/// The pipeline schedule: one type for the planner and the trainer that
/// runs it (bmrt/Schedule.h), spelled by bmrt::toString.
using bmrt::ScheduleKind;

const char *toString(Precision precision);
/// "bf16", "fp16" or "fp32"; nullopt for anything else.
std::optional<Precision> parsePrecision(llvm::StringRef text);
/// The cluster's `precision` where it names one, else bf16 where the
/// cluster's GPUs have it, else fp16.
Precision defaultPrecision(const Cluster &cluster);
/// "adam", "sgd", "lamb", "lars" (bmc's --optimizer and plan.json).
const char *toString(Optimizer optimizer);
std::optional<Optimizer> parseOptimizer(llvm::StringRef text);
/// The trainer's name (trainer.json): "adamw" for Adam (decoupled weight
/// decay), else as toString.
const char *trainerName(Optimizer optimizer);

/// One communicator group of a mesh axis, as placed on the nodes.
struct CommGroup {
  int size = 1;
  /// Ranks of one group that share a node.
  int ranksPerNode = 1;
  bool crossesNodes = false;
};

/// Where the groups of each mesh axis lie. Ranks are numbered tp innermost,
/// then dp, then pp (Megatron's order, Narayanan et al. 2021 section 3.3:
/// tensor parallelism inside a node, where its frequent all-reduces are
/// cheapest; pipeline stages outermost, where only point-to-point traffic
/// crosses).
struct MeshPlacement {
  CommGroup tp;
  /// 2-D tensor parallelism's rows: tp2 ranks at stride tp, what gathers
  /// each weight's row shards (one grid's ranks are consecutive).
  CommGroup tp2;
  /// The ranks that sum each parameter's gradient: dp's, times cp's with
  /// context parallelism (each cp rank holds a replica too).
  CommGroup dp;
  /// Context parallelism's cp ranks right after tp (stride tp), as
  /// Megatron-Core orders tp-cp-dp-pp: what gathers an attention's keys
  /// and values.
  CommGroup cp;
  /// The ranks ZeRO shards over: dp's alone (stride tp x cp); each cp rank
  /// holds its dp peers' shard. The same group as `dp` without cp.
  CommGroup dpShards;
  /// Expert parallelism takes the ep innermost of the dp ranks (stride tp):
  /// `ep` exchanges tokens all-to-all, `expertDp` (the other dp / ep) syncs
  /// expert gradients.
  CommGroup ep;
  CommGroup expertDp;
  /// One rank of every pipeline stage (stride dp x tp): what sums the
  /// gradient of a parameter several stages hold (tied embeddings).
  CommGroup pp;
  /// Whether some pair of neighbouring pipeline stages sits on two nodes.
  bool pipelineCrossesNodes = false;
};

/// `dp` counts the data-parallel ranks without cp's.
MeshPlacement placeMesh(const Cluster &cluster, int dp, int tp, int pp,
                        int ep = 1, int cp = 1, int tp2 = 1);

/// A measured GEMM rate grid (Calibration::gemm) ready for lookups: the
/// sizes of each dimension, ascending, and the rates in (m, n, k) order.
struct GemmRateGrid {
  std::vector<double> ms, ns, ks;
  std::vector<double> flopsPerSecond;

  bool empty() const { return flopsPerSecond.empty(); }
  /// The rate at (m, n, k): multilinear in log2 of each size between the
  /// grid points around it, clamped to the grid's edges.
  double rate(double m, double n, double k) const;
};

/// `gemm` must be a full grid sorted by (m, n, k), as parseCluster leaves it.
GemmRateGrid makeGemmRateGrid(const std::vector<GemmPoint> &gemm);

/// nccl-tests' bus factor of `kind` on `ranks` ranks: busbw = algbw * factor.
double busFactor(CollectiveKind kind, int ranks);

/// The time of one call on `bytes` from the measurements of one (kind, link,
/// group size), sorted by bytes: piecewise linear in log(bytes)-log(time)
/// between measured sizes; below the smallest, the smallest's time; above
/// the largest, its time plus the extra bytes at its bus bandwidth.
double interpolateCollectiveTime(llvm::ArrayRef<CollectivePoint> measured,
                                 double bytes);

class CostModel {
public:
  CostModel(const Cluster &cluster, Precision precision);

  /// Peak FLOP/s per GPU at the training precision.
  double peakFlops() const;
  /// Bytes per element of activations and of gradients in flight.
  int activationBytes() const { return precision_ == Precision::Fp32 ? 4 : 2; }

  /// Fraction of peak a GEMM of shape (M x K) * (K x N) reaches: the
  /// measured rate over the peak where the cluster has a GEMM grid.
  double gemmEfficiency(double m, double n, double k) const;
  /// Seconds for a contraction of `flops` FLOPs with GEMM shape M, N, K.
  double gemmTime(double flops, double m, double n, double k) const;
  /// Seconds for a memory-bound kernel of class `kernelClass` moving `bytes`
  /// (read + written): at the class's measured rate, else at the streaming
  /// rate hbm_gbps * memory_efficiency.
  double memoryTime(double bytes, MemoryKernelClass kernelClass) const;
  /// The same for an elementwise kernel.
  double memoryTime(double bytes) const {
    return memoryTime(bytes, MemoryKernelClass::Elementwise);
  }

  LinkClass linkClass(const CommGroup &group) const {
    return group.crossesNodes ? LinkClass::InterNode : LinkClass::IntraNode;
  }
  /// nccl-tests bus bandwidth available to one group, bytes/s.
  double busBandwidth(const CommGroup &group) const;
  /// Seconds for a collective over `group` on a buffer of `bytes`: the
  /// all-reduce size, the all-gather output, the reduce-scatter input, the
  /// per-rank all-to-all buffer.
  double collectiveTime(CollectiveKind kind, double bytes,
                        const CommGroup &group) const;
  /// Seconds for one point-to-point transfer between pipeline stages.
  double sendRecvTime(double bytes, bool crossesNodes) const;

private:
  /// The measured time of `kind` on `ranks` ranks over `link`, or nullopt
  /// where the cluster has no measurement of that kind, link and size.
  std::optional<double> measuredCollectiveTime(CollectiveKind kind,
                                               LinkClass link, int ranks,
                                               double bytes) const;

  Cluster cluster_;
  Precision precision_;
  GemmRateGrid gemmGrid_;
};

/// The trainer reduces gradients in buckets of this many bytes, each
/// started once all of its gradients are final (as PyTorch DDP's buckets;
/// the trainer's --bucket-mb default).
inline constexpr double kGradientBucketBytes = 4.0 * 1024 * 1024;

/// Seconds of a data-parallel gradient reduction that hide behind the
/// backward pass. The reduction of `gradientBytes` takes `reduceSeconds`
/// alone; it runs in buckets that become ready evenly over `backwardSeconds`
/// of backward compute; while compute runs, it proceeds at `overlap` of its
/// own speed. The last bucket is ready only when the backward ends, so at
/// most (n-1)/n of both the reduction and the backward overlap.
double hiddenGradientReduction(double reduceSeconds, double gradientBytes,
                               double backwardSeconds, double overlap);

/// Bytes of each kind of model state per parameter, before ZeRO.
struct ModelStateBytes {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
  double total() const { return params + grads + optimizer; }
};

/// Model-state bytes per parameter before any sharding.
ModelStateBytes modelStateBytesPerParam(Precision precision,
                                        Optimizer optimizer);
/// Model-state bytes per GPU holding `params` parameters, after ZeRO stage
/// `zeroStage` shards them over `dp` data-parallel ranks.
ModelStateBytes modelStateMemory(double params, Precision precision,
                                 Optimizer optimizer, int zeroStage, int dp);
/// Bytes the optimizer step reads and writes per parameter it updates.
double optimizerStepBytesPerParam(Precision precision, Optimizer optimizer);

/// What an optimizer offloaded to the host (ZeRO-Offload, Ren et al. 2021;
/// issue 29) moves and keeps per parameter of a rank's range.
struct OffloadBytes {
  double toHost = 0;   // the gradient, copied device -> host
  double toDevice = 0; // the updated parameter, copied host -> device
  double held = 0;     // host memory: moments, fp32 master, gradient copy
  double step = 0;     // the host's optimizer step, read + written
};
OffloadBytes offloadBytesPerParam(Precision precision, Optimizer optimizer,
                                  RuntimeModel runtime);
/// Whether the offloaded host step of `optimizer` runs behind the next
/// forward: bmrt's OptimizerOffload does so where an update of a range
/// reads that range alone (Adam, SGD), not for LAMB and LARS, whose trust
/// ratios sum norms over the ranks holding a tensor's parts. ZeRO-Offload
/// overlaps it only by delaying the update a step (its DPU), which the
/// planner does not model.
bool offloadRunsBehind(Optimizer optimizer, RuntimeModel runtime);

/// One micro-batch's pass through a stage, split as the zero-bubble
/// schedules split it: forward, B (the input's gradient) and W (the
/// weights'). The default is Qi et al. 2023's equal thirds.
struct PassTimes {
  double forward = 1, backwardInput = 1, backwardWeight = 1;
  double total() const { return forward + backwardInput + backwardWeight; }
};
/// A pipeline's bubble as a multiple of 1F1B's (p-1)(F+B+W) with the same
/// stages: 1 for GPipe and 1F1B, 1/v interleaved, and the zero-bubble
/// schedules' closed forms (see CostModel.cpp).
double bubbleScale(ScheduleKind schedule, int chunks, PassTimes times = {});
/// Idle fraction of a pipeline relative to the ideal time m * t: GPipe and
/// 1F1B (p-1)/m, interleaved 1F1B (p-1)/(v m), the others (p-1)/m scaled
/// by bubbleScale.
double pipelineBubbleFraction(ScheduleKind schedule, int stages,
                              int microBatches, int chunks,
                              PassTimes times = {});
/// What W of a split backward reads (the weights' GEMM inputs and output
/// gradients, and weight gradients B wrote), as a share of what the
/// backward reads from the forward: an estimate. bmrt's stashes
/// (Executor::weightStashBytes / stashBytes) measure 0.80 for
/// gpt3-small-cpu's fp32 layers, 0.34 for the stage with the LM head and
/// 1.05 for the embedding's; with 0.8 for all, the planner overpredicts
/// ZB-H1's activations on 2 CPU ranks 1.7x, with 0.5 it underpredicts them
/// as it does 1F1B's (bench/README.md). One share per stage would follow
/// the graph.
inline constexpr double kWeightInputShare = 0.5;
/// Micro-batches whose activations stage `stage` holds at its peak, in units
/// of the stage's whole share of layers (W's inputs counted as
/// kWeightInputShare of a micro-batch).
double inFlightMicroBatches(ScheduleKind schedule, int stages, int microBatches,
                            int chunks, int stage);
/// The same per chunk for the V layouts (zb-v, dualpipe-v), in units of
/// the chunk's own layers: the chunk that computes the loss (chunk 1 of
/// rank 0) runs each B right after its F, the chunk before it holds most.
double inFlightChunkMicroBatches(ScheduleKind schedule, int stages,
                                 int microBatches, int stage, int chunk);

} // namespace bm::cost

#endif // BM_COST_COSTMODEL_H
