//===- PipelineTimeline.cpp - the bubble from the schedule that runs ------===//
//
// The pipeline schedule is data (DESIGN.md section 5): runtime/schedule
// generates each rank's instruction list and simulates it. The search ranks
// configurations with the closed-form bubble ((p-1)/(v m) of the ideal time
// for equal stages, cost::pipelineBubbleFraction), cheap enough for every
// configuration. The finalists that are shown (the best plan of the fastest
// meshes: the chosen plan and the alternatives) are timed again by
// simulating their own schedule with their stages' forward and backward
// times, and ranked again: unequal stages (T5's encoder and decoder, the
// embedding and the head) can make the simulated bubble several times the
// closed form, most with interleaving and few micro-batches. Simulating
// costs O(pp x v x m) actions (about 1.5 us each; 160 ms for pp=64, v=3,
// m=384), too much for every configuration.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PipelineTimeline.h"

#include "bmrt/Schedule.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

bmrt::ActionCosts PipelineTimeline::scheduleCosts(const Evaluation &e) {
  const ParallelConfig &config = e.config;
  const PartitionEntry &entry = partitions_.of(e);
  const cost::MeshPlacement placement = coster_.meshOf(config);
  // Each virtual stage's forward and backward per micro-batch: its compute
  // and tensor-parallel collectives split where its forward ends, and its
  // share of its device's per-micro-batch transfers (boundaries, ZeRO-3,
  // experts, side inputs) half to each pass, as each pass moves one
  // direction.
  const std::vector<StageStats> stages = expandStages(entry.stages);
  bmrt::ActionCosts costs;
  costs.stageForward.assign(stages.size(), 0);
  costs.stageBackward.assign(stages.size(), 0);
  costs.stageBackwardWeight.assign(stages.size(), 0);
  for (const DeviceGroup &group : entry.devices) {
    // The device's transfers as score() prices them: the parameters of the
    // stages it shares included (holdSharedParameters), so that a device's
    // chunks add up to its load per micro-batch.
    const double deviceSeconds =
        coster_
            .deviceExtras(group.stats, config, placement, entry.boundaryBytes,
                          config.chunks)
            .total();
    for (int device = group.firstDevice;
         device < group.firstDevice + group.numDevices; ++device) {
      const std::vector<double> extras =
          chunkExtras(device, deviceSeconds, entry, config, placement, stages);
      for (int chunk = 0; chunk < config.chunks; ++chunk) {
        const size_t s =
            static_cast<size_t>(config.virtualStage(device, chunk));
        if (s >= stages.size())
          continue;
        const StageStats &stage = stages[s];
        costs.stageForward[s] = stage.forward + extras[chunk] / 2;
        costs.stageBackward[s] =
            stage.time() - stage.forward + extras[chunk] / 2;
        costs.stageBackwardWeight[s] = stage.passTimes().backwardWeight;
      }
    }
  }
  return costs;
}

// Shared among the chunks by what each would cost alone (onDevice: what it
// receives counted), or evenly where none would cost anything alone.
std::vector<double> PipelineTimeline::chunkExtras(
    int device, double deviceSeconds, const PartitionEntry &entry,
    const ParallelConfig &config, const cost::MeshPlacement &placement,
    const std::vector<StageStats> &stages) const {
  std::vector<double> alone(config.chunks, 0);
  double sum = 0;
  int present = 0;
  for (int chunk = 0; chunk < config.chunks; ++chunk) {
    const size_t s = static_cast<size_t>(config.virtualStage(device, chunk));
    if (s >= stages.size())
      continue;
    alone[chunk] = coster_
                       .deviceExtras(stages[s].onDevice(), config, placement,
                                     entry.boundaryBytes, /*chunks=*/1)
                       .total();
    sum += alone[chunk];
    ++present;
  }
  std::vector<double> shares(config.chunks, 0);
  for (int chunk = 0; chunk < config.chunks; ++chunk)
    shares[chunk] = sum > 0 ? alone[chunk] * (deviceSeconds / sum)
                            : deviceSeconds / std::max(present, 1);
  return shares;
}

