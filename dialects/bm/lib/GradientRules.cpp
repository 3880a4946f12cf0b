//===- GradientRules.cpp - the gradient rule of every bm op ---------------===//
//
// One rule per kind of op and one alphabetical table from op name to rule,
// like the sharding rules. A rule reads the gradients of the op's results
// (null where none flows) and builds the gradients of its operands; it
// leaves null what is not differentiable (integer operands, masks). Forward
// ops are reused where they express the derivative in one pass; the
// backward ops of BmOps.td cover the rest.
//
// Broadcasting: an operand that was broadcast gets the sum of the result's
// gradient over the broadcast dims (sumToShape).
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::bm;

namespace {

RankedTensorType typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

bool isFloat(Value value) {
  return isa<FloatType>(typeOf(value).getElementType());
}

/// Builds backward ops at one place, with the forward op's location.
struct GradBuilder {
  OpBuilder &b;
  Location loc;

  Value scalar(double value, Type elementType) {
    auto type = RankedTensorType::get({}, elementType);
    return ConstantOp::create(
        b, loc, DenseElementsAttr::get(type, b.getFloatAttr(elementType, value)));
  }
  Value zerosLike(RankedTensorType type) {
    return ConstantOp::create(
        b, loc,
        DenseElementsAttr::get(type,
                               b.getFloatAttr(type.getElementType(), 0.0)));
  }
  Value add(Value x, Value y) { return AddOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, loc, x, y); }
  Value neg(Value x) { return NegOp::create(b, loc, x); }
  Value scale(Value x, double factor) {
    return mul(x, scalar(factor, typeOf(x).getElementType()));
  }
  Value reshape(Value x, RankedTensorType type) {
    if (typeOf(x) == type)
      return x;
    return ReshapeOp::create(b, loc, type, x);
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    return reshape(x, RankedTensorType::get(shape, typeOf(x).getElementType()));
  }
  Value transpose(Value x, ArrayRef<int64_t> perm) {
    return TransposeOp::create(b, loc, x, b.getDenseI64ArrayAttr(perm));
  }
  /// Swaps the last two dims.
  Value transposeLast2(Value x) {
    SmallVector<int64_t> perm;
    int64_t rank = typeOf(x).getRank();
    for (int64_t d = 0; d < rank; ++d)
      perm.push_back(d);
    std::swap(perm[rank - 1], perm[rank - 2]);
    return transpose(x, perm);
  }
  Value reduceSum(Value x, ArrayRef<int64_t> axes, bool keepDims) {
    return ReduceSumOp::create(b, loc, x, b.getDenseI64ArrayAttr(axes),
                               b.getBoolAttr(keepDims));
  }
  Value expand(Value x, RankedTensorType type) {
    if (typeOf(x) == type)
      return x;
    return ExpandOp::create(b, loc, type, x);
  }
  Value matmul(Value x, Value y) { return MatMulOp::create(b, loc, x, y); }

  /// Sums `g` over the dims that broadcasting stretched to reach it from
  /// `target` (leading dims, and dims of size 1 in target), then reshapes.
  Value sumToShape(Value g, RankedTensorType target) {
    ArrayRef<int64_t> from = typeOf(g).getShape(), to = target.getShape();
    size_t lead = from.size() - to.size();
    SmallVector<int64_t> axes;
    for (size_t d = 0; d < from.size(); ++d)
      if (d < lead || (to[d - lead] == 1 && from[d] != 1))
        axes.push_back(d);
    if (!axes.empty())
      g = reduceSum(g, axes, /*keepDims=*/true);
    return reshape(g, target.clone(typeOf(g).getElementType()));
  }
};

using Grads = SmallVectorImpl<Value>;
using Rule = LogicalResult (*)(Operation *op, GradBuilder &g,
                               ArrayRef<Value> dys, Grads &dxs);

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// dx = unary_grad(x, dy): f' from the kernel, one pass.
LogicalResult unaryRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                        Grads &dxs) {
  Value x = op->getOperand(0);
  if (!isFloat(x))
    return success();
  auto gradOp = UnaryGradOp::create(g.b, g.loc, x, dys[0],
                                    op->getName().stripDialect());
  if (auto approx = op->getAttrOfType<BoolAttr>("tanh_approximation"))
    gradOp.setTanhApproximation(approx.getValue());
  dxs[0] = gradOp;
  return success();
}

