//===- Autodiff.cpp - phase 5: the training step from the forward model ---===//
//
// Reverse-mode differentiation of @main's single block: the forward ops are
// kept as they are, the loss is appended, and each op's gradient rule
// (GradientOpInterface) adds its backward ops after them, last op first.
// Only values that depend on a parameter ("active" values) get gradients:
// the rest of the graph (masks, positions, the input images) needs none.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::bm {
#define GEN_PASS_DEF_BMAUTODIFFPASS
#include "passes/Passes.h.inc"

namespace {

RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

bool isFloatTensor(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

bool isParameter(func::FuncOp func, unsigned index) {
  auto kind = func.getArgAttrOfType<StringAttr>(index, "bm.kind");
  return kind && kind.getValue() == "parameter" &&
         isFloatTensor(func.getArgument(index).getType());
}

/// The scalar the step minimises: the model's output if it is one, else a
/// mean cross-entropy of the output's last dim (the classes) against a new
/// label argument of the leading shape.
FailureOr<Value> appendLoss(func::FuncOp step, Value output, OpBuilder &b) {
  RankedTensorType type = typeOf(output);
  Location loc = output.getLoc();
  if (!isa<FloatType>(type.getElementType()))
    return emitError(loc, "the model's output is ")
           << type << "; training needs a float loss or logits";
  if (type.getRank() == 0)
    return output;
  if (type.getRank() < 2)
    return emitError(loc, "the model's output ")
           << type
           << " is neither a scalar loss nor logits [..., classes]; "
              "training cannot append a loss to it";
  ArrayRef<int64_t> shape = type.getShape();
  SmallVector<int64_t> leading(shape.drop_back());
  int64_t classes = shape.back(), rows = type.getNumElements() / classes;

  auto labelType = RankedTensorType::get(leading, b.getI64Type());
  unsigned index = step.getNumArguments();
  if (failed(step.insertArgument(
          index, labelType,
          b.getDictionaryAttr({b.getNamedAttr("bm.kind", b.getStringAttr("label")),
                               b.getNamedAttr("bm.name", b.getStringAttr("labels"))}),
          loc)))
    return failure();
  Value labels = step.getArgument(index);
  Value flatLogits = ReshapeOp::create(
      b, loc, RankedTensorType::get({rows, classes}, type.getElementType()),
      output);
  Value flatLabels = ReshapeOp::create(
      b, loc, RankedTensorType::get({rows}, b.getI64Type()), labels);
  return CrossEntropyOp::create(
             b, loc, RankedTensorType::get({}, b.getF32Type()), flatLogits,
             flatLabels)
      .getResult();
}

/// Values that depend on a parameter: only they need gradients.
llvm::DenseSet<Value> activeValues(func::FuncOp func) {
  llvm::DenseSet<Value> active;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (isParameter(func, i))
      active.insert(func.getArgument(i));
  for (Operation &op : func.getBody().front())
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return active.contains(v); }))
      for (Value result : op.getResults())
        if (isFloatTensor(result.getType()))
          active.insert(result);
  return active;
}

class Backward {
public:
  Backward(OpBuilder &b, llvm::DenseSet<Value> active)
      : b(b), active(std::move(active)) {}

  /// Adds the gradient of each active operand of `op`, from its results'.
  LogicalResult differentiate(Operation *op) {
    SmallVector<Value> dys;
    bool any = false;
    for (Value result : op->getResults()) {
      dys.push_back(grads.lookup(result));
      any |= static_cast<bool>(dys.back());
    }
    if (!any || llvm::none_of(op->getOperands(),
                              [&](Value v) { return active.contains(v); }))
      return success();
    SmallVector<Value> dxs;
    auto rule = dyn_cast<GradientOpInterface>(op);
    if (failed(rule ? rule.buildGradients(b, dys, dxs)
                    : buildGradientsFromRegistry(op, b, dys, dxs)))
      return failure();
    for (auto [operand, dx] : llvm::zip(op->getOperands(), dxs))
      if (dx && active.contains(operand) && failed(accumulate(op, operand, dx)))
        return failure();
    return success();
  }

