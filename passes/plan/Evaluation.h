//===- Evaluation.h - one scored configuration and its parts ----*- C++ -*-===//
//
// The values the planner's parts pass each other: a scored configuration
// (Evaluation), the stages a configuration runs (PartitionEntry, with its
// devices), and the per-device costs a step adds to its stages' compute
// (DeviceExtras per micro-batch, StepTail per step). Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_EVALUATION_H
#define BM_PLAN_EVALUATION_H

#include "cost/CostModel.h"
#include "passes/plan/PipelinePartition.h"
#include "passes/plan/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <vector>

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
/// tensor-parallel collectives (StepCoster::deviceExtras).
struct DeviceExtras {
  double p2pLink = 0, p2pGather = 0;   // stage boundaries
  double zero3 = 0, zero3Experts = 0;  // ZeRO-3 gathers and scatters
  double exchange = 0;                 // expert all-to-all
  double sideLink = 0, sideGather = 0; // side inputs
  /// ZeRO 2 and 3 with context parallelism: each backward's gradients
  /// all-reduced over cp before their reduce-scatter over dp.
  double contextGradients = 0;
  double total() const {
    return p2pLink + p2pGather + zero3 + zero3Experts + exchange + sideLink +
           sideGather + contextGradients;
  }
};

/// Seconds a device spends once per step after the pipeline has drained.
struct StepTail {
  double dpSync = 0, expertSync = 0; // gradient / parameter synchronisation
  /// Seconds of the gradient reductions in dpSync / expertSync that run
  /// behind the last micro-batch's backward instead (not in dpSync /
  /// expertSync, which are what is left exposed).
  double dpHidden = 0, expertHidden = 0;
  double stepComm = 0; // tp all-reduce of replicated weights
  /// The pp all-reduces of the gradients of parameters several pipeline
  /// stages hold (StepCoster::sharedGradientSums).
  double sharedSync = 0;
  double optimizer = 0; // the optimizer step on the device
  /// The offloaded optimizer (Offload::Optimizer): the gradients copied to
  /// the host, its step there, the parameters back; where they run behind
  /// the next forward (cost::offloadRunsBehind), what that forward waits
  /// for, and the rest of them, hidden behind it (not in the step).
  double toHost = 0, hostOptimizer = 0, toDevice = 0;
  double toHostHidden = 0, hostOptimizerHidden = 0, toDeviceHidden = 0;
  double offload() const { return toHost + hostOptimizer + toDevice; }
  double total() const {
    return dpSync + expertSync + stepComm + sharedSync + optimizer + offload();
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
  /// Fits in device memory and (offloaded) in host memory: `fits`; whether
  /// every device's offloaded state fits in host memory: `hostFits`.
  bool fits = false;
  bool hostFits = true;
  /// Offloaded: the most host memory a device's optimizer needs, and the
  /// host step's seconds (in time.compute) of the step's tail.
  double hostNeed = 0, hostStep = 0;
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
  double boundaryBytes = 0; // activations crossing a stage boundary
  double layerParams = 0;   // parameters per GPU of one layer
  /// Per GraphAnalysis::sharedParameters(): elements per GPU, and how many
  /// devices hold a copy (StagePartitions::holdSharedParameters).
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

} // namespace bm::plan::detail

#endif // BM_PLAN_EVALUATION_H
