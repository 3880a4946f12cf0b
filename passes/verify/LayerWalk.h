//===- LayerWalk.h - layers of a folded function, for verifiers -*- C++ -*-===//
//
// What the phase verifiers share: the layers bm-fold marked in @main, read
// back with the fold's invariants checked on the way, and a walk over every
// layer beside its block class's first instance.
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

/// The ops of @main by layer.
struct Layers {
  /// Ops of each layer, in order.
  SmallVector<SmallVector<Operation *>> ops;
  SmallVector<int64_t> blockClass;
  /// First layer of each class.
  DenseMap<int64_t, int64_t> firstOfClass;
};

/// Reads the layers of `func`, emitting an error (and failing) where
/// `bm.layer` and `bm.block_class` are inconsistent.
FailureOr<Layers> collectLayers(func::FuncOp func);

/// Calls `check(layer, ops, first, reference)` for every layer with the ops
/// of its block class's first layer; stops at the first failure.
LogicalResult forEachInstance(
    const Layers &layers,
    function_ref<LogicalResult(int64_t, ArrayRef<Operation *>, int64_t,
                               ArrayRef<Operation *>)>
        check);

} // namespace mlir::bm

#endif // BM_PASSES_VERIFY_LAYERWALK_H
