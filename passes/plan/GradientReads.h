//===- GradientReads.h - what an op's gradient rule reads -------*- C++ -*-===//
//
// Which forward values the backward of an op reads, found by building the
// op's gradient rule (the one autodiff uses for the trainer's step) and
// looking at what the ops it builds read: the planner's saved activations
// then agree with what the compiled step keeps, by construction.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PLAN_GRADIENTREADS_H
#define BM_PLAN_GRADIENTREADS_H

#include "passes/plan/ModelGraph.h"

#include "mlir/IR/Operation.h"

namespace bm::plan {

/// Per operand j of `op`: which of its operands and results the gradient of
/// operand j reads (OpInfo::gradientReads). Empty when the op has no
/// gradient rule (nothing is differentiated through it).
GradientReads gradientReadsOf(mlir::Operation &op);

} // namespace bm::plan

#endif // BM_PLAN_GRADIENTREADS_H
