//===- ShapeFolding.cpp - evaluate shape computations on the host ---------===//
//
// Exporters compute shapes at run time (Shape -> Gather -> Concat ->
// Reshape); with every dim bound, those chains are constants. Each folder
// here evaluates one op when all its inputs are host constants and the
// result is small (or a splat); otherwise the op importer emits a bm op.
// The table at the end is alphabetical; hostFoldedOnnxOps() lists it.
//
//===----------------------------------------------------------------------===//

#include "import/NodeContext.h"
#include "import/OnnxImporter.h"
#include "import/OpImporters.h"

#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <functional>

using namespace bm::import;
using namespace mlir;
using llvm::SmallVector;

//===----------------------------------------------------------------------===//
// Shape rules shared with the op importers
//===----------------------------------------------------------------------===//

namespace bm::import {

FailureOr<std::vector<int64_t>> reshapeTargetOf(NodeContext &nc) {
  if (auto attr = nc.getInts("shape")) // opset < 5
    return std::move(*attr);
  return nc.constInts(1, "shape");
}

FailureOr<SmallVector<int64_t>> reshapeTarget(NodeContext &nc,
                                              ArrayRef<int64_t> inShape,
                                              ArrayRef<int64_t> target,
                                              bool allowZero) {
  SmallVector<int64_t> shape;
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t d = target[i];
    if (d == 0 && !allowZero) {
      if (i >= inShape.size()) {
        return nc.error("reshape target " + shapeText(target) + " copies dim " +
                        llvm::Twine(i) + " of a rank-" +
                        llvm::Twine(inShape.size()) + " input");
      }
      d = inShape[i];
    }
    if (d == -1) {
      if (inferred >= 0) {
        return nc.error("reshape target " + shapeText(target) +
                        " has more than one -1");
      }
      inferred = i;
    } else if (d < 0) {
      return nc.error("reshape target " + shapeText(target) +
                      " has a negative dim");
    } else if (llvm::MulOverflow(known, d, known)) {
      return nc.error("reshape target " + shapeText(target) +
                      " overflows int64");
    }
    shape.push_back(d);
  }
  int64_t total = *checkedNumElements(inShape);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0) {
      return nc.error("cannot reshape " + shapeText(inShape) + " into " +
                      shapeText(target));
    }
    shape[inferred] = total / known;
  } else if (known != total) {
    return nc.error("cannot reshape " + shapeText(inShape) + " (" +
                    llvm::Twine(total) + " elements) into " + shapeText(shape));
  }
  return shape;
}

FailureOr<SmallVector<int64_t>> expandTarget(NodeContext &nc,
                                             ArrayRef<int64_t> inShape,
                                             ArrayRef<int64_t> target) {
  for (int64_t d : target)
    if (d < 0) {
      return nc.error("expand target " + shapeText(target) +
                      " has a negative dim");
    }
  auto shape = broadcastShapes(inShape, target);
  if (!shape || !checkedNumElements(*shape)) {
    return nc.error("cannot expand " + shapeText(inShape) + " to " +
                    shapeText(target));
  }
  return SmallVector<int64_t>(shape->begin(), shape->end());
}

