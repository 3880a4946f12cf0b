//===- LayerWalk.cpp - layers of a folded function, for verifiers ---------===//

#include "passes/verify/LayerWalk.h"

namespace mlir::bm {

LogicalResult verifyNotCollective(Operation *op, StringRef phase) {
  if (!isa<AllGatherOp, AllReduceOp, AllToAllOp, CollectivePermuteOp,
           CrossEntropyStatsOp, CrossEntropyGradFromStatsOp, RecvOp,
           ReduceScatterOp, SendOp, ShardGatherOp>(op))
    return success();
  return op->emitOpError()
         << "is a collective, which partitioning (phase 6) inserts; it "
            "cannot appear after "
         << phase;
}

std::optional<int64_t> intAttr(Operation *op, StringRef name) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(name))
    return attr.getInt();
  return std::nullopt;
}

namespace {
/// The ops of @main by layer.
struct Layers {
  SmallVector<SmallVector<Operation *>> ops;
  SmallVector<int64_t> blockClass;
  /// First layer of each class.
  DenseMap<int64_t, int64_t> firstOfClass;
};
} // namespace

static FailureOr<Layers> collectLayers(func::FuncOp func) {
  Layers layers;
  int64_t current = -1;
  for (Operation &op : func.getBody().front().without_terminator()) {
    std::optional<int64_t> layer = intAttr(&op, BmDialect::kLayerAttrName);
    std::optional<int64_t> cls = intAttr(&op, BmDialect::kBlockClassAttrName);
    if (layer.has_value() != cls.has_value())
      return op.emitOpError() << "has '"
                              << (layer ? BmDialect::kLayerAttrName
                                        : BmDialect::kBlockClassAttrName)
                              << "' without '"
                              << (layer ? BmDialect::kBlockClassAttrName
                                        : BmDialect::kLayerAttrName)
                              << "'";
    if (!layer)
      continue;
    if (*layer != current) {
      if (*layer != current + 1)
        return op.emitOpError()
               << "is in layer " << *layer << " right after layer " << current
               << ": layers are numbered from 0 in op order, each one "
                  "contiguous";
      current = *layer;
      layers.ops.emplace_back();
      layers.blockClass.push_back(*cls);
      layers.firstOfClass.try_emplace(*cls, *layer);
    } else if (*cls != layers.blockClass.back()) {
      return op.emitOpError() << "is in block class " << *cls
                              << " but layer " << *layer
                              << " started in block class "
                              << layers.blockClass.back();
    }
    layers.ops.back().push_back(&op);
  }
  return layers;
}

/// Calls `check(layer, ops, first, reference)` for every layer with the ops
/// of its block class's first layer; stops at the first failure.
LogicalResult
forEachLayer(func::FuncOp func,
             function_ref<LogicalResult(const LayerInstance &)> check) {
  FailureOr<Layers> layers = collectLayers(func);
  if (failed(layers))
    return failure();
  for (auto [layer, ops] : llvm::enumerate(layers->ops)) {
    int64_t cls = layers->blockClass[layer];
    int64_t first = layers->firstOfClass.lookup(cls);
    if (failed(check({static_cast<int64_t>(layer), cls, ops, first,
                      layers->ops[first]})))
      return failure();
  }
  return success();
}

} // namespace mlir::bm