  void seed(Value value, Value grad) { grads[value] = grad; }
  Value gradientOf(Value value) const { return grads.lookup(value); }

private:
  LogicalResult accumulate(Operation *op, Value operand, Value dx) {
    if (dx.getType() != operand.getType())
      return op->emitOpError("gradient rule gave ")
             << dx.getType() << " for an operand of type "
             << operand.getType();
    Value &sum = grads[operand];
    sum = sum ? AddOp::create(b, op->getLoc(), sum, dx).getResult() : dx;
    return success();
  }

  OpBuilder &b;
  llvm::DenseSet<Value> active;
  llvm::DenseMap<Value, Value> grads;
};

/// Removes backward ops whose results nothing reads (gradients rules build
/// for every operand; unused ones, such as a bias's reduction when only
/// the weight is trained, go here).
void eraseDeadOps(Block &block, Operation *firstBackward) {
  SmallVector<Operation *> ops;
  for (Operation *op = firstBackward; op; op = op->getNextNode())
    ops.push_back(op);
  for (Operation *op : llvm::reverse(ops))
    if (!op->hasTrait<OpTrait::IsTerminator>() && op->use_empty() &&
        isPure(op))
      op->erase();
}

LogicalResult buildTrainStep(ModuleOp module, func::FuncOp main) {
  OpBuilder b(module.getContext());
  b.setInsertionPointAfter(main);
  auto step = cast<func::FuncOp>(b.clone(*main));
  step.setSymName("train_step");

  Block &body = step.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() != 1)
    return main.emitError("the model has ")
           << ret.getNumOperands()
           << " outputs; training needs one (a scalar loss or logits)";
  b.setInsertionPoint(ret);
  Operation *lastForward = ret->getPrevNode();
  FailureOr<Value> loss = appendLoss(step, ret.getOperand(0), b);
  if (failed(loss))
    return failure();

  Backward backward(b, activeValues(step));
  Value one = ConstantOp::create(
      b, loss->getLoc(),
      DenseElementsAttr::get(typeOf(*loss), b.getF32FloatAttr(1.0f)));
  backward.seed(*loss, one);
  Operation *firstBackward = one.getDefiningOp();
  SmallVector<Operation *> forward;
  for (Operation &op : body)
    if (&op == firstBackward)
      break;
    else
      forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward))
    if (failed(backward.differentiate(op)))
      return failure();

  SmallVector<Value> results = {*loss};
  SmallVector<DictionaryAttr> resultAttrs = {b.getDictionaryAttr(
      {b.getNamedAttr("bm.kind", b.getStringAttr("loss"))})};
  for (unsigned i = 0; i < step.getNumArguments(); ++i) {
    if (!isParameter(step, i))
      continue;
    Value grad = backward.gradientOf(step.getArgument(i));
    if (!grad) {
      // No gradient reaches it (batch norm's running statistics, an unused
      // table): it is not trained, and the optimizer must not decay it.
      step.setArgAttr(i, "bm.trainable", b.getBoolAttr(false));
      continue;
    }
    results.push_back(grad);
    resultAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("bm.grad_of",
                        step.getArgAttrOfType<StringAttr>(i, "bm.name"))}));
  }
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  (void)lastForward;
  eraseDeadOps(body, firstBackward);
  step.setType(b.getFunctionType(step.getArgumentTypes(),
                                 ValueRange(results).getTypes()));
  step.setAllResultAttrs(resultAttrs);
  return success();
}

struct AutodiffPass : impl::BmAutodiffPassBase<AutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main) {
      module.emitError("autodiff needs the forward model as @main");
      return signalPassFailure();
    }
    if (module.lookupSymbol("train_step")) {
      module.emitError("the module already has a @train_step");
      return signalPassFailure();
    }
    if (failed(buildTrainStep(module, main)))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::bm