/// A Slice's starts, ends, axes and steps, from its attributes (opset < 10)
/// or constant inputs, with the defaults filled in and their lengths checked.
static LogicalResult readSliceOperands(NodeContext &nc,
                                       std::vector<int64_t> &starts,
                                       std::vector<int64_t> &ends,
                                       std::vector<int64_t> &axes,
                                       std::vector<int64_t> &steps) {
  if (nc.attr("starts")) { // opset < 10
    starts = *nc.getInts("starts");
    ends = nc.getInts("ends").value_or(std::vector<int64_t>{});
    axes = nc.getInts("axes").value_or(std::vector<int64_t>{});
  } else {
    auto s = nc.constInts(1, "starts");
    if (failed(s))
      return failure();
    auto e = nc.constInts(2, "ends");
    if (failed(e))
      return failure();
    starts = *s;
    ends = *e;
    if (nc.hasInput(3)) {
      auto a = nc.constInts(3, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (nc.hasInput(4)) {
      auto st = nc.constInts(4, "steps");
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(i);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return nc.error("slice starts, ends, axes and steps differ in length");
  }
  return success();
}

/// The indices a negative step takes along an axis of size `dim`, in order.
static FailureOr<std::vector<int64_t>>
reversedIndices(NodeContext &nc, int64_t startGiven, int64_t endGiven,
                int64_t dim, int64_t step) {
  // ONNX clamps start into [0, dim - 1] and end into [-1, dim - 1].
  int64_t start = startGiven < -dim ? 0
                  : startGiven < 0  ? startGiven + dim
                                    : std::min(startGiven, dim - 1);
  int64_t end = endGiven < -dim ? -1
                : endGiven < 0  ? endGiven + dim
                                : std::min(endGiven, dim - 1);
  // The taken indices become a gather's constant: bound their count
  // before building it (|step| as unsigned: step may be INT64_MIN).
  uint64_t stride = uint64_t(0) - static_cast<uint64_t>(step);
  uint64_t span = start > end ? static_cast<uint64_t>(start - end) : 0;
  uint64_t count = llvm::divideCeil(span, stride);
  if (count > static_cast<uint64_t>(kMaxFoldElements))
    return nc.error("a slice with a negative step taking " +
                    llvm::Twine(count) +
                    " elements is not supported "
                    "(at most " +
                    llvm::Twine(kMaxFoldElements) + ")");
  std::vector<int64_t> indices;
  for (uint64_t k = 0; k < count; ++k)
    indices.push_back(start - static_cast<int64_t>(k * stride));
  return indices;
}

FailureOr<SliceBounds> sliceBounds(NodeContext &nc, ArrayRef<int64_t> shape) {
  int64_t rank = shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (failed(readSliceOperands(nc, starts, ends, axes, steps)))
    return failure();
  SliceBounds b;
  b.starts.assign(rank, 0);
  b.limits.assign(shape.begin(), shape.end());
  b.strides.assign(rank, 1);
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    FailureOr<int64_t> axis = nc.axis(axes[i], rank, "slice axis");
    if (failed(axis))
      return failure();
    if (seen[*axis]) {
      return nc.error("slice axis " + llvm::Twine(*axis) + " is repeated");
    }
    seen[*axis] = true;
    int64_t dim = shape[*axis], step = steps[i];
    if (step == 0) {
      return nc.error("slice step is 0");
    }
    if (step < 0) {
      FailureOr<std::vector<int64_t>> indices =
          reversedIndices(nc, starts[i], ends[i], dim, step);
      if (failed(indices))
        return failure();
      b.reversed.push_back({*axis, std::move(*indices)});
      continue;
    }
    auto clamp = [dim](int64_t v) {
      if (v < 0)
        v = v < -dim ? 0 : v + dim;
      return std::min(v, dim);
    };
    int64_t start = clamp(starts[i]), end = clamp(ends[i]);
    b.starts[*axis] = start;
    b.limits[*axis] = std::max(start, end);
    b.strides[*axis] = step;
  }
  return b;
}

FailureOr<SmallVector<int64_t>> squeezeAxes(NodeContext &nc,
                                            ArrayRef<int64_t> shape) {
  auto given = nc.axes(1);
  if (failed(given))
    return failure();
  std::vector<int64_t> raw;
  if (*given)
    raw = std::move(**given);
  else
    for (auto [i, d] : llvm::enumerate(shape))
      if (d == 1)
        raw.push_back(i);
  auto axes = nc.normaliseAxes(
      raw, shape.size(), "squeeze axis",
      [&](int64_t given, int64_t axis) -> LogicalResult {
        if (shape[axis] == 1)
          return success();
        return nc.error("squeeze axis " + llvm::Twine(given) + " has size " +
                        llvm::Twine(shape[axis]) + ", not 1");
      });
  if (failed(axes))
    return failure();
  llvm::sort(*axes);
  axes->erase(std::unique(axes->begin(), axes->end()), axes->end());
  return axes;
}

FailureOr<SmallVector<int64_t>> unsqueezeAxes(NodeContext &nc, int64_t inRank) {
  // Axes are required: without them, report the missing input as before.
  auto given = nc.axes(1);
  if (failed(given))
    return failure();
  std::vector<int64_t> raw;
  if (*given) {
    raw = std::move(**given);
  } else {
    auto in = nc.constInts(1, "axes");
    if (failed(in))
      return failure();
    raw = *in;
  }
  auto axes = nc.normaliseAxes(raw, inRank + raw.size(), "unsqueeze axis");
  if (failed(axes))
    return failure();
  llvm::sort(*axes);
  if (std::adjacent_find(axes->begin(), axes->end()) != axes->end()) {
    return nc.error("unsqueeze axes are repeated");
  }
  return axes;
}

FailureOr<int64_t> rangeLength(NodeContext &nc, const HostTensor &start,
                               const HostTensor &limit,
                               const HostTensor &delta) {
  if (start.numElements() != 1 || limit.numElements() != 1 ||
      delta.numElements() != 1)
    return nc.error("range start, limit and delta must be scalars");
  double d = delta.getFloat(0);
  if (d == 0)
    return nc.error("range delta is 0");
  double count = std::ceil((limit.getFloat(0) - start.getFloat(0)) / d);
  if (!(count < 9e18))
    return nc.error("range has no finite length");
  return count > 0 ? static_cast<int64_t>(count) : 0;
}

SmallVector<int64_t> squeezedShape(ArrayRef<int64_t> shape,
                                   ArrayRef<int64_t> axes) {
  SmallVector<int64_t> out;
  for (auto [i, d] : llvm::enumerate(shape))
    if (!llvm::is_contained(axes, static_cast<int64_t>(i)))
      out.push_back(d);
  return out;
}

SmallVector<int64_t> unsqueezedShape(ArrayRef<int64_t> shape,
                                     ArrayRef<int64_t> axes) {
  SmallVector<int64_t> out;
  const int64_t *next = shape.begin();
  for (int64_t d = 0, e = shape.size() + axes.size(); d < e; ++d)
    out.push_back(llvm::is_contained(axes, d) ? 1 : *next++);
  return out;
}
} // namespace bm::import

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {

bool small(ArrayRef<int64_t> shape) {
  std::optional<int64_t> n = checkedNumElements(shape);
  return n && *n <= kMaxFoldElements;
}

/// Same data, new shape (Reshape, Squeeze, Unsqueeze, Identity).
HostTensor reshaped(const HostTensor &in, ArrayRef<int64_t> shape) {
  HostTensor out = in;
  out.shape.assign(shape.begin(), shape.end());
  return out;
}

/// Whether rearranged() needs per-dim index lists: not for a splat, nor for
/// an empty result (whose other dims may be huge: [0, 2^40] is "small").
bool needsIndices(const HostTensor &in, ArrayRef<int64_t> shape) {
  return !in.splat && checkedNumElements(shape).value_or(0) > 0;
}

/// Sets `out` as the node's result if it has no elements. The loops that
/// fill a result may run over every index of the dims before or after a
/// zero one: Concat of [2^31, 38, 0] would loop 8e10 times doing nothing,
/// and those dims' product may not even fit in int64.
bool setIfEmpty(NodeContext &nc, HostTensor &out) {
  if (out.numElements() != 0)
    return false;
  nc.setOutput(0, std::move(out));
  return true;
}

/// `in` rearranged into `shape` (Slice, Transpose): output dim d walks input
/// dim `source[d]` through the indices `taken[d]`. A splat stays a splat
/// (and needs no indices); otherwise the caller checked that `shape` is
/// small.
HostTensor rearranged(const HostTensor &in, ArrayRef<int64_t> shape,
                      ArrayRef<int64_t> source,
                      ArrayRef<std::vector<int64_t>> taken) {
  if (in.splat)
    return reshaped(in, shape);
  HostTensor out = HostTensor::zeros(in.dtype, shape);
  // An empty result reads nothing; its input's strides may overflow
  // ([4, 0, 2^40, 2^40] is empty, 2^40 * 2^40 is not an int64).
  if (out.numElements() == 0)
    return out;
  int64_t rank = in.shape.size();
  SmallVector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * in.shape[d + 1];
  for (int64_t i = 0, n = out.numElements(); i < n; ++i) {
    int64_t rest = i, from = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      from += taken[d][rest % shape[d]] * strides[source[d]];
      rest /= shape[d];
    }
    out.copyElement(i, in, from);
  }
  return out;
}

using IntFn = std::function<std::optional<int64_t>(int64_t, int64_t)>;
using FloatFn = std::function<double(double, double)>;

/// Broadcasting elementwise evaluation of `inputs` into a tensor of
/// `dtype`. Integer inputs use `intFn` (nullopt: not foldable, e.g.
/// division by zero), floating-point inputs `floatFn` on doubles.
FailureOr<bool> foldElementwise(NodeContext &nc, int32_t dtype,
                                const IntFn &intFn, const FloatFn &floatFn) {
  const HostTensor *a = nc.host(0), *b = nc.host(1);
  auto shape = broadcastShapes(a->shape, b->shape);
  if (!shape)
    return nc.error("shapes " + shapeText(a->shape) + " and " +
                    shapeText(b->shape) + " do not broadcast");
  bool splat = a->splat && b->splat;
  if (!splat && !small(*shape))
    return false;
  HostTensor out = HostTensor::zeros(dtype, *shape, splat);
  int64_t n = splat ? 1 : out.numElements();
  bool useFloat = a->isFloat() || b->isFloat();
  for (int64_t i = 0; i < n; ++i) {
    int64_t ia = splat ? 0 : broadcastIndex(i, *shape, a->shape);
    int64_t ib = splat ? 0 : broadcastIndex(i, *shape, b->shape);
    if (useFloat) {
      out.set(i, floatFn(a->getFloat(ia), b->getFloat(ib)));
      continue;
    }
    std::optional<int64_t> v = intFn(a->getInt(ia), b->getInt(ib));
    if (!v)
      return false;
    out.setInt(i, *v);
  }
  nc.setOutput(0, std::move(out));
  return true;
}

FailureOr<bool> foldArithmetic(NodeContext &nc, const IntFn &intFn,
                               const FloatFn &floatFn) {
  if (nc.host(0)->dtype != nc.host(1)->dtype)
    return false; // the bm op reports the mismatch
  return foldElementwise(nc, nc.host(0)->dtype, intFn, floatFn);
}

FailureOr<bool> foldCompare(NodeContext &nc,
                            const std::function<bool(double, double)> &f,
                            const std::function<bool(int64_t, int64_t)> &fi) {
  if (nc.host(0)->dtype != nc.host(1)->dtype)
    return false;
  return foldElementwise(
      nc, onnx::TensorProto::BOOL,
      [&](int64_t x, int64_t y) -> std::optional<int64_t> { return fi(x, y); },
      [&](double x, double y) -> double { return f(x, y); });
}

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

/// Unary ops on a host tensor, keeping splats splat.
FailureOr<bool> foldUnary(NodeContext &nc,
                          const std::function<double(double)> &f,
                          const std::function<int64_t(int64_t)> &fi) {
  const HostTensor *in = nc.host(0);
  if (!in->splat && !small(in->shape))
    return false;
  HostTensor out = *in;
  int64_t n = in->splat ? 1 : in->numElements();
  for (int64_t i = 0; i < n; ++i) {
    if (in->isFloat())
      out.set(i, f(in->getFloat(i)));
    else
      out.setInt(i, fi(in->getInt(i)));
  }
  nc.setOutput(0, std::move(out));
  return true;
}

//===----------------------------------------------------------------------===//
// Folders
//===----------------------------------------------------------------------===//

FailureOr<bool> foldAbs(NodeContext &nc) {
  return foldUnary(
      nc, [](double x) { return std::fabs(x); },
      [](int64_t x) { return x < 0 ? int64_t(0 - u(x)) : x; });
}

FailureOr<bool> foldAdd(NodeContext &nc) {
  return foldArithmetic(
      nc, [](int64_t x, int64_t y) { return int64_t(u(x) + u(y)); },
      [](double x, double y) { return x + y; });
}

FailureOr<bool> foldAnd(NodeContext &nc) {
  return foldCompare(
      nc, [](double x, double y) { return x != 0 && y != 0; },
      [](int64_t x, int64_t y) { return x != 0 && y != 0; });
}

FailureOr<bool> foldCast(NodeContext &nc) {
  int32_t to = nc.getInt("to", 0);
  const HostTensor *in = nc.host(0);
  if (!elementTypeOf(nc.context(), to))
    return false;
  if (!in->splat && !small(in->shape))
    return false;
  nc.setOutput(0, in->cast(to));
  return true;
}

FailureOr<bool> foldCeil(NodeContext &nc) {
  return foldUnary(
      nc, [](double x) { return std::ceil(x); }, [](int64_t x) { return x; });
}

/// `inputs` joined along `axis` as the node's result; false where bm.concat
/// should report a mismatch, or where the result is too large to fold.
FailureOr<bool> concatOnHost(NodeContext &nc,
                             ArrayRef<const HostTensor *> inputs,
                             int64_t axis) {
  const HostTensor *first = inputs.front();
  int64_t rank = first->shape.size();
  SmallVector<int64_t> shape(first->shape.begin(), first->shape.end());
  shape[axis] = 0;
  for (const HostTensor *t : inputs) {
    if (!t || t->dtype != first->dtype || (int64_t)t->shape.size() != rank)
      return false; // the bm op reports the mismatch
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t->shape[d] != first->shape[d])
        return false;
    if (llvm::AddOverflow(shape[axis], t->shape[axis], shape[axis]))
      return false; // bm.concat reports it
  }
  if (!small(shape))
    return false;
  HostTensor out = HostTensor::zeros(first->dtype, shape);
  if (setIfEmpty(nc, out))
    return true;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  int64_t at = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const HostTensor *t : inputs) {
      int64_t inner = 1;
      for (int64_t d = axis; d < rank; ++d)
        inner *= t->shape[d];
      for (int64_t i = 0; i < inner; ++i, ++at)
        out.copyElement(at, *t, o * inner + i);
    }
  nc.setOutput(0, std::move(out));
  return true;
}