LogicalResult negRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                      Grads &dxs) {
  dxs[0] = g.neg(dys[0]);
  return success();
}

LogicalResult addRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                      Grads &dxs) {
  for (unsigned i = 0; i < 2; ++i)
    dxs[i] = g.sumToShape(dys[0], typeOf(op->getOperand(i)));
  return success();
}

LogicalResult subRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                      Grads &dxs) {
  dxs[0] = g.sumToShape(dys[0], typeOf(op->getOperand(0)));
  dxs[1] = g.sumToShape(g.neg(dys[0]), typeOf(op->getOperand(1)));
  return success();
}

LogicalResult mulRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                      Grads &dxs) {
  Value a = op->getOperand(0), b = op->getOperand(1);
  dxs[0] = g.sumToShape(g.mul(dys[0], b), typeOf(a));
  dxs[1] = g.sumToShape(g.mul(dys[0], a), typeOf(b));
  return success();
}

/// y = a / b: da = dy / b, db = -dy * y / b.
LogicalResult divRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                      Grads &dxs) {
  Value a = op->getOperand(0), b = op->getOperand(1), y = op->getResult(0);
  dxs[0] = g.sumToShape(g.div(dys[0], b), typeOf(a));
  dxs[1] = g.sumToShape(g.neg(g.div(g.mul(dys[0], y), b)), typeOf(b));
  return success();
}

/// The splat value of a constant operand, if it is one.
std::optional<double> splatConstant(Value value) {
  auto constant = value.getDefiningOp<ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat() ||
      !isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

/// y = a ^ b: da = dy * b * a^(b-1); db = dy * y * log(a) unless b is a
/// constant (the usual case: x^2 in RMS norms, x^3 in GELU's tanh form).
LogicalResult powRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                      Grads &dxs) {
  Value a = op->getOperand(0), b = op->getOperand(1), y = op->getResult(0);
  Type element = typeOf(a).getElementType();
  Value bMinusOne = g.sub(b, g.scalar(1.0, element));
  if (std::optional<double> exponent = splatConstant(b))
    bMinusOne = g.scalar(*exponent - 1.0, element);
  Value slope = g.mul(b, PowOp::create(g.b, g.loc, a, bMinusOne));
  dxs[0] = g.sumToShape(g.mul(dys[0], slope), typeOf(a));
  if (!b.getDefiningOp<ConstantOp>()) {
    Value logA = LogOp::create(g.b, g.loc, a);
    dxs[1] = g.sumToShape(g.mul(g.mul(dys[0], y), logA), typeOf(b));
  }
  return success();
}

/// max / min: the gradient goes to the operand that was taken (to the
/// first operand on ties).
LogicalResult minMaxRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                         Grads &dxs) {
  Value a = op->getOperand(0), b = op->getOperand(1);
  if (!isFloat(a))
    return success();
  Value secondWins = isa<MaxOp>(op) ? Value(LessOp::create(g.b, g.loc, a, b))
                                    : Value(GreaterOp::create(g.b, g.loc, a, b));
  Value zero = g.scalar(0.0, typeOf(a).getElementType());
  Value toA = WhereOp::create(g.b, g.loc, secondWins, zero, dys[0]);
  Value toB = WhereOp::create(g.b, g.loc, secondWins, dys[0], zero);
  dxs[0] = g.sumToShape(toA, typeOf(a));
  dxs[1] = g.sumToShape(toB, typeOf(b));
  return success();
}

