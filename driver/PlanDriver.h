//===- PlanDriver.h - phases 1 to 3 for `bmc plan` ---------------*- C++ -*-===//
//
// What `bmc plan` runs, as a library so that tests and benchmarks run
// exactly the same thing: import the ONNX model (phase 1), fold repeated
// layers (phase 2), extract the planner's ModelGraph, and search or evaluate
// a plan (phase 3).
//
//===----------------------------------------------------------------------===//

#ifndef BMC_DRIVER_PLANDRIVER_H
#define BMC_DRIVER_PLANDRIVER_H

#include "cost/Cluster.h"
#include "import/OnnxImporter.h"
#include "passes/plan/ModelGraph.h"
#include "passes/plan/Plan.h"
#include "passes/plan/TrainingConfig.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

namespace bm {

/// The batch dimension is bound to this many batch units (ModelGraph) during
/// import so that it shows up in every op's sharding rule; the ModelGraph is
/// normalised to one unit.
inline constexpr int64_t kPlanningImportUnits = 2;
/// The largest batch granularity tried, for models that need whole
/// multi-sample groups.
inline constexpr int64_t kLargestImportBatch = 64;

struct ModelForPlanning {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp main;
  plan::ModelGraph graph;
};

/// Imports `file`, folds it and extracts its ModelGraph, named after the
/// file. Without a batch in `options`, it first finds the model's batch
/// granularity (the smallest power of two it imports at: 1 for most models)
/// and imports at kPlanningImportUnits of those; with one, the graph's unit
/// is one sample.
llvm::Expected<ModelForPlanning>
loadModelForPlanning(mlir::MLIRContext &context, const OnnxFile &file,
                     ImportOptions options);

/// Runs the passes `build` adds on `module`; a failure is one error: `what`
/// and the first diagnostic.
llvm::Error runPipeline(mlir::ModuleOp module,
                        llvm::function_ref<void(mlir::OpPassManager &)> build,
                        llvm::StringRef what);

/// Searches the best plan; when dp, tp and pp are all fixed, evaluates that
/// configuration instead (and returns it even if it does not fit, so users
/// see by how much).
llvm::Expected<plan::Plan> planModel(const plan::ModelGraph &graph,
                                     const cost::Cluster &cluster,
                                     const plan::TrainingConfig &config);

/// Phase 4 for `bmc plan --emit-mlir`: imports `file` at one step's batch
/// (dp x micro-batch, so that "dp" divides it), folds it, writes `plan`
/// into it (matching ops to `planned`, the graph the plan was searched on,
/// by ONNX node) and runs bm-verify-annotated.
llvm::Expected<ModelForPlanning>
annotateForStep(mlir::MLIRContext &context, const OnnxFile &file,
                ImportOptions options, const plan::Plan &plan,
                const plan::ModelGraph &planned);

} // namespace bm

#endif // BMC_DRIVER_PLANDRIVER_H
