//===- NeuralNetOps.cpp - convolution, pooling, normalisation, softmax ----===//
//
// The importers of the ONNX ops with window or normalisation attributes:
// explicit pads from auto_pad, ceil_mode as extra padding, pre-13 softmax
// coercion to 2-D. Their table entries are in OpImporters.cpp.
//
//===----------------------------------------------------------------------===//

#include "import/OpImporters.h"

#include "bm/BmOps.h"

#include "llvm/Support/MathExtras.h"

#include <optional>
#include <type_traits>

using namespace mlir;
using namespace mlir::bm;
using llvm::SmallVector;
using llvm::Twine;

namespace bm::import {
namespace {

/// What LayerNormalization and RMSNormalization share: the input, the scale
/// and the first normalised axis (the attribute, -1 by default).
struct NormInputs {
  Value x, scale;
  int64_t axis;
};
FailureOr<NormInputs> normInputs(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0), scale = nc.value(1);
  if (failed(x) || failed(scale))
    return failure();
  FailureOr<int64_t> axis =
      nc.axis(nc.getInt("axis", -1), typeOf(*x).getRank());
  if (failed(axis))
    return failure();
  return NormInputs{*x, *scale, *axis};
}

/// Explicit pads for Conv and pooling from pads / auto_pad.
FailureOr<SmallVector<int64_t>> explicitPads(NodeContext &nc,
                                             ArrayRef<int64_t> inSpatial,
                                             ArrayRef<int64_t> kernel,
                                             ArrayRef<int64_t> strides,
                                             ArrayRef<int64_t> dilations) {
  size_t n = inSpatial.size();
  std::string autoPad = nc.getString("auto_pad", "NOTSET");
  SmallVector<int64_t> pads(2 * n, 0);
  if (autoPad == "NOTSET") {
    if (auto p = nc.getInts("pads")) {
      if (p->size() != 2 * n) {
        return nc.error("pads has " + Twine(p->size()) + " entries for " +
                        Twine(n) + " spatial dims");
      }
      pads.assign(p->begin(), p->end());
    }
    return pads;
  }
  if (autoPad == "VALID")
    return pads;
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER") {
    return nc.error("unknown auto_pad '" + autoPad + "'");
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t out = llvm::divideCeil(uint64_t(inSpatial[i]), uint64_t(strides[i]));
    // window = dilation (kernel - 1) + 1, total = (out - 1) stride + window
    // - in: a huge kernel_shape or dilation overflows int64.
    int64_t taps, span, window, reach, total;
    if (llvm::SubOverflow(kernel[i], int64_t(1), taps) ||
        llvm::MulOverflow(dilations[i], taps, span) ||
        llvm::AddOverflow(span, int64_t(1), window) ||
        llvm::MulOverflow(out - 1, strides[i], reach) ||
        llvm::AddOverflow(reach, window, total))
      return nc.error("the window of spatial dim " + Twine(i) +
                      " (kernel " + Twine(kernel[i]) + ", dilation " +
                      Twine(dilations[i]) + ") does not fit in 64 bits");
    total = std::max<int64_t>(total - inSpatial[i], 0);
    int64_t small = total / 2, large = total - small;
    pads[i] = autoPad == "SAME_UPPER" ? small : large;
    pads[i + n] = autoPad == "SAME_UPPER" ? large : small;
  }
  return pads;
}

SmallVector<int64_t> intsOr(NodeContext &nc, StringRef name, size_t n,
                            int64_t fallback) {
  if (auto v = nc.getInts(name))
    return SmallVector<int64_t>(v->begin(), v->end());
  return SmallVector<int64_t>(n, fallback);
}

/// The strides and dilations of a window op (conv, pooling) over `n`
/// spatial dims: one entry >= 1 per dim each, 1 when absent.
LogicalResult windowSteps(NodeContext &nc, size_t n,
                          SmallVector<int64_t> &strides,
                          SmallVector<int64_t> &dilations) {
  strides = intsOr(nc, "strides", n, 1);
  dilations = intsOr(nc, "dilations", n, 1);
  auto belowOne = [](int64_t step) { return step < 1; };
  if (strides.size() != n || dilations.size() != n ||
      llvm::any_of(strides, belowOne) || llvm::any_of(dilations, belowOne))
    return nc.error("strides and dilations need one entry >= 1 per spatial "
                    "dim");
  return success();
}

