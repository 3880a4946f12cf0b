//===- Trainer.cpp - the training loop ------------------------------------===//

#include "Trainer.h"

#include "TrainerLoop.h"

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Comm.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Schedule.h"
#include "bmrt/Sharding.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

namespace bmrt {

static double mib(size_t bytes) { return double(bytes) / (1024.0 * 1024.0); }

/// Every virtual stage's program, each boundary's transfers checked (the
/// values one stage sends are those the next receives, by position) before
/// any rank posts one.
static std::vector<Program>
loadPipelineStages(const std::vector<std::string> &files) {
  std::vector<Program> all;
  for (const std::string &file : files)
    all.push_back(loadProgram(file));
  for (size_t s = 0; s + 1 < all.size(); ++s)
    checkStageBoundary(all[s], files[s], all[s + 1], files[s + 1]);
  return all;
}

/// This rank's programs: the step, or its chunks of the pipeline (the
/// virtual stages the schedule's layout puts on its pp coordinate).
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
  try {
    spec = pipelineSpec(config, pp);
  } catch (const Error &e) {
    failOnRankZero(world, e.what()); // a schedule every rank refuses alike
  }
  std::vector<Program> all = loadPipelineStages(config.stages);
  // Placed only once all are loaded: feeders keep references to them.
  stages.resize(config.chunks);
  for (int c = 0; c < config.chunks; ++c) {
    stages[c].virtualStage = spec.virtualStage(ppRank, c);
    stages[c].program = all[stages[c].virtualStage];
  }
  // Every stage draws the same batches: those without the loss learn its
  // class count from the last.
  lossClasses = Feeder::lossClasses(all.back());
  for (Stage &stage : stages)
    placeStage(stage, config.stages[stage.virtualStage]);
  // The last stage has the loss: every rank sums it over pp too.
  lossAxes = all.back().lossPartial;
  lossAxes.push_back("pp");
  describeEveryParameter(config.stages);
  startPipeline();
}

void Trainer::placeStage(Stage &stage, const std::string &source) {
  stage.executor = std::make_unique<Executor>(
      stage.program, *device, source, &parallel.collectives(),
      !config.stages.empty() && spec.splitsBackward() ? BackwardParts::Split
                                                      : BackwardParts::Whole);
  if (!stage.program.slotsOf(SlotKind::Input).empty() ||
      !stage.program.slotsOf(SlotKind::Label).empty())
    stage.feeder = std::make_unique<Feeder>(
        stage.program, *stage.executor, config.task, options, parallel.mesh(),
        world.rank(), lossClasses, config.cpLayout == "mirrored");
}

void Trainer::startPipeline() {
  ActionCosts costs;
  try {
    costs = pipelineCosts(config, spec);
  } catch (const Error &e) {
    failOnRankZero(world, e.what()); // a file every rank reads alike
  }
  pipeline = std::make_unique<Pipeline>(
      spec, costs, parallel.mesh().coordinate(world.rank(), "pp"), stages,
      parallel.collectives());
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
  for (size_t s = 0; s < files.size(); ++s) {
    Program program = files.size() == 1 ? first : loadProgram(files[s]);
    for (int slot : program.slotsOf(SlotKind::Param)) {
      ParamSlot p;
      p.name = program.slots[slot].name;
      p.slot = slot;
      p.value.dtype = program.slots[slot].dtype;
      p.value.shape = program.slots[slot].shape;
      p.ppRank = files.size() == 1 ? 0 : spec.rankOf(static_cast<int>(s));
      parallel.describe(p, program);
      // A copy on every stage (tied embeddings) is listed once.
      if (std::any_of(everyParam.begin(), everyParam.end(),
                      [&](const ParamSlot &q) { return q.name == p.name; }))
        continue;
      everyParam.push_back(std::move(p));
    }
  }
}

