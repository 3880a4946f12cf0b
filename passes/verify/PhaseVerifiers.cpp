//===- PhaseVerifiers.cpp - what each phase leaves behind -----------------===//
//
// IREE-style phase verifiers: each phase pipeline ends with a pass that
// checks the IR is what the next phase expects, so a bug shows up at the
// phase that made it, with the values in the message.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMVERIFYFOLDEDPASS
#define GEN_PASS_DEF_BMVERIFYANNOTATEDPASS
#include "passes/Passes.h.inc"

namespace {

bool isCollective(Operation *op) {
  return isa<AllGatherOp, AllReduceOp, AllToAllOp, CollectivePermuteOp,
             RecvOp, ReduceScatterOp, SendOp>(op);
}

std::optional<int64_t> intAttr(Operation *op, StringRef name) {
  if (auto attr = op->getAttrOfType<IntegerAttr>(name))
    return attr.getInt();
  return std::nullopt;
}

/// The ops of @main by layer, checking the fold's invariants on the way.
struct Layers {
  /// Ops of each layer, in order.
  SmallVector<SmallVector<Operation *>> ops;
  SmallVector<int64_t> blockClass;
  /// First layer of each class.
  DenseMap<int64_t, int64_t> firstOfClass;
};

FailureOr<Layers> collectLayers(func::FuncOp func) {
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
LogicalResult forEachInstance(
    const Layers &layers,
    function_ref<LogicalResult(int64_t, ArrayRef<Operation *>, int64_t,
                               ArrayRef<Operation *>)>
        check) {
  for (auto [layer, ops] : llvm::enumerate(layers.ops)) {
    int64_t first = layers.firstOfClass.lookup(layers.blockClass[layer]);
    if (failed(check(static_cast<int64_t>(layer), ops, first,
                     layers.ops[first])))
      return failure();
  }
  return success();
}

struct VerifyFoldedPass : impl::BmVerifyFoldedPassBase<VerifyFoldedPass> {
  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func)
      return;
    if (failed(verify(func)))
      signalPassFailure();
  }

  LogicalResult verify(func::FuncOp func) {
    for (Operation &op : func.getBody().front()) {
      if (isCollective(&op))
        return op.emitOpError()
               << "is a collective, which partitioning (phase 6) inserts; "
                  "it cannot appear after folding";
      for (StringRef name :
           {BmDialect::kShardingAttrName, BmDialect::kStageAttrName})
        if (op.hasAttr(name))
          return op.emitOpError() << "carries '" << name
                                  << "', which the annotate phase writes; "
                                     "it cannot appear after folding";
    }
    FailureOr<Layers> layers = collectLayers(func);
    if (failed(layers))
      return failure();
    return forEachInstance(*layers, [&](int64_t layer,
                                        ArrayRef<Operation *> ops,
                                        int64_t first,
                                        ArrayRef<Operation *> reference)
                                        -> LogicalResult {
      if (ops.size() != reference.size())
        return ops.front()->emitOpError()
               << "starts layer " << layer << " of block class "
               << layers->blockClass[layer] << " with " << ops.size()
               << " ops, but the class's first layer " << first << " has "
               << reference.size();
      for (auto [k, op] : llvm::enumerate(ops))
        if (op->getName() != reference[k]->getName())
          return op->emitOpError()
                 << "is op " << k << " of layer " << layer
                 << ", but op " << k << " of layer " << first
                 << " of the same block class is "
                 << reference[k]->getName();
      return success();
    });
  }
};

struct VerifyAnnotatedPass
    : impl::BmVerifyAnnotatedPassBase<VerifyAnnotatedPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("main");
    if (!func)
      return;
    if (failed(verify(module, func)))
      signalPassFailure();
  }

  LogicalResult verify(ModuleOp module, func::FuncOp func) {
    auto mesh = module.lookupSymbol<MeshOp>("mesh");
    if (!mesh)
      return module.emitError()
             << "annotated module has no 'bm.mesh @mesh'";
    int64_t ppIndex = mesh.getMesh().findAxis("pp");
    int64_t stages = ppIndex < 0 ? 1 : mesh.getMesh().getAxisSizes()[ppIndex];
    for (Operation &op : func.getBody().front().without_terminator()) {
      if (isCollective(&op))
        return op.emitOpError()
               << "is a collective, which partitioning (phase 6) inserts; "
                  "it cannot appear after annotation";
      if (!op.hasAttr(BmDialect::kShardingAttrName))
        return op.emitOpError() << "has no '" << BmDialect::kShardingAttrName
                                << "' after annotation";
      std::optional<int64_t> stage = intAttr(&op, BmDialect::kStageAttrName);
      if (!stage)
        return op.emitOpError() << "has no integer 'bm.stage' after "
                                   "annotation";
      if (*stage < 0 || *stage >= stages)
        return op.emitOpError() << "is on stage " << *stage
                                << " but the mesh has " << stages
                                << " pipeline stages";
    }
    FailureOr<Layers> layers = collectLayers(func);
    if (failed(layers))
      return failure();
    return forEachInstance(*layers, [&](int64_t layer,
                                        ArrayRef<Operation *> ops,
                                        int64_t first,
                                        ArrayRef<Operation *> reference)
                                        -> LogicalResult {
      if (ops.size() != reference.size())
        return success(); // bm-verify-folded's business
      for (auto [k, op] : llvm::enumerate(ops)) {
        // Shardings are compared as written: the same axes on the same
        // dims (shapes are equal between instances of a class).
        Attribute mine = op->getAttr(BmDialect::kShardingAttrName);
        Attribute theirs = reference[k]->getAttr(BmDialect::kShardingAttrName);
        if (mine != theirs)
          return op->emitOpError()
                 << "in layer " << layer << " is sharded " << mine
                 << " but the same op of layer " << first
                 << " (its block class's first) is sharded " << theirs;
      }
      return success();
    });
  }
};

} // namespace
} // namespace mlir::bm
