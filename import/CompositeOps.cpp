//===- CompositeOps.cpp - ONNX ops spelled out in several bm ops ----------===//
//
// Each importer here writes an ONNX op as a few bm ops, following the
// formula in the ONNX operator documentation. Alphabetical; the table
// entries are in OpImporters.cpp.
//
//===----------------------------------------------------------------------===//

#include "import/OpImporters.h"

#include "bm/BmOps.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::bm;
using llvm::SmallVector;
using llvm::Twine;

namespace bm::import {
namespace {

/// Chains bm ops for a formula; the first failure (already reported as the
/// node's error) propagates through the rest.
class Formula {
public:
  explicit Formula(NodeContext &nc) : nc(nc) {}

  template <typename OpTy> FailureOr<Value> unary(FailureOr<Value> x) {
    if (failed(x))
      return failure();
    return unaryOf<OpTy>(nc, *x);
  }
  template <typename OpTy>
  FailureOr<Value> binary(FailureOr<Value> a, FailureOr<Value> b) {
    if (failed(a) || failed(b))
      return failure();
    return binaryOf<OpTy>(nc, *a, *b);
  }
  /// A scalar of `like`'s element type.
  FailureOr<Value> scalar(FailureOr<Value> like, double value) {
    if (failed(like))
      return failure();
    return scalarLike(nc, *like, value);
  }
  FailureOr<Value> where(FailureOr<Value> c, FailureOr<Value> a,
                         FailureOr<Value> b) {
    if (failed(c) || failed(a) || failed(b))
      return failure();
    return nc.build<WhereOp>({*c, *a, *b});
  }
  /// x < 0 ? negative : x, the activations with a negative branch.
  FailureOr<Value> negativeOr(FailureOr<Value> x, FailureOr<Value> negative) {
    return where(binary<LessOp>(x, scalar(x, 0)), negative, x);
  }
  FailureOr<Value> add(FailureOr<Value> a, FailureOr<Value> b) {
    return binary<AddOp>(a, b);
  }
  FailureOr<Value> mul(FailureOr<Value> a, FailureOr<Value> b) {
    return binary<MulOp>(a, b);
  }
  FailureOr<Value> scaled(FailureOr<Value> x, double factor) {
    return mul(x, scalar(x, factor));
  }
  /// alpha * (exp(x) - 1), the negative branch of Elu and Selu.
  FailureOr<Value> expMinusOne(FailureOr<Value> x, double alpha) {
    return scaled(binary<SubOp>(unary<ExpOp>(x), scalar(x, 1)), alpha);
  }
  /// min(max(x, lo), hi).
  FailureOr<Value> clamp(FailureOr<Value> x, double lo, double hi) {
    return binary<MinOp>(binary<MaxOp>(x, scalar(x, lo)), scalar(x, hi));
  }

private:
  NodeContext &nc;
};

/// The indices of a top-1 of x along `axis` (top_k's result 1), passed
/// through `adjust` when given, then squeezed unless `keepDims`.
FailureOr<Value>
topOneIndex(NodeContext &nc, Value x, int64_t axis, bool largest, bool keepDims,
            function_ref<FailureOr<Value>(Value)> adjust = nullptr) {
  FailureOr<Operation *> topK = nc.create<TopKOp>(
      {x},
      {nc.named("k", i64(nc, 1)), nc.named("axis", i64(nc, axis)),
       nc.named("largest", boolean(nc, largest))},
      {}, 2);
  if (failed(topK))
    return failure();
  FailureOr<Value> index = (*topK)->getResult(1);
  if (adjust)
    index = adjust(*index);
  if (failed(index) || keepDims)
    return index;
  return nc.build<SqueezeOp>({*index}, {nc.named("axes", array(nc, {axis}))});
}

/// ArgMax / ArgMin: the indices of a top-1 along the axis. A top-1 picks
/// the first of equal values; for select_last_index the axis is reversed
/// (a gather) and the index mirrored back.
LogicalResult argExtreme(NodeContext &nc, bool largest) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  RankedTensorType type = typeOf(*x);
  FailureOr<int64_t> axis = nc.axis(nc.getInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  bool last = nc.getInt("select_last_index", 0);
  int64_t dim = type.getDimSize(*axis);
  // The reversing gather's indices are a constant of the axis' length.
  if (last && dim > kMaxFoldElements)
    return nc.error("select_last_index over an axis of " + Twine(dim) +
                    " elements is not supported (at most " +
                    Twine(kMaxFoldElements) + ")");
  if (last) {
    std::vector<int64_t> reversed;
    for (int64_t i = dim - 1; i >= 0; --i)
      reversed.push_back(i);
    FailureOr<Value> indices =
        nc.constant(HostTensor::fromInts(reversed, {dim}));
    if (failed(indices))
      return failure();
    x = nc.build<GatherOp>({*x, *indices}, {nc.named("axis", i64(nc, *axis))});
    if (failed(x))
      return failure();
  }
  auto mirror = [&](Value index) {
    Formula f(nc);
    return f.binary<SubOp>(f.scalar(index, dim - 1), index);
  };
  return setResult(
      nc, topOneIndex(nc, *x, *axis, largest, nc.getInt("keepdims", 1),
                      last ? function_ref<FailureOr<Value>(Value)>(mirror)
                           : nullptr));
}

FailureOr<Value> hardSigmoid(Formula &f, FailureOr<Value> x, double alpha,
                             double beta) {
  return f.clamp(f.add(f.scaled(x, alpha), f.scalar(x, beta)), 0, 1);
}

/// reshape -> transpose -> reshape, the data movement of DepthToSpace and
/// SpaceToDepth.
LogicalResult shuffle(NodeContext &nc, Value x, ArrayRef<int64_t> split,
                      ArrayRef<int64_t> permutation, ArrayRef<int64_t> result) {
  Type element = typeOf(x).getElementType();
  FailureOr<Value> r =
      nc.build<ReshapeOp>({x}, {}, RankedTensorType::get(split, element));
  if (succeeded(r))
    r = nc.build<TransposeOp>(
        {*r}, {nc.named("permutation", array(nc, permutation))});
  if (succeeded(r))
    r = nc.build<ReshapeOp>({*r}, {}, RankedTensorType::get(result, element));
  return setResult(nc, r);
}

} // namespace

LogicalResult importArgMax(NodeContext &nc) { return argExtreme(nc, true); }
LogicalResult importArgMin(NodeContext &nc) { return argExtreme(nc, false); }

/// max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
LogicalResult importCelu(NodeContext &nc) {
  Formula f(nc);
  double alpha = nc.getFloat("alpha", 1);
  FailureOr<Value> x = nc.value(0);
  FailureOr<Value> negative = f.binary<MinOp>(
      f.scalar(x, 0), f.expMinusOne(f.scaled(x, 1 / alpha), alpha));
  return setResult(nc, f.add(f.binary<MaxOp>(x, f.scalar(x, 0)), negative));
}

/// (exp(x) + exp(-x)) / 2.
LogicalResult importCosh(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(
      nc, f.scaled(f.add(f.unary<ExpOp>(x), f.unary<ExpOp>(f.unary<NegOp>(x))),
                   0.5));
}

/// [N, C, H, W] -> [N, C / b^2, H * b, W * b]; DCR takes the depth
/// blocks first, CRD the channels.
LogicalResult importDepthToSpace(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> s = typeOf(*x).getShape();
  int64_t b = nc.getInt("blocksize", 0), bb, h, w;
  if (s.size() != 4 || b < 1 || llvm::MulOverflow(b, b, bb) || s[1] % bb != 0)
    return nc.error("depth to space needs a rank-4 input whose channels "
                    "divide by blocksize^2");
  if (llvm::MulOverflow(s[2], b, h) || llvm::MulOverflow(s[3], b, w))
    return nc.error("depth to space with blocksize " + Twine(b) +
                    " overflows int64");
  int64_t c = s[1] / bb;
  SmallVector<int64_t> result = {s[0], c, h, w};
  if (nc.getString("mode", "DCR") == "CRD")
    return shuffle(nc, *x, {s[0], c, b, b, s[2], s[3]}, {0, 1, 4, 2, 5, 3},
                   result);
  return shuffle(nc, *x, {s[0], b, b, c, s[2], s[3]}, {0, 3, 4, 1, 5, 2},
                 result);
}

/// x < 0 ? alpha * (exp(x) - 1) : x.
LogicalResult importElu(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc,
                   f.negativeOr(x, f.expMinusOne(x, nc.getFloat("alpha", 1))));
}

