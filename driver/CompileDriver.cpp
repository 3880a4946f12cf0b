//===- CompileDriver.cpp - phases 1 to 7 for `bmc compile` ----------------===//

#include "driver/CompileDriver.h"

#include "codegen/FoldTransposes.h"
#include "codegen/OutlineBlocks.h"
#include "codegen/StepProgram.h"
#include "passes/Passes.h"
#include "passes/plan/PlanOutput.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

namespace bm {

const char *nameOf(TrainingTask task) {
  switch (task) {
  case TrainingTask::LanguageModel:
    return "language-model";
  case TrainingTask::Classifier:
    return "classifier";
  case TrainingTask::OwnLoss:
    return "own-loss";
  case TrainingTask::Regression:
    return "regression";
  }
  return "?";
}

std::string describe(TrainingTask task) {
  switch (task) {
  case TrainingTask::LanguageModel:
    return "language-model: next-token cross-entropy";
  case TrainingTask::Classifier:
    return "classifier: cross-entropy against one label per sample";
  case TrainingTask::OwnLoss:
    return "own-loss: the model's scalar output";
  case TrainingTask::Regression:
    return "regression: mean squared error against targets of the "
           "output's shape";
  }
  return "?";
}

namespace {

/// The types of `step`'s arguments of bm.kind `kind` (input, label, ...).
std::vector<mlir::RankedTensorType> argumentsOfKind(mlir::func::FuncOp step,
                                                    llvm::StringRef kind) {
  std::vector<mlir::RankedTensorType> types;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto attr = step.getArgAttrOfType<mlir::StringAttr>(
        i, mlir::bm::BmDialect::kParamKindAttrName);
    auto type =
        mlir::dyn_cast<mlir::RankedTensorType>(step.getArgument(i).getType());
    if (attr && type && attr.getValue() == kind)
      types.push_back(type);
  }
  return types;
}

/// Regression when the labels are floats (targets); language model when an
/// integer input has the labels' shape (the labels are that stream's next
/// tokens), classifier otherwise.
TrainingTask taskOf(mlir::func::FuncOp step) {
  std::vector<mlir::RankedTensorType> labels =
      argumentsOfKind(step, mlir::bm::BmDialect::kKindLabel);
  if (labels.empty())
    return TrainingTask::OwnLoss;
  if (mlir::isa<mlir::FloatType>(labels.back().getElementType()))
    return TrainingTask::Regression;
  for (mlir::RankedTensorType input :
       argumentsOfKind(step, mlir::bm::BmDialect::kKindInput))
    if (input == labels.back())
      return TrainingTask::LanguageModel;
  return TrainingTask::Classifier;
}

/// Why the trainer could not feed `step` as a `task`, if it could not: it
/// fills integer and float inputs, and makes data for a language model
/// (next tokens of an integer input), a classifier (one label per sample,
/// drawn into a float input, images, or read off an integer one, tokens), a
/// regression (targets of the output's shape) and a model that returns its
/// own loss. What the trainer's Feeder would refuse at its first step is
/// refused here, before anything is written.
std::optional<std::string> whyTrainerCannotFeed(mlir::func::FuncOp step,
                                                TrainingTask task) {
  std::vector<mlir::RankedTensorType> inputs =
      argumentsOfKind(step, mlir::bm::BmDialect::kKindInput);
  for (mlir::RankedTensorType input : inputs) {
    mlir::Type element = input.getElementType();
    if (!element.isF32() && !element.isInteger(64)) {
      std::string type;
      llvm::raw_string_ostream os(type);
      os << input;
      return "the model takes an input of type " + type +
             "; the trainer fills i64 and f32 inputs";
    }
  }
  if (task != TrainingTask::Classifier)
    return std::nullopt;
  mlir::RankedTensorType labels =
      argumentsOfKind(step, mlir::bm::BmDialect::kKindLabel).back();
  std::string shape;
  llvm::raw_string_ostream os(shape);
  llvm::interleave(labels.getShape(), os, ",");
  if (labels.getRank() != 1)
    return "the model's output needs labels of shape [" + shape +
           "]: no integer input has that shape (a language model's next "
           "tokens) and it is not one label per sample (a classifier); "
           "--loss mse trains it as a regression instead";
  bool drawable = llvm::any_of(inputs, [&](mlir::RankedTensorType input) {
    return input.getElementType().isF32() ||
           (input.getRank() > 0 && input.getDimSize(0) == labels.getDimSize(0));
  });
  if (!drawable)
    return "the model is a classifier (one label per sample) with no input "
           "to draw its classes into: the trainer needs a float input "
           "(images) or an integer one with a sample per row (tokens)";
  return std::nullopt;
}

/// The plan, and the model it was searched on (annotation matches the
/// step's ops to it).
struct Planned {
  plan::Plan plan;
  ModelForPlanning model;
};

/// A plan file for this compile: its own shapes (batch, symbolic
/// dimensions) bind the model; a rank count, sequence or dimension given
/// besides must agree with it.
llvm::Expected<plan::Plan> readPlanFile(const CompileOptions &options,
                                        ImportOptions &import) {
  const std::string &path = *options.planFile;
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError("cannot read plan '" + path +
                                   "': " + buffer.getError().message());
  auto plan = plan::parsePlanJson((*buffer)->getBuffer());
  if (!plan)
    return llvm::createStringError("plan '" + path +
                                   "': " + llvm::toString(plan.takeError()));
  auto onOff = [](bool on) { return std::string(on ? "on" : "off"); };
  if (options.fuseAttention && *options.fuseAttention != plan->fusedAttention)
    return llvm::createStringError(
        "plan '" + path + "' was made with --fuse-attention " +
        onOff(plan->fusedAttention) + " but --fuse-attention says " +
        onOff(*options.fuseAttention) + "; plan again with bmc plan " +
        "--fuse-attention " + onOff(*options.fuseAttention));
  import.fuseAttention = plan->fusedAttention;
  if (options.training.gpus != 1 && options.training.gpus != plan->gpus)
    return llvm::createStringError(
        "plan '" + path + "' is for " + std::to_string(plan->gpus) +
        " GPUs but --gpus says " + std::to_string(options.training.gpus));
  if (import.sequenceLength && plan->sequenceLength &&
      *import.sequenceLength != plan->sequenceLength)
    return llvm::createStringError(
        "plan '" + path + "' is for sequences of " +
        std::to_string(plan->sequenceLength) + " but --seq says " +
        std::to_string(*import.sequenceLength));
  // The plan records every symbolic dimension its model was imported with
  // (T5's "seq" and "dec_seq"): bind exactly those, not the sequence by
  // position, which would bind every token input to one length.
  for (const auto &[name, value] : plan->symbolicDims) {
    auto [given, added] = import.dims.try_emplace(name, value);
    if (!added && given->second != value)
      return llvm::createStringError(
          "plan '" + path + "' is for " + name + " = " +
          std::to_string(value) + " but --" +
          (name == "seq" ? std::string("seq") : "dim " + name) + " says " +
          std::to_string(given->second));
  }
  if (!plan->symbolicDims.empty())
    return plan;
  // Without `symbolic_dims` the only symbolic dimension besides the batch
  // is the sequence (or none: a model without token inputs, images,
  // records 1 token per sample; PLAN_SCHEMA.md): bind it as --seq would.
  if (plan->sequenceLength > 1 && !import.sequenceLength) {
    import.sequenceLength = plan->sequenceLength;
    import.dims.try_emplace("seq", plan->sequenceLength);
  }
  return plan;
}

llvm::Expected<Planned> planRunnable(mlir::MLIRContext &context,
                                     CompileOptions &options,
                                     const OnnxFile &file) {
  std::optional<plan::Plan> given;
  const std::map<std::string, int64_t> named = options.import.dims;
  if (options.planFile) {
    auto plan = readPlanFile(options, options.import);
    if (!plan)
      return plan.takeError();
    given = std::move(*plan);
  }
  auto planning = loadModelForPlanning(context, file, options.import);
  if (!planning)
    return planning.takeError();
  if (given) {
    // A plan without `symbolic_dims` (written before plans recorded them)
    // is read by its sequence length alone; that says one dimension, so a
    // model with more (T5's "dec_seq") must have the others named by --dim.
    const std::map<std::string, int64_t> &bound =
        planning->graph.symbolicDims;
    if (given->symbolicDims.empty() && bound.size() > 1 &&
        llvm::any_of(bound, [&](const auto &dim) {
          return !named.count(dim.first);
        }))
      return llvm::createStringError(
          "plan '" + *options.planFile +
          "' does not record the values of the model's symbolic dimensions (" +
          llvm::join(llvm::make_first_range(bound), ", ") +
          "): it was written by an older bmc; plan again, or name each with "
          "--dim");
    return Planned{std::move(*given), std::move(*planning)};
  }
  auto cluster = cost::loadCluster(options.cluster);
  if (!cluster)
    return cluster.takeError();
  auto plan = planModel(planning->graph, *cluster, options.training);
  if (!plan)
    return plan.takeError();
  return Planned{std::move(*plan), std::move(*planning)};
}

/// One device: the model at the plan's micro-batch, through the fold phase
/// (GELU fused into one kernel; full recomputation reruns the layers folding
/// marks).
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importWhole(mlir::MLIRContext &context, const CompileOptions &options,
            const OnnxFile &file, const plan::Plan &plan) {
  ImportOptions importOptions = options.import;
  importOptions.batchSize = plan.config.microBatch;
  auto module = importOnnxFile(context, file, importOptions);
  if (!module)
    return module.takeError();
  auto foldPhase = [&](mlir::OpPassManager &pm) {
    mlir::bm::buildFoldPhase(pm, importOptions.fuseAttention);
  };
  if (llvm::Error err = runPipeline(**module, foldPhase, "folding"))
    return std::move(err);
  return module;
}

/// Several devices: the model at one step's batch (dp x micro-batch),
/// through the fold phase and annotated with the plan.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importAnnotated(mlir::MLIRContext &context, const CompileOptions &options,
                const OnnxFile &file, const Planned &planned) {
  auto step = annotateForStep(context, file, options.import, planned.plan,
                              planned.model.graph);
  if (!step)
    return step.takeError();
  return std::move(step->module);
}

