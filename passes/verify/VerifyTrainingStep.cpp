//===- VerifyTrainingStep.cpp - phase 5 ends with bm-verify-training-step -===//
//
// What codegen relies on: @train_step returns the loss first and then one
// gradient per float parameter, each typed as its parameter and named by
// `bm.grad_of`.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/verify/LayerWalk.h"

#include "llvm/ADT/StringSet.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMVERIFYTRAININGSTEPPASS
#include "passes/Passes.h.inc"

namespace {

struct VerifyTrainingStepPass
    : impl::BmVerifyTrainingStepPassBase<VerifyTrainingStepPass> {
  void runOnOperation() override {
    markAllAnalysesPreserved();
    auto step = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      getOperation().emitError("no @train_step: run bm-autodiff first");
      return signalPassFailure();
    }
    if (failed(verify(step)))
      signalPassFailure();
  }

  /// Parameter name -> its type, for the float parameters.
  llvm::StringMap<Type> floatParameters(func::FuncOp step) {
    llvm::StringMap<Type> params;
    for (unsigned i = 0; i < step.getNumArguments(); ++i) {
      auto kind =
          step.getArgAttrOfType<StringAttr>(i, BmDialect::kParamKindAttrName);
      auto name =
          step.getArgAttrOfType<StringAttr>(i, BmDialect::kParamNameAttrName);
      auto type = dyn_cast<RankedTensorType>(step.getArgument(i).getType());
      auto trainable =
          step.getArgAttrOfType<BoolAttr>(i, BmDialect::kTrainableAttrName);
      if (kind && kind.getValue() == BmDialect::kKindParameter && name &&
          type && isa<FloatType>(type.getElementType()) &&
          (!trainable || trainable.getValue()))
        params[name.getValue()] = type;
    }
    return params;
  }

  LogicalResult verify(func::FuncOp step) {
    for (Operation &op : step.getBody().front())
      if (failed(verifyNotCollective(&op, "autodiff")))
        return failure();
    FunctionType type = step.getFunctionType();
    auto loss = type.getNumResults()
                    ? dyn_cast<RankedTensorType>(type.getResult(0))
                    : RankedTensorType();
    if (!loss || loss.getRank() != 0 || !isa<FloatType>(loss.getElementType()))
      return step.emitOpError("must return a scalar float loss first");
    llvm::StringMap<Type> params = floatParameters(step);
    llvm::StringSet<> seen;
    for (unsigned i = 1; i < type.getNumResults(); ++i) {
      auto of =
          step.getResultAttrOfType<StringAttr>(i, BmDialect::kGradOfAttrName);
      if (!of)
        return step.emitOpError("result ") << i << " is not a gradient";
      auto it = params.find(of.getValue());
      if (it == params.end())
        return step.emitOpError("result ")
               << i << " is the gradient of '" << of.getValue()
               << "', which is no float parameter";
      if (it->second != type.getResult(i))
        return step.emitOpError("the gradient of '")
               << of.getValue() << "' is " << type.getResult(i)
               << ", its parameter " << it->second;
      if (!seen.insert(of.getValue()).second)
        return step.emitOpError("two gradients of '") << of.getValue() << "'";
    }
    for (const auto &param : params)
      if (!seen.contains(param.getKey()))
        return step.emitOpError("no gradient of parameter '")
               << param.getKey() << "'";
    return success();
  }
};

} // namespace
} // namespace mlir::bm
