//===- TrainerConfig.cpp - what bmc compile wrote for the trainer ---------===//

#include "TrainerConfig.h"

#include "bmrt/Error.h"
#include "bmrt/Schedule.h"
#include "bmrt/Sharding.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

namespace bmrt {

using json = nlohmann::json;


CompiledConfig readConfig(const std::string &dir) {
  std::string path = dir + "/trainer.json";
  std::ifstream in(path);
  BMRT_CHECK(in, "cannot read '" + path +
                     "': is this a folder that bmc compile wrote?");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  BMRT_CHECK(!j.is_discarded() && j.is_object(),
             "'" + path + "' is not valid JSON");
  BMRT_CHECK(j.value("format", 0) == 1,
             "'" + path + "' has format " + std::to_string(j.value("format", 0)) +
                 "; this trainer reads format 1");
  CompiledConfig c;
  try {
    c.model = j.at("model");
    c.modelHash = j.at("model_hash");
    c.modelPath = j.value("model_path", std::string());
    c.task = j.at("task");
    c.optimizer = j.at("optimizer");
    c.precision = j.at("precision");
    c.recompute = j.value("recompute", "none");
    c.program = dir + "/" + j.at("program").get<std::string>();
    if (j.contains("parameters") && !j["parameters"].is_null())
      c.parameters = dir + "/" + j["parameters"].get<std::string>();
    if (j.contains("init") && !j["init"].is_null())
      c.init = dir + "/" + j["init"].get<std::string>();
    c.plan = dir + "/" + j.at("plan").get<std::string>();
    c.microBatch = j.at("micro_batch");
    c.microBatches = j.at("micro_batches");
    c.globalBatch = j.value("global_batch", int64_t(0));
    c.ranks = j.value("ranks", 1);
    c.zero = j.value("zero", 0);
    c.overlapGradReduce = j.value("overlap_grad_reduce", true);
    c.pp = j.value("pp", 1);
    c.chunks = j.value("chunks", 1);
    c.schedule = j.value("schedule", std::string("none"));
    c.device = j.value("device", std::string("cpu"));
    for (const std::string &stage :
         j.value("stages", std::vector<std::string>()))
      c.stages.push_back(dir + "/" + stage);
  } catch (const json::exception &e) {
    BMRT_FAIL("'" + path + "' is missing a field or has a wrong type (" +
              e.what() + ")");
  }
  BMRT_CHECK(c.parameters.empty() != c.init.empty(),
             "'" + path + "' must name either \"parameters\" (a "
             "safetensors file) or \"init\" (specs to generate them from)");
  BMRT_CHECK(c.optimizer == "adamw" || c.optimizer == "sgd",
             "'" + path + "': optimizer is '" + c.optimizer +
                 "'; this trainer runs adamw or sgd");
  BMRT_CHECK(c.microBatches >= 1, "'" + path + "': micro_batches must be >= 1");
  BMRT_CHECK(c.microBatch >= 1, "'" + path + "': micro_batch must be >= 1");
  BMRT_CHECK(c.globalBatch >= 0, "'" + path + "': global_batch must be >= 1");
  BMRT_CHECK(c.globalBatch == 0 ||
                 c.globalBatch % (c.microBatch * c.microBatches) == 0,
             "'" + path + "': micro_batches " + std::to_string(c.microBatches) +
                 " of micro_batch " + std::to_string(c.microBatch) +
                 " do not divide global_batch " +
                 std::to_string(c.globalBatch));
  BMRT_CHECK(c.zero >= 0 && c.zero <= 3,
             "'" + path + "': zero is " + std::to_string(c.zero) +
                 "; ZeRO has stages 0 to 3");
  return c;
}

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
  std::optional<ScheduleKind> kind = parseScheduleKind(config.schedule);
  BMRT_CHECK(kind, "trainer.json's schedule is '" + config.schedule +
                       "'; expected none, gpipe, 1f1b or interleaved");
  ScheduleSpec spec;
  spec.kind = *kind;
  spec.pp = config.pp;
  spec.v = config.chunks;
  spec.m = static_cast<int>(config.microBatches);
  validateSchedule(spec);
  std::fputs(printSchedule(spec).c_str(), out);
}

} // namespace bmrt
