//===- PlanDriver.cpp - phases 1 to 3 for `bmc plan` ----------------------===//

#include "driver/PlanDriver.h"

#include "bm/FirstDiagnostic.h"
#include "passes/Passes.h"
#include "passes/annotate/Annotate.h"
#include "passes/plan/ExtractModelGraph.h"
#include "passes/plan/Search.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Path.h"

namespace bm {

llvm::Error
runPipeline(mlir::ModuleOp module,
            llvm::function_ref<void(mlir::OpPassManager &)> build,
            llvm::StringRef what) {
  mlir::bm::FirstDiagnostic diagnostic(module.getContext());
  mlir::PassManager pm(module.getContext());
  build(pm);
  if (mlir::failed(pm.run(module)))
    return llvm::createStringError(what + ": " + diagnostic.message());
  return llvm::Error::success();
}

/// Imports `file` at `options.batchSize`, folds it and extracts its graph
/// in batch units of `granularity` samples.
static llvm::Expected<ModelForPlanning>
importFoldExtract(mlir::MLIRContext &context, const OnnxFile &file,
                  const ImportOptions &options, int granularity) {
  BoundDims dims;
  auto module = importOnnxFile(context, file, options, &dims);
  if (!module)
    return module.takeError();
  ModelForPlanning model;
  model.module = std::move(*module);
  model.main = model.module->lookupSymbol<mlir::func::FuncOp>("main");
  if (!model.main)
    return llvm::createStringError("the imported model has no @main function");

  auto foldPhase = [&](mlir::OpPassManager &pm) {
    mlir::bm::buildFoldPhase(pm, options.fuseAttention);
  };
  if (llvm::Error err = runPipeline(*model.module, foldPhase,
                                    "folding repeated layers failed"))
    return std::move(err);

  llvm::Expected<plan::ModelGraph> graph =
      plan::extractModelGraph(model.main, *options.batchSize, granularity);
  if (!graph)
    return graph.takeError();
  model.graph = std::move(*graph);
  model.graph.name = llvm::sys::path::stem(file.path).str();
  model.graph.symbolicDims = std::move(dims);
  model.graph.fusedAttention = options.fuseAttention;
  return std::move(model);
}

/// The fewest samples (a power of two up to kLargestImportBatch) the model
/// imports at: 1 for most models; more for GShard, whose expert groups hold
/// the tokens of several samples. The error is that of batch 1.
static llvm::Expected<int> findBatchGranularity(const OnnxFile &file,
                                                ImportOptions options) {
  mlir::MLIRContext probeContext;
  llvm::Error first = llvm::Error::success();
  for (int64_t batch = 1; batch <= kLargestImportBatch; batch *= 2) {
    options.batchSize = batch;
    auto probe = importOnnxFile(probeContext, file, options);
    if (probe) {
      llvm::consumeError(std::move(first));
      return static_cast<int>(batch);
    }
    if (batch == 1)
      first = probe.takeError();
    else
      llvm::consumeError(probe.takeError());
  }
  return std::move(first);
}

llvm::Expected<ModelForPlanning>
loadModelForPlanning(mlir::MLIRContext &context, const OnnxFile &file,
                     ImportOptions options) {
  if (options.batchSize)
    return importFoldExtract(context, file, options, 1);
  llvm::Expected<int> granularity = findBatchGranularity(file, options);
  if (!granularity)
    return granularity.takeError();
  // Two units, so that every batch-derived dim (the batch, GShard's groups)
  // is longer than 1 and shows up in the sharding rules.
  options.batchSize = kPlanningImportUnits * *granularity;
  llvm::Expected<ModelForPlanning> model =
      importFoldExtract(context, file, options, *granularity);
  if (!model)
    return llvm::createStringError(
        "the model imports at batch " + std::to_string(*granularity) +
        " but not at batch " + std::to_string(*options.batchSize) +
        " (the planner needs a batch it can vary): " +
        llvm::toString(model.takeError()));
  return model;
}

llvm::Expected<plan::Plan> planModel(const plan::ModelGraph &graph,
                                     const cost::Cluster &cluster,
                                     const plan::TrainingConfig &config) {
  const plan::FixedChoices &fixed = config.fixed;
  if (fixed.dp && fixed.tp && fixed.pp)
    return plan::evaluateConfiguration(graph, cluster, config);
  return plan::searchPlan(graph, cluster, config);
}

llvm::Expected<ModelForPlanning>
annotateForStep(mlir::MLIRContext &context, const OnnxFile &file,
                ImportOptions options, const plan::Plan &plan,
                const plan::ModelGraph &planned) {
  options.batchSize =
      static_cast<int64_t>(plan.config.dp) * plan.config.microBatch;
  llvm::Expected<ModelForPlanning> step =
      importFoldExtract(context, file, options, planned.batchGranularity);
  if (!step)
    return step.takeError();
  if (llvm::Error err = plan::annotatePlan(*step->module, step->main, plan,
                                           &planned, &step->graph))
    return std::move(err);
  if (llvm::Error err = runPipeline(
          *step->module,
          [](mlir::OpPassManager &pm) {
            pm.addPass(mlir::bm::createBmVerifyAnnotatedPass());
          },
          "the annotated model fails bm-verify-annotated"))
    return std::move(err);
  return step;
}

} // namespace bm
