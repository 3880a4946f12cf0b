//===- TrainerConfig.h - what bmc compile wrote for the trainer -*- C++ -*-===//
//
// trainer.json read into one struct, the step program (or the pipeline's
// first stage) checked against the job's ranks, and the errors every rank
// finds alike reported once.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_TRAINERCONFIG_H
#define BMRT_TRAINER_TRAINERCONFIG_H

#include "bmrt/Comm.h"
#include "bmrt/Program.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace bmrt {

/// What `bmc compile` wrote beside the program (trainer.json).
struct CompiledConfig {
  std::string model, modelHash, modelPath, task, optimizer, precision,
      recompute;
  std::string program, plan;
  /// The step-0 parameters: a safetensors file of values, or (when that
  /// is empty) init.json's specs to generate them from.
  std::string parameters, init;
  /// The backend to run on ("cpu", "cuda"); --device overrides it.
  std::string device = "cpu";
  /// Samples per micro-batch on each data-parallel rank, micro-batches per
  /// step, and samples per step over all of them (0: not given).
  int64_t microBatch = 1, microBatches = 1, globalBatch = 0;
  /// Ranks the step was compiled for.
  int ranks = 1;
  /// ZeRO stage over dp (0: none).
  int zero = 0;
  /// Reduce gradients during the backward (the plan's cluster hides some of
  /// that); the trainer's --overlap / --no-overlap decide instead.
  bool overlapGradReduce = true;
  /// The pipeline: stages, schedule ("none", "gpipe", "1f1b",
  /// "interleaved") and virtual stages per rank.
  int pp = 1, chunks = 1;
  std::string schedule = "none";
  /// With a pipeline: each virtual stage's program, in virtual-stage order.
  std::vector<std::string> stages;
};

/// Reads DIR/trainer.json; one line naming the file on anything missing.
CompiledConfig readConfig(const std::string &dir);

/// An error every rank finds alike (the job's shape): rank 0 reports it,
/// the others wait for its abort (one line per job, not per rank).
[[noreturn]] void failOnRankZero(World &world, const std::string &message);

/// The step program (with a pipeline, the first stage's), once the job is
/// known to have the ranks it was compiled for.
Program loadProgramFor(const CompiledConfig &config, World &world,
                       const std::string &dir);

/// `--print-schedule`: the plan's pipeline schedule as a grid.
void printPipeline(const CompiledConfig &config, std::FILE *out);

} // namespace bmrt

#endif // BMRT_TRAINER_TRAINERCONFIG_H