void Trainer::bindParameters() {
  InitialParameters initial(config.parameters, config.init);
  for (size_t st = 0; st < stages.size(); ++st)
    for (int slot : stages[st].program.slotsOf(SlotKind::Param))
      bindParameter(static_cast<int>(st), slot, initial);
  stream().synchronize();
  for (ParamSlot &p : params) {
    if (p.grad.data)
      allocateOptimizerState(p);
    if (p.grad.data && Parallel::sharedByStages(p))
      sharedByStages.push_back(&p);
  }
  std::sort(sharedByStages.begin(), sharedByStages.end(),
            [](const ParamSlot *a, const ParamSlot *b) {
              return a->name < b->name;
            });
  releaseSlots();
  if (offload) {
    std::vector<const ParamSlot *> trained;
    offload->hold(updateRanges(trained));
    offload->host().resetPeaks();
  }
  device->resetPeaks();
}

/// Slot `slot` of stage `st`: a parameter, given this rank's box of its
/// tensor in `initial`, or another chunk's copy of one bound before.
void Trainer::bindParameter(int st, int slot,
                            const InitialParameters &initial) {
  const Program &program = stages[st].program;
  Executor &executor = *stages[st].executor;
  int grad = program.gradientOf(slot);
  auto held =
      std::find_if(params.begin(), params.end(), [&](const ParamSlot &q) {
        return q.name == program.slots[slot].name;
      });
  if (held != params.end()) {
    BMRT_CHECK(program.slots[slot].shape == held->value.shape,
               "parameter '" + held->name +
                   "' has other shapes in two pipeline chunks of rank " +
                   std::to_string(world.rank()));
    held->copies.push_back(
        {st, slot, grad >= 0 ? executor.view(grad) : TensorView()});
    return;
  }
  ParamSlot p;
  p.name = program.slots[slot].name;
  p.slot = slot;
  p.stage = st;
  p.ppRank = config.stages.empty() ? 0 : spec.rankOf(stages[st].virtualStage);
  p.value = executor.view(slot);
  parallel.describe(p, program);
  // params.safetensors holds the global tensor (init.json describes it);
  // this rank keeps its box.
  TensorView global = p.value;
  global.shape = p.global;
  std::vector<uint8_t> box;
  initial.readBox(p.name, global, p.model, p.offsets, p.value.shape,
                  hostView(box, p.value.dtype, p.value.shape).data);
  device->copyToDevice(p.value.data, box.data(), p.value.bytes(), stream());
  if (grad >= 0)
    p.grad = executor.view(grad);
  params.push_back(std::move(p));
}

/// The parameter slots whose memory the executors give up: under ZeRO 3
/// each rank keeps its dp shard of every trained parameter, gathered for
/// the instructions that read it; a chunk's copy reads its parameter's one
/// buffer (or shard) on this rank.
void Trainer::releaseSlots() {
  for (ParamSlot &p : params) {
    if (p.shard.data) {
      device->copyOnDevice(
          p.shard.data,
          Parallel::flatRange(p.value, p.begin, p.length).data,
          p.length * sizeOf(p.value.dtype), stream());
      stream().synchronize();
      stages[p.stage].executor->releaseSlot(p.slot, gathered);
      p.value.data = nullptr;
      gathered.add(p, *stages[p.stage].executor, p.slot);
    }
    for (const ChunkCopy &copy : p.copies) {
      stages[copy.stage].executor->releaseSlot(copy.slot, gathered);
      gathered.add(p, *stages[copy.stage].executor, copy.slot);
    }
  }
}

