//===- PipelineTimeline.h - the bubble from the schedule that runs -*- C++
//-*-===//
//
// Times a configuration's pipeline by simulating the schedule the trainer
// runs (runtime/schedule) with its stages' forward and backward times, in
// place of the search's closed form, and draws every rank's bars for the
// plan's timeline. See PipelineTimeline.cpp for when each is used.
// Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_PIPELINETIMELINE_H
#define BM_PLAN_PIPELINETIMELINE_H

#include "passes/plan/StagePartitions.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bmrt {
struct ActionCosts;
struct SimulationResult;
} // namespace bmrt

namespace bm::plan {

/// Simulates the schedule the trainer runs (runtime/schedule) with the given
/// per-virtual-stage costs; nullopt when no such schedule exists.
std::optional<bmrt::SimulationResult>
simulateSchedule(ScheduleKind schedule, int pp, int chunks, int microBatches,
                 const bmrt::ActionCosts &costs);

} // namespace bm::plan

namespace bm::plan::detail {

class PipelineTimeline {
public:
  PipelineTimeline(const PlanContext &ctx, StagePartitions &partitions,
                   const StepCoster &coster)
      : ctx_(ctx), partitions_(partitions), coster_(coster) {}

  /// `e` with the bubble of its schedule simulated with the stages' forward
  /// and backward times instead of the closed form; the simulation's bars
  /// are kept for timeline().
  Evaluation retime(const Evaluation &e);
  /// The simulated pipeline of a retimed plan and each rank's step tail.
  std::vector<TimelineBar> timeline(const Evaluation &chosen);
  /// The schedule's per-virtual-stage forward, backward and W times of `e`,
  /// which its lists are generated and simulated with.
  bmrt::ActionCosts scheduleCosts(const Evaluation &e);

private:
  /// Per chunk of `device`, its part of the device's `deviceSeconds` of
  /// per-micro-batch transfers (DeviceExtras); the parts add up to them.
  std::vector<double> chunkExtras(int device, double deviceSeconds,
                                  const PartitionEntry &entry,
                                  const ParallelConfig &config,
                                  const cost::MeshPlacement &placement,
                                  const std::vector<StageStats> &stages) const;
  /// The simulated pipeline of `e`: every rank's forward and backward
  /// bars; `pipelineEnd` is when the last one ends.
  std::vector<TimelineBar> simulatePipeline(const Evaluation &e,
                                            double &pipelineEnd);

  const PlanContext &ctx_;
  StagePartitions &partitions_;
  const StepCoster &coster_;
  /// The simulated pipelines of the retimed plans, by config.str(): every
  /// rank's bars and when the last ends.
  std::map<std::string, std::pair<std::vector<TimelineBar>, double>> simulated_;
};

} // namespace bm::plan::detail

#endif // BM_PLAN_PIPELINETIMELINE_H
