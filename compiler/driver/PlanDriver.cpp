//===- PlanDriver.cpp - phases 1 to 3 for `bmc plan` ----------------------===//

#include "compiler/driver/PlanDriver.h"

#include "bm/FirstDiagnostic.h"
#include "passes/Passes.h"
#include "passes/annotate/Annotate.h"
#include "passes/plan/ExtractModelGraph.h"
#include "passes/plan/Search.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Path.h"

namespace bm {

/// Runs the passes `build` adds on `module`; a failure is one error, `what`
/// and the first diagnostic.
static llvm::Error
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

llvm::Expected<ModelForPlanning>
loadModelForPlanning(mlir::MLIRContext &context, llvm::StringRef path,
                     ImportOptions options) {
  // The planning batch: kPlanningImportBatch, or the smallest power of two
  // above it the model imports at (GShard groups tokens of several samples).
  int granularity = 1;
  auto module = [&]() -> llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> {
    if (options.batchSize)
      return importOnnxFile(context, path, options);
    llvm::Error first = llvm::Error::success();
    for (int64_t batch = kPlanningImportBatch; batch <= kLargestImportBatch;
         batch *= 2) {
      options.batchSize = batch;
      auto imported = importOnnxFile(context, path, options);
      if (imported) {
        llvm::consumeError(std::move(first));
        granularity = static_cast<int>(batch);
        return imported;
      }
      if (batch == kPlanningImportBatch)
        first = imported.takeError();
      else
        llvm::consumeError(imported.takeError());
    }
    return std::move(first);
  }();
  if (!module)
    return module.takeError();
  // Whether one sample is enough: probe batch 1 when 2 worked.
  if (granularity == kPlanningImportBatch) {
    ImportOptions single = options;
    single.batchSize = 1;
    mlir::MLIRContext probeContext;
    auto probe = importOnnxFile(probeContext, path, single);
    if (probe)
      granularity = 1;
    else
      llvm::consumeError(probe.takeError());
  }
  ModelForPlanning model;
  model.module = std::move(*module);
  model.main = model.module->lookupSymbol<mlir::func::FuncOp>("main");
  if (!model.main)
    return llvm::createStringError("the imported model has no @main function");

  if (llvm::Error err = runPipeline(*model.module, mlir::bm::buildFoldPhase,
                                    "folding repeated layers failed"))
    return std::move(err);

  llvm::Expected<plan::ModelGraph> graph =
      plan::extractModelGraph(model.main, *options.batchSize);
  if (!graph)
    return graph.takeError();
  model.graph = std::move(*graph);
  model.graph.batchGranularity = granularity;
  model.graph.name = llvm::sys::path::stem(path).str();
  return std::move(model);
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
annotateForStep(mlir::MLIRContext &context, llvm::StringRef path,
                ImportOptions options, const plan::Plan &plan,
                const plan::ModelGraph &planned) {
  options.batchSize =
      static_cast<int64_t>(plan.config.dp) * plan.config.microBatch;
  llvm::Expected<ModelForPlanning> step =
      loadModelForPlanning(context, path, options);
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
