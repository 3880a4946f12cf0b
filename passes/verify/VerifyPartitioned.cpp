//===- VerifyPartitioned.cpp - phase 6 ends with bm-verify-partitioned ----===//
//
// What codegen relies on after partitioning: no reshard is left (each is a
// collective, a slice or nothing), no op carries the plan's global-shape
// annotations, and every step function (@train_step, or each @stage_N)
// says what it leaves to the trainer: a `bm.partial` on the loss and on
// every gradient.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMVERIFYPARTITIONEDPASS
#include "passes/Passes.h.inc"

namespace {

LogicalResult verifyStep(func::FuncOp step) {
  WalkResult walk = step.walk([](Operation *op) {
    if (isa<ReshardOp, ReshardGradOp>(op)) {
      op->emitOpError("is left after partitioning: bm-partition lowers "
                      "every reshard");
      return WalkResult::interrupt();
    }
    for (StringRef name : {BmDialect::kShardingAttrName,
                           BmDialect::kOperandShardingAttrName})
      if (op->hasAttr(name)) {
        op->emitOpError() << "still has '" << name
                          << "' (global shapes) after partitioning";
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    auto kind =
        step.getResultAttrOfType<StringAttr>(i, BmDialect::kParamKindAttrName);
    bool leftToTrainer = step.getResultAttr(i, BmDialect::kGradOfAttrName) ||
                         (kind && kind.getValue() == BmDialect::kKindLoss);
    if (leftToTrainer && !step.getResultAttr(i, BmDialect::kPartialAttrName))
      return step.emitError() << "result " << i << " of @" << step.getSymName()
                              << " has no 'bm.partial' after partitioning";
  }
  return success();
}

struct VerifyPartitionedPass
    : impl::BmVerifyPartitionedPassBase<VerifyPartitionedPass> {
  void runOnOperation() override {
    markAllAnalysesPreserved();
    SmallVector<func::FuncOp> steps;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (func.getSymName() == "train_step" ||
          func.getSymName().starts_with("stage_"))
        steps.push_back(func);
    if (steps.empty()) {
      getOperation().emitError("no @train_step or @stage_N: run bm-autodiff "
                               "and bm-partition first");
      return signalPassFailure();
    }
    for (func::FuncOp step : steps)
      if (failed(verifyStep(step)))
        return signalPassFailure();
  }
};

} // namespace
} // namespace mlir::bm
