//===- Trainer.cpp - the training loop ------------------------------------===//

#include "Trainer.h"

#include "Feeder.h"
#include "Parallel.h"
#include "StepReport.h"
#include "TrainingState.h"

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Comm.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Kernels.h"
#include "bmrt/Schedule.h"
#include "bmrt/Sharding.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

namespace bmrt {
namespace {

using json = nlohmann::json;

/// What `bmc compile` wrote beside the program (trainer.json).
struct CompiledConfig {
  std::string model, modelHash, modelPath, task, optimizer, precision,
      recompute;
  std::string program, parameters, plan;
  int64_t microBatch = 1, microBatches = 1;
  /// Ranks the step was compiled for.
  int ranks = 1;
  /// ZeRO stage over dp (0: none).
  int zero = 0;
  /// The pipeline: stages, schedule ("none", "gpipe", "1f1b",
  /// "interleaved") and virtual stages per rank.
  int pp = 1, chunks = 1;
  std::string schedule = "none";
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
    c.zero = j.value("zero", 0);
    c.pp = j.value("pp", 1);
    c.chunks = j.value("chunks", 1);
    c.schedule = j.value("schedule", std::string("none"));
  } catch (const json::exception &e) {
    BMRT_FAIL("'" + path + "' is missing a field or has a wrong type (" +
              e.what() + ")");
  }
  BMRT_CHECK(c.microBatches >= 1, "'" + path + "': micro_batches must be >= 1");
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

/// The step program, once the job is known to have the ranks it was
/// compiled for: the mesh's, or without a mesh line trainer.json's.
Program loadProgramFor(const CompiledConfig &config, World &world,
                       const std::string &dir) {
  Program program = loadProgram(config.program);
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

double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

class Trainer {
public:
  Trainer(const TrainerOptions &options, World &world)
      : options(options), config(readConfig(options.dir)), world(world),
        program(loadProgramFor(config, world, options.dir)),
        parallel(program, world, config.zero), device(createCpuDevice()),
        executor(program, *device, config.program, &parallel.collectives()),
        gathered(parallel, *device) {
    if (options.threads)
      cpu::setThreads(options.threads);
    bindParameters();
    feeder = std::make_unique<Feeder>(program, executor, config.task, options,
                                      parallel.mesh(), world.rank());
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
  void saveWhole(int64_t step);
  void saveShards(int64_t step);
  TrainingState stateAt(int64_t step) const;
  const TensorView &parameterOf(const ParamSlot &p) const;
  std::vector<uint8_t> localOf(const ParamSlot &p, const TensorView &state);
  void loadBox(const TrainingState &state, const ParamSlot &p, TensorRole role,
               const TensorView &into);
  const TensorView &gradientOf(const ParamSlot &p) const;
  int64_t resume();

  TrainerOptions options;
  CompiledConfig config;
  World &world;
  Program program;
  Parallel parallel;
  std::unique_ptr<Device> device;
  Executor executor;
  std::vector<ParamSlot> params;
  std::unique_ptr<Feeder> feeder;
  Hyperparameters hyper;
  int64_t lastSaved = 0;
  /// ZeRO 2: one micro-batch's reduced gradient shard, before it is added.
  TensorView shardTemp;
  /// ZeRO 3: the parameters gathered for their readers.
  GatheredParameters gathered;
};

/// A view of `shape` on the host bytes of `data` (for loading shards).
TensorView hostView(std::vector<uint8_t> &data, DType dtype,
                    const Shape &shape) {
  data.resize(numElements(shape) * sizeOf(dtype));
  return {data.data(), dtype, shape};
}

void Trainer::bindParameters() {
  std::vector<HostTensor> initial = readSafetensors(config.parameters).tensors;
  for (int slot : program.slotsOf(SlotKind::Param)) {
    ParamSlot p;
    p.name = program.slots[slot].name;
    p.slot = slot;
    p.value = executor.view(slot);
    parallel.describe(p, program);
    // params.safetensors holds the global tensor; this rank keeps its box.
    TensorView global = p.value;
    global.shape = p.global;
    const HostTensor &found =
        requireTensor(initial, p.name, global, "'" + config.parameters + "'");
    std::vector<uint8_t> box;
    copyBox(found.data.data(), p.global, p.offsets,
            hostView(box, p.value.dtype, p.value.shape).data, p.value.shape,
            Shape(p.value.shape.size(), 0), p.value.shape,
            sizeOf(p.value.dtype));
    device->copyToDevice(p.value.data, box.data(), p.value.bytes(),
                         executor.stream());
    int grad = program.gradientOf(slot);
    if (grad >= 0) {
      p.grad = executor.view(grad);
      allocateOptimizerState(p);
    }
    params.push_back(std::move(p));
  }
  executor.stream().synchronize();
  // ZeRO 3: from now on each rank keeps its dp shard of every trained
  // parameter; the executor gathers it for the instructions that read it.
  for (ParamSlot &p : params)
    if (p.shard.data) {
      cpu::copy(executor.stream(), Parallel::flatRange(p.value, p.begin, p.length),
                Parallel::flatRange(p.shard, 0, p.length));
      executor.stream().synchronize();
      executor.releaseSlot(p.slot, gathered);
      p.value.data = nullptr;
      gathered.add(p);
    }
  device->resetPeaks();
}

void Trainer::allocateOptimizerState(ParamSlot &p) {
  // Under ZeRO the state (and from stage 2 the gradient) is this rank's dp
  // shard only, flat.
  Shape stateShape = config.zero ? Shape{p.chunk} : p.value.shape;
  auto buffer = [&](MemoryKind kind, const Shape &shape) {
    TensorView v = p.value;
    v.shape = shape;
    v.data = device->allocate(std::max<size_t>(v.bytes(), 1), kind);
    return v;
  };
  p.first = buffer(MemoryKind::OptimizerState, stateShape);
  if (config.zero >= 3)
    p.shard = buffer(MemoryKind::Parameters, stateShape);
  if (config.optimizer == "adamw")
    p.second = buffer(MemoryKind::OptimizerState, stateShape);
  if (config.zero >= 2) {
    p.accumulated = buffer(MemoryKind::Gradients, stateShape);
    if (config.microBatches > 1 && shardTemp.size() < p.chunk)
      shardTemp = buffer(MemoryKind::Gradients, stateShape);
  } else if (config.microBatches > 1) {
    p.accumulated = buffer(MemoryKind::Gradients, p.value.shape);
  }
}

/// The gradient the optimizer reads: the micro-batches' sum, or under
/// ZeRO 2 this rank's reduced shard.
const TensorView &Trainer::gradientOf(const ParamSlot &p) const {
  return p.accumulated.data ? p.accumulated : p.grad;
}

/// Runs the step program on one micro-batch; returns its loss. With several
/// micro-batches the gradients add up in `accumulated`; under ZeRO 2 each
/// micro-batch's gradient is reduce-scattered first.
double Trainer::accumulateGradients(int64_t microBatch) {
  feeder->fill();
  executor.run();
  float loss = 0;
  device->copyToHost(&loss, executor.view(program.loss).data, sizeof loss,
                     executor.stream());
  for (ParamSlot &p : params) {
    if (!p.grad.data || !p.accumulated.data)
      continue;
    if (config.zero >= 2) {
      TensorView into = microBatch == 0 ? p.accumulated : shardTemp;
      into.shape = {p.chunk};
      parallel.reduceGradient(p, p.grad, into, executor.stream());
      if (microBatch > 0)
        cpu::binary(executor.stream(), cpu::BinaryOp::Add, p.accumulated,
                    into, p.accumulated);
    } else if (microBatch == 0) {
      cpu::copy(executor.stream(), p.grad, p.accumulated);
    } else {
      cpu::binary(executor.stream(), cpu::BinaryOp::Add, p.accumulated, p.grad,
                  p.accumulated);
    }
  }
  return loss;
}

StepReport Trainer::trainStep(int64_t step) {
  auto begin = std::chrono::steady_clock::now();
  double loss = 0;
  for (int64_t m = 0; m < config.microBatches; ++m)
    loss += accumulateGradients(m);
  loss /= double(config.microBatches);
  if (config.zero < 2)
    for (ParamSlot &p : params)
      if (p.grad.data)
        parallel.reduceGradient(p, gradientOf(p), {}, executor.stream());
  loss = parallel.reduceLoss(loss, program.lossPartial, executor.stream());
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
  // The mean gradient over micro-batches (and, without a mesh, ranks),
  // clipped by its global norm.
  double sumSquares = 0;
  for (ParamSlot &p : params)
    if (p.grad.data)
      sumSquares = parallel.addSumOfSquares(sumSquares, p, gradientOf(p),
                                            executor.stream());
  sumSquares = parallel.finishSumOfSquares(sumSquares, executor.stream());
  double mean = 1.0 / parallel.gradientDivisor(config.microBatches);
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
  report.rank = world.rank();
  report.communication = parallel.collectives().takeTimes();
  for (int k = 0; k < kNumMemoryKinds; ++k)
    report.peakBytes[k] = device->peakBytes(static_cast<MemoryKind>(k));
  report.peakTotal = device->peakTotalBytes();
  return report;
}

/// Updates this rank's range of every parameter (under ZeRO its dp shard,
/// then gathered back over dp).
void Trainer::update(int64_t step, float lr, float gradScale) {
  for (ParamSlot &p : params) {
    if (!p.grad.data)
      continue;
    TensorView value = p.value, grad = gradientOf(p), first = p.first,
               second = p.second;
    if (config.zero) {
      value = p.shard.data ? Parallel::flatRange(p.shard, 0, p.length)
                           : Parallel::flatRange(p.value, p.begin, p.length);
      grad = config.zero >= 2 ? Parallel::flatRange(grad, 0, p.length)
                              : Parallel::flatRange(grad, p.begin, p.length);
      first = Parallel::flatRange(p.first, 0, p.length);
      if (second.data)
        second = Parallel::flatRange(p.second, 0, p.length);
    }
    if (config.optimizer == "adamw")
      cpu::adamwUpdate(executor.stream(), value, grad, first, second,
                       hyper.adamw, lr, step, gradScale);
    else
      cpu::sgdUpdate(executor.stream(), value, grad, first, hyper.sgd, lr,
                     step, gradScale);
    if (config.zero && !p.shard.data)
      parallel.gatherOverDp(p, p.value, {}, executor.stream());
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

/// `p`'s whole local tensor of optimizer state `state` (under ZeRO this
/// rank's dp chunk, gathered over dp: collective) on the host.
std::vector<uint8_t> Trainer::localOf(const ParamSlot &p,
                                      const TensorView &state) {
  std::vector<uint8_t> local(p.value.bytes());
  TensorView whole{local.data(), p.value.dtype, p.value.shape};
  if (config.zero && state.data != p.value.data)
    parallel.gatherOverDp(p, whole, state, executor.stream());
  else
    device->copyToHost(local.data(), state.data, whole.bytes(),
                       executor.stream());
  executor.stream().synchronize();
  return local;
}

/// Where `p`'s value is kept between steps: its dp shard under ZeRO 3.
const TensorView &Trainer::parameterOf(const ParamSlot &p) const {
  return p.shard.data ? p.shard : p.value;
}

TrainingState Trainer::stateAt(int64_t step) const {
  TrainingState state;
  state.model = config.model;
  state.modelHash = config.modelHash;
  state.modelPath = config.modelPath;
  state.step = step;
  state.optimizer = config.optimizer;
  state.data = feeder->state();
  state.planFile = config.plan;
  return state;
}

void Trainer::save(int64_t step) {
  if (parallel.hasMesh())
    saveShards(step);
  else
    saveWhole(step);
  lastSaved = step;
}

/// A data-parallel job without a mesh: rank 0 writes the global tensors
/// (under ZeRO gathered over dp), the others wait, so that no rank runs
/// ahead of a save that might fail.
void Trainer::saveWhole(int64_t step) {
  TrainingState state = stateAt(step);
  for (ParamSlot &p : params) {
    auto add = [&](TensorRole role, std::vector<uint8_t> bytes) {
      if (world.rank() == 0)
        state.addTensor(*device, p.name, role,
                        hostView(bytes, p.value.dtype, p.global));
    };
    add(TensorRole::Parameter, localOf(p, parameterOf(p)));
    if (p.first.data)
      add(TensorRole::FirstMoment, localOf(p, p.first));
    if (p.second.data)
      add(TensorRole::SecondMoment, localOf(p, p.second));
  }
  if (world.rank() == 0)
    saveTrainingState(options.checkpoint, state);
  parallel.barrier();
}

/// A job over a mesh: every rank writes the shards it is the replica of
/// that counts, rank 0 the manifest (ShardedCheckpoint.h). ZeRO's shards
/// (optimizer state; parameters under ZeRO 3) are written flat, each dp
/// rank its own range.
void Trainer::saveShards(int64_t step) {
  TrainingState state = stateAt(step);
  std::vector<ShardedTensor> listed;
  for (ParamSlot &p : params) {
    auto add = [&](TensorRole role, const TensorView &value) {
      bool flat = role == TensorRole::Parameter ? p.shard.data != nullptr
                                                : config.zero > 0;
      ShardedTensor t;
      t.name = role == TensorRole::Parameter
                   ? p.name
                   : stateName(config.optimizer, role, p.name);
      t.kind = role == TensorRole::Parameter ? TensorKind::Parameter
                                             : TensorKind::OptimizerState;
      t.dtype = p.value.dtype;
      t.global = p.global;
      t.shards = parallel.writtenShards(p, flat);
      listed.push_back(std::move(t));
      if (parallel.writesShard(p, flat))
        state.addTensor(*device, p.name, role,
                        flat ? Parallel::flatRange(value, 0, p.length) : value);
    };
    add(TensorRole::Parameter, parameterOf(p));
    if (p.first.data)
      add(TensorRole::FirstMoment, p.first);
    if (p.second.data)
      add(TensorRole::SecondMoment, p.second);
  }
  saveShardedTrainingState(options.checkpoint, state, world.rank(),
                           parallel.meshSizes(), listed,
                           [&] { parallel.barrier(); });
  parallel.barrier();
}

/// Copies this rank's box of the checkpoint's global tensor into `into`
/// (under ZeRO, for optimizer state, its dp chunk of the box).
void Trainer::loadBox(const TrainingState &state, const ParamSlot &p,
                      TensorRole role, const TensorView &into) {
  const HostTensor &t = state.tensor(p.name, role, p.value.dtype, p.global);
  std::vector<uint8_t> box;
  TensorView local = hostView(box, p.value.dtype, p.value.shape);
  copyBox(t.data.data(), p.global, p.offsets, local.data, local.shape,
          Shape(local.shape.size(), 0), local.shape, sizeOf(local.dtype));
  bool chunked = config.zero && (role != TensorRole::Parameter || p.shard.data);
  TensorView from = chunked ? Parallel::flatRange(local, p.begin, p.length)
                            : local;
  device->copyToDevice(into.data, from.data, from.bytes(), executor.stream());
}

int64_t Trainer::resume() {
  // Rank 0 reads the checkpoint first: a damaged one then ends the job
  // with rank 0's one line, not one line per rank.
  if (world.rank() != 0)
    parallel.barrier();
  std::optional<TrainingState> read;
  try {
    read = loadTrainingState(options.checkpoint, config.model,
                             config.modelHash);
  } catch (const Error &e) {
    failOnRankZero(world, e.what());
  }
  if (world.rank() == 0)
    parallel.barrier();
  TrainingState &state = *read;
  BMRT_CHECK(state.optimizer == config.optimizer,
             "the checkpoint in '" + options.checkpoint + "' was trained with " +
                 state.optimizer + ", this trainer uses " + config.optimizer);
  for (ParamSlot &p : params) {
    loadBox(state, p, TensorRole::Parameter, parameterOf(p));
    if (p.first.data)
      loadBox(state, p, TensorRole::FirstMoment, p.first);
    if (p.second.data)
      loadBox(state, p, TensorRole::SecondMoment, p.second);
  }
  executor.stream().synchronize();
  feeder->restore(state.data);
  BMRT_CHECK(state.step < options.steps,
             "the checkpoint in '" + options.checkpoint + "' is at step " +
                 std::to_string(state.step) + ", not before --steps " +
                 std::to_string(options.steps) + ": nothing to do");
  lastSaved = state.step;
  return state.step;
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

} // namespace

void runTrainer(const TrainerOptions &options, World &world) {
  if (options.printSchedule) {
    if (world.rank() == 0)
      printPipeline(readConfig(options.dir), stdout);
    return;
  }
  Trainer trainer(options, world);
  trainer.run();
}

} // namespace bmrt