/// The step-0 parameters: the model's initializers, or --init random's
/// specs with (unless the runtime makes them at load time) their values.
llvm::Error gatherParameters(const CompileOptions &options,
                             const OnnxFile &file, mlir::func::FuncOp main,
                             CompiledModel &compiled) {
  if (!options.initSeed) {
    auto values = readParameters(file, main);
    if (!values)
      return values.takeError();
    compiled.parameters = std::move(*values);
    return llvm::Error::success();
  }
  auto plan = initPlanOf(main, *options.initSeed);
  if (!plan)
    return plan.takeError();
  if (!options.weightsAtLoad) {
    auto values = initialiseParameters(main, *options.initSeed);
    if (!values)
      return values.takeError();
    compiled.parameters = std::move(*values);
  }
  compiled.init = std::move(*plan);
  return llvm::Error::success();
}

/// Autodiff (with the plan's recomputation); on several devices, with
/// every planned operand read through a reshard before and bm-partition
/// after. (Parameters are initialised before: their roles are read off
/// the ops that use them directly.)
/// The task is read off the whole step (global shapes), before
/// partitioning splits its inputs.
llvm::Expected<TrainingTask> buildTrainingStep(mlir::ModuleOp module,
                                               const plan::Plan &plan,
                                               bool partition,
                                               llvm::StringRef loss) {
  std::string recompute = plan::toString(plan.config.recompute);
  if (llvm::Error err = runPipeline(
          module,
          [&](mlir::OpPassManager &pm) {
            if (partition)
              pm.addNestedPass<mlir::func::FuncOp>(
                  mlir::bm::createBmInsertReshardsPass());
            mlir::bm::buildAutodiffPhase(pm, recompute, loss);
          },
          "autodiff"))
    return std::move(err);
  auto step = module.lookupSymbol<mlir::func::FuncOp>("train_step");
  TrainingTask task = taskOf(step);
  if (std::optional<std::string> why = whyTrainerCannotFeed(step, task))
    return llvm::createStringError(*why);
  if (!partition)
    return task;
  if (llvm::Error err = runPipeline(
          module,
          [](mlir::OpPassManager &pm) {
            mlir::bm::buildPartitionPhase(pm);
          },
          "partitioning"))
    return std::move(err);
  return task;
}