/// The maximum over all spatial dims, kept as size 1.
LogicalResult importGlobalMaxPool(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  SmallVector<int64_t> axes;
  for (int64_t d = 2, rank = typeOf(*x).getRank(); d < rank; ++d)
    axes.push_back(d);
  return setResult(nc, reduceOf<ReduceMaxOp>(nc, *x, axes, true));
}

/// max(0, min(1, alpha * x + beta)).
LogicalResult importHardSigmoid(NodeContext &nc) {
  Formula f(nc);
  return setResult(nc, hardSigmoid(f, nc.value(0), nc.getFloat("alpha", 0.2f),
                                   nc.getFloat("beta", 0.5f)));
}

/// x * HardSigmoid(x) with alpha 1/6, beta 1/2.
LogicalResult importHardSwish(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc, f.mul(x, hardSigmoid(f, x, 1.0 / 6, 0.5)));
}

/// one_hot(argmax(x, axis), depth = dim, axis) in x's element type.
LogicalResult importHardmax(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  RankedTensorType type = typeOf(*x);
  int64_t rank = type.getRank();
  FailureOr<int64_t> axis =
      nc.axis(nc.getInt("axis", nc.getOpset() < 13 ? 1 : -1), rank);
  if (failed(axis))
    return failure();
  if (nc.getOpset() < 13 && *axis != rank - 1)
    return nc.error("hardmax before opset 13 coerces to 2-D; only the last "
                    "axis is supported");
  FailureOr<Value> index = topOneIndex(nc, *x, *axis, /*largest=*/true,
                                       /*keepDims=*/false);
  if (failed(index))
    return failure();
  int64_t depth = type.getDimSize(*axis);
  return setResult(
      nc,
      nc.build<OneHotOp>(
          {*index},
          {nc.named("depth", i64(nc, depth)), nc.named("axis", i64(nc, *axis)),
           nc.named("on_value", nc.builder().getF64FloatAttr(1)),
           nc.named("off_value", nc.builder().getF64FloatAttr(0))},
          type));
}

