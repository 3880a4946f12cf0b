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
    memory-bound, each of a kernel class with its own measured rate.
  }];
  let methods = [
    InterfaceMethod<"Forward FLOPs.", "double", "getFlops", (ins), [{}], [{
        return ::mlir::bm::lookupFlops($_op.getOperation());
      }]>,
    InterfaceMethod<"Whether the op is a contraction (GEMM-like).", "bool",
      "isContraction", (ins), [{}], [{ return false; }]>,
    InterfaceMethod<[{
        The class of memory-bound kernel the op runs as, named as the cost
        model and cluster files name them: data_movement, elementwise,
        normalization, reduction, softmax.
      }], "::llvm::StringRef", "getMemoryKernelClass", (ins), [{}], [{
        return ::mlir::bm::lookupMemoryKernelClass($_op.getOperation());
      }]>,
  ];
}

def Bm_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mlir::bm";
  let description = [{
    The op's gradient rule, for autodiff (passes/autodiff): given the
    gradient of each result (null where none flows), builds the ops that
    compute the gradient of each operand at the builder's insertion point
    (null where the operand is not differentiable: integers, masks, or a
    result that does not depend on it). The rules of all ops live in one
    alphabetical registry (GradientRules.cpp); the default implementation
    looks the op up there and fails, naming the op, when it has no rule.
  }];
  let methods = [
    InterfaceMethod<"Builds the operands' gradients.", "::llvm::LogicalResult",
      "buildGradients", (ins "::mlir::OpBuilder &":$builder,
                             "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
                             "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads),
      [{}], [{
        return ::mlir::bm::buildGradientsFromRegistry(
            $_op.getOperation(), builder, resultGrads, operandGrads);
      }]>,
  ];
}

#endif // BM_INTERFACES_TD