LogicalResult whereRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                        Grads &dxs) {
  Value condition = op->getOperand(0);
  if (!isFloat(op->getResult(0)))
    return success();
  Value zero = g.scalar(0.0, typeOf(op->getResult(0)).getElementType());
  dxs[1] = g.sumToShape(WhereOp::create(g.b, g.loc, condition, dys[0], zero),
                        typeOf(op->getOperand(1)));
  dxs[2] = g.sumToShape(WhereOp::create(g.b, g.loc, condition, zero, dys[0]),
                        typeOf(op->getOperand(2)));
  return success();
}

/// Float to float only: an integer on either side ends the gradient.
LogicalResult castRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                       Grads &dxs) {
  Value x = op->getOperand(0);
  if (!isFloat(x) || !isFloat(op->getResult(0)))
    return success();
  dxs[0] = CastOp::create(g.b, g.loc, typeOf(x), dys[0]);
  return success();
}

/// Constants, iota, comparisons, logic, one-hot: nothing flows back.
LogicalResult noGradientRule(Operation *, GradBuilder &, ArrayRef<Value>,
                             Grads &) {
  return success();
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

/// numpy matmul. Rank-1 operands are promoted to [1, K] / [K, 1] so that
/// both gradients are matmuls: da = dy b^T, db = a^T dy, summed over batch
/// dims that broadcasting added. A 2-D b with a batched a (the weight of a
/// linear layer) folds the batch into the rows, one GEMM.
LogicalResult matmulRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                         Grads &dxs) {
  Value a = op->getOperand(0), b = op->getOperand(1), dy = dys[0];
  RankedTensorType aType = typeOf(a), bType = typeOf(b);
  if (aType.getRank() == 1)
    a = g.reshape(a, {1, aType.getDimSize(0)});
  if (bType.getRank() == 1)
    b = g.reshape(b, {bType.getDimSize(0), 1});
  SmallVector<int64_t> yShape(typeOf(dy).getShape());
  if (aType.getRank() == 1)
    yShape.insert(yShape.end() - (bType.getRank() == 1 ? 0 : 1), 1);
  if (bType.getRank() == 1)
    yShape.push_back(1);
  dy = g.reshape(dy, yShape);

  Value da = g.matmul(dy, g.transposeLast2(b));
  dxs[0] = g.reshape(g.sumToShape(da, typeOf(a)), aType);

  ArrayRef<int64_t> a2 = typeOf(a).getShape();
  Value db;
  if (typeOf(b).getRank() == 2 && typeOf(a).getRank() > 2) {
    int64_t rows = typeOf(a).getNumElements() / a2.back();
    Value aRows = g.reshape(a, {rows, a2.back()});
    Value dyRows = g.reshape(dy, {rows, yShape.back()});
    db = g.matmul(g.transposeLast2(aRows), dyRows);
  } else {
    db = g.sumToShape(g.matmul(g.transposeLast2(a), dy), typeOf(b));
  }
  dxs[1] = g.reshape(db, bType);
  return success();
}

/// Gemm: y = alpha op(a) op(b) + beta c, every gradient a Gemm with the
/// transposes folded into its flags.
LogicalResult gemmRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                       Grads &dxs) {
  auto gemm = cast<GemmOp>(op);
  Value a = gemm.getA(), b = gemm.getB(), dy = dys[0];
  bool ta = gemm.getTransA(), tb = gemm.getTransB();
  FloatAttr alpha = gemm.getAlphaAttr(), one = g.b.getF32FloatAttr(1.0f);
  auto make = [&](Value x, Value y, bool tx, bool ty) -> Value {
    return GemmOp::create(g.b, g.loc, x, y, Value(), alpha, one,
                          g.b.getBoolAttr(tx), g.b.getBoolAttr(ty));
  };
  // op(a) = dy op(b)^T, so a = (dy op(b)^T)^T = op(b) dy^T when transposed.
  dxs[0] = ta ? make(b, dy, tb, true) : make(dy, b, false, !tb);
  dxs[1] = tb ? make(dy, a, true, ta) : make(a, dy, !ta, false);
  if (Value c = gemm.getC()) {
    Value dc = dy;
    if (gemm.getBeta().convertToDouble() != 1.0)
      dc = g.scale(dy, gemm.getBeta().convertToDouble());
    dxs[2] = g.sumToShape(dc, typeOf(c));
  }
  return success();
}