FailureOr<bool> foldConcat(NodeContext &nc) {
  // Folders run only when every input is on the host.
  SmallVector<const HostTensor *> inputs;
  for (unsigned i = 0; i < nc.numInputs(); ++i)
    inputs.push_back(nc.host(i));
  FailureOr<int64_t> axis =
      nc.axis(nc.getInt("axis", 0), inputs.front()->shape.size());
  if (failed(axis))
    return failure();
  return concatOnHost(nc, inputs, *axis);
}

/// ConcatFromSequence: Concat of the sequence's tensors, or with new_axis a
/// stack (each gets a dim of size 1 at `axis` first).
FailureOr<bool> foldConcatFromSequence(NodeContext &nc) {
  const std::vector<HostTensor> *sequence = nc.hostSequence(0);
  if (!sequence || sequence->empty())
    return nc.error("concatenates an empty sequence");
  bool stack = nc.getInt("new_axis", 0) != 0;
  int64_t rank = sequence->front().shape.size() + (stack ? 1 : 0);
  FailureOr<int64_t> axis = nc.axis(nc.getInt("axis", 0), rank);
  if (failed(axis))
    return failure();
  std::vector<HostTensor> pieces = *sequence;
  for (HostTensor &piece : pieces)
    if (stack)
      piece.shape.insert(piece.shape.begin() + *axis, 1);
  SmallVector<const HostTensor *> inputs;
  for (const HostTensor &piece : pieces)
    inputs.push_back(&piece);
  FailureOr<bool> folded = concatOnHost(nc, inputs, *axis);
  if (succeeded(folded) && !*folded)
    return nc.error("cannot join the sequence's tensors (their shapes or "
                    "types differ, or the result is too large)");
  return folded;
}

