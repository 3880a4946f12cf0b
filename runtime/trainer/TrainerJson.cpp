//===- TrainerJson.cpp - trainer.json: its schema, writer and reader ------===//

#include "TrainerJson.h"

#include "bmrt/Error.h"

#include <nlohmann/json.hpp>

#include <fstream>

namespace bmrt {

// nlohmann::json keeps an object's keys sorted (std::map), which is the
// order bmc has always written them in (it printed an llvm::json::Object,
// which sorts on output).
using json = nlohmann::json;

namespace {

/// The one layout this runtime reads and bmc writes.
constexpr int kFormat = 1;

/// The file of DIR's step-0 parameters when it has no trainer.json.
constexpr const char *kDefaultParametersFile = "params.safetensors";

json parseFile(std::ifstream &in, const std::string &path) {
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  BMRT_CHECK(!j.is_discarded() && j.is_object(),
             "'" + path + "' is not valid JSON");
  return j;
}

/// The fields trainer.json must have, or may have with the defaults of
/// CompiledConfig; throws json::exception on a missing or mistyped one.
CompiledConfig readFields(const json &j, const std::string &dir) {
  CompiledConfig c;
  c.model = j.at("model");
  c.modelHash = j.at("model_hash");
  c.modelPath = j.value("model_path", std::string());
  c.task = j.at("task");
  c.optimizer = j.at("optimizer");
  parseOptimizer(c.optimizer, c.optimizerKind); // checkFields refuses others
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
  c.offload = j.value("offload", std::string("none"));
  c.cpLayout = j.value("cp_layout", std::string("contiguous"));
  c.overlapGradReduce = j.value("overlap_grad_reduce", true);
  c.pp = j.value("pp", 1);
  c.chunks = j.value("chunks", 1);
  c.schedule = j.value("schedule", std::string("none"));
  c.device = j.value("device", std::string("cpu"));
  if (j.contains("stage_times")) {
    const json &times = j.at("stage_times");
    c.stageForward = times.at("forward").get<std::vector<double>>();
    c.stageBackward = times.at("backward").get<std::vector<double>>();
    c.stageWeight = times.at("weight").get<std::vector<double>>();
  }
  for (const std::string &stage : j.value("stages", std::vector<std::string>()))
    c.stages.push_back(dir + "/" + stage);
  return c;
}

/// What the trainer cannot run, found before it loads anything.
void checkFields(const CompiledConfig &c, const std::string &path) {
  BMRT_CHECK(c.parameters.empty() != c.init.empty(),
             "'" + path +
                 "' must name either \"parameters\" (a "
                 "safetensors file) or \"init\" (specs to generate them from)");
  OptimizerKind kind;
  BMRT_CHECK(parseOptimizer(c.optimizer, kind),
             "'" + path + "': optimizer is '" + c.optimizer +
                 "'; this trainer runs adamw, sgd, lamb or lars");
  BMRT_CHECK(c.microBatches >= 1, "'" + path + "': micro_batches must be >= 1");
  BMRT_CHECK(c.microBatch >= 1, "'" + path + "': micro_batch must be >= 1");
  BMRT_CHECK(c.globalBatch >= 0, "'" + path + "': global_batch must be >= 1");
  BMRT_CHECK(c.globalBatch == 0 ||
                 c.globalBatch % (c.microBatch * c.microBatches) == 0,
             "'" + path + "': micro_batches " + std::to_string(c.microBatches) +
                 " of micro_batch " + std::to_string(c.microBatch) +
                 " do not divide global_batch " +
                 std::to_string(c.globalBatch));
  BMRT_CHECK(c.zero >= 0 && c.zero <= 3, "'" + path + "': zero is " +
                                             std::to_string(c.zero) +
                                             "; ZeRO has stages 0 to 3");
  BMRT_CHECK(c.offload == "none" || c.offload == "optimizer",
             "'" + path + "': offload is '" + c.offload +
                 "'; this trainer offloads none or optimizer");
  BMRT_CHECK(c.cpLayout == "contiguous" || c.cpLayout == "mirrored",
             "'" + path + "': cp_layout is '" + c.cpLayout +
                 "'; this trainer lays sequences out contiguous or mirrored");
}

} // namespace

std::string printConfig(const CompiledConfig &config) {
  json j;
  j["format"] = kFormat;
  j["model"] = config.model;
  j["model_hash"] = config.modelHash;
  j["model_path"] = config.modelPath;
  j["task"] = config.task;
  j["global_batch"] = config.globalBatch;
  j["micro_batch"] = config.microBatch;
  j["micro_batches"] = config.microBatches;
  j["ranks"] = config.ranks;
  j["optimizer"] = config.optimizer;
  j["precision"] = config.precision;
  j["recompute"] = config.recompute;
  j["zero"] = config.zero;
  if (config.offload != "none")
    j["offload"] = config.offload;
  if (config.cpLayout != "contiguous")
    j["cp_layout"] = config.cpLayout;
  j["overlap_grad_reduce"] = config.overlapGradReduce;
  j["pp"] = config.pp;
  j["chunks"] = config.chunks;
  j["schedule"] = config.schedule;
  j["program"] = config.program;
  j["stages"] = config.stages;
  j["forward_program"] = kForwardProgramFile;
  j["plan"] = config.plan;
  j["device"] = config.device;
  if (!config.stageForward.empty())
    j["stage_times"] = {{"forward", config.stageForward},
                        {"backward", config.stageBackward},
                        {"weight", config.stageWeight}};
  if (!config.parameters.empty())
    j["parameters"] = config.parameters;
  if (!config.init.empty())
    j["init"] = config.init;
  // Invalid UTF-8 (a path's bytes) becomes U+FFFD, as llvm::json made it.
  return j.dump(2, ' ', /*ensure_ascii=*/false,
                json::error_handler_t::replace) +
         "\n";
}

CompiledConfig readConfig(const std::string &dir) {
  std::string path = dir + "/trainer.json";
  std::ifstream in(path);
  BMRT_CHECK(in, "cannot read '" + path +
                     "': is this a folder that bmc compile wrote?");
  json j = parseFile(in, path);
  BMRT_CHECK(j.value("format", 0) == kFormat,
             "'" + path + "' has format " +
                 std::to_string(j.value("format", 0)) +
                 "; this trainer reads format 1");
  CompiledConfig c;
  try {
    c = readFields(j, dir);
  } catch (const json::exception &e) {
    BMRT_FAIL("'" + path + "' is missing a field or has a wrong type (" +
              e.what() + ")");
  }
  checkFields(c, path);
  return c;
}

StepZeroFiles readStepZeroFiles(const std::string &dir) {
  std::string path = dir + "/trainer.json";
  std::ifstream in(path);
  if (!in)
    return {dir + "/" + kDefaultParametersFile, ""};
  json j = parseFile(in, path);
  auto file = [&](const char *key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
      return std::string();
    BMRT_CHECK(it->is_string(), "'" + path + "': \"" + key +
                                    "\" must name a file in the folder");
    return dir + "/" + it->get<std::string>();
  };
  StepZeroFiles files{file("parameters"), file("init")};
  BMRT_CHECK(files.parameters.empty() != files.init.empty(),
             "'" + path + "' must name either \"parameters\" or \"init\"");
  return files;
}

} // namespace bmrt