/// The gradient of operand i of "X,Y->Z" is "Z,Y->X": an einsum again, as
/// long as each of X's letters is in Z or another operand.
LogicalResult einsumRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                         Grads &dxs) {
  auto einsum = cast<EinsumOp>(op);
  std::string error;
  FailureOr<EinsumEquation> eq = parseEinsum(einsum.getEquation(), error);
  if (failed(eq))
    return op->emitOpError(error);
  for (unsigned i = 0; i < eq->inputs.size(); ++i) {
    std::string others = eq->output;
    SmallVector<Value> operands = {dys[0]};
    std::string lhs = eq->output;
    for (unsigned j = 0; j < eq->inputs.size(); ++j) {
      if (j == i)
        continue;
      lhs += "," + eq->inputs[j];
      others += eq->inputs[j];
      operands.push_back(op->getOperand(j));
    }
    for (char c : eq->inputs[i])
      if (others.find(c) == std::string::npos ||
          llvm::count(eq->inputs[i], c) > 1)
        return op->emitOpError("einsum '")
               << einsum.getEquation()
               << "' sums a letter of one operand alone or repeats it; "
                  "autodiff has no rule for that";
    std::string equation = lhs + "->" + eq->inputs[i];
    dxs[i] = EinsumOp::create(g.b, g.loc, typeOf(op->getOperand(i)), operands,
                              g.b.getStringAttr(equation));
  }
  return success();
}

LogicalResult convRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                       Grads &dxs) {
  auto conv = cast<ConvOp>(op);
  auto strides = conv.getStridesAttr(), pads = conv.getPadsAttr(),
       dilations = conv.getDilationsAttr();
  auto group = conv.getGroupAttr();
  dxs[0] = ConvGradInputOp::create(g.b, g.loc, typeOf(conv.getInput()), dys[0],
                                   conv.getWeight(), strides, pads, dilations,
                                   group);
  dxs[1] = ConvGradWeightOp::create(g.b, g.loc, typeOf(conv.getWeight()),
                                    dys[0], conv.getInput(), strides, pads,
                                    dilations, group);
  if (conv.getBias()) {
    SmallVector<int64_t> axes = {0};
    for (int64_t d = 2; d < typeOf(dys[0]).getRank(); ++d)
      axes.push_back(d);
    dxs[2] = g.reduceSum(dys[0], axes, /*keepDims=*/false);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Softmax and normalisation
//===----------------------------------------------------------------------===//

LogicalResult softmaxRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                          Grads &dxs) {
  auto axis = op->getAttrOfType<IntegerAttr>("axis");
  if (isa<SoftmaxOp>(op))
    dxs[0] = SoftmaxGradOp::create(g.b, g.loc, op->getResult(0), dys[0], axis);
  else
    dxs[0] =
        LogSoftmaxGradOp::create(g.b, g.loc, op->getResult(0), dys[0], axis);
  return success();
}

/// Fused attention's gradient recomputes the scores from q and kt rather
/// than storing them (what the fusion is for).
LogicalResult attentionRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                            Grads &dxs) {
  auto attention = cast<AttentionOp>(op);
  auto grad = AttentionGradOp::create(
      g.b, g.loc, attention.getQ(), attention.getKt(), attention.getV(),
      attention.getResult(), dys[0], attention.getPositions(),
      attention.getScaleAttr(), attention.getCausalAttr());
  dxs[0] = grad.getQGrad();
  dxs[1] = grad.getKtGrad();
  dxs[2] = grad.getVGrad();
  return success();
}

LogicalResult layerNormRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                            Grads &dxs) {
  auto norm = cast<LayerNormOp>(op);
  SmallVector<Type> types = {typeOf(norm.getInput()), typeOf(norm.getScale())};
  if (norm.getBias())
    types.push_back(typeOf(norm.getBias()));
  auto grad = LayerNormGradOp::create(
      g.b, g.loc, types, norm.getInput(), norm.getScale(), dys[0],
      norm.getAxisAttr(), norm.getEpsilonAttr());
  for (unsigned i = 0; i < types.size(); ++i)
    dxs[i] = grad.getResult(i);
  return success();
}

