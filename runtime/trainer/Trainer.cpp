//===- Trainer.cpp - the training loop ------------------------------------===//

#include "Trainer.h"

#include "Feeder.h"
#include "StepReport.h"
#include "TrainingState.h"

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Comm.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Kernels.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>

namespace bmrt {
namespace {

using json = nlohmann::json;

/// What `bmc compile` wrote beside the program (trainer.json).
struct CompiledConfig {
  std::string model, modelHash, modelPath, task, optimizer, precision,
      recompute;
  std::string program, parameters, plan;
  int64_t microBatch = 1, microBatches = 1;
  /// Data-parallel ranks the step was compiled for.
  int ranks = 1;
};

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
    c.parameters = dir + "/" + j.at("parameters").get<std::string>();
    c.plan = dir + "/" + j.at("plan").get<std::string>();
    c.microBatch = j.at("micro_batch");
    c.microBatches = j.at("micro_batches");
    c.ranks = j.value("ranks", 1);
  } catch (const json::exception &e) {
    BMRT_FAIL("'" + path + "' is missing a field or has a wrong type (" +
              e.what() + ")");
  }
  BMRT_CHECK(c.microBatches >= 1, "'" + path + "': micro_batches must be >= 1");
  return c;
}

double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

/// One trained (or frozen) parameter and what the optimizer keeps for it.
struct ParamSlot {
  std::string name;
  TensorView value;
  /// The step program's gradient slot; null data when frozen.
  TensorView grad;
  /// Micro-batch sum of gradients (only with several micro-batches).
  TensorView accumulated;
  /// AdamW's first and second moments, or SGD's momentum buffer (first).
  TensorView first, second;
};

class Trainer {
public:
  Trainer(const TrainerOptions &options, World &world)
      : options(options), config(readConfig(options.dir)), world(world),
        program(loadProgram(config.program)), device(createCpuDevice()),
        executor(program, *device, config.program) {
    BMRT_CHECK(world.size() == config.ranks,
               "the trainer in '" + options.dir + "' was compiled for " +
                   std::to_string(config.ranks) +
                   " ranks (the plan's data parallelism); it was started on " +
                   std::to_string(world.size()));
    if (world.size() > 1)
      dp = world.all();
    if (options.threads)
      cpu::setThreads(options.threads);
    bindParameters();
    feeder = std::make_unique<Feeder>(program, executor, config.task, options,
                                      world.rank(), world.size());
    hyper = Hyperparameters::from(options, config.optimizer);
  }

  void run() {
    int64_t start = 0;
    if (options.resume)
      start = resume();
    if (world.rank() == 0)
      printStart(start);
    std::unique_ptr<std::ofstream> log = openLog();
    int64_t last = options.stopAt ? std::min(options.stopAt, options.steps)
                                  : options.steps;
    // --steps 0 writes the step-0 checkpoint: the compiled weights, for
    // bmc export or a later --resume.
    if (last == 0 && !options.checkpoint.empty())
      save(0);
    for (int64_t step = start + 1; step <= last; ++step) {
      StepReport report = trainStep(step);
      if (world.rank() == 0)
        report.print(options, stdout);
      if (log)
        *log << report.json() << "\n" << std::flush;
      if (!options.checkpoint.empty() &&
          ((options.saveEvery && step % options.saveEvery == 0) ||
           step == last))
        save(step);
    }
  }

private:
  void bindParameters();
  void allocateOptimizerState(ParamSlot &p);
  StepReport trainStep(int64_t step);
  double accumulateGradients(int64_t microBatch);
  void update(int64_t step, float lr, float gradScale);
  void printStart(int64_t start) const;
  std::unique_ptr<std::ofstream> openLog() const;
  void save(int64_t step);
  double reduceOverDataParallel(double loss);
  int64_t resume();

  TrainerOptions options;
  CompiledConfig config;
  Program program;
  std::unique_ptr<Device> device;
  Executor executor;
  std::vector<ParamSlot> params;
  std::unique_ptr<Feeder> feeder;
  Hyperparameters hyper;
  int64_t lastSaved = 0;
  World &world;
  /// All ranks: each runs the whole step on its share of the batch.
  std::unique_ptr<Communicator> dp;
};

void Trainer::bindParameters() {
  std::vector<HostTensor> initial = readSafetensors(config.parameters).tensors;
  for (int slot : program.slotsOf(SlotKind::Param)) {
    ParamSlot p;
    p.name = program.slots[slot].name;
    p.value = executor.view(slot);
    const HostTensor &found =
        requireTensor(initial, p.name, p.value, "'" + config.parameters + "'");
    device->copyToDevice(p.value.data, found.data.data(), p.value.bytes(),
                         executor.stream());
    int grad = program.gradientOf(slot);
    if (grad >= 0) {
      p.grad = executor.view(grad);
      allocateOptimizerState(p);
    }
    params.push_back(std::move(p));
  }
  executor.stream().synchronize();
}