void Trainer::allocateOptimizerState(ParamSlot &p) {
  // Under ZeRO the state (and from stage 2 the gradient) is this rank's dp
  // shard only, flat.
  Shape stateShape = config.zero ? Shape{p.chunk} : p.value.shape;
  auto bufferOn = [&](Device &on, MemoryKind kind, const Shape &shape) {
    TensorView v = p.value;
    v.shape = shape;
    v.data = on.allocate(std::max<size_t>(v.bytes(), 1), kind);
    return v;
  };
  auto buffer = [&](MemoryKind kind, const Shape &shape) {
    return bufferOn(*device, kind, shape);
  };
  p.first = bufferOn(stateDevice(), MemoryKind::OptimizerState, stateShape);
  if (config.zero >= 3)
    p.shard = buffer(MemoryKind::Parameters, stateShape);
  if (hasSecondMoment(config.optimizerKind))
    p.second = bufferOn(stateDevice(), MemoryKind::OptimizerState, stateShape);
  // Several gradients a step (micro-batches, chunks' copies) need a sum.
  bool sums = config.microBatches > 1 || !p.copies.empty();
  if (config.zero >= 2) {
    p.accumulated = buffer(MemoryKind::Gradients, stateShape);
    if (sums && shardTemp.size() < p.chunk)
      shardTemp = buffer(MemoryKind::Gradients, stateShape);
  } else if (sums) {
    p.accumulated = buffer(MemoryKind::Gradients, p.value.shape);
  }
}

/// Reductions during the backward: buckets per stage (the whole step, or
/// each pipeline chunk of this rank).
void Trainer::startOverlap() {
  buckets.resize(stages.size());
  if (!options.overlap.value_or(config.overlapGradReduce))
    return;
  auto threshold = static_cast<size_t>(options.bucketMb * 1024 * 1024);
  for (size_t st = 0; st < stages.size(); ++st) {
    auto made = std::make_unique<GradientBuckets>(
        params, static_cast<int>(st), *stages[st].executor, *device,
        threshold,
        [this](const ParamSlot &p) { return parallel.singleReduction(p); },
        [this](const std::string &group, double seconds) {
          parallel.collectives().addTime(group, seconds);
        });
    if (made->empty())
      continue;
    GradientBuckets *hooked = made.get();
    stages[st].executor->setInstructionHook(
        [hooked](size_t index) { hooked->afterInstruction(index); });
    buckets[st] = std::move(made);
  }
}

/// Whether `stage`'s next backward reduces its buckets: its last of the
/// step, or under ZeRO 2 and 3 (which reduce-scatter each) every one.
bool Trainer::armBuckets(int stage) {
  if (!buckets[stage])
    return false;
  int before = backwards[stage];
  if (config.zero < 2 && before + 1 < config.microBatches)
    return false;
  buckets[stage]->arm(before == 0);
  return true;
}

/// After a backward of `stage`: the buckets' sums written back, then the
/// rest accumulated.
void Trainer::afterBackward(int stage, bool overlapped) {
  if (overlapped)
    buckets[stage]->finish();
  accumulate(stage, overlapped);
  ++backwards[stage];
}

