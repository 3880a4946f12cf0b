//===- TrainerConfig.h - the job checked against trainer.json ---*- C++ -*-===//
//
// The step program (or the pipeline's first stage) checked against the
// job's ranks, as trainer.json (TrainerJson.h) says they should be, and the
// errors every rank finds alike reported once.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_TRAINERCONFIG_H
#define BMRT_TRAINER_TRAINERCONFIG_H

#include "TrainerJson.h"

#include "bmrt/Comm.h"
#include "bmrt/Program.h"
#include "bmrt/Schedule.h"

#include <cstdio>
#include <string>

namespace bmrt {

/// An error every rank finds alike (the job's shape): rank 0 reports it,
/// the others wait for its abort (one line per job, not per rank).
[[noreturn]] void failOnRankZero(World &world, const std::string &message);

/// The step program (with a pipeline, the first stage's), once the job is
/// known to have the ranks it was compiled for.
Program loadProgramFor(const CompiledConfig &config, World &world,
                       const std::string &dir);

/// `--print-schedule`: the plan's pipeline schedule as a grid.
void printPipeline(const CompiledConfig &config, std::FILE *out);
/// The pipeline trainer.json asks for over `pp` ranks; throws bmrt::Error
/// with one line for a schedule bmrt does not have or one that cannot run.
ScheduleSpec pipelineSpec(const CompiledConfig &config, int pp);
/// The costs the schedule's lists are generated with: trainer.json's
/// stage times, or the defaults; throws bmrt::Error with one line when
/// they do not fit the pipeline.
ActionCosts pipelineCosts(const CompiledConfig &config,
                          const ScheduleSpec &spec);

} // namespace bmrt

#endif // BMRT_TRAINER_TRAINERCONFIG_H
