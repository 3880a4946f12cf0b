//===- OpImporters.cpp - one lowering per ONNX op type --------------------===//
//
// Each importer turns one ONNX node into bm ops (or a host constant). The
// table at the end is alphabetical by ONNX op type; supportedOnnxOps() lists
// it. Negative axes are normalised here: bm ops only see axes in range.
//
//===----------------------------------------------------------------------===//

#include "import/OpImporters.h"
#include "import/NodeContext.h"
#include "import/OnnxImporter.h"

#include "bm/BmOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringExtras.h"

using namespace bm::import;
using namespace mlir;
using namespace mlir::bm;
using llvm::SmallVector;
using llvm::Twine;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// Elementwise op `OpTy` with the input's type.
template <typename OpTy> LogicalResult unary(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  return setResult(nc, unaryOf<OpTy>(nc, *x));
}

/// Broadcasting binary op `OpTy` on inputs 0 and 1.
template <typename OpTy> LogicalResult binary(NodeContext &nc) {
  FailureOr<Value> a = nc.value(0), b = nc.value(1);
  if (failed(a) || failed(b))
    return failure();
  return setResult(nc, binaryOf<OpTy>(nc, *a, *b));
}

/// not (a `OpTy` b), for the comparisons bm has no op for.
template <typename OpTy> LogicalResult negatedBinary(NodeContext &nc) {
  FailureOr<Value> a = nc.value(0), b = nc.value(1);
  if (failed(a) || failed(b))
    return failure();
  FailureOr<Value> r = binaryOf<OpTy>(nc, *a, *b);
  if (failed(r))
    return failure();
  return setResult(nc, unaryOf<NotOp>(nc, *r));
}

/// `OpTy` applied left to right over all inputs (variadic Max, Min, Sum).
template <typename OpTy> FailureOr<Value> chain(NodeContext &nc) {
  FailureOr<Value> acc = nc.value(0);
  for (unsigned i = 1; i < nc.numInputs() && succeeded(acc); ++i) {
    FailureOr<Value> next = nc.value(i);
    if (failed(next))
      return failure();
    acc = binaryOf<OpTy>(nc, *acc, *next);
  }
  return acc;
}

/// Output 0 is input 0 unchanged (host constants stay on the host).
LogicalResult passThrough(NodeContext &nc) {
  if (const HostTensor *t = nc.host(0)) {
    nc.setOutput(0, *t);
    return success();
  }
  return setResult(nc, nc.value(0));
}

/// Reduction axes from the `axes` attribute (old opsets) or input 1; all
/// axes when none are given unless noop_with_empty_axes.
FailureOr<std::optional<SmallVector<int64_t>>> reduceAxes(NodeContext &nc,
                                                          int64_t rank) {
  auto given = nc.axes(1);
  if (failed(given))
    return failure();
  std::vector<int64_t> raw = given->value_or(std::vector<int64_t>{});
  if (raw.empty() && nc.getInt("noop_with_empty_axes", 0))
    return std::optional<SmallVector<int64_t>>();
  if (raw.empty())
    for (int64_t d = 0; d < rank; ++d)
      raw.push_back(d);
  auto axes = nc.normaliseAxes(raw, rank, "reduction axis");
  if (failed(axes))
    return failure();
  llvm::sort(*axes);
  return std::optional<SmallVector<int64_t>>(*axes);
}

/// `OpTy` (a bm.reduce_* op) of `x` with the node's axes and keepdims;
/// `pre` and `post` wrap it for the composite reductions
/// (L2 = sqrt(sum(x * x))).
template <typename OpTy>
LogicalResult reduce(NodeContext &nc,
                     function_ref<FailureOr<Value>(Value)> pre = nullptr,
                     function_ref<FailureOr<Value>(Value)> post = nullptr) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  auto axes = reduceAxes(nc, typeOf(*x).getRank());
  if (failed(axes))
    return failure();
  if (!*axes)
    return setResult(nc, x);
  if (pre && failed(x = pre(*x)))
    return failure();
  FailureOr<Value> r = reduceOf<OpTy>(nc, *x, **axes, nc.getInt("keepdims", 1));
  if (succeeded(r) && post)
    r = post(*r);
  return setResult(nc, r);
}

/// Ops bm has no kernel for, which exporters use in shape computations
/// (Swin's window index arithmetic: Mod; interpolation sizes: Floor, Ceil,
/// Round): ShapeFolding.cpp evaluates them when all inputs are constants;
/// on a run-time input they are an error naming it.
LogicalResult importFoldedOnly(NodeContext &nc) {
  for (unsigned i = 0; i < nc.numInputs(); ++i)
    if (nc.hasInput(i) && !nc.host(i))
      return nc.error("inputs must be constants (bm has no kernel for it; "
                      "it folds in shape computations), but '" +
                      nc.proto().input(i) + "' is computed at run time (opset " +
                      Twine(nc.getOpset()) + ")");
  return nc.error("cannot be folded (a constant too large or invalid)");
}