FailureOr<bool> foldDiv(NodeContext &nc) {
  return foldArithmetic(
      nc,
      [](int64_t x, int64_t y) -> std::optional<int64_t> {
        if (y == 0 || (x == INT64_MIN && y == -1))
          return std::nullopt;
        return x / y;
      },
      [](double x, double y) { return x / y; });
}

FailureOr<bool> foldEqual(NodeContext &nc) {
  return foldCompare(
      nc, [](double x, double y) { return x == y; },
      [](int64_t x, int64_t y) { return x == y; });
}

FailureOr<bool> foldExpand(NodeContext &nc) {
  const HostTensor *in = nc.host(0);
  auto target = nc.constInts(1, "shape");
  if (failed(target))
    return failure();
  auto shape = expandTarget(nc, in->shape, *target);
  if (failed(shape))
    return failure();
  if (in->splat || in->numElements() == 1) {
    HostTensor out = HostTensor::zeros(in->dtype, *shape, /*splat=*/true);
    out.copyElement(0, *in, 0);
    nc.setOutput(0, std::move(out));
    return true;
  }
  if (!small(*shape))
    return false;
  HostTensor out = HostTensor::zeros(in->dtype, *shape);
  for (int64_t i = 0, n = out.numElements(); i < n; ++i) {
    int64_t from = broadcastIndex(i, *shape, in->shape);
    out.copyElement(i, *in, from);
  }
  nc.setOutput(0, std::move(out));
  return true;
}