bool Trainer::reducedByBuckets(const ParamSlot &p) const {
  return buckets[p.stage] && buckets[p.stage]->covers(p);
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

/// Adds the gradients a stage's backward just wrote to their sums (with
/// several micro-batches, or a parameter in several of this rank's
/// chunks). `overlapped`: the buckets did that for the gradients they
/// cover.
void Trainer::accumulate(int stage, bool overlapped) {
  for (ParamSlot &p : params) {
    if (!p.accumulated.data)
      continue;
    if (p.stage == stage && p.grad.data && !(overlapped && reducedByBuckets(p)))
      addGradient(p, p.grad);
    for (const ChunkCopy &copy : p.copies)
      if (copy.stage == stage && copy.grad.data)
        addGradient(p, copy.grad);
  }
}

/// Adds `grad`, one backward's gradient of `p`, to p's sum (the step's
/// first starts it); under ZeRO 2 and 3 reduce-scattered over dp first.
void Trainer::addGradient(ParamSlot &p, const TensorView &grad) {
  bool starts = p.added++ == 0;
  if (config.zero >= 2) {
    TensorView into = starts ? p.accumulated : shardTemp;
    into.shape = {p.chunk};
    parallel.reduceGradient(p, grad, into, stream());
    if (!starts)
      kernels().add(stream(), p.accumulated, into, p.accumulated);
  } else if (starts) {
    device->copyOnDevice(p.accumulated.data, grad.data, grad.bytes(), stream());
  } else {
    kernels().add(stream(), p.accumulated, grad, p.accumulated);
  }
}

/// Once the pipeline has drained, the gradients of parameters shared by
/// pipeline stages summed over pp: by name, in one order on every rank,
/// since each pipeline rank would reach a sum inside its schedule at
/// another point (as Megatron-LM all-reduces tied embeddings' gradients
/// after the data-parallel reduction).
void Trainer::sumOverStages() {
  for (ParamSlot *p : sharedByStages)
    parallel.sumOverStages(*p, gradientOf(*p), stream());
}

StepReport Trainer::trainStep(int64_t step) {
  auto begin = std::chrono::steady_clock::now();
  double loss = 0;
  backwards.assign(stages.size(), 0);
  for (ParamSlot &p : params)
    p.added = 0;
  if (pipeline) {
    std::vector<char> overlapped(stages.size(), false);
    loss = pipeline->runStep(
        [&](int stage, int) { overlapped[stage] = armBuckets(stage); },
        [&](int stage, int) { afterBackward(stage, overlapped[stage]); });
  } else {
    for (int64_t m = 0; m < config.microBatches; ++m) {
      bool overlapped = armBuckets(0);
      loss += runMicroBatch();
      afterBackward(0, overlapped);
    }
  }
  loss /= double(config.microBatches);
  if (config.zero < 2)
    for (ParamSlot &p : params)
      if (p.grad.data && !reducedByBuckets(p))
        parallel.reduceGradient(p, gradientOf(p), {}, stream());
  sumOverStages();
  loss = parallel.reduceLoss(loss, lossAxes, stream());
  if (!std::isfinite(loss))
    stopOnNonFiniteLoss(step, loss);
  // The mean gradient over micro-batches (and, without a mesh, ranks),
  // clipped by its global norm.
  std::vector<TensorView> counted;
  for (ParamSlot &p : params)
    if (p.grad.data)
      if (std::optional<TensorView> g =
              parallel.countedGradient(p, gradientOf(p)))
        counted.push_back(*g);
  double sumSquares = parallel.finishSumOfSquares(
      device->backend().trainer.sumOfSquares(stream(), counted), stream());
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
  for (auto &stageBuckets : buckets)
    if (stageBuckets)
      report.overlapWindow += stageBuckets->takeOverlapWindow();
  for (int k = 0; k < kNumMemoryKinds; ++k)
    report.peakBytes[k] = device->peakBytes(static_cast<MemoryKind>(k));
  report.peakTotal = device->peakTotalBytes();
  if (offload) {
    report.hostPeakTotal = offload->host().peakTotalBytes();
    report.offload = offload->takeTimes();
  }
  return report;
}

ContractionPrecision askedPrecision(const TrainerOptions &options,
                                    const CompiledConfig &config) {
  if (options.precision)
    return *options.precision;
  ContractionPrecision precision;
  BMRT_CHECK(parseContractionPrecision(config.precision, precision),
             "trainer.json's precision must be fp32, bf16 or fp16, got '" +
                 config.precision + "'");
  return precision;
}

/// The start-up note on what the device computes in, where it is not plain
/// fp32 throughout. Mixed precision so far is its first step: GEMM inputs
/// only. Weights, activations, gradients and optimizer state are fp32 in
/// memory on every backend. bench/gpu_bench.py reads "computes in X" and
/// "GEMMs take X inputs" from this line.
void Trainer::printPrecision() const {
  ContractionPrecision asked = askedPrecision(options, config);
  ContractionPrecision computed = device->contractionPrecision();
  std::string runtime = device->backend().name;
  for (char &c : runtime)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string plan = "the plan trains in " + config.precision;
  if (config.precision != "fp32")
    plan += " mixed precision";
  if (config.precision != nameOf(asked))
    plan += std::string(" (--precision ") + nameOf(asked) + ")";
  if (computed == ContractionPrecision::BF16)
    std::printf("note: %s; the %s runtime's GEMMs take bf16 inputs with "
                "fp32 accumulation; weights, activations and optimizer state "
                "are fp32\n",
                plan.c_str(), runtime.c_str());
  else if (asked != ContractionPrecision::F32 || config.precision != "fp32")
    std::printf("note: %s; the %s runtime computes in fp32\n", plan.c_str(),
                runtime.c_str());
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
  printPrecision();
  std::printf("memory: parameters %.2f MiB, gradients %.2f MiB, optimizer "
              "state %.2f MiB, activations %.2f MiB (arena %.2f MiB), "
              "workspace %.2f MiB\n",
              mib(device->bytesInUse(MemoryKind::Parameters)),
              mib(device->bytesInUse(MemoryKind::Gradients)),
              mib(device->bytesInUse(MemoryKind::OptimizerState)),
              mib(device->bytesInUse(MemoryKind::Activations)),
              mib(arenaBytes()),
              mib(device->bytesInUse(MemoryKind::Workspace)));
  if (offload)
    std::printf("offload: the optimizer state and step on the host, %.2f MiB "
                "of host memory (optimizer state %.2f MiB, parameter and "
                "gradient copies %.2f MiB); %s\n",
                mib(offload->host().peakTotalBytes()),
                mib(offload->host().bytesInUse(MemoryKind::OptimizerState)),
                mib(offload->host().bytesInUse(MemoryKind::Parameters) +
                    offload->host().bytesInUse(MemoryKind::Gradients)),
                offloadWay().c_str());
  if (start)
    std::printf("resumed at step %lld of %lld from '%s'\n", (long long)start,
                (long long)options.steps, options.checkpoint.c_str());
  std::fflush(stdout);
}

/// Rank 0 logs to --log; rank r > 0 beside it, "run.jsonl" -> "run.rank1.jsonl".
static std::string logPathOf(const std::string &log, int rank) {
  if (rank == 0)
    return log;
  size_t dot = log.rfind('.'), slash = log.rfind('/');
  std::string tag = ".rank" + std::to_string(rank);
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return log + tag;
  return log.substr(0, dot) + tag + log.substr(dot);
}

std::unique_ptr<StepLog> Trainer::openLog() const {
  if (options.log.empty())
    return nullptr;
  return std::make_unique<StepLog>(logPathOf(options.log, world.rank()));
}

/// What the plan beside the program predicted for a device's memory at
/// its fullest stage, of `kind` and in all, as a clause for the
/// out-of-memory line; empty where the plan cannot be read.
std::string predictedPeak(const TrainerOptions &options,
                          const std::string &kind) {
  // The trainer's memory kinds (bmrt::nameOf) by plan.json's names.
  static const std::map<std::string, std::string> planKey = {
      {"parameters", "params"},
      {"gradients", "grads"},
      {"optimizer state", "optimizer"},
      {"activations", "activations"},
      {"workspace", "buffers"}};
  try {
    CompiledConfig config = readConfig(options.dir);
    std::ifstream in(config.plan);
    const nlohmann::json memory = nlohmann::json::parse(in).at("memory");
    double mib = double(1 << 20);
    char text[160];
    std::snprintf(text, sizeof text,
                  "; the plan predicted %.1f MiB of %s and %.1f MiB in all "
                  "per device at its fullest stage",
                  memory.at(planKey.at(kind)).get<double>() / mib, kind.c_str(),
                  memory.at("total").get<double>() / mib);
    return text;
  } catch (const std::exception &) {
    return "";
  }
}

void runTrainer(const TrainerOptions &options, World &world) {
  if (options.printSchedule) {
    if (world.rank() == 0)
      printPipeline(readConfig(options.dir), stdout);
    return;
  }
  try {
    Trainer trainer(options, world);
    trainer.run();
  } catch (const OutOfMemory &e) {
    throw Error(e.what() + predictedPeak(options, e.kind), e.file, e.line);
  }
}

} // namespace bmrt