//===----------------------------------------------------------------------===//
// Importers, alphabetical
//===----------------------------------------------------------------------===//

LogicalResult importAbs(NodeContext &nc) { return unary<AbsOp>(nc); }
LogicalResult importAdd(NodeContext &nc) { return binary<AddOp>(nc); }
LogicalResult importAnd(NodeContext &nc) { return binary<AndOp>(nc); }

LogicalResult castTo(NodeContext &nc, int32_t to) {
  Type element = elementTypeOf(nc.context(), to);
  if (!element)
    return nc.error("cast to " + dtypeName(to) + " is not supported");
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  RankedTensorType type = typeOf(*x);
  if (type.getElementType() == element)
    return setResult(nc, x);
  return setResult(
      nc, nc.build<CastOp>({*x}, {},
                           RankedTensorType::get(type.getShape(), element)));
}

LogicalResult importCast(NodeContext &nc) {
  return castTo(nc, nc.getInt("to", 0));
}

LogicalResult importCastLike(NodeContext &nc) {
  // importNode has checked that both inputs are there.
  return castTo(nc, dtypeOf(nc.type(1).getElementType()));
}

/// Applies one bound of Clip to `result` with `OpTy` (max for the lower
/// bound, min for the upper): input `input`, else the attribute `attr` of
/// older opsets, else nothing.
template <typename OpTy>
LogicalResult clipBound(NodeContext &nc, Value &result, unsigned input,
                        StringRef attr) {
  FailureOr<Value> limit;
  if (nc.hasInput(input))
    limit = nc.value(input);
  else if (nc.attr(attr))
    limit = scalarLike(nc, result, nc.getFloat(attr, 0));
  else
    return success();
  if (failed(limit))
    return failure();
  FailureOr<Value> r = binaryOf<OpTy>(nc, result, *limit);
  if (failed(r))
    return failure();
  result = *r;
  return success();
}

LogicalResult importClip(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  Value result = *x;
  if (failed(clipBound<MaxOp>(nc, result, 1, "min")) ||
      failed(clipBound<MinOp>(nc, result, 2, "max")))
    return failure();
  nc.setOutput(0, result);
  return success();
}