FailureOr<bool> foldFloor(NodeContext &nc) {
  return foldUnary(
      nc, [](double x) { return std::floor(x); }, [](int64_t x) { return x; });
}

FailureOr<bool> foldGather(NodeContext &nc) {
  const HostTensor *data = nc.host(0), *indices = nc.host(1);
  int64_t rank = data->shape.size();
  if (rank == 0)
    return false;
  FailureOr<int64_t> axis = nc.axis(nc.getInt("axis", 0), rank);
  if (failed(axis))
    return failure();
  SmallVector<int64_t> shape(data->shape.begin(), data->shape.begin() + *axis);
  shape.append(indices->shape.begin(), indices->shape.end());
  shape.append(data->shape.begin() + *axis + 1, data->shape.end());
  if (!small(shape))
    return false;
  HostTensor out = HostTensor::zeros(data->dtype, shape);
  if (setIfEmpty(nc, out))
    return true;
  int64_t outer = 1, inner = 1, dim = data->shape[*axis];
  for (int64_t d = 0; d < *axis; ++d)
    outer *= data->shape[d];
  for (int64_t d = *axis + 1; d < rank; ++d)
    inner *= data->shape[d];
  int64_t count = indices->numElements();
  int64_t at = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < count; ++k) {
      int64_t index = indices->getInt(k);
      if (index < 0)
        index += dim;
      if (index < 0 || index >= dim)
        return nc.gatherIndexError(indices->getInt(k), *axis, dim);
      for (int64_t i = 0; i < inner; ++i, ++at) {
        int64_t from = (o * dim + index) * inner + i;
        out.copyElement(at, *data, from);
      }
    }
  nc.setOutput(0, std::move(out));
  return true;
}

FailureOr<bool> foldGreater(NodeContext &nc) {
  return foldCompare(
      nc, [](double x, double y) { return x > y; },
      [](int64_t x, int64_t y) { return x > y; });
}

FailureOr<bool> foldGreaterOrEqual(NodeContext &nc) {
  return foldCompare(
      nc, [](double x, double y) { return x >= y; },
      [](int64_t x, int64_t y) { return x >= y; });
}

FailureOr<bool> foldIdentity(NodeContext &nc) {
  nc.setOutput(0, *nc.host(0));
  return true;
}

FailureOr<bool> foldLess(NodeContext &nc) {
  return foldCompare(
      nc, [](double x, double y) { return x < y; },
      [](int64_t x, int64_t y) { return x < y; });
}

FailureOr<bool> foldLessOrEqual(NodeContext &nc) {
  return foldCompare(
      nc, [](double x, double y) { return x <= y; },
      [](int64_t x, int64_t y) { return x <= y; });
}

/// Variadic Max / Min of two inputs (longer chains are emitted).
FailureOr<bool> foldMax(NodeContext &nc) {
  if (nc.numInputs() != 2 || !nc.host(1))
    return false;
  return foldArithmetic(
      nc, [](int64_t x, int64_t y) { return std::max(x, y); },
      [](double x, double y) { return std::max(x, y); });
}