void Trainer::allocateOptimizerState(ParamSlot &p) {
  auto buffer = [&](MemoryKind kind) {
    TensorView v = p.value;
    v.data = device->allocate(v.bytes(), kind);
    return v;
  };
  p.first = buffer(MemoryKind::OptimizerState);
  if (config.optimizer == "adamw")
    p.second = buffer(MemoryKind::OptimizerState);
  if (config.microBatches > 1)
    p.accumulated = buffer(MemoryKind::Gradients);
}

/// Runs the step program on one micro-batch; returns its loss. With several
/// micro-batches the gradients add up in `accumulated`.
double Trainer::accumulateGradients(int64_t microBatch) {
  feeder->fill();
  executor.run();
  float loss = 0;
  device->copyToHost(&loss, executor.view(program.loss).data, sizeof loss,
                     executor.stream());
  if (config.microBatches > 1)
    for (ParamSlot &p : params)
      if (p.grad.data) {
        if (microBatch == 0)
          cpu::copy(executor.stream(), p.grad, p.accumulated);
        else
          cpu::binary(executor.stream(), cpu::BinaryOp::Add, p.accumulated,
                      p.grad, p.accumulated);
      }
  return loss;
}

StepReport Trainer::trainStep(int64_t step) {
  auto begin = std::chrono::steady_clock::now();
  double loss = 0;
  for (int64_t m = 0; m < config.microBatches; ++m)
    loss += accumulateGradients(m);
  loss /= double(config.microBatches);
  if (dp)
    loss = reduceOverDataParallel(loss);
  BMRT_CHECK(std::isfinite(loss),
             "the loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                 " at step " + std::to_string(step) + "; stopping" +
                 (options.checkpoint.empty()
                      ? std::string()
                      : lastSaved ? " (the checkpoint of step " +
                                        std::to_string(lastSaved) +
                                        " in '" + options.checkpoint +
                                        "' is kept)"
                                  : " (no checkpoint was written yet)"));
  // The mean gradient over micro-batches, clipped by its global norm.
  double sumSquares = 0;
  for (ParamSlot &p : params)
    if (p.grad.data)
      sumSquares += cpu::sumOfSquares(executor.stream(), config.microBatches > 1
                                                            ? p.accumulated
                                                            : p.grad);
  double mean = 1.0 / double(config.microBatches * world.size());
  double norm = std::sqrt(sumSquares) * mean;
  float scale = static_cast<float>(mean * clipScale(norm, options.clip));
  float lr = hyper.schedule.learningRate(step);
  update(step, lr, scale);
  executor.stream().synchronize();

  StepReport report;
  report.step = step;
  report.steps = options.steps;
  report.loss = loss;
  report.lr = lr;
  report.gradNorm = norm;
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - begin)
                       .count();
  report.items = feeder->itemsPerMicroBatch() * config.microBatches;
  report.itemName = feeder->itemName();
  for (int k = 0; k < kNumMemoryKinds; ++k)
    report.peakBytes[k] = device->peakBytes(static_cast<MemoryKind>(k));
  report.peakTotal = device->peakTotalBytes();
  return report;
}

void Trainer::update(int64_t step, float lr, float gradScale) {
  for (ParamSlot &p : params) {
    if (!p.grad.data)
      continue;
    const TensorView &grad = config.microBatches > 1 ? p.accumulated : p.grad;
    if (config.optimizer == "adamw")
      cpu::adamwUpdate(executor.stream(), p.value, grad, p.first, p.second,
                       hyper.adamw, lr, step, gradScale);
    else
      cpu::sgdUpdate(executor.stream(), p.value, grad, p.first, hyper.sgd, lr,
                     step, gradScale);
  }
}

