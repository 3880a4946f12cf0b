//===- VerifyFolded.cpp - phase 2 ends with bm-verify-folded -------------===//
//
// IREE-style phase verifier: the pass that ends a phase pipeline checks the
// IR is what the next phase expects, so a bug shows up at the phase that
// made it, with the values in the message.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/fold/SemanticAttrs.h"
#include "passes/verify/LayerWalk.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMVERIFYFOLDEDPASS
#include "passes/Passes.h.inc"

namespace {

struct VerifyFoldedPass : impl::BmVerifyFoldedPassBase<VerifyFoldedPass> {
  void runOnOperation() override {
    // A verifier only reads the IR: the pass manager need not verify the
    // module again after it.
    markAllAnalysesPreserved();
    auto func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func)
      return;
    if (failed(verify(func)))
      signalPassFailure();
  }

  LogicalResult verify(func::FuncOp func) {
    for (Operation &op : func.getBody().front()) {
      if (failed(verifyNotCollective(&op, "folding")))
        return failure();
      for (StringRef name :
           {BmDialect::kShardingAttrName, BmDialect::kStageAttrName})
        if (op.hasAttr(name))
          return op.emitOpError() << "carries '" << name
                                  << "', which the annotate phase writes; "
                                     "it cannot appear after folding";
    }
    return forEachLayer(func, [](const LayerInstance &l) -> LogicalResult {
      if (l.ops.size() != l.reference.size())
        return l.ops.front()->emitOpError()
               << "starts layer " << l.layer << " of block class "
               << l.blockClass << " with " << l.ops.size()
               << " ops, but the class's first layer " << l.first << " has "
               << l.reference.size();
      for (auto [k, op] : llvm::enumerate(l.ops)) {
        Operation *reference = l.reference[k];
        if (op->getName() != reference->getName())
          return op->emitOpError()
                 << "is op " << k << " of layer " << l.layer << ", but op "
                 << k << " of layer " << l.first
                 << " of the same block class is " << reference->getName();
        if (semanticAttrs(op) != semanticAttrs(reference))
          return op->emitOpError()
                 << "is op " << k << " of layer " << l.layer << " with "
                 << semanticAttrs(op) << ", but op " << k << " of layer "
                 << l.first << " of the same block class has "
                 << semanticAttrs(reference);
      }
      return success();
    });
  }
};

} // namespace
} // namespace mlir::bm
