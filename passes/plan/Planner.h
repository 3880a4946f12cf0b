//===- Planner.h - the search's internal state (not installed) --*- C++ -*-===//
//
// Shared by Search.cpp (enumeration, branch and bound, errors), StepCost.cpp
// (time and memory of one configuration) and PlanAssembly.cpp (the Plan the
// user sees). Not part of the library's interface: use Search.h.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_PLANNER_H
#define BM_PLAN_PLANNER_H

#include "compiler/cost/CostModel.h"
#include "passes/plan/GraphAnalysis.h"
#include "passes/plan/IntraOpSearch.h"
#include "passes/plan/PipelinePartition.h"
#include "passes/plan/Plan.h"
#include "passes/plan/TrainingConfig.h"

#include "llvm/Support/Error.h"

#include "bmrt/Schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace bmrt {
struct ActionCosts;
struct SimulationResult;
} // namespace bmrt

namespace bm::plan {

/// Simulates the schedule the trainer runs (runtime/schedule) with the given
/// per-virtual-stage costs; nullopt when no such schedule exists.
std::optional<bmrt::SimulationResult>
simulateSchedule(PipelineSchedule schedule, int pp, int chunks,
                 int microBatches, const bmrt::ActionCosts &costs);

} // namespace bm::plan

namespace bm::plan::detail {

using cost::kGiB;
inline constexpr double kInfinity = std::numeric_limits<double>::infinity();
/// The search proves the best plan optimal, and the runner-ups within this
/// factor of it (branch and bound prunes the rest).
inline constexpr double kAlternativeSlack = 1.25;

/// Packs non-negative integers into one 64-bit key; each field gets the
/// given number of bits (the sum must be <= 64) and must fit in them.
struct KeyField {
  int value;
  unsigned bits;
};
inline uint64_t packKey(std::initializer_list<KeyField> fields) {
  uint64_t key = 0;
  for (const KeyField &field : fields)
    key = (key << field.bits) |
          (static_cast<uint64_t>(field.value) & ((1ULL << field.bits) - 1));
  return key;
}

struct PartitionEntry;
class ItemList;

/// Passes over a micro-batch that read the parameters: forward, backward,
/// and the recomputed forward under full recomputation.
inline int parameterPasses(Recompute recompute) {
  return recompute == Recompute::Full ? 3 : 2;
}

/// A collective over the data-parallel group that ZeRO runs on a stage's
/// parameters or gradients.
struct DataParallelCollective {
  cost::CollectiveKind kind;
  const char *phase;     // "step", "forward" or "backward"
  bool gradients;        // it moves gradients, else parameters
  int64_t perMicroBatch; // > 0: on every micro-batch's path (ZeRO-3)
  int64_t perStep;       // how many per step
};

/// Seconds per micro-batch a device spends beyond its stages' compute and
/// tensor-parallel collectives (Planner::deviceExtras).
struct DeviceExtras {
  double p2pLink = 0, p2pGather = 0;   // stage boundaries
  double zero3 = 0, zero3Experts = 0;  // ZeRO-3 gathers and scatters
  double exchange = 0;                 // expert all-to-all
  double sideLink = 0, sideGather = 0; // side inputs
  double total() const {
    return p2pLink + p2pGather + zero3 + zero3Experts + exchange + sideLink +
           sideGather;
  }
};

/// Seconds a device spends once per step after the pipeline has drained.
struct StepTail {
  double dpSync = 0, expertSync = 0; // gradient / parameter synchronisation
  /// Seconds of the gradient reductions in dpSync / expertSync that run
  /// behind the last micro-batch's backward instead (not in dpSync /
  /// expertSync, which are what is left exposed).
  double dpHidden = 0, expertHidden = 0;
  double stepComm = 0;               // tp all-reduce of replicated weights
  /// The pp all-reduces of the gradients of parameters several pipeline
  /// stages hold (Planner::sharedGradientSums).
  double sharedSync = 0;
  double optimizer = 0;              // the optimizer step
  double total() const {
    return dpSync + expertSync + stepComm + sharedSync + optimizer;
  }
};

/// The all-reduce over pp of one shared parameter's gradient on a device.
struct SharedGradientSum {
  double bytes = 0;
  cost::CommGroup group;
  double seconds = 0;
};

struct Evaluation {
  ParallelConfig config;
  double step = kInfinity;
  TimeBreakdown time;
  MemoryBreakdown memory;
  bool fits = false;
  /// Indices into the partition's devices: the slowest per micro-batch
  /// (its per-micro-batch load `slowest`) and the longest step tail.
  int critical = 0, tail = 0;
  double slowest = 0;
  /// Whether the bubble comes from simulating the schedule (retime).
  bool simulated = false;
  /// Set when the stages were rebalanced for memory (not the cached,
  /// time-balanced partition).
  std::shared_ptr<const PartitionEntry> ownPartition;
};

/// Stages as the devices see them: for the interleaved schedule a device
/// runs chunks k, k + pp, ...; consecutive identical devices are grouped.
struct DeviceGroup {
  int firstDevice = 0;
  int numDevices = 1;
  StageStats stats;
};

struct PartitionEntry {
  std::vector<StageGroup> stages; // virtual stages
  std::vector<DeviceGroup> devices;
  double boundaryBytes = 0;       // activations crossing a stage boundary
  double layerParams = 0;         // parameters per GPU of one layer
  /// Per GraphAnalysis::sharedParameters(): elements per GPU, and how many
  /// devices hold a copy (Planner::holdSharedParameters).
  std::vector<double> sharedElements;
  std::vector<int> sharedHolders;
};

/// Whether two step times are equal to rounding.
inline bool sameStepTime(double a, double b) {
  return std::isfinite(a) && std::isfinite(b) &&
         std::abs(a - b) <= 1e-9 * std::max(a, b);
}

/// Orders evaluations: faster first; equal times (to rounding) prefer less
/// memory, so ties never depend on the enumeration order alone.
inline bool better(const Evaluation &a, const Evaluation &b) {
  if (!sameStepTime(a.step, b.step))
    return a.step < b.step;
  return a.memory.total() < b.memory.total() - 1;
}

class Planner {
public:
  Planner(const ModelGraph &graph, const cost::Cluster &cluster,
          const TrainingConfig &config)
      : graph_(graph), cluster_(cluster), config_(config),
        precision_(config.precision.value_or(cost::defaultPrecision(cluster))),
        analysis_(graph, config.fold, cluster.runtime),
        model_(cluster, precision_),
        perParam_(cost::modelStateBytesPerParam(precision_,
                                                config.optimizer)),
        segments_(analysis_.segments()) {
    // The default: one sample per GPU, rounded up to whole token groups.
    const int64_t unit = graph.batchGranularity;
    globalBatch_ = config.globalBatch > 0
                       ? config.globalBatch
                       : (std::max(config.gpus, 1) + unit - 1) / unit * unit;
    // Everything between the prologue and the epilogue, in order: runs of
    // layers and the interludes between them.
    for (auto [segment, count] : analysis_.sequence()) {
      SegmentKind kind = segments_[segment].kind;
      if (kind == SegmentKind::Layer || kind == SegmentKind::Interlude)
        layerRuns_.push_back({segment, count});
    }
    for (size_t s = 0; s < segments_.size(); ++s) {
      if (segments_[s].kind == SegmentKind::Prologue)
        prologue_ = static_cast<int>(s);
      if (segments_[s].kind == SegmentKind::Epilogue)
        epilogue_ = static_cast<int>(s);
      if (segments_[s].kind == SegmentKind::Layer && firstLayerSegment_ < 0)
        firstLayerSegment_ = static_cast<int>(s);
    }
    findSharedOwners();
  }

