//===- LayerWalk.h - layers of a folded function, for verifiers -*- C++ -*-===//
//
// What the phase verifiers share: a walk over the layers bm-fold marked in
// @main, each beside its block class's first instance, checking the fold's
// invariants on the way.
//
//===----------------------------------------------------------------------===//

#ifndef BM_PASSES_VERIFY_LAYERWALK_H
#define BM_PASSES_VERIFY_LAYERWALK_H

#include "bm/BmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::bm {

/// Collectives appear only once partitioning (phase 6) inserts them: an
/// error naming `phase` if `op` is one.
LogicalResult verifyNotCollective(Operation *op, StringRef phase);

/// The integer attribute `name` of `op`, if it has one.
std::optional<int64_t> intAttr(Operation *op, StringRef name);

/// One layer beside its block class's first layer.
struct LayerInstance {
  int64_t layer, blockClass;
  ArrayRef<Operation *> ops;
  /// The class's first layer and its ops (the layer itself for the first).
  int64_t first;
  ArrayRef<Operation *> reference;
};

/// Reads the layers bm-fold marked in `func`, emitting an error where
/// `bm.layer` and `bm.block_class` are inconsistent, and calls `check` on
/// every layer in order; stops at the first failure.
LogicalResult
forEachLayer(func::FuncOp func,
             function_ref<LogicalResult(const LayerInstance &)> check);

} // namespace mlir::bm

#endif // BM_PASSES_VERIFY_LAYERWALK_H
