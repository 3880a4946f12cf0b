//===- Annotate.h - write a plan into bm IR ---------------------*- C++ -*-===//

#ifndef BM_ANNOTATE_ANNOTATE_H
#define BM_ANNOTATE_ANNOTATE_H

#include "passes/plan/ModelGraph.h"
#include "passes/plan/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace bm::plan {

/// Writes `plan` into `func` (which bm-fold has annotated, and from which
/// the plan's ModelGraph was extracted, so op i of the function body is op
/// i of the plan): a `bm.mesh @mesh` with the plan's dp, tp and pp axes at
/// the top of `module`, a `bm.sharding` on every op (each instance of a
/// block class gets its class's sharding), and a `bm.stage` (the pipeline
/// stage that runs the op).
///
/// `func` may have been imported at another batch size than the one the
/// plan was searched at (bmc plan writes the step's dp x micro-batch); if a
/// reshape that depends on the batch (MoE token groups) moves the batch to
/// another dimension, give the graphs of both (`planned`, and `annotated`
/// extracted from `func`) and the batch axes move with it.
llvm::Error annotatePlan(mlir::ModuleOp module, mlir::func::FuncOp func,
                         const Plan &plan, const ModelGraph *planned = nullptr,
                         const ModelGraph *annotated = nullptr);

} // namespace bm::plan

#endif // BM_ANNOTATE_ANNOTATE_H
