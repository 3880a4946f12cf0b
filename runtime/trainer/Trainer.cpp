//===- Trainer.cpp - the training loop ------------------------------------===//

#include "Trainer.h"

#include "Feeder.h"
#include "Parallel.h"
#include "Pipeline.h"
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
  /// With a pipeline: each virtual stage's program, in virtual-stage order.
  std::vector<std::string> stages;
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
    for (const std::string &stage :
         j.value("stages", std::vector<std::string>()))
      c.stages.push_back(dir + "/" + stage);
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

double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

class Trainer {
public:
  Trainer(const TrainerOptions &options, World &world)
      : options(options), config(readConfig(options.dir)), world(world),
        first(loadProgramFor(config, world, options.dir)),
        parallel(first, world, config.zero), device(createCpuDevice()),
        gathered(parallel, *device) {
    if (options.threads)
      cpu::setThreads(options.threads);
    loadStages();
    bindParameters();
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
  void loadStages();
  void placeStage(Stage &stage, const std::string &source);
  void startPipeline();
  Stream &stream() { return device->computeStream(); }
  /// The feeder of the data (stage 0's), or null on ranks without it.
  Feeder *dataFeeder() const;
  size_t arenaBytes() const {
    size_t bytes = 0;
    for (const Stage &stage : stages)
      bytes += stage.executor->arenaBytes();
    return bytes;
  }
  void bindParameters();
  void describeEveryParameter(const std::vector<std::string> &files);
  double runMicroBatch();
  void accumulate(int stage, int backwardsBefore);
  void allocateOptimizerState(ParamSlot &p);
  StepReport trainStep(int64_t step);
  void update(int64_t step, float lr, float gradScale);
  void printStart(int64_t start) const;
  std::unique_ptr<std::ofstream> openLog() const;
  void save(int64_t step);
  void saveWhole(int64_t step);
  void saveShards(int64_t step);
  TrainingState stateAt(int64_t step) const;
  std::vector<TensorRole> rolesOf(const ParamSlot &p) const;
  bool isFlat(const ParamSlot &p, TensorRole role) const;
  const TensorView &parameterOf(const ParamSlot &p) const;
  std::vector<uint8_t> localOf(const ParamSlot &p, const TensorView &state);
  void loadBox(const TrainingState &state, const ParamSlot &p, TensorRole role,
               const TensorView &into);
  const TensorView &gradientOf(const ParamSlot &p) const;
  int64_t resume();

  TrainerOptions options;
  CompiledConfig config;
  World &world;
  /// The program the mesh is read from (the first stage's with a pipeline).
  Program first;
  Parallel parallel;
  std::unique_ptr<Device> device;
  /// This rank's step programs: the whole step, or its pipeline chunks.
  std::vector<Stage> stages;
  std::unique_ptr<Pipeline> pipeline;
  /// The axes the reported loss is summed over.
  std::vector<std::string> lossAxes;
  /// Backwards run this step per stage (a stage's first one starts its
  /// gradient sum).
  std::vector<int> backwards;
  std::vector<ParamSlot> params;
  /// Every parameter of every stage, described (no memory): what a sharded
  /// checkpoint's manifest lists.
  std::vector<ParamSlot> everyParam;
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

/// This rank's programs: the step, or its chunks of the pipeline (virtual
/// stages c * pp + its pp coordinate).
void Trainer::loadStages() {
  if (config.stages.empty() && first.meshAxisSize("pp") > 1)
    failOnRankZero(world, "the step program's mesh has pp=" +
                              std::to_string(first.meshAxisSize("pp")) +
                              " but trainer.json lists no pipeline stages "
                              "(\"stages\"): this runtime runs a pipeline "
                              "from one program per stage");
  if (config.stages.empty()) {
    stages.resize(1);
    stages[0].program = first;
    placeStage(stages[0], config.program);
    lossAxes = first.lossPartial;
    describeEveryParameter({config.program});
    return;
  }
  int pp = first.meshAxisSize("pp");
  if (static_cast<int>(config.stages.size()) != pp * config.chunks)
    failOnRankZero(world, "trainer.json lists " +
                              std::to_string(config.stages.size()) +
                              " stages; pp " + std::to_string(pp) +
                              " x chunks " + std::to_string(config.chunks) +
                              " needs " + std::to_string(pp * config.chunks));
  int ppRank = parallel.mesh().coordinate(world.rank(), "pp");
  // Placed only once all are loaded: feeders keep references to them.
  stages.resize(config.chunks);
  for (int c = 0; c < config.chunks; ++c) {
    stages[c].virtualStage = c * pp + ppRank;
    stages[c].program = loadProgram(config.stages[stages[c].virtualStage]);
  }
  for (Stage &stage : stages)
    placeStage(stage, config.stages[stage.virtualStage]);
  // The last stage has the loss: every rank sums it over pp too.
  lossAxes = loadProgram(config.stages.back()).lossPartial;
  lossAxes.push_back("pp");
  describeEveryParameter(config.stages);
  startPipeline();
}

void Trainer::placeStage(Stage &stage, const std::string &source) {
  stage.executor = std::make_unique<Executor>(stage.program, *device, source,
                                              &parallel.collectives());
  if (!stage.program.slotsOf(SlotKind::Input).empty() ||
      !stage.program.slotsOf(SlotKind::Label).empty())
    stage.feeder = std::make_unique<Feeder>(stage.program, *stage.executor,
                                            config.task, options,
                                            parallel.mesh(), world.rank());
}

void Trainer::startPipeline() {
  std::optional<ScheduleKind> kind = parseScheduleKind(config.schedule);
  if (!kind)
    failOnRankZero(world, "trainer.json lists pipeline stages but its "
                          "schedule is '" + config.schedule +
                              "'; expected gpipe, 1f1b or interleaved");
  ScheduleSpec spec;
  spec.kind = *kind;
  spec.pp = first.meshAxisSize("pp");
  spec.v = config.chunks;
  spec.m = static_cast<int>(config.microBatches);
  try {
    pipeline = std::make_unique<Pipeline>(
        spec, parallel.mesh().coordinate(world.rank(), "pp"), stages,
        parallel.collectives());
  } catch (const Error &e) {
    failOnRankZero(world, e.what()); // a schedule every rank refuses alike
  }
}

Feeder *Trainer::dataFeeder() const {
  for (const Stage &stage : stages)
    if (stage.feeder)
      return stage.feeder.get();
  return nullptr;
}

/// Every parameter of every program in `files` (all stages, on every
/// rank), for the checkpoint's manifest.
void Trainer::describeEveryParameter(const std::vector<std::string> &files) {
  int pp = first.meshAxisSize("pp");
  for (size_t s = 0; s < files.size(); ++s) {
    Program program = files.size() == 1 ? first : loadProgram(files[s]);
    for (int slot : program.slotsOf(SlotKind::Param)) {
      ParamSlot p;
      p.name = program.slots[slot].name;
      p.slot = slot;
      p.value.dtype = program.slots[slot].dtype;
      p.value.shape = program.slots[slot].shape;
      p.ppRank = static_cast<int>(s) % pp;
      parallel.describe(p, program);
      everyParam.push_back(std::move(p));
    }
  }
}

void Trainer::bindParameters() {
  std::vector<HostTensor> initial = readSafetensors(config.parameters).tensors;
  for (size_t st = 0; st < stages.size(); ++st)
  for (int slot : stages[st].program.slotsOf(SlotKind::Param)) {
    const Program &program = stages[st].program;
    Executor &executor = *stages[st].executor;
    ParamSlot p;
    p.name = program.slots[slot].name;
    p.slot = slot;
    p.stage = static_cast<int>(st);
    p.ppRank = stages[st].virtualStage % first.meshAxisSize("pp");
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
    device->copyToDevice(p.value.data, box.data(), p.value.bytes(), stream());
    int grad = program.gradientOf(slot);
    if (grad >= 0) {
      p.grad = executor.view(grad);
      allocateOptimizerState(p);
    }
    params.push_back(std::move(p));
  }
  stream().synchronize();
  // ZeRO 3: from now on each rank keeps its dp shard of every trained
  // parameter; the executor gathers it for the instructions that read it.
  for (ParamSlot &p : params)
    if (p.shard.data) {
      cpu::copy(stream(), Parallel::flatRange(p.value, p.begin, p.length),
                Parallel::flatRange(p.shard, 0, p.length));
      stream().synchronize();
      stages[p.stage].executor->releaseSlot(p.slot, gathered);
      p.value.data = nullptr;
      gathered.add(p, *stages[p.stage].executor);
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

/// Runs the whole step program on one micro-batch (no pipeline); returns
/// its loss.
double Trainer::runMicroBatch() {
  Stage &stage = stages[0];
  stage.feeder->fill();
  stage.executor->run();
  float loss = 0;
  device->copyToHost(&loss, stage.executor->view(stage.program.loss).data,
                     sizeof loss, stream());
  stream().synchronize();
  return loss;
}

/// Adds the gradients a stage's backward just wrote to its sums (with
/// several micro-batches); under ZeRO 2 each micro-batch's gradient is
/// reduce-scattered first.
void Trainer::accumulate(int stage, int backwardsBefore) {
  for (ParamSlot &p : params) {
    if (p.stage != stage || !p.grad.data || !p.accumulated.data)
      continue;
    if (config.zero >= 2) {
      TensorView into = backwardsBefore == 0 ? p.accumulated : shardTemp;
      into.shape = {p.chunk};
      parallel.reduceGradient(p, p.grad, into, stream());
      if (backwardsBefore > 0)
        cpu::binary(stream(), cpu::BinaryOp::Add, p.accumulated, into,
                    p.accumulated);
    } else if (backwardsBefore == 0) {
      cpu::copy(stream(), p.grad, p.accumulated);
    } else {
      cpu::binary(stream(), cpu::BinaryOp::Add, p.accumulated, p.grad,
                  p.accumulated);
    }
  }
}

StepReport Trainer::trainStep(int64_t step) {
  auto begin = std::chrono::steady_clock::now();
  double loss = 0;
  backwards.assign(stages.size(), 0);
  auto afterBackward = [&](int stage, int) {
    accumulate(stage, backwards[stage]++);
  };
  if (pipeline) {
    loss = pipeline->runStep(afterBackward);
  } else {
    for (int64_t m = 0; m < config.microBatches; ++m) {
      loss += runMicroBatch();
      afterBackward(0, static_cast<int>(m));
    }
  }
  loss /= double(config.microBatches);
  if (config.zero < 2)
    for (ParamSlot &p : params)
      if (p.grad.data)
        parallel.reduceGradient(p, gradientOf(p), {}, stream());
  loss = parallel.reduceLoss(loss, lossAxes, stream());
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
      sumSquares =
          parallel.addSumOfSquares(sumSquares, p, gradientOf(p), stream());
  sumSquares = parallel.finishSumOfSquares(sumSquares, stream());
  double mean = 1.0 / parallel.gradientDivisor(config.microBatches);
  double norm = std::sqrt(sumSquares) * mean;
  float scale = static_cast<float>(mean * clipScale(norm, options.clip));
  float lr = hyper.schedule.learningRate(step);
  update(step, lr, scale);
  stream().synchronize();

  StepReport report;
  report.step = step;
  report.steps = options.steps;
  report.loss = loss;
  report.lr = lr;
  report.gradNorm = norm;
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - begin)
                       .count();
  if (Feeder *feeder = dataFeeder()) {
    report.items = feeder->itemsPerMicroBatch() * config.microBatches;
    report.itemName = feeder->itemName();
  }
  report.rank = world.rank();
  report.communication = parallel.collectives().takeTimes();
  report.bubble = pipeline ? pipeline->bubbleSeconds() : 0;
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
      cpu::adamwUpdate(stream(), value, grad, first, second,
                       hyper.adamw, lr, step, gradScale);
    else
      cpu::sgdUpdate(stream(), value, grad, first, hyper.sgd, lr,
                     step, gradScale);
    if (config.zero && !p.shard.data)
      parallel.gatherOverDp(p, p.value, {}, stream());
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
              dataFeeder() ? dataFeeder()->describe().c_str() : "no data");
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
              mib(arenaBytes()),
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
    parallel.gatherOverDp(p, whole, state, stream());
  else
    device->copyToHost(local.data(), state.data, whole.bytes(),
                       stream());
  stream().synchronize();
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
  if (Feeder *feeder = dataFeeder())
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
  // Rank 0 lists every stage's tensors, held here or not.
  std::vector<ShardedTensor> listed;
  for (const ParamSlot &p : everyParam)
    for (TensorRole role : rolesOf(p)) {
      ShardedTensor t;
      t.name = role == TensorRole::Parameter
                   ? p.name
                   : stateName(config.optimizer, role, p.name);
      t.kind = role == TensorRole::Parameter ? TensorKind::Parameter
                                             : TensorKind::OptimizerState;
      t.dtype = p.value.dtype;
      t.global = p.global;
      t.shards = parallel.writtenShards(p, isFlat(p, role));
      listed.push_back(std::move(t));
    }
  TrainingState state = stateAt(step);
  for (ParamSlot &p : params)
    for (TensorRole role : rolesOf(p)) {
      bool flat = isFlat(p, role);
      const TensorView &value = role == TensorRole::Parameter ? parameterOf(p)
                                : role == TensorRole::FirstMoment ? p.first
                                                                  : p.second;
      if (parallel.writesShard(p, flat))
        state.addTensor(*device, p.name, role,
                        flat ? Parallel::flatRange(value, 0, p.length) : value);
    }
  saveShardedTrainingState(options.checkpoint, state, world.rank(),
                           parallel.meshSizes(), listed,
                           [&] { parallel.barrier(); });
  parallel.barrier();
}

/// What a checkpoint holds of `p`: its value, and its optimizer state if
/// it is trained.
std::vector<TensorRole> Trainer::rolesOf(const ParamSlot &p) const {
  if (!p.trained)
    return {TensorRole::Parameter};
  if (config.optimizer == "adamw")
    return {TensorRole::Parameter, TensorRole::FirstMoment,
            TensorRole::SecondMoment};
  return {TensorRole::Parameter, TensorRole::FirstMoment};
}

/// ZeRO's shards are flat: optimizer state, and trained parameters under
/// ZeRO 3.
bool Trainer::isFlat(const ParamSlot &p, TensorRole role) const {
  return role == TensorRole::Parameter ? config.zero >= 3 && p.trained
                                       : config.zero > 0;
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
  device->copyToDevice(into.data, from.data, from.bytes(), stream());
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
  stream().synchronize();
  for (Stage &stage : stages)
    if (stage.feeder)
      stage.feeder->restore(state.data);
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
