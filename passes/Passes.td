//===- Passes.td - bm passes -------------------------------*- tablegen -*-===//

#ifndef BM_PASSES_TD
#define BM_PASSES_TD

include "mlir/Pass/PassBase.td"

def BmPrintShardingRulesPass : Pass<"bm-print-sharding-rules", "::mlir::ModuleOp"> {
  let summary = "Reports each op's sharding rule and FLOPs as remarks";
  let description = [{
    A developer pass: emits a remark on every bm compute op with its
    Shardy-style sharding rule and forward FLOPs, for lit tests of the rule
    and cost registries.
  }];
}

#endif // BM_PASSES_TD
