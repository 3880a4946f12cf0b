//===- ExtractModelGraph.h - bm IR to the planner's model graph -*- C++ -*-===//

#ifndef BM_PLAN_EXTRACTMODELGRAPH_H
#define BM_PLAN_EXTRACTMODELGRAPH_H

#include "passes/plan/ModelGraph.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Error.h"

namespace bm::plan {

/// Builds the planner's view of `func`, which bm-fold has annotated.
///
/// The model was imported with its batch dimension bound to `importedBatch`.
/// Planning needs it > 1, so that the batch is visible in every sharding
/// rule (a dim of size 1 has no factor); at 1, only the inputs' batch dims
/// are known. The batch
/// enters through dim 0 of the function's inputs (arguments that are not
/// parameters) of that size and is followed through each op's sharding
/// rule; the result is normalised to one sample as ModelGraph documents.
llvm::Expected<ModelGraph> extractModelGraph(mlir::func::FuncOp func,
                                             int64_t importedBatch);

} // namespace bm::plan

#endif // BM_PLAN_EXTRACTMODELGRAPH_H
