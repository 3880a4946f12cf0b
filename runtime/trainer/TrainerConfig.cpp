//===- TrainerConfig.cpp - the job checked against trainer.json -----------===//

#include "TrainerConfig.h"

#include "bmrt/Error.h"
#include "bmrt/Schedule.h"
#include "bmrt/Sharding.h"

#include <chrono>
#include <optional>
#include <thread>

namespace bmrt {

/// An error every rank finds alike (the job's shape): rank 0 reports it
/// and ends the job (abortJob); the others wait for that, so that the job
/// says it in one line, not one per rank. (Blocking them in a collective
/// rank 0 never joins is not enough: Open MPI lets that return once rank 0
/// aborts.) Should rank 0 not end the job within a minute, they report it
/// themselves.
[[noreturn]] void failOnRankZero(World &world, const std::string &message) {
  if (world.rank() != 0)
    std::this_thread::sleep_for(std::chrono::seconds(60));
  BMRT_FAIL(message);
}

/// The step program (with a pipeline, the first stage's), once the job is
/// known to have the ranks it was compiled for: the mesh's, or without a
/// mesh line trainer.json's.
Program loadProgramFor(const CompiledConfig &config, World &world,
                       const std::string &dir) {
  Program program = loadProgram(config.stages.empty() ? config.program
                                                      : config.stages.front());
  Mesh mesh = meshOf(program, config.ranks);
  if (mesh.numRanks() != world.size())
    failOnRankZero(
        world, program.mesh.empty()
                   ? "the trainer in '" + dir + "' was compiled for " +
                         std::to_string(config.ranks) +
                         " ranks (the plan's data parallelism); it was "
                         "started on " +
                         std::to_string(world.size())
                   : "the step program's mesh " + mesh.str() + " has " +
                         std::to_string(mesh.numRanks()) +
                         " ranks; the trainer was started on " +
                         std::to_string(world.size()));
  if (config.ranks != world.size())
    failOnRankZero(world, "the trainer in '" + dir + "' was compiled for " +
                              std::to_string(config.ranks) +
                              " ranks; it was started on " +
                              std::to_string(world.size()));
  return program;
}

/// `--print-schedule`: the plan's pipeline schedule, generated, checked
/// by simulating every rank and printed as a rank x time grid.
void printPipeline(const CompiledConfig &config, std::FILE *out) {
  if (config.schedule == "none" || config.pp <= 1) {
    std::fprintf(out, "%s: no pipeline (pp %d, schedule %s): every rank runs "
                      "the whole step, %lld micro-batch%s per step\n",
                 config.model.c_str(), config.pp, config.schedule.c_str(),
                 (long long)config.microBatches,
                 config.microBatches == 1 ? "" : "es");
    return;
  }
  ScheduleSpec spec = pipelineSpec(config, config.pp);
  std::fputs(printSchedule(spec, pipelineCosts(config, spec)).c_str(), out);
}

ActionCosts pipelineCosts(const CompiledConfig &config,
                          const ScheduleSpec &spec) {
  ActionCosts costs;
  costs.stageForward = config.stageForward;
  costs.stageBackward = config.stageBackward;
  costs.stageBackwardWeight = config.stageWeight;
  try {
    validateCosts(costs, spec.virtualStages());
  } catch (const Error &e) {
    BMRT_FAIL(std::string("trainer.json's stage_times: ") + e.what());
  }
  return costs;
}

ScheduleSpec pipelineSpec(const CompiledConfig &config, int pp) {
  std::optional<ScheduleKind> kind = parseScheduleKind(config.schedule);
  if (!kind || *kind == ScheduleKind::None) {
    std::string expected;
    for (ScheduleKind k : allScheduleKinds())
      if (k != ScheduleKind::None)
        expected += std::string(expected.empty() ? "" : ", ") + toString(k);
    BMRT_FAIL("trainer.json lists pipeline stages but its schedule is '" +
              config.schedule + "'; expected one of " + expected);
  }
  ScheduleSpec spec;
  spec.kind = *kind;
  spec.pp = pp;
  spec.v = config.chunks;
  spec.m = static_cast<int>(config.microBatches);
  validateSchedule(spec);
  return spec;
}

} // namespace bmrt