std::optional<bmrt::SimulationResult>
bm::plan::simulateSchedule(ScheduleKind schedule, int pp, int chunks,
                           int microBatches, const bmrt::ActionCosts &costs) {
  bmrt::ScheduleSpec spec;
  spec.kind = schedule;
  spec.pp = pp;
  spec.v = chunks;
  spec.m = microBatches;
  // Schedules the search admits always exist (interleaving only with m a
  // multiple of pp); without one the closed form stays.
  if (bmrt::scheduleProblem(spec))
    return std::nullopt;
  bmrt::SimulationResult run =
      bmrt::simulate(bmrt::generateSchedule(spec, costs), costs, spec.layout());
  if (run.ok())
    return run;
  return std::nullopt;
}

std::vector<TimelineBar>
PipelineTimeline::simulatePipeline(const Evaluation &e, double &pipelineEnd) {
  const ParallelConfig &config = e.config;
  std::vector<TimelineBar> bars;
  pipelineEnd = 0;
  std::optional<bmrt::SimulationResult> run =
      simulateSchedule(config.schedule, config.pp, config.chunks,
                       config.numMicroBatches, scheduleCosts(e));
  if (!run)
    return bars;
  for (size_t rank = 0; rank < run->timeline.size(); ++rank)
    for (const bmrt::TimedAction &t : run->timeline[rank]) {
      if (!t.action.isCompute())
        continue;
      TimelineBar bar;
      bar.kind = t.action.kind == bmrt::ActionKind::Forward
                     ? TimelineBar::Kind::Forward
                 : t.action.kind == bmrt::ActionKind::BackwardWeight
                     ? TimelineBar::Kind::WeightGrad
                     : TimelineBar::Kind::Backward;
      bar.rank = static_cast<int>(rank);
      bar.microBatch = t.action.microBatch;
      bar.chunk = t.action.chunk;
      bar.start = t.start;
      bar.end = t.end;
      bars.push_back(bar);
    }
  pipelineEnd = run->stepTime;
  return bars;
}

/// `e` with the bubble of a pipeline that ends at `pipelineEnd`: the
/// critical device's m micro-batches plus the time it waits.
static Evaluation withPipelineEnd(const Evaluation &e, double pipelineEnd) {
  Evaluation timed = e;
  timed.simulated = true;
  double bubble =
      std::max(0.0, pipelineEnd - e.config.numMicroBatches * e.slowest);
  timed.step += bubble - e.time.bubble;
  timed.time.bubble = bubble;
  return timed;
}

Evaluation PipelineTimeline::retime(const Evaluation &e) {
  if (e.simulated)
    return e;
  double pipelineEnd = 0;
  std::vector<TimelineBar> bars = simulatePipeline(e, pipelineEnd);
  if (bars.empty())
    return e;
  simulated_[e.config.str()] = {std::move(bars), pipelineEnd};
  if (e.config.pp > 1)
    return withPipelineEnd(e, pipelineEnd);
  Evaluation timed = e; // no bubble: the simulation only draws the timeline
  timed.simulated = true;
  return timed;
}

std::vector<TimelineBar> PipelineTimeline::timeline(const Evaluation &chosen) {
  auto [bars, pipelineEnd] = simulated_[chosen.config.str()];
  if (bars.empty())
    return bars;
  // Once the pipeline has drained, each rank synchronises its stage's
  // gradients and steps its optimizer (the step's tail, StepTail): an
  // offloaded one between the copies to the host and back.
  const ParallelConfig &config = chosen.config;
  const PartitionEntry &entry = partitions_.of(chosen);
  const cost::MeshPlacement placement = coster_.meshOf(config);
  const bool offloaded = config.offload == Offload::Optimizer;
  for (const DeviceGroup &group : entry.devices) {
    StepTail tail = coster_.stepTail(group.stats, config, placement, entry);
    for (int rank = group.firstDevice;
         rank < group.firstDevice + group.numDevices; ++rank) {
      TimelineBar bar;
      bar.rank = rank;
      bar.end = pipelineEnd;
      auto add = [&](TimelineBar::Kind kind, double seconds) {
        bar.kind = kind;
        bar.start = bar.end;
        bar.end = bar.start + seconds;
        bars.push_back(bar);
      };
      add(TimelineBar::Kind::Sync,
          tail.total() - tail.optimizer - tail.offload());
      if (offloaded)
        add(TimelineBar::Kind::HostCopy, tail.toHost);
      add(TimelineBar::Kind::Optimizer, tail.optimizer + tail.hostOptimizer);
      if (offloaded)
        add(TimelineBar::Kind::HostCopy, tail.toDevice);
    }
  }
  return bars;
}
