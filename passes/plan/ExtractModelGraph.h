//===- ExtractModelGraph.h - bm IR to the planner's model graph -*- C++ -*-===//

#ifndef BM_PLAN_EXTRACTMODELGRAPH_H
#define BM_PLAN_EXTRACTMODELGRAPH_H

#include "passes/plan/ModelGraph.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

namespace bm::plan {

/// Builds the planner's view of `func`, which bm-fold has annotated.
///
/// The model was imported with its batch dimension bound to `importedBatch`,
/// a multiple of `batchGranularity` samples (ModelGraph's batch unit).
/// Planning needs at least two units, so that every batch-derived dim is
/// larger than 1 and visible in the sharding rules (a dim of size 1 has no
/// factor); with one, only the inputs' batch dims are known. The batch
/// enters through dim 0 of the function's inputs (arguments that are not
/// parameters) of that size and is followed through each op's sharding
/// rule; the result is normalised to one unit as ModelGraph documents.
llvm::Expected<ModelGraph> extractModelGraph(mlir::func::FuncOp func,
                                             int64_t importedBatch,
                                             int batchGranularity = 1);

} // namespace bm::plan

#endif // BM_PLAN_EXTRACTMODELGRAPH_H
