//===- PrintShardingRules.cpp - report rules and costs as remarks ---------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"

#include "llvm/Support/FormatVariadic.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMPRINTSHARDINGRULESPASS
#include "passes/Passes.h.inc"

namespace {
struct PrintShardingRulesPass
    : impl::BmPrintShardingRulesPassBase<PrintShardingRulesPass> {
  void runOnOperation() override {
    markAllAnalysesPreserved(); // it only reads the IR
    getOperation().walk([](ShardingRuleOpInterface op) {
      auto cost = dyn_cast<CostOpInterface>(op.getOperation());
      op->emitRemark() << "rule " << op.getShardingRule().str()
                       << " flops " << llvm::formatv("{0}", cost.getFlops());
    });
  }
};
} // namespace
} // namespace mlir::bm