FailureOr<bool> foldMin(NodeContext &nc) {
  if (nc.numInputs() != 2 || !nc.host(1))
    return false;
  return foldArithmetic(
      nc, [](int64_t x, int64_t y) { return std::min(x, y); },
      [](double x, double y) { return std::min(x, y); });
}

/// Mod: with fmod = 0 (integers only) the result takes the divisor's sign,
/// as Python's %; with fmod = 1 the dividend's, as C's fmod. Swin's
/// shifted-window index arithmetic is the exporter pattern.
FailureOr<bool> foldMod(NodeContext &nc) {
  bool cStyle = nc.getInt("fmod", 0) != 0;
  if (!cStyle && (nc.host(0)->isFloat() || nc.host(1)->isFloat()))
    return nc.error("mod of floating-point values needs fmod = 1");
  return foldArithmetic(
      nc,
      [cStyle](int64_t x, int64_t y) -> std::optional<int64_t> {
        if (y == 0)
          return std::nullopt;
        if (y == -1)
          return 0; // also for INT64_MIN, whose quotient overflows
        int64_t r = x % y;
        if (!cStyle && r != 0 && ((r < 0) != (y < 0)))
          r += y;
        return r;
      },
      [](double x, double y) { return std::fmod(x, y); });
}

FailureOr<bool> foldMul(NodeContext &nc) {
  return foldArithmetic(
      nc, [](int64_t x, int64_t y) { return int64_t(u(x) * u(y)); },
      [](double x, double y) { return x * y; });
}

FailureOr<bool> foldNeg(NodeContext &nc) {
  return foldUnary(
      nc, [](double x) { return -x; },
      [](int64_t x) { return int64_t(0 - u(x)); });
}

/// NonZero of a constant: the [rank, count] indices of its nonzero
/// elements in row-major order.
FailureOr<bool> foldNonZero(NodeContext &nc) {
  const HostTensor *in = nc.host(0);
  if (!small(in->shape))
    return false;
  SmallVector<int64_t> hits;
  for (int64_t i = 0, n = in->numElements(); i < n; ++i)
    if (in->isFloat() ? in->getFloat(i) != 0 : in->getInt(i) != 0)
      hits.push_back(i);
  int64_t rank = in->shape.size(), count = hits.size();
  HostTensor out = HostTensor::zeros(onnx::TensorProto::INT64, {rank, count});
  for (int64_t j = 0; j < count; ++j) {
    int64_t rest = hits[j];
    for (int64_t d = rank - 1; d >= 0; --d) {
      out.setInt(d * count + j, rest % in->shape[d]);
      rest /= in->shape[d];
    }
  }
  nc.setOutput(0, std::move(out));
  return true;
}

FailureOr<bool> foldNot(NodeContext &nc) {
  return foldUnary(
      nc, [](double x) { return x == 0 ? 1.0 : 0.0; },
      [](int64_t x) { return int64_t(x == 0); });
}

FailureOr<bool> foldOr(NodeContext &nc) {
  return foldCompare(
      nc, [](double x, double y) { return x != 0 || y != 0; },
      [](int64_t x, int64_t y) { return x != 0 || y != 0; });
}

FailureOr<bool> foldRange(NodeContext &nc) {
  const HostTensor *start = nc.host(0), *limit = nc.host(1),
                   *delta = nc.host(2);
  FailureOr<int64_t> n = rangeLength(nc, *start, *limit, *delta);
  if (failed(n))
    return failure();
  if (*n > kMaxFoldElements)
    return false; // bm.iota
  double d = delta->getFloat(0);
  HostTensor out = HostTensor::zeros(start->dtype, {*n});
  for (int64_t i = 0; i < *n; ++i) {
    if (out.isFloat())
      out.set(i, start->getFloat(0) + i * d);
    else
      out.setInt(i, start->getInt(0) + i * delta->getInt(0));
  }
  nc.setOutput(0, std::move(out));
  return true;
}

/// Round half to even, as ONNX specifies (the default rounding mode).
FailureOr<bool> foldRound(NodeContext &nc) {
  return foldUnary(
      nc, [](double x) { return std::nearbyint(x); },
      [](int64_t x) { return x; });
}

FailureOr<bool> foldReshape(NodeContext &nc) {
  const HostTensor *in = nc.host(0);
  auto target = reshapeTargetOf(nc);
  if (failed(target))
    return failure();
  auto shape = reshapeTarget(nc, in->shape, *target, nc.getInt("allowzero", 0));
  if (failed(shape))
    return failure();
  nc.setOutput(0, reshaped(*in, *shape));
  return true;
}

