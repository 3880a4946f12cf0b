//===- BmInterfaces.td - sharding rule and cost interfaces -*- tablegen -*-===//

#ifndef BM_INTERFACES_TD
#define BM_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Bm_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::bm";
  let description = [{
    The op's Shardy-style sharding rule: how operand and result dimensions map
    to factors, and whether each factor is parallel, a reduction or needs
    replication. The rules of all ops live in one alphabetical registry
    (ShardingRules.cpp); the default implementation looks the op up there.
  }];
  let methods = [
    InterfaceMethod<"Returns the op's sharding rule.", "::bm::ShardingRule",
      "getShardingRule", (ins), [{}], [{
        return ::mlir::bm::lookupShardingRule($_op.getOperation());
      }]>,
  ];
}

def Bm_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mlir::bm";
  let description = [{
    The forward cost of the op at its current shapes: FLOPs (a multiply-add
    counts 2). Contraction ops run on tensor cores; the rest are
    memory-bound.
  }];
  let methods = [
    InterfaceMethod<"Forward FLOPs.", "double", "getFlops", (ins), [{}], [{
        return ::mlir::bm::lookupFlops($_op.getOperation());
      }]>,
    InterfaceMethod<"Whether the op is a contraction (GEMM-like).", "bool",
      "isContraction", (ins), [{}], [{ return false; }]>,
  ];
}

#endif // BM_INTERFACES_TD