LogicalResult importConcat(NodeContext &nc) {
  SmallVector<Value> inputs;
  for (unsigned i = 0; i < nc.numInputs(); ++i) {
    FailureOr<Value> v = nc.value(i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
  }
  FailureOr<int64_t> axis =
      nc.axis(nc.getInt("axis", 0), typeOf(inputs[0]).getRank());
  if (failed(axis))
    return failure();
  return setResult(
      nc, nc.build<ConcatOp>(inputs, {nc.named("axis", i64(nc, *axis))}));
}

LogicalResult importConstant(NodeContext &nc) {
  const onnx::AttributeProto *a =
      nc.proto().attribute_size() == 1 ? &nc.proto().attribute(0) : nullptr;
  if (!a)
    return nc.error("a Constant needs exactly one value attribute");
  HostTensor t;
  StringRef name = a->name();
  if (name == "value") {
    std::string error;
    std::optional<HostTensor> decoded = decodeTensor(a->t(), error);
    if (!decoded)
      return nc.error("value " + error);
    t = std::move(*decoded);
  } else if (name == "value_float" || name == "value_floats") {
    std::vector<double> values(a->floats().begin(), a->floats().end());
    if (name == "value_float")
      values = {a->f()};
    t = HostTensor::zeros(onnx::TensorProto::FLOAT,
                          name == "value_float"
                              ? SmallVector<int64_t>{}
                              : SmallVector<int64_t>{(int64_t)values.size()});
    for (auto [i, v] : llvm::enumerate(values))
      t.set(i, v);
  } else if (name == "value_int") {
    t = HostTensor::fromInts({a->i()}, {});
  } else if (name == "value_ints") {
    std::vector<int64_t> values(a->ints().begin(), a->ints().end());
    t = HostTensor::fromInts(values, {(int64_t)values.size()});
  } else {
    return nc.error("constant attribute '" + name + "' is not supported");
  }
  nc.setOutput(0, std::move(t));
  return success();
}

LogicalResult importConstantOfShape(NodeContext &nc) {
  auto shape = nc.constInts(0, "shape");
  if (failed(shape))
    return failure();
  if (!checkedNumElements(*shape))
    return nc.error("shape has a negative dim or overflows int64");
  HostTensor value = HostTensor::zeros(onnx::TensorProto::FLOAT, {});
  if (const onnx::AttributeProto *a = nc.attr("value")) {
    std::string error;
    std::optional<HostTensor> decoded = decodeTensor(a->t(), error);
    if (!decoded)
      return nc.error("value " + error);
    if (decoded->numElements() != 1)
      return nc.error("value must have one element");
    value = std::move(*decoded);
  }
  value.shape.assign(shape->begin(), shape->end());
  value.splat = true;
  nc.setOutput(0, std::move(value));
  return success();
}

LogicalResult importCos(NodeContext &nc) { return unary<CosOp>(nc); }

LogicalResult importCumSum(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  auto axisInput = nc.constInts(1, "axis");
  if (failed(x) || failed(axisInput))
    return failure();
  if (axisInput->size() != 1)
    return nc.error("the axis input must be a scalar");
  FailureOr<int64_t> axis = nc.axis((*axisInput)[0], typeOf(*x).getRank());
  if (failed(axis))
    return failure();
  return setResult(
      nc, nc.build<CumSumOp>(
              {*x},
              {nc.named("axis", i64(nc, *axis)),
               nc.named("exclusive", boolean(nc, nc.getInt("exclusive", 0))),
               nc.named("reverse", boolean(nc, nc.getInt("reverse", 0)))},
              x->getType()));
}

LogicalResult importDiv(NodeContext &nc) { return binary<DivOp>(nc); }

LogicalResult importDropout(NodeContext &nc) {
  // Inference form: the identity; the mask, if asked for, is all true.
  if (failed(passThrough(nc)))
    return failure();
  if (nc.hasOutput(1)) {
    HostTensor mask = HostTensor::zeros(onnx::TensorProto::BOOL,
                                        nc.type(0).getShape(), /*splat=*/true);
    mask.setInt(0, 1);
    nc.setOutput(1, std::move(mask));
  }
  return success();
}

/// ONNX einsum equations may be implicit ("ij,jk") and use an ellipsis; bm
/// wants explicit letters only. Ellipsis dims get letters no term uses,
/// aligned from the right as numpy broadcasting aligns them.
FailureOr<std::string> explicitEinsum(NodeContext &nc, StringRef equation,
                                      ArrayRef<int64_t> ranks) {
  std::string text;
  for (char c : equation)
    if (c != ' ')
      text.push_back(c);
  size_t arrow = text.find("->");
  std::string lhs = text.substr(0, arrow);
  std::optional<std::string> rhs;
  if (arrow != std::string::npos)
    rhs = text.substr(arrow + 2);
  SmallVector<StringRef> terms;
  StringRef(lhs).split(terms, ',');
  if (terms.size() != ranks.size()) {
    return nc.error("einsum equation '" + equation + "' has " +
                    Twine(terms.size()) + " terms for " + Twine(ranks.size()) +
                    " inputs");
  }
  int64_t ellipsisRank = 0;
  SmallVector<int64_t> ellipsisDims;
  for (auto [term, rank] : llvm::zip(terms, ranks)) {
    size_t dots = term.find("...");
    int64_t dims =
        dots == StringRef::npos ? 0 : rank - (int64_t(term.size()) - 3);
    if (dims < 0) {
      return nc.error("einsum term '" + term + "' has more letters than rank " +
                      Twine(rank));
    }
    ellipsisDims.push_back(dims);
    ellipsisRank = std::max(ellipsisRank, dims);
  }
  std::string fresh;
  for (char c = 'A'; c <= 'Z' && (int64_t)fresh.size() < ellipsisRank; ++c)
    if (text.find(c) == std::string::npos)
      fresh.push_back(c);
  if ((int64_t)fresh.size() < ellipsisRank) {
    return nc.error("einsum ellipsis needs more free letters");
  }
  std::string out;
  SmallVector<std::string> expanded;
  for (auto [term, dims] : llvm::zip(terms, ellipsisDims)) {
    std::string t = term.str();
    size_t dots = t.find("...");
    if (dots != std::string::npos)
      t.replace(dots, 3, fresh.substr(ellipsisRank - dims));
    expanded.push_back(t);
  }
  if (rhs) {
    out = *rhs;
    size_t dots = out.find("...");
    if (dots != std::string::npos)
      out.replace(dots, 3, fresh);
  } else {
    // Implicit output: ellipsis dims, then the letters used once in ASCII
    // order (numpy sorts them, so capitals come first).
    out = fresh;
    std::string once;
    for (char c = 'A'; c <= 'z'; ++c) {
      if (!llvm::isAlpha(c) || fresh.find(c) != std::string::npos)
        continue;
      int count = 0;
      for (const std::string &t : expanded)
        count += llvm::count(t, c);
      if (count == 1)
        once.push_back(c);
    }
    out += once;
  }
  return llvm::join(expanded, ",") + "->" + out;
}

LogicalResult importEinsum(NodeContext &nc) {
  SmallVector<Value> inputs;
  SmallVector<int64_t> ranks;
  for (unsigned i = 0; i < nc.numInputs(); ++i) {
    FailureOr<Value> v = nc.value(i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
    ranks.push_back(typeOf(*v).getRank());
  }
  FailureOr<std::string> equation =
      explicitEinsum(nc, nc.getString("equation", ""), ranks);
  if (failed(equation))
    return failure();
  return setResult(
      nc, nc.build<EinsumOp>(
              inputs,
              {nc.named("equation", nc.builder().getStringAttr(*equation))}));
}

LogicalResult importEqual(NodeContext &nc) { return binary<EqualOp>(nc); }
LogicalResult importErf(NodeContext &nc) { return unary<ErfOp>(nc); }
LogicalResult importExp(NodeContext &nc) { return unary<ExpOp>(nc); }

LogicalResult importExpand(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  auto target = nc.constInts(1, "shape");
  if (failed(x) || failed(target))
    return failure();
  RankedTensorType type = typeOf(*x);
  auto shape = expandTarget(nc, type.getShape(), *target);
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) == type.getShape())
    return setResult(nc, x);
  return setResult(
      nc, nc.build<ExpandOp>(
              {*x}, {}, RankedTensorType::get(*shape, type.getElementType())));
}