/// ScatterND of constants (every reduction): Swin builds its shifted-window
/// attention mask by assigning region ids into a zero tensor
/// (`mask[h, w] = id`), which the exporter writes as ScatterND on constants.
FailureOr<bool> foldScatterND(NodeContext &nc) {
  const HostTensor *data = nc.host(0), *indices = nc.host(1),
                   *updates = nc.host(2);
  std::string reduction = nc.getString("reduction", "none");
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, reduction))
    return nc.error("scatter reduction '" + reduction + "' is unknown");
  int64_t rank = data->shape.size();
  int64_t k = indices->shape.empty() ? 0 : indices->shape.back();
  if (indices->shape.empty() || k < 1 || k > rank)
    return nc.error("scatter indices of shape " + shapeText(indices->shape) +
                    " do not index data of rank " + Twine(rank));
  // One update slice per index tuple: updates = indices[:-1] + data[k:].
  SmallVector<int64_t> expected(indices->shape.begin(),
                                indices->shape.end() - 1);
  expected.append(data->shape.begin() + k, data->shape.end());
  if (ArrayRef<int64_t>(updates->shape) != ArrayRef<int64_t>(expected))
    return nc.error("scatter updates have shape " + shapeText(updates->shape) +
                    ", not " + shapeText(expected));
  if (!small(data->shape) || !small(indices->shape) ||
      data->dtype != updates->dtype)
    return false;
  HostTensor out = HostTensor::zeros(data->dtype, data->shape);
  int64_t n = out.numElements();
  for (int64_t i = 0; i < n; ++i)
    out.copyElement(i, *data, data->splat ? 0 : i);
  int64_t slice = 1;
  for (int64_t d = k; d < rank; ++d)
    slice *= data->shape[d];
  int64_t tuples = indices->numElements() / k;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t dim = data->shape[j], index = indices->getInt(t * k + j);
      if (index < -dim || index >= dim)
        return nc.gatherIndexError(index, j, dim);
      offset = offset * dim + (index < 0 ? index + dim : index);
    }
    for (int64_t e = 0; e < slice; ++e) {
      int64_t to = offset * slice + e, from = updates->splat ? 0 : t * slice + e;
      if (reduction == "none") {
        out.copyElement(to, *updates, from);
        continue;
      }
      if (out.isFloat()) {
        double a = out.getFloat(to), b = updates->getFloat(from);
        out.set(to, reduction == "add"   ? a + b
                    : reduction == "mul" ? a * b
                    : reduction == "max" ? std::max(a, b)
                                         : std::min(a, b));
        continue;
      }
      int64_t a = out.getInt(to), b = updates->getInt(from);
      out.setInt(to, reduction == "add"   ? int64_t(u(a) + u(b))
                     : reduction == "mul" ? int64_t(u(a) * u(b))
                     : reduction == "max" ? std::max(a, b)
                                          : std::min(a, b));
    }
  }
  nc.setOutput(0, std::move(out));
  return true;
}

FailureOr<bool> foldSign(NodeContext &nc) {
  return foldUnary(
      nc, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; },
      [](int64_t x) { return int64_t(x > 0) - int64_t(x < 0); });
}

FailureOr<bool> foldSlice(NodeContext &nc) {
  const HostTensor *in = nc.host(0);
  FailureOr<SliceBounds> b = sliceBounds(nc, in->shape);
  if (failed(b))
    return failure();
  int64_t rank = in->shape.size();
  SmallVector<int64_t> shape, identity;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t span = std::max<int64_t>(0, b->limits[d] - b->starts[d]);
    // Not (span + stride - 1) / stride: a span may be INT64_MAX (an empty
    // constant's other dims).
    shape.push_back(llvm::divideCeil(uint64_t(span), uint64_t(b->strides[d])));
    identity.push_back(d);
  }
  for (auto &[axis, indices] : b->reversed)
    shape[axis] = indices.size();
  if (!in->splat && !small(shape))
    return false;
  // The input index each output coordinate takes, per dim.
  SmallVector<std::vector<int64_t>> taken(rank);
  if (needsIndices(*in, shape)) {
    for (int64_t d = 0; d < rank; ++d)
      for (int64_t j = b->starts[d]; j < b->limits[d]; j += b->strides[d])
        taken[d].push_back(j);
    for (auto &[axis, indices] : b->reversed)
      taken[axis] = indices;
  }
  nc.setOutput(0, rearranged(*in, shape, identity, taken));
  return true;
}

FailureOr<bool> foldSqueeze(NodeContext &nc) {
  const HostTensor *in = nc.host(0);
  auto axes = squeezeAxes(nc, in->shape);
  if (failed(axes))
    return failure();
  nc.setOutput(0, reshaped(*in, squeezedShape(in->shape, *axes)));
  return true;
}

FailureOr<bool> foldSub(NodeContext &nc) {
  return foldArithmetic(
      nc, [](int64_t x, int64_t y) { return int64_t(u(x) - u(y)); },
      [](double x, double y) { return x - y; });
}

