//===- Plan.h - the planner's result ----------------------------*- C++ -*-===//
//
// A Plan is everything `bmc plan` prints and `bmc compile --plan` reads back:
// the mesh and the schedule, the per-op sharding of each unique block, the
// collectives of one step, the predicted time and memory, and the runner-up
// plans with the reason each lost. PlanJson.cpp writes and reads it
// (schema in PLAN_SCHEMA.md); PlanText.cpp prints it for people.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_PLAN_H
#define BM_PLAN_PLAN_H

#include "passes/plan/TrainingConfig.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bm::plan {

/// Mesh axis names as they appear in `bm.mesh` and `#bm.sharding`.
inline constexpr const char *kDataAxis = "dp";
inline constexpr const char *kTensorAxis = "tp";
inline constexpr const char *kPipelineAxis = "pp";
/// Expert parallelism splits the experts of MoE layers over ep of the dp
/// ranks (ep divides dp; dense ops stay data-parallel over all of dp).
inline constexpr const char *kExpertAxis = "ep";
/// Context parallelism splits the sequence of every token-wise op over cp
/// ranks; an attention reads the keys and values of the whole sequence
/// (all-gathered over cp, Megatron-Core's context parallelism in its
/// all-gather form, as Llama 3 was trained).
inline constexpr const char *kContextAxis = "cp";
/// 2-D tensor parallelism (Optimus, Xu et al. 2021) lays each tensor group
/// out as a tp x tp2 grid: tp splits the weights' and activations' columns
/// as 1-D tensor parallelism does, tp2 splits the samples of a micro-batch
/// and the weights' other dimension (their rows), so that neither weights
/// nor activations are replicated within the grid. A weight's tp2 shards
/// are all-gathered before each use (SUMMA's broadcasts along the grid's
/// rows, batched) and its gradient reduce-scattered back.
inline constexpr const char *kTensor2Axis = "tp2";

/// Whether a plan lists mesh axis `axis` only where it splits (ep, cp,
/// tp2), so that plans without it read as before; dp, tp and pp always.
inline bool listedOnlyWhenSplit(const std::string &axis) {
  return axis == kExpertAxis || axis == kContextAxis || axis == kTensor2Axis;
}

/// The dimension of a parameter of `shape` that tp2 splits: the first that
/// tp does not (`tpDim`; -1 when tp splits none) and that tp2 divides; -1
/// where there is none (the parameter is then replicated over tp2 and its
/// gradient summed over it). The planner's costs and bm-annotate's
/// layout both read it.
inline int tensor2Dim(const std::vector<int64_t> &shape, int tpDim, int tp2) {
  if (tp2 <= 1)
    return -1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (static_cast<int>(d) != tpDim && shape[d] % tp2 == 0)
      return static_cast<int>(d);
  return -1;
}

/// The parallel configuration: what `--fix` can pin.
struct ParallelConfig {
  int dp = 1, tp = 1, pp = 1;
  /// Context-parallel degree: ranks that split each sequence.
  int cp = 1;
  /// 2-D tensor parallelism's second axis (kTensor2Axis), 1 without it.
  int tp2 = 1;
  /// With cp > 1, each rank holds two mirrored chunks of each sequence
  /// (chunks r and 2cp - 1 - r of 2cp, Megatron-Core's load balancing of
  /// causal attention), else one contiguous share.
  bool cpMirrored = false;
  /// Expert-parallel degree, a divisor of dp; 1 without experts.
  int ep = 1;
  int microBatch = 1;
  int numMicroBatches = 1;
  int zeroStage = 0;
  Recompute recompute = Recompute::None;
  ScheduleKind schedule = ScheduleKind::None;
  /// Model chunks per device (interleaved: v; zb-v and dualpipe-v: 2),
  /// else 1.
  int chunks = 1;
  /// Layout over tp of the values between blocks (the residual stream), and
  /// the dimension tp splits (-1 when replicated; see solveSegment).
  StreamLayout stream = StreamLayout::Replicated;
  int streamDim = -1;
  Offload offload = Offload::None;

