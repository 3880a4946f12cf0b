//===- VerifyAnnotated.cpp - phase 4 ends with bm-verify-annotated -------===//
//
// IREE-style phase verifier: the pass that ends a phase pipeline checks the
// IR is what the next phase expects, so a bug shows up at the phase that
// made it, with the values in the message.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/verify/LayerWalk.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMVERIFYANNOTATEDPASS
#include "passes/Passes.h.inc"

namespace {

struct VerifyAnnotatedPass
    : impl::BmVerifyAnnotatedPassBase<VerifyAnnotatedPass> {
  void runOnOperation() override {
    // A verifier only reads the IR: the pass manager need not verify the
    // module again after it.
    markAllAnalysesPreserved();
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
      if (failed(verifyNotCollective(&op, "annotation")))
        return failure();
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
    return forEachLayer(func, [](const LayerInstance &l) -> LogicalResult {
      if (l.ops.size() != l.reference.size())
        return success(); // bm-verify-folded's business
      for (auto [k, op] : llvm::enumerate(l.ops)) {
        // Shardings are compared as written: the same axes on the same
        // dims (shapes are equal between instances of a class).
        Attribute mine = op->getAttr(BmDialect::kShardingAttrName);
        Attribute theirs =
            l.reference[k]->getAttr(BmDialect::kShardingAttrName);
        if (mine != theirs)
          return op->emitOpError()
                 << "in layer " << l.layer << " is sharded " << mine
                 << " but the same op of layer " << l.first
                 << " (its block class's first) is sharded " << theirs;
      }
      return success();
    });
  }
};

} // namespace
} // namespace mlir::bm
