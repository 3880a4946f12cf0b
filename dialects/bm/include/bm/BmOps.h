//===- BmOps.h - bm ops -----------------------------------------*- C++ -*-===//

#ifndef BM_BMOPS_H
#define BM_BMOPS_H

#include "bm/BmAttrs.h"
#include "bm/BmDialect.h"
#include "bm/ShardingRule.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::bm {

/// Bm_View (BmOps.td): the op only changes the layout of its operand.
template <typename ConcreteType>
class View : public OpTrait::TraitBase<ConcreteType, View> {};
/// Bm_NoKernel (BmOps.td): never an instruction of a step program.
template <typename ConcreteType>
class NoKernel : public OpTrait::TraitBase<ConcreteType, NoKernel> {};

/// Registries behind the interfaces' default implementations
/// (ShardingRules.cpp and Costs.cpp, both alphabetical by op).
::bm::ShardingRule lookupShardingRule(Operation *op);
double lookupFlops(Operation *op);
/// The class of memory-bound kernel the op runs as: "data_movement",
/// "elementwise", "normalization", "reduction" or "softmax" (Costs.cpp).
StringRef lookupMemoryKernelClass(Operation *op);
/// The gradient rule registry behind GradientOpInterface (GradientRules.cpp,
/// alphabetical by op): fails with an error on `op` naming it when it has no
/// rule.
LogicalResult buildGradientsFromRegistry(Operation *op, OpBuilder &builder,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads);
/// Whether the registries above have an entry for the op named `opName`
/// (a "bm.*" name): the lookups fall back to an empty rule, 0 FLOPs or an
/// error, so OpFactsTest asks these instead.
bool hasShardingRule(StringRef opName);
bool hasCost(StringRef opName);
bool hasGradientRule(StringRef opName);

/// What a broadcasting binary op produces.
enum class BroadcastResult {
  same,    // the operands' element type (arithmetic)
  compare, // i1, operands of one element type
  logical, // i1, operands i1
};

/// Emits "WHAT axis AXIS is out of range for rank RANK" at `loc` unless
/// 0 <= axis < rank (BmOps.cpp).
LogicalResult checkAxis(std::optional<Location> loc, StringRef what,
                        int64_t axis, int64_t rank);

/// Shared shape inference (ShapeInference.cpp).
LogicalResult inferBroadcastShape(std::optional<Location> loc,
                                  ArrayRef<Type> types,
                                  SmallVectorImpl<int64_t> &shape);
LogicalResult inferBroadcastResult(std::optional<Location> loc,
                                   ArrayRef<Type> types, BroadcastResult kind,
                                   SmallVectorImpl<Type> &results);
LogicalResult inferReduceResult(std::optional<Location> loc, Type input,
                                ArrayRef<int64_t> axes, bool keepDims,
                                SmallVectorImpl<Type> &results);
LogicalResult inferPoolResult(std::optional<Location> loc, Type input,
                              ArrayRef<int64_t> kernel,
                              ArrayRef<int64_t> strides,
                              ArrayRef<int64_t> pads,
                              SmallVectorImpl<Type> &results);

/// Checks the attributes of an op's adaptor before result-type inference
/// reads them (Bm_InferTypeOpAdaptor): the custom parser infers result types
/// before the op is verified. Silent when there is no location to report at.
template <typename AdaptorT>
LogicalResult verifyAdaptor(MLIRContext *context, std::optional<Location> loc,
                            AdaptorT &adaptor) {
  if (loc)
    return adaptor.verify(*loc);
  ScopedDiagnosticHandler silence(context,
                                  [](Diagnostic &) { return success(); });
  return adaptor.verify(UnknownLoc::get(context));
}

} // namespace mlir::bm

#include "bm/BmInterfaces.h.inc"

#define GET_OP_CLASSES
#include "bm/BmOps.h.inc"



namespace mlir::bm {

/// An einsum equation in explicit form: one letter string per operand and
/// one for the result ("gsec,gsm->egcm").
struct EinsumEquation {
  SmallVector<std::string> inputs;
  std::string output;
};
/// Parses an explicit einsum equation; fails with a message on bad syntax.
FailureOr<EinsumEquation> parseEinsum(StringRef equation, std::string &error);

} // namespace mlir::bm
#endif // BM_BMOPS_H