  /// The virtual stage of `chunk` on pipeline device `device`, as the
  /// schedule lays stages out (bmrt::StageLayout: round the devices, or in
  /// a V).
  int virtualStage(int device, int chunk) const {
    return bmrt::virtualStageOf(bmrt::layoutOf(schedule), pp, device, chunk);
  }

  /// "dp=4,tp=8,pp=2,mb=1,zero=0,recompute=full,schedule=1f1b,v=1", and
  /// ",offload=optimizer" where the optimizer is offloaded.
  std::string str() const;
  bool operator==(const ParallelConfig &other) const;
};

/// Sharding of one tensor: for each dimension the mesh axes that split it,
/// plus the axes over which it is a partial sum (#bm.sharding).
struct TensorSharding {
  std::vector<std::vector<std::string>> dims;
  std::vector<std::string> partialAxes;
};

struct OpSharding {
  int op = -1;                 // index into ModelGraph::ops
  std::string opName;
  std::string label;
  std::string rule;            // ShardingRule::str()
  /// Factor name -> mesh axis, for each sharded factor ("i" -> "dp").
  std::vector<std::pair<std::string, std::string>> factorAxes;
  std::vector<TensorSharding> operands;
  std::vector<TensorSharding> results;
};

/// The decisions for one searched unit: the prologue, a block class, or the
/// epilogue. Every layer instance of a class gets the same decisions.
struct BlockSharding {
  std::string name;            // "prologue", "block 0", "epilogue"
  int blockClass = -1;
  int numInstances = 1;
  std::vector<OpSharding> ops;
};

struct CollectiveSummary {
  std::string kind;            // all_reduce, all_gather, ...
  std::string axis;            // dp, tp, pp
  std::string link;            // nvlink, network
  std::string phase;           // forward, backward, recompute, step
  std::string where;           // op label, "gradients", "stage boundary"
  double bytes = 0;            // per call, per GPU buffer
  int64_t countPerStep = 0;    // calls per step over one model replica
  double seconds = 0;          // all calls of the step together, exposed
  double hiddenSeconds = 0;    // and behind other work (CostItem)
};

/// One itemised cost of a step on the devices of one pipeline stage
/// (DESIGN.md section 7: a cost is itemised once and every printer reads the
/// items). The step time is the sum of the items of the critical stage
/// (Plan::criticalStage) plus the bubble item; the collectives of one model
/// replica are the communication items weighted by their stage's devices.
struct CostItem {
  enum class Kind { Compute, Collective, Transfer, Bubble, HostCopy };
  Kind kind = Kind::Compute;
  /// Compute: "gemm", "attention core", "memory-bound", "recompute",
  /// "optimizer step", "host optimizer step" (offloaded); collectives:
  /// all_reduce, all_gather, ...; transfers: send_recv; the bubble:
  /// "pipeline bubble"; copies between a device and host memory (the
  /// offloaded optimizer's): "device_to_host", "host_to_device".
  std::string what;
  std::string axis;            // mesh axis of communication, else ""
  std::string link;            // nvlink, network; "host" for host copies
  std::string phase;           // forward, backward, recompute, step, ...
  std::string where;           // op label, "gradients", "stage boundary", ...
  int stage = 0;               // first pipeline device of the stage group
  int devices = 1;             // identical devices of the group (pp ranks)
  double bytes = 0;            // per call and GPU (communication)
  int64_t count = 0;           // calls per step on one device of the group
  double seconds = 0;          // all calls of the step on one device
  /// Runs once the pipeline has drained (gradient synchronisation, the
  /// optimizer step): the step counts it from the stage where it is longest
  /// (Plan::tailStage), the rest from the critical stage.
  bool afterPipeline = false;
  /// Overlapped with other work: not part of the step time.
  bool hidden = false;
  /// Seconds of these calls that run behind other work (the gradient
  /// reductions a step starts during its last backward) and are not in
  /// `seconds`, which is what stays exposed.
  double hiddenSeconds = 0;
};

