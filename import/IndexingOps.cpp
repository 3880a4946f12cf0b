//===- IndexingOps.cpp - gathers and scatters by index tensors ------------===//
//
// GatherElements and ScatterElements map to bm ops of their own. GatherND
// and ScatterND address whole slices by tuples of k indices, which is a
// Gather or a ScatterElements on the data viewed with those k dims flattened
// into one: the tuples become flat offsets (on the host when the indices
// are constants, else with a few bm ops), so no bm op of their own is
// needed and their gradients, sharding rules and kernels are those of
// gather and scatter_elements.
//
//===----------------------------------------------------------------------===//

#include "import/OpImporters.h"

#include "bm/BmOps.h"

using namespace mlir;
using namespace mlir::bm;
using llvm::SmallVector;
using llvm::Twine;

namespace bm::import {
namespace {

FailureOr<Value> reshapeTo(NodeContext &nc, FailureOr<Value> x,
                           ArrayRef<int64_t> shape) {
  if (failed(x))
    return failure();
  auto type = RankedTensorType::get(shape, typeOf(*x).getElementType());
  if (typeOf(*x) == type)
    return *x;
  return nc.build<ReshapeOp>({*x}, {}, type);
}

/// Each offset of `offsets` (shape `lead`) repeated over a row of
/// `rowSize`: the indices of a gather_elements or scatter_elements that
/// takes or writes whole rows.
FailureOr<Value> repeatedOverRows(NodeContext &nc, FailureOr<Value> offsets,
                                  ArrayRef<int64_t> lead, int64_t rowSize) {
  SmallVector<int64_t> shape(lead);
  shape.push_back(1);
  offsets = reshapeTo(nc, offsets, shape);
  if (failed(offsets))
    return failure();
  shape.back() = rowSize;
  return nc.build<ExpandOp>(
      {*offsets}, {},
      RankedTensorType::get(shape, typeOf(*offsets).getElementType()));
}

/// ScatterElements' and ScatterND's `reduction` (opset 16 added it, 18 max
/// and min).
FailureOr<StringAttr> scatterReduction(NodeContext &nc) {
  std::string reduction = nc.getString("reduction", "none");
  if (!llvm::is_contained({"none", "add", "mul", "max", "min"}, reduction)) {
    (void)nc.error("scatter reduction '" + reduction + "' is unknown");
    return failure();
  }
  return nc.builder().getStringAttr(reduction);
}

/// Flat offsets of constant index tuples: the last dim of `indices` holds k
/// indices into `dims`, each checked and made non-negative.
FailureOr<Value> hostTupleOffsets(NodeContext &nc, const HostTensor &indices,
                                  ArrayRef<int64_t> dims, int64_t firstDim) {
  int64_t k = dims.size(), tuples = indices.numElements() / k;
  std::vector<int64_t> offsets(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t index = indices.getInt(indices.splat ? 0 : t * k + j);
      if (index < -dims[j] || index >= dims[j])
        return nc.gatherIndexError(index, firstDim + j, dims[j]);
      offset = offset * dims[j] + (index < 0 ? index + dims[j] : index);
    }
    offsets[t] = offset;
  }
  ArrayRef<int64_t> shape(indices.shape);
  return nc.constant(HostTensor::fromInts(offsets, shape.drop_back()));
}

/// Flat offsets of run-time index tuples, as bm ops: each index is wrapped
/// when negative and the offsets accumulate in row-major order. With one
/// index per tuple the kernel checks its range; with several, an index out
/// of its own dim's range can land inside another row (ONNX calls it an
/// error and does not define the result), which only the importer's
/// constant path catches.
FailureOr<Value> runTimeTupleOffsets(NodeContext &nc, Value indices,
                                     ArrayRef<int64_t> dims) {
  ArrayRef<int64_t> shape = typeOf(indices).getShape();
  int64_t rank = shape.size(), k = dims.size();
  SmallVector<int64_t> starts(rank, 0), limits(shape), strides(rank, 1);
  FailureOr<Value> offsets = failure();
  for (int64_t j = 0; j < k; ++j) {
    starts.back() = j;
    limits.back() = j + 1;
    FailureOr<Value> index =
        nc.build<SliceOp>({indices}, {nc.named("starts", array(nc, starts)),
                                      nc.named("limits", array(nc, limits)),
                                      nc.named("strides", array(nc, strides))});
    index = reshapeTo(nc, index, shape.drop_back());
    if (failed(index))
      return failure();
    FailureOr<Value> zero = scalarLike(nc, *index, 0);
    FailureOr<Value> dim = scalarLike(nc, *index, dims[j]);
    if (failed(zero) || failed(dim))
      return failure();
    FailureOr<Value> negative = binaryOf<LessOp>(nc, *index, *zero);
    FailureOr<Value> wrapped = binaryOf<AddOp>(nc, *index, *dim);
    if (failed(negative) || failed(wrapped))
      return failure();
    index = nc.build<WhereOp>({*negative, *wrapped, *index});
    if (failed(index))
      return failure();
    if (j == 0) {
      offsets = index;
      continue;
    }
    FailureOr<Value> scaled = binaryOf<MulOp>(nc, *offsets, *dim);
    if (failed(scaled))
      return failure();
    offsets = binaryOf<AddOp>(nc, *scaled, *index);
    if (failed(offsets))
      return failure();
  }
  return offsets;
}

/// Input `input` holds tuples (its last dim) of indices into `dims` of the
/// data, the first of them data dim `firstDim`: their flat offsets.
FailureOr<Value> tupleOffsets(NodeContext &nc, unsigned input,
                              ArrayRef<int64_t> dims, int64_t firstDim) {
  if (const HostTensor *host = nc.host(input))
    return hostTupleOffsets(nc, *host, dims, firstDim);
  FailureOr<Value> indices = nc.value(input);
  if (failed(indices))
    return failure();
  return runTimeTupleOffsets(nc, *indices, dims);
}

/// The index tuples of GatherND / ScatterND input 1: rank at least 1, with
/// k (its last dim) between 1 and `maxK`.
FailureOr<int64_t> tupleLength(NodeContext &nc, int64_t maxK) {
  ArrayRef<int64_t> shape = nc.type(1).getShape();
  int64_t k = shape.empty() ? 0 : shape.back();
  if (k < 1 || k > maxK) {
    (void)nc.error("indices of shape " + shapeText(shape) +
                   " need a last dim from 1 to " + Twine(maxK));
    return failure();
  }
  return k;
}

} // namespace