/// (x - mean) / sqrt(var + epsilon) * scale + bias over the spatial dims,
/// scale and bias per channel.
LogicalResult importInstanceNormalization(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  FailureOr<Value> scale = nc.value(1), bias = nc.value(2);
  if (failed(x) || failed(scale) || failed(bias))
    return failure();
  RankedTensorType type = typeOf(*x);
  if (type.getRank() < 3)
    return nc.error("instance normalisation needs an NC[spatial] input");
  SmallVector<int64_t> axes, perChannel = {type.getDimSize(1)};
  for (int64_t d = 2; d < type.getRank(); ++d) {
    axes.push_back(d);
    perChannel.push_back(1);
  }
  auto channels = [&](Value v) {
    return nc.build<ReshapeOp>(
        {v}, {}, RankedTensorType::get(perChannel, typeOf(v).getElementType()));
  };
  FailureOr<Value> mean = reduceOf<ReduceMeanOp>(nc, *x, axes, true);
  if (failed(mean))
    return failure();
  FailureOr<CenteredDeviation> moments =
      centeredDeviation(nc, *x, *mean, axes, nc.getFloat("epsilon", 1e-5f));
  if (failed(moments))
    return failure();
  FailureOr<Value> normalised =
      f.binary<DivOp>(moments->centered, moments->deviation);
  return setResult(nc,
                   f.add(f.mul(normalised, channels(*scale)), channels(*bias)));
}

/// NaN is the only value not equal to itself.
LogicalResult importIsNaN(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc, f.unary<NotOp>(f.binary<EqualOp>(x, x)));
}

/// x < 0 ? alpha * x : x.
LogicalResult importLeakyRelu(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc,
                   f.negativeOr(x, f.scaled(x, nc.getFloat("alpha", 0.01f))));
}

/// x < 0 ? slope * x : x, the slope broadcasting to x.
LogicalResult importPRelu(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc, f.negativeOr(x, f.mul(x, nc.value(1))));
}