const char *toString(CostItem::Kind kind);

/// CostItem::what of the offloaded optimizer's items.
inline constexpr const char *kToHostItem = "device_to_host";
inline constexpr const char *kHostStepItem = "host optimizer step";
inline constexpr const char *kToDeviceItem = "host_to_device";

/// One bar of the pipeline timeline of a step on pipeline rank `rank`:
/// forward or backward of a micro-batch on a model chunk, or the work that
/// follows the pipeline (gradient synchronisation, optimizer step).
struct TimelineBar {
  /// Backward is the whole backward, or its B where W runs apart
  /// (WeightGrad: the zero-bubble schedules).
  /// HostCopy: the offloaded optimizer's copies of the gradients to the
  /// host and of the parameters back, either side of its (host) step.
  enum class Kind { Forward, Backward, WeightGrad, Sync, Optimizer, HostCopy };
  Kind kind = Kind::Forward;
  int rank = 0;
  int microBatch = -1;
  int chunk = 0;
  double start = 0, end = 0;   // seconds from the start of the step
};

const char *toString(TimelineBar::Kind kind);

struct TimeBreakdown {
  double compute = 0;          // GEMMs, memory-bound ops, recompute, optimizer
  double nvlink = 0;           // communication over NVLink
  double network = 0;          // communication over the network
  double bubble = 0;           // pipeline fill and drain
  double hostLink = 0;         // copies between the devices and host memory
  double total() const {
    return compute + nvlink + network + bubble + hostLink;
  }
};

struct MemoryBreakdown {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  /// Host memory that the device's offloaded optimizer holds (moments, fp32
  /// master weights, gradient copies): not device memory, not in total().
  double host = 0;
  int stage = 0;               // the pipeline stage these are for
  double total() const {
    return params + grads + optimizer + activations + buffers;
  }
};

struct Alternative {
  ParallelConfig config;
  double stepSeconds = 0;
  double memoryBytes = 0;      // worst stage
  bool fits = true;
  std::string reason;          // why it lost
  /// Its step time split, as the chosen plan's (zero in plans written
  /// before it was kept).
  TimeBreakdown time;
};

struct Plan {
  static constexpr int kSchemaVersion = 1;

  std::string modelName;
  std::string clusterName;
  /// Whether the cluster file had measured curves (`bmc calibrate`), and
  /// where and when they were measured.
  bool clusterCalibrated = false;
  std::string calibrationMachine;
  std::string calibrationDate;
  /// The cluster's grad_reduce_overlap the plan assumed: the trainer
  /// overlaps its gradient reductions with the backward where it is > 0.
  double gradReduceOverlap = 1;
  int gpus = 0;
  int64_t globalBatch = 0;
  int64_t sequenceLength = 0;
  /// Every symbolic dimension of the model's inputs but the batch, as the
  /// plan's model bound them (ModelGraph::symbolicDims): `bmc compile
  /// --plan` binds exactly these. Empty in plans that do not record them
  /// (`symbolic_dims` is written only where `sequence_length` alone does
  /// not say them).
  std::map<std::string, int64_t> symbolicDims;
  /// Whether the plan priced fused attention (ModelGraph::fusedAttention):
  /// `bmc compile --plan` fuses exactly when the plan did. Written as
  /// `fused_attention` only when true.
  bool fusedAttention = false;
  /// Why the search split the sequence (context parallelism, tried only
  /// where nothing fits without it): the smallest plan without it; empty
  /// where --fix asked for it or it is not used.
  std::string contextReason;
  /// How the best 2-D tensor-parallel grid compared with the best 1-D plan
  /// ("chosen: ..." or "not chosen: ..."); empty where none was searched.
  std::string tensor2Reason;
  Precision precision = Precision::Bf16Mixed;
  Optimizer optimizer = Optimizer::Adam;