LogicalResult importFlatten(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  int64_t rank = typeOf(*x).getRank();
  int64_t axis = nc.getInt("axis", 1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank)
    return nc.error("flatten axis " + Twine(nc.getInt("axis", 1)) +
                    " is out of range for rank " + Twine(rank));
  return setResult(
      nc, nc.build<FlattenOp>({*x}, {nc.named("axis", i64(nc, axis))}));
}

LogicalResult importGelu(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  bool tanh = nc.getString("approximate", "none") == "tanh";
  return setResult(
      nc, nc.build<GeluOp>({*x},
                           {nc.named("tanh_approximation", boolean(nc, tanh))},
                           x->getType()));
}

LogicalResult importGemm(NodeContext &nc) {
  SmallVector<Value> operands;
  for (unsigned i = 0; i < 3; ++i) {
    if (!nc.hasInput(i))
      continue;
    FailureOr<Value> v = nc.value(i);
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  return setResult(
      nc, nc.build<GemmOp>(
              operands,
              {nc.named("alpha", f32(nc, nc.getFloat("alpha", 1))),
               nc.named("beta", f32(nc, nc.getFloat("beta", 1))),
               nc.named("trans_a", boolean(nc, nc.getInt("transA", 0))),
               nc.named("trans_b", boolean(nc, nc.getInt("transB", 0)))}));
}

LogicalResult importGreater(NodeContext &nc) { return binary<GreaterOp>(nc); }

/// a >= b is not (a < b); NaNs aside, which training graphs do not compare.
LogicalResult importGreaterOrEqual(NodeContext &nc) {
  return negatedBinary<LessOp>(nc);
}

LogicalResult importIdentity(NodeContext &nc) { return passThrough(nc); }

LogicalResult importLess(NodeContext &nc) { return binary<LessOp>(nc); }

LogicalResult importLessOrEqual(NodeContext &nc) {
  return negatedBinary<GreaterOp>(nc);
}

LogicalResult importLog(NodeContext &nc) { return unary<LogOp>(nc); }
LogicalResult importMatMul(NodeContext &nc) { return binary<MatMulOp>(nc); }
LogicalResult importMax(NodeContext &nc) {
  return setResult(nc, chain<MaxOp>(nc));
}

LogicalResult importMean(NodeContext &nc) {
  FailureOr<Value> sum = chain<AddOp>(nc);
  if (failed(sum))
    return failure();
  FailureOr<Value> n = scalarLike(nc, *sum, nc.numInputs());
  if (failed(n))
    return failure();
  return setResult(nc, binaryOf<DivOp>(nc, *sum, *n));
}

LogicalResult importMin(NodeContext &nc) {
  return setResult(nc, chain<MinOp>(nc));
}
LogicalResult importMul(NodeContext &nc) { return binary<MulOp>(nc); }
LogicalResult importNeg(NodeContext &nc) { return unary<NegOp>(nc); }
LogicalResult importNot(NodeContext &nc) { return unary<NotOp>(nc); }

LogicalResult importOneHot(NodeContext &nc) {
  FailureOr<Value> indices = nc.value(0);
  auto depth = nc.constInts(1, "depth");
  if (failed(indices) || failed(depth))
    return failure();
  const HostTensor *values = nc.host(2);
  if (!values || values->numElements() != 2)
    return nc.error("the values input must be a constant [off, on] pair");
  if (depth->size() != 1)
    return nc.error("the depth input must be a scalar");
  RankedTensorType type = typeOf(*indices);
  if (!type.getElementType().isSignlessInteger()) {
    indices = nc.build<CastOp>(
        {*indices}, {},
        RankedTensorType::get(type.getShape(), nc.builder().getI64Type()));
    if (failed(indices))
      return failure();
  }
  FailureOr<int64_t> axis = nc.axis(nc.getInt("axis", -1), type.getRank() + 1);
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(type.getShape());
  shape.insert(shape.begin() + *axis, (*depth)[0]);
  Type element = elementTypeOf(nc.context(), values->dtype);
  return setResult(
      nc, nc.build<OneHotOp>(
              {*indices},
              {nc.named("depth", i64(nc, (*depth)[0])),
               nc.named("axis", i64(nc, *axis)),
               nc.named("on_value",
                        nc.builder().getF64FloatAttr(values->getFloat(1))),
               nc.named("off_value",
                        nc.builder().getF64FloatAttr(values->getFloat(0)))},
              RankedTensorType::get(shape, element)));
}

LogicalResult importOr(NodeContext &nc) { return binary<OrOp>(nc); }

LogicalResult importPow(NodeContext &nc) {
  FailureOr<Value> a = nc.value(0), b = nc.value(1);
  if (failed(a) || failed(b))
    return failure();
  // ONNX lets the exponent have its own type; bm.pow wants one.
  Type element = typeOf(*a).getElementType();
  if (typeOf(*b).getElementType() != element) {
    b = nc.build<CastOp>({*b}, {},
                         RankedTensorType::get(typeOf(*b).getShape(), element));
    if (failed(b))
      return failure();
  }
  return setResult(nc, binaryOf<PowOp>(nc, *a, *b));
}

LogicalResult importRange(NodeContext &nc) {
  // Small ranges fold on the host (ShapeFolding.cpp); long ones are iota.
  const HostTensor *start = nc.host(0), *limit = nc.host(1),
                   *delta = nc.host(2);
  if (!start || !limit || !delta)
    return nc.error("range bounds must be constants the importer can fold");
  FailureOr<int64_t> n = rangeLength(nc, *start, *limit, *delta);
  if (failed(n))
    return failure();
  Type element = elementTypeOf(nc.context(), start->dtype);
  return setResult(
      nc,
      nc.build<IotaOp>(
          {},
          {nc.named("start", nc.builder().getF64FloatAttr(start->getFloat(0))),
           nc.named("delta", nc.builder().getF64FloatAttr(delta->getFloat(0)))},
          RankedTensorType::get({*n}, element)));
}

LogicalResult importReciprocal(NodeContext &nc) {
  return unary<ReciprocalOp>(nc);
}

LogicalResult importReduceL1(NodeContext &nc) {
  return reduce<ReduceSumOp>(nc,
                             [&](Value x) { return unaryOf<AbsOp>(nc, x); });
}

LogicalResult importReduceL2(NodeContext &nc) {
  return reduce<ReduceSumOp>(
      nc, [&](Value x) { return binaryOf<MulOp>(nc, x, x); },
      [&](Value x) { return unaryOf<SqrtOp>(nc, x); });
}

LogicalResult importReduceLogSum(NodeContext &nc) {
  return reduce<ReduceSumOp>(nc, nullptr,
                             [&](Value x) { return unaryOf<LogOp>(nc, x); });
}

LogicalResult importReduceLogSumExp(NodeContext &nc) {
  return reduce<ReduceSumOp>(
      nc, [&](Value x) { return unaryOf<ExpOp>(nc, x); },
      [&](Value x) { return unaryOf<LogOp>(nc, x); });
}

LogicalResult importReduceMax(NodeContext &nc) {
  return reduce<ReduceMaxOp>(nc);
}
LogicalResult importReduceMean(NodeContext &nc) {
  return reduce<ReduceMeanOp>(nc);
}

/// min(x) = -max(-x).
LogicalResult importReduceMin(NodeContext &nc) {
  return reduce<ReduceMaxOp>(
      nc, [&](Value x) { return unaryOf<NegOp>(nc, x); },
      [&](Value x) { return unaryOf<NegOp>(nc, x); });
}

LogicalResult importReduceSum(NodeContext &nc) {
  return reduce<ReduceSumOp>(nc);
}

LogicalResult importReduceSumSquare(NodeContext &nc) {
  return reduce<ReduceSumOp>(
      nc, [&](Value x) { return binaryOf<MulOp>(nc, x, x); });
}

LogicalResult importRelu(NodeContext &nc) { return unary<ReluOp>(nc); }

LogicalResult importReshape(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  auto target = reshapeTargetOf(nc);
  if (failed(target) || failed(x))
    return failure();
  RankedTensorType type = typeOf(*x);
  auto shape =
      reshapeTarget(nc, type.getShape(), *target, nc.getInt("allowzero", 0));
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) == type.getShape())
    return setResult(nc, x);
  return setResult(
      nc, nc.build<ReshapeOp>(
              {*x}, {}, RankedTensorType::get(*shape, type.getElementType())));
}

