//===- CompileDriver.cpp - phases 1 to 7 for `bmc compile` ----------------===//

#include "compiler/driver/CompileDriver.h"

#include "compiler/codegen/FoldTransposes.h"
#include "compiler/codegen/OutlineBlocks.h"
#include "compiler/codegen/StepProgram.h"
#include "passes/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SHA256.h"

namespace bm {

const char *nameOf(TrainingTask task) {
  switch (task) {
  case TrainingTask::LanguageModel:
    return "language-model";
  case TrainingTask::Classifier:
    return "classifier";
  case TrainingTask::OwnLoss:
    return "own-loss";
  }
  return "?";
}

namespace {

llvm::Expected<std::string> hashFile(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return llvm::createStringError("cannot read '" + path +
                                   "': " + buffer.getError().message());
  llvm::SHA256 hasher;
  hasher.update(llvm::arrayRefFromStringRef((*buffer)->getBuffer()));
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

/// Language model when an integer input has the labels' shape (the labels
/// are that stream's next tokens), classifier otherwise.
TrainingTask taskOf(mlir::func::FuncOp step) {
  mlir::Type labels;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto kind = step.getArgAttrOfType<mlir::StringAttr>(i, "bm.kind");
    if (kind && kind.getValue() == "label")
      labels = step.getArgument(i).getType();
  }
  if (!labels)
    return TrainingTask::OwnLoss;
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    auto kind = step.getArgAttrOfType<mlir::StringAttr>(i, "bm.kind");
    if (kind && kind.getValue() == "input" &&
        step.getArgument(i).getType() == labels)
      return TrainingTask::LanguageModel;
  }
  return TrainingTask::Classifier;
}

/// What the compiler runs so far: one device, or data parallelism over
/// several (each rank the whole step on its share of the batch, gradients
/// all-reduced). Tensor, pipeline and expert parallelism and ZeRO need the
/// partitioner: the plan is searched without them, and pinning them is an
/// error.
llvm::Expected<plan::TrainingConfig>
runnableConfig(const plan::TrainingConfig &training) {
  plan::TrainingConfig config = training;
  if (config.gpus == 1)
    return config;
  plan::FixedChoices &fixed = config.fixed;
  auto pinned = [](const std::optional<int> &choice, int runnable) {
    return choice && *choice != runnable;
  };
  if (pinned(fixed.tp, 1) || pinned(fixed.pp, 1) || pinned(fixed.ep, 1) ||
      pinned(fixed.zeroStage, 0))
    return llvm::createStringError(
        "bmc compile runs data parallelism only for now (tp=1, pp=1, ep=1, "
        "zero=0: the partitioner for the rest is not built yet); --fix " +
        plan::formatFixedChoices(fixed) + " asks for more");
  fixed.tp = fixed.pp = fixed.ep = 1;
  fixed.zeroStage = 0;
  return config;
}

llvm::Expected<plan::Plan> planRunnable(mlir::MLIRContext &context,
                                        const CompileOptions &options) {
  auto training = runnableConfig(options.training);
  if (!training)
    return training.takeError();
  auto cluster = cost::loadCluster(options.cluster);
  if (!cluster)
    return cluster.takeError();
  auto planning = loadModelForPlanning(context, options.model, options.import);
  if (!planning)
    return planning.takeError();
  return planModel(planning->graph, *cluster, *training);
}

} // namespace

llvm::Expected<CompiledModel> compileModel(mlir::MLIRContext &context,
                                           const CompileOptions &options) {
  CompiledModel compiled;
  auto plan = planRunnable(context, options);
  if (!plan)
    return plan.takeError();
  compiled.plan = std::move(*plan);

  ImportOptions importOptions = options.import;
  importOptions.batchSize = compiled.plan.config.microBatch;
  auto module = importOnnxFile(context, options.model, importOptions);
  if (!module)
    return module.takeError();
  auto main = (*module)->lookupSymbol<mlir::func::FuncOp>("main");

  if (options.initSeed) {
    auto params = initialiseParameters(main, *options.initSeed);
    if (!params)
      return params.takeError();
    compiled.parameters = std::move(*params);
  } else {
    auto params = readParameters(options.model, main);
    if (!params)
      return params.takeError();
    compiled.parameters = std::move(*params);
  }

  // Fusion first (fewer kernels), then folding, which marks the layers
  // that full recomputation runs again.
  if (llvm::Error err = runPipeline(
          **module,
          [](mlir::OpPassManager &pm) {
            pm.addNestedPass<mlir::func::FuncOp>(
                mlir::bm::createBmFuseGeluPass());
            mlir::bm::buildFoldPhase(pm);
          },
          "folding"))
    return std::move(err);
  std::string recompute = plan::toString(compiled.plan.config.recompute);
  if (llvm::Error err = runPipeline(
          **module,
          [&](mlir::OpPassManager &pm) {
            mlir::bm::buildAutodiffPhase(pm, recompute);
          },
          "autodiff"))
    return std::move(err);
  auto step = (*module)->lookupSymbol<mlir::func::FuncOp>("train_step");
  compiled.task = taskOf(step);
  std::string name = compiled.plan.modelName;
  auto stepProgram = lowerToProgram(step, name);
  if (!stepProgram)
    return stepProgram.takeError();
  compiled.step = std::move(*stepProgram);
  foldTransposesIntoMatmuls(compiled.step);
  outlineBlocks(compiled.step);
  auto forwardProgram = lowerToProgram(main, name);
  if (!forwardProgram)
    return forwardProgram.takeError();
  compiled.forward = std::move(*forwardProgram);
  foldTransposesIntoMatmuls(compiled.forward);
  outlineBlocks(compiled.forward);

  auto hash = hashFile(options.model);
  if (!hash)
    return hash.takeError();
  compiled.modelHash = *hash;
  return compiled;
}

} // namespace bm