/// Softmax and LogSoftmax. Before opset 13 they coerce the input to 2-D at
/// `axis` (default 1); from 13 they work on one axis (default -1).
template <typename OpTy> LogicalResult softmax(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  RankedTensorType type = typeOf(*x);
  int64_t rank = type.getRank();
  bool legacy = nc.getOpset() < 13;
  FailureOr<int64_t> axis =
      nc.axis(nc.getInt("axis", legacy ? 1 : -1), std::max<int64_t>(rank, 1));
  if (failed(axis))
    return failure();
  if (!legacy || *axis == rank - 1)
    return setResult(
        nc, nc.build<OpTy>({*x}, {nc.named("axis", i64(nc, *axis))}, type));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t &side = d < *axis ? outer : inner;
    if (llvm::MulOverflow(side, type.getDimSize(d), side))
      return nc.error("the 2-D view of " + shapeText(type.getShape()) +
                      " at axis " + Twine(*axis) +
                      " has a dim larger than int64 can count");
  }
  auto flat = RankedTensorType::get({outer, inner}, type.getElementType());
  FailureOr<Value> r = nc.build<ReshapeOp>({*x}, {}, flat);
  if (succeeded(r))
    r = nc.build<OpTy>({*r}, {nc.named("axis", i64(nc, 1))}, flat);
  if (succeeded(r))
    r = nc.build<ReshapeOp>({*r}, {}, type);
  return setResult(nc, r);
}

/// The end padding that ceil_mode adds to one spatial dim of `size` padded
/// by `begin` and `end`: enough for a last window that starts before the
/// end padding (ONNX drops those that would start inside it). Nullopt where
/// the windows' extent overflows int64 (a stride or pad near INT64_MAX).
std::optional<int64_t> ceilModeEndPad(int64_t size, int64_t begin,
                                      int64_t end, int64_t kernel,
                                      int64_t stride) {
  int64_t start, padded, span, last, needed;
  if (llvm::AddOverflow(size, begin, start) ||
      llvm::AddOverflow(start, end, padded) ||
      llvm::SubOverflow(padded, kernel, span))
    return std::nullopt;
  if (span < 0)
    return 0;
  int64_t windows = llvm::divideCeil(uint64_t(span), uint64_t(stride)) + 1;
  if (llvm::MulOverflow(windows - 1, stride, last))
    return std::nullopt;
  if (last >= start)
    last -= stride;
  if (llvm::AddOverflow(last, kernel, needed))
    return std::nullopt;
  return std::max<int64_t>(needed - padded, 0);
}

/// Pooling windows of `OpTy`, with ceil_mode turned into extra end padding
/// (windows that would start inside the end padding are dropped, as ONNX
/// says).
template <typename OpTy> LogicalResult pool(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  RankedTensorType type = typeOf(*x);
  if (type.getRank() < 3)
    return nc.error("pooling needs an NC[spatial] input, got rank " +
                    Twine(type.getRank()));
  size_t n = type.getRank() - 2;
  auto kernel = nc.getInts("kernel_shape");
  if (!kernel || kernel->size() != n)
    return nc.error("kernel_shape must have one entry per spatial dim");
  SmallVector<int64_t> strides, dilations;
  if (failed(windowSteps(nc, n, strides, dilations)))
    return failure();
  if (llvm::any_of(dilations, [](int64_t d) { return d != 1; }))
    return nc.error("pooling with dilations is not supported");
  ArrayRef<int64_t> spatial = type.getShape().drop_front(2);
  FailureOr<SmallVector<int64_t>> pads =
      explicitPads(nc, spatial, *kernel, strides, dilations);
  if (failed(pads))
    return failure();
  bool ceilMode = nc.getInt("ceil_mode", 0);
  if (std::is_same_v<OpTy, AvgPoolOp> && nc.getInt("count_include_pad", 0) &&
      llvm::any_of(*pads, [](int64_t p) { return p != 0; })) {
    // bm.avg_pool counts in-bounds elements only: the padding that the
    // divisor counts becomes explicit zeros (MaxViT's MBConv shortcut).
    if (ceilMode)
      return nc.error("average pooling with count_include_pad=1, padding "
                      "and ceil_mode=1 is not supported");
    for (size_t i = 0; i < n; ++i) {
      FailureOr<Value> padded =
          padAxis(nc, *x, i + 2, (*pads)[i], (*pads)[i + n], 0.0);
      if (failed(padded))
        return failure();
      x = *padded;
      (*pads)[i] = (*pads)[i + n] = 0;
    }
    spatial = typeOf(*x).getShape().drop_front(2);
  }
  if (ceilMode) {
    for (size_t i = 0; i < n; ++i) {
      std::optional<int64_t> extra = ceilModeEndPad(
          spatial[i], (*pads)[i], (*pads)[i + n], (*kernel)[i], strides[i]);
      if (!extra)
        return nc.error("the ceil_mode windows of spatial dim " + Twine(i) +
                        " (size " + Twine(spatial[i]) + ", kernel " +
                        Twine((*kernel)[i]) + ", stride " + Twine(strides[i]) +
                        ") do not fit in 64 bits");
      (*pads)[i + n] += *extra;
    }
  }
  return setResult(
      nc, nc.build<OpTy>({*x}, {nc.named("kernel_shape", array(nc, *kernel)),
                                nc.named("strides", array(nc, strides)),
                                nc.named("pads", array(nc, *pads))}));
}

} // namespace