/// Transpose of a constant: torch's legacy exporter reverses F.pad's pad
/// list with Reshape -> Slice(step -1) -> Transpose -> Reshape.
FailureOr<bool> foldTranspose(NodeContext &nc) {
  const HostTensor *in = nc.host(0);
  int64_t rank = in->shape.size();
  SmallVector<int64_t> perm;
  if (std::optional<std::vector<int64_t>> given = nc.getInts("perm"))
    perm.assign(given->begin(), given->end());
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  SmallVector<int64_t> sorted(perm);
  llvm::sort(sorted);
  if (sorted != llvm::to_vector(llvm::seq<int64_t>(0, rank)))
    return false; // bm.transpose reports it
  SmallVector<int64_t> shape;
  for (int64_t d : perm)
    shape.push_back(in->shape[d]);
  if (!in->splat && !small(shape))
    return false;
  SmallVector<std::vector<int64_t>> taken(rank);
  if (needsIndices(*in, shape))
    for (int64_t d = 0; d < rank; ++d)
      for (int64_t j = 0; j < shape[d]; ++j)
        taken[d].push_back(j);
  nc.setOutput(0, rearranged(*in, shape, perm, taken));
  return true;
}

FailureOr<bool> foldUnsqueeze(NodeContext &nc) {
  const HostTensor *in = nc.host(0);
  auto axes = unsqueezeAxes(nc, in->shape.size());
  if (failed(axes))
    return failure();
  nc.setOutput(0, reshaped(*in, unsqueezedShape(in->shape, *axes)));
  return true;
}

FailureOr<bool> foldWhere(NodeContext &nc) {
  const HostTensor *c = nc.host(0), *x = nc.host(1), *y = nc.host(2);
  if (x->dtype != y->dtype || c->dtype != onnx::TensorProto::BOOL)
    return false;
  auto xy = broadcastShapes(x->shape, y->shape);
  auto shape = xy ? broadcastShapes(c->shape, *xy) : std::nullopt;
  if (!shape)
    return nc.error("where operands " + shapeText(c->shape) + ", " +
                    shapeText(x->shape) + " and " + shapeText(y->shape) +
                    " do not broadcast");
  bool splat = c->splat && x->splat && y->splat;
  if (!splat && !small(*shape))
    return false;
  HostTensor out = HostTensor::zeros(x->dtype, *shape, splat);
  for (int64_t i = 0, n = splat ? 1 : out.numElements(); i < n; ++i) {
    bool pick = c->getInt(splat ? 0 : broadcastIndex(i, *shape, c->shape));
    const HostTensor *from = pick ? x : y;
    int64_t at = splat ? 0 : broadcastIndex(i, *shape, from->shape);
    out.copyElement(i, *from, at);
  }
  nc.setOutput(0, std::move(out));
  return true;
}

struct FolderEntry {
  llvm::StringLiteral opType;
  HostFolderFn fn;
};

// Alphabetical by ONNX op type.
const FolderEntry kFolders[] = {
    {"Abs", foldAbs},
    {"Add", foldAdd},
    {"And", foldAnd},
    {"Cast", foldCast},
    {"CastLike", foldCastLike},
    {"Ceil", foldCeil},
    {"Concat", foldConcat},
    {"ConcatFromSequence", foldConcatFromSequence},
    {"Div", foldDiv},
    {"Equal", foldEqual},
    {"Expand", foldExpand},
    {"Floor", foldFloor},
    {"Gather", foldGather},
    {"Greater", foldGreater},
    {"GreaterOrEqual", foldGreaterOrEqual},
    {"Identity", foldIdentity},
    {"If", foldIf},
    {"Less", foldLess},
    {"LessOrEqual", foldLessOrEqual},
    {"Loop", foldLoop},
    {"Max", foldMax},
    {"Min", foldMin},
    {"Mod", foldMod},
    {"Mul", foldMul},
    {"Neg", foldNeg},
    {"NonZero", foldNonZero},
    {"Not", foldNot},
    {"Or", foldOr},
    {"Range", foldRange},
    {"Reshape", foldReshape},
    {"Round", foldRound},
    {"ScatterND", foldScatterND},
    {"SequenceConstruct", foldSequenceConstruct},
    {"SequenceEmpty", foldSequenceEmpty},
    {"SequenceInsert", foldSequenceInsert},
    {"Sign", foldSign},
    {"Slice", foldSlice},
    {"Squeeze", foldSqueeze},
    {"Sub", foldSub},
    {"Transpose", foldTranspose},
    {"Unsqueeze", foldUnsqueeze},
    {"Where", foldWhere},
};

} // namespace

namespace bm::import {
HostFolderFn lookupHostFolder(StringRef opType) {
  auto it = llvm::lower_bound(
      kFolders, opType,
      [](const FolderEntry &e, StringRef name) { return e.opType < name; });
  if (it == std::end(kFolders) || it->opType != opType)
    return nullptr;
  return it->fn;
}
} // namespace bm::import

namespace bm {
std::vector<std::string> hostFoldedOnnxOps() {
  std::vector<std::string> ops;
  for (const FolderEntry &e : kFolders)
    ops.push_back(e.opType.str());
  return ops;
}
} // namespace bm