/// gamma * (x > 0 ? x : alpha * (exp(x) - 1)).
LogicalResult importSelu(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  FailureOr<Value> inner = f.where(
      f.binary<GreaterOp>(x, f.scalar(x, 0)), x,
      f.expMinusOne(x, nc.getFloat("alpha", 1.67326319217681884765625f)));
  return setResult(
      nc, f.scaled(inner, nc.getFloat("gamma", 1.05070102214813232421875f)));
}

/// (exp(x) - exp(-x)) / 2.
LogicalResult importSinh(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc,
                   f.scaled(f.binary<SubOp>(f.unary<ExpOp>(x),
                                            f.unary<ExpOp>(f.unary<NegOp>(x))),
                            0.5));
}

/// log(exp(x) + 1).
LogicalResult importSoftplus(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc,
                   f.unary<LogOp>(f.add(f.unary<ExpOp>(x), f.scalar(x, 1))));
}

/// x / (1 + |x|).
LogicalResult importSoftsign(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(
      nc, f.binary<DivOp>(x, f.add(f.scalar(x, 1), f.unary<AbsOp>(x))));
}

/// [N, C, H, W] -> [N, C * b^2, H / b, W / b].
LogicalResult importSpaceToDepth(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> s = typeOf(*x).getShape();
  int64_t b = nc.getInt("blocksize", 0);
  if (s.size() != 4 || b < 1 || s[2] % b != 0 || s[3] % b != 0)
    return nc.error("space to depth needs a rank-4 input whose spatial dims "
                    "divide by blocksize");
  int64_t bb, c;
  if (llvm::MulOverflow(b, b, bb) || llvm::MulOverflow(s[1], bb, c))
    return nc.error("space to depth with blocksize " + Twine(b) +
                    " overflows int64");
  return shuffle(nc, *x, {s[0], s[1], s[2] / b, b, s[3] / b, b},
                 {0, 3, 5, 1, 2, 4}, {s[0], c, s[2] / b, s[3] / b});
}

/// sin(x) / cos(x).
LogicalResult importTan(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(nc, f.binary<DivOp>(f.unary<SinOp>(x), f.unary<CosOp>(x)));
}

/// x > alpha ? x : 0.
LogicalResult importThresholdedRelu(NodeContext &nc) {
  Formula f(nc);
  FailureOr<Value> x = nc.value(0);
  return setResult(
      nc, f.where(f.binary<GreaterOp>(x, f.scalar(x, nc.getFloat("alpha", 1))),
                  x, f.scalar(x, 0)));
}

/// Tile as unsqueeze + expand + reshape: [a, b] repeated [r, s] is
/// [1, a, 1, b] expanded to [r, a, s, b], then reshaped to [r*a, s*b].
/// Pads (or, negative, trims) one axis of `x` with `value`: a slice for
/// the trimmed part, then a concat of splat constants around it.
FailureOr<Value> padAxis(NodeContext &nc, Value x, int64_t axis, int64_t before,
                         int64_t after, double value) {
  RankedTensorType type = typeOf(x);
  SmallVector<int64_t> shape(type.getShape());
  int64_t padded;
  SmallVector<int64_t> result(shape);
  if (llvm::AddOverflow(shape[axis], before, padded) ||
      llvm::AddOverflow(padded, after, result[axis]) ||
      (result[axis] >= 0 && !checkedNumElements(result)))
    return nc.error("pads " + Twine(before) + " and " + Twine(after) +
                    " of axis " + Twine(axis) + " overflow int64");
  if (before < -shape[axis] || after < -shape[axis] || result[axis] < 0)
    return nc.error("pads " + Twine(before) + " and " + Twine(after) +
                    " remove more than the " + Twine(shape[axis]) +
                    " elements of axis " + Twine(axis));
  int64_t start = std::max<int64_t>(0, -before),
          limit = shape[axis] - std::max<int64_t>(0, -after);
  if (start > 0 || limit < shape[axis]) {
    SmallVector<int64_t> starts(shape.size(), 0), limits(shape),
        strides(shape.size(), 1);
    starts[axis] = start;
    limits[axis] = limit;
    FailureOr<Value> sliced =
        nc.build<SliceOp>({x}, {nc.named("starts", array(nc, starts)),
                                nc.named("limits", array(nc, limits)),
                                nc.named("strides", array(nc, strides))});
    if (failed(sliced))
      return failure();
    x = *sliced;
    shape[axis] = limit - start;
  }
  auto block = [&](int64_t size) -> FailureOr<Value> {
    SmallVector<int64_t> blockShape(shape);
    blockShape[axis] = size;
    HostTensor t = HostTensor::zeros(dtypeOf(type.getElementType()),
                                     blockShape, /*splat=*/true);
    t.set(0, value);
    return nc.constant(t);
  };
  FailureOr<Value> head = before > 0 ? block(before) : FailureOr<Value>(x);
  FailureOr<Value> tail = after > 0 ? block(after) : FailureOr<Value>(x);
  if (failed(head) || failed(tail))
    return failure();
  SmallVector<Value> pieces;
  if (before > 0)
    pieces.push_back(*head);
  pieces.push_back(x);
  if (after > 0)
    pieces.push_back(*tail);
  if (pieces.size() == 1)
    return x;
  return nc.build<ConcatOp>(pieces, {nc.named("axis", i64(nc, axis))});
}