  ParallelConfig config;
  /// Layers of each pipeline stage (for the interleaved schedule: of each
  /// virtual stage, in order; virtual stage k runs on device k % pp).
  std::vector<int> layersPerStage;

  /// Fold: numLayers layers in numBlockClasses unique blocks.
  int numLayers = 0;
  int numBlockClasses = 0;
  /// Attention layers in one block (0 without attention, or with several
  /// block classes): what Megatron-LM counts as layers per block (an MoE
  /// model that alternates dense and expert layers folds them in pairs).
  int attentionsPerBlock = 0;
  /// Mixture of experts (numExperts 0 without): the experts of each expert
  /// layer, how many a token is routed to (0 if not found), and for each
  /// attention layer of the block, in order, whether its feed-forward is a
  /// mixture of experts (empty with several block classes).
  int numExperts = 0;
  int routerTopK = 0;
  std::vector<bool> expertLayersPerBlock;
  std::vector<BlockSharding> blocks;

  /// Derived from `items` (collectivesOf): what a replica runs per step.
  std::vector<CollectiveSummary> collectives;
  /// The search's step time and its split; the items add up to them.
  TimeBreakdown time;
  /// The worst stage of `stageMemory`.
  MemoryBreakdown memory;
  /// Every cost of the step, per stage group (see CostItem).
  std::vector<CostItem> items;
  /// The stage whose items make the step time (first device of its group).
  int criticalStage = 0;
  /// The stage whose after-pipeline items make the end of the step.
  int tailStage = 0;
  /// Memory per GPU of the first device of each stage group.
  std::vector<MemoryBreakdown> stageMemory;
  /// The simulated schedule of one step: every pipeline rank's bars; the
  /// last bar ends at the step time.
  std::vector<TimelineBar> timeline;
  /// Each virtual stage's forward, backward and W seconds per micro-batch
  /// that the schedule's lists were generated and simulated with (empty
  /// without a pipeline). `bmc compile` writes them into trainer.json, so
  /// that the trainer generates the lists the plan priced (ZB-V's order
  /// follows the costs).
  std::vector<double> stageForward, stageBackward, stageWeight;
  double deviceMemoryBytes = 0;
  /// Host memory per GPU for offloaded state, where the plan offloads: the
  /// cluster's host_memory_gib, or 0 where the offloaded state shares the
  /// device's own memory (no host link, or host_memory_gib 0: a CPU).
  double hostMemoryBytes = 0;

  double stepSeconds = 0;
  double mfu = 0;              // model FLOPs (no recompute) / peak
  double hardwareTflopsPerGpu = 0; // with recompute, as Megatron counts
  double tokensPerSecond = 0;
  double modelFlopsPerStep = 0;
  /// How many ways tensor parallelism divides the compute: a micro-batch's
  /// compute on one GPU over its compute on each GPU of a tp group (tp for
  /// a perfect split; 1 where every op is replicated over tp). The GPUs
  /// with distinct work are gpus x tpComputeSplit / tp.
  double tpComputeSplit = 1;
  double distinctWorkGpus() const {
    return config.tp > 0 ? gpus * tpComputeSplit / config.tp : gpus;
  }
  /// Whether most of a tp group's GPUs repeat each other's work: tp
  /// divides the compute fewer than tp / 2 ways.
  bool tpMostlyRepeats() const {
    return config.tp > 1 && tpComputeSplit < config.tp / 2.0;
  }

  /// How much searching it took, for --explain.
  int64_t configurationsEvaluated = 0;
  int64_t blockSearches = 0;

  std::vector<Alternative> alternatives;
};

} // namespace bm::plan

#endif // BM_PLAN_PLAN_H