LogicalResult importAveragePool(NodeContext &nc) { return pool<AvgPoolOp>(nc); }

LogicalResult importBatchNormalization(NodeContext &nc) {
  if (nc.getInt("training_mode", 0))
    return nc.error("training-mode batch normalisation is not supported");
  SmallVector<Value> operands;
  for (unsigned i = 0; i < 5; ++i) {
    FailureOr<Value> v = nc.value(i);
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  return setResult(
      nc, nc.build<BatchNormOp>(
              operands,
              {nc.named("epsilon", f32(nc, nc.getFloat("epsilon", 1e-5f)))}));
}

LogicalResult importConv(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0), w = nc.value(1);
  if (failed(x) || failed(w))
    return failure();
  RankedTensorType type = typeOf(*x), weight = typeOf(*w);
  if (type.getRank() < 3 || weight.getRank() != type.getRank())
    return nc.error("conv needs input and weight of one rank >= 3");
  size_t n = type.getRank() - 2;
  SmallVector<int64_t> strides, dilations;
  if (failed(windowSteps(nc, n, strides, dilations)))
    return failure();
  FailureOr<SmallVector<int64_t>> pads =
      explicitPads(nc, type.getShape().drop_front(2),
                   weight.getShape().drop_front(2), strides, dilations);
  if (failed(pads))
    return failure();
  SmallVector<Value> operands = {*x, *w};
  if (failed(nc.appendIfGiven(2, operands)))
    return failure();
  return setResult(
      nc, nc.build<ConvOp>(
              operands, {nc.named("strides", array(nc, strides)),
                         nc.named("pads", array(nc, *pads)),
                         nc.named("dilations", array(nc, dilations)),
                         nc.named("group", i64(nc, nc.getInt("group", 1)))}));
}

LogicalResult importGlobalAveragePool(NodeContext &nc) {
  FailureOr<Value> x = nc.value(0);
  if (failed(x))
    return failure();
  return setResult(nc, nc.build<GlobalAvgPoolOp>({*x}));
}

LogicalResult importLayerNormalization(NodeContext &nc) {
  FailureOr<NormInputs> in = normInputs(nc);
  if (failed(in))
    return failure();
  SmallVector<Value> operands = {in->x, in->scale};
  if (failed(nc.appendIfGiven(2, operands)))
    return failure();
  float epsilon = nc.getFloat("epsilon", 1e-5f);
  if (failed(setResult(
          nc, nc.build<LayerNormOp>(operands,
                                    {nc.named("axis", i64(nc, in->axis)),
                                     nc.named("epsilon", f32(nc, epsilon))}))))
    return failure();
  if (!nc.hasOutput(1) && !nc.hasOutput(2))
    return success();
  // The optional Mean and InvStdDev outputs, spelled out in bm ops.
  SmallVector<int64_t> axes;
  for (int64_t d = in->axis, rank = typeOf(in->x).getRank(); d < rank; ++d)
    axes.push_back(d);
  FailureOr<Value> mu = reduceOf<ReduceMeanOp>(nc, in->x, axes, true);
  if (failed(setResult(nc, mu, 1)))
    return failure();
  FailureOr<CenteredDeviation> moments =
      centeredDeviation(nc, in->x, *mu, axes, epsilon);
  if (failed(moments))
    return failure();
  return setResult(nc, unaryOf<ReciprocalOp>(nc, moments->deviation), 2);
}

LogicalResult importLogSoftmax(NodeContext &nc) {
  return softmax<LogSoftmaxOp>(nc);
}

LogicalResult importMaxPool(NodeContext &nc) { return pool<MaxPoolOp>(nc); }

/// RMSNormalization (opset 23) and onnxruntime's
/// SimplifiedLayerNormalization: x / rms(x) * scale.
LogicalResult importRmsNorm(NodeContext &nc) {
  FailureOr<NormInputs> in = normInputs(nc);
  if (failed(in))
    return failure();
  return setResult(
      nc, nc.build<RmsNormOp>(
              {in->x, in->scale},
              {nc.named("axis", i64(nc, in->axis)),
               nc.named("epsilon", f32(nc, nc.getFloat("epsilon", 1e-5f)))}));
}

LogicalResult importSoftmax(NodeContext &nc) { return softmax<SoftmaxOp>(nc); }

} // namespace bm::import