LogicalResult importShape(NodeContext &nc) {
  ArrayRef<int64_t> shape = nc.type(0).getShape();
  int64_t rank = shape.size();
  auto clamp = [rank](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  int64_t start = clamp(nc.getInt("start", 0));
  int64_t end = clamp(nc.getInt("end", rank));
  SmallVector<int64_t> dims;
  for (int64_t d = start; d < end; ++d)
    dims.push_back(shape[d]);
  nc.setOutput(0, HostTensor::fromInts(dims, {(int64_t)dims.size()}));
  return success();
}

LogicalResult importSigmoid(NodeContext &nc) { return unary<SigmoidOp>(nc); }
LogicalResult importSin(NodeContext &nc) { return unary<SinOp>(nc); }

LogicalResult importSize(NodeContext &nc) {
  nc.setOutput(0, HostTensor::fromInts({nc.type(0).getNumElements()}, {}));
  return success();
}

LogicalResult importSlice(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = typeOf(*x).getShape();
  FailureOr<SliceBounds> b = sliceBounds(nc, shape);
  if (failed(b))
    return failure();
  bool whole = llvm::all_of(llvm::seq<size_t>(0, shape.size()), [&](size_t d) {
    return b->starts[d] == 0 && b->limits[d] == shape[d] && b->strides[d] == 1;
  });
  FailureOr<Value> result = x;
  if (!whole || b->reversed.empty())
    result =
        nc.build<SliceOp>({*x}, {nc.named("starts", array(nc, b->starts)),
                                 nc.named("limits", array(nc, b->limits)),
                                 nc.named("strides", array(nc, b->strides))});
  // Negative steps: a gather of the indices in the order they are taken.
  for (auto &[axis, indices] : b->reversed) {
    if (failed(result))
      return failure();
    FailureOr<Value> taken = nc.constant(
        HostTensor::fromInts(indices, {static_cast<int64_t>(indices.size())}));
    if (failed(taken))
      return failure();
    result = nc.build<GatherOp>({*result, *taken},
                                {nc.named("axis", i64(nc, axis))});
  }
  return setResult(nc, result);
}

LogicalResult importSplit(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  RankedTensorType type = typeOf(*x);
  FailureOr<int64_t> axis = nc.axis(nc.getInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  int64_t dim = type.getDimSize(*axis), parts = nc.numOutputs();
  std::vector<int64_t> sizes;
  if (nc.hasInput(1)) {
    auto in = nc.constInts(1, "split");
    if (failed(in))
      return failure();
    sizes = *in;
  } else if (auto attr = nc.getInts("split")) {
    sizes = *attr;
  } else {
    int64_t n = nc.getInt("num_outputs", parts);
    if (n < 1 || n != parts)
      return nc.error("split into " + Twine(n) + " parts for " + Twine(parts) +
                      " outputs");
    // Opset 18: equal chunks of ceil(dim / n), the last one smaller.
    int64_t chunk = nc.attr("num_outputs") ? dim / n + (dim % n != 0) : dim / n;
    if (!nc.attr("num_outputs") && dim % n != 0)
      return nc.error("dim " + Twine(dim) + " does not split into " + Twine(n) +
                      " equal parts");
    for (int64_t i = 0; i < n; ++i)
      sizes.push_back(std::max<int64_t>(std::min(chunk, dim - i * chunk), 0));
  }
  if ((int64_t)sizes.size() != parts)
    return nc.error("split has " + Twine(sizes.size()) + " sizes for " +
                    Twine(parts) + " outputs");
  FailureOr<Operation *> op = nc.create<SplitOp>(
      {*x},
      {nc.named("axis", i64(nc, *axis)), nc.named("sizes", array(nc, sizes))},
      {}, parts);
  if (failed(op))
    return failure();
  for (int64_t i = 0; i < parts; ++i)
    nc.setOutput(i, (*op)->getResult(i));
  return success();
}

LogicalResult importSqrt(NodeContext &nc) { return unary<SqrtOp>(nc); }

LogicalResult importSqueeze(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  auto axes = squeezeAxes(nc, typeOf(*x).getShape());
  if (failed(axes))
    return failure();
  return setResult(
      nc, nc.build<SqueezeOp>({*x}, {nc.named("axes", array(nc, *axes))}));
}

LogicalResult importSub(NodeContext &nc) { return binary<SubOp>(nc); }
LogicalResult importSum(NodeContext &nc) {
  return setResult(nc, chain<AddOp>(nc));
}
LogicalResult importTanh(NodeContext &nc) { return unary<TanhOp>(nc); }

LogicalResult importTopK(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  auto k = nc.constInts(1, "k");
  if (failed(x) || failed(k))
    return failure();
  if (k->size() != 1)
    return nc.error("k must have one element");
  FailureOr<int64_t> axis =
      nc.axis(nc.getInt("axis", -1), typeOf(*x).getRank());
  if (failed(axis))
    return failure();
  FailureOr<Operation *> op = nc.create<TopKOp>(
      {*x},
      {nc.named("k", i64(nc, (*k)[0])), nc.named("axis", i64(nc, *axis)),
       nc.named("largest", boolean(nc, nc.getInt("largest", 1)))},
      {}, 2);
  if (failed(op))
    return failure();
  nc.setOutput(0, (*op)->getResult(0));
  nc.setOutput(1, (*op)->getResult(1));
  return success();
}

LogicalResult importTranspose(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  int64_t rank = typeOf(*x).getRank();
  SmallVector<int64_t> perm;
  if (auto attr = nc.getInts("perm")) {
    auto given = nc.normaliseAxes(*attr, rank, "permutation entry");
    if (failed(given))
      return failure();
    perm = std::move(*given);
  } else {
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  }
  return setResult(nc, nc.build<TransposeOp>(
                           {*x}, {nc.named("permutation", array(nc, perm))}));
}

LogicalResult importTrilu(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  int64_t k = 0;
  if (nc.hasInput(1)) {
    auto in = nc.constInts(1, "k");
    if (failed(in))
      return failure();
    if (in->size() != 1)
      return nc.error("k must have one element");
    k = (*in)[0];
  }
  return setResult(
      nc,
      nc.build<TriluOp>({*x},
                        {nc.named("k", i64(nc, k)),
                         nc.named("upper", boolean(nc, nc.getInt("upper", 1)))},
                        x->getType()));
}

LogicalResult importUnsqueeze(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  auto axes = unsqueezeAxes(nc, typeOf(*x).getRank());
  if (failed(axes))
    return failure();
  return setResult(
      nc, nc.build<UnsqueezeOp>({*x}, {nc.named("axes", array(nc, *axes))}));
}

LogicalResult importWhere(NodeContext &nc) {
  FailureOr<Value> c = nc.value(0), a = nc.value(1), b = nc.value(2);
  if (failed(c) || failed(a) || failed(b))
    return failure();
  return setResult(nc, nc.build<WhereOp>({*c, *a, *b}));
}

/// a xor b is a != b on booleans.
LogicalResult importXor(NodeContext &nc) { return negatedBinary<EqualOp>(nc); }

// Alphabetical by ONNX op type, with the inputs each needs:
// lookupOpImporter() binary-searches it
// (OnnxImporterTest.OpTablesAreSorted checks the order).
const OpImporter kImporters[] = {
    {"Abs", 1, importAbs},
    {"Add", 2, importAdd},
    {"And", 2, importAnd},
    {"ArgMax", 1, importArgMax},
    {"ArgMin", 1, importArgMin},
    {"AveragePool", 1, importAveragePool},
    {"BatchNormalization", 5, importBatchNormalization},
    {"Cast", 1, importCast},
    {"CastLike", 2, importCastLike},
    {"Ceil", 1, importFoldedOnly},
    {"Celu", 1, importCelu},
    {"Clip", 1, importClip},
    {"Concat", 1, importConcat},
    {"ConcatFromSequence", 1, importFoldedOnly},
    {"Constant", 0, importConstant},
    {"ConstantOfShape", 1, importConstantOfShape},
    {"Conv", 2, importConv},
    {"Cos", 1, importCos},
    {"Cosh", 1, importCosh},
    {"CumSum", 2, importCumSum},
    {"DepthToSpace", 1, importDepthToSpace},
    {"Div", 2, importDiv},
    {"Dropout", 1, importDropout},
    {"Einsum", 1, importEinsum},
    {"Elu", 1, importElu},
    {"Equal", 2, importEqual},
    {"Erf", 1, importErf},
    {"Exp", 1, importExp},
    {"Expand", 2, importExpand},
    {"Flatten", 1, importFlatten},
    {"Floor", 1, importFoldedOnly},
    {"Gather", 2, importGather},
    {"GatherElements", 2, importGatherElements},
    {"GatherND", 2, importGatherND},
    {"Gelu", 1, importGelu},
    {"Gemm", 2, importGemm},
    {"GlobalAveragePool", 1, importGlobalAveragePool},
    {"GlobalMaxPool", 1, importGlobalMaxPool},
    {"Greater", 2, importGreater},
    {"GreaterOrEqual", 2, importGreaterOrEqual},
    {"HardSigmoid", 1, importHardSigmoid},
    {"HardSwish", 1, importHardSwish},
    {"Hardmax", 1, importHardmax},
    {"Identity", 1, importIdentity},
    {"If", 1, importFoldedOnly},
    {"InstanceNormalization", 3, importInstanceNormalization},
    {"IsNaN", 1, importIsNaN},
    {"LayerNormalization", 2, importLayerNormalization},
    {"LeakyRelu", 1, importLeakyRelu},
    {"Less", 2, importLess},
    {"LessOrEqual", 2, importLessOrEqual},
    {"Log", 1, importLog},
    {"LogSoftmax", 1, importLogSoftmax},
    {"Loop", 0, importFoldedOnly},
    {"MatMul", 2, importMatMul},
    {"Max", 1, importMax},
    {"MaxPool", 1, importMaxPool},
    {"Mean", 1, importMean},
    {"Min", 1, importMin},
    {"Mod", 2, importFoldedOnly},
    {"Mul", 2, importMul},
    {"Neg", 1, importNeg},
    {"NonZero", 1, importFoldedOnly},
    {"Not", 1, importNot},
    {"OneHot", 3, importOneHot},
    {"Or", 2, importOr},
    {"PRelu", 2, importPRelu},
    {"Pad", 1, importPad},
    {"Pow", 2, importPow},
    {"RMSNormalization", 2, importRmsNorm},
    {"Range", 3, importRange},
    {"Reciprocal", 1, importReciprocal},
    {"ReduceL1", 1, importReduceL1},
    {"ReduceL2", 1, importReduceL2},
    {"ReduceLogSum", 1, importReduceLogSum},
    {"ReduceLogSumExp", 1, importReduceLogSumExp},
    {"ReduceMax", 1, importReduceMax},
    {"ReduceMean", 1, importReduceMean},
    {"ReduceMin", 1, importReduceMin},
    {"ReduceSum", 1, importReduceSum},
    {"ReduceSumSquare", 1, importReduceSumSquare},
    {"Relu", 1, importRelu},
    {"Reshape", 1, importReshape},
    {"Round", 1, importFoldedOnly},
    {"Scatter", 3, importScatterElements},
    {"ScatterElements", 3, importScatterElements},
    {"ScatterND", 3, importScatterND},
    {"Selu", 1, importSelu},
    {"SequenceConstruct", 1, importFoldedOnly},
    {"SequenceEmpty", 0, importFoldedOnly},
    {"SequenceInsert", 2, importFoldedOnly},
    {"Shape", 1, importShape},
    {"Sigmoid", 1, importSigmoid},
    {"Sign", 1, importFoldedOnly},
    {"SimplifiedLayerNormalization", 2, importRmsNorm},
    {"Sin", 1, importSin},
    {"Sinh", 1, importSinh},
    {"Size", 1, importSize},
    {"Slice", 1, importSlice},
    {"Softmax", 1, importSoftmax},
    {"Softplus", 1, importSoftplus},
    {"Softsign", 1, importSoftsign},
    {"SpaceToDepth", 1, importSpaceToDepth},
    {"Split", 1, importSplit},
    {"Sqrt", 1, importSqrt},
    {"Squeeze", 1, importSqueeze},
    {"Sub", 2, importSub},
    {"Sum", 1, importSum},
    {"Tan", 1, importTan},
    {"Tanh", 1, importTanh},
    {"ThresholdedRelu", 1, importThresholdedRelu},
    {"Tile", 2, importTile},
    {"TopK", 2, importTopK},
    {"Transpose", 1, importTranspose},
    {"Trilu", 1, importTrilu},
    {"Unsqueeze", 1, importUnsqueeze},
    {"Where", 3, importWhere},
    {"Xor", 2, importXor},
};

} // namespace

namespace bm::import {
const OpImporter *lookupOpImporter(StringRef opType) {
  auto it = llvm::lower_bound(
      kImporters, opType,
      [](const OpImporter &e, StringRef name) { return e.opType < name; });
  if (it == std::end(kImporters) || it->opType != opType)
    return nullptr;
  return it;
}
} // namespace bm::import

namespace bm {
std::vector<std::string> supportedOnnxOps() {
  std::vector<std::string> ops;
  for (const OpImporter &e : kImporters)
    ops.push_back(e.opType.str());
  return ops;
}

std::vector<std::string> foldOnlyOnnxOps() {
  std::vector<std::string> ops;
  for (const OpImporter &e : kImporters)
    if (e.fn == importFoldedOnly)
      ops.push_back(e.opType.str());
  return ops;
}
} // namespace bm