LogicalResult rmsNormRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                          Grads &dxs) {
  auto norm = cast<RmsNormOp>(op);
  auto grad = RmsNormGradOp::create(g.b, g.loc, norm.getInput(),
                                    norm.getScale(), dys[0],
                                    norm.getAxisAttr(), norm.getEpsilonAttr());
  dxs[0] = grad.getInputGrad();
  dxs[1] = grad.getScaleGrad();
  return success();
}

/// Inference-form batch norm (the model's running statistics): mean and
/// variance are constants of the step.
LogicalResult batchNormRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                            Grads &dxs) {
  auto norm = cast<BatchNormOp>(op);
  auto grad = BatchNormGradOp::create(
      g.b, g.loc, norm.getInput(), norm.getScale(), norm.getMean(),
      norm.getVariance(), dys[0], norm.getEpsilonAttr());
  dxs[0] = grad.getInputGrad();
  dxs[1] = grad.getScaleGrad();
  dxs[2] = grad.getBiasGrad();
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions, scans, selection
//===----------------------------------------------------------------------===//

/// The reduced result's shape with the reduced axes kept as 1.
SmallVector<int64_t> keptShape(Operation *op) {
  SmallVector<int64_t> shape(typeOf(op->getOperand(0)).getShape());
  for (int64_t axis : cast<DenseI64ArrayAttr>(op->getAttr("axes")).asArrayRef())
    shape[axis] = 1;
  return shape;
}

LogicalResult reduceSumMeanRule(Operation *op, GradBuilder &g,
                                ArrayRef<Value> dys, Grads &dxs) {
  Value x = op->getOperand(0);
  if (!isFloat(x))
    return success();
  Value dx = g.expand(g.reshape(dys[0], keptShape(op)), typeOf(x));
  if (isa<ReduceMeanOp>(op))
    dx = g.scale(dx, double(typeOf(op->getResult(0)).getNumElements()) /
                         double(typeOf(x).getNumElements()));
  dxs[0] = dx;
  return success();
}

/// Every element equal to the maximum gets the gradient (ties share it
/// whole, as ONNX's reference leaves the choice open).
LogicalResult reduceMaxRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                            Grads &dxs) {
  Value x = op->getOperand(0);
  if (!isFloat(x))
    return success();
  SmallVector<int64_t> kept = keptShape(op);
  Value y = g.reshape(op->getResult(0), kept);
  Value isMax = EqualOp::create(g.b, g.loc, x, y);
  Value zero = g.scalar(0.0, typeOf(x).getElementType());
  dxs[0] = WhereOp::create(g.b, g.loc, isMax, g.reshape(dys[0], kept), zero);
  return success();
}

LogicalResult globalAvgPoolRule(Operation *op, GradBuilder &g,
                                ArrayRef<Value> dys, Grads &dxs) {
  RankedTensorType x = typeOf(op->getOperand(0));
  double count = double(x.getNumElements()) /
                 double(typeOf(op->getResult(0)).getNumElements());
  dxs[0] = g.scale(g.expand(dys[0], x), 1.0 / count);
  return success();
}

LogicalResult cumsumRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                         Grads &dxs) {
  auto scan = cast<CumSumOp>(op);
  if (!isFloat(scan.getInput()))
    return success();
  dxs[0] = CumSumOp::create(g.b, g.loc, dys[0], scan.getAxisAttr(),
                            scan.getExclusiveAttr(),
                            g.b.getBoolAttr(!scan.getReverse()));
  return success();
}