  llvm::Error validate() const;
  /// Enumerates the configurations that --fix allows.
  void run();
  /// The best plan, or why there is none; `suggest` adds what would fit.
  llvm::Expected<Plan> result(bool suggest);

private:
  void findSharedOwners();
  /// `stream` is the stream layout (see solveSegment): -1 replicated, else
  /// the dimension of the border values that tp splits.
  const SegmentSolution &solution(int segment, int tp, int microBatch,
                                  int stream);
  /// A stream layout and the dimension it splits (-1 for replicated).
  struct StreamOption {
    StreamLayout layout;
    int dim;
  };
  /// The stream layouts to try at tensor degree `tp`: replicated, and each
  /// dimension that tp may split of a value with a gradient entering the
  /// first layer, allowed by --fix and by `megatronOnly`.
  std::vector<StreamOption> streamOptions(int tp) const;
  /// The tensor-parallel degrees the search tries.
  std::vector<int> tpOptions() const;
  StageStats itemStats(int segment, int tp, int microBatch, int stream,
                       Recompute recompute);
  /// Elements per GPU of each of GraphAnalysis::sharedParameters(), split
  /// over tp as its owner op's chosen sharding stores it.
  std::vector<double> sharedParameterElements(int tp, int microBatch,
                                              int stream);
  /// Gives each device of `entry` the shared parameters it holds (in its
  /// stats' `shared`, `params` and `sharedParams`) and fills the entry's
  /// sharedElements and sharedHolders.
  void holdSharedParameters(PartitionEntry &entry,
                            const ParallelConfig &config);
  /// Model-state and gradient-output bytes of the shared parameters that
  /// device `device` of `entry` holds.
  double heldSharedBytes(const PartitionEntry &entry, int device,
                         const ParallelConfig &config) const;
  /// The time-balanced stages of `config` (cached).
  const PartitionEntry &partition(const ParallelConfig &config);
  /// Seconds of all items (prologue, layers, epilogue) for one micro-batch.
  double workPerMicroBatch(int tp, int microBatch, int stream,
                           Recompute recompute);
  std::vector<ItemRun> itemRuns(int tp, int microBatch, int stream,
                                Recompute recompute);
  Evaluation evaluate(const ParallelConfig &config);
  /// Time and memory of `config` with the stages of `entry`.
  Evaluation score(const ParallelConfig &config, const PartitionEntry &entry);
  std::shared_ptr<const PartitionEntry>
  memoryBalancedPartition(const ParallelConfig &config,
                          const PartitionEntry &entry);
  /// Model-state bytes per GPU of a stage's parameters under `config`.
  cost::ModelStateBytes modelState(const StageStats &stats,
                                   const ParallelConfig &config) const;
  /// What ZeRO stage `config.zeroStage` runs over dp for a stage's
  /// parameters, in order.
  std::vector<DataParallelCollective>
  dataParallelCollectives(const ParallelConfig &config) const;
  /// Seconds of those collectives for `params` parameters over `group`:
  /// with `perMicroBatch`, of the ones on each micro-batch's path (ZeRO-3)
  /// for one micro-batch; else of the others for one step (gradient and
  /// parameter synchronisation).
  double dataParallelTime(double params, const ParallelConfig &config,
                          const cost::CommGroup &group,
                          bool perMicroBatch) const;
  /// Seconds of the gradient reductions that backwards start (and could
  /// hide behind them), for `params` over `group`, per step.
  double stepGradientReductionTime(double params, const ParallelConfig &config,
                                   const cost::CommGroup &group) const;
  DeviceExtras deviceExtras(const StageStats &stats,
                            const ParallelConfig &config,
                            const cost::MeshPlacement &placement,
                            double boundary, int chunks) const;
  StepTail stepTail(const StageStats &stats, const ParallelConfig &config,
                    const cost::MeshPlacement &placement,
                    const PartitionEntry &entry) const;
  /// The all-reduces over pp of the gradients of the shared parameters a
  /// device with `stats` holds with other devices, one per parameter.
  std::vector<SharedGradientSum>
  sharedGradientSums(const StageStats &stats, const ParallelConfig &config,
                     const cost::MeshPlacement &placement,
                     const PartitionEntry &entry) const;
  /// Elements per GPU of a device's dense parameters whose gradients the
  /// data-parallel reduction may start during the backward.
  double overlappableParams(const StageStats &stats) const;
  void hideGradientReductions(StepTail &tail, const StageStats &stats,
                              const ParallelConfig &config,
                              const cost::MeshPlacement &placement) const;
  /// Bytes of bmrt's gradient buckets (overlapped reductions).
  double bucketBytes(const StageStats &stats,
                     const ParallelConfig &config) const;
  /// Bytes of the parameters a ZeRO-3 device holds gathered at a time.
  double gatheredParameterBytes(const ParallelConfig &config,
                                double layerParams) const;
  double largestLocalParameter(const ParallelConfig &config) const;
  /// Copies of a stage's saved values that the trainer holds with
  /// `inFlight` micro-batches in flight.
  double storedCopies(const ParallelConfig &config, double inFlight) const;
  /// Bytes of the step program's own gradient outputs beside the sums in
  /// modelState.
  double gradientOutputBytes(const StageStats &stats,
                             const ParallelConfig &config) const;
  MemoryBreakdown deviceMemory(const DeviceGroup &group,
                               const ParallelConfig &config,
                               const PartitionEntry &entry) const;
  /// The stages of `e` (its own partition, or the cached one).
  const PartitionEntry &partitionOf(const Evaluation &e);
  /// The schedule's per-virtual-stage forward and backward times of `e`.
  bmrt::ActionCosts scheduleCosts(const Evaluation &e);
  /// Per chunk of `device`, its part of the device's `deviceSeconds` of
  /// per-micro-batch transfers (DeviceExtras); the parts add up to them.
  std::vector<double> chunkExtras(int device, double deviceSeconds,
                                  const PartitionEntry &entry,
                                  const ParallelConfig &config,
                                  const cost::MeshPlacement &placement,
                                  const std::vector<StageStats> &stages) const;
  /// `e` with the bubble of its schedule simulated with the stages' forward
  /// and backward times instead of the closed form (ScheduleCost.cpp); the
  /// simulation's bars are kept for the timeline.
  Evaluation retime(const Evaluation &e);
  /// Retimes the best plans of the meshes that are shown, keeps only
  /// those, and picks the best again.
  void retimeFinalists();
  /// The simulated pipeline of `e`: every rank's forward and backward
  /// bars; `pipelineEnd` is when the last one ends.
  std::vector<TimelineBar> simulatePipeline(const Evaluation &e,
                                            double &pipelineEnd);
  /// The simulated pipeline of the chosen plan and each rank's step tail.
  std::vector<TimelineBar> timeline(const Evaluation &chosen);
  /// (segment, instances) on each virtual stage of `entry`, in order.
  std::vector<std::vector<std::pair<int, int64_t>>>
  stageContents(const PartitionEntry &entry, const ParallelConfig &config);
  /// Every cost of the step of `e` (StepItems.cpp), per stage group: the
  /// compute and tensor-parallel collectives of the segments it holds, its
  /// per-micro-batch transfers, its data-parallel collectives and
  /// optimizer step; and the bubble.
  std::vector<CostItem> itemise(const Evaluation &e);
  void itemiseSegments(ItemList &list, const std::map<int, int64_t> &held,
                       const ParallelConfig &config,
                       const cost::MeshPlacement &placement);
  void itemiseTransfers(ItemList &list, const StageStats &stats,
                        const ParallelConfig &config,
                        const cost::MeshPlacement &placement,
                        const PartitionEntry &entry);
  void itemiseDataParallel(ItemList &list, const StageStats &stats,
                           const ParallelConfig &config,
                           const cost::MeshPlacement &placement,
                           const PartitionEntry &entry);
  void consider(const Evaluation &evaluation);
  Plan buildPlan(const Evaluation &chosen);
  double boundaryBytes(int tp, int microBatch, int stream);
  /// Bytes per micro-batch of the side inputs of a layer segment (see
  /// GraphAnalysis::sideInputs), which every stage holding it receives.
  double sideInputBytes(int segment, int microBatch);
  /// Whether `segment` produces side inputs of some layer class.
  bool makesSideInputs(int segment);
  /// Bytes per micro-batch of the side inputs `segment` makes that its
  /// solution counts as saved (for their readers' backward).
  double madeSideInputBytes(int segment, int tp, int microBatch, int stream);
  /// Bytes per micro-batch of side input `value`, whole.
  double sideInputValueBytes(int value, int microBatch) const;
  std::string suggestion() const;
  /// Why --fix leaves no configuration to score when candidates exist: no
  /// schedule it allows runs on them, or its ZeRO stage needs dp > 1.
  std::string whyFixedChoicesExcludeAll() const;
  /// Kinds of layers (block classes), and the attention layers in one
  /// block when there is one kind (else 0): what Megatron-LM's arguments
  /// need to describe the model.
  int numBlockClasses() const;
  int attentionsPerBlock() const;

