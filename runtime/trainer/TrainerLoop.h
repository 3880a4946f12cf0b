//===- TrainerLoop.h - the trainer's state and steps -----------*- C++ -*-===//
//
// Private to runtime/trainer: the Trainer that runTrainer runs, split over
// Trainer.cpp (set-up and steps), TrainerUpdate.cpp (the optimizer step, on
// the device or offloaded) and TrainerCheckpoints.cpp (saving and
// resuming).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_TRAINERLOOP_H
#define BMRT_TRAINER_TRAINERLOOP_H

#include "Feeder.h"
#include "GradientBuckets.h"
#include "InitialParameters.h"
#include "LayerwiseUpdate.h"
#include "OptimizerOffload.h"
#include "Parallel.h"
#include "Pipeline.h"
#include "StepReport.h"
#include "TrainerConfig.h"
#include "TrainerOptions.h"
#include "TrainingState.h"

#include "runtime/checkpoint/CheckpointLock.h"

#include "bmrt/Comm.h"
#include "bmrt/Executor.h"

#include <memory>
#include <string>
#include <vector>

namespace bmrt {

/// What the GEMMs are asked to read their operands in: --precision, else
/// trainer.json's precision; throws bmrt::Error naming an unknown one.
ContractionPrecision askedPrecision(const TrainerOptions &options,
                                    const CompiledConfig &config);

class Trainer {
public:
  Trainer(const TrainerOptions &options, World &world)
      : options(options), config(readConfig(options.dir)), world(world),
        first(loadProgramFor(config, world, options.dir)),
        device(createDevice(
            options.device.empty() ? config.device : options.device,
            {options.threads, -1, askedPrecision(options, config),
             options.deviceMemory})),
        parallel(first, world, config.zero, *device),
        gathered(parallel, *device) {
    if (config.offload == "optimizer")
      offload = std::make_unique<OptimizerOffload>(*device, options.threads);
    loadStages();
    bindParameters();
    startOverlap();
    if (updatesBehind())
      gateParameterUses();
    hyper = Hyperparameters::from(options, config.optimizer);
  }

  void run() {
    takeCheckpointFolder();
    int64_t start = 0;
    if (options.resume)
      start = resume();
    if (world.rank() == 0)
      printStart(start);
    std::unique_ptr<StepLog> log = openLog();
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
        log->write(report.json());
      if (!options.checkpoint.empty() &&
          ((options.saveEvery && step % options.saveEvery == 0) ||
           step == last))
        save(step);
    }
    // The last update, landed before the parameters outlive the run.
    if (offload)
      offload->settle(stream());
    if (log)
      log->close();
  }

private:
  void loadStages();
  void placeStage(Stage &stage, const std::string &source);
  void startPipeline();
  Stream &stream() { return device->computeStream(); }
  const TrainerKernels &kernels() const { return device->backend().trainer; }
  /// The feeder of the data (stage 0's), or null on ranks without it.
  Feeder *dataFeeder() const;
  size_t arenaBytes() const {
    size_t bytes = 0;
    for (const Stage &stage : stages)
      bytes += stage.executor->arenaBytes();
    return bytes;
  }
  void bindParameters();
  void bindParameter(int st, int slot, const InitialParameters &initial);
  void releaseSlots();
  void describeEveryParameter(const std::vector<std::string> &files);
  void startOverlap();
  bool armBuckets(int stage);
  void afterBackward(int stage, bool overlapped);
  bool reducedByBuckets(const ParamSlot &p) const;
  double runMicroBatch();
  void accumulate(int stage, bool overlapped);
  void addGradient(ParamSlot &p, const TensorView &grad);
  void sumOverStages();
  void allocateOptimizerState(ParamSlot &p);
  StepReport trainStep(int64_t step);
  TensorUpdate updateRange(const ParamSlot &p) const;
  std::vector<TensorUpdate>
  updateRanges(std::vector<const ParamSlot *> &trained) const;
  void update(int64_t step, float lr, float gradScale);
  /// Whether the offloaded optimizer's step runs behind the next forward
  /// (OptimizerOffload.h): offloaded, with an optimizer whose update of a
  /// range reads that range alone, where the host's cores are apart from
  /// the device (a GPU's; not the CPU backend's, where the worker would
  /// take the cores the ranks compute on) or --offload-behind asks. The
  /// planner prices the same rule (cost::offloadRunsBehind, with the
  /// cluster's host apart from its devices).
  bool updatesBehind() const {
    return offload &&
           (config.optimizerKind == OptimizerKind::AdamW ||
            config.optimizerKind == OptimizerKind::Sgd) &&
           options.offloadBehind.value_or(!device->hostAccessible());
  }
  void gateParameterUses();
  void gatherUpdated(const ParamSlot &p);
  void stepRange(const TrainerKernels &kernels, Stream &on,
                 const TensorUpdate &t, int64_t step, float lr,
                 float gradScale) const;
  void runOptimizer(const TrainerKernels &kernels, Stream &stream,
                    const std::vector<TensorUpdate> &tensors,
                    const std::vector<const ParamSlot *> &trained, int64_t step,
                    float lr, float gradScale);
  /// Where the optimizer state lives: the host when it is offloaded.
  Device &stateDevice() { return offload ? offload->host() : *device; }
  void printStart(int64_t start) const;
  std::string offloadWay() const;
  void printPrecision() const;
  std::unique_ptr<StepLog> openLog() const;
  void save(int64_t step);
  void saveWhole(int64_t step);
  void saveShards(int64_t step);
  TrainingState stateAt(int64_t step) const;
  void takeCheckpointFolder();
  std::string keptCheckpoint() const;
  void checkFiniteParameters(const TrainingState &state);
  [[noreturn]] void stopOnNonFiniteLoss(int64_t step, double loss);
  TrainingState readCheckpoint();
  std::vector<TensorRole> rolesOf(const ParamSlot &p) const;
  bool isFlat(const ParamSlot &p, TensorRole role) const;
  const TensorView &parameterOf(const ParamSlot &p) const;
  std::vector<uint8_t> localOf(const ParamSlot &p, TensorRole role);
  const TensorView &valueOf(const ParamSlot &p, TensorRole role) const;
  Device &holderOf(TensorRole role);
  void loadBox(const TrainingState &state, const ParamSlot &p, TensorRole role,
               const TensorView &into);
  const TensorView &gradientOf(const ParamSlot &p) const;
  int64_t resume();

