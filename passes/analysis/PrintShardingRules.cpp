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
      // Gradient ops have rules but no cost of their own (the cost model
      // prices the backward from the forward).
      auto cost = dyn_cast<CostOpInterface>(op.getOperation());
      InFlightDiagnostic remark = op->emitRemark()
                                  << "rule " << op.getShardingRule().str();
      if (cost)
        remark << " flops " << llvm::formatv("{0}", cost.getFlops());
    });
  }
};
} // namespace
} // namespace mlir::bm