llvm::Expected<bmrt::Program> lowerAndOutline(mlir::func::FuncOp func,
                                              llvm::StringRef model) {
  auto program = lowerToProgram(func, model);
  if (!program)
    return program.takeError();
  foldTransposesIntoMatmuls(*program);
  outlineBlocks(*program);
  return program;
}

} // namespace

llvm::Expected<CompiledModel> compileModel(mlir::MLIRContext &context,
                                           const CompileOptions &given) {
  CompileOptions options = given;
  // Read once: planning, the step's import and the parameters share it.
  auto file = readOnnxFile(options.model);
  if (!file)
    return file.takeError();
  auto planned = planRunnable(context, options, *file);
  if (!planned)
    return planned.takeError();
  CompiledModel compiled;
  compiled.plan = planned->plan;
  const bool partition = compiled.plan.gpus > 1;

  auto module = partition ? importAnnotated(context, options, *file, *planned)
                          : importWhole(context, options, *file, compiled.plan);
  if (!module)
    return module.takeError();
  auto main = (*module)->lookupSymbol<mlir::func::FuncOp>("main");
  if (llvm::Error err = gatherParameters(options, *file, main, compiled))
    return std::move(err);

  auto task =
      buildTrainingStep(**module, compiled.plan, partition, options.loss);
  if (!task)
    return task.takeError();
  compiled.task = *task;
  std::string name = compiled.plan.modelName;
  if (auto step = (*module)->lookupSymbol<mlir::func::FuncOp>("train_step")) {
    auto stepProgram = lowerAndOutline(step, name);
    if (!stepProgram)
      return stepProgram.takeError();
    compiled.step = std::move(*stepProgram);
  }
  for (int s = 0;; ++s) {
    auto stage = (*module)->lookupSymbol<mlir::func::FuncOp>(
        "stage_" + std::to_string(s));
    if (!stage)
      break;
    auto program = lowerAndOutline(stage, name);
    if (!program)
      return program.takeError();
    compiled.stages.push_back(std::move(*program));
  }
  // The forward program computes what one device computes from inputs in
  // natural order (bmrt-forward checks it against a reference). Under
  // context parallelism's mirrored chunks the annotated model runs on
  // sequences in the mirrored order: the forward program comes from the
  // model as one device runs it.
  mlir::OwningOpRef<mlir::ModuleOp> whole;
  if (compiled.plan.config.cp > 1 && compiled.plan.config.cpMirrored) {
    auto imported = importWhole(context, options, *file, compiled.plan);
    if (!imported)
      return imported.takeError();
    whole = std::move(*imported);
    main = whole->lookupSymbol<mlir::func::FuncOp>("main");
  }
  auto forwardProgram = lowerAndOutline(main, name);
  if (!forwardProgram)
    return forwardProgram.takeError();
  compiled.forward = std::move(*forwardProgram);

  compiled.modelHash = file->sha256;
  return compiled;
}

} // namespace bm