/// Values of top_k: each selected element gets its value's gradient,
/// scattered back through a one-hot of the indices.
LogicalResult topKRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                       Grads &dxs) {
  auto topK = cast<TopKOp>(op);
  if (!dys[0] || !isFloat(topK.getInput()))
    return success();
  RankedTensorType x = typeOf(topK.getInput());
  int64_t axis = topK.getAxis(), depth = x.getDimSize(axis);
  SmallVector<int64_t> hotShape(typeOf(topK.getIndices()).getShape());
  hotShape.insert(hotShape.begin() + axis + 1, depth);
  auto hotType = RankedTensorType::get(hotShape, x.getElementType());
  Value hot = OneHotOp::create(
      g.b, g.loc, hotType, topK.getIndices(), g.b.getI64IntegerAttr(depth),
      g.b.getI64IntegerAttr(axis + 1), g.b.getF64FloatAttr(1.0),
      g.b.getF64FloatAttr(0.0));
  SmallVector<int64_t> dyShape(typeOf(dys[0]).getShape());
  dyShape.insert(dyShape.begin() + axis + 1, 1);
  Value spread = g.mul(hot, g.reshape(dys[0], dyShape));
  dxs[0] = g.reduceSum(spread, {axis}, /*keepDims=*/false);
  return success();
}

LogicalResult triluRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                        Grads &dxs) {
  auto trilu = cast<TriluOp>(op);
  dxs[0] = TriluOp::create(g.b, g.loc, dys[0], trilu.getKAttr(),
                           trilu.getUpperAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// reshape, flatten, squeeze, unsqueeze: the same elements.
LogicalResult reshapeRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                          Grads &dxs) {
  if (isFloat(op->getOperand(0)))
    dxs[0] = g.reshape(dys[0], typeOf(op->getOperand(0)));
  return success();
}

LogicalResult transposeRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                            Grads &dxs) {
  ArrayRef<int64_t> perm = cast<TransposeOp>(op).getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  if (isFloat(op->getOperand(0)))
    dxs[0] = g.transpose(dys[0], inverse);
  return success();
}

LogicalResult expandRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                         Grads &dxs) {
  if (isFloat(op->getOperand(0)))
    dxs[0] = g.sumToShape(dys[0], typeOf(op->getOperand(0)));
  return success();
}

LogicalResult gatherRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                         Grads &dxs) {
  auto gather = cast<GatherOp>(op);
  if (!isFloat(gather.getData()))
    return success();
  dxs[0] = GatherGradOp::create(g.b, g.loc, typeOf(gather.getData()), dys[0],
                                gather.getIndices(), gather.getAxisAttr());
  return success();
}

/// ddata = dy scatter-added into zeros: repeated indices accumulate.
LogicalResult gatherElementsRule(Operation *op, GradBuilder &g,
                                 ArrayRef<Value> dys, Grads &dxs) {
  auto gather = cast<GatherElementsOp>(op);
  if (!isFloat(gather.getData()))
    return success();
  dxs[0] = ScatterElementsOp::create(
      g.b, g.loc, g.zerosLike(typeOf(gather.getData())), gather.getIndices(),
      dys[0], gather.getAxisAttr(), g.b.getStringAttr("add"));
  return success();
}

/// dupdates = dy gathered where the updates landed; ddata = dy, except the
/// targets a plain write overwrote (zeros there). A repeated index under
/// "none" gives every update of it the gradient, as torch.scatter's
/// backward does, though only one of them survived. Products and extremes
/// would need the forward's operands: they are refused.
LogicalResult scatterElementsRule(Operation *op, GradBuilder &g,
                                  ArrayRef<Value> dys, Grads &dxs) {
  auto scatter = cast<ScatterElementsOp>(op);
  if (!isFloat(scatter.getData()))
    return success();
  StringRef reduction = scatter.getReduction();
  if (reduction != "none" && reduction != "add")
    return op->emitOpError() << "with reduction '" << reduction
                             << "' has no gradient rule; autodiff cannot "
                                "train through it";
  Value indices = scatter.getIndices();
  dxs[2] = GatherElementsOp::create(g.b, g.loc, dys[0], indices,
                                    scatter.getAxisAttr());
  dxs[0] = reduction == "add"
               ? dys[0]
               : ScatterElementsOp::create(
                     g.b, g.loc, dys[0], indices,
                     g.zerosLike(typeOf(scatter.getUpdates())),
                     scatter.getAxisAttr(), g.b.getStringAttr("none"));
  return success();
}