  const ModelGraph &graph_;
  const cost::Cluster &cluster_;
  const TrainingConfig &config_;
  /// The training precision: config_.precision or the cluster's default.
  const cost::Precision precision_;
  GraphAnalysis analysis_;
  cost::CostModel model_;
  /// Bytes of parameters, gradients and optimizer state per parameter.
  const cost::ModelStateBytes perParam_;
  std::vector<Segment> segments_;
  /// Between prologue and epilogue, in order: (segment, instances) for runs
  /// of layers and for interludes.
  std::vector<std::pair<int, int64_t>> layerRuns_;
  int prologue_ = -1, epilogue_ = -1, firstLayerSegment_ = -1;
  /// Per GraphAnalysis::sharedParameters(): the segment holding its owner
  /// op and the owner's position there; -1, -1 for an owner no segment
  /// holds.
  std::vector<std::pair<int, int>> sharedOwners_;
  int64_t globalBatch_ = 0;

  // Caches, keyed by packKey of their arguments.
  std::unordered_map<uint64_t, SegmentSolution> solutions_;
  std::unordered_map<uint64_t, PartitionEntry> partitions_;
  std::unordered_map<uint64_t, double> work_;
  std::vector<char> sideInputSources_; // per segment, see makesSideInputs
  /// The simulated pipelines of the retimed finalists, by config.str():
  /// every rank's bars and when the last ends.
  std::map<std::string, std::pair<std::vector<TimelineBar>, double>>
      simulated_;

  /// How far the search got: some (mesh, micro-batch, recomputation,
  /// stream) was a candidate, some schedule of one passed --fix, and the
  /// configurations scored.
  bool hadCandidates_ = false, passedSchedule_ = false;
  int64_t evaluated_ = 0;
  bool haveBest_ = false;
  Evaluation best_;
  Evaluation fastestOutOfMemory_;
  Evaluation smallestMemory_;
  /// The best plan of each (dp, tp, pp, stream layout).
  std::map<std::tuple<int, int, int, int>, Evaluation> bestPerMesh_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_PLANNER_H