FailureOr<Value> axisIndices(NodeContext &nc, unsigned input, int64_t axis,
                             int64_t dim) {
  const HostTensor *host = nc.host(input);
  if (!host)
    return nc.value(input);
  HostTensor normalised = host->cast(onnx::TensorProto::INT64);
  for (int64_t i = 0, n = normalised.splat ? 1 : normalised.numElements();
       i < n; ++i) {
    int64_t index = normalised.ints[i];
    if (index < -dim || index >= dim)
      return nc.gatherIndexError(index, axis, dim);
    if (index < 0)
      normalised.ints[i] = index + dim;
  }
  return nc.constant(normalised);
}

/// The data (input 0), the normalised `axis` attribute and the indices
/// along it (input 1) of Gather, GatherElements and ScatterElements.
struct AlongAxis {
  Value data, indices;
  int64_t axis;
};

FailureOr<AlongAxis> alongAxis(NodeContext &nc) {
  FailureOr<Value> data = nc.value(0);
  if (failed(data))
    return failure();
  RankedTensorType type = typeOf(*data);
  FailureOr<int64_t> axis = nc.axis(nc.getInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  FailureOr<Value> indices = axisIndices(nc, 1, *axis, type.getDimSize(*axis));
  if (failed(indices))
    return failure();
  return AlongAxis{*data, *indices, *axis};
}

template <typename OpTy> LogicalResult importAlongAxis(NodeContext &nc) {
  FailureOr<AlongAxis> in = alongAxis(nc);
  if (failed(in))
    return failure();
  return setResult(nc, nc.build<OpTy>({in->data, in->indices},
                                      {nc.named("axis", i64(nc, in->axis))}));
}

LogicalResult importGather(NodeContext &nc) {
  return importAlongAxis<GatherOp>(nc);
}

LogicalResult importGatherElements(NodeContext &nc) {
  return importAlongAxis<GatherElementsOp>(nc);
}

/// GatherND: data [B.., M.., R..] (b batch dims, k indexed dims) and
/// indices [B.., N.., k] give [B.., N.., R..]. Without batch dims it is a
/// gather of rows of data viewed as [M, R]; with them, the rows differ per
/// batch: a gather_elements of data viewed as [B, M, R].
LogicalResult importGatherND(NodeContext &nc) {
  FailureOr<Value> data = nc.value(0);
  if (failed(data))
    return failure();
  ArrayRef<int64_t> shape = typeOf(*data).getShape();
  ArrayRef<int64_t> indexShape = nc.type(1).getShape();
  int64_t b = nc.getInt("batch_dims", 0), rank = shape.size();
  if (b < 0 || b >= rank || b >= static_cast<int64_t>(indexShape.size()) ||
      shape.take_front(b) != indexShape.take_front(b))
    return nc.error("batch_dims " + Twine(b) + " does not fit data " +
                    shapeText(shape) + " and indices " + shapeText(indexShape));
  FailureOr<int64_t> k = tupleLength(nc, rank - b);
  if (failed(k))
    return failure();
  ArrayRef<int64_t> indexed = shape.slice(b, *k);
  int64_t batch = ShapedType::getNumElements(shape.take_front(b)),
          rows = ShapedType::getNumElements(indexed);
  int64_t rowSize = ShapedType::getNumElements(shape.drop_front(b + *k));
  int64_t tuples =
      ShapedType::getNumElements(indexShape.drop_front(b).drop_back());
  SmallVector<int64_t> resultShape(indexShape.drop_back());
  resultShape.append(shape.begin() + b + *k, shape.end());
  FailureOr<Value> offsets = tupleOffsets(nc, 1, indexed, b);
  FailureOr<Value> result = failure();
  if (b == 0) {
    offsets = reshapeTo(nc, offsets, {tuples});
    FailureOr<Value> rowsOf = reshapeTo(nc, data, {rows, rowSize});
    if (succeeded(offsets) && succeeded(rowsOf))
      result = nc.build<GatherOp>({*rowsOf, *offsets},
                                  {nc.named("axis", i64(nc, 0))});
  } else {
    offsets = repeatedOverRows(nc, offsets, {batch, tuples}, rowSize);
    FailureOr<Value> rowsOf = reshapeTo(nc, data, {batch, rows, rowSize});
    if (succeeded(offsets) && succeeded(rowsOf))
      result = nc.build<GatherElementsOp>({*rowsOf, *offsets},
                                          {nc.named("axis", i64(nc, 1))});
  }
  return setResult(nc, reshapeTo(nc, result, resultShape));
}

LogicalResult importScatterElements(NodeContext &nc) {
  FailureOr<AlongAxis> in = alongAxis(nc);
  FailureOr<Value> updates = nc.value(2);
  FailureOr<StringAttr> reduction = scatterReduction(nc);
  if (failed(in) || failed(updates) || failed(reduction))
    return failure();
  return setResult(
      nc, nc.build<ScatterElementsOp>({in->data, in->indices, *updates},
                                      {nc.named("axis", i64(nc, in->axis)),
                                       nc.named("reduction", *reduction)}));
}

/// ScatterND of run-time values (constants fold on the host): data
/// [M.., R..] viewed as [M, R], each tuple's slice of updates one row,
/// written by a scatter_elements along the rows with each tuple's offset
/// repeated over the row.
LogicalResult importScatterND(NodeContext &nc) {
  FailureOr<Value> data = nc.value(0);
  FailureOr<Value> updates = nc.value(2);
  FailureOr<StringAttr> reduction = scatterReduction(nc);
  if (failed(data) || failed(updates) || failed(reduction))
    return failure();
  ArrayRef<int64_t> shape = typeOf(*data).getShape();
  FailureOr<int64_t> k = tupleLength(nc, shape.size());
  if (failed(k))
    return failure();
  ArrayRef<int64_t> indexShape = nc.type(1).getShape();
  SmallVector<int64_t> expected(indexShape.drop_back());
  expected.append(shape.begin() + *k, shape.end());
  if (typeOf(*updates).getShape() != ArrayRef<int64_t>(expected))
    return nc.error("scatter updates have shape " +
                    shapeText(typeOf(*updates).getShape()) + ", not " +
                    shapeText(expected));
  int64_t rows = ShapedType::getNumElements(shape.take_front(*k));
  int64_t rowSize = ShapedType::getNumElements(shape.drop_front(*k));
  int64_t tuples = ShapedType::getNumElements(indexShape.drop_back());
  FailureOr<Value> offsets = repeatedOverRows(
      nc, tupleOffsets(nc, 1, shape.take_front(*k), 0), {tuples}, rowSize);
  FailureOr<Value> rowsOf = reshapeTo(nc, data, {rows, rowSize});
  FailureOr<Value> updateRows = reshapeTo(nc, updates, {tuples, rowSize});
  if (failed(offsets) || failed(rowsOf) || failed(updateRows))
    return failure();
  FailureOr<Value> result = nc.build<ScatterElementsOp>(
      {*rowsOf, *offsets, *updateRows},
      {nc.named("axis", i64(nc, 0)), nc.named("reduction", *reduction)});
  return setResult(nc, reshapeTo(nc, result, shape));
}

} // namespace bm::import
