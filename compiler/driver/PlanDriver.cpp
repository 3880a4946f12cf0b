//===- PlanDriver.cpp - phases 1 to 3 for `bmc plan` ----------------------===//

#include "compiler/driver/PlanDriver.h"

#include "passes/Passes.h"
#include "passes/plan/ExtractModelGraph.h"
#include "passes/plan/Search.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Path.h"

namespace bm {

llvm::Expected<ModelForPlanning>
loadModelForPlanning(mlir::MLIRContext &context, llvm::StringRef path,
                     ImportOptions options) {
  if (!options.batchSize)
    options.batchSize = kPlanningImportBatch;
  auto module = importOnnxFile(context, path, options);
  if (!module)
    return module.takeError();
  ModelForPlanning model;
  model.module = std::move(*module);
  model.main = model.module->lookupSymbol<mlir::func::FuncOp>("main");
  if (!model.main)
    return llvm::createStringError("the imported model has no @main function");

  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return mlir::success();
  });
  mlir::PassManager pm(&context);
  pm.addNestedPass<mlir::func::FuncOp>(mlir::bm::createBmFoldPass());
  if (mlir::failed(pm.run(*model.module)))
    return llvm::createStringError("folding repeated layers failed: " +
                                   diagnostic);

  llvm::Expected<plan::ModelGraph> graph =
      plan::extractModelGraph(model.main, *options.batchSize);
  if (!graph)
    return graph.takeError();
  model.graph = std::move(*graph);
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

} // namespace bm