/// Pad in constant mode (bm has no pad op, so a concat per padded axis);
/// pads from the attribute (opset < 11) or input 1, the value from the
/// attribute or input 2, the axes from input 3 (opset 18).
LogicalResult importPad(NodeContext &nc) {
  std::string mode = nc.getString("mode", "constant");
  if (mode != "constant")
    return nc.error("pad mode '" + mode + "' (opset " +
                    Twine(nc.getOpset()) +
                    ") is not supported; bm pads with a constant only");
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  int64_t rank = typeOf(*x).getRank();
  std::optional<std::vector<int64_t>> pads = nc.getInts("pads");
  if (!pads) {
    FailureOr<std::vector<int64_t>> in = nc.constInts(1, "pads");
    if (failed(in))
      return failure();
    pads = std::move(*in);
  }
  SmallVector<int64_t> raw;
  for (int64_t d = 0; d < rank; ++d)
    raw.push_back(d);
  if (nc.hasInput(3)) {
    FailureOr<std::vector<int64_t>> in = nc.constInts(3, "axes");
    if (failed(in))
      return failure();
    raw.assign(in->begin(), in->end());
  }
  auto axes = nc.normaliseAxes(raw, rank, "pad axis");
  if (failed(axes))
    return failure();
  size_t n = axes->size();
  if (pads->size() != 2 * n)
    return nc.error("pad has " + Twine(pads->size()) + " pads for " +
                    Twine(n) + " axes (it needs two per axis)");
  double value = nc.getFloat("value", 0);
  if (nc.hasInput(2)) {
    const HostTensor *v = nc.host(2);
    if (!v || v->numElements() != 1)
      return nc.error("the pad value must be a constant scalar");
    value = v->getFloat(0);
  }
  Value result = *x;
  for (size_t i = 0; i < n; ++i) {
    FailureOr<Value> padded =
        padAxis(nc, result, (*axes)[i], (*pads)[i], (*pads)[i + n], value);
    if (failed(padded))
      return failure();
    result = *padded;
  }
  return setResult(nc, result);
}

LogicalResult importTile(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  auto repeats = nc.constInts(1, "repeats");
  if (failed(x) || failed(repeats))
    return failure();
  RankedTensorType type = typeOf(*x);
  int64_t rank = type.getRank();
  if (static_cast<int64_t>(repeats->size()) != rank)
    return nc.error("tile has " + Twine(repeats->size()) +
                    " repeats for rank " + Twine(rank));
  if (llvm::all_of(*repeats, [](int64_t r) { return r == 1; }))
    return setResult(nc, x);
  SmallVector<int64_t> axes, expanded, result;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t r = (*repeats)[d];
    if (r < 0)
      return nc.error("tile repeat " + Twine(r) + " is negative");
    axes.push_back(2 * d);
    expanded.append({r, type.getDimSize(d)});
    result.push_back(r * type.getDimSize(d));
  }
  Type element = type.getElementType();
  FailureOr<Value> r =
      nc.build<UnsqueezeOp>({*x}, {nc.named("axes", array(nc, axes))});
  if (succeeded(r))
    r = nc.build<ExpandOp>({*r}, {}, RankedTensorType::get(expanded, element));
  if (succeeded(r))
    r = nc.build<ReshapeOp>({*r}, {}, RankedTensorType::get(result, element));
  return setResult(nc, r);
}

} // namespace bm::import