  TrainerOptions options;
  CompiledConfig config;
  World &world;
  /// The program the mesh is read from (the first stage's with a pipeline).
  Program first;
  std::unique_ptr<Device> device;
  Parallel parallel;
  /// This rank's step programs: the whole step, or its pipeline chunks.
  std::vector<Stage> stages;
  /// The pipeline's schedule (a pipeline only).
  ScheduleSpec spec;
  std::unique_ptr<Pipeline> pipeline;
  /// The axes the reported loss is summed over.
  std::vector<std::string> lossAxes;
  /// The loss's class count, for the feeders of stages without the loss
  /// (0: each reads its own program's).
  int64_t lossClasses = 0;
  /// Backwards run this step per stage (its buckets' first one starts
  /// their sums).
  std::vector<int> backwards;
  std::vector<ParamSlot> params;
  /// The trained parameters held by several pipeline stages, by name.
  std::vector<ParamSlot *> sharedByStages;
  /// Every parameter of every stage, described (no memory): what a sharded
  /// checkpoint's manifest lists.
  std::vector<ParamSlot> everyParam;
  Hyperparameters hyper;
  /// Held while this job may save into or resume from --checkpoint.
  std::unique_ptr<CheckpointLock> checkpointLock;
  /// The step of the checkpoint this run saved or resumed from last; -1
  /// before there is one.
  int64_t lastSaved = -1;
  /// ZeRO 2: one micro-batch's reduced gradient shard, before it is added.
  TensorView shardTemp;
  /// ZeRO 3: the parameters gathered for their readers.
  GatheredParameters gathered;
  /// Per stage, the gradient reductions run during its backward (none:
  /// all after it, blocking: --no-overlap, or nothing to reduce).
  std::vector<std::unique_ptr<GradientBuckets>> buckets;
  /// trainer.json's offload "optimizer": the state and step on the host.
  /// Last, so that it goes first: a step behind lands in the stages'
  /// memory before they are freed.
  std::unique_ptr<OptimizerOffload> offload;
  /// A step behind the forward: the ranges (updateRanges' indices) in the
  /// order the stages first use them, and per stage and instruction the
  /// last position of that order it uses first (-1: none).
  std::vector<size_t> hostOrder;
  std::vector<std::vector<int>> readGates;
};

/// A view of `shape` on the host bytes of `data` (for loading shards).
inline TensorView hostView(std::vector<uint8_t> &data, DType dtype,
                           const Shape &shape) {
  data.resize(numElements(shape) * sizeOf(dtype));
  return {data.data(), dtype, shape};
}

} // namespace bmrt

#endif // BMRT_TRAINER_TRAINERLOOP_H