/// Each input's gradient is its piece of dy: one split.
LogicalResult concatRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                         Grads &dxs) {
  auto concat = cast<ConcatOp>(op);
  if (!isFloat(concat.getResult()))
    return success();
  int64_t axis = concat.getAxis();
  SmallVector<int64_t> sizes;
  for (Value input : concat.getInputs())
    sizes.push_back(typeOf(input).getDimSize(axis));
  auto split = SplitOp::create(g.b, g.loc, dys[0], concat.getAxisAttr(),
                               g.b.getDenseI64ArrayAttr(sizes));
  for (unsigned i = 0; i < sizes.size(); ++i)
    dxs[i] = split.getResult(i);
  return success();
}

/// dy of every piece, zeros for pieces nothing read, joined again.
LogicalResult splitRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                        Grads &dxs) {
  auto split = cast<SplitOp>(op);
  if (!isFloat(split.getInput()))
    return success();
  SmallVector<Value> pieces;
  for (auto [dy, result] : llvm::zip(dys, split.getResults()))
    pieces.push_back(dy ? dy : g.zerosLike(typeOf(result)));
  dxs[0] = ConcatOp::create(g.b, g.loc, pieces, split.getAxisAttr());
  return success();
}

LogicalResult sliceRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                        Grads &dxs) {
  auto slice = cast<SliceOp>(op);
  if (!isFloat(slice.getInput()))
    return success();
  dxs[0] = SliceGradOp::create(g.b, g.loc, typeOf(slice.getInput()), dys[0],
                               slice.getStartsAttr(), slice.getStridesAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// Pooling and loss
//===----------------------------------------------------------------------===//

LogicalResult maxPoolRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                          Grads &dxs) {
  auto pool = cast<MaxPoolOp>(op);
  dxs[0] = MaxPoolGradOp::create(g.b, g.loc, pool.getInput(), dys[0],
                                 pool.getKernelShapeAttr(),
                                 pool.getStridesAttr(), pool.getPadsAttr());
  return success();
}

LogicalResult avgPoolRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                          Grads &dxs) {
  auto pool = cast<AvgPoolOp>(op);
  dxs[0] = AvgPoolGradOp::create(g.b, g.loc, typeOf(pool.getInput()), dys[0],
                                 pool.getKernelShapeAttr(),
                                 pool.getStridesAttr(), pool.getPadsAttr());
  return success();
}

LogicalResult crossEntropyRule(Operation *op, GradBuilder &g,
                               ArrayRef<Value> dys, Grads &dxs) {
  auto loss = cast<CrossEntropyOp>(op);
  dxs[0] = CrossEntropyGradOp::create(g.b, g.loc, loss.getLogits(),
                                      loss.getLabels(), dys[0]);
  return success();
}

//===----------------------------------------------------------------------===//
// Resharding
//===----------------------------------------------------------------------===//

/// The gradient of each edge that a reshard marks goes back to the sharding
/// its producer needs (the plan's backward collective on that edge).
LogicalResult reshardRule(Operation *op, GradBuilder &g, ArrayRef<Value> dys,
                          Grads &dxs) {
  Value x = op->getOperand(0);
  if (isFloat(x))
    dxs[0] = ReshardGradOp::create(g.b, g.loc, dys[0], x);
  return success();
}

