//===- StepCoster.h - time and memory of one configuration ------*- C++ -*-===//
//
// Prices a configuration whose stages are laid out (a PartitionEntry): what
// each device spends per micro-batch beyond its stages (DeviceExtras), once
// per step after the pipeline has drained (StepTail), and the memory it
// holds; score() turns them into the step time and the worst device's
// memory. Stateless besides the context: every part above may ask it.
// Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_STEPCOSTER_H
#define BM_PLAN_STEPCOSTER_H

#include "passes/plan/Evaluation.h"
#include "passes/plan/PlanContext.h"

#include <vector>

namespace bm::plan::detail {

class StepCoster {
public:
  explicit StepCoster(const PlanContext &ctx) : ctx_(ctx) {}

  /// The group ZeRO's (and data parallelism's) collectives of `config` run
  /// over.
  const cost::CommGroup &
  dataParallelGroup(const ParallelConfig &config,
                    const cost::MeshPlacement &placement) const;
  /// Time and memory of `config` with the stages of `entry`.
  Evaluation score(const ParallelConfig &config,
                   const PartitionEntry &entry) const;
  /// Model-state bytes per GPU of a stage's parameters under `config` (no
  /// optimizer state where it is offloaded).
  cost::ModelStateBytes modelState(const StageStats &stats,
                                   const ParallelConfig &config) const;
  /// Parameters of a stage that one of its devices steps: its range.
  double updatedParams(const StageStats &stats,
                       const ParallelConfig &config) const;
  /// Host memory a device of a stage holds for its offloaded optimizer.
  double hostBytes(const StageStats &stats, const ParallelConfig &config) const;
  /// A lower bound on the step of `e`'s configuration with its optimizer
  /// offloaded, on `e`'s stages `entry`: `e`'s step with its tail device's
  /// optimizer step replaced by the offloaded one's copies and host step.
  double offloadedStep(const Evaluation &e, const PartitionEntry &entry) const;
  /// Whether a device's offloaded state fits in host memory (where the
  /// cluster's host memory is the device's: in it beside the rest).
  bool hostFits(const MemoryBreakdown &mem) const;
  /// What ZeRO stage `config.zeroStage` runs over dp for a stage's
  /// parameters, in order.
  std::vector<DataParallelCollective>
  dataParallelCollectives(const ParallelConfig &config) const;
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
  /// Bytes of the parameters a ZeRO-3 device holds gathered at a time.
  double gatheredParameterBytes(const ParallelConfig &config,
                                double layerParams) const;
  /// Copies of a stage's saved values that the trainer holds with
  /// `inFlight` micro-batches in flight.
  double storedCopies(const ParallelConfig &config, double inFlight) const;
  /// The saved values a device of `group` holds at its peak.
  double heldActivationBytes(const DeviceGroup &group,
                             const ParallelConfig &config,
                             const PartitionEntry &entry) const;
  /// Bytes of the step program's own gradient outputs beside the sums in
  /// modelState.
  double gradientOutputBytes(const StageStats &stats,
                             const ParallelConfig &config) const;
  MemoryBreakdown deviceMemory(const DeviceGroup &group,
                               const ParallelConfig &config,
                               const PartitionEntry &entry) const;
  /// The mesh of `config` laid out on the cluster.
  cost::MeshPlacement meshOf(const ParallelConfig &config) const;

private:
  /// Seconds of the data-parallel collectives for `params` parameters over
  /// `group`: with `perMicroBatch`, of the ones on each micro-batch's path
  /// (ZeRO-3) for one micro-batch; else of the others for one step
  /// (gradient and parameter synchronisation).
  double dataParallelTime(double params, const ParallelConfig &config,
                          const cost::CommGroup &group,
                          bool perMicroBatch) const;
  /// Elements per GPU of a device's dense parameters whose gradients the
  /// data-parallel reduction may start during the backward.
  double overlappableParams(const StageStats &stats) const;
  void hideGradientReductions(StepTail &tail, const StageStats &stats,
                              const ParallelConfig &config,
                              const cost::MeshPlacement &placement) const;
  /// Bytes of bmrt's gradient buckets (overlapped reductions).
  double bucketBytes(const StageStats &stats,
                     const ParallelConfig &config) const;
  /// Bytes of bmrt's workspace for ZeRO's gathers over dp.
  double zeroGatherBytes(const ParallelConfig &config) const;
  double largestLocalParameter(const ParallelConfig &config) const;
  /// Seconds of a copy of `bytes` between a device and host memory, and of
  /// a host optimizer step moving `bytes`.
  double hostCopyTime(double bytes) const;
  double hostOptimizerTime(double bytes) const;
  /// Of `seconds` of the offloaded optimizer's copies and host step run
  /// behind the next forward on a device of `stats`, what that forward
  /// waits for.
  double offloadExposed(double seconds, const StageStats &stats,
                        const PartitionEntry &entry) const;

  const PlanContext &ctx_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_STEPCOSTER_H