void Trainer::printStart(int64_t start) const {
  if (options.quiet)
    return;
  int64_t count = 0, tensors = 0, frozen = 0;
  for (const ParamSlot &p : params) {
    count += p.value.size();
    ++tensors;
    frozen += p.grad.data == nullptr;
  }
  std::printf("%s: %lld parameters in %lld tensors (%lld frozen), %s task\n",
              config.model.c_str(), (long long)count, (long long)tensors,
              (long long)frozen, config.task.c_str());
  std::printf("step: micro-batch %lld x %lld, recompute %s, %s, %s\n",
              (long long)config.microBatch, (long long)config.microBatches,
              config.recompute.c_str(),
              hyper.describe(config.optimizer).c_str(),
              feeder->describe().c_str());
  if (config.precision != "fp32")
    std::printf("note: the plan trains in %s mixed precision; the CPU "
                "runtime computes in fp32\n",
                config.precision.c_str());
  std::printf("memory: parameters %.2f MiB, gradients %.2f MiB, optimizer "
              "state %.2f MiB, activations %.2f MiB (arena %.2f MiB), "
              "workspace %.2f MiB\n",
              mib(device->bytesInUse(MemoryKind::Parameters)),
              mib(device->bytesInUse(MemoryKind::Gradients)),
              mib(device->bytesInUse(MemoryKind::OptimizerState)),
              mib(device->bytesInUse(MemoryKind::Activations)),
              mib(executor.arenaBytes()),
              mib(device->bytesInUse(MemoryKind::Workspace)));
  if (start)
    std::printf("resumed at step %lld of %lld from '%s'\n", (long long)start,
                (long long)options.steps, options.checkpoint.c_str());
  std::fflush(stdout);
}

/// Rank 0 logs to --log; rank r > 0 beside it, "run.jsonl" -> "run.rank1.jsonl".
std::string logPathOf(const std::string &log, int rank) {
  if (rank == 0)
    return log;
  size_t dot = log.rfind('.'), slash = log.rfind('/');
  std::string tag = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return log + tag;
  return log.substr(0, dot) + tag + log.substr(dot);
}

std::unique_ptr<std::ofstream> Trainer::openLog() const {
  if (options.log.empty())
    return nullptr;
  std::string path = logPathOf(options.log, world.rank());
  auto log = std::make_unique<std::ofstream>(path, std::ios::app);
  BMRT_CHECK(*log, "cannot write the log '" + path + "'");
  return log;
}

/// Sums every rank's gradients in place (the optimizer divides by the
/// ranks through its scale) and returns the mean loss over the ranks.
double Trainer::reduceOverDataParallel(double loss) {
  for (ParamSlot &p : params)
    if (p.grad.data) {
      const TensorView &g = config.microBatches > 1 ? p.accumulated : p.grad;
      dp->allReduce(g.data, g.data, g.size(), DType::F32, executor.stream());
    }
  float sum = static_cast<float>(loss);
  dp->allReduce(&sum, &sum, 1, DType::F32, executor.stream());
  return double(sum) / double(world.size());
}

void Trainer::save(int64_t step) {
  // The parameters and optimizer state are the same on every rank: rank 0
  // writes them, the others wait, so that no rank runs ahead of a save
  // that might fail.
  if (world.rank() != 0) {
    dp->barrier();
    lastSaved = step;
    return;
  }
  TrainingState state;
  state.model = config.model;
  state.modelHash = config.modelHash;
  state.modelPath = config.modelPath;
  state.step = step;
  state.optimizer = config.optimizer;
  state.data = feeder->state();
  for (ParamSlot &p : params) {
    state.addTensor(*device, p.name, TensorRole::Parameter, p.value);
    if (p.first.data)
      state.addTensor(*device, p.name, TensorRole::FirstMoment, p.first);
    if (p.second.data)
      state.addTensor(*device, p.name, TensorRole::SecondMoment, p.second);
  }
  state.planFile = config.plan;
  saveTrainingState(options.checkpoint, state);
  lastSaved = step;
  if (dp)
    dp->barrier();
}

int64_t Trainer::resume() {
  TrainingState state =
      loadTrainingState(options.checkpoint, config.model, config.modelHash);
  BMRT_CHECK(state.optimizer == config.optimizer,
             "the checkpoint in '" + options.checkpoint + "' was trained with " +
                 state.optimizer + ", this trainer uses " + config.optimizer);
  for (ParamSlot &p : params) {
    state.copyTensorInto(*device, p.name, TensorRole::Parameter, p.value);
    if (p.first.data)
      state.copyTensorInto(*device, p.name, TensorRole::FirstMoment, p.first);
    if (p.second.data)
      state.copyTensorInto(*device, p.name, TensorRole::SecondMoment, p.second);
  }
  feeder->restore(state.data);
  BMRT_CHECK(state.step < options.steps,
             "the checkpoint in '" + options.checkpoint + "' is at step " +
                 std::to_string(state.step) + ", not before --steps " +
                 std::to_string(options.steps) + ": nothing to do");
  lastSaved = state.step;
  return state.step;
}

} // namespace

void runTrainer(const TrainerOptions &options, World &world) {
  Trainer trainer(options, world);
  trainer.run();
}

} // namespace bmrt