/// Alphabetical by op name.
const llvm::StringMap<Rule> &ruleTable() {
  static const llvm::StringMap<Rule> table = {
      {AbsOp::getOperationName(), unaryRule},
      {AddOp::getOperationName(), addRule},
      {AndOp::getOperationName(), noGradientRule},
      {AttentionOp::getOperationName(), attentionRule},
      {AvgPoolOp::getOperationName(), avgPoolRule},
      {BatchNormOp::getOperationName(), batchNormRule},
      {CastOp::getOperationName(), castRule},
      {ConcatOp::getOperationName(), concatRule},
      {ConstantOp::getOperationName(), noGradientRule},
      {ConvOp::getOperationName(), convRule},
      {CosOp::getOperationName(), unaryRule},
      {CrossEntropyOp::getOperationName(), crossEntropyRule},
      {CumSumOp::getOperationName(), cumsumRule},
      {DivOp::getOperationName(), divRule},
      {EinsumOp::getOperationName(), einsumRule},
      {EqualOp::getOperationName(), noGradientRule},
      {ErfOp::getOperationName(), unaryRule},
      {ExpOp::getOperationName(), unaryRule},
      {ExpandOp::getOperationName(), expandRule},
      {FlattenOp::getOperationName(), reshapeRule},
      {GatherOp::getOperationName(), gatherRule},
      {GatherElementsOp::getOperationName(), gatherElementsRule},
      {GeluOp::getOperationName(), unaryRule},
      {GemmOp::getOperationName(), gemmRule},
      {GlobalAvgPoolOp::getOperationName(), globalAvgPoolRule},
      {GreaterOp::getOperationName(), noGradientRule},
      {IotaOp::getOperationName(), noGradientRule},
      {LayerNormOp::getOperationName(), layerNormRule},
      {LessOp::getOperationName(), noGradientRule},
      {LogOp::getOperationName(), unaryRule},
      {LogSoftmaxOp::getOperationName(), softmaxRule},
      {MatMulOp::getOperationName(), matmulRule},
      {MaxOp::getOperationName(), minMaxRule},
      {MaxPoolOp::getOperationName(), maxPoolRule},
      {MinOp::getOperationName(), minMaxRule},
      {MulOp::getOperationName(), mulRule},
      {NegOp::getOperationName(), negRule},
      {NotOp::getOperationName(), noGradientRule},
      {OneHotOp::getOperationName(), noGradientRule},
      {OrOp::getOperationName(), noGradientRule},
      {PowOp::getOperationName(), powRule},
      {ReciprocalOp::getOperationName(), unaryRule},
      {ReduceMaxOp::getOperationName(), reduceMaxRule},
      {ReduceMeanOp::getOperationName(), reduceSumMeanRule},
      {ReduceSumOp::getOperationName(), reduceSumMeanRule},
      {ReluOp::getOperationName(), unaryRule},
      {ReshapeOp::getOperationName(), reshapeRule},
      {ReshardOp::getOperationName(), reshardRule},
      {RmsNormOp::getOperationName(), rmsNormRule},
      {ScatterElementsOp::getOperationName(), scatterElementsRule},
      {SigmoidOp::getOperationName(), unaryRule},
      {SinOp::getOperationName(), unaryRule},
      {SliceOp::getOperationName(), sliceRule},
      {SoftmaxOp::getOperationName(), softmaxRule},
      {SplitOp::getOperationName(), splitRule},
      {SqrtOp::getOperationName(), unaryRule},
      {SqueezeOp::getOperationName(), reshapeRule},
      {SubOp::getOperationName(), subRule},
      {TanhOp::getOperationName(), unaryRule},
      {TopKOp::getOperationName(), topKRule},
      {TransposeOp::getOperationName(), transposeRule},
      {TriluOp::getOperationName(), triluRule},
      {UnsqueezeOp::getOperationName(), reshapeRule},
      {WhereOp::getOperationName(), whereRule},
  };
  return table;
}

} // namespace

bool mlir::bm::hasGradientRule(StringRef opName) {
  return ruleTable().contains(opName);
}

LogicalResult mlir::bm::buildGradientsFromRegistry(Operation *op,
                                                   OpBuilder &builder,
                                                   ArrayRef<Value> resultGrads,
                                                   Grads &operandGrads) {
  operandGrads.assign(op->getNumOperands(), Value());
  auto it = ruleTable().find(op->getName().getStringRef());
  if (it == ruleTable().end())
    return op->emitOpError("has no gradient rule; autodiff cannot train "
                           "through it");
  GradBuilder g{builder, op->getLoc()};
  return it->second(op, g, resultGrads, operandGrads);
}
