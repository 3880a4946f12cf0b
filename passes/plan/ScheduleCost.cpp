//===- ScheduleCost.cpp - the bubble from the schedule the trainer runs ---===//
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

#include "passes/plan/Planner.h"

#include "bmrt/Error.h"
#include "bmrt/Schedule.h"

using namespace bm;
using namespace bm::plan;
using namespace bm::plan::detail;

const PartitionEntry &Planner::partitionOf(const Evaluation &e) {
  return e.ownPartition ? *e.ownPartition : partition(e.config);
}

static std::optional<bmrt::ScheduleKind> kindOf(PipelineSchedule schedule) {
  switch (schedule) {
  case PipelineSchedule::GPipe:
    return bmrt::ScheduleKind::GPipe;
  case PipelineSchedule::OneFOneB:
    return bmrt::ScheduleKind::OneFOneB;
  case PipelineSchedule::Interleaved:
    return bmrt::ScheduleKind::Interleaved1F1B;
  case PipelineSchedule::None:
    break;
  }
  return std::nullopt;
}

bmrt::ActionCosts Planner::scheduleCosts(const Evaluation &e) {
  const ParallelConfig &config = e.config;
  const PartitionEntry &entry = partitionOf(e);
  const cost::MeshPlacement placement = cost::placeMesh(
      cluster_, config.dp, config.tp, config.pp, std::max(config.ep, 1));
  // Each virtual stage's forward and backward per micro-batch: its compute
  // and tensor-parallel collectives split where its forward ends, and its
  // share of its device's per-micro-batch transfers (boundaries, ZeRO-3,
  // experts, side inputs) half to each pass, as each pass moves one
  // direction.
  const std::vector<StageStats> stages = expandStages(entry.stages);
  bmrt::ActionCosts costs;
  costs.stageForward.assign(stages.size(), 0);
  costs.stageBackward.assign(stages.size(), 0);
  for (const DeviceGroup &group : entry.devices) {
    // The device's transfers as score() prices them: the parameters of the
    // stages it shares included (holdSharedParameters), so that a device's
    // chunks add up to its load per micro-batch.
    const double deviceSeconds = deviceExtras(group.stats, config, placement,
                                              entry.boundaryBytes,
                                              config.chunks)
                                     .total();
    for (int device = group.firstDevice;
         device < group.firstDevice + group.numDevices; ++device) {
      const std::vector<double> extras =
          chunkExtras(device, deviceSeconds, entry, config, placement, stages);
      for (int chunk = 0; chunk < config.chunks; ++chunk) {
        const size_t s = static_cast<size_t>(chunk * config.pp + device);
        if (s >= stages.size())
          continue;
        const StageStats &stage = stages[s];
        costs.stageForward[s] = stage.forward + extras[chunk] / 2;
        costs.stageBackward[s] =
            stage.time() - stage.forward + extras[chunk] / 2;
      }
    }
  }
  return costs;
}

// Shared among the chunks by what each would cost alone (onDevice: what it
// receives counted), or evenly where none would cost anything alone.
std::vector<double>
Planner::chunkExtras(int device, double deviceSeconds,
                     const PartitionEntry &entry, const ParallelConfig &config,
                     const cost::MeshPlacement &placement,
                     const std::vector<StageStats> &stages) const {
  std::vector<double> alone(config.chunks, 0);
  double sum = 0;
  int present = 0;
  for (int chunk = 0; chunk < config.chunks; ++chunk) {
    const size_t s = static_cast<size_t>(chunk * config.pp + device);
    if (s >= stages.size())
      continue;
    alone[chunk] = deviceExtras(stages[s].onDevice(), config, placement,
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
bm::plan::simulateSchedule(PipelineSchedule schedule, int pp, int chunks,
                           int microBatches, const bmrt::ActionCosts &costs) {
  bmrt::ScheduleSpec spec;
  spec.kind = kindOf(schedule).value_or(bmrt::ScheduleKind::OneFOneB);
  spec.pp = pp;
  spec.v = chunks;
  spec.m = microBatches;
  try {
    bmrt::SimulationResult run =
        bmrt::simulate(bmrt::generateSchedule(spec, costs), costs);
    if (run.ok())
      return run;
  } catch (const bmrt::Error &) {
    // Schedules the search admits always exist (interleaving only with m a
    // multiple of pp); without one the closed form stays.
  }
  return std::nullopt;
}

std::vector<TimelineBar> Planner::simulatePipeline(const Evaluation &e,
                                                   double &pipelineEnd) {
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

Evaluation Planner::retime(const Evaluation &e) {
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

void Planner::retimeFinalists() {
  // The best plan of each mesh, fastest first by the closed form: the ones
  // shown (the chosen plan and the alternatives) are simulated and ranked
  // again; the others are dropped.
  std::vector<std::pair<std::tuple<int, int, int, int>, Evaluation>> finalists(
      bestPerMesh_.begin(), bestPerMesh_.end());
  std::sort(finalists.begin(), finalists.end(), [](const auto &a,
                                                   const auto &b) {
    return better(a.second, b.second);
  });
  size_t shown = static_cast<size_t>(std::max(config_.numAlternatives, 0)) + 1;
  if (finalists.size() > shown)
    finalists.resize(shown);
  bestPerMesh_.clear();
  haveBest_ = false;
  for (auto &[mesh, e] : finalists) {
    e = retime(e);
    bestPerMesh_[mesh] = e;
    if (!haveBest_ || better(e, best_)) {
      best_ = e;
      haveBest_ = true;
    }
  }
}
